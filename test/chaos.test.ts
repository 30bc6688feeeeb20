/**
 * The short chaos variant (the full one: `npm run chaos`): real processes, every fault once, and
 * the invariants of architecture.md checked from the histories.
 */
import assert from 'node:assert/strict';
import { ALL_FAULTS, printReport, runChaos } from '../chaos/run';

describe('chaos (short variant)', () => {
  it('every fault once while tasks flow: nothing lost, no overlap, no superseded or forged report accepted, no REST 5xx', async function () {
    this.timeout(600_000);
    const lines: string[] = [];
    const report = await runChaos({
      tasks: 16,
      hosts: 3,
      devicesPerHost: 2,
      faults: ALL_FAULTS,
      rounds: 1,
      seed: 42,
      leaseMs: 2_000,
      settleTimeoutMs: 240_000,
      fuzzRequests: 150,
      log: (l) => lines.push(l),
    });
    printReport(report, (l) => lines.push(l));
    const summary = lines.join('\n');
    assert.equal(report.faultsInjected.length, ALL_FAULTS.length, summary);
    assert.ok(report.admitted >= 16, summary); // plus a target task the forged-report fault may start
    assert.equal(report.lost, 0, summary);
    assert.equal(report.done + report.failed + report.cancelled, report.admitted, summary);
    assert.equal(report.forgedReportsSent, 3, summary);
    assert.ok(report.reservations >= 16, summary);
    assert.equal(report.impersonationsSent, 1, summary);
    assert.ok(report.restRequests >= 140, summary);
    assert.equal(report.rest5xx, 0, summary);
    assert.equal(report.restInvalidStateChanges, 0, summary);
    assert.deepEqual(report.violations, [], summary);
  });
});
