/** Plain data shared by workflows, the control plane, the host agent and tests. No runtime code. */
import type { HostPublicKeys } from './identity';

export type TaskStatus =
  | 'queued' // admitted, waiting for a device (or for its next attempt: see nextAttemptAt)
  | 'assigned' // a device is reserved for the attempt; the host has not claimed it yet
  | 'dispatched' // the owning host claimed the attempt
  | 'running' // the host confirmed the runner started
  | 'done'
  | 'failed'
  | 'cancelled'
  | 'rejected'; // never admitted (queue full, unknown pool, invalid input)

export const TERMINAL_STATUSES: readonly TaskStatus[] = ['done', 'failed', 'cancelled', 'rejected'];

/** Every status, in lifecycle order. */
export const TASK_STATUSES = [
  'queued',
  'assigned',
  'dispatched',
  'running',
  'done',
  'failed',
  'cancelled',
  'rejected',
] as const satisfies readonly TaskStatus[];

/**
 * The statuses the FleetStatus search attribute takes (visibility, the Web UI, list filters,
 * metrics). `assigned` and `dispatched` last about one workflow task on a healthy host, so they
 * are not worth an upsert (a billed action) each: while in them, FleetStatus still says `queued`;
 * the task's own view (query, REST GET) has the exact status.
 */
export const INDEXED_STATUSES = [
  'queued',
  'running',
  'done',
  'failed',
  'cancelled',
  'rejected',
] as const satisfies readonly TaskStatus[];
export type IndexedStatus = (typeof INDEXED_STATUSES)[number];

export interface WorkflowStep {
  name: string;
  /** argv array: never interpolated into a shell string. */
  command: string[];
  timeoutMs?: number;
}

export type TaskWork =
  { kind: 'goal'; goal: string } | { kind: 'workflow'; definition: string; steps?: WorkflowStep[] };

export interface TaskConstraints {
  driverType?: string;
  /** Every tag listed must be present on the device. */
  tags: string[];
  /** Pin to one host and/or one device. */
  hostId?: string;
  deviceId?: string;
}

export interface BackoffPolicy {
  initialMs: number;
  multiplier: number;
  maxMs: number;
}

export interface TaskPolicy {
  maxAttempts: number;
  /** Consecutive transient dispatch failures (ack deadline missed, device gone) before `dispatch_failed`. */
  maxDispatchFailures: number;
  backoff: BackoffPolicy;
  /** Ack deadline: the owning host must claim the attempt within this (activity schedule-to-start). */
  ackTimeoutMs: number;
  /** Lease: the host must heartbeat within this (activity heartbeat timeout). */
  leaseTimeoutMs: number;
  /** Hard cap of one attempt once claimed (activity start-to-close). */
  executionTimeoutMs: number;
  /**
   * How long one attempt may wait in the queue for a device; then the task fails (`queue_timeout`).
   * Absent: it waits as long as it takes (a device may come back or join later).
   */
  maxQueueWaitMs?: number;
  /**
   * How long a device stays reserved past the attempt's ack deadline and execution timeout when
   * nobody releases it (its task terminated, say); then the device frees itself. Absent:
   * RESERVATION_GRACE_MS (60 s). At least MIN_RESERVATION_GRACE_MS (10 s).
   */
  reservationGraceMs?: number;
}

export interface TaskInput {
  taskId: string;
  pool: string;
  work: TaskWork;
  constraints: TaskConstraints;
  priority: number;
  owner?: string;
  policy: TaskPolicy;
  /** Epoch ms; the workflow fills it from its own start time when absent. */
  submittedAt?: number;
  /**
   * Set by every submit of this build: the end of an attempt goes to the pool's scheduler, which
   * passes it on to the device (on the device's next reservation when one follows at once). Tasks
   * started by older builds lack it and release at the device directly, as their histories recorded.
   */
  releaseViaPool?: boolean;
}

export type AttemptOutcome =
  | 'done'
  | 'failed' // runner failed, terminal
  | 'retryable_failure' // runner or host failed, retryable
  | 'lease_expired'
  | 'dispatch_failed' // ack deadline missed / device unavailable: never started
  | 'execution_timeout'
  | 'cancelled';

export interface AttemptRecord {
  attempt: number;
  leaseId: string;
  hostId: string;
  deviceId: string;
  assignedAt: number;
  /** The host must claim before this (ack deadline). */
  ackDeadline: number;
  leaseTimeoutMs: number;
  claimedAt?: number;
  startedAt?: number;
  /**
   * When the host's last report (claim, started, progress) reached the task. The lease itself is
   * renewed by activity heartbeats on the server, which do not reach the task's history.
   */
  lastHeartbeatAt?: number;
  endedAt?: number;
  outcome?: AttemptOutcome;
  reason?: string;
  message?: string;
}

export interface TaskProgress {
  seq: number;
  message: string;
  at: number;
}

export interface TaskResult {
  status: 'done' | 'failed' | 'cancelled' | 'rejected';
  reason?: string;
  message?: string;
  output?: string;
  attempts: number;
  finishedAt: number;
}

export interface TaskView {
  taskId: string;
  pool: string;
  status: TaskStatus;
  work: TaskWork;
  constraints: TaskConstraints;
  priority: number;
  owner?: string;
  policy: TaskPolicy;
  submittedAt: number;
  attempts: AttemptRecord[];
  current?: AttemptRecord;
  nextAttemptAt?: number;
  consecutiveDispatchFailures: number;
  progress?: TaskProgress;
  /** Progress reports accepted so far (bounded by MAX_PROGRESS_REPORTS). */
  progressReports: number;
  result?: TaskResult;
  cancelRequested: boolean;
  /** The pool admitted the task (its answer, or a device's assignment, arrived). Absent in views of tasks from before it existed. */
  admitted?: boolean;
}

/** What a host reports of one device. */
export type DeviceState = 'idle' | 'busy' | 'offline';
export type DeviceHealth = 'good' | 'unhealthy' | 'maintenance';

export interface DeviceSnapshot {
  deviceId: string;
  driverType: string;
  tags: string[];
  state: DeviceState;
  health: DeviceHealth;
  /** Defaults to the host's pool. */
  pool?: string;
}

/**
 * What assignment depends on in a host's device list, in a stable order: busy/idle flips and
 * timestamps are left out on purpose (the pools track those). The host sends a snapshot when this
 * changes, and the host workflow publishes to the pools when it changes; both read it from here.
 * `defaultPool` stands in for a device without a pool of its own. The host workflow compares the
 * JSON of it with a value carried across continue-as-new, so its shape must not change.
 */
export function assignmentDevices(
  devices: readonly DeviceSnapshot[],
  defaultPool?: string,
): { id: string; t: string; tags: string[]; h: DeviceHealth; off: boolean; p: string | undefined }[] {
  return devices
    .map((d) => ({
      id: d.deviceId,
      t: d.driverType,
      tags: [...d.tags].sort(),
      h: d.health,
      off: d.state === 'offline',
      p: d.pool ?? defaultPool,
    }))
    .sort((a, b) => (a.id < b.id ? -1 : 1));
}

export interface HostSnapshot {
  hostId: string;
  pool: string;
  devices: DeviceSnapshot[];
  sentAt: number;
  /** Monotonic per host process; older snapshots never overwrite newer ones. */
  seq: number;
  /** Distinguishes host process incarnations (a restart resets seq). */
  bootId: string;
}

export interface SignedSnapshot {
  snapshot: HostSnapshot;
  /** Ed25519 signature by the host over the snapshot (domain fleet.snapshot.v1). */
  sig: string;
}

/**
 * How a host's liveness session ended (host-worker/session.ts). `stopping`: the host is shutting
 * down and says so, signed over { hostId, runId, activityId, bootId, stopping: true } (domain
 * fleet.session.v1); otherwise the session ran its length and the host workflow starts the next.
 */
export interface HostSessionEnd {
  stopping: boolean;
  /** The stopping process (its snapshots' bootId). */
  bootId?: string;
  sig?: string;
}

/** The scheduler's view of one device. */
export interface PoolDevice {
  hostId: string;
  deviceId: string;
  driverType: string;
  tags: string[];
  state: DeviceState;
  health: DeviceHealth;
  hostOnline: boolean;
  hostDrained: boolean;
  deviceDrained: boolean;
  /**
   * Set (in the scheduler's view) while the host is presumed lost: an attempt on it lost its lease
   * or was never picked up. None of its devices gets work until a snapshot verified after that arrives.
   */
  hostSuspectSince?: number;
}

export interface ReservationRequest {
  taskId: string;
  attempt: number;
  /** The task's submission (its `submittedAt`), which the assignment names. */
  submittedAt?: number;
  leaseId: string;
  pool: string;
  /** The owning host's enrolled public keys: the task verifies the host's reports and seals its payload with them. */
  hostKeys: HostPublicKeys;
  /** The device frees itself after this long even if nobody releases it (hard cap). */
  holdMs: number;
  /**
   * The holder this pool's scheduler learned had ended (the task told it): the device applies it
   * first, if that lease is still the one it holds, so a release rides on the next reservation.
   */
  release?: ReleaseNote;
}

/** The end of a lease: which one, and why. */
export interface ReleaseNote {
  leaseId: string;
  /** How the attempt ended (done, lease_expired, dispatch_failed, cancelled, ...). */
  reason: string;
  /** The finer class, e.g. ack_timeout / device_unavailable for a dispatch failure. */
  detail?: string;
}

export interface Reservation extends ReservationRequest {
  hostId: string;
  deviceId: string;
  reservedAt: number;
  expiresAt: number;
}

export interface Assignment {
  taskId: string;
  attempt: number;
  /** The submission it is for: a task submitted anew under the id takes it as a stray. */
  submittedAt?: number;
  leaseId: string;
  hostId: string;
  deviceId: string;
  reservedAt: number;
  hostKeys: HostPublicKeys;
}

/** What the task workflow hands to the owning host's activity. */
export interface HostAssignment {
  taskId: string;
  attempt: number;
  leaseId: string;
  hostId: string;
  deviceId: string;
  work: TaskWork;
  leaseTimeoutMs: number;
}

/** What the host activity returns when its runner finished (done or a classified failure). */
export interface RunOutcome {
  status: 'done' | 'failed';
  retryable: boolean;
  /** The host could not take the attempt (device gone, busy, wrong host): a dispatch failure. */
  dispatchFailure?: boolean;
  reason?: string;
  message?: string;
  output?: string;
  claimedAt: number;
  startedAt?: number;
  finishedAt: number;
  lastProgressSeq: number;
  /** The last progress line (a run shorter than the report delay sent none; see host-worker/activities). */
  lastProgress?: string;
}

/**
 * A value sealed to one host: the control plane's payload codec encrypts any payload that starts
 * with `sealedFor` to that host's box key, so only that host can read it.
 */
export interface Sealed<T> {
  sealedFor: { hostId: string; box: string };
  body: T;
}

/** The activity's result: the outcome signed by the host (domain fleet.result.v1). */
export interface SignedRunOutcome {
  outcome: RunOutcome;
  /** Ed25519 signature over { taskId, attempt, leaseId, hostId, outcome }. */
  sig: string;
}

export type AttemptReportKind = 'claimed' | 'started' | 'progress';

/** A host's report about a running attempt; fenced by attempt and leaseId. */
export interface AttemptReport {
  taskId: string;
  attempt: number;
  leaseId: string;
  hostId: string;
  kind: AttemptReportKind;
  at: number;
  seq?: number;
  message?: string;
  /** On a `started` report that stands for the claim too: when the host claimed the attempt. */
  claimedAt?: number;
  /** Ed25519 signature by the host over the report without `sig` (domain fleet.report.v1). */
  sig: string;
}
