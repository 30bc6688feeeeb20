/**
 * Durability: a killed control plane loses nothing; long-lived workflows continue-as-new and
 * carry every queued task and reservation across the boundary.
 */
import assert from 'node:assert/strict';
import { ensurePools } from '../control-plane/worker';
import { deviceWorkflowId, hostWorkflowId, taskWorkflowId } from '../workflows/ids';
import { deviceStateQuery, hostStateQuery, releaseDeviceSignal } from '../workflows/messages';
import { eventually, FAST_POLICY, startFleet, type Fleet } from './helpers/fleet';
import { assertNoOverlappingReservations, deviceReservationIntervals } from './helpers/invariants';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('durability', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  const deviceRuns = async () =>
    (await f!.client.workflow.getHandle(deviceWorkflowId(f!.hostId('h1'), 'd1')).query(deviceStateQuery)).runs;

  it('Killing and restarting the control-plane worker with tasks queued and running loses nothing', async () => {
    f = await startFleet('cp-kill', { controlPlane: 'process' });
    await f.addHost('h1', [{ deviceId: 'd1' }, { deviceId: 'd2' }]);
    const tasks = await Promise.all(
      Array.from({ length: 8 }, (_, i) => f!.fleet.submit({ goal: `t${i} [sim duration=2000]` })),
    );
    await eventually(async () => {
      const views = await Promise.all(tasks.map((t) => f!.fleet.get(t.taskId)));
      const running = views.filter((v) => v.status === 'running').length;
      const queued = views.filter((v) => v.status === 'queued').length;
      return running >= 1 && queued >= 1 ? true : undefined;
    }, 'some running and some queued');
    await f.stopControlPlane(); // SIGKILL
    await sleep(1_500);
    await f.startControlPlane();
    const ended = await Promise.all(tasks.map((t) => f!.fleet.wait(t.taskId)));
    assert.deepEqual(
      ended.map((t) => t.status),
      tasks.map(() => 'done'),
    );
    assert.ok(ended.every((t) => t.attempts.length <= t.policy.maxAttempts));
    await assertNoOverlappingReservations(
      f.client,
      ['d1', 'd2'].map((deviceId) => ({ hostId: f!.hostId('h1'), deviceId })),
    );
  });

  it('Scheduler, device and host workflows continue-as-new carrying their state; no task or reservation lost', async () => {
    f = await startFleet('can', { historyLimit: 40 });
    const host = await f.addHost('h1', [{ deviceId: 'd1' }], { snapshotIntervalMs: 200 });
    const holder = await f.fleet.submit({ goal: 'holder [sim outcome=hang duration=300]' });
    await f.waitForStatus(holder.taskId, 'running');
    // Queue tasks behind the held device: the scheduler's history grows past its limit with them queued.
    const queued = await Promise.all(
      Array.from({ length: 12 }, (_, i) => f!.fleet.submit({ goal: `q${i} [sim duration=50]` })),
    );
    // Grow the device's history while it is reserved (no-op releases of unknown leases) so it rolls over mid-reservation.
    const dev = f.client.workflow.getHandle(deviceWorkflowId(f.hostId('h1'), 'd1'));
    let noise = 0;
    await eventually(async () => {
      for (let i = 0; i < 5; i++)
        await dev.signal(releaseDeviceSignal, { leaseId: `not-a-lease-${noise++}`, reason: 'noise' });
      return (await deviceRuns()) >= 2 ? true : undefined;
    }, 'device rolled over');
    assert.equal((await f.fleet.get(holder.taskId)).status, 'running', 'still running across the device roll-over');
    await f.fleet.cancel(holder.taskId);
    const ended = await Promise.all(queued.map((t) => f!.fleet.wait(t.taskId)));
    assert.ok(ended.every((t) => t.status === 'done' && t.attempts.length === 1));
    assert.ok((await f.scheduler()).runsSinceStart >= 2, 'the scheduler continued-as-new');
    const hostRuns = async () =>
      (await f!.client.workflow.getHandle(hostWorkflowId(host.hostId)).query(hostStateQuery)).runs;
    await eventually(async () => ((await hostRuns()) >= 2 ? true : undefined), 'host rolled over');
    const intervals = await deviceReservationIntervals(f.client, f.hostId('h1'), 'd1');
    const held = intervals.find((i) => i.taskId === holder.taskId)!;
    assert.ok(held.end !== undefined, 'the reservation begun in one run was released in a later one');
    assert.notEqual(held.runId, held.endRunId);
    const { reservations } = await assertNoOverlappingReservations(f.client, [
      { hostId: f.hostId('h1'), deviceId: 'd1' },
    ]);
    assert.equal(reservations, 13);
  });
  it('A task terminated while holding a device: the hold expires at its deadline, never before, and the queue moves on', async function () {
    this.timeout(120_000);
    // Hold = ack 1 s + execution 3 s + 10 s grace (the least; 60 s by default); the scheduler
    // sweeps every 2 s, 1 s past the deadline.
    f = await startFleet('hold-expiry', {
      taskDefaults: { ...FAST_POLICY, ackTimeoutMs: 1_000, executionTimeoutMs: 3_000, reservationGraceMs: 10_000 },
      holdSweepMs: 2_000,
      holdSlackMs: 1_000,
    });
    await f.addHost('h1', [{ deviceId: 'd1' }]);
    const holder = await f.fleet.submit({ goal: 'holder [sim outcome=hang duration=300]' });
    const running = await f.waitForStatus(holder.taskId, 'running');
    // Terminated, not cancelled: the task workflow never releases its device (an operator's
    // `temporal workflow terminate`, or a workflow that failed for good).
    await f.client.workflow.getHandle(`task/${holder.taskId}`).terminate('test: gone without a release');
    const next = await f.fleet.submit({ goal: 'next [sim duration=50]' });
    const dev = f.client.workflow.getHandle(deviceWorkflowId(f.hostId('h1'), 'd1'));
    const held = (await dev.query(deviceStateQuery)).current!;
    assert.equal(held.taskId, holder.taskId);
    assert.equal(held.expiresAt - held.reservedAt, 14_000, 'held for ack + execution + the policy grace');
    await sleep(5_000);
    assert.equal((await f.fleet.get(next.taskId)).status, 'queued', 'the device is not freed before its deadline');
    const done = await f.fleet.wait(next.taskId);
    assert.equal(done.status, 'done');
    assert.equal(done.attempts[0].deviceId, 'd1');
    assert.ok(done.attempts[0].assignedAt >= held.expiresAt, 'assigned only after the hold deadline');
    const recent = (await dev.query(deviceStateQuery)).recent;
    assert.equal(recent.find((r) => r.leaseId === running.current!.leaseId)?.releaseReason, 'hold_expired');
    await assertNoOverlappingReservations(f.client, [{ hostId: f.hostId('h1'), deviceId: 'd1' }]);
  });

  it('Every submission admitted while the scheduler rolls over gets its answer (none left waiting)', async () => {
    f = await startFleet('can-admit', { historyLimit: 30 });
    // No device matches: every task stays queued, so admission is answered by the scheduler itself.
    const ids = Array.from({ length: 60 }, (_, i) => `roll-${i}-${Date.now()}`);
    const answered = await Promise.all(
      ids.map((taskId) =>
        Promise.race([
          f!.fleet
            .submit({ taskId, goal: 'never runs', constraints: { driverType: 'no-such-driver' } })
            .then(() => true),
          sleep(60_000).then(() => false),
        ]),
      ),
    );
    assert.equal(answered.filter((a) => !a).length, 0, 'submit calls left without an answer');
    const s = await f.scheduler();
    assert.ok(s.runsSinceStart >= 2, `the scheduler continued-as-new during the burst (runs ${s.runsSinceStart})`);
    assert.deepEqual(new Set(s.queue.map((q) => q.taskId)), new Set(ids));
    await Promise.all(ids.map((t) => f!.fleet.cancel(t)));
  });

  it('The control plane starts again after its scheduler has continued-as-new (ensurePools reaches the current run)', async () => {
    f = await startFleet('can-restart', { historyLimit: 30 });
    // Queued tasks no device matches grow the scheduler's history until it rolls over.
    const ids: string[] = [];
    await eventually(
      async () => {
        const taskId = `restart-${ids.length}-${Date.now()}`;
        await f!.fleet.submit({ taskId, goal: 'never runs', constraints: { driverType: 'no-such-driver' } });
        ids.push(taskId);
        return (await f!.scheduler()).runsSinceStart >= 2 ? true : undefined;
      },
      'the scheduler to continue-as-new',
      60_000,
      0,
    );
    // What a restarted control plane does first: attach to the running scheduler and configure it.
    await ensurePools(f.client, {
      ...f.config,
      pools: { [f.pool]: { ...f.config.pools[f.pool], maxQueueDepth: 777 } },
    });
    assert.equal((await f.scheduler()).config.maxQueueDepth, 777);
    await Promise.all(ids.map((t) => f!.fleet.cancel(t)));
  });

  it('A submission admitted while the scheduler rolls over, with a device free, hears only its assignment', async () => {
    // As many devices as tasks: every task is assigned by the round after its enqueue, whichever
    // run of the scheduler that round is in, so none needs a separate admission signal.
    f = await startFleet('can-free', { historyLimit: 30 });
    const n = 16;
    await f.addHost(
      'h1',
      Array.from({ length: n }, (_, i) => ({ deviceId: `d${i}` })),
    );
    // The pool must know the devices before the burst: a task enqueued earlier is rightly told it was admitted.
    await eventually(async () => ((await f!.scheduler()).devices.length === n ? true : undefined), 'devices known');
    const tasks = await Promise.all(
      Array.from({ length: n }, (_, i) => f!.fleet.submit({ goal: `t${i} [sim duration=1]` })),
    );
    for (const t of tasks) await f.waitForStatus(t.taskId, 'done');
    const s = await f.scheduler();
    assert.ok(s.runsSinceStart >= 2, `the scheduler continued-as-new during the burst (runs ${s.runsSinceStart})`);
    const admissions: string[] = [];
    for (const t of tasks) {
      const history = await f.client.workflow.getHandle(taskWorkflowId(t.taskId)).fetchHistory();
      const signals = (history.events ?? []).map((e) => e.workflowExecutionSignaledEventAttributes?.signalName);
      if (signals.includes('admission')) admissions.push(t.taskId);
    }
    assert.deepEqual(admissions, [], 'tasks sent an admission signal although a device took them at once');
  });
});
