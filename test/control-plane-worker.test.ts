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
import { temporal } from '@temporalio/proto';
import type Long from 'long';
import { schedulerConfigQuery } from '../workflows/messages';
import { ALL_SEARCH_ATTRIBUTES } from '../workflows/search-attributes';
import { ensurePools } from '../control-plane/worker';
import { eventually, startFleet, uid, type Fleet } from './helpers/fleet';
import { spawnControlPlane } from './helpers/processes';

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

  it('a namespace without the fleet search attributes: the control plane names them and how to create them, keeps running, and starts the pools once they exist', async function () {
    this.timeout(180_000);
    const env = testEnv();
    const namespace = uid('nosa');
    await env.client.workflowService.registerNamespace({
      namespace,
      // A number where the type says Long: protobufjs takes either.
      workflowExecutionRetentionPeriod: { seconds: 86_400 as unknown as Long },
    });
    await eventually(
      () =>
        env.client.workflowService
          .listWorkflowExecutions({ namespace, pageSize: 1 })
          .then(() => true)
          .catch(() => undefined),
      'the new namespace to answer',
      60_000,
    );
    const config = parseControlPlaneConfig({
      controlTaskQueue: uid('cp-nosa'),
      poolWatchMs: 2_000, // the pools are tried again at most this far apart (30 s by default)
      defaultPool: 'lab',
      pools: { lab: { strategy: 'fifo_match', maxQueueDepth: 10, agingMs: 60_000 } },
    });
    const p = spawnControlPlane(config, { TEMPORAL_NAMESPACE: namespace });
    try {
      await p.waitForOutput('control plane started', 90_000);
      assert.match(p.output(), /lacks the fleet's search attributes FleetStatus, FleetPool/);
      assert.match(
        p.output(),
        /temporal operator search-attribute create --namespace \S+ --name FleetAttempt --type Int/,
      );
      assert.match(p.output(), /"poolsReady":false/);
      assert.equal(p.child.exitCode, null, 'still running');
      const types = temporal.api.enums.v1.IndexedValueType;
      await env.client.connection.operatorService.addSearchAttributes({
        namespace,
        searchAttributes: Object.fromEntries(
          ALL_SEARCH_ATTRIBUTES.map((k) => [
            k.name,
            k.type === 'INT' ? types.INDEXED_VALUE_TYPE_INT : types.INDEXED_VALUE_TYPE_KEYWORD,
          ]),
        ),
      });
      await p.waitForOutput('pools started and configured', 120_000);
    } finally {
      p.kill('SIGTERM');
      await p.exited;
    }
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

    it('a restart with the same pool configuration sends the schedulers nothing; a changed one is applied by a signal', async () => {
      f = await startFleet('reconfigure');
      const handle = f.client.workflow.getHandle(schedulerWorkflowId(f.pool));
      // Every configuration message the scheduler ever got, across its runs: updates and signals.
      const messages = async () => {
        const seen = { updates: 0, signals: 0 };
        for await (const run of f!.client.workflow.list({ query: `WorkflowId = '${schedulerWorkflowId(f!.pool)}'` })) {
          const history = await f!.client.workflow.getHandle(run.workflowId, run.runId).fetchHistory();
          for (const e of history.events ?? []) {
            if (e.workflowExecutionUpdateAcceptedEventAttributes) seen.updates++;
            if (e.workflowExecutionSignaledEventAttributes?.signalName === 'setSchedulerConfig') seen.signals++;
          }
        }
        return seen;
      };
      const before = await messages();
      await ensurePools(f.client, f.config);
      await ensurePools(f.client, f.config);
      assert.deepEqual(await messages(), before, 'nothing sent for an unchanged configuration');
      const changed = { ...f.config, pools: { [f.pool]: { ...f.config.pools[f.pool], maxQueueDepth: 7 } } };
      await ensurePools(f.client, changed);
      // Applied when ensurePools returns (it reads the configuration back), and sent as one signal:
      // no update, which SDK 1.24 can record out of its replay order (workflows/messages.ts).
      assert.equal((await handle.query(schedulerConfigQuery)).maxQueueDepth, 7);
      assert.deepEqual(await messages(), { updates: before.updates, signals: before.signals + 1 });
      await ensurePools(f.client, changed);
      assert.deepEqual(await messages(), { updates: before.updates, signals: before.signals + 1 });
    });

    it('a scheduler that cannot answer holds back neither the other pools nor the caller: each pool is bounded', async () => {
      f = await startFleet('wedged');
      // A pool whose scheduler id is taken by a run on a queue no worker polls: it never answers a
      // query, so its configuration can only time out (as a scheduler whose workflow tasks fail would).
      const stuck = `stuck-${f.pool}`;
      await f.client.workflow.start('schedulerWorkflow', {
        workflowId: schedulerWorkflowId(stuck),
        taskQueue: uid('nobody-polls'),
        args: [{ pool: stuck, config: f.config.pools[f.pool] }],
      });
      try {
        const healthy = { ...f.config.pools[f.pool], maxQueueDepth: 9 };
        // The stuck pool first: the healthy one after it must still be configured.
        const config = { ...f.config, pools: { [stuck]: f.config.pools[f.pool], [f.pool]: healthy } };
        const started = Date.now();
        await assert.rejects(ensurePools(f.client, config, { timeoutMs: 3_000 }), (err: unknown) => {
          assert.match(String(err), new RegExp(`pool ${stuck}`));
          return true;
        });
        // One bound for the stuck pool, not one per retry; well under the default 60 s.
        assert.ok(Date.now() - started < 30_000, `took ${Date.now() - started} ms`);
        const handle = f.client.workflow.getHandle(schedulerWorkflowId(f.pool));
        assert.equal((await handle.query(schedulerConfigQuery)).maxQueueDepth, 9);
      } finally {
        await f.client.workflow.getHandle(schedulerWorkflowId(stuck)).terminate('test over');
      }
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
