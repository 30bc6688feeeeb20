/** Task defaults, validation and retry arithmetic. Pure and sandbox-safe. */
import { Reason } from './errors';
import { isValidId, ID_RULE } from './ids';
import type { TaskInput, TaskPolicy, TaskView } from './types';

export const DEFAULT_POLICY: TaskPolicy = {
  maxAttempts: 3,
  maxDispatchFailures: 3,
  backoff: { initialMs: 1_000, multiplier: 2, maxMs: 60_000 },
  ackTimeoutMs: 30_000,
  leaseTimeoutMs: 20_000,
  executionTimeoutMs: 60 * 60_000,
};

/**
 * Extra time a device stays reserved past the attempt's own deadlines before it frees itself, when
 * the policy does not set reservationGraceMs.
 */
export const RESERVATION_GRACE_MS = 60_000;
/** The least reservationGraceMs a policy may set: twice RESERVATION_SAFETY_MS. */
export const MIN_RESERVATION_GRACE_MS = 10_000;
/** An attempt must end at least this long before its device's hold deadline. */
export const RESERVATION_SAFETY_MS = 5_000;
/** Progress reports a task accepts in all (the rest stay in heartbeat details): bounds its history. */
export const MAX_PROGRESS_REPORTS = 1_000;
/** Upper bound on maxAttempts, so a task's history stays bounded. */
export const MAX_ATTEMPTS_LIMIT = 100;
/**
 * The longest delay Node's timers take (2^31 - 1 ms, about 24.8 days): setTimeout, and execFile's
 * `timeout`, turn anything longer into about 1 ms. Every setting a host waits out with a timer
 * (host config, a step's timeoutMs however it arrives) is bounded by it.
 */
export const MAX_TIMER_MS = 2_147_483_647;
export const MAX_TIMER_MESSAGE = `at most ${MAX_TIMER_MS} ms (2^31 - 1, about 24.8 days): Node fires a longer timer at once`;
/**
 * The shortest lease a task may ask for. The host heartbeats every quarter lease and must have an
 * answer within it (host-worker/lease.ts): below a second that is shorter than a round trip to a
 * server across a network, and a healthy run would stop itself.
 */
export const MIN_LEASE_TIMEOUT_MS = 1_000;
export const LEASE_MIN_MESSAGE = `at least ${MIN_LEASE_TIMEOUT_MS} ms (the host heartbeats every quarter lease)`;

/** A task policy's durations, each of which ends up in a timer (the host's, or a date the workflows compute). */
const POLICY_DURATIONS = [
  'ackTimeoutMs',
  'leaseTimeoutMs',
  'executionTimeoutMs',
  'maxQueueWaitMs',
  'reservationGraceMs',
] as const;

/**
 * What a policy's durations may not be, beyond their type: longer than MAX_TIMER_MS (a host's timer
 * would fire at once, and a date past JavaScript's last would stop a task or a device workflow for
 * good), or a lease shorter than MIN_LEASE_TIMEOUT_MS. Checked by the clients and by the task
 * workflow (patched: a task started before the check replays as it ran).
 */
export function policyBoundProblems(p: TaskPolicy): string[] {
  const problems: string[] = [];
  for (const key of POLICY_DURATIONS) {
    const v = p[key];
    if (typeof v === 'number' && v > MAX_TIMER_MS) problems.push(`policy.${key}: ${MAX_TIMER_MESSAGE}`);
  }
  for (const key of ['initialMs', 'maxMs'] as const) {
    const v = p.backoff?.[key];
    if (typeof v === 'number' && v > MAX_TIMER_MS) problems.push(`policy.backoff.${key}: ${MAX_TIMER_MESSAGE}`);
  }
  if (typeof p.leaseTimeoutMs === 'number' && p.leaseTimeoutMs > 0 && p.leaseTimeoutMs < MIN_LEASE_TIMEOUT_MS) {
    problems.push(`policy.leaseTimeoutMs: ${LEASE_MIN_MESSAGE}`);
  }
  return problems;
}

/**
 * How long a device stays reserved for one attempt unless released. `useGrace` false holds to the
 * default grace (a task a control plane from before reservationGraceMs started replays with it).
 */
export function reservationHoldMs(policy: TaskPolicy, useGrace = true): number {
  const grace = useGrace ? (policy.reservationGraceMs ?? RESERVATION_GRACE_MS) : RESERVATION_GRACE_MS;
  return policy.ackTimeoutMs + policy.executionTimeoutMs + grace;
}

/**
 * The wait before the next attempt, counted from the failed attempt's last sign of life. A lost
 * lease means the host was silent for a whole lease, a missed ack deadline that nobody picked the
 * attempt up for ackTimeoutMs: that silence already counts toward the backoff, so a task whose host
 * died is retried elsewhere as soon as the loss is known (unless the backoff is longer still).
 */
export function retryDelayMs(
  policy: TaskPolicy,
  failedAttempt: number,
  ended: { outcome: string; reason?: string },
): number {
  const silentMs =
    ended.outcome === 'lease_expired'
      ? policy.leaseTimeoutMs
      : ended.outcome === 'dispatch_failed' && ended.reason === Reason.AckTimeout
        ? policy.ackTimeoutMs
        : 0;
  return Math.max(0, backoffDelayMs(policy, failedAttempt) - silentMs);
}

/** Delay before attempt `failedAttempt + 1`: initial * multiplier^(failedAttempt-1), capped. */
export function backoffDelayMs(policy: TaskPolicy, failedAttempt: number): number {
  const { initialMs, multiplier, maxMs } = policy.backoff;
  const raw = initialMs * Math.pow(multiplier, Math.max(0, failedAttempt - 1));
  return Math.min(maxMs, Math.round(raw));
}

const positiveInt = (v: unknown): boolean => typeof v === 'number' && Number.isInteger(v) && v > 0;

/** Every problem with a task input, as `path: message`; empty when the input is valid. */
export function validateTaskInput(input: TaskInput): string[] {
  const problems: string[] = [];
  if (!input || typeof input !== 'object') return ['input: must be an object'];
  if (!isValidId(input.taskId)) problems.push(`taskId: ${ID_RULE}`);
  if (!isValidId(input.pool)) problems.push(`pool: ${ID_RULE}`);
  const work = input.work;
  if (!work || (work.kind !== 'goal' && work.kind !== 'workflow')) {
    problems.push('work.kind: must be "goal" or "workflow"');
  } else if (work.kind === 'goal' && (typeof work.goal !== 'string' || work.goal.trim() === '')) {
    problems.push('work.goal: must be a non-empty string');
  } else if (work.kind === 'workflow' && !isValidId(work.definition)) {
    problems.push(`work.definition: ${ID_RULE}`);
  }
  const c = input.constraints;
  if (!c || !Array.isArray(c.tags) || c.tags.some((t) => typeof t !== 'string' || t === '')) {
    problems.push('constraints.tags: must be an array of non-empty strings');
  }
  if (typeof input.priority !== 'number' || !Number.isFinite(input.priority))
    problems.push('priority: must be a number');
  const p = input.policy;
  if (!p) {
    problems.push('policy: required');
  } else {
    for (const key of [
      'maxAttempts',
      'maxDispatchFailures',
      'ackTimeoutMs',
      'leaseTimeoutMs',
      'executionTimeoutMs',
    ] as const) {
      if (!positiveInt(p[key])) problems.push(`policy.${key}: must be a positive integer`);
    }
    if (p.maxQueueWaitMs !== undefined && !positiveInt(p.maxQueueWaitMs)) {
      problems.push('policy.maxQueueWaitMs: must be a positive integer when given');
    }
    if (
      p.reservationGraceMs !== undefined &&
      !(positiveInt(p.reservationGraceMs) && p.reservationGraceMs >= MIN_RESERVATION_GRACE_MS)
    ) {
      problems.push(`policy.reservationGraceMs: must be an integer of at least ${MIN_RESERVATION_GRACE_MS} when given`);
    }
    // The clients refuse more too; this holds for a task started around them, so its history stays bounded.
    if (positiveInt(p.maxAttempts) && p.maxAttempts > MAX_ATTEMPTS_LIMIT) {
      problems.push(`policy.maxAttempts: at most ${MAX_ATTEMPTS_LIMIT}`);
    }
    if (
      !p.backoff ||
      !(p.backoff.initialMs >= 0) ||
      !(p.backoff.multiplier >= 1) ||
      !(p.backoff.maxMs >= p.backoff.initialMs)
    ) {
      problems.push('policy.backoff: needs initialMs >= 0, multiplier >= 1, maxMs >= initialMs');
    }
  }
  return problems;
}

/** A task's view before anything happened to it: what the workflow starts from, and what submit returns. */
export function initialTaskView(input: TaskInput, submittedAt: number): TaskView {
  return {
    taskId: input.taskId,
    pool: input.pool,
    status: 'queued',
    work: input.work,
    constraints: input.constraints,
    priority: input.priority,
    owner: input.owner,
    policy: input.policy,
    submittedAt,
    attempts: [],
    consecutiveDispatchFailures: 0,
    progressReports: 0,
    cancelRequested: false,
    admitted: false,
  };
}
