/**
 * Every signal, update and query of the fleet, in one module that workflows and clients share.
 * Naming rule: the const is the wire name plus its kind (`reserveDevice` -> `reserveDeviceSignal`).
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type {
  Assignment,
  AttemptReport,
  DeviceSnapshot,
  PoolDevice,
  ReleaseNote,
  Reservation,
  ReservationRequest,
  SignedSnapshot,
  TaskConstraints,
  TaskView,
} from './types';
import type { HostPublicKeys } from './identity';

// ---- scheduler/<pool> ----
export interface EnqueueRequest {
  taskId: string;
  constraints: TaskConstraints;
  priority: number;
  submittedAt: number;
  attempt: number;
  holdMs: number;
  /** First enqueue of the task: subject to the admission limit and answered with `admission`. */
  first: boolean;
  /**
   * Devices (`deviceKey`) where this task's earlier attempts ended without success. The pool gives
   * a retry another matching device when the pool has one that could serve it, even if it has to
   * wait for it; an avoided device only when no other could.
   */
  avoid?: string[];
}
export interface HostDevicesUpdate {
  hostId: string;
  online: boolean;
  drained: boolean;
  drainedDevices: string[];
  /** The complete set of this host's devices in this pool: replaces whatever the pool had for the host. */
  devices: DeviceSnapshot[];
  /** Monotonic per host workflow; an older update never overwrites a newer one. */
  version: number;
  /** The host's enrolled public keys. */
  keys: HostPublicKeys;
  /** When the host workflow accepted the host's last verified snapshot (clears a suspicion older than it). */
  lastSeenAt?: number;
}
/** `reason`: how the attempt ended, or why the device freed itself (hold_expired, task_gone). */
export interface DeviceReleased extends ReleaseNote {
  hostId: string;
  deviceId: string;
  taskId: string;
}
export interface ReservationRefused {
  hostId: string;
  deviceId: string;
  request: ReservationRequest;
  heldBy?: { taskId: string; leaseId: string; expiresAt: number };
}
export interface SchedulerConfig {
  strategy: string;
  maxQueueDepth: number;
  /** priority_aging: waiting this long raises a task's priority by one. */
  agingMs: number;
}
export interface QueuedTaskView {
  taskId: string;
  priority: number;
  submittedAt: number;
  enqueuedAt: number;
  attempt: number;
  constraints: TaskConstraints;
  /** Devices this retry waits to avoid (its earlier attempts failed there). */
  avoid?: string[];
}
export interface SchedulerView {
  pool: string;
  config: SchedulerConfig;
  queue: QueuedTaskView[];
  devices: Array<PoolDevice & { reservedBy?: { taskId: string; leaseId: string; attempt: number } }>;
  counters: SchedulerCounters;
  runsSinceStart: number;
}
export interface SchedulerCounters {
  admitted: number;
  rejected: number;
  assignments: number;
  refusals: number;
  releases: number;
  /** Attempts ended, by `reason|detail` as the device reported them (lease expiries, dispatch failures by class, ...). */
  attemptEnds?: Record<string, number>;
}

export const enqueueTaskSignal = defineSignal<[EnqueueRequest]>('enqueueTask');
/**
 * Control plane -> scheduler: many enqueues in one signal, each as its task would send it. A pool's
 * recovery (activities/control-plane.ts, recoverPool) reads them from the waiting tasks
 * (`taskEnqueueRequest`): one signal per batch instead of two per task into a pool started anew.
 */
export const enqueueTasksSignal = defineSignal<[{ requests: EnqueueRequest[] }]>('enqueueTasks');
/** The enqueue a task would send if asked to enqueue again (`requeueTask`); null when it waits for nothing. */
export const taskEnqueueRequestQuery = defineQuery<EnqueueRequest | null>('taskEnqueueRequest');
/**
 * Task -> scheduler: out of the queue. `submittedAt` names the submission (a dequeue sent again
 * later cannot drop a task submitted anew under the same id); without it, any entry of the id.
 */
export const dequeueTaskSignal = defineSignal<[{ taskId: string; submittedAt?: number }]>('dequeueTask');
export const hostDevicesSignal = defineSignal<[HostDevicesUpdate]>('hostDevices');
export const deviceReleasedSignal = defineSignal<[DeviceReleased]>('deviceReleased');
/**
 * Task -> scheduler: the attempt on this device ended. The pool frees the device in its view at once
 * and passes the release on to the device, on the device's next reservation when one follows in
 * the same round (one message less per task under load), else as a `releaseDevice` of its own.
 */
export const taskReleasedSignal = defineSignal<[DeviceReleased]>('taskReleased');
export const reservationRefusedSignal = defineSignal<[ReservationRefused]>('reservationRefused');
/**
 * Control plane -> scheduler: a new configuration, as a signal. The control plane validates it
 * first and reads it back through `schedulerConfig`; a scheduler ignores (and logs) an invalid one.
 * Not an update: SDK 1.24 can record an update's acceptance in another order than its replay gives
 * when the update lands in a cold worker's workflow task beside a fired timer, and the pool then
 * fails every workflow task (BENCHMARKS.md / README, "Known limits"). A signal is a history event,
 * replayed in its place.
 */
export const setSchedulerConfigSignal = defineSignal<[SchedulerConfig & { version?: number }]>('setSchedulerConfig');
/** Kept so that callers and histories from before `setSchedulerConfig` still work; the control plane no longer sends it. */
export const configureSchedulerUpdate = defineUpdate<SchedulerConfig, [SchedulerConfig]>('configureScheduler');
export const schedulerStateQuery = defineQuery<SchedulerView>('schedulerState');
/** The pool's configuration alone (small, unlike the whole view): the control plane compares before it configures. */
export const schedulerConfigQuery = defineQuery<SchedulerConfig & { version?: number }>('schedulerConfig');

// ---- task/<taskId> ----
export interface Admission {
  accepted: boolean;
  reason?: string;
  message?: string;
  /** The submission answered (its `submittedAt`): a task submitted anew under the id ignores it. */
  submittedAt?: number;
}
export const admissionSignal = defineSignal<[Admission]>('admission');
export const assignmentSignal = defineSignal<[Assignment]>('assignment');
/**
 * Control plane -> task, when its pool's scheduler started anew and so lost its queue: a task that
 * waits for its admission or for a device sends its enqueue again (the pool keeps one entry per
 * task). Any other task ignores it.
 */
export const requeueTaskSignal = defineSignal<[{ pool: string; reason: string }]>('requeueTask');
/** Host -> task: claimed / started / progress, fenced by attempt and leaseId (validator rejects stale reports). */
export const reportAttemptUpdate = defineUpdate<{ accepted: true }, [AttemptReport]>('reportAttempt');
export const taskStateQuery = defineQuery<TaskView>('taskState');

// ---- device/<hostId>/<deviceId> ----
export interface DeviceView {
  hostId: string;
  deviceId: string;
  current?: Reservation;
  recent: Array<Reservation & { releasedAt: number; releaseReason: string }>;
  reservations: number;
  refusals: number;
  /** Runs of this workflow so far (continue-as-new increments it). */
  runs: number;
  /** Pools refused while the current reservation held the device: told too when it is released. */
  refusedPools: string[];
  /** Its host was removed: no new holder, and the workflow ends once the device is free. */
  retiring?: boolean;
  /** The time the retirement it took names (its host workflow's clock): an adoption must be newer. */
  retiredAt?: number;
  /** When this workflow's chain began (its first run's clock); 0 or absent: before this was kept. */
  begunAt?: number;
}
export const reserveDeviceSignal = defineSignal<[ReservationRequest]>('reserveDevice');
/** Scheduler -> device: the hold of this lease is past its deadline; free the device if it still holds it. */
export const expireHoldSignal = defineSignal<[{ leaseId: string }]>('expireHold');
/** `via`: the pool that passed the release on; it already knows, so the device does not tell it back. */
export const releaseDeviceSignal = defineSignal<[ReleaseNote & { via?: string }]>('releaseDevice');
export const deviceStateQuery = defineQuery<DeviceView>('deviceState');

// ---- host/<hostId> ----
export interface HostView {
  hostId: string;
  pool: string;
  online: boolean;
  drained: boolean;
  drainedDevices: string[];
  lastSeenAt?: number;
  bootId?: string;
  seq: number;
  devices: DeviceSnapshot[];
  published: number;
  /** Runs of this workflow so far (continue-as-new increments it). */
  runs: number;
  /** Enrolled public keys (none: the host is not enrolled and every snapshot is refused). */
  keys?: HostPublicKeys;
  lastSentAt?: number;
  /** The host process (bootId) that last ended its session saying it stopped. */
  stoppedBootId?: string;
  /** An operator removed the host: its devices left the pools, and the workflow has ended (or is ending). */
  retired?: boolean;
  /** This enrolment (the first run of the workflow's chain): what an operator's change names (`HostAdminRef`). */
  enrolment?: string;
  /** The version of the last operator change applied (`HostAdminRef`). */
  adminVersion?: number;
}
/** Operator enrollment (or key rotation): the host's public keys. Other keys than the enrolled ones need `rotate`. */
export const registerHostKeysSignal =
  defineSignal<[{ keys: HostPublicKeys; rotate?: boolean } & HostAdminRef]>('registerHostKeys');
/** Host -> host workflow: its complete signed snapshot; the validator refuses anything not signed by this host. */
export const hostSnapshotUpdate = defineUpdate<{ accepted: true }, [SignedSnapshot]>('hostSnapshot');
/**
 * Scheduler -> host: an attempt on this host lost its lease or was never picked up. The host
 * workflow republishes after the next verified snapshot, which proves the host is alive.
 */
export const reconfirmHostSignal = defineSignal<[{ reason: string; at: number }]>('reconfirmHost');
/**
 * To a host from a pool that lost track of its devices, if the host publishes to that pool:
 * publish the devices again, at once. From the control plane when the pool's scheduler started
 * anew (its previous run terminated or failed, so it knows no devices); from the pool's scheduler
 * when a reservation found no workflow for a device (`missingDevices`: terminated, say), whose
 * workflows the publish then starts again.
 */
export const republishHostSignal =
  defineSignal<[{ pool: string; reason: string; missingDevices?: string[] }]>('republishHost');
/**
 * What an operator's change to a host names (control-plane/hosts.ts, `hostAdminSignal`): the
 * enrolment it is for (`HostView.enrolment`: a host removed and enrolled again is another), and a
 * version above the last one applied. A change sent again later, or to a later enrolment, is
 * ignored. Changes without one come from a build before it, and are taken only by runs from then.
 */
export interface HostAdminRef {
  enrolment?: string;
  version?: number;
}
export const setHostDrainSignal = defineSignal<[{ drained: boolean } & HostAdminRef]>('setHostDrain');
export const setDeviceDrainSignal =
  defineSignal<[{ deviceId: string; drained: boolean } & HostAdminRef]>('setDeviceDrain');
export const hostStateQuery = defineQuery<HostView>('hostState');
/**
 * Operator -> host workflow: remove the host (decommissioned). Its devices leave every pool, each
 * device workflow ends once nobody holds it, and the host workflow ends; enrolling the host id
 * again starts afresh (a device workflow still retiring then is adopted: adoptDeviceSignal).
 */
export const retireHostSignal = defineSignal<[{ reason?: string } & HostAdminRef]>('retireHost');
/**
 * Host workflow -> device: the host is gone; refuse new reservations and end once free. `at`: the
 * host workflow's time when it retired: a device workflow begun after that (the host enrolled anew)
 * ignores it.
 */
export const retireDeviceSignal = defineSignal<[{ by?: string; at?: number }?]>('retireDevice');
/**
 * Control plane -> device, from the publish of a host workflow (syncHost) that sees this device
 * for the first time: the host was enrolled anew. A device workflow still retiring (its old host
 * was removed while a lease held it) stops retiring and serves the new enrolment: the lease it
 * holds is kept until released or past its deadline, and only then does it take another. `at`: the
 * new host workflow's publish version (its workflow clock, the server's, like the retirement's `at`);
 * one not newer than the retirement (a payload sent again) changes nothing.
 */
export const adoptDeviceSignal = defineSignal<[{ by: string; at: number }]>('adoptDevice');
