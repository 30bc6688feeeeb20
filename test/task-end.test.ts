/**
 * How a task ends: every assignment it does not need is released, even one that arrives while the
 * others are being released, and a retry that cannot be queued ends the task as failed through the
 * normal terminal path (result, search attributes, strays), not as a bare workflow failure.
 */
import assert from 'node:assert/strict';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType, Reason } from '../workflows/errors';
import { schedulerWorkflowId, taskWorkflowId } from '../workflows/ids';
import { assignmentSignal } from '../workflows/messages';
import { FleetStatus } from '../workflows/search-attributes';
import type { DeviceReleased } from '../workflows/messages';
import type { Assignment, TaskResult } from '../workflows/types';
import { eventually, startFleet, type Fleet } from './helpers/fleet';
import { decodeFirst } from './helpers/invariants';
import { recordingRunners } from './helpers/runners';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('task end: strays released, a retry that cannot be queued fails the task', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  /** The leases the task's history released (through its pool or at the device). */
  const releasedLeases = async (taskId: string): Promise<string[]> => {
    const history = await f!.client.workflow.getHandle(taskWorkflowId(taskId)).fetchHistory();
    const out: string[] = [];
    for (const e of history.events ?? []) {
      const s = e.signalExternalWorkflowExecutionInitiatedEventAttributes;
      if (s?.signalName === 'taskReleased' || s?.signalName === 'releaseDevice') {
        const r = await decodeFirst<Partial<DeviceReleased>>(f!.client, s.input?.payloads);
        if (r?.leaseId) out.push(r.leaseId);
      }
    }
    return out;
  };

  it('An assignment that arrives while the strays are being released is released too', async () => {
    f = await startFleet('stray-drain');
    // No device matches: the task stays queued, waiting for attempt 1.
    const view = await f.fleet.submit({ goal: 'never runs', constraints: { driverType: 'nowhere' } });
    const handle = f.client.workflow.getHandle(taskWorkflowId(view.taskId));
    const stray = (leaseId: string, i: number): Assignment => ({
      taskId: view.taskId,
      attempt: 7, // not the attempt it waits for: a stray
      leaseId,
      hostId: 'ghost-host',
      deviceId: `g${i}`,
      reservedAt: Date.now(),
      hostKeys: { signing: '00'.repeat(32), box: '00'.repeat(32) },
    });
    // Enough strays that releasing them, one workflow task each, takes a while.
    const early = Array.from({ length: 40 }, (_, i) => `early-${i}`);
    for (const [i, leaseId] of early.entries()) await handle.signal(assignmentSignal, stray(leaseId, i));
    await f.fleet.cancel(view.taskId);
    // Once the releases have begun, one more arrives (a late reservation for this task).
    await eventually(
      async () => ((await releasedLeases(view.taskId)).length > 0 ? true : undefined),
      'the first stray release',
      20_000,
      10,
    );
    await handle.signal(assignmentSignal, stray('late', 99));
    await assert.rejects(handle.result(), WorkflowFailedError);
    const released = await releasedLeases(view.taskId);
    assert.deepEqual([...released].sort(), [...early, 'late'].sort(), 'every stray released exactly once');
    assert.equal((await f.fleet.get(view.taskId)).status, 'cancelled');
  });

  it('The same lease from another device while the attempt runs (a pool round run again) is released at once, not taken as a repeat', async () => {
    f = await startFleet('same-lease-other-device');
    let finish!: () => void;
    const told = new Promise<void>((r) => (finish = r));
    const { runners } = recordingRunners({
      override: async (ctx) => {
        ctx.started();
        await told;
        return { status: 'done', output: 'ran once' };
      },
    });
    await f.addHost('h1', [{ deviceId: 'd1' }], { runners });
    await eventually(async () => ((await f!.scheduler()).devices.length >= 1 ? true : undefined), 'd1 in the pool');
    const view = await f.fleet.submit({ goal: 'long' });
    const running = await f.waitForStatus(view.taskId, 'running');
    const cur = running.attempts[0];
    const handle = f.client.workflow.getHandle(taskWorkflowId(view.taskId));
    const second: Assignment = {
      taskId: view.taskId,
      attempt: cur.attempt,
      leaseId: cur.leaseId,
      hostId: 'ghost-host',
      deviceId: 'g1',
      reservedAt: Date.now(),
      hostKeys: { signing: '00'.repeat(32), box: '00'.repeat(32) },
    };
    await handle.signal(assignmentSignal, second);
    // The same assignment again from its own device is a repeat: nothing to release for it.
    await handle.signal(assignmentSignal, { ...second, hostId: cur.hostId, deviceId: cur.deviceId });
    /** The devices released under the attempt's lease, from the task's history. */
    const releasedDevices = async (): Promise<string[]> => {
      const released: string[] = [];
      for (const e of (await handle.fetchHistory()).events ?? []) {
        const sig = e.signalExternalWorkflowExecutionInitiatedEventAttributes;
        if (sig?.signalName !== 'taskReleased' && sig?.signalName !== 'releaseDevice') continue;
        const r = await decodeFirst<Partial<DeviceReleased>>(f!.client, sig.input?.payloads);
        if (r?.leaseId === cur.leaseId) released.push(`${r.hostId}/${r.deviceId}`);
      }
      return released;
    };
    try {
      // Released while the run still goes on, not held until the task ends.
      await eventually(
        async () => ((await releasedDevices()).includes('ghost-host/g1') ? true : undefined),
        'the second hold released during the run',
      );
      assert.equal((await f.fleet.get(view.taskId)).status, 'running', 'the run still goes on');
    } finally {
      finish(); // also when the check failed: the host can then stop
    }
    assert.equal((await f.fleet.wait(view.taskId, { timeoutMs: 60_000 })).status, 'done');
    assert.deepEqual((await releasedDevices()).sort(), [`${cur.hostId}/${cur.deviceId}`, 'ghost-host/g1'].sort());
  });

  it('A retry whose scheduler is gone and cannot be started again ends the task as failed (scheduler_unavailable), indexed and recorded', async () => {
    f = await startFleet('retry-enqueue-fails');
    const { runners, calls } = recordingRunners({
      override: async (ctx) => {
        ctx.started();
        return { status: 'failed', retryable: true, reason: 'flaky', message: 'try again' };
      },
    });
    await f.addHost('h1', [{ deviceId: 'd1' }], { runners });
    await eventually(async () => ((await f!.scheduler()).devices.length >= 1 ? true : undefined), 'd1 in the pool');
    const view = await f.fleet.submit({
      goal: 'flaky',
      // Room, on a loaded machine, to catch the backoff and take the scheduler away within it.
      policy: { maxAttempts: 3, backoff: { initialMs: 10_000, multiplier: 1, maxMs: 10_000 } },
    });
    // Between attempts 1 and 2 (the backoff timer runs).
    const between = await f.waitFor(
      view.taskId,
      (t) => t.status === 'queued' && t.attempts.length === 1 && t.nextAttemptAt !== undefined,
      'attempt 1 failed, backoff running',
    );
    assert.equal(between.attempts[0].outcome, 'retryable_failure');
    // The control plane can no longer start the pool's scheduler (as if ensureScheduler had used up
    // its attempts): the pool's configuration throws, non-retryable, from now on.
    Object.defineProperty(f.config.pools, f.pool, {
      configurable: true,
      get() {
        throw ApplicationFailure.nonRetryable(`pool ${f!.pool} cannot be started (test)`);
      },
    });
    await f.client.workflow.getHandle(schedulerWorkflowId(f.pool)).terminate('test: the scheduler is gone');
    const handle = f.client.workflow.getHandle(taskWorkflowId(view.taskId));
    const err = await handle.result().then(
      () => assert.fail('the task completed'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof WorkflowFailedError, String(err));
    assert.ok(err.cause instanceof ApplicationFailure, `cause: ${String(err.cause)}`);
    assert.equal(err.cause.type, ErrorType.TaskFailed);
    const result = err.cause.details?.[0] as TaskResult;
    assert.equal(result.status, 'failed');
    assert.equal(result.reason, Reason.SchedulerUnavailable);
    assert.equal(result.attempts, 1);
    assert.match(result.message ?? '', /attempt 2 could not be queued: .*cannot be started \(test\)/);
    // The index agrees with the history, and the view records the one result.
    let status: unknown;
    for (let i = 0; i < 50 && status !== 'failed'; i++) {
      status = (await handle.describe()).typedSearchAttributes.get(FleetStatus);
      if (status !== 'failed') await sleep(100);
    }
    assert.equal(status, 'failed', 'FleetStatus search attribute');
    const t = await f.fleet.get(view.taskId);
    assert.equal(t.status, 'failed');
    assert.equal(t.result?.reason, Reason.SchedulerUnavailable);
    assert.equal(t.nextAttemptAt, undefined);
    assert.deepEqual(
      t.attempts.map((a) => [a.attempt, a.outcome]),
      [[1, 'retryable_failure']],
    );
    assert.equal(calls.length, 1, 'attempt 2 never ran');
  });
});
