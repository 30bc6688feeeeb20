/**
 * scheduler/<pool>: the pool's queue, admission limit and matcher. It decides (task, device)
 * pairs only for devices it believes free and marks them reserved in the same step; the device
 * workflow then confirms (and tells the task) or refuses (and tells the scheduler).
 * It receives about two messages per task: enqueue and the task's release, and rarely a refusal.
 * It passes each release on to the device, riding on the device's next reservation when the same
 * round gives the device new work.
 */
import {
  ApplicationFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  log,
  ParentClosePolicy,
  patched,
  proxyLocalActivities,
  setCurrentDetails,
  setHandler,
  sleep,
  startChild,
  upsertSearchAttributes,
  uuid4,
  workflowInfo,
  type SignalDefinition,
} from '@temporalio/workflow';
import {
  DEFAULT_HISTORY_LIMIT,
  DEFAULT_SCHEDULER_HISTORY_LIMIT,
  InFlight,
  shouldContinueAsNew,
} from './continue-as-new';
import { ErrorType, Reason } from './errors';
import { deviceKey, deviceWorkflowId, hostWorkflowId, poolRecoveryWorkflowId, taskWorkflowId } from './ids';
import { poolRecoveryWorkflow } from './recovery';
import { asSignal, isAuthentic, onSignal } from './authenticity';
import type * as controlActivities from '../activities/control-plane';
import {
  admissionSignal,
  configureSchedulerUpdate,
  dequeueTaskSignal,
  setSchedulerConfigSignal,
  deviceReleasedSignal,
  expireHoldSignal,
  enqueueTaskSignal,
  enqueueTasksSignal,
  hostDevicesSignal,
  reconfirmHostSignal,
  republishHostSignal,
  reservationRefusedSignal,
  releaseDeviceSignal,
  reserveDeviceSignal,
  schedulerConfigQuery,
  schedulerStateQuery,
  taskReleasedSignal,
  type Admission,
  type DeviceReleased,
  type EnqueueRequest,
  type SchedulerConfig,
  type SchedulerCounters,
} from './messages';
import { FleetKind, FleetPool } from './search-attributes';
import {
  byAge,
  constraintInterner,
  getStrategy,
  hasStrategy,
  matches,
  packQueue,
  strategyNames,
  unpackQueue,
  type PackedQueue,
  type QueuedTask,
} from './strategies';
import type { HostPublicKeys } from './identity';
import type { PoolDevice, ReleaseNote } from './types';

interface Held {
  taskId: string;
  leaseId: string;
  attempt: number;
  /**
   * Backstop: past this the entry is dropped even if no release arrived (a lost signal). Safe,
   * because the device workflow stays the authority: a premature reserve is refused, not granted.
   */
  until: number;
  /** The queue entry, so a refused reservation can put the task back where it was. */
  task?: QueuedTask;
  /** The task was cancelled while this reservation was on the way: not put back in the queue. */
  cancelled?: boolean;
}

const { sendSignals } = proxyLocalActivities<ReturnType<typeof controlActivities.createControlPlaneActivities>>({
  startToCloseTimeout: '60s',
  retry: { initialInterval: '1s', maximumInterval: '10s' }, // until the server answers
});
/** A round's sends go by one local activity once there are this many (else by commands). */
const BATCH_MIN = 2;

export interface SchedulerCarried {
  /** Admission answers decided while the previous run was rolling over: sent by the next run. */
  replies?: Array<{ taskId: string; admission: Admission }>;
  /** Older runs carried the queue as objects; new runs carry `packedQueue`. */
  queue?: QueuedTask[];
  packedQueue?: PackedQueue;
  devices: PoolDevice[];
  held: Array<[string, Held]>;
  hostVersions: Array<[string, number]>;
  hostKeys: Array<[string, HostPublicKeys]>;
  suspects?: Array<[string, number]>;
  /** The last lease each device was seen to end (see `ended`). */
  ended?: Array<[string, string]>;
  counters: SchedulerCounters;
  runs: number;
  /** The version of the last `setSchedulerConfig` applied (see there). */
  configVersion?: number;
  /** Submissions dequeued lately, oldest first (see `dequeued`). */
  dequeued?: Array<[string, number]>;
}

/** What the device needs of a task's release. */
const releaseNote = ({ leaseId, reason, detail }: DeviceReleased): ReleaseNote => ({ leaseId, reason, detail });

/** Margin past a hold's own deadline before the scheduler stops believing it (default). */
const HELD_SLACK_MS = 60_000;
/** How often the scheduler looks for holds past their deadline (default). */
const HOLD_SWEEP_MS = 60_000;
/**
 * Attempt ends that say "the host itself is gone" rather than "this task failed": the host's
 * devices get no work until a snapshot verified after this arrives (or this long passes, in case
 * the host workflow cannot answer).
 */
const hostLost = (r: { reason: string; detail?: string }): boolean =>
  r.reason === 'lease_expired' ||
  (r.reason === 'dispatch_failed' && r.detail === 'ack_timeout') ||
  // A cancel that waited out a lost lease or a missed ack (tasks from 2026-12-02a on say so).
  (r.reason === 'cancelled' && (r.detail === 'lease_expired' || r.detail === 'ack_timeout'));
const SUSPECT_MAX_MS = 5 * 60_000;
/** How many dequeued submissions the scheduler remembers (see `dequeued`). */
const DEQUEUED_KEPT = 1_000;

export interface SchedulerInput {
  pool: string;
  config: SchedulerConfig;
  /** History length that triggers continue-as-new (default: DEFAULT_SCHEDULER_HISTORY_LIMIT or the server's suggestion). */
  historyLimit?: number;
  /**
   * Expiry of holds nobody released (a task terminated while holding a device): how often the
   * scheduler sweeps (default 60 s) and how long past a hold's deadline it waits (default 60 s).
   */
  holdSweepMs?: number;
  holdSlackMs?: number;
  carried?: SchedulerCarried;
}

export function validateSchedulerConfig(config: SchedulerConfig): void {
  if (!config || !hasStrategy(config.strategy)) {
    throw ApplicationFailure.nonRetryable(
      `unknown assignment strategy "${config?.strategy}"; registered: ${strategyNames().join(', ')}`,
      ErrorType.UnknownStrategy,
    );
  }
  if (!Number.isInteger(config.maxQueueDepth) || config.maxQueueDepth < 1) {
    throw ApplicationFailure.nonRetryable('maxQueueDepth must be a positive integer', ErrorType.InvalidConfig);
  }
  if (!(config.agingMs > 0)) {
    throw ApplicationFailure.nonRetryable('agingMs must be positive', ErrorType.InvalidConfig);
  }
}

export async function schedulerWorkflow(input: SchedulerInput): Promise<never> {
  validateSchedulerConfig(input.config);
  const { pool } = input;
  const holdSweepMs = input.holdSweepMs ?? HOLD_SWEEP_MS;
  const holdSlackMs = input.holdSlackMs ?? HELD_SLACK_MS;
  let config = input.config;
  const c = input.carried;
  /** Oldest first (submittedAt, taskId): fifo_match walks it as is. */
  const queue: QueuedTask[] = c?.packedQueue ? unpackQueue(c.packedQueue) : [...(c?.queue ?? [])];
  /**
   * Equal constraints share one object in the queue, so a round skips every task whose constraints
   * already matched no free device at one lookup (strategies.ts, greedy). Seeded from the carried
   * queue and grown by enqueues: one entry per distinct set of constraints this run has seen.
   */
  const intern = constraintInterner();
  for (const q of queue) q.constraints = intern(q.constraints);
  const devices = new Map<string, PoolDevice>((c?.devices ?? []).map((d) => [deviceKey(d.hostId, d.deviceId), d]));
  const held = new Map<string, Held>(c?.held ?? []);
  const hostVersions = new Map<string, number>(c?.hostVersions ?? []);
  const hostKeys = new Map<string, HostPublicKeys>(c?.hostKeys ?? []);
  /** Hosts presumed lost, and since when (see hostLost). */
  const suspects = new Map<string, number>(c?.suspects ?? []);
  const counters: SchedulerCounters = c?.counters ?? {
    admitted: 0,
    rejected: 0,
    assignments: 0,
    refusals: 0,
    releases: 0,
  };
  const runs = (c?.runs ?? 0) + 1;
  /**
   * Runs started by this code roll over at the scheduler's own, lower limit, answer the carried
   * admissions only after their first round (see `replies` below) and do not upsert the search
   * attributes they inherit; a run recorded by older code replays without the marker and keeps
   * the old behaviour.
   */
  const rolloverV2 = patched('scheduler-rollover-v2');
  const historyLimit = input.historyLimit ?? (rolloverV2 ? DEFAULT_SCHEDULER_HISTORY_LIMIT : DEFAULT_HISTORY_LIMIT);
  let dirty = queue.length > 0;
  const inFlight = new InFlight();
  /** Set once the run decided to continue-as-new: from then on nothing new is sent, only carried. */
  let draining = false;
  const deferredReplies: Array<{ taskId: string; admission: Admission }> = [];
  /** Tasks admitted since the last round and not yet told so. */
  /** Admitted tasks not answered yet, with their submission (`submittedAt`, which the answer names). */
  const unanswered = new Map<string, number | undefined>();
  /** Releases tasks reported since the last round, by device: passed on to the device by the next round. */
  const toRelease = new Map<string, DeviceReleased>();
  /**
   * Releases passed on by a `releaseDevice` of their own and not yet delivered, by device. A new
   * reservation for that device carries the release again: two signals to one workflow may arrive
   * in either order, and the device applies a release only while it holds that lease.
   */
  const passing = new Map<string, DeviceReleased>();
  /**
   * The last lease each device was seen to end: a task's release, or a device's word that it let a
   * lease go. A device's refusal and its later release are two signals to us that may arrive in
   * either order; a refusal that names a lease already ended is out of date, and believing it would
   * leave the device held by a finished task until the hold deadline. Runs recorded before this
   * change believed every refusal and replay so.
   */
  const endedAware = patched('scheduler-ended-leases');
  /**
   * A task cancelled while its reservation is on the way to the device is forgotten by that
   * reservation too: a refusal or a failed reserve does not put it back in the queue (where it held
   * a place until a device matched it). Runs recorded before this change put it back, and replay so.
   */
  const forgetsCancelled = patched('scheduler-dequeue-in-flight-v1');
  /**
   * A hold is ended or refused only by news of its own (task, lease): a lease id alone can name two
   * holds, when a round run again (its workflow task lost after its local activity had sent the
   * first decision) replays `uuid4()` and gives the same id to another task; the first holder's
   * release must not free the second's hold (that task would be lost: neither held nor queued).
   * Runs recorded before this change matched on the lease alone, and replay so.
   */
  const pairAware = patched('scheduler-hold-task-lease-v1');
  /** This news (a release or a refusal) is about hold `h`. */
  const isHold = (h: Held | undefined, taskId: string, leaseId: string): h is Held =>
    h?.leaseId === leaseId && (!pairAware || h.taskId === taskId);
  const ended = new Map<string, string>(c?.ended ?? []);
  const noteEnded = (k: string, leaseId: string): void => {
    if (endedAware) ended.set(k, leaseId);
  };
  /**
   * Submissions dequeued lately (a task cancelled or given up while it waited), taskId ->
   * submittedAt, oldest first, at most DEQUEUED_KEPT; carried over continue-as-new. A dequeue is a
   * task's last word to the pool, so a recovery's batched enqueue for that submission arriving
   * after it is stale: the recovery read the task's enqueue, then the task was cancelled. It is
   * ignored; before, the task was queued again and a device reserved for nobody until the
   * reservation's ack ran out. Only batched enqueues: one the task sends itself is its own word (a
   * task reset to before its cancel waits again), and the recovery's check asks a batched task that
   * is still waiting to do so. Runs recorded before this change queued it, and replay so.
   */
  const dequeued = new Map<string, number>(c?.dequeued ?? []);

  // Search attributes survive continue-as-new on the server: only the first run sets them (an
  // upsert is a billed action).
  if (!c || !rolloverV2) {
    upsertSearchAttributes([
      { key: FleetKind, value: 'scheduler' },
      { key: FleetPool, value: pool },
    ]);
  }

  /**
   * Runs started by this code send a round's signals together, as client calls from one local
   * activity, once there are BATCH_MIN of them: no workflow task comes back per delivery, and
   * nothing stays in flight across continue-as-new. Older runs replay with commands.
   */
  const batching = patched('scheduler-send-batch-v1');
  type Outgoing = {
    workflowId: string;
    def: { name: string };
    arg: object;
    onError: (err: unknown) => void;
    onDone?: () => void;
  };
  const outbox: Outgoing[] = [];
  const command = (o: Outgoing): void => {
    const p = getExternalWorkflowHandle(o.workflowId).signal(o.def.name, asSignal(o.def, o.arg));
    inFlight.track(o.onDone ? p.finally(o.onDone) : p, o.onError);
  };
  /** Outgoing signals are fire-and-track: continue-as-new waits for them. */
  const sendTo = <T extends object>(
    workflowId: string,
    def: SignalDefinition<[T]>,
    arg: T,
    onError: (err: unknown) => void,
    onDone?: () => void,
  ): void => {
    const o: Outgoing = { workflowId, def, arg, onError, onDone };
    if (!batching) return command(o);
    outbox.push(o); // the main loop wakes for it
  };
  const flush = (): void => {
    if (outbox.length === 0) return;
    const items = outbox.splice(0);
    if (items.length < BATCH_MIN) {
      for (const o of items) command(o);
      return;
    }
    inFlight.track(
      sendSignals(items.map((o) => ({ workflowId: o.workflowId, signal: o.def.name, arg: o.arg }))).then((failed) => {
        for (const f of failed) items[f.i]?.onError(new Error(f.error));
        for (const o of items) o.onDone?.();
      }),
      (err) => {
        for (const o of items) o.onError(err);
        for (const o of items) o.onDone?.();
      },
    );
  };

  const insert = (t: QueuedTask): void => {
    t.constraints = intern(t.constraints);
    let lo = 0;
    let hi = queue.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (byAge(queue[mid], t) <= 0) lo = mid + 1;
      else hi = mid;
    }
    queue.splice(lo, 0, t);
  };
  const queueIndex = (taskId: string): number => queue.findIndex((q) => q.taskId === taskId);
  /** A device is already held for this task's attempt (or a later one). */
  const isHeldFor = (taskId: string, attempt: number): boolean =>
    [...held.values()].some((h) => h.taskId === taskId && h.attempt >= attempt);

  /**
   * `submittedAt`: the submission answered, which the answer names (the task ignores an answer for
   * an earlier submission under its id, sent again).
   */
  const reply = (taskId: string, answer: Admission, submittedAt?: number): void => {
    const admission = submittedAt === undefined ? answer : { ...answer, submittedAt };
    if (draining) {
      deferredReplies.push({ taskId, admission });
      return;
    }
    sendTo(taskWorkflowId(taskId), admissionSignal, admission, (err) => {
      log.warn('admission reply failed; dropping the task from the queue', { taskId, error: String(err) });
      const i = queueIndex(taskId);
      if (i >= 0) queue.splice(i, 1);
    });
  };
  // Tasks admitted while the previous run rolled over: a task still queued is answered like any
  // other enqueue, after this run's first round and only if that round gave it no device (the
  // device's assignment tells it instead: one signal less per task caught by a roll-over).
  for (const r of c?.replies ?? []) {
    if (rolloverV2 && r.admission.accepted && queueIndex(r.taskId) >= 0) {
      unanswered.set(r.taskId, r.admission.submittedAt);
    } else reply(r.taskId, r.admission);
  }

  setHandler(schedulerStateQuery, () => ({
    pool,
    config,
    queue: queue.map((q) => ({
      taskId: q.taskId,
      priority: q.priority,
      submittedAt: q.submittedAt,
      enqueuedAt: q.enqueuedAt,
      attempt: q.attempt,
      constraints: q.constraints,
      ...(q.avoid ? { avoid: q.avoid } : {}),
    })),
    devices: [...devices.entries()].map(([k, d]) => {
      const h = held.get(k);
      return {
        ...d,
        hostSuspectSince: suspects.get(d.hostId),
        reservedBy: h ? { taskId: h.taskId, leaseId: h.leaseId, attempt: h.attempt } : undefined,
      };
    }),
    counters,
    runsSinceStart: runs,
  }));

  /** The version of the last `setSchedulerConfig` applied: one not newer (sent again) changes nothing. */
  let configVersion = c?.configVersion ?? 0;
  setHandler(schedulerConfigQuery, () => (configVersion > 0 ? { ...config, version: configVersion } : config));
  setHandler(
    configureSchedulerUpdate,
    (next) => {
      config = next;
      dirty = true;
      return config;
    },
    {
      // Refused before anything is written unless the control plane sent it (authenticity.ts);
      // validators run only live, so this changes no replay.
      validator: (next) => {
        if (!isAuthentic(next, configureSchedulerUpdate.name)) {
          throw ApplicationFailure.nonRetryable(
            'configureScheduler: not sent by the control plane',
            ErrorType.InvalidConfig,
          );
        }
        validateSchedulerConfig(next);
      },
    },
  );
  onSignal(setSchedulerConfigSignal, ({ version, ...next }) => {
    if (version === undefined) {
      // From a control plane of the build before versions: taken only by runs recorded then.
      if (patched('scheduler-config-version-v1')) {
        log.warn('ignored a pool configuration without a version', { pool });
        return;
      }
    } else if (!(typeof version === 'number' && version > configVersion)) {
      log.warn('ignored a pool configuration not newer than the one applied (sent again?)', {
        pool,
        version,
        applied: configVersion,
      });
      return;
    }
    try {
      validateSchedulerConfig(next);
    } catch (err) {
      // The control plane validates before it sends; this is someone else's signal. Keep the config.
      log.warn('ignored an invalid pool configuration', { pool, error: String(err) });
      return;
    }
    config = next;
    if (version !== undefined) configVersion = version;
    dirty = true;
  });

  /** The devices a retry asks to avoid (bounded; only strings), from runs with this change on. */
  const avoidOf = (req: EnqueueRequest): string[] | undefined => {
    if (!Array.isArray(req.avoid) || req.avoid.length === 0) return undefined;
    const keys = [...new Set(req.avoid.filter((k): k is string => typeof k === 'string'))].slice(-32); // the latest
    return keys.length > 0 && patched('scheduler-avoid-failed-devices-v1') ? keys : undefined;
  };
  const onEnqueue = (req: EnqueueRequest): void => {
    const existing = queueIndex(req.taskId);
    const queued = existing >= 0 ? queue[existing] : undefined;
    // An earlier submission's enqueue under this id (sent again) changes nothing; a later one's
    // supersedes what is queued.
    if (queued && req.submittedAt < queued.submittedAt) {
      log.warn('ignored an enqueue for an earlier submission of this task id', { pool, taskId: req.taskId });
      return;
    }
    const later = !!queued && req.submittedAt > queued.submittedAt;
    if ((queued && !later && queued.attempt >= req.attempt) || isHeldFor(req.taskId, req.attempt)) {
      // A repeat of something we already have: keep one entry.
      if (req.first) reply(req.taskId, { accepted: true }, req.submittedAt);
      return;
    }
    if (existing >= 0) queue.splice(existing, 1); // an older attempt's entry: superseded
    if (req.first && queue.length >= config.maxQueueDepth) {
      counters.rejected++;
      reply(
        req.taskId,
        {
          accepted: false,
          reason: Reason.QueueFull,
          message: `pool "${pool}" queue is full (${queue.length}/${config.maxQueueDepth} queued)`,
        },
        req.submittedAt,
      );
      return;
    }
    insert({
      taskId: req.taskId,
      constraints: req.constraints,
      priority: req.priority,
      submittedAt: req.submittedAt,
      enqueuedAt: Date.now(),
      attempt: req.attempt,
      holdMs: req.holdMs,
      ...(avoidOf(req) ? { avoid: avoidOf(req) } : {}),
    });
    if (req.first) {
      counters.admitted++;
      // Answered after the next round, and only if that round did not assign it a device: the
      // device's assignment tells the task it was admitted (one message instead of two).
      unanswered.set(req.taskId, req.submittedAt);
    }
    dirty = true;
  };
  onSignal(enqueueTaskSignal, onEnqueue);
  // A pool's recovery sends the enqueues of many waiting tasks at once. Asked only when one comes:
  // a run in which a worker from before took such a signal and did nothing replays so.
  onSignal(enqueueTasksSignal, ({ requests }) => {
    if (!Array.isArray(requests) || !patched('scheduler-enqueue-batch-v1')) return;
    for (const req of requests) {
      if (typeof req?.taskId !== 'string') continue;
      if (dequeued.get(req.taskId) === req.submittedAt && patched('scheduler-dequeued-stale-v1')) {
        log.info('ignored a batched enqueue for a submission already dequeued (the task ended)', { pool, taskId: req.taskId });
        continue;
      }
      onEnqueue(req);
    }
  });

  onSignal(dequeueTaskSignal, ({ taskId, submittedAt }) => {
    // Only the submission it names: a dequeue sent again cannot drop a task submitted anew under that id.
    const same = (t?: { submittedAt: number }) => submittedAt === undefined || !t || t.submittedAt === submittedAt;
    if (typeof submittedAt === 'number') {
      dequeued.delete(taskId); // to the end: the latest
      dequeued.set(taskId, submittedAt);
      for (const k of dequeued.keys()) {
        if (dequeued.size <= DEQUEUED_KEPT) break;
        dequeued.delete(k);
      }
    }
    const i = queueIndex(taskId);
    if (i >= 0) {
      if (same(queue[i])) queue.splice(i, 1);
      else log.warn('ignored a dequeue for an earlier submission of this task id', { pool, taskId });
    } else if (forgetsCancelled) {
      for (const h of held.values()) if (h.taskId === taskId && same(h.task)) h.cancelled = true;
    }
  });

  onSignal(hostDevicesSignal, (u) => {
    if ((hostVersions.get(u.hostId) ?? -1) >= u.version) return; // older than what we have
    hostVersions.set(u.hostId, u.version);
    const since = suspects.get(u.hostId);
    if (since !== undefined && (u.lastSeenAt ?? 0) > since) suspects.delete(u.hostId); // alive after all
    hostKeys.set(u.hostId, u.keys);
    for (const [k, d] of devices) if (d.hostId === u.hostId) devices.delete(k);
    for (const d of u.devices) {
      devices.set(deviceKey(u.hostId, d.deviceId), {
        hostId: u.hostId,
        deviceId: d.deviceId,
        driverType: d.driverType,
        tags: [...d.tags],
        state: d.state,
        health: d.health,
        hostOnline: u.online,
        hostDrained: u.drained,
        deviceDrained: u.drainedDevices.includes(d.deviceId),
      });
    }
    dirty = true;
  });

  /** A hold of ours ended: the device is free in our view from now on. */
  const freed = (k: string, r: DeviceReleased): boolean => {
    if (!isHold(held.get(k), r.taskId, r.leaseId)) return false;
    if (hostLost(r)) suspectHost(r.hostId, r.detail ?? r.reason);
    held.delete(k);
    counters.releases++;
    const end = `${r.reason}|${r.detail ?? ''}`;
    counters.attemptEnds = { ...counters.attemptEnds, [end]: (counters.attemptEnds?.[end] ?? 0) + 1 };
    dirty = true;
    return true;
  };

  onSignal(deviceReleasedSignal, (r) => {
    const k = deviceKey(r.hostId, r.deviceId);
    noteEnded(k, r.leaseId);
    freed(k, r);
  });

  // The task's own word that its attempt ended. The device still holds the lease until we pass the
  // release on; a release for a hold we no longer track goes to the device at once (it decides).
  onSignal(taskReleasedSignal, (r) => {
    const k = deviceKey(r.hostId, r.deviceId);
    noteEnded(k, r.leaseId);
    if (freed(k, r) && !draining) toRelease.set(k, r);
    else passOn(r);
  });

  function passOn(r: DeviceReleased): void {
    const k = deviceKey(r.hostId, r.deviceId);
    passing.set(k, r);
    sendTo(
      deviceWorkflowId(r.hostId, r.deviceId),
      releaseDeviceSignal,
      { ...releaseNote(r), via: pool },
      (err) =>
        log.warn('could not pass a release on to its device', {
          device: deviceKey(r.hostId, r.deviceId),
          error: String(err),
        }),
      () => {
        if (passing.get(k) === r) passing.delete(k);
      },
    );
  }

  onSignal(reservationRefusedSignal, (r) => {
    const k = deviceKey(r.hostId, r.deviceId);
    const h = held.get(k);
    if (!isHold(h, r.request.taskId, r.request.leaseId)) return;
    counters.refusals++;
    // Our view was stale: the device is held by someone else. Mark it so (unless that lease has
    // ended already: the refusal overtook the release), and put the task back in its place.
    if (r.heldBy && ended.get(k) !== r.heldBy.leaseId) {
      held.set(k, {
        taskId: r.heldBy.taskId,
        leaseId: r.heldBy.leaseId,
        attempt: 0,
        until: r.heldBy.expiresAt + holdSlackMs,
      });
    } else held.delete(k);
    if (h.task && !h.cancelled) {
      if (queueIndex(h.task.taskId) < 0) insert(h.task);
      if (h.task.attempt === 1) reply(h.task.taskId, { accepted: true }, h.task.submittedAt); // it may never have heard
    }
    dirty = true;
  });

  /** Presume the host lost: no work for its devices until it proves alive (hostLost). */
  function suspectHost(hostId: string, reason: string): void {
    if (suspects.has(hostId)) return;
    const at = Date.now();
    suspects.set(hostId, at);
    log.warn('host presumed lost: its devices get no work until it reports again', { hostId, reason });
    if (!draining) askReconfirm(hostId, at, reason); // else the next run asks
  }

  function askReconfirm(hostId: string, at: number, reason: string): void {
    sendTo(hostWorkflowId(hostId), reconfirmHostSignal, { reason, at }, (err) => {
      log.warn('could not ask the host workflow to reconfirm; not holding its devices back', {
        hostId,
        error: String(err),
      });
      if (suspects.get(hostId) === at) suspects.delete(hostId);
      dirty = true;
    });
  }

  /** A device's workflow is gone: its host starts it again and publishes (republishHost). */
  function restoreDevice(hostId: string, deviceId: string, reason: string): void {
    sendTo(hostWorkflowId(hostId), republishHostSignal, { pool, reason, missingDevices: [deviceId] }, (err) =>
      log.warn('could not ask the host to start a device workflow again', {
        device: deviceKey(hostId, deviceId),
        error: String(err),
      }),
    );
  }

  /** Could take work: online, healthy, not drained, its host trusted and not presumed lost. */
  const usable = (d: PoolDevice): boolean =>
    !suspects.has(d.hostId) &&
    d.hostOnline &&
    !d.hostDrained &&
    !d.deviceDrained &&
    d.health === 'good' &&
    d.state !== 'offline' &&
    hostKeys.has(d.hostId);
  const assignable = (k: string, d: PoolDevice): boolean => usable(d) && !held.has(k);

  /** A device of the pool outside `task.avoid` matches it and could take it, now or once free. */
  const servableElsewhere = (task: QueuedTask): boolean => {
    for (const [k, d] of devices) {
      if (!task.avoid?.includes(k) && matches(task.constraints, d) && usable(d)) return true;
    }
    return false;
  };

  const dropExpiredHolds = (now: number): void => {
    for (const [k, h] of held) {
      if (h.until < now) {
        if (h.task) {
          const slash = k.indexOf('/'); // host ids cannot contain '/' (ids.ts)
          sendTo(
            deviceWorkflowId(k.slice(0, slash), k.slice(slash + 1)),
            expireHoldSignal,
            { leaseId: h.leaseId },
            (err) => log.warn('could not expire a hold', { device: k, error: String(err) }),
          );
        }
        log.warn('hold expired without a release; the device workflow decides from here', {
          device: k,
          leaseId: h.leaseId,
        });
        held.delete(k);
      }
    }
  };

  /** One matching round; returns the ids of the tasks it assigned. */
  const assignRound = (): Set<string> => {
    const none = new Set<string>();
    if (queue.length === 0) return none;
    const free: PoolDevice[] = [];
    for (const [k, d] of devices) if (assignable(k, d)) free.push(d);
    if (free.length === 0) return none;
    const pairs = getStrategy(config.strategy).assign(queue, free, {
      now: Date.now(),
      agingMs: config.agingMs,
      servableElsewhere,
    });
    if (pairs.length === 0) return none;
    const taken = new Set(pairs.map((p) => p.task.taskId));
    for (let i = queue.length - 1; i >= 0; i--) if (taken.has(queue[i].taskId)) queue.splice(i, 1);
    for (const { task, device } of pairs) {
      const k = deviceKey(device.hostId, device.deviceId);
      const leaseId = uuid4();
      const previous = toRelease.get(k) ?? passing.get(k);
      toRelease.delete(k);
      held.set(k, {
        taskId: task.taskId,
        leaseId,
        attempt: task.attempt,
        task,
        until: Date.now() + task.holdMs + holdSlackMs,
      });
      counters.assignments++;
      sendTo(
        deviceWorkflowId(device.hostId, device.deviceId),
        reserveDeviceSignal,
        {
          taskId: task.taskId,
          attempt: task.attempt,
          submittedAt: task.submittedAt,
          leaseId,
          pool,
          holdMs: task.holdMs,
          hostKeys: hostKeys.get(device.hostId)!,
          ...(previous ? { release: releaseNote(previous) } : {}),
        },
        (err) => {
          // No device workflow to hold the reservation: treat the device as offline until its host reports again.
          log.warn('reserve failed; device set offline until the next host update', { device: k, error: String(err) });
          const h = held.get(k);
          const mine = isHold(h, task.taskId, leaseId);
          const cancelled = mine && !!h.cancelled;
          if (mine) held.delete(k);
          const d = devices.get(k);
          if (d) d.state = 'offline';
          // Its host starts the device workflow again (terminated, say) and publishes anew, which
          // puts the device back. Runs recorded before this change only waited for a host update.
          if (patched('scheduler-restore-device-v1')) restoreDevice(device.hostId, device.deviceId, String(err));
          if (!cancelled) {
            if (queueIndex(task.taskId) < 0) insert(task);
            if (task.attempt === 1) reply(task.taskId, { accepted: true }, task.submittedAt);
          }
          dirty = true;
        },
      );
    }
    return taken;
  };

  /**
   * A run started anew (nothing carried in: the pool's first, or one after its scheduler was
   * terminated or failed) knows neither its queue nor its devices. It starts the pool's recovery
   * (workflows/recovery.ts), which asks the pool's running tasks to enqueue again and its hosts to
   * publish again; meanwhile it queues. No admitted task is lost with a scheduler run. A child this
   * run abandons: roll-overs neither wait for it nor start it again. Runs recorded before this
   * change did not start it, and replay so.
   */
  if (!c && patched('scheduler-recover-pool-v1')) {
    // The run id of the started event: a reset of this run keeps it, so the replayed start matches.
    const workflowId = poolRecoveryWorkflowId(pool, workflowInfo().originalExecutionRunId);
    startChild(poolRecoveryWorkflow, {
      workflowId,
      args: [{ pool }],
      parentClosePolicy: ParentClosePolicy.ABANDON,
      staticSummary: `recovery of pool ${pool}`,
    }).then(
      (child) =>
        log.info('scheduler run started without carried state: its recovery asks again after an earlier run', {
          pool,
          recovery: child.workflowId,
        }),
      (err: unknown) => log.error('pool started anew but its recovery did not start', { pool, error: String(err) }),
    );
  }

  for (const [hostId, at] of suspects) askReconfirm(hostId, at, 'carried over');

  // A coarse sweep so an expired hold frees its device even in a pool where nothing else happens.
  void (async () => {
    for (;;) {
      await sleep(holdSweepMs);
      const now = Date.now();
      if ([...held.values()].some((h) => h.until < now)) dirty = true;
      for (const [hostId, since] of suspects) {
        if (now - since > SUSPECT_MAX_MS) {
          log.warn('host suspicion timed out without a new snapshot; offering its devices again', { hostId });
          suspects.delete(hostId);
          dirty = true;
        }
      }
    }
  })();

  for (;;) {
    await condition(() => dirty || outbox.length > 0 || shouldContinueAsNew(historyLimit));
    if (shouldContinueAsNew(historyLimit)) break;
    dirty = false;
    dropExpiredHolds(Date.now());
    const assigned = assignRound();
    for (const [taskId, at] of unanswered) if (!assigned.has(taskId)) reply(taskId, { accepted: true }, at);
    unanswered.clear();
    // Devices freed this round that got no new work: the release goes to them on its own.
    for (const r of toRelease.values()) passOn(r);
    toRelease.clear();
    flush();
    setCurrentDetails(
      `pool **${pool}** · ${config.strategy} · queued ${queue.length}/${config.maxQueueDepth} · devices ${devices.size} · held ${held.size}`,
    );
  }

  // Stop sending (late answers are carried), then wait only for what is already on its way.
  draining = true;
  for (const [taskId, at] of unanswered) reply(taskId, { accepted: true }, at);
  unanswered.clear();
  for (const r of toRelease.values()) passOn(r); // released in the step that decided to roll over
  toRelease.clear();
  for (;;) {
    flush();
    await condition(() => outbox.length > 0 || (inFlight.count === 0 && allHandlersFinished()));
    if (outbox.length === 0) break;
  }
  // Tasks admitted while we waited: their answer goes with the carried state, never dropped.
  for (const [taskId, at] of unanswered) reply(taskId, { accepted: true }, at);
  return await continueAsNew<typeof schedulerWorkflow>({
    pool,
    config,
    historyLimit: input.historyLimit,
    holdSweepMs: input.holdSweepMs,
    holdSlackMs: input.holdSlackMs,
    carried: {
      replies: deferredReplies,
      packedQueue: packQueue(queue),
      devices: [...devices.values()],
      held: [...held.entries()],
      hostVersions: [...hostVersions.entries()],
      hostKeys: [...hostKeys.entries()],
      suspects: [...suspects.entries()],
      ...(endedAware ? { ended: [...ended.entries()].filter(([k]) => devices.has(k)) } : {}),
      counters,
      runs,
      ...(configVersion > 0 ? { configVersion } : {}),
      ...(dequeued.size > 0 ? { dequeued: [...dequeued.entries()] } : {}),
    },
  });
}
