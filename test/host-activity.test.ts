/** Unit tests of the host's activity with MockActivityEnvironment (Temporal mocked: pure host logic). */
import assert from 'node:assert/strict';
import type { Client } from '@temporalio/client';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createHostActivities, type HostActivityDeps } from '../host-worker/activities';
import { createSimRunners, simDevices } from '../host-worker/sim';
import { ErrorType } from '../workflows/errors';
import type { AttemptReport, HostAssignment, RunOutcome } from '../workflows/types';

function fakeClient(reports: AttemptReport[]): Client {
  const handle = { executeUpdate: async (_u: unknown, o: { args: [AttemptReport] }) => void reports.push(o.args[0]) };
  return { workflow: { getHandle: () => handle } } as unknown as Client;
}

function deps(over: Partial<HostActivityDeps> = {}, reports: AttemptReport[] = []): HostActivityDeps {
  const busy = new Set<string>();
  const devices = new Map(
    simDevices([{ deviceId: 'd1' }, { deviceId: 'sick', health: 'unhealthy' }]).map((d) => [d.deviceId, d]),
  );
  return {
    hostId: 'h1',
    client: fakeClient(reports),
    runners: createSimRunners({ defaultDurationMs: 20 }),
    devices: () => devices,
    progressIntervalMs: 10,
    claimDevice: (id) => (busy.has(id) ? false : (busy.add(id), true)),
    releaseDevice: (id) => void busy.delete(id),
    ...over,
  };
}

const assignment = (over: Partial<HostAssignment> = {}): HostAssignment => ({
  taskId: 't1',
  attempt: 1,
  leaseId: 'lease-1',
  hostId: 'h1',
  deviceId: 'd1',
  work: { kind: 'goal', goal: 'go' },
  leaseTimeoutMs: 3_000,
  ...over,
});

const failureType = (type: string) => (err: unknown) => err instanceof ApplicationFailure && err.type === type;

describe('host activity (unit)', () => {
  const env = () => new MockActivityEnvironment({ workflowExecution: { workflowId: 'task/t1', runId: 'r' } });

  it('runs a goal, reports claimed, started and progress in order, and returns done', async () => {
    const reports: AttemptReport[] = [];
    const { runAssignment } = createHostActivities(deps({}, reports));
    const out = (await env().run(runAssignment, assignment())) as RunOutcome;
    assert.equal(out.status, 'done');
    assert.deepEqual(
      reports.slice(0, 2).map((r) => r.kind),
      ['claimed', 'started'],
    );
    const seqs = reports.filter((r) => r.kind === 'progress').map((r) => r.seq!);
    assert.ok(seqs.length > 0 && seqs.every((s, i) => i === 0 || s > seqs[i - 1]));
    assert.ok(reports.every((r) => r.leaseId === 'lease-1' && r.attempt === 1));
  });

  it('refuses an assignment for another host', async () => {
    const { runAssignment } = createHostActivities(deps());
    await assert.rejects(env().run(runAssignment, assignment({ hostId: 'h2' })), failureType(ErrorType.WrongHost));
  });

  it('refuses an unhealthy or unknown device as a dispatch failure', async () => {
    const { runAssignment } = createHostActivities(deps());
    await assert.rejects(
      env().run(runAssignment, assignment({ deviceId: 'sick' })),
      failureType(ErrorType.DeviceUnavailable),
    );
    await assert.rejects(
      env().run(runAssignment, assignment({ deviceId: 'nope' })),
      failureType(ErrorType.DeviceUnavailable),
    );
  });

  it('never starts a second run on a device whose earlier runner has not stopped', async () => {
    const d = deps({ runners: createSimRunners({ defaultDurationMs: 300 }) });
    const { runAssignment } = createHostActivities(d);
    const first = env().run(runAssignment, assignment());
    await new Promise((r) => setTimeout(r, 50));
    await assert.rejects(
      env().run(runAssignment, assignment({ taskId: 't2', leaseId: 'lease-2' })),
      failureType(ErrorType.DeviceUnavailable),
    );
    assert.equal(((await first) as RunOutcome).status, 'done');
    assert.equal(
      ((await env().run(runAssignment, assignment({ taskId: 't3', leaseId: 'lease-3' }))) as RunOutcome).status,
      'done',
    );
  });

  it('an unknown workflow definition is a terminal failure', async () => {
    const { runAssignment } = createHostActivities(deps());
    await assert.rejects(
      env().run(runAssignment, assignment({ work: { kind: 'workflow', definition: 'nope' } })),
      (err: unknown) =>
        err instanceof ApplicationFailure && err.type === ErrorType.UnknownDefinition && err.nonRetryable === true,
    );
  });

  it('cancellation (task cancelled or lease lost) aborts the runner and ends as cancelled', async () => {
    const { runAssignment } = createHostActivities(deps());
    const e = env();
    const run = e.run(runAssignment, assignment({ work: { kind: 'goal', goal: 'x [sim outcome=hang duration=20]' } }));
    await new Promise((r) => setTimeout(r, 100));
    e.cancel();
    await assert.rejects(run, (err: unknown) => err instanceof CancelledFailure);
  });
});
