/**
 * Task views as the API shows them: an explicit whitelist of fields (no lease id, ever), times as
 * ISO 8601.
 */
import type { AttemptRecord, TaskView } from '../../../workflows/types';
import { iso } from '../schemas';
import type { AttemptResource, QueueInfo, TaskResource } from './schemas';

export function presentAttempt(a: AttemptRecord): AttemptResource {
  return {
    attempt: a.attempt,
    hostId: a.hostId,
    deviceId: a.deviceId,
    assignedAt: iso(a.assignedAt)!,
    ackDeadline: iso(a.ackDeadline)!,
    claimedAt: iso(a.claimedAt),
    startedAt: iso(a.startedAt),
    lastHeartbeatAt: iso(a.lastHeartbeatAt),
    endedAt: iso(a.endedAt),
    outcome: a.outcome,
    reason: a.reason,
    message: a.message,
  };
}

export function presentTask(v: TaskView, queue?: QueueInfo): TaskResource {
  const work: TaskResource['work'] =
    v.work.kind === 'goal'
      ? { kind: 'goal', goal: v.work.goal }
      : { kind: 'workflow', definition: v.work.definition, ...(v.work.steps ? { steps: v.work.steps } : {}) };
  return {
    taskId: v.taskId,
    pool: v.pool,
    owner: v.owner,
    status: v.status,
    work,
    constraints: {
      driverType: v.constraints.driverType,
      tags: [...v.constraints.tags],
      hostId: v.constraints.hostId,
      deviceId: v.constraints.deviceId,
    },
    priority: v.priority,
    policy: {
      maxAttempts: v.policy.maxAttempts,
      maxDispatchFailures: v.policy.maxDispatchFailures,
      backoff: {
        initialMs: v.policy.backoff.initialMs,
        multiplier: v.policy.backoff.multiplier,
        maxMs: v.policy.backoff.maxMs,
      },
      ackTimeoutMs: v.policy.ackTimeoutMs,
      leaseTimeoutMs: v.policy.leaseTimeoutMs,
      executionTimeoutMs: v.policy.executionTimeoutMs,
      ...(v.policy.maxQueueWaitMs !== undefined ? { maxQueueWaitMs: v.policy.maxQueueWaitMs } : {}),
      ...(v.policy.reservationGraceMs !== undefined ? { reservationGraceMs: v.policy.reservationGraceMs } : {}),
    },
    submittedAt: iso(v.submittedAt)!,
    attempts: v.attempts.map(presentAttempt),
    current: v.current ? presentAttempt(v.current) : undefined,
    nextAttemptAt: iso(v.nextAttemptAt),
    consecutiveDispatchFailures: v.consecutiveDispatchFailures,
    progress: v.progress ? { seq: v.progress.seq, message: v.progress.message, at: iso(v.progress.at)! } : undefined,
    result: v.result
      ? {
          status: v.result.status,
          reason: v.result.reason,
          message: v.result.message,
          output: v.result.output,
          attempts: v.result.attempts,
          finishedAt: iso(v.result.finishedAt)!,
        }
      : undefined,
    cancelRequested: v.cancelRequested,
    queue,
    ...('incomplete' in v && typeof v.incomplete === 'string' ? { incomplete: v.incomplete } : {}),
  };
}
