/**
 * The scheduler sends a round's signals by one local activity once there are two or more, and a
 * device takes a reservation only once: a batch sent again (the local activity run again after a
 * worker crash) changes nothing.
 */
import assert from 'node:assert/strict';
import { recordsPatch } from '../control-plane/signal-auth';
import { deviceWorkflowId, schedulerWorkflowId } from '../workflows/ids';
import { deviceReleasedSignal, deviceStateQuery, reserveDeviceSignal } from '../workflows/messages';
import type { ReservationRequest } from '../workflows/types';
import { eventually, startFleet, type Fleet } from './helpers/fleet';

/** The workflow has completed a workflow task since it got `count` events (so it handled what came before). */
async function handledSince(f: Fleet, workflowId: string, count: number): Promise<true | undefined> {
  const events = (await f.client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
  return events.slice(count).some((e) => e.workflowTaskCompletedEventAttributes) ? true : undefined;
}
const historyLength = async (f: Fleet, workflowId: string): Promise<number> =>
  ((await f.client.workflow.getHandle(workflowId).fetchHistory()).events ?? []).length;

describe('scheduler: batched sends', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  it("A round's reservations go out by one local activity; each task runs once; a reservation sent again to its device changes nothing", async () => {
    f = await startFleet('batch');
    // Three tasks wait in the queue; three devices then come at once: one round, three reservations.
    const tasks = await Promise.all([1, 2, 3].map((i) => f!.fleet.submit({ goal: `batch ${i}` })));
    await eventually(async () => ((await f!.scheduler()).queue.length === 3 ? true : undefined), 'three queued');
    await f.addHost('h1', [{ deviceId: 'd1' }, { deviceId: 'd2' }, { deviceId: 'd3' }]);
    for (const { taskId } of tasks) {
      const t = await f.waitForStatus(taskId, 'done');
      assert.equal(t.attempts.length, 1);
    }

    const events = (await f.client.workflow.getHandle(schedulerWorkflowId(f.pool)).fetchHistory()).events ?? [];
    const reserveCommands = events.filter(
      (e) => e.signalExternalWorkflowExecutionInitiatedEventAttributes?.signalName === reserveDeviceSignal.name,
    );
    const localActivities = events.filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity');
    assert.equal(reserveCommands.length, 0, 'no reservation sent by a command');
    assert.ok(localActivities.length >= 1, 'the reservations went by a local activity');

    // Every device had exactly one reservation, by a signal the control plane signed.
    const devices = ['d1', 'd2', 'd3'].map((d) => deviceWorkflowId(f!.hostId('h1'), d));
    const views = await Promise.all(devices.map((id) => f!.client.workflow.getHandle(id).query(deviceStateQuery)));
    assert.deepEqual(
      views.map((v) => v.reservations),
      [1, 1, 1],
    );
    assert.deepEqual(
      views.map((v) => v.current),
      [undefined, undefined, undefined],
    );

    // The first device's reservation sent again, as a batch run twice would: not taken.
    const had = views[0].recent.at(-1)!;
    await f.client.workflow.getHandle(devices[0]).signal(reserveDeviceSignal, {
      taskId: had.taskId,
      attempt: had.attempt,
      ...(had.submittedAt !== undefined ? { submittedAt: had.submittedAt } : {}),
      leaseId: had.leaseId,
      pool: had.pool,
      holdMs: had.holdMs,
      hostKeys: had.hostKeys,
    });
    // The device asks its patch only when it turns a reservation away as one it already had.
    await eventually(async () => {
      const h = (await f!.client.workflow.getHandle(devices[0]).fetchHistory()).events ?? [];
      return h.some((e) => recordsPatch(e, 'device-reserve-once-v1')) ? true : undefined;
    }, 'the duplicate turned away');
    const after = await f.client.workflow.getHandle(devices[0]).query(deviceStateQuery);
    assert.equal(after.current, undefined, 'the device stays free');
    assert.equal(after.reservations, 1);
  });

  it("A lease id sent again for another task (a round re-run after its workflow task was lost) is refused, not dropped: that task stays queued and runs, the holder is unaffected, and another task's word on that lease frees nothing", async function () {
    this.timeout(90_000);
    f = await startFleet('reuse');
    await f.addHost('h1', [{ deviceId: 'd1' }]);
    const device = deviceWorkflowId(f.hostId('h1'), 'd1');
    const holder = await f.fleet.submit({ goal: 'hold [sim duration=6000]' });
    const cur = await eventually(async () => {
      const c = (await f!.client.workflow.getHandle(device).query(deviceStateQuery)).current;
      return c?.taskId === holder.taskId ? c : undefined;
    }, 'the holder on d1');
    // A second task waits in the queue: the one a re-run round would have given d1 under the holder's lease.
    const other = await f.fleet.submit({ goal: 'other [sim duration=50]' });
    await eventually(
      async () => ((await f!.scheduler()).queue.some((q) => q.taskId === other.taskId) ? true : undefined),
      'the other task queued',
    );
    const reuse: ReservationRequest = {
      taskId: other.taskId,
      attempt: 1,
      leaseId: cur.leaseId,
      pool: cur.pool,
      holdMs: cur.holdMs,
      hostKeys: cur.hostKeys,
    };

    // While held: refused (the pool is told, and puts that task back), the holder keeps the device.
    await f.client.workflow.getHandle(device).signal(reserveDeviceSignal, reuse);
    await eventually(async () => {
      const h = (await f!.client.workflow.getHandle(device).fetchHistory()).events ?? [];
      return h.some((e) => recordsPatch(e, 'device-refuse-reused-lease-v1')) ? true : undefined;
    }, 'the reused lease seen as a conflict');
    let view = await f.client.workflow.getHandle(device).query(deviceStateQuery);
    assert.equal(view.refusals, 1, 'refused, not dropped as a duplicate');
    assert.equal(view.reservations, 1);
    assert.equal(view.current?.taskId, holder.taskId);
    assert.equal(view.current?.leaseId, cur.leaseId);

    // The scheduler: another task's word that this lease ended does not free the holder's hold.
    const scheduler = schedulerWorkflowId(f.pool);
    const before = await historyLength(f, scheduler);
    await f.client.workflow.getHandle(scheduler).signal(deviceReleasedSignal, {
      hostId: f.hostId('h1'),
      deviceId: 'd1',
      leaseId: cur.leaseId,
      taskId: other.taskId,
      reason: 'reused_lease_test',
    });
    await eventually(() => handledSince(f!, scheduler, before), 'the scheduler handled the release');
    const s = await f.scheduler();
    assert.equal(s.counters.attemptEnds?.['reused_lease_test|'], undefined, 'no hold freed by it');
    assert.deepEqual(
      s.devices.map((d) => d.reservedBy && { taskId: d.reservedBy.taskId, leaseId: d.reservedBy.leaseId }),
      [{ taskId: holder.taskId, leaseId: cur.leaseId }],
    );

    // Both run, once each.
    for (const { taskId } of [holder, other]) {
      const t = await f.waitForStatus(taskId, 'done', 60_000);
      assert.equal(t.attempts.length, 1);
    }

    // Once let go (in `recent`), the same lease for another task is refused too (the device is free: no holder named).
    await f.client.workflow.getHandle(device).signal(reserveDeviceSignal, { ...reuse, attempt: 2 });
    await eventually(async () => {
      const v = await f!.client.workflow.getHandle(device).query(deviceStateQuery);
      return v.refusals === 2 ? v : undefined;
    }, 'the reused lease refused once free');
    view = await f.client.workflow.getHandle(device).query(deviceStateQuery);
    assert.equal(view.current, undefined, 'the device stays free');
    assert.equal(view.reservations, 2);
  });
});
