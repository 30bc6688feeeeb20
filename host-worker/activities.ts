/**
 * The host's one activity: run an assignment on a local device. It runs on `fleet.host.<hostId>`,
 * so only this host's worker (polling outbound) receives it; its input is sealed to this host's
 * key and its result, reports and failures-that-matter are signed with this host's key, so a
 * worker polling someone else's queue can neither read the work nor forge its outcome.
 * The activity's heartbeat timeout is the lease: heartbeats renew it, and a lost lease (or a
 * cancelled task) aborts the runner. The host sends those heartbeats itself and reads each answer,
 * so a run whose lease it can no longer prove stops before the server times it out (lease.ts).
 */
import { Context } from '@temporalio/activity';
import {
  ActivityCancelledError,
  ActivityNotFoundError,
  ActivityPausedError,
  ActivityResetError,
  type Client,
} from '@temporalio/client';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { ErrorType, Reason } from '../workflows/errors';
import { SignDomain } from '../workflows/identity';
import { reportAttemptUpdate } from '../workflows/messages';
import type {
  AttemptReport,
  DeviceSnapshot,
  HostAssignment,
  RunOutcome,
  Sealed,
  SignedRunOutcome,
} from '../workflows/types';
import { sign, type HostCredential } from './identity';
import type { DeviceClaims } from './claims';
import { processIdentity, type Journal, type JournalEntry } from './journal';
import { UnknownDefinitionError, type RunResult, type Runners } from './runners';
import type { HostLog } from './logging';
import { instant, leaseTimings, ProvenLease } from './lease';

export interface HostActivities {
  runAssignment(sealed: Sealed<HostAssignment>): Promise<SignedRunOutcome>;
}

export interface HostActivityDeps {
  credential: HostCredential;
  client: Client;
  runners: Runners;
  /** The host's current devices. */
  devices(): ReadonlyMap<string, DeviceSnapshot>;
  /** Minimum spacing of progress reports sent to the task (heartbeats carry every line). */
  progressIntervalMs: number;
  /**
   * How long after the claim the first status report waits (default 1 s). A run that ends within it
   * sends no report at all: its signed result carries claimedAt and startedAt, so a short task costs
   * no update and no `running` upsert. After it, the report says `started` (the claim riding on it),
   * or `claimed` if the runner has not started yet.
   */
  reportDelayMs?: number;
  /** Which devices have a runner on them (one per device; a newer assignment takes over). */
  claims: Pick<DeviceClaims, 'claim' | 'release'>;
  /**
   * How long a new assignment waits for an earlier attempt's runner still on its device to stop
   * once asked (DeviceClaims.claim), before it is refused as device_unavailable.
   */
  takeoverWaitMs: number;
  /** Active assignments persisted before work starts (seed 004 journal); removed when the attempt ends. */
  journal?: Pick<Journal, 'add' | 'remove'>;
  /**
   * An attempt ended with its runner's process group still alive after SIGKILL (`entry.pid`): the
   * host keeps the device out of rotation until the group is gone, then removes the journal entry,
   * which is left in place (with the group's pid) until then.
   */
  leftBehind?(entry: JournalEntry): void;
  /** Each message with its level (info when left out). */
  log?: HostLog;
}

const isStale = (err: unknown): boolean => {
  const cause = (err as { cause?: unknown })?.cause;
  return cause instanceof ApplicationFailure && cause.type === ErrorType.StaleLease;
};

export function createHostActivities(deps: HostActivityDeps): HostActivities {
  const log = deps.log ?? (() => undefined);
  const hostId = deps.credential.hostId;

  return {
    async runAssignment(sealed: Sealed<HostAssignment>): Promise<SignedRunOutcome> {
      const ctx = Context.current();
      const a = sealed.body;
      /** When this host took the device for the attempt (after any take-over wait). */
      let claimedAt = Date.now();
      const signed = (outcome: RunOutcome): SignedRunOutcome => ({
        outcome,
        sig: sign(deps.credential, SignDomain.Result, {
          taskId: a.taskId,
          attempt: a.attempt,
          leaseId: a.leaseId,
          hostId,
          outcome,
        }),
      });
      const refuse = (
        reason: string,
        message: string,
        dispatchFailure: boolean,
        retryable = true,
        ran?: Pick<RunOutcome, 'startedAt' | 'lastProgressSeq' | 'lastProgress'>,
      ) =>
        signed({
          status: 'failed',
          retryable,
          dispatchFailure,
          reason,
          message,
          claimedAt,
          finishedAt: Date.now(),
          lastProgressSeq: 0,
          ...ran,
        });

      if (a.hostId !== hostId) {
        return refuse(Reason.DeviceUnavailable, `assignment for host ${a.hostId} reached host ${hostId}`, true);
      }
      /** Why the device cannot take the attempt now, if it cannot. */
      const unusable = (d: DeviceSnapshot | undefined): string | undefined =>
        !d || d.state === 'offline' || d.health !== 'good'
          ? `device ${a.deviceId} is ${d ? `${d.state}/${d.health}` : 'not attached'} on host ${hostId}`
          : undefined;
      const notNow = unusable(deps.devices().get(a.deviceId));
      if (notNow) return refuse(Reason.DeviceUnavailable, notNow, true);
      let seq = 0;
      let lastMessage = '';
      /** The result's progress fields (a run shorter than reportDelayMs sent no progress report). */
      const progressSoFar = () => ({ lastProgressSeq: seq, ...(seq > 0 ? { lastProgress: lastMessage } : {}) });
      // Aborted when a newer attempt is given this device, a report is refused as stale, or the
      // host can no longer prove its lease (no heartbeat answered for most of a lease).
      const superseded = new AbortController();
      /** Why the run stopped itself when it lost its lease (the attempt's failure says so). */
      let fenced: string | undefined;
      const stopRun = (reason: Error, level: 'info' | 'warn' = 'info') => {
        if (superseded.signal.aborted) return;
        log(
          'runner asked to stop',
          { taskId: a.taskId, attempt: a.attempt, deviceId: a.deviceId, reason: reason.message },
          level,
        );
        superseded.abort(reason);
      };
      const holder = { stop: (reason: string) => stopRun(new Error(reason)) };
      const staleLease = () => ApplicationFailure.nonRetryable(fenced ?? 'lease superseded', ErrorType.StaleLease);
      // Aborted when the run must be gone at once (RunContext.kill): at a lost lease's deadline, or
      // when the server no longer has the attempt. Whatever stopped the run first.
      const kill = new AbortController();
      let killAt: number | undefined;
      let killTimer: NodeJS.Timeout | undefined;
      const killWithin = (withinMs: number, why: string) => {
        const at = performance.now() + withinMs;
        if (kill.signal.aborted || (killAt !== undefined && killAt <= at)) return;
        killAt = at;
        clearTimeout(killTimer);
        const fire = () => {
          if (kill.signal.aborted) return;
          log('runner killed', { taskId: a.taskId, attempt: a.attempt, deviceId: a.deviceId, reason: why }, 'warn');
          kill.abort(new Error(why));
        };
        if (withinMs <= 0) fire();
        else killTimer = setTimeout(fire, withinMs);
      };
      /** The run must be gone within `withinMs`: the server may time the attempt out then (or already has). */
      const loseLease = (why: string, withinMs: number) => {
        fenced ??= `lease lost: ${why} (lease ${a.leaseTimeoutMs} ms)`;
        stopRun(new Error(fenced), 'warn');
        killWithin(withinMs, fenced);
      };
      // The SDK cancels the activity itself when its heartbeat finds the attempt gone, or when its
      // own timer says the attempt timed out: the retry may be running already.
      const onCancelled = () => {
        const d = ctx.cancellationDetails;
        if (d?.notFound || d?.timedOut)
          loseLease(
            `the Temporal server no longer has attempt ${a.attempt} (${d.notFound ? 'not found' : 'timed out'})`,
            0,
          );
      };
      ctx.cancellationSignal.addEventListener('abort', onCancelled, { once: true });

      // Renew the lease until the very end (reports included), and while waiting for the device. No
      // heartbeat at the start: the lease runs from the activity's start anyway, and each heartbeat
      // that reaches the server is billed. Sent by this host's client, so that the answer shows
      // which ones arrived (lease.ts); each carries the latest line.
      //
      // The SDK's heartbeat is given each one too. Its worker cancels an activity that has not sent
      // one of *its* heartbeats for a lease + 5 s (a local timer that only they reset), which would
      // end every run longer than that; it sends at most one per 0.8 lease of those it is given.
      const timings = leaseTimings(a.leaseTimeoutMs);
      const lease = new ProvenLease(a.leaseTimeoutMs, instant());
      let over = false;
      let beating = false;
      // Also while a stopped run winds down: the lease holds it, and a not-found answer kills it.
      const heartbeat = () => {
        if (over) return;
        const details = { seq, message: lastMessage };
        ctx.heartbeat(details);
        if (beating) return;
        beating = true;
        const sentAt = instant();
        const sent = Promise.resolve().then(() => deps.client.activity.heartbeat(ctx.info.taskToken, details));
        withTimeout(sent, timings.beatDeadlineMs)
          .then(
            () => lease.answered(sentAt),
            (err: unknown) => {
              if (over) return;
              if (
                err instanceof ActivityCancelledError ||
                err instanceof ActivityPausedError ||
                err instanceof ActivityResetError
              ) {
                // Received, so the lease holds; the answer asks the run to stop. The SDK's own
                // heartbeat brings that to this activity the way the SDK delivers it
                // (ctx.cancellationSignal, and the outcome it reports for a cancel, pause or reset).
                lease.answered(sentAt);
                ctx.heartbeat(details);
              } else if (err instanceof ActivityNotFoundError) {
                // Its retry may already be running: no grace.
                loseLease(`the Temporal server no longer has attempt ${a.attempt} (timed out, or ended)`, 0);
              }
              // Anything else: not answered; the lease counts from the last heartbeat that was.
            },
          )
          .finally(() => (beating = false));
      };
      const renew = setInterval(heartbeat, timings.beatEveryMs);
      // Self-fencing: stop before the server can time the lease out, and be gone by then (lease.ts);
      // also a run that was already stopping for another reason.
      const fence = setInterval(() => {
        const now = instant();
        const silent = lease.lost(now);
        if (silent !== undefined)
          loseLease(`no heartbeat answered by the Temporal server for ${Math.round(silent)} ms`, lease.stopWithin(now));
      }, timings.checkEveryMs);
      const stopTimers = () => {
        over = true;
        clearInterval(renew);
        clearInterval(fence);
        clearTimeout(killTimer);
        ctx.cancellationSignal.removeEventListener('abort', onCancelled);
      };
      let claimed: boolean;
      try {
        claimed = await deps.claims.claim(a.deviceId, holder, deps.takeoverWaitMs, ctx.cancellationSignal);
      } catch (err) {
        stopTimers();
        throw err;
      }
      claimedAt = Date.now();
      // Not claimed in time, or changed while it waited for the device.
      const device = deps.devices().get(a.deviceId);
      const refusal = claimed
        ? unusable(device)
        : `device ${a.deviceId} is still busy with an earlier assignment (asked to stop, not done within ${deps.takeoverWaitMs} ms)`;
      if (refusal || superseded.signal.aborted || ctx.cancellationSignal.aborted) {
        stopTimers();
        if (claimed) deps.claims.release(a.deviceId, holder);
        if (ctx.cancellationSignal.aborted)
          throw new CancelledFailure(`run stopped: ${String(ctx.cancellationSignal.reason)}`);
        if (superseded.signal.aborted) throw staleLease();
        return refuse(Reason.DeviceUnavailable, refusal!, true);
      }
      const entry: JournalEntry = {
        taskId: a.taskId,
        attempt: a.attempt,
        leaseId: a.leaseId,
        deviceId: a.deviceId,
        startedAt: claimedAt,
        workflowId: ctx.info.workflowExecution!.workflowId,
        runId: ctx.info.workflowExecution!.runId,
        activityId: ctx.info.activityId,
      };
      /** The runner's process group that outlived SIGKILL, if it left one (RunContext.leftBehind). */
      let survivors: number | undefined;
      try {
        await deps.journal?.add(entry);
        return await run(device!);
      } finally {
        stopTimers();
        if (survivors !== undefined) {
          const left = { ...entry, pid: survivors, ...processIdentity(survivors) };
          log(
            "the run's processes outlived SIGKILL: its device stays out of rotation until they are gone",
            { taskId: a.taskId, attempt: a.attempt, deviceId: a.deviceId, pid: survivors },
            'error',
          );
          // Before the claim goes, so the device is never offered while they live.
          deps.leftBehind?.(left);
          await deps.journal?.add(left).catch((err) => log('journal pid not recorded', { error: String(err) }, 'error'));
        }
        deps.claims.release(a.deviceId, holder);
        if (survivors === undefined) {
          await deps.journal
            ?.remove(a.taskId, a.attempt)
            .catch((err) => log('journal remove failed', { error: String(err) }, 'error'));
        }
      }

      async function run(onDevice: DeviceSnapshot): Promise<SignedRunOutcome> {
        const task = deps.client.workflow.getHandle(ctx.info.workflowExecution!.workflowId);
        /** Reports are signed, best effort, and never block the run for long: the result is authoritative. */
        const report = (r: Pick<AttemptReport, 'kind' | 'at' | 'seq' | 'message' | 'claimedAt'>) => {
          const body = { ...r, taskId: a.taskId, attempt: a.attempt, leaseId: a.leaseId, hostId };
          const full: AttemptReport = { ...body, sig: sign(deps.credential, SignDomain.Report, body) };
          return withTimeout(
            task.executeUpdate(reportAttemptUpdate, { args: [full] }),
            Math.max(1_000, Math.floor(a.leaseTimeoutMs / 2)),
          );
        };

        log('assignment claimed', { taskId: a.taskId, attempt: a.attempt, deviceId: a.deviceId });
        // A report refused as stale means our lease was superseded: stop the runner.
        const signal = AbortSignal.any([ctx.cancellationSignal, superseded.signal]);
        const reports: Promise<unknown>[] = [];
        const send = (r: Pick<AttemptReport, 'kind' | 'at' | 'seq' | 'message' | 'claimedAt'>) =>
          reports.push(
            report(r).catch((err) => {
              if (isStale(err)) holder.stop('lease superseded');
            }),
          );
        let startedAt: number | undefined;
        /** Set once reportDelayMs passed with the run still going: from then on reports go out as they happen. */
        let reportsOpen = false;
        let claimReported = false;
        let sentSeq = 0;
        let progressTimer: NodeJS.Timeout | undefined;
        const sendProgress = () => {
          progressTimer = undefined;
          if (!reportsOpen || seq === sentSeq) return;
          sentSeq = seq;
          send({ kind: 'progress', at: Date.now(), seq, message: lastMessage });
        };
        const reportTimer = setTimeout(() => {
          reportsOpen = true;
          if (startedAt !== undefined) send({ kind: 'started', at: startedAt, claimedAt });
          else {
            claimReported = true;
            send({ kind: 'claimed', at: claimedAt });
          }
          if (seq !== sentSeq && !progressTimer) progressTimer = setTimeout(sendProgress, deps.progressIntervalMs);
        }, deps.reportDelayMs ?? 1_000);
        const runCtx = {
          taskId: a.taskId,
          attempt: a.attempt,
          device: onDevice,
          signal,
          kill: kill.signal,
          leftBehind: (pgid: number) => {
            survivors = pgid;
          },
          started: () => {
            if (startedAt !== undefined) return;
            startedAt = Date.now();
            // Before reportDelayMs this is only remembered: the timer (or the result) tells the task.
            if (reportsOpen) send({ kind: 'started', at: startedAt, ...(claimReported ? {} : { claimedAt }) });
          },
          progress: (message: string) => {
            seq++;
            lastMessage = message.slice(0, 500); // the next heartbeat carries it
            if (reportsOpen && !progressTimer) progressTimer = setTimeout(sendProgress, deps.progressIntervalMs);
          },
        };

        let result: RunResult;
        try {
          result =
            a.work.kind === 'goal'
              ? await deps.runners.goal.runGoal(a.work.goal, runCtx)
              : await deps.runners.workflow.runDefinition({ name: a.work.definition, steps: a.work.steps }, runCtx);
        } catch (err) {
          if (superseded.signal.aborted) throw staleLease();
          if (ctx.cancellationSignal.aborted)
            throw new CancelledFailure(`run stopped: ${String(ctx.cancellationSignal.reason)}`);
          // What the run got to before it crashed: a run shorter than reportDelayMs reported none of it.
          const ran = { startedAt, ...progressSoFar() };
          if (err instanceof UnknownDefinitionError)
            return refuse(Reason.UnknownDefinition, err.message, false, false, ran);
          return refuse(
            Reason.RunnerFailed,
            `runner crashed: ${(err as Error)?.message ?? String(err)}`,
            false,
            true,
            ran,
          );
        } finally {
          clearTimeout(reportTimer);
          if (progressTimer) clearTimeout(progressTimer);
        }
        if (ctx.cancellationSignal.aborted)
          throw new CancelledFailure(`run stopped: ${String(ctx.cancellationSignal.reason)}`);
        if (superseded.signal.aborted) throw staleLease();
        sendProgress();
        await Promise.all(reports);
        return signed({
          status: result.status,
          retryable: result.status === 'failed' ? (result.retryable ?? false) : false,
          reason: result.reason,
          message: result.message,
          output: result.output,
          claimedAt,
          startedAt,
          finishedAt: Date.now(),
          ...progressSoFar(),
        });
      }
    },
  };
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
