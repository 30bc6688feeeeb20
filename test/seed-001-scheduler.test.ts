/**
 * Seed 001 (task-scheduler spec): submission, admission limit, matching, strategies, runners.
 * Every test runs against the real dev server with real workers.
 */
import assert from 'node:assert/strict';
import { WorkflowFailedError, WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { QueueFullError } from '../control-plane/client';
import { ConfigError, parseControlPlaneConfig, taskWorkflowQueue } from '../control-plane/config';
import { ensurePools } from '../control-plane/worker';
import { ErrorType } from '../workflows/errors';
import { schedulerWorkflowId, taskWorkflowId } from '../workflows/ids';
import { configureSchedulerUpdate, setSchedulerConfigSignal } from '../workflows/messages';
import { createSimRunners } from '../host-worker/sim';
import { recordingRunners } from './helpers/runners';
import { eventually, startFleet, uid, type Fleet } from './helpers/fleet';
import { testEnv } from './setup';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('seed 001: task scheduler', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  it('Successful submission: returns a stable id without waiting for a device; status queued', async () => {
    f = await startFleet('submit');
    const t0 = Date.now();
    const view = await f.fleet.submit({ goal: 'open the settings app' });
    assert.ok(Date.now() - t0 < 15_000);
    assert.match(view.taskId, /^[0-9a-f-]{36}$/);
    assert.equal(view.status, 'queued');
    const again = await f.fleet.get(view.taskId);
    assert.equal(again.taskId, view.taskId);
    assert.equal(again.status, 'queued');
    assert.equal(again.attempts.length, 0);
    const s = await f.scheduler();
    assert.deepEqual(
      s.queue.map((q) => q.taskId),
      [view.taskId],
    );
  });

  it('Queue depth limit reached: rejected with a clear, typed error; nothing admitted', async () => {
    f = await startFleet('qdepth', { maxQueueDepth: 2 });
    await f.fleet.submit({ taskId: uid('a'), goal: 'a' });
    await f.fleet.submit({ taskId: uid('b'), goal: 'b' });
    const third = uid('c');
    await assert.rejects(f.fleet.submit({ taskId: third, goal: 'c' }), (err: unknown) => {
      assert.ok(err instanceof QueueFullError, `expected QueueFullError, got ${String(err)}`);
      assert.match((err as Error).message, /queue is full \(2\/2 queued\)/);
      return true;
    });
    const s = await f.scheduler();
    assert.equal(s.queue.length, 2);
    assert.ok(!s.queue.some((q) => q.taskId === third));
    assert.equal(s.counters.rejected, 1);
    const rejected = await f.fleet.get(third);
    assert.equal(rejected.status, 'rejected');
    assert.equal(rejected.result?.reason, 'queue_full');
    assert.equal(rejected.attempts.length, 0);
    // Submitted again under the same id once there is room: a new run, which the first run's
    // answer and enqueue (tagged by the control plane, sent again by anyone) do not touch, even
    // when the old refusal reaches the new run before the pool's own answer (signal-with-start).
    const firstRun = f.client.workflow.getHandle(
      taskWorkflowId(third),
      (await f.client.workflow.getHandle(taskWorkflowId(third)).describe()).runId,
    );
    const firstEvents = (await firstRun.fetchHistory()).events ?? [];
    const refusal = firstEvents.find((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'admission')!
      .workflowExecutionSignaledEventAttributes!.input;
    const input = firstEvents[0].workflowExecutionStartedEventAttributes!.input!.payloads![0];
    const enqueue = ((await f.client.workflow.getHandle(schedulerWorkflowId(f.pool)).fetchHistory()).events ?? [])
      .filter((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'enqueueTask')
      .at(-1)!.workflowExecutionSignaledEventAttributes!.input;
    await f.fleet.cancel(s.queue[0].taskId);
    await eventually(async () => ((await f!.scheduler()).queue.length === 1 ? true : undefined), 'room');
    const later = { ...JSON.parse(Buffer.from(input.data!).toString()), submittedAt: Date.now() };
    const raw = testEnv().client.workflowService;
    const namespace = testEnv().namespace ?? 'default';
    await raw.signalWithStartWorkflowExecution({
      namespace,
      workflowId: taskWorkflowId(third),
      workflowType: { name: 'taskWorkflow' },
      taskQueue: { name: taskWorkflowQueue(f.config) },
      input: { payloads: [{ metadata: input.metadata, data: Buffer.from(JSON.stringify(later)) }] },
      signalName: 'admission',
      signalInput: refusal,
      requestId: uid('req'),
    });
    await raw.signalWorkflowExecution({
      namespace,
      workflowExecution: { workflowId: schedulerWorkflowId(f.pool) },
      signalName: 'enqueueTask',
      input: enqueue,
    });
    const again = await eventually(async () => {
      const t = await f!.fleet.get(third);
      return t.admitted || t.status !== 'queued' ? t : undefined;
    }, 'the new run answered');
    assert.equal(again.status, 'queued', "not rejected by the first run's answer");
    assert.equal(again.admitted, true);
    const entries = (await f.scheduler()).queue.filter((q) => q.taskId === third);
    assert.deepEqual(
      entries.map((q) => q.submittedAt),
      [later.submittedAt],
    );
  });

  it('Matching idle device available: assigned, device id and host id recorded', async () => {
    f = await startFleet('match');
    await f.addHost('h1', [{ deviceId: 'ios-1', driverType: 'ios' }]);
    await f.addHost('h2', [{ deviceId: 'px-7', driverType: 'android', tags: ['api34', 'camera'] }]);
    const { taskId } = await f.fleet.submit({
      goal: 'take a photo [sim outcome=hang duration=200]',
      constraints: { driverType: 'android', tags: ['camera'] },
    });
    const t = await f.waitForStatus(taskId, 'running');
    assert.equal(t.current?.hostId, f.hostId('h2'));
    assert.equal(t.current?.deviceId, 'px-7');
    const s = await f.scheduler();
    const dev = s.devices.find((d) => d.deviceId === 'px-7');
    assert.equal(dev?.reservedBy?.taskId, taskId);
    assert.equal(s.devices.find((d) => d.deviceId === 'ios-1')?.reservedBy, undefined);
    await f.fleet.cancel(taskId);
  });

  it('No matching device: stays queued (not failed); assigned once a matching device appears', async () => {
    f = await startFleet('nomatch');
    const host = await f.addHost('h1', [{ deviceId: 'ios-1', driverType: 'ios' }]);
    const { taskId } = await f.fleet.submit({ goal: 'x [sim duration=50]', constraints: { driverType: 'android' } });
    await eventually(async () => ((await f!.scheduler()).devices.length === 1 ? true : undefined), 'device known');
    await sleep(1_500);
    const waiting = await f.fleet.get(taskId);
    assert.equal(waiting.status, 'queued');
    assert.equal(waiting.attempts.length, 0);
    await host.setDevices([
      { deviceId: 'ios-1', driverType: 'ios', tags: [], state: 'idle', health: 'good' },
      { deviceId: 'emu-1', driverType: 'android', tags: [], state: 'idle', health: 'good' },
    ]);
    const done = await f.waitForStatus(taskId, 'done');
    assert.equal(done.attempts.length, 1);
    assert.equal(done.attempts[0].deviceId, 'emu-1');
  });

  it('maxQueueWaitMs: a task no device takes in time fails queue_timeout and leaves the queue; without it, it waits', async () => {
    f = await startFleet('queue-wait');
    await f.addHost('h1', [{ deviceId: 'd1', driverType: 'android' }]);
    const limited = await f.fleet.submit({
      goal: 'needs an ios device',
      constraints: { driverType: 'ios', tags: [] },
      policy: { maxQueueWaitMs: 1_500 },
    });
    const patient = await f.fleet.submit({ goal: 'also ios', constraints: { driverType: 'ios', tags: [] } });
    const failed = await f.fleet.wait(limited.taskId, { timeoutMs: 30_000 });
    assert.equal(failed.status, 'failed');
    assert.equal(failed.result?.reason, 'queue_timeout');
    assert.match(failed.result?.message ?? '', /no device was assigned within maxQueueWaitMs \(1500 ms\)/);
    assert.equal(failed.attempts.length, 0);
    await eventually(
      async () => ((await f!.scheduler()).queue.some((q) => q.taskId === limited.taskId) ? undefined : true),
      'the timed-out task out of the queue',
    );
    // The other one is still waiting, and runs once a matching device comes.
    assert.equal((await f.fleet.get(patient.taskId)).status, 'queued');
    await f.addHost('h2', [{ deviceId: 'i1', driverType: 'ios' }]);
    assert.equal((await f.fleet.wait(patient.taskId, { timeoutMs: 30_000 })).status, 'done');
  });

  it('Unknown assignment strategy configured: clear configuration error, no silent fallback', async () => {
    assert.throws(
      () => parseControlPlaneConfig({ pools: { lab: { strategy: 'round_robin_typo' } } }),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.match((err as Error).message, /pools\.lab\.strategy: unknown assignment strategy "round_robin_typo"/);
        // Every registered name (other suites in this process may have registered more).
        assert.match((err as Error).message, /registered: (\S+, )*fifo_match, (\S+, )*priority_aging/);
        return true;
      },
    );
    // The workflow refuses it too: started directly, the scheduler fails at start-up ...
    const { client } = testEnv();
    const pool = uid('badpool');
    f = await startFleet('badstrategy');
    const handle = await client.workflow.start('schedulerWorkflow', {
      workflowId: schedulerWorkflowId(pool),
      taskQueue: f.config.controlTaskQueue,
      args: [{ pool, config: { strategy: 'nope', maxQueueDepth: 10, agingMs: 1000 } }],
    });
    await assert.rejects(handle.result(), (err: unknown) => {
      assert.ok(err instanceof WorkflowFailedError);
      assert.ok(err.cause instanceof ApplicationFailure);
      assert.equal(err.cause.type, ErrorType.UnknownStrategy);
      return true;
    });
    // ... and a running scheduler rejects reconfiguration to it, keeping its strategy.
    const running = f.client.workflow.getHandle(schedulerWorkflowId(f.pool));
    await assert.rejects(
      running.executeUpdate(configureSchedulerUpdate, {
        args: [{ strategy: 'nope', maxQueueDepth: 10, agingMs: 1000 }],
      }),
      (err: unknown) => {
        assert.ok(err instanceof WorkflowUpdateFailedError);
        assert.ok(err.cause instanceof ApplicationFailure);
        assert.equal(err.cause.type, ErrorType.UnknownStrategy);
        assert.match(err.cause.message, /unknown assignment strategy "nope"/);
        return true;
      },
    );
    assert.equal((await f.scheduler()).config.strategy, 'fifo_match');
    // The update from anyone but the control plane is refused, whatever it says.
    await assert.rejects(
      client.workflow.getHandle(schedulerWorkflowId(f.pool)).executeUpdate(configureSchedulerUpdate, {
        args: [{ strategy: 'fifo_match', maxQueueDepth: 1, agingMs: 1000 }],
      }),
      (err: unknown) =>
        err instanceof WorkflowUpdateFailedError && /not sent by the control plane/.test(String(err.cause?.message)),
    );
    // The same configuration as a signal (how the control plane sends one) is ignored, and logged.
    // A query waits for the workflow task that takes the signals, so it sees what they did.
    const before = (await f.scheduler()).config;
    const v = Date.now();
    const fifo = { strategy: 'fifo_match', agingMs: 1000 };
    await running.signal(setSchedulerConfigSignal, {
      strategy: 'nope',
      maxQueueDepth: 5,
      agingMs: 1000,
      version: v + 1,
    });
    await running.signal(setSchedulerConfigSignal, { ...fifo, maxQueueDepth: 0, version: v + 2 });
    assert.deepEqual((await f.scheduler()).config, before);
    await running.signal(setSchedulerConfigSignal, { ...fifo, maxQueueDepth: 11, version: v + 3 });
    assert.equal((await f.scheduler()).config.maxQueueDepth, 11);
    // One not newer than the applied version (an older one sent again), or without a version: ignored.
    await running.signal(setSchedulerConfigSignal, { ...fifo, maxQueueDepth: 12, version: v + 3 });
    await running.signal(setSchedulerConfigSignal, { ...fifo, maxQueueDepth: 13 });
    assert.equal((await f.scheduler()).config.maxQueueDepth, 11);
  });

  it('Default FIFO: A then B queued, one matching device: A gets it, B stays queued', async () => {
    f = await startFleet('fifo');
    const a = await f.fleet.submit({ taskId: uid('A'), goal: 'A [sim outcome=hang]' });
    const b = await f.fleet.submit({ taskId: uid('B'), goal: 'B [sim duration=50]' });
    await f.addHost('h1', [{ deviceId: 'd1' }]);
    await f.waitForStatus(a.taskId, 'running');
    await sleep(500);
    assert.equal((await f.fleet.get(b.taskId)).status, 'queued');
    await f.fleet.cancel(a.taskId);
    const bDone = await f.waitForStatus(b.taskId, 'done');
    assert.equal(bDone.attempts[0].deviceId, 'd1');
  });

  it('A retry goes to another matching device, waiting for it if busy; the failing device only when no other could serve the task', async () => {
    f = await startFleet('retry-elsewhere');
    // "bad" fails every task it gets (a broken runner); "good" runs them.
    await f.addHost('bad', [{ deviceId: 'b1', tags: ['cam'] }], {
      runners: createSimRunners({ defaultOutcome: 'fail-retryable', defaultDurationMs: 50 }),
    });
    await f.addHost('good', [{ deviceId: 'g1' }]);
    const good = f.hostId('good');
    const bad = f.hostId('bad');
    // g1 is busy: the task's first attempt can only go to b1.
    const hold = await f.fleet.submit({
      goal: 'hold [sim outcome=hang]',
      constraints: { hostId: good, deviceId: 'g1', tags: [] },
    });
    await f.waitForStatus(hold.taskId, 'running');
    const t = await f.fleet.submit({ goal: 'needs a working device' });
    await f.waitFor(t.taskId, (v) => v.attempts.length === 1 && v.attempts[0].outcome !== undefined, 'attempt 1 ended');
    // The retry waits for g1 although b1 is free, and says why in the pool's view.
    const queued = await eventually(async () => {
      const s = await f!.scheduler();
      const q = s.queue.find((e) => e.taskId === t.taskId);
      return q?.attempt === 2 ? { s, q } : undefined;
    }, 'the retry queued');
    assert.deepEqual(queued.q.avoid, [`${bad}/b1`]);
    await sleep(1_000);
    const waiting = await f.fleet.get(t.taskId);
    assert.equal(waiting.attempts.length, 1, 'no second attempt on the device that failed it');
    assert.equal((await f.scheduler()).devices.find((d) => d.deviceId === 'b1')?.reservedBy, undefined);
    await f.fleet.cancel(hold.taskId);
    const done = await f.fleet.wait(t.taskId, { timeoutMs: 30_000 });
    assert.equal(done.status, 'done');
    assert.deepEqual(
      done.attempts.map((a) => [a.hostId, a.deviceId]),
      [
        [bad, 'b1'],
        [good, 'g1'],
      ],
    );

    // Only b1 has the tag: its retries stay on b1 (nothing else could serve it) up to maxAttempts.
    const only = await f.fleet.submit({ goal: 'needs the camera', constraints: { tags: ['cam'] } });
    const failed = await f.fleet.wait(only.taskId, { timeoutMs: 30_000 });
    assert.equal(failed.status, 'failed');
    assert.deepEqual(
      failed.attempts.map((a) => a.deviceId),
      ['b1', 'b1', 'b1'],
    );
  });

  it('New strategy by name alone: the second strategy is selected by configuration only', async () => {
    f = await startFleet('strategy', { strategy: 'priority_aging', agingMs: 3_600_000 });
    assert.equal((await f.scheduler()).config.strategy, 'priority_aging');
    const low = await f.fleet.submit({ taskId: uid('low'), goal: 'low [sim outcome=hang]', priority: 1 });
    const high = await f.fleet.submit({ taskId: uid('high'), goal: 'high [sim outcome=hang]', priority: 10 });
    await f.addHost('h1', [{ deviceId: 'd1' }]);
    await f.waitForStatus(high.taskId, 'running');
    assert.equal((await f.fleet.get(low.taskId)).status, 'queued');
    // Switching back is configuration too: the running scheduler takes the new strategy.
    await ensurePools(f.client, {
      ...f.config,
      pools: { [f.pool]: { ...f.config.pools[f.pool], strategy: 'fifo_match' } },
    });
    assert.equal((await f.scheduler()).config.strategy, 'fifo_match');
    await f.fleet.cancel(high.taskId);
    await f.waitForStatus(low.taskId, 'running');
    await f.fleet.cancel(low.taskId);
  });

  it('Goal task and workflow-definition task each run through their runner; the outcome sets done / failed', async () => {
    f = await startFleet('runners');
    const { runners, calls } = recordingRunners({
      definitions: new Map([['smoke', [{ name: 'boot', command: ['boot'] }]]]),
    });
    await f.addHost('h1', [{ deviceId: 'd1' }, { deviceId: 'd2' }], { runners });
    const goalOk = await f.fleet.submit({ goal: 'ok [sim duration=50]' });
    const goalFail = await f.fleet.submit({ goal: 'bad [sim duration=50 outcome=fail]' });
    const defOk = await f.fleet.submit({
      definition: {
        name: 'login',
        steps: [
          { name: 'open', command: ['open'] },
          { name: 'type', command: ['type'] },
        ],
      },
    });
    const defByName = await f.fleet.submit({ definition: 'smoke' });
    const defFail = await f.fleet.submit({
      definition: {
        name: 'broken',
        steps: [
          { name: 'ok', command: ['ok'] },
          { name: 'boom', command: ['boom [sim outcome=fail]'] },
        ],
      },
    });
    const results = await Promise.all(
      [goalOk, goalFail, defOk, defByName, defFail].map((t) => f!.fleet.wait(t.taskId)),
    );
    assert.deepEqual(
      results.map((r) => r.status),
      ['done', 'failed', 'done', 'done', 'failed'],
    );
    assert.equal(results[1].result?.reason, 'runner_failed');
    assert.equal(results[1].attempts.length, 1, 'a terminal runner failure is not retried');
    assert.match(results[4].result?.message ?? '', /step 2\/2 boom failed/);
    assert.match(results[2].result?.output ?? '', /2 steps done/);
    assert.equal(calls.length, 5);
  });
});
