/**
 * The baseline: raw Temporal on the same server. One workflow per task that runs one activity on a
 * host task queue and completes: no reservation, no scheduler, no device or host workflows.
 * Bundled on its own (bench/lib/env.ts), served by its own worker on its own task queue.
 */
import { proxyActivities } from '@temporalio/workflow';

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
