/**
 * The scheduler sends a round's signals by one local activity once there are two or more, and a
 * device takes a reservation only once: a batch sent again (the local activity run again after a
 * worker crash) changes nothing.
 */
import assert from 'node:assert/strict';
import { recordsPatch } from '../control-plane/signal-auth';
import { deviceWorkflowId, schedulerWorkflowId } from '../workflows/ids';
import { deviceStateQuery, reserveDeviceSignal } from '../workflows/messages';
import { eventually, startFleet, type Fleet } from './helpers/fleet';

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
});
