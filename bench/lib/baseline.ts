/**
 * The baseline side of a scenario: a worker for the baseline workflow on its own task queue and
 * `hosts` in-process activity workers, one per host task queue, each with `slots` concurrent
 * activities (= devices) and the same poller count as the fleet's hosts.
 */
import { Worker } from '@temporalio/worker';
import {
  shapeClaimUpdate,
  shapeGoSignal,
  shapeHopSignal,
  shapeReserveUpdate,
  type BaselineActivities,
  type baselineTaskWorkflow,
  type ShapeActivities,
  type ShapeHop,
  type shapeTaskWorkflow,
} from '../baseline-workflows';
import type { BenchEnv } from './env';
import { currentHostPollers } from './fleet';
import { mapLimit, uid, waitUntil } from './util';

export interface ShapeVariant {
  direct?: boolean;
  clientEnqueue?: boolean;
  viaUpdates?: boolean;
  /** Through a second scheduler relay that sends its signals by a local activity (the client). */
  relayByLocalActivity?: boolean;
}

export interface BaselineFleet {
  workflowQueue: string;
  hostQueues: string[];
  /** performance.now() when the activity started, by task id. */
  starts: Map<string, number>;
  /** Starts the baseline workflow for a task on host queue `i % hosts`; resolves once started. */
  submit(taskId: string, i: number): Promise<void>;
  /**
   * Starts the relays of the fleet's message shape with empty workflows: one in the scheduler's
   * place and `devices` in the devices' places (bench/baseline-workflows.ts).
   */
  startShape(devices: number): Promise<void>;
  /**
   * The baseline task through that shape (`shapeTaskWorkflow`), via device relay `i % devices`.
   * `variant` takes hops off the path (P2's variants and P1's floor; see ShapeHop.direct,
   * ShapeInput.clientEnqueue and ShapeInput.viaUpdates).
   */
  submitShape(taskId: string, i: number, variant?: ShapeVariant): Promise<void>;
  workflowId(taskId: string): string;
  waitForCount(n: number, timeoutMs: number): Promise<true>;
  stop(): Promise<void>;
}

export async function startBaseline(be: BenchEnv, name: string, hosts: number, slots: number): Promise<BaselineFleet> {
  const suffix = uid(name);
  const workflowQueue = `bench.base.${suffix}`;
  const hostQueues = Array.from({ length: hosts }, (_, i) => `bench.base.${suffix}.h${i}`);
  const starts = new Map<string, number>();
  const activities: BaselineActivities & ShapeActivities = {
    async run(taskId) {
      if (!starts.has(taskId)) starts.set(taskId, performance.now());
    },
    async hold() {
      throw new Error('not served in-process');
    },
    async relay(hops) {
      const client = be.env.client.workflow;
      await Promise.all(
        hops.flatMap((h) => [
          client.getHandle(h.device).signal(shapeHopSignal, h),
          ...(h.direct ? [client.getHandle(h.task).signal(shapeGoSignal)] : []),
        ]),
      );
    },
    async claim({ scheduler, ...hop }) {
      const device = await be.env.client.workflow.getHandle(scheduler).executeUpdate(shapeClaimUpdate, { args: [hop] });
      await be.env.client.workflow.getHandle(device).executeUpdate(shapeReserveUpdate, { args: [hop] });
    },
  };
  const pollers = currentHostPollers();
  const workers: Worker[] = [
    await Worker.create({
      connection: be.env.nativeConnection,
      namespace: be.namespace,
      taskQueue: workflowQueue,
      workflowBundle: be.baselineBundle,
      // The shape's update variant claims by a local activity; this worker runs no other activity
      // (no activity poller on the workflow queue, as before the variant).
      activities,
      enableNonLocalActivities: false,
      identity: `bench-base-wf-${suffix}`,
    }),
  ];
  workers.push(
    ...(await mapLimit(hostQueues, 10, (taskQueue) =>
      Worker.create({
        connection: be.env.nativeConnection,
        namespace: be.namespace,
        taskQueue,
        activities,
        maxConcurrentActivityTaskExecutions: slots,
        ...(pollers !== undefined ? { maxConcurrentActivityTaskPolls: pollers } : {}),
        identity: `bench-base-${taskQueue}`,
      }),
    )),
  );
  const runs = workers.map((w) => w.run());
  const workflowId = (taskId: string) => `base/${suffix}/${taskId}`;
  const shapeScheduler = `base/${suffix}/shape-scheduler`;
  const shapeSchedulerLA = `base/${suffix}/shape-scheduler-la`;
  const shapeDevices: string[] = [];
  return {
    workflowQueue,
    hostQueues,
    starts,
    workflowId,
    async submit(taskId, i) {
      await be.env.client.workflow.start<typeof baselineTaskWorkflow>('baselineTaskWorkflow', {
        workflowId: workflowId(taskId),
        taskQueue: workflowQueue,
        args: [{ taskId, taskQueue: hostQueues[i % hostQueues.length] }],
      });
    },
    async startShape(devices) {
      // shapeSchedulerWorkflow (twice: by signals, and by a local activity) and shapeDeviceWorkflow.
      const start = (workflowId: string, workflowType: string, args: unknown[] = []) =>
        be.env.client.workflow.start(workflowType, { workflowId, taskQueue: workflowQueue, args });
      await start(shapeScheduler, 'shapeSchedulerWorkflow');
      await start(shapeSchedulerLA, 'shapeSchedulerWorkflow', [[], true]);
      shapeDevices.push(...Array.from({ length: devices }, (_, k) => `base/${suffix}/shape-device-${k}`));
      await mapLimit(shapeDevices, 10, (id) => start(id, 'shapeDeviceWorkflow'));
    },
    async submitShape(taskId, i, { relayByLocalActivity, ...variant } = {}) {
      const device = shapeDevices[i % shapeDevices.length];
      const scheduler = relayByLocalActivity ? shapeSchedulerLA : shapeScheduler;
      await be.env.client.workflow.start<typeof shapeTaskWorkflow>('shapeTaskWorkflow', {
        workflowId: workflowId(taskId),
        taskQueue: workflowQueue,
        args: [{ taskId, taskQueue: hostQueues[i % hostQueues.length], scheduler, device, ...variant }],
      });
      if (variant.clientEnqueue) {
        const hop: ShapeHop = { task: workflowId(taskId), device, direct: variant.direct };
        await be.env.client.workflow.getHandle(scheduler).signal(shapeHopSignal, hop);
      }
    },
    waitForCount: (n, timeoutMs) =>
      waitUntil(
        () => (starts.size >= n ? true : undefined),
        () => `${n} baseline activities to start (${starts.size} did)`,
        timeoutMs,
        20,
      ),
    async stop() {
      // The relays never end on their own.
      if (shapeDevices.length > 0) {
        await mapLimit([shapeScheduler, shapeSchedulerLA, ...shapeDevices], 10, (id) =>
          be.env.client.workflow.getHandle(id).terminate('bench done').catch(() => undefined),
        );
      }
      for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
      await Promise.all(runs.map((r) => r.catch(() => undefined)));
    },
  };
}
