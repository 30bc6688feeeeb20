/**
 * The control plane runs two workers: long-lived workflows on `controlTaskQueue`, task workflows on
 * a queue of their own, each with the workflow cache its configuration gives it.
 */
import assert from 'node:assert/strict';
import { FleetClient } from '../control-plane/client';
import { ConfigError, parseControlPlaneConfig, taskWorkflowQueue } from '../control-plane/config';
import { createControlPlaneWorker, type ControlPlaneWorkers } from '../control-plane/worker';
import { deviceWorkflowId, schedulerWorkflowId, taskWorkflowId } from '../workflows/ids';
import { testEnv, workflowBundle } from './setup';
import { startFleet, uid, type Fleet } from './helpers/fleet';

describe('control-plane workers', () => {
  const make = async (input: Record<string, unknown>): Promise<ControlPlaneWorkers> => {
    const env = testEnv();
    return createControlPlaneWorker({
      connection: env.nativeConnection,
      client: env.client,
      config: parseControlPlaneConfig({ controlTaskQueue: uid('cp-options'), ...input }),
      workflowBundle: workflowBundle(),
    });
  };
  const stop = async (w: ControlPlaneWorkers) => {
    const running = w.run();
    assert.equal(w.getState(), 'RUNNING');
    w.shutdown();
    await running;
    assert.notEqual(w.getState(), 'RUNNING');
  };

  it('long-lived workflows and tasks poll their own queues, each with its configured cache', async () => {
    const sized = await make({ maxCachedWorkflows: 12_345, maxCachedTasks: 321 });
    const plain = await make({});
    try {
      assert.equal(sized.longLived.options.maxCachedWorkflows, 12_345);
      assert.equal(sized.tasks.options.maxCachedWorkflows, 321);
      assert.equal(sized.tasks.options.taskQueue, `${sized.longLived.options.taskQueue}.tasks`);
      // Without settings: the SDK's default for the long-lived ones, 1,000 tasks.
      assert.notEqual(plain.longLived.options.maxCachedWorkflows, 12_345);
      assert.ok(plain.longLived.options.maxCachedWorkflows >= 10, 'the SDK default is at least 10');
      assert.equal(plain.tasks.options.maxCachedWorkflows, 1_000);
    } finally {
      await stop(sized);
      await stop(plain);
    }
  });

  it('cache sizes that are not positive integers, or one queue for both, are configuration errors', () => {
    for (const field of ['maxCachedWorkflows', 'maxCachedTasks']) {
      for (const bad of [0, -5, 1.5, 'many']) {
        assert.throws(
          () => parseControlPlaneConfig({ [field]: bad }),
          (err: unknown) => {
            assert.ok(err instanceof ConfigError);
            assert.match(err.message, new RegExp(field));
            return true;
          },
        );
      }
    }
    assert.throws(
      () => parseControlPlaneConfig({ controlTaskQueue: 'q', taskWorkflowTaskQueue: 'q' }),
      /taskWorkflowTaskQueue: must differ from controlTaskQueue/,
    );
    for (const field of ['controlTaskQueue', 'taskWorkflowTaskQueue']) {
      assert.throws(
        () => parseControlPlaneConfig({ [field]: 'fleet.host.lab-1' }),
        new RegExp(`${field}: "fleet.host.lab-1" is a host's task queue`),
      );
    }
    assert.equal(
      taskWorkflowQueue(parseControlPlaneConfig({ controlTaskQueue: 'q', taskWorkflowTaskQueue: 'jobs' })),
      'jobs',
    );
  });

  it('shutdown is safe before run (run then returns at once) and more than once', async () => {
    const w = await make({});
    w.shutdown();
    w.shutdown();
    await w.run(); // returns: it was shut down before it ran
    const again = await make({});
    const running = again.run();
    again.shutdown();
    again.shutdown();
    await running;
    assert.notEqual(again.getState(), 'RUNNING');
    // Both were created; release the first's native workers.
    await w.longLived.runUntil(Promise.resolve());
    await w.tasks.runUntil(Promise.resolve());
  });

  describe('on a running fleet', () => {
    let f: Fleet | undefined;
    afterEach(async () => {
      await f?.stop();
      f = undefined;
    });

    it('a submitted task runs on the task queue, the scheduler and the device on the control queue', async () => {
      f = await startFleet('queues');
      await f.addHost('q1', [{ deviceId: 'd1', driverType: 'sim' }]);
      const view = await f.fleet.submit({ goal: 'open settings [sim duration=50]' });
      const done = await f.fleet.wait(view.taskId);
      assert.equal(done.status, 'done');
      const queueOf = async (workflowId: string) =>
        (await f!.client.workflow.getHandle(workflowId).describe()).taskQueue;
      assert.equal(await queueOf(taskWorkflowId(view.taskId)), taskWorkflowQueue(f.config));
      assert.equal(await queueOf(schedulerWorkflowId(f.pool)), f.config.controlTaskQueue);
      const [{ hostId, deviceId }] = done.attempts;
      assert.equal(await queueOf(deviceWorkflowId(hostId, deviceId)), f.config.controlTaskQueue);
    });

    it('a task started on the control queue (by a submitter from before the split) still runs to its end', async () => {
      f = await startFleet('oldqueue');
      await f.addHost('o1', [{ deviceId: 'd1', driverType: 'sim' }]);
      // A client configured as before: task workflows on the control queue.
      const old = new FleetClient(f.client, { ...f.config, taskWorkflowTaskQueue: f.config.controlTaskQueue });
      const view = await old.submit({ goal: 'open settings [sim duration=50]' });
      assert.equal((await f.fleet.wait(view.taskId)).status, 'done');
      assert.equal(
        (await f.client.workflow.getHandle(taskWorkflowId(view.taskId)).describe()).taskQueue,
        f.config.controlTaskQueue,
      );
    });
  });
});
