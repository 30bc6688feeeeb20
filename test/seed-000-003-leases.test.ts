/**
 * Seeds 000 and 003: atomic assignment + reservation, host claim, lease expiry with bounded retry,
 * lease-validated terminal results, dispatch commit and dispatch-failure classification.
 * Hosts that must die or pause run as real processes (SIGKILL / SIGSTOP).
 */
import assert from 'node:assert/strict';
import { Connection, WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/errors';
import { deviceWorkflowId, hostWorkflowId, schedulerWorkflowId, taskWorkflowId } from '../workflows/ids';
import {
  deviceReleasedSignal,
  dequeueTaskSignal,
  deviceStateQuery,
  enqueueTaskSignal,
  hostDevicesSignal,
  hostSnapshotUpdate,
  releaseDeviceSignal,
  reportAttemptUpdate,
  reservationRefusedSignal,
  reserveDeviceSignal,
  schedulerStateQuery,
  type DeviceView,
} from '../workflows/messages';
import { NativeConnection, Worker } from '@temporalio/worker';
import { startPartitionableProxy } from './helpers/proxy';
import { deviceWorkflow } from '../workflows/device';
import { schedulerWorkflow } from '../workflows/scheduler';
import { testEnv, workflowBundle } from './setup';
import { SignDomain } from '../workflows/identity';
import { sign } from '../host-worker/identity';
import { FAST_POLICY, eventually, signReport, startFleet, uid, type Fleet } from './helpers/fleet';
import { assertNoOverlappingReservations, decodeFirst, taskAttemptRuns } from './helpers/invariants';
import type { ReservationRequest } from '../workflows/types';
import { controlPlaneDataConverter } from '../control-plane/worker';
import { signalKeysFromEnv } from '../control-plane/signal-auth';
import { recordingRunners } from './helpers/runners';
import { createCommandGoalRunner } from '../host-worker/command-runner';
import { groupAlive } from '../host-worker/process-group';
import type { Runners } from '../host-worker/runners';
import { createSimRunners } from '../host-worker/sim';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('seeds 000 / 003: reservations, claims, leases, dispatch', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  const device = (hostId: string, deviceId: string): Promise<DeviceView> =>
    f!.client.workflow.getHandle(deviceWorkflowId(hostId, deviceId)).query(deviceStateQuery);
  const deviceKnown = (n = 1) =>
    eventually(
      async () => ((await f!.scheduler()).devices.length >= n ? true : undefined),
      `${n} device(s) in the pool`,
    );
  /** A host whose devices are online but whose worker does not poll (stopped without a word), for a long host timeout. */
  const silentHost = async (name: string, deviceIds: string[]) => {
    const h = await f!.addHost(
      name,
      deviceIds.map((deviceId) => ({ deviceId })),
      { hostTimeoutMs: 120_000 },
    );
    await deviceKnown(deviceIds.length);
    await h.stop({ silently: true });
    return h;
  };
  /** A fleet with one device (h1/d1) and a task running on it. */
  const runningOnOneDevice = async (name: string, goal: string) => {
    f = await startFleet(name);
    await f.addHost('h1', [{ deviceId: 'd1' }]);
    await deviceKnown();
    const t = await f.fleet.submit({ goal });
    await f.waitForStatus(t.taskId, 'running');
    return { fl: f, t };
  };
  /**
   * A scheduler of its own pool that knows one idle device, h/d1, whose device workflow exists but
   * never runs (signals to it are delivered; the test speaks for it).
   */
  const poolWithSilentDevice = async (name: string) => {
    f = await startFleet(name);
    const pool = uid('pool');
    const hostId = uid('hx');
    const unpolled = uid('unpolled');
    await f.client.workflow.start('inert', { workflowId: deviceWorkflowId(hostId, 'd1'), taskQueue: unpolled });
    const sched = await f.client.workflow.start(schedulerWorkflow, {
      workflowId: schedulerWorkflowId(pool),
      taskQueue: f.config.controlTaskQueue,
      args: [{ pool, config: { strategy: 'fifo_match', maxQueueDepth: 10, agingMs: 60_000 } }],
    });
    await sched.signal(hostDevicesSignal, {
      hostId,
      online: true,
      drained: false,
      drainedDevices: [],
      devices: [{ deviceId: 'd1', driverType: 'sim', tags: [], state: 'idle', health: 'good' }],
      version: 1,
      keys: { signing: '00'.repeat(32), box: '00'.repeat(32) },
    });
    const enqueue = (taskId: string, attempt: number) =>
      sched.signal(enqueueTaskSignal, {
        taskId,
        constraints: { tags: [] },
        priority: 0,
        submittedAt: Date.now(),
        attempt,
        holdMs: 60_000,
        first: attempt === 1,
      });
    /** d1 refuses `taskId`'s reservation under `leaseId`: held by `heldBy`. */
    const refuse = (
      taskId: string,
      attempt: number,
      leaseId: string,
      heldBy: { taskId: string; leaseId: string; expiresAt: number },
    ) =>
      sched.signal(reservationRefusedSignal, {
        hostId,
        deviceId: 'd1',
        request: { taskId, attempt, leaseId, pool, holdMs: 60_000, hostKeys: { signing: '', box: '' } },
        heldBy,
      });
    return { hostId, sched, enqueue, refuse, unpolled };
  };
  /**
   * `first` runs on h1/d1 until the server ends it (execution timeout, 1.5-2 s) while its runner
   * stays on the device; then a quick task is submitted for the same device.
   */
  const timedOutThenNext = async (first: string, executionTimeoutMs: number) => {
    await deviceKnown();
    const stale = await f!.fleet.submit({
      taskId: uid(first),
      goal: first,
      policy: { executionTimeoutMs, leaseTimeoutMs: 20_000, maxAttempts: 1 },
    });
    await f!.waitForStatus(stale.taskId, 'running');
    // The next task's lease has slack: it is not what these tests time out, and a 2 s lease can
    // lapse on a loaded two-core machine while the host waits for the earlier runner to stop.
    const next = await f!.fleet.submit({ taskId: uid('next'), goal: 'quick', policy: { leaseTimeoutMs: 6_000 } });
    assert.equal((await f!.fleet.wait(stale.taskId, { timeoutMs: 60_000 })).status, 'failed');
    return { stale, next };
  };
  const processHost = (name: string, deviceId: string, more: string[] = []) => f!.spawnHost(name, [deviceId, ...more]);
  /** A live in-process host whose runner finishes every attempt at once ('rescued'). */
  /** A host whose runs end done at once; `onRun` is told when each one reaches it. */
  const rescueHost = (name: string, deviceId: string, onRun?: () => void) =>
    f!.addHost(name, [{ deviceId }], {
      runners: recordingRunners({
        override: async (ctx) => {
          onRun?.();
          ctx.started();
          return { status: 'done', output: 'rescued' };
        },
      }).runners,
    });

  it('Assigning records, in one step, task, host/device, attempt, lease id, lease expiry and the device reservation', async () => {
    f = await startFleet('assign-record');
    await silentHost('h1', ['d1']);
    const { taskId } = await f.fleet.submit({ goal: 'x' });
    const t = await f.waitForStatus(taskId, 'assigned');
    const a = t.current!;
    assert.equal(a.attempt, 1);
    assert.equal(a.hostId, f.hostId('h1'));
    assert.equal(a.deviceId, 'd1');
    assert.match(a.leaseId, /^[0-9a-f-]{36}$/);
    assert.equal(a.ackDeadline - a.assignedAt, FAST_POLICY.ackTimeoutMs);
    assert.equal(a.leaseTimeoutMs, FAST_POLICY.leaseTimeoutMs);
    const dev = await device(f.hostId('h1'), 'd1');
    assert.equal(dev.current?.taskId, taskId);
    assert.equal(dev.current?.leaseId, a.leaseId);
    assert.equal(dev.current?.attempt, 1);
    assert.ok(dev.current!.expiresAt > dev.current!.reservedAt);
    const s = await f.scheduler();
    assert.equal(s.devices[0].reservedBy?.leaseId, a.leaseId);
    await f.fleet.cancel(taskId);
  });

  it("A finished attempt is released through its pool: riding on the device's next reservation when work waits, else on its own; never echoed back", async () => {
    const { fl, t: first } = await runningOnOneDevice('release-via-pool', 'first [sim duration=1500]');
    // Three more wait in the queue: each release but the last finds the next task waiting for the device.
    const rest = [];
    for (let i = 0; i < 3; i++) rest.push(await fl.fleet.submit({ goal: `next${i} [sim duration=50]` }));
    for (const t of [first, ...rest]) assert.equal((await fl.fleet.wait(t.taskId)).status, 'done');
    await eventually(async () => ((await device(fl.hostId('h1'), 'd1')).current ? undefined : true), 'device free');

    const history = await fl.client.workflow.getHandle(deviceWorkflowId(fl.hostId('h1'), 'd1')).fetchHistory();
    let riding = 0;
    let passedOn = 0;
    let echoed = 0;
    for (const e of history.events ?? []) {
      const got = e.workflowExecutionSignaledEventAttributes;
      if (got?.signalName === 'reserveDevice') {
        if ((await decodeFirst<ReservationRequest>(fl.client, got.input?.payloads))?.release) riding++;
      } else if (got?.signalName === 'releaseDevice') {
        if ((await decodeFirst<{ via?: string }>(fl.client, got.input?.payloads))?.via === fl.pool) passedOn++;
      }
      if (e.signalExternalWorkflowExecutionInitiatedEventAttributes?.signalName === 'deviceReleased') echoed++;
    }
    assert.deepEqual({ riding, passedOn, echoed }, { riding: 3, passedOn: 1, echoed: 0 });
    const { reservations } = await assertNoOverlappingReservations(fl.client, [
      { hostId: fl.hostId('h1'), deviceId: 'd1' },
    ]);
    assert.equal(reservations, 4);
    assert.equal((await fl.scheduler()).devices.find((d) => d.deviceId === 'd1')?.reservedBy, undefined);
  });

  it('A pool refused while a lease was held hears of its release, even when that pool passed the release on itself', async () => {
    const { fl, t } = await runningOnOneDevice('refused-via', 'hold [sim outcome=hang]');
    const dev = fl.client.workflow.getHandle(deviceWorkflowId(fl.hostId('h1'), 'd1'));
    const {
      hostId: _h,
      deviceId: _d,
      reservedAt: _r,
      expiresAt: _e,
      ...held
    } = (await dev.query(deviceStateQuery)).current!;
    // The pool passed a release on and then reserved the device again; the two signals may arrive in
    // either order. Here the reservation comes first and is refused: the pool now believes the device
    // held by the old lease.
    await dev.signal(reserveDeviceSignal, { ...held, taskId: `${t.taskId}-next`, leaseId: 'next-lease' });
    await eventually(async () => ((await dev.query(deviceStateQuery)).refusals === 1 ? true : undefined), 'refused');
    await dev.signal(releaseDeviceSignal, { leaseId: held.leaseId, reason: 'done', via: fl.pool });
    await eventually(async () => ((await dev.query(deviceStateQuery)).current ? undefined : true), 'released');
    const told = [];
    for (const e of (await dev.fetchHistory()).events ?? []) {
      const a = e.signalExternalWorkflowExecutionInitiatedEventAttributes;
      if (a?.signalName === 'deviceReleased')
        told.push((await decodeFirst<{ leaseId: string }>(fl.client, a.input?.payloads))?.leaseId);
    }
    assert.deepEqual(told, [held.leaseId], 'the device told the pool its refusal misled');
    await fl.fleet.cancel(t.taskId);
  });

  it("A new device run handles a release that arrived before a reservation first (signals waiting for a run's handlers)", async () => {
    // Right after continue-as-new, a release and the next reservation can both be waiting for the
    // new run's first workflow task. Handled reservation-first, the reservation was refused for
    // nothing and the pool believed the device held by the finished task (found by the durability
    // test of roll-overs). Here the run cannot start until both have arrived: nobody polls its queue.
    f = await startFleet('buffered');
    const hostId = f.hostId('hb');
    const queue = uid('unpolled');
    const keys = { signing: '00'.repeat(32), box: '00'.repeat(32) };
    const now = Date.now();
    const old = {
      taskId: uid('old'),
      attempt: 1,
      leaseId: uid('lease-old'),
      pool: f.pool,
      holdMs: 60_000,
      hostKeys: keys,
    };
    const dev = await f.client.workflow.start(deviceWorkflow, {
      workflowId: deviceWorkflowId(hostId, 'd1'),
      taskQueue: queue,
      args: [
        {
          hostId,
          deviceId: 'd1',
          carried: {
            current: { ...old, hostId, deviceId: 'd1', reservedAt: now, expiresAt: now + 60_000 },
            recent: [],
            reservations: 1,
            refusals: 0,
            runs: 1,
            refusedPools: [],
          },
        },
      ],
    });
    await dev.signal(releaseDeviceSignal, { leaseId: old.leaseId, reason: 'done', via: f.pool });
    const next = { ...old, taskId: uid('next'), leaseId: uid('lease-next') };
    await dev.signal(reserveDeviceSignal, next);
    const worker = await Worker.create({
      connection: testEnv().nativeConnection,
      taskQueue: queue,
      workflowBundle: workflowBundle(),
      dataConverter: controlPlaneDataConverter(signalKeysFromEnv()),
    });
    const view = await worker.runUntil(
      eventually(async () => {
        const v = await dev.query(deviceStateQuery);
        return v.reservations === 2 || v.refusals > 0 ? v : undefined;
      }, 'the device handled both signals'),
    );
    assert.equal(view.refusals, 0, 'the reservation was not refused');
    assert.equal(view.recent.find((r) => r.leaseId === old.leaseId)?.releaseReason, 'done');
    assert.equal(view.reservations, 2);
    await dev.terminate('test over');
  });

  it('A refusal that reaches the pool after the device released the lease it names does not hold the device', async () => {
    // The device refused a reservation while an older lease held it, then released that lease: two
    // signals to the pool, which may arrive in either order. Here the release comes first.
    const { hostId, sched, enqueue, refuse, unpolled } = await poolWithSilentDevice('refusal-late');
    const taskId = uid('t');
    await f!.client.workflow.start('inert', { workflowId: taskWorkflowId(taskId), taskQueue: unpolled });
    const reservedBy = async () => (await sched.query(schedulerStateQuery)).devices[0]?.reservedBy;
    await enqueue(taskId, 1);
    const first = await eventually(async () => (await reservedBy())?.leaseId, 'the pool reserved d1');
    const older = { taskId: uid('older'), leaseId: uid('lease-older'), expiresAt: Date.now() + 60_000 };
    await sched.signal(deviceReleasedSignal, {
      hostId,
      deviceId: 'd1',
      leaseId: older.leaseId,
      taskId: older.taskId,
      reason: 'done',
    });
    await refuse(taskId, 1, first, older);
    // The pool offers the device to the task again, under a new lease, instead of waiting out the old one.
    const again = await eventually(async () => {
      const r = await reservedBy();
      return r && r.leaseId !== first ? r : undefined;
    }, 'the pool reserved d1 again');
    assert.equal(again.taskId, taskId);
    assert.notEqual(again.leaseId, older.leaseId);
    await sched.terminate('test over');
  });

  it('A task cancelled while its reservation is on the way is not put back in the queue when the device refuses', async () => {
    const { sched, enqueue, refuse } = await poolWithSilentDevice('refusal-cancelled');
    const state = () => sched.query(schedulerStateQuery);
    // A retry (attempt 2: the pool sends it no admission answer) is reserved d1 ...
    const taskId = uid('t');
    await enqueue(taskId, 2);
    const lease = await eventually(async () => (await state()).devices[0]?.reservedBy?.leaseId, 'the pool reserved d1');
    // ... then cancelled (the task leaves the queue), and the device refuses: held by another task.
    await sched.signal(dequeueTaskSignal, { taskId });
    const other = { taskId: uid('other'), leaseId: uid('lease-other'), expiresAt: Date.now() + 60_000 };
    await refuse(taskId, 2, lease, other);
    const after = await eventually(async () => {
      const s = await state();
      return s.devices[0]?.reservedBy?.taskId === other.taskId ? s : undefined;
    }, 'the refusal was taken in');
    assert.deepEqual(
      after.queue.map((q) => q.taskId),
      [],
      'the cancelled task is not queued again',
    );
    await sched.terminate('test over');
  });

  it('Stale idle snapshot: the host reports a reserved device idle; no other task gets it', async () => {
    f = await startFleet('stale-idle');
    await f.addHost('h1', [{ deviceId: 'd1' }]);
    const a = await f.fleet.submit({ goal: 'A [sim outcome=hang]' });
    await f.waitForStatus(a.taskId, 'running');
    // A correctly signed snapshot (the host's own key) that claims the reserved device is idle.
    const cred = await f.enroll('h1');
    const snapshot = {
      hostId: f.hostId('h1'),
      pool: f.pool,
      devices: [{ deviceId: 'd1', driverType: 'sim', tags: [], state: 'idle' as const, health: 'good' as const }],
      sentAt: Date.now(),
      seq: 1_000_000,
      bootId: 'stale-view',
    };
    await f.client.workflow
      .getHandle(hostWorkflowId(f.hostId('h1')))
      .executeUpdate(hostSnapshotUpdate, { args: [{ snapshot, sig: sign(cred, SignDomain.Snapshot, snapshot) }] });
    const b = await f.fleet.submit({ goal: 'B [sim duration=50]' });
    await sleep(1_500);
    assert.equal((await f.fleet.get(b.taskId)).status, 'queued');
    assert.equal((await f.fleet.get(a.taskId)).status, 'running');
    await f.fleet.cancel(a.taskId);
    await f.waitForStatus(b.taskId, 'done');
    const { reservations } = await assertNoOverlappingReservations(f.client, [
      { hostId: f.hostId('h1'), deviceId: 'd1' },
    ]);
    assert.equal(reservations, 2);
  });

  it('Concurrent claims: two workers poll the same host queue; exactly one runs the attempt', async () => {
    f = await startFleet('claims');
    // Two host processes with the same host id poll the same task queue `fleet.host.<hostId>`.
    const [p1, p2] = await Promise.all([processHost('h1', 'd1', ['d2']), processHost('h1', 'd1', ['d2'])]);
    await deviceKnown(2);
    const tasks = await Promise.all(
      Array.from({ length: 6 }, (_, i) => f!.fleet.submit({ goal: `t${i} [sim duration=200]` })),
    );
    const ended = await Promise.all(tasks.map((t) => f!.fleet.wait(t.taskId)));
    assert.ok(ended.every((t) => t.status === 'done' && t.attempts.length === 1));
    const claims = [p1, p2].flatMap((p) =>
      p
        .output()
        .split('\n')
        .filter((l) => l.includes('assignment claimed'))
        .map((l) => JSON.parse(l).taskId as string),
    );
    assert.equal(claims.length, 6, 'each attempt was claimed by exactly one poller');
    assert.deepEqual(new Set(claims), new Set(tasks.map((t) => t.taskId)));
    for (const t of tasks) {
      const runs = await taskAttemptRuns(f.client, t.taskId);
      assert.equal(runs.length, 1);
      assert.equal(runs[0].closeKind, 'completed');
    }
    await assertNoOverlappingReservations(
      f.client,
      ['d1', 'd2'].map((deviceId) => ({ hostId: f!.hostId('h1'), deviceId })),
    );
  });

  it('Reservation counts from the decision: before the host confirms start, nobody else gets the device', async () => {
    f = await startFleet('commit');
    await silentHost('h1', ['d1']);
    const a = await f.fleet.submit({ goal: 'A [sim duration=300]' });
    await f.waitForStatus(a.taskId, 'assigned');
    const b = await f.fleet.submit({ goal: 'B [sim duration=50]' });
    await sleep(1_500);
    assert.equal((await f.fleet.get(a.taskId)).status, 'assigned', 'A is reserved but not claimed');
    assert.equal((await f.fleet.get(b.taskId)).status, 'queued', 'B does not get the reserved device');
    await f.addHost('h1', [{ deviceId: 'd1' }]); // the host comes back and claims A
    const [ra, rb] = await Promise.all([f.fleet.wait(a.taskId), f.fleet.wait(b.taskId)]);
    assert.equal(ra.status, 'done');
    assert.equal(rb.status, 'done');
    assert.ok(rb.attempts[0].assignedAt >= ra.attempts[0].endedAt!);
    await assertNoOverlappingReservations(f.client, [{ hostId: f.hostId('h1'), deviceId: 'd1' }]);
  });

  it('A runner still on its device after its attempt ended on the server (execution timeout) is stopped by the next assignment, which runs there: not charged', async () => {
    f = await startFleet('takeover');
    const { runners, calls } = recordingRunners({
      override: async (ctx) => {
        ctx.started();
        if (!ctx.taskId.startsWith('slow')) return { status: 'done', output: 'ok' };
        // Slow to stop once asked, as a command between SIGTERM and SIGKILL; the host only hears
        // of the server's timeout with its next heartbeat, so the pool frees the device first.
        await new Promise<void>((r) => ctx.signal.addEventListener('abort', () => r(), { once: true }));
        await sleep(2_000);
        return { status: 'failed', retryable: true, reason: 'aborted', message: 'stopped' };
      },
    });
    await f.addHost('h1', [{ deviceId: 'd1' }], { runners });
    const { stale: slow, next } = await timedOutThenNext('slow', 2_000);
    const n = await f.fleet.wait(next.taskId, { timeoutMs: 60_000 });
    assert.equal(n.status, 'done', JSON.stringify(n.attempts.map((a) => [a.outcome, a.reason])));
    assert.deepEqual(
      n.attempts.map((a) => [a.deviceId, a.outcome]),
      [['d1', 'done']],
      `one attempt, no dispatch failure: ${JSON.stringify(n.attempts.map((a) => [a.outcome, a.reason, a.message]))}`,
    );
    const slowCall = calls.find((c) => c.taskId === slow.taskId)!;
    assert.ok(slowCall.aborted, 'the stale runner was asked to stop');
    await assertNoOverlappingReservations(f.client, [{ hostId: f.hostId('h1'), deviceId: 'd1' }]);
  });

  it('A runner that will not stop keeps its device out of the pool until it does: the next task is refused once, waits, then runs there', async () => {
    f = await startFleet('stuck-runner');
    let release!: () => void;
    const stubborn = new Promise<void>((r) => (release = r));
    const { runners } = recordingRunners({
      override: async (ctx) => {
        ctx.started();
        if (!ctx.taskId.startsWith('stuck')) return { status: 'done', output: 'ok' };
        await stubborn; // ignores ctx.signal: a runner that does not stop when asked
        return { status: 'done', output: 'late' };
      },
    });
    await f.addHost('h1', [{ deviceId: 'd1' }], { runners, takeoverWaitMs: 500 });
    try {
      const { next } = await timedOutThenNext('stuck', 1_500);
      // Refused once (the runner outlasted the wait), then the device left the pool: no more offers.
      const waiting = await f.waitFor(
        next.taskId,
        (v) => v.attempts.length === 1 && v.attempts[0].endedAt !== undefined,
        'the first offer refused',
      );
      assert.deepEqual(
        [waiting.attempts[0].outcome, waiting.attempts[0].reason],
        ['dispatch_failed', 'device_unavailable'],
      );
      await eventually(
        async () =>
          (await f!.scheduler()).devices.find((d) => d.deviceId === 'd1')?.state === 'offline' ? true : undefined,
        'd1 out of rotation',
      );
      await sleep(3_000); // backoff 1 s, 2 s: without the fix, three refusals and a failed task by now
      const still = await f.fleet.get(next.taskId);
      assert.equal(still.status, 'queued');
      assert.equal(still.attempts.length, 1, 'no more offers while the runner holds the device');
      release();
      const n = await f.fleet.wait(next.taskId, { timeoutMs: 60_000 });
      assert.equal(n.status, 'done');
      assert.deepEqual(
        n.attempts.map((a) => a.outcome),
        ['dispatch_failed', 'done'],
      );
    } finally {
      release(); // else the host's worker waits for it at shutdown
    }
    await assertNoOverlappingReservations(f.client, [{ hostId: f.hostId('h1'), deviceId: 'd1' }]);
  });

  it('Lease expires with attempts remaining (host stops heartbeating): requeued, reservation released, expired attempt kept', async () => {
    f = await startFleet('lease-retry');
    const p = await processHost('h1', 'd1');
    await deviceKnown(1);
    const { taskId } = await f.fleet.submit({ goal: 'long [sim outcome=hang]', policy: { leaseTimeoutMs: 3_000 } });
    await f.waitForStatus(taskId, 'running');
    p.kill('SIGKILL');
    await rescueHost('h2', 'd2');
    const t = await f.waitForStatus(taskId, 'done', 30_000);
    assert.equal(t.attempts.length, 2);
    assert.equal(t.attempts[0].outcome, 'lease_expired');
    assert.equal(t.attempts[0].hostId, f.hostId('h1'));
    assert.equal(t.attempts[1].outcome, 'done');
    assert.equal(t.attempts[1].hostId, f.hostId('h2'));
    const d1 = await device(f.hostId('h1'), 'd1');
    assert.equal(d1.current, undefined);
    assert.equal(d1.recent.at(-1)?.releaseReason, 'lease_expired');
    await assertNoOverlappingReservations(f.client, [
      { hostId: f.hostId('h1'), deviceId: 'd1' },
      { hostId: f.hostId('h2'), deviceId: 'd2' },
    ]);
  });

  it('A lost lease presumes its host lost: the retry and new tasks avoid its idle devices until it reports again', async () => {
    f = await startFleet('suspect');
    // A long host timeout: without the presumption, h1 would look online (and d2 idle) for two minutes.
    const p = await f.spawnHost('h1', ['d1', 'd2'], { hostTimeoutMs: 120_000 });
    await deviceKnown(2);
    const { taskId } = await f.fleet.submit({ goal: 'long [sim outcome=hang]', policy: { leaseTimeoutMs: 2_000 } });
    await f.waitForStatus(taskId, 'running');
    p.kill('SIGKILL');
    await rescueHost('h2', 'd3');
    const a = await f.waitForStatus(taskId, 'done', 30_000);
    assert.deepEqual(
      a.attempts.map((x) => [x.hostId, x.outcome]),
      [
        [f.hostId('h1'), 'lease_expired'],
        [f.hostId('h2'), 'done'],
      ],
    );
    const s = await f.scheduler();
    const h1Devices = s.devices.filter((d) => d.hostId === f!.hostId('h1'));
    assert.equal(h1Devices.length, 2);
    assert.ok(
      h1Devices.every((d) => d.hostOnline && d.hostSuspectSince !== undefined),
      'h1 online but presumed lost',
    );
    // New work goes to the live host, not to h1's idle d2 (which would only end in an ack timeout).
    const b = await f.fleet.wait((await f.fleet.submit({ goal: 'B' })).taskId);
    assert.equal(b.status, 'done');
    assert.deepEqual(
      b.attempts.map((x) => x.hostId),
      [f.hostId('h2')],
    );
    // h1 comes back: its first snapshot after the loss proves it alive and its devices return.
    await f.spawnHost('h1', ['d1', 'd2'], { hostTimeoutMs: 120_000, restart: true });
    await eventually(async () => {
      const v = await f!.scheduler();
      const back = v.devices.filter((d) => d.hostId === f!.hostId('h1') && d.hostSuspectSince === undefined);
      return back.length === 2 ? true : undefined;
    }, 'h1 no longer presumed lost');
  });

  it('A host presumed lost after a lost lease is asked for a snapshot: back in rotation long before its next periodic one', async () => {
    f = await startFleet('suspect-ask');
    // Snapshots a minute apart, a two-minute lease on liveness: neither brings h1 back within the test.
    const p = await f.spawnHost('h1', ['d1'], { hostTimeoutMs: 120_000, snapshotIntervalMs: 60_000 });
    await deviceKnown(1);
    const { taskId } = await f.fleet.submit({ goal: 'long [sim outcome=hang]', policy: { leaseTimeoutMs: 2_000 } });
    await f.waitForStatus(taskId, 'running');
    p.pause(); // frozen past the task's lease, well within the host's
    await f.waitFor(taskId, (t) => t.attempts[0]?.outcome === 'lease_expired', 'attempt 1 lease expired', 30_000);
    await eventually(async () => {
      const d = (await f!.scheduler()).devices.find((x) => x.hostId === f!.hostId('h1'));
      return d?.hostSuspectSince !== undefined ? true : undefined;
    }, 'h1 presumed lost');
    p.resume();
    await eventually(async () => {
      const d = (await f!.scheduler()).devices.find((x) => x.hostId === f!.hostId('h1'));
      return d && d.hostSuspectSince === undefined ? true : undefined;
    }, 'h1 no longer presumed lost');
    const { events } = await f.client.workflow.getHandle(hostWorkflowId(f.hostId('h1'))).fetchHistory();
    assert.ok(
      events!.some((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'hostSnapshotNow'),
      'the host workflow asked h1 for a snapshot',
    );
    await f.fleet.cancel(taskId).catch(() => undefined);
  });

  /**
   * h1 runs a task (lease 2 s, two attempts) through `runners` behind a proxy, with an idle device
   * on h2 from before the cut; the proxy cuts h1 off from the server. The retry starts on h2 as soon
   * as the server times attempt 1 out. `rescued` is called as h2's run starts, so it can check that
   * h1's run is over by then. Resolves with when the cut was and when h2's run started.
   */
  const cutOffDuringRun = async (name: string, runners: Runners, rescued: () => void = () => undefined) => {
    f = await startFleet(name);
    const proxy = await startPartitionableProxy(testEnv().address);
    const workerConnection = await NativeConnection.connect({ address: proxy.address });
    const clientConnection = await Connection.connect({ address: proxy.address });
    try {
      // A long host timeout: nothing but the run's own lease ends it.
      const h1 = await f.addHost('h1', [{ deviceId: 'd1' }], {
        workerConnection,
        clientConnection,
        runners,
        hostTimeoutMs: 120_000,
      });
      await deviceKnown(1);
      const { taskId } = await f.fleet.submit({ goal: 'long', policy: { leaseTimeoutMs: 2_000, maxAttempts: 2 } });
      await f.waitForStatus(taskId, 'running');
      let rescuedAt: number | undefined;
      await rescueHost('h2', 'd2', () => {
        rescuedAt = Date.now();
        rescued();
      });
      await deviceKnown(2);
      const cutAt = Date.now();
      proxy.cut();
      const t = await f.waitForStatus(taskId, 'done', 30_000);
      assert.deepEqual(
        t.attempts.map((x) => [x.hostId, x.outcome]),
        [
          [f.hostId('h1'), 'lease_expired'],
          [f.hostId('h2'), 'done'],
        ],
      );
      proxy.heal();
      await h1.stop();
      return { cutAt, rescuedAt: rescuedAt! };
    } finally {
      proxy.heal();
      await f.stop();
      f = undefined;
      await workerConnection.close().catch(() => undefined);
      // clientConnection is left open: a call h1's client retries after the partition may still
      // wait out its backoff, and its retry on a closed channel throws from a timer, failing
      // whichever test runs then ("Channel has been shut down"). With the proxy gone, it fails.
      await proxy.close();
    }
  };

  it('A host cut off from the server (network partition) stops its run before the server can time its lease out, so the retry elsewhere never overlaps it', async () => {
    let stoppedAt: number | undefined;
    const held = recordingRunners({
      override: (ctx) =>
        new Promise((resolve) => {
          ctx.started();
          ctx.signal.addEventListener('abort', () => {
            stoppedAt = Date.now();
            resolve({ status: 'failed', retryable: true, reason: 'stopped', message: String(ctx.signal.reason) });
          });
        }),
    });
    const { cutAt, rescuedAt } = await cutOffDuringRun('cut-off', held.runners);
    assert.ok(stoppedAt !== undefined, 'the cut-off run stopped while h1 was still cut off');
    // h1 stops by the time its last acknowledged heartbeat's lease runs out (before the server's
    // timer, which runs from that heartbeat's arrival), so never after the retry started. (With
    // the fence counted from any contact, as before, one run in three failed here: h1 stopped
    // 1,972 ms after the cut, the retry on h2 started at 1,837 ms.)
    assert.ok(
      stoppedAt! < rescuedAt,
      `h1 stopped ${stoppedAt! - cutAt} ms after the cut, the retry on h2 started ${rescuedAt - cutAt} ms after it`,
    );
    assert.ok(stoppedAt! - cutAt < 2_000, `stopped ${stoppedAt! - cutAt} ms after the cut (lease 2 s)`);
    assert.equal(held.calls.length, 1);
    assert.equal(held.calls[0].aborted, true);
  });

  it("A cut-off host's command that ignores SIGTERM is SIGKILLed before the server can time the lease out, though its killGraceMs is longer than the lease", async () => {
    let pid: number | undefined;
    const runners: Runners = {
      ...createSimRunners(),
      goal: createCommandGoalRunner({
        command: [process.execPath, '-e', "process.on('SIGTERM', () => {}); setInterval(() => {}, 1000)"],
        goalAs: 'argument',
        exitCodes: { done: [0], retryable: [] },
        killGraceMs: 30_000,
        onSpawn: (p) => {
          pid = p;
        },
      }),
    };
    let aliveAtRescue: boolean | undefined;
    await cutOffDuringRun('cut-off-command', runners, () => (aliveAtRescue = groupAlive(pid!)));
    assert.ok(pid !== undefined, 'the command ran on h1');
    // (With the 30 s grace applied to a lost lease, as before, the command was still running here.)
    assert.equal(aliveAtRescue, false, "h1's command was still running when the retry started on h2");
  });

  it("A run far longer than its lease (2 s lease, a 9 s run: past the SDK worker's own lease + 5 s cut-off) keeps its lease to the end: done in one attempt", async () => {
    f = await startFleet('long-run');
    await f.addHost('h1', [{ deviceId: 'd1' }]);
    await deviceKnown();
    const { taskId } = await f.fleet.submit({
      goal: 'long [sim duration=9000]',
      policy: { leaseTimeoutMs: 2_000, maxAttempts: 1 },
    });
    const t = await f.fleet.wait(taskId, { timeoutMs: 60_000 });
    assert.deepEqual([t.status, t.attempts.map((x) => x.outcome)], ['done', ['done']], JSON.stringify(t.result));
  });

  it('Lease expires at the attempt limit: failed, reason lease_expired, reservation released', async () => {
    f = await startFleet('lease-limit');
    const p = await processHost('h1', 'd1');
    await deviceKnown(1);
    const { taskId } = await f.fleet.submit({
      goal: 'long [sim outcome=hang]',
      policy: { maxAttempts: 1, leaseTimeoutMs: 2_000 },
    });
    await f.waitForStatus(taskId, 'running');
    p.kill('SIGKILL');
    const t = await f.waitForStatus(taskId, 'failed', 30_000);
    assert.equal(t.result?.reason, 'lease_expired');
    assert.equal(t.attempts.length, 1);
    assert.equal(t.attempts[0].outcome, 'lease_expired');
    assert.equal((await device(f.hostId('h1'), 'd1')).current, undefined);
    assert.equal((await f.scheduler()).devices[0].reservedBy, undefined);
  });

  it('Active lease reports completion: terminal once, reservation released', async () => {
    f = await startFleet('complete');
    await f.addHost('h1', [{ deviceId: 'd1' }]);
    const { taskId } = await f.fleet.submit({ goal: 'ok [sim duration=100]' });
    const t = await f.fleet.wait(taskId);
    assert.equal(t.status, 'done');
    const d = await device(f.hostId('h1'), 'd1');
    assert.equal(d.current, undefined);
    assert.equal(d.recent.at(-1)?.leaseId, t.attempts[0].leaseId);
    assert.equal(d.recent.at(-1)?.releaseReason, 'done');
    // A repeated report for the finished attempt changes nothing.
    await assert.rejects(
      f.client.workflow.getHandle(taskWorkflowId(taskId)).executeUpdate(reportAttemptUpdate, {
        args: [
          signReport(await f.enroll('h1'), {
            taskId,
            attempt: 1,
            leaseId: t.attempts[0].leaseId,
            hostId: f.hostId('h1'),
            kind: 'started',
            at: Date.now(),
          }),
        ],
      }),
    );
    const history = await f.client.workflow.getHandle(taskWorkflowId(taskId)).fetchHistory();
    const closes = history.events!.filter(
      (e) => e.workflowExecutionCompletedEventAttributes || e.workflowExecutionFailedEventAttributes,
    );
    assert.equal(closes.length, 1);
    assert.deepEqual(await f.fleet.get(taskId), t);
  });

  it('Superseded lease reports completion (a host paused past its lease, then completes): rejected; current attempt unchanged', async () => {
    f = await startFleet('superseded');
    const p = await processHost('h1', 'd1');
    await deviceKnown(1);
    const { taskId } = await f.fleet.submit({
      goal: 'slow [sim duration=2500 steps=5]',
      policy: { leaseTimeoutMs: 3_000 },
    });
    const first = await f.waitForStatus(taskId, 'running');
    p.pause(); // SIGSTOP: no heartbeats, no snapshots; the host goes offline, the lease expires
    let finish!: () => void;
    const gate = new Promise<void>((r) => (finish = r));
    const rescue = recordingRunners({
      override: async (ctx) => {
        ctx.started();
        await gate;
        return { status: 'done', output: 'attempt 2 result' };
      },
    });
    await f.addHost('h2', [{ deviceId: 'd2' }], { runners: rescue.runners });
    const second = await f.waitFor(
      taskId,
      (t) => t.current?.attempt === 2 && t.status === 'running',
      'attempt 2 running',
      30_000,
    );
    assert.equal(second.current?.hostId, f.hostId('h2'));
    p.resume(); // the stale host wakes up, finishes its runner and reports
    await sleep(3_000);
    // A forged late report with attempt 1's lease is rejected too.
    const stale = first.current!;
    await assert.rejects(
      f.client.workflow.getHandle(taskWorkflowId(taskId)).executeUpdate(reportAttemptUpdate, {
        args: [
          signReport(await f.enroll('h1'), {
            taskId,
            attempt: 1,
            leaseId: stale.leaseId,
            hostId: stale.hostId,
            kind: 'progress',
            seq: 99,
            message: 'late',
            at: Date.now(),
          }),
        ],
      }),
      (err: unknown) => {
        assert.ok(err instanceof WorkflowUpdateFailedError);
        assert.ok(err.cause instanceof ApplicationFailure);
        assert.equal(err.cause.type, ErrorType.StaleLease);
        return true;
      },
    );
    const during = await f.fleet.get(taskId);
    assert.equal(during.current?.attempt, 2);
    assert.equal(during.status, 'running');
    assert.notEqual(during.progress?.message, 'late');
    finish();
    const t = await f.waitForStatus(taskId, 'done');
    assert.equal(t.result?.output, 'attempt 2 result');
    assert.equal(t.attempts[0].outcome, 'lease_expired');
    const runs = await taskAttemptRuns(f.client, taskId);
    assert.equal(runs.length, 2);
    assert.equal(runs[0].closeKind, 'timedOut', 'the paused attempt never completed in history');
    assert.equal(runs[1].closeKind, 'completed');
    await assertNoOverlappingReservations(f.client, [
      { hostId: f.hostId('h1'), deviceId: 'd1' },
      { hostId: f.hostId('h2'), deviceId: 'd2' },
    ]);
  });

  it('Host never picks up (ack deadline): dispatch failure, released, requeued; after the limit: failed, dispatch_failed', async () => {
    f = await startFleet('ack');
    await silentHost('h1', ['d1']);
    // The host keeps reporting (signed snapshots) but its worker never polls: alive, yet never picks
    // up. (A host that also stopped reporting is presumed lost after the first ack timeout and gets
    // no further attempts: see the lost-lease test.)
    const cred = await f.enroll('h1');
    let reporting = true;
    const reports = (async () => {
      for (let seq = 0; reporting; seq++) {
        const snapshot = {
          hostId: f!.hostId('h1'),
          pool: f!.pool,
          devices: [{ deviceId: 'd1', driverType: 'sim', tags: [], state: 'idle' as const, health: 'good' as const }],
          sentAt: Date.now(),
          seq,
          bootId: 'reports-but-never-polls',
        };
        await f!.client.workflow
          .getHandle(hostWorkflowId(f!.hostId('h1')))
          .executeUpdate(hostSnapshotUpdate, { args: [{ snapshot, sig: sign(cred, SignDomain.Snapshot, snapshot) }] })
          .catch(() => undefined);
        await sleep(300);
      }
    })();
    const { taskId } = await f.fleet.submit({
      goal: 'x',
      policy: {
        ackTimeoutMs: 1_000,
        maxDispatchFailures: 2,
        maxAttempts: 5,
        backoff: { initialMs: 100, multiplier: 2, maxMs: 1_000 },
      },
    });
    const t = await f.waitForStatus(taskId, 'failed', 30_000).finally(() => {
      reporting = false;
    });
    await reports;
    assert.equal(t.result?.reason, 'dispatch_failed');
    assert.equal(t.attempts.length, 2);
    for (const a of t.attempts) {
      assert.equal(a.outcome, 'dispatch_failed');
      assert.equal(a.reason, 'ack_timeout');
      assert.equal(a.claimedAt, undefined);
    }
    assert.ok(
      t.attempts[1].assignedAt > t.attempts[0].endedAt!,
      'the second attempt came after the first was released',
    );
    // The pool counts dispatch failures by class (exported as fleet_attempts_ended_total).
    await eventually(
      async () =>
        (await f!.scheduler()).counters.attemptEnds?.['dispatch_failed|ack_timeout'] === 2 ? true : undefined,
      'two ack timeouts counted',
    );
    assert.equal((await device(f.hostId('h1'), 'd1')).current, undefined);
    await assertNoOverlappingReservations(f.client, [{ hostId: f.hostId('h1'), deviceId: 'd1' }]);
  });

  it('Non-retryable runner error: failed at once, no retry; a definition no host has is never assigned', async () => {
    f = await startFleet('nonretry');
    await f.addHost('h1', [{ deviceId: 'd1' }]);
    const a = await f.fleet.submit({ goal: 'x [sim duration=50 outcome=fail]' });
    const b = await f.fleet.submit({ definition: 'no-such-definition' });
    const ra = await f.fleet.wait(a.taskId);
    assert.equal(ra.status, 'failed');
    assert.equal(ra.attempts.length, 1);
    assert.equal(ra.result?.reason, 'runner_failed');
    // Hosts advertise the definitions they run (device tag definition:<name>): b waits for one.
    assert.deepEqual(b.constraints.tags, ['definition:no-such-definition']);
    const rb = await f.fleet.get(b.taskId);
    assert.deepEqual([rb.status, rb.attempts.length], ['queued', 0]);
    // A host that has it runs it; the first host is free and still gets nothing of b's.
    await f.addHost('h2', [{ deviceId: 'd2' }], {
      definitions: new Map([['no-such-definition', [{ name: 's', command: ['[sim duration=10]'] }]]]),
    });
    const done = await f.fleet.wait(b.taskId, { timeoutMs: 30_000 });
    assert.equal(done.status, 'done');
    assert.deepEqual(
      done.attempts.map((x) => x.hostId),
      [f.hostId('h2')],
    );
  });
});
