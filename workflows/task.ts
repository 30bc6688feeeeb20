/**
 * task/<taskId>: one workflow per task. Its history is the task's audit trail: admission, every
 * attempt (device, lease, claim, start, outcome), backoff timers and the one terminal result.
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  CancelledFailure,
  allHandlersFinished,
  TimeoutFailure,
  condition,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  patched,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { TimeoutType, type SearchAttributeUpdatePair } from '@temporalio/common';
import type * as controlActivities from '../activities/control-plane';
import type { HostActivities } from '../host-worker/activities';
import { ErrorType, Reason } from './errors';
import { SignDomain, verifySignature, type HostPublicKeys } from './identity';
import { deviceKey, deviceWorkflowId, hostTaskQueue, schedulerWorkflowId } from './ids';
import { asSignal, onSignal } from './authenticity';
import {
  admissionSignal,
  assignmentSignal,
  dequeueTaskSignal,
  enqueueTaskSignal,
  requeueTaskSignal,
  releaseDeviceSignal,
  taskEnqueueRequestQuery,
  reportAttemptUpdate,
  taskReleasedSignal,
  taskStateQuery,
  type Admission,
  type EnqueueRequest,
} from './messages';
import {
  initialTaskView,
  retryDelayMs,
  MAX_PROGRESS_REPORTS,
  RESERVATION_SAFETY_MS,
  reservationHoldMs,
  validateTaskInput,
  policyBoundProblems,
} from './policy';
import {
  FleetAttempt,
  FleetDeviceId,
  FleetDriverType,
  FleetHostId,
  FleetKind,
  FleetPool,
  FleetStatus,
} from './search-attributes';
import type {
  Assignment,
  AttemptOutcome,
  AttemptRecord,
  AttemptReport,
  HostAssignment,
  RunOutcome,
  TaskInput,
  TaskResult,
  TaskStatus,
  TaskView,
} from './types';

const { ensureScheduler } = proxyActivities<ReturnType<typeof controlActivities.createControlPlaneActivities>>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 10, initialInterval: '1s', maximumInterval: '10s' },
});

/** How one attempt ended, and what the task does next. */
export interface Classified {
  outcome: AttemptOutcome;
  reason?: string;
  message?: string;
  retryable: boolean;
  /** Never claimed by the host: counts toward maxDispatchFailures. */
  dispatchFailure: boolean;
}

export function classifyRunOutcome(r: RunOutcome): Classified {
  if (r.status === 'done') return { outcome: 'done', retryable: false, dispatchFailure: false };
  if (r.dispatchFailure) {
    return {
      outcome: 'dispatch_failed',
      reason: r.reason ?? Reason.DeviceUnavailable,
      message: r.message,
      retryable: true,
      dispatchFailure: true,
    };
  }
  return {
    outcome: r.retryable ? 'retryable_failure' : 'failed',
    reason: r.reason ?? Reason.RunnerFailed,
    message: r.message,
    retryable: r.retryable,
    dispatchFailure: false,
  };
}

export function classifyActivityError(err: unknown, claimed = false): Classified {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof TimeoutFailure) {
    switch (cause.timeoutType) {
      case TimeoutType.SCHEDULE_TO_START:
        return { outcome: 'dispatch_failed', reason: Reason.AckTimeout, retryable: true, dispatchFailure: true };
      case TimeoutType.SCHEDULE_TO_CLOSE:
        return claimed
          ? { outcome: 'execution_timeout', reason: Reason.ExecutionTimeout, retryable: true, dispatchFailure: false }
          : { outcome: 'dispatch_failed', reason: Reason.ReservationExpired, retryable: true, dispatchFailure: true };
      case TimeoutType.HEARTBEAT:
        return { outcome: 'lease_expired', reason: Reason.LeaseExpired, retryable: true, dispatchFailure: false };
      default:
        return {
          outcome: 'execution_timeout',
          reason: Reason.ExecutionTimeout,
          retryable: true,
          dispatchFailure: false,
        };
    }
  }
  // Anything else is unsigned (an error thrown by whoever completed the activity): never terminal on its own.
  if (cause instanceof ApplicationFailure) {
    return {
      outcome: 'retryable_failure',
      reason: Reason.HostError,
      message: cause.message,
      retryable: true,
      dispatchFailure: false,
    };
  }
  const message = err instanceof Error ? err.message : String(err);
  return { outcome: 'retryable_failure', reason: Reason.HostError, message, retryable: true, dispatchFailure: false };
}

export async function taskWorkflow(input: TaskInput): Promise<TaskResult> {
  const info = workflowInfo();
  const submittedAt = input.submittedAt ?? info.startTime.getTime();
  const state: TaskView = initialTaskView(input, submittedAt);
  let admission: Admission | undefined;
  /** The attempt number we are waiting a device for; 0 when not waiting. */
  let awaitingAttempt = 0;
  let assignment: Assignment | undefined;
  /** The current attempt's host keys: reports and results must be signed with them. */
  let currentKeys: HostPublicKeys | undefined;
  /** Assignments that arrived when nobody wanted them: released as they arrive (and before the workflow ends). */
  const stray: Assignment[] = [];

  const root = CancellationScope.current();
  // A cancel shows from the moment it was requested, not only once the run let go (a query sends no command).
  setHandler(taskStateQuery, () =>
    !state.cancelRequested && root.consideredCancelled ? { ...state, cancelRequested: true } : state,
  );
  /** An answer for an earlier submission under this id (sent again), not for this one. */
  const earlier = (m: { submittedAt?: number }): boolean =>
    m.submittedAt !== undefined && m.submittedAt !== submittedAt;
  onSignal(admissionSignal, (a) => {
    if (earlier(a)) {
      log.warn('ignored an admission for an earlier submission of this task id', { taskId: input.taskId });
      return;
    }
    admission ??= a;
    state.admitted = admission.accepted;
  });
  /**
   * A repeat of the current assignment comes from the same device. The same lease from another
   * device is a second hold for this attempt (a pool's round run again after its workflow task was
   * lost replays its lease ids and may pick another device): a stray, released, or that device
   * would stay held until its pool's hold sweep. Runs recorded before this took it as a repeat.
   */
  const sameDeviceOrOld = (cur: AttemptRecord, a: Assignment): boolean =>
    (cur.hostId === a.hostId && cur.deviceId === a.deviceId) || !patched('task-stray-same-lease-other-device-v1');
  onSignal(assignmentSignal, (a) => {
    if (earlier(a)) {
      stray.push(a); // released: whatever holds that lease is not for this submission
      return;
    }
    // The scheduler skips the admission answer when it assigns a device in the same step.
    if (a.attempt === 1) admission ??= { accepted: true };
    state.admitted = admission?.accepted ?? state.admitted;
    if (a.attempt === awaitingAttempt && assignment === undefined && !state.cancelRequested) {
      assignment = a;
    } else if (!(state.current && state.current.leaseId === a.leaseId && sameDeviceOrOld(state.current, a))) {
      stray.push(a);
    }
  });
  setHandler(
    reportAttemptUpdate,
    async (report) => {
      // A report and the end of its attempt can arrive in the same workflow task, and updates are
      // handled before activity results. Let the attempt's result land first, then check again:
      // a report for an attempt Temporal already closed (lease expired, done) changes nothing.
      await condition(() => true);
      validateReport(state, report, currentKeys);
      applyReport(state, report);
      publish(state);
      return { accepted: true as const };
    },
    { validator: (report) => validateReport(state, report, currentKeys) },
  );

  const problems = validateTaskInput(input);
  if (input.policy) {
    const bounds = policyBoundProblems(input.policy);
    if (bounds.length > 0 && patched('task-policy-bounds-v1')) problems.push(...bounds);
  }
  publish(state);
  const scheduler = getExternalWorkflowHandle(schedulerWorkflowId(input.pool));
  // Patched: a task a control plane from before reservationGraceMs started holds with the default grace.
  const holdMs =
    problems.length === 0
      ? reservationHoldMs(
          input.policy,
          input.policy.reservationGraceMs !== undefined && patched('task-reservation-grace-v1'),
        )
      : 0;
  const enqueueRequest = (attempt: number, first: boolean): EnqueueRequest => {
    const req: EnqueueRequest = {
      taskId: input.taskId,
      constraints: input.constraints,
      priority: input.priority,
      submittedAt,
      attempt,
      holdMs,
      first,
    };
    // A retry goes elsewhere when the pool has another device for it (the scheduler decides).
    const failedOn = [
      ...new Set(
        state.attempts
          .filter((a) => a.outcome !== undefined && a.outcome !== 'done')
          .map((a) => deviceKey(a.hostId, a.deviceId)),
      ),
    ];
    if (!first && failedOn.length > 0) req.avoid = failedOn;
    return req;
  };
  const enqueue = async (attempt: number, first: boolean): Promise<void> => {
    const req = enqueueRequest(attempt, first);
    awaitingAttempt = attempt;
    try {
      await scheduler.signal(enqueueTaskSignal, asSignal(enqueueTaskSignal, req));
    } catch (err) {
      // The pool's scheduler does not run yet: have the control plane start it, then try once more.
      log.info('scheduler missing; asking the control plane to start it', { pool: input.pool, error: String(err) });
      await ensureScheduler(input.pool);
      await scheduler.signal(enqueueTaskSignal, asSignal(enqueueTaskSignal, req));
    }
  };

  // The pool's scheduler started anew and lost its queue: a task waiting for its admission or a
  // device sends its enqueue again (the pool keeps one entry per task; a first enqueue again is
  // answered again, and the task keeps its first answer). Any other task has nothing queued.
  const waitingToEnqueueAgain = (): boolean =>
    awaitingAttempt > 0 &&
    assignment === undefined &&
    admission?.accepted !== false &&
    !state.cancelRequested &&
    !root.consideredCancelled;
  // The same, read by the pool's recovery, which sends many tasks' enqueues in one signal.
  setHandler(taskEnqueueRequestQuery, () =>
    waitingToEnqueueAgain() ? enqueueRequest(awaitingAttempt, admission === undefined) : null,
  );
  onSignal(requeueTaskSignal, ({ pool, reason }) => {
    if (pool !== input.pool || !waitingToEnqueueAgain()) return;
    // Asked only when it applies: a run recorded by a worker from before took the signal and did nothing.
    if (!patched('task-requeue-v1')) return;
    log.info('enqueueing again: the pool started anew', { taskId: input.taskId, attempt: awaitingAttempt, reason });
    enqueue(awaitingAttempt, admission === undefined).catch((err: unknown) => {
      if (!isCancellation(err)) log.warn('could not enqueue again', { taskId: input.taskId, error: String(err) });
    });
  });

  /** Cleanup must reach the device and the scheduler even after the task was cancelled. */
  const uncancellable = <T>(fn: () => Promise<T>): Promise<T> => CancellationScope.nonCancellable(fn);

  /**
   * Strays are released as they arrive, not when the task ends: a long run would otherwise keep a
   * device it never uses until then. Runs recorded before this change released them only at the
   * end; the patch is asked only once a stray arrives, so a run that meets none records no marker.
   */
  let releasing = 0;
  void uncancellable(async () => {
    for (;;) {
      await condition(() => stray.length > 0);
      if (!patched('task-release-stray-promptly-v1')) return;
      releasing++;
      await releaseStray().finally(() => releasing--);
    }
  });

  const result = await run();
  await uncancellable(async () => {
    // Answer every pending update and free any device offered after we stopped wanting one.
    await condition(allHandlersFinished);
    await releaseStray();
    await condition(() => releasing === 0);
  });
  if (result.status === 'done') return result;
  if (result.status === 'cancelled') throw new CancelledFailure('task cancelled');
  throw ApplicationFailure.create({
    type: result.status === 'rejected' ? typeForReason(result.reason) : ErrorType.TaskFailed,
    message: `task ${result.status}: ${result.reason ?? ''}${result.message ? ` (${result.message})` : ''}`,
    nonRetryable: true,
    details: [result],
  });

  async function run(): Promise<TaskResult> {
    if (problems.length > 0) {
      admission = { accepted: false, reason: Reason.InvalidTask, message: `invalid task: ${problems.join('; ')}` };
      return finish(state, { status: 'rejected', reason: Reason.InvalidTask, message: admission.message });
    }
    try {
      try {
        await enqueue(1, true);
      } catch (err) {
        if (isCancellation(err)) throw err;
        admission = {
          accepted: false,
          reason: Reason.UnknownPool,
          message: `pool "${input.pool}" has no scheduler: ${String(err)}`,
        };
      }
      await condition(() => admission !== undefined);
      if (!admission!.accepted) {
        return finish(state, { status: 'rejected', reason: admission!.reason, message: admission!.message });
      }

      for (;;) {
        const attemptNo = state.attempts.length + 1;
        // A timer only for a task that asked for a limit: the others record exactly what they did before.
        // Patched too: a task a control plane from before ran without the limit replays without it.
        const limit =
          input.policy.maxQueueWaitMs !== undefined && patched('task-queue-wait-limit-v1')
            ? input.policy.maxQueueWaitMs
            : undefined;
        if (limit === undefined) await condition(() => assignment !== undefined);
        else if (!(await condition(() => assignment !== undefined, limit))) {
          return await uncancellable(() => giveUpWaiting(limit));
        }
        const a = assignment!;
        assignment = undefined;
        awaitingAttempt = 0;
        const now = Date.now();
        const record: AttemptRecord = {
          attempt: a.attempt,
          leaseId: a.leaseId,
          hostId: a.hostId,
          deviceId: a.deviceId,
          assignedAt: now,
          ackDeadline: now + input.policy.ackTimeoutMs,
          leaseTimeoutMs: input.policy.leaseTimeoutMs,
        };
        state.attempts.push(record);
        state.current = record;
        currentKeys = a.hostKeys;
        state.nextAttemptAt = undefined;
        state.status = 'assigned';
        publish(state);

        let c = await runAttempt(input, record, a.hostKeys, a.reservedAt + holdMs);
        /** The release's detail: the cancel, or what the pool must know besides (a host gone silent). */
        let releaseDetail = c.reason;
        if (root.consideredCancelled && c.outcome !== 'done') {
          // A cancel that waited out a lost lease or a missed ack still tells the pool the host
          // went silent, so its devices get no work until it proves alive (as for any lost lease).
          const silent = c.reason === Reason.LeaseExpired || c.reason === Reason.AckTimeout;
          releaseDetail = silent && patched('task-cancel-tells-silent-host-v1') ? c.reason : Reason.Cancelled;
          c = { outcome: 'cancelled', reason: Reason.Cancelled, retryable: false, dispatchFailure: false };
        }
        record.endedAt = Date.now();
        record.outcome = c.outcome;
        record.reason = c.reason;
        record.message = c.message;
        state.current = undefined;
        await uncancellable(() => releaseDevice(record, c.outcome, releaseDetail));

        if (c.outcome === 'done') return finish(state, { status: 'done', output: c.message });
        if (c.outcome === 'cancelled') return finish(state, { status: 'cancelled', reason: Reason.Cancelled });
        state.consecutiveDispatchFailures = c.dispatchFailure ? state.consecutiveDispatchFailures + 1 : 0;
        if (!c.retryable) return finish(state, { status: 'failed', reason: c.reason, message: c.message });
        if (c.dispatchFailure && state.consecutiveDispatchFailures >= input.policy.maxDispatchFailures) {
          return finish(state, {
            status: 'failed',
            reason: Reason.DispatchFailed,
            message: `${state.consecutiveDispatchFailures} consecutive dispatch failures (last: ${c.reason})`,
          });
        }
        if (attemptNo >= input.policy.maxAttempts) {
          return finish(state, {
            status: 'failed',
            reason: c.dispatchFailure ? Reason.DispatchFailed : c.reason,
            message: `attempt limit ${input.policy.maxAttempts} reached (last: ${c.reason})`,
          });
        }
        const delay = retryDelayMs(input.policy, attemptNo, c);
        state.status = 'queued';
        state.nextAttemptAt = Date.now() + delay;
        publish(state);
        if (delay > 0) await sleep(delay); // a timer is a billed action: none when nothing is left to wait
        try {
          await enqueue(attemptNo + 1, false);
        } catch (err) {
          // Not queued: the scheduler is gone and could not be started again. The task ends here as
          // failed, through finish() like every other end (result, search attributes, strays
          // released). Histories recorded before this change failed the workflow with the error.
          if (isCancellation(err) || !patched('task-retry-enqueue-failed-v1')) throw err;
          awaitingAttempt = 0;
          if (assignment) {
            stray.push(assignment);
            assignment = undefined;
          }
          const cause = err instanceof ActivityFailure ? (err.cause ?? err) : err; // ensureScheduler's own error
          return finish(state, {
            status: 'failed',
            reason: Reason.SchedulerUnavailable,
            message:
              `attempt ${attemptNo + 1} could not be queued: the scheduler of pool "${input.pool}" is unavailable ` +
              `(${cause instanceof Error ? cause.message : String(cause)})`,
          });
        }
      }
    } catch (err) {
      if (!isCancellation(err)) throw err;
      state.cancelRequested = true;
      return await uncancellable(async () => {
        const cur = state.current;
        if (cur) {
          cur.endedAt = Date.now();
          cur.outcome = 'cancelled';
          cur.reason = Reason.Cancelled;
          state.current = undefined;
          await releaseDevice(cur, 'cancelled');
        } else if (awaitingAttempt > 0) {
          await scheduler
            .signal(dequeueTaskSignal, asSignal(dequeueTaskSignal, { taskId: input.taskId, submittedAt }))
            .catch((e) => log.warn('dequeue failed', { error: String(e) }));
        }
        if (assignment) stray.push(assignment);
        return finish(state, { status: 'cancelled', reason: Reason.Cancelled });
      });
    }
  }

  /**
   * No device within maxQueueWaitMs: out of the queue, failed. A reservation already on its way is
   * dropped by the pool (it forgets a dequeued task's in-flight hold) or, arriving here after all,
   * released as a stray before the workflow ends.
   */
  async function giveUpWaiting(limitMs: number): Promise<TaskResult> {
    awaitingAttempt = 0;
    await scheduler
      .signal(dequeueTaskSignal, asSignal(dequeueTaskSignal, { taskId: input.taskId, submittedAt }))
      .catch((e) => log.warn('dequeue failed', { error: String(e) }));
    if (assignment) {
      stray.push(assignment);
      assignment = undefined;
    }
    const last = state.attempts[state.attempts.length - 1];
    return finish(state, {
      status: 'failed',
      reason: Reason.QueueTimeout,
      message:
        `no device was assigned within maxQueueWaitMs (${limitMs} ms)` +
        (last?.reason ? `; the last attempt ended: ${last.reason}` : ''),
    });
  }

  async function runAttempt(
    task: TaskInput,
    record: AttemptRecord,
    keys: HostPublicKeys,
    holdDeadline: number,
  ): Promise<Classified> {
    // The device frees itself at holdDeadline: the attempt must be over well before that.
    const untilHold = holdDeadline - Date.now() - RESERVATION_SAFETY_MS;
    if (untilHold <= 1_000) {
      return { outcome: 'dispatch_failed', reason: Reason.ReservationExpired, retryable: true, dispatchFailure: true };
    }
    const host = proxyActivities<HostActivities>({
      taskQueue: hostTaskQueue(record.hostId),
      scheduleToStartTimeout: Math.min(task.policy.ackTimeoutMs, untilHold),
      scheduleToCloseTimeout: untilHold,
      startToCloseTimeout: task.policy.executionTimeoutMs,
      heartbeatTimeout: task.policy.leaseTimeoutMs,
      retry: { maximumAttempts: 1 },
      cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    });
    try {
      const assignment: HostAssignment = {
        taskId: task.taskId,
        attempt: record.attempt,
        leaseId: record.leaseId,
        hostId: record.hostId,
        deviceId: record.deviceId,
        work: task.work,
        leaseTimeoutMs: task.policy.leaseTimeoutMs,
      };
      // Sealed: readable only by the owning host (the control plane's codec encrypts it to keys.box).
      const signed = await host.runAssignment({
        sealedFor: { hostId: record.hostId, box: keys.box },
        body: assignment,
      });
      const r = signed?.outcome;
      const body = {
        taskId: task.taskId,
        attempt: record.attempt,
        leaseId: record.leaseId,
        hostId: record.hostId,
        outcome: r,
      };
      if (!r || !verifySignature(SignDomain.Result, body, signed.sig, keys.signing)) {
        log.warn('attempt result not signed by the owning host: rejected', { attempt: record.attempt });
        return { outcome: 'retryable_failure', reason: Reason.ForgedResult, retryable: true, dispatchFailure: false };
      }
      record.claimedAt ??= r.claimedAt;
      record.startedAt ??= r.startedAt;
      // A short run reports nothing on its way (host reportDelayMs): its last progress line comes here.
      // It is this attempt's last word, newer than any report of it (seq restarts with each attempt).
      if (r.lastProgressSeq > 0 && typeof r.lastProgress === 'string') {
        state.progress = { seq: r.lastProgressSeq, message: r.lastProgress.slice(0, 500), at: r.finishedAt };
      }
      const c = classifyRunOutcome(r);
      return r.status === 'done' ? { ...c, message: r.output ?? r.message } : c;
    } catch (err) {
      if (isCancellation(err)) throw err;
      return classifyActivityError(err, record.claimedAt !== undefined);
    }
  }

  async function releaseDevice(record: AttemptRecord, reason: string, detail?: string): Promise<void> {
    if (input.releaseViaPool) {
      const { hostId, deviceId, leaseId } = record;
      try {
        await scheduler.signal(
          taskReleasedSignal,
          asSignal(taskReleasedSignal, { hostId, deviceId, leaseId, taskId: input.taskId, reason, detail }),
        );
        return;
      } catch (e) {
        log.warn('could not tell the pool the attempt ended; releasing at the device', { error: String(e) });
      }
    }
    await getExternalWorkflowHandle(deviceWorkflowId(record.hostId, record.deviceId))
      .signal(releaseDeviceSignal, asSignal(releaseDeviceSignal, { leaseId: record.leaseId, reason, detail }))
      .catch((e) => log.warn('release failed; the device frees itself at its hold deadline', { error: String(e) }));
  }

  async function releaseStray(): Promise<void> {
    for (;;) {
      for (const a of stray.splice(0)) {
        await releaseDevice(
          { hostId: a.hostId, deviceId: a.deviceId, leaseId: a.leaseId } as AttemptRecord,
          'not_needed',
        );
      }
      // Each release is a workflow task of its own: an assignment that arrived meanwhile is released
      // too, not left held until its hold deadline. Histories recorded before this change ended
      // with it unreleased (the patch is asked only when one did arrive: no marker otherwise).
      if (stray.length === 0 || !patched('task-release-stray-drain-v1')) return;
    }
  }
}

function typeForReason(reason: string | undefined): string {
  switch (reason) {
    case Reason.QueueFull:
      return ErrorType.QueueFull;
    case Reason.UnknownPool:
      return ErrorType.UnknownPool;
    default:
      return ErrorType.InvalidTask;
  }
}

export function validateReport(state: TaskView, r: AttemptReport, keys: HostPublicKeys | undefined): void {
  const cur = state.current;
  if (
    !cur ||
    !keys ||
    r.taskId !== state.taskId ||
    cur.attempt !== r.attempt ||
    cur.leaseId !== r.leaseId ||
    cur.hostId !== r.hostId
  ) {
    throw ApplicationFailure.nonRetryable(
      `report for attempt ${r.attempt} does not match the current attempt ${cur ? cur.attempt : 'none'}`,
      ErrorType.StaleLease,
    );
  }
  if (r.kind === 'progress' && (typeof r.seq !== 'number' || !Number.isInteger(r.seq) || r.seq < 0)) {
    throw ApplicationFailure.nonRetryable('progress needs an integer seq >= 0', ErrorType.InvalidTask);
  }
  const { sig, ...body } = r;
  if (!verifySignature(SignDomain.Report, body, sig, keys.signing)) {
    throw ApplicationFailure.nonRetryable(`report not signed by host ${cur.hostId}`, ErrorType.BadSignature);
  }
  if (r.kind === 'progress' && state.progressReports >= MAX_PROGRESS_REPORTS) {
    // Rejected in the validator, so nothing reaches history; heartbeat details still carry it.
    throw ApplicationFailure.nonRetryable('progress report budget used up', ErrorType.ProgressBudget);
  }
}

export function applyReport(state: TaskView, r: AttemptReport): void {
  const cur = state.current!;
  cur.lastHeartbeatAt = r.at;
  const rank: Record<TaskStatus, number> = {
    queued: 0,
    assigned: 1,
    dispatched: 2,
    running: 3,
    done: 4,
    failed: 4,
    cancelled: 4,
    rejected: 4,
  };
  if (r.kind === 'claimed') {
    cur.claimedAt ??= r.at;
    if (rank[state.status] < rank.dispatched) state.status = 'dispatched';
  } else if (r.kind === 'started') {
    cur.claimedAt ??= r.claimedAt ?? r.at;
    cur.startedAt ??= r.at;
    if (rank[state.status] < rank.running) state.status = 'running';
  } else if (r.kind === 'progress') {
    state.progressReports++;
    if (state.progress === undefined || r.seq! > state.progress.seq) {
      state.progress = { seq: r.seq!, message: r.message ?? '', at: r.at };
    }
  }
}

function finish(state: TaskView, r: Omit<TaskResult, 'attempts' | 'finishedAt'>): TaskResult {
  const result: TaskResult = { ...r, attempts: state.attempts.length, finishedAt: Date.now() };
  state.result = result;
  state.status = r.status;
  state.nextAttemptAt = undefined;
  publish(state);
  return result;
}

function publish(state: TaskView): void {
  if (!state.work || !state.constraints) return; // invalid input: nothing meaningful to show
  const cur = state.current ?? state.attempts[state.attempts.length - 1];
  // Upsert only what changed: every upsert is a history event and a billed action.
  const current = workflowInfo().typedSearchAttributes;
  const wanted: SearchAttributeUpdatePair[] = [
    { key: FleetKind, value: 'task' },
    { key: FleetStatus, value: state.status },
    { key: FleetPool, value: state.pool },
    { key: FleetAttempt, value: state.attempts.length },
    ...(state.constraints.driverType ? [{ key: FleetDriverType, value: state.constraints.driverType }] : []),
    ...(cur
      ? [
          { key: FleetHostId, value: cur.hostId },
          { key: FleetDeviceId, value: cur.deviceId },
        ]
      : []),
  ];
  // `assigned` and `dispatched` are transient: not worth an upsert (a billed action) of their own.
  // The attempt's host and device are indexed together with `running` (INDEXED_STATUSES).
  const transient = state.status === 'assigned' || state.status === 'dispatched';
  const changed = transient ? [] : wanted.filter((p) => current.get(p.key) !== p.value);
  if (changed.length > 0) upsertSearchAttributes(changed);
  const what = state.work.kind === 'goal' ? `goal: ${state.work.goal}` : `workflow: ${state.work.definition}`;
  const where = cur ? `${cur.hostId}/${cur.deviceId} (attempt ${cur.attempt})` : 'no device yet';
  const lines = [`**${state.status}** · ${what}`, `device: ${where}`];
  if (state.nextAttemptAt) lines.push(`next attempt at ${new Date(state.nextAttemptAt).toISOString()}`);
  if (state.progress) lines.push(`progress #${state.progress.seq}: ${state.progress.message}`);
  if (state.result?.reason) lines.push(`reason: ${state.result.reason}`);
  setCurrentDetails(lines.join('\n'));
}
