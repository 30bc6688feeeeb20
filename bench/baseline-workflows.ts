/**
 * The baseline: raw Temporal on the same server. One workflow per task that runs one activity on a
 * host task queue and completes: no reservation, no scheduler, no device or host workflows.
 * Bundled on its own (bench/lib/env.ts), served by its own worker on its own task queue.
 */
import {
  condition,
  defineSignal,
  getExternalWorkflowHandle,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';

export interface BaselineActivities {
  /** Zero-length work: records that it started and returns. */
  run(taskId: string): Promise<void>;
  /** Holds the "device" for durationMs, heartbeating; used by the lease-recovery baseline. */
  hold(input: { taskId: string; durationMs: number; beatMs: number }): Promise<void>;
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

// ---- the fleet's message shape with nothing of the fleet in it (P2's second reference) ----

/** To a relay: pass this task workflow id on. To the task: go, run the activity. */
export const shapeHopSignal = defineSignal<[string]>('shapeHop');
export const shapeGoSignal = defineSignal('shapeGo');

export interface ShapeInput extends BaselineInput {
  /** The first relay (the scheduler's place); it passes the id to the second (the device's). */
  relay: string;
}

/**
 * The fleet's dispatch path with empty workflows: start -> signal relay 1 -> relay 1 signals relay 2
 * -> relay 2 signals back -> the activity. Four workflow tasks in series and three signals between
 * workflows, as task -> scheduler -> device -> task -> host.
 */
export async function shapeTaskWorkflow(input: ShapeInput): Promise<void> {
  let go = false;
  setHandler(shapeGoSignal, () => {
    go = true;
  });
  await getExternalWorkflowHandle(input.relay).signal(shapeHopSignal, workflowInfo().workflowId);
  await condition(() => go);
  const { run } = proxyActivities<BaselineActivities>({
    taskQueue: input.taskQueue,
    startToCloseTimeout: '1 minute',
    retry: { maximumAttempts: 1 },
  });
  await run(input.taskId);
}

/** Long-lived (terminated when the scenario ends): each id it is sent goes to `next`, or, when last, back to that task as go. */
export async function shapeRelayWorkflow(next: string | null): Promise<void> {
  const pending: string[] = [];
  setHandler(shapeHopSignal, (id) => {
    pending.push(id);
  });
  for (;;) {
    await condition(() => pending.length > 0);
    const id = pending.shift()!;
    if (next) await getExternalWorkflowHandle(next).signal(shapeHopSignal, id);
    else await getExternalWorkflowHandle(id).signal(shapeGoSignal);
  }
}
