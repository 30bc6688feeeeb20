/** The host agent's log levels and repeat limiting (no server): what a failed snapshot means, and how often it is said. */
import assert from 'node:assert/strict';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure, WorkflowNotFoundError } from '@temporalio/common';
import { ProblemLog, snapshotProblem, type HostLogLevel } from '../../host-worker/logging';

/** A validator's refusal as the client sees it. */
const refused = (message: string) =>
  new WorkflowUpdateFailedError('Workflow Update failed', ApplicationFailure.create({ message }));

describe('host agent logging', () => {
  describe('snapshotProblem', () => {
    it('a host that is not enrolled, or was removed (no running host workflow), is an error saying what to do', () => {
      for (const err of [
        new WorkflowNotFoundError('sql: no rows in result set', 'host/lab-2', undefined),
        new WorkflowNotFoundError('workflow execution already completed', 'host/lab-2', undefined),
        refused('host lab-2 is not enrolled: no public key to verify its snapshot'),
      ]) {
        const p = snapshotProblem(err, 'lab-2', 'fleet-prod');
        assert.equal(p.level, 'error', err.message);
        assert.equal(p.key, 'not-enrolled');
        assert.equal(
          p.message,
          'host lab-2 is not enrolled in namespace fleet-prod (no running workflow host/lab-2): ' +
            'enrol it with `npx fleet hosts add lab-2` / `npm run hosts:add -- lab-2`, or check TEMPORAL_NAMESPACE',
        );
        assert.ok(String(p.fields?.error).includes(err.message));
      }
      const removed = snapshotProblem(
        refused('host lab-2 was removed by an operator; enrol it again to bring it back'),
        'lab-2',
        'default',
      );
      assert.equal(removed.level, 'error');
      assert.match(removed.message, /host lab-2 was removed from the fleet by an operator .*npx fleet hosts add lab-2/);
    });

    it('a snapshot that does not verify (keys rotated) is a warning to restart with the new credential; anything else a warning', () => {
      const rotated = snapshotProblem(
        refused(
          "snapshot signature does not verify with host lab-2's enrolled key (keys rotated? restart this host with its new credential file)",
        ),
        'lab-2',
        'default',
      );
      assert.equal(rotated.level, 'warn');
      assert.match(rotated.message, /keys rotated\? restart this host with its new credential file/);
      const down = snapshotProblem(new Error('14 UNAVAILABLE: connection refused'), 'lab-2', 'default');
      assert.deepEqual([down.level, down.message], ['warn', 'snapshot failed; will retry']);
      assert.match(String(down.fields?.error), /UNAVAILABLE/);
    });
  });

  describe('ProblemLog', () => {
    const setup = () => {
      let now = 1_000_000;
      const lines: { message: string; fields: Record<string, unknown>; level?: HostLogLevel }[] = [];
      const problems = new ProblemLog(
        (message, fields, level) => lines.push({ message, fields, level }),
        'snapshots',
        'snapshots are accepted again',
        60_000,
        () => now,
      );
      return { problems, lines, advance: (ms: number) => (now += ms) };
    };
    const notEnrolled = { key: 'not-enrolled', level: 'error' as const, message: 'not enrolled' };

    it('says a persisting problem at once, then at most once a minute (counting the held-back ones), and once when it clears', () => {
      const { problems, lines, advance } = setup();
      problems.ok();
      assert.equal(lines.length, 0, 'nothing to clear');
      for (let i = 0; i < 12; i++) {
        problems.failed(notEnrolled);
        advance(10_000); // every 10 s, as the snapshot loop retries
      }
      // At 0 s and 60 s (after 5 held back), 120 s is not reached yet.
      assert.deepEqual(
        lines.map((l) => [l.message, l.level, l.fields.repeatedSinceLastLog]),
        [
          ['not enrolled', 'error', undefined],
          ['not enrolled', 'error', 5],
        ],
      );
      assert.equal(problems.failing, true);
      problems.ok();
      problems.ok();
      assert.equal(lines.length, 3);
      assert.equal(lines[2].message, 'snapshots are accepted again');
      assert.equal(lines[2].level, 'warn');
      assert.equal(lines[2].fields.failures, 12);
      assert.equal(lines[2].fields.failingForMs, 120_000);
      assert.equal(problems.failing, false);
      // After it cleared, the same problem is said again at once.
      problems.failed(notEnrolled);
      assert.equal(lines.length, 4);
    });

    it('says another problem at once, and holds back each one on its own', () => {
      const { problems, lines, advance } = setup();
      const rotated = { key: 'signature', level: 'warn' as const, message: 'keys rotated?' };
      problems.failed(notEnrolled);
      advance(1_000);
      problems.failed(rotated);
      advance(1_000);
      problems.failed(notEnrolled);
      problems.failed(rotated);
      assert.deepEqual(
        lines.map((l) => [l.message, l.level]),
        [
          ['not enrolled', 'error'],
          ['keys rotated?', 'warn'],
        ],
      );
    });
  });
});
