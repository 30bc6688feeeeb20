/**
 * The baseline: raw Temporal on the same server. One workflow per task that runs one activity on a
 * host task queue and completes: no reservation, no scheduler, no device or host workflows.
 * Bundled on its own (bench/lib/env.ts), served by its own worker on its own task queue.
 */
import {
  condition,
  continueAsNew,
  defineSignal,
  defineUpdate,
  getExternalWorkflowHandle,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';

export interface BaselineActivities {
  /** Zero-length work: records that it started and returns. */
  run(taskId: string): Promise<void>;
  /** Holds the "device" for durationMs, heartbeating; used by the lease-recovery baseline. */
  hold(input: { taskId: string; durationMs: number; beatMs: number }): Promise<void>;
}

export interface ShapeActivities {
  /**
   * The shape's update variant (a local activity of the task's workflow worker): claims a device
   * from the scheduler relay by an update, then reserves it on the device relay by another.
   */
  claim(hop: ShapeHop & { scheduler: string }): Promise<void>;
  /**
   * The scheduler relay's local-activity variant: sends a batch of hops by the client (each to its
   * device relay, and to its task when direct) instead of by SignalExternalWorkflowExecution commands.
   */
  relay(hops: ShapeHop[]): Promise<void>;
}

export interface BaselineInput {
  taskId: string;
  /** The host task queue that runs the activity. */
  taskQueue: string;
}

export async function baselineTaskWorkflow(input: BaselineInput): Promise<void> {
  const { run } = proxyActivities<BaselineActivities>({
    taskQueue: input.taskQueue,
    startToCloseTimeout: '1 minute',
    retry: { maximumAttempts: 1 },
  });
  await run(input.taskId);
}

export interface BaselineLeaseInput {
  taskId: string;
  taskQueue: string;
  durationMs: number;
  /** The activity's heartbeat timeout: the baseline's "lease". */
  heartbeatTimeoutMs: number;
}

/** Raw Temporal's own recovery: heartbeat timeout, then the activity retry (default 1 s initial interval). */
export async function baselineLeaseWorkflow(input: BaselineLeaseInput): Promise<void> {
  const { hold } = proxyActivities<BaselineActivities>({
    taskQueue: input.taskQueue,
    startToCloseTimeout: '1 hour',
    heartbeatTimeout: input.heartbeatTimeoutMs,
    retry: { maximumAttempts: 5 },
  });
  await hold({ taskId: input.taskId, durationMs: input.durationMs, beatMs: Math.floor(input.heartbeatTimeoutMs / 3) });
}

// ---- the fleet's message shape with nothing of the fleet in it (P1's and P2's second reference) ----

/** A task on its way: its workflow id and the device relay it goes through. */
export interface ShapeHop {
  task: string;
  device: string;
  /**
   * The scheduler relay tells the task itself, in the same workflow task as the device relay, and
   * the device relay only takes note: the device off the task's path (a P2 variant, measured to
   * see what a hop less would give; the fleet does not work this way).
   */
  direct?: boolean;
}

/** To a relay: pass this hop on. */
export const shapeHopSignal = defineSignal<[ShapeHop]>('shapeHop');
/** To the task: go, run the activity. */
export const shapeGoSignal = defineSignal('shapeGo');
/** To the scheduler relay when the task's activity is over (the fleet's taskReleased). */
export const shapeReleasedSignal = defineSignal<[string]>('shapeReleased');
/** The update variant: to the scheduler relay, then to the device relay; each answers at once. */
export const shapeClaimUpdate = defineUpdate<string, [ShapeHop]>('shapeClaim');
export const shapeReserveUpdate = defineUpdate<string, [ShapeHop]>('shapeReserve');

export interface ShapeInput extends BaselineInput {
  /** The scheduler's place: one relay workflow per run. */
  scheduler: string;
  /** The device's place: the relay workflow the scheduler relay passes this task to. */
  device: string;
  /** See ShapeHop.direct. */
  direct?: boolean;
  /** The submitter signals the scheduler relay after the start; the task sends nothing first. */
  clientEnqueue?: boolean;
  /**
   * No signals before the activity: the task's first workflow task runs a local activity that
   * claims a device from the scheduler relay by an update and reserves it on the device relay by a
   * second update, then schedules the activity in the same workflow task.
   */
  viaUpdates?: boolean;
}

/**
 * The fleet's task path with empty workflows: start -> signal the scheduler relay -> it signals a
 * device relay -> that signals the task -> the activity -> a release signal to the scheduler relay.
 * Four workflow tasks in series before the activity and three signals between workflows, as task
 * -> scheduler -> device -> task -> host, then the release the fleet's task sends its pool.
 * P2's variants (input.direct, input.clientEnqueue, input.viaUpdates) take hops off that path.
 */
export async function shapeTaskWorkflow(input: ShapeInput): Promise<void> {
  let go = false;
  setHandler(shapeGoSignal, () => {
    go = true;
  });
  const scheduler = getExternalWorkflowHandle(input.scheduler);
  if (input.viaUpdates) {
    const { claim } = proxyLocalActivities<ShapeActivities>({ startToCloseTimeout: '10 seconds' });
    await claim({ task: workflowInfo().workflowId, device: input.device, scheduler: input.scheduler });
    go = true;
  } else if (!input.clientEnqueue) {
    await scheduler.signal(shapeHopSignal, { task: workflowInfo().workflowId, device: input.device, direct: input.direct });
  }
  await condition(() => go);
  const { run } = proxyActivities<BaselineActivities>({
    taskQueue: input.taskQueue,
    startToCloseTimeout: '1 minute',
    retry: { maximumAttempts: 1 },
  });
  await run(input.taskId);
  await scheduler.signal(shapeReleasedSignal, input.taskId);
}

/** Continue-as-new point of the scheduler relay: the fleet's schedulers roll over at 1,500 events. */
const SHAPE_ROLL_EVENTS = 1_500;

/**
 * The scheduler's place: every workflow task passes on all hops that arrived, each to its device
 * relay (the fleet's scheduler batches its reserve signals the same way). Long-lived: it rolls
 * over like the fleet's scheduler and is terminated when the scenario ends.
 */
export async function shapeSchedulerWorkflow(carried: ShapeHop[] = [], byLocalActivity = false): Promise<void> {
  const pending = [...carried];
  const { relay } = proxyLocalActivities<ShapeActivities>({ startToCloseTimeout: '30 seconds' });
  setHandler(shapeHopSignal, (h) => {
    pending.push(h);
  });
  setHandler(shapeReleasedSignal, () => undefined);
  setHandler(shapeClaimUpdate, (h) => h.device);
  for (;;) {
    await condition(() => pending.length > 0);
    const batch = pending.splice(0);
    if (byLocalActivity) await relay(batch);
    else
      await Promise.all(
        batch.flatMap((h) => [
          getExternalWorkflowHandle(h.device).signal(shapeHopSignal, h),
          ...(h.direct ? [getExternalWorkflowHandle(h.task).signal(shapeGoSignal)] : []),
        ]),
      );
    if (workflowInfo().historyLength >= SHAPE_ROLL_EVENTS)
      await continueAsNew<typeof shapeSchedulerWorkflow>(pending, byLocalActivity);
  }
}

/** The device's place: passes each hop back to its task as go. Terminated when the scenario ends. */
export async function shapeDeviceWorkflow(): Promise<void> {
  const pending: ShapeHop[] = [];
  setHandler(shapeHopSignal, (h) => {
    pending.push(h);
  });
  setHandler(shapeReserveUpdate, (h) => h.task);
  for (;;) {
    await condition(() => pending.length > 0);
    const batch = pending.splice(0).filter((h) => !h.direct);
    await Promise.all(batch.map((h) => getExternalWorkflowHandle(h.task).signal(shapeGoSignal)));
  }
}
