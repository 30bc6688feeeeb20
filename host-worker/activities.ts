/**
 * The host's one activity: run an assignment on a local device. It runs on `fleet.host.<hostId>`,
 * so only this host's worker (polling outbound) ever receives it. The activity's heartbeat timeout
 * is the lease: heartbeats renew it, and a lost lease (or a cancelled task) aborts the runner.
 */
import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/errors';
import { reportAttemptUpdate } from '../workflows/messages';
import type { AttemptReport, DeviceSnapshot, HostAssignment, RunOutcome } from '../workflows/types';
import { UnknownDefinitionError, type Runners, type RunResult } from './runners';

export interface HostActivities {
  runAssignment(a: HostAssignment): Promise<RunOutcome>;
}

export interface HostActivityDeps {
  hostId: string;
  client: Client;
  runners: Runners;
  /** The host's current devices. */
  devices(): ReadonlyMap<string, DeviceSnapshot>;
  /** Minimum spacing of progress reports sent to the task (heartbeats carry every line). */
  progressIntervalMs: number;
  /**
   * Takes the device for one assignment; false when a previous assignment's runner is still on it
   * (e.g. its lease was lost but it has not stopped yet). `release` gives it back.
   */
  claimDevice(deviceId: string): boolean;
  releaseDevice(deviceId: string): void;
  log?(message: string, fields: Record<string, unknown>): void;
}

const isStale = (err: unknown): boolean => {
  const cause = (err as { cause?: unknown })?.cause;
  return cause instanceof ApplicationFailure && cause.type === ErrorType.StaleLease;
};

export function createHostActivities(deps: HostActivityDeps): HostActivities {
  const log = deps.log ?? (() => undefined);
  return {
    async runAssignment(a: HostAssignment): Promise<RunOutcome> {
      const ctx = Context.current();
      const claimedAt = Date.now();
      if (a.hostId !== deps.hostId) {
        throw ApplicationFailure.nonRetryable(
          `assignment for host ${a.hostId} reached host ${deps.hostId}`,
          ErrorType.WrongHost,
        );
      }
      const device = deps.devices().get(a.deviceId);
      if (!device || device.state === 'offline' || device.health !== 'good') {
        throw ApplicationFailure.retryable(
          `device ${a.deviceId} is ${device ? `${device.state}/${device.health}` : 'not attached'} on host ${deps.hostId}`,
          ErrorType.DeviceUnavailable,
        );
      }
      const onDevice: DeviceSnapshot = device;
      if (!deps.claimDevice(a.deviceId)) {
        throw ApplicationFailure.retryable(
          `device ${a.deviceId} is still busy with an earlier assignment`,
          ErrorType.DeviceUnavailable,
        );
      }
      let seq = 0;
      let lastMessage = '';
      // Renew the lease from the first moment, and until the very end (reports included).
      const heartbeat = () => ctx.heartbeat({ seq, message: lastMessage });
      heartbeat();
      const renew = setInterval(heartbeat, Math.max(100, Math.floor(a.leaseTimeoutMs / 3)));
      try {
        return await run();
      } finally {
        clearInterval(renew);
        deps.releaseDevice(a.deviceId);
      }

      async function run(): Promise<RunOutcome> {
        const task = deps.client.workflow.getHandle(ctx.info.workflowExecution!.workflowId);
        /** Reports are best effort and never block the run for long: the activity's result is authoritative. */
        const report = (r: Omit<AttemptReport, 'attempt' | 'leaseId' | 'hostId'>) =>
          withTimeout(
            task.executeUpdate(reportAttemptUpdate, {
              args: [{ ...r, attempt: a.attempt, leaseId: a.leaseId, hostId: a.hostId }],
            }),
            Math.max(1_000, Math.floor(a.leaseTimeoutMs / 2)),
          );

        log('assignment claimed', { taskId: a.taskId, attempt: a.attempt, deviceId: a.deviceId });
        // Claim: the task moves to `dispatched`. A rejected claim means our lease was superseded.
        try {
          await report({ kind: 'claimed', at: claimedAt });
        } catch (err) {
          if (isStale(err))
            throw ApplicationFailure.nonRetryable('lease superseded before the claim', ErrorType.StaleLease);
          log('claim report not confirmed; running anyway', { error: String(err) });
        }

        let startedAt: number | undefined;
        let sentSeq = 0;
        let progressTimer: NodeJS.Timeout | undefined;
        const reports: Promise<unknown>[] = [];
        const sendProgress = () => {
          progressTimer = undefined;
          if (seq === sentSeq) return;
          sentSeq = seq;
          reports.push(report({ kind: 'progress', at: Date.now(), seq, message: lastMessage }).catch(() => undefined));
        };
        const runCtx = {
          taskId: a.taskId,
          attempt: a.attempt,
          device: onDevice,
          signal: ctx.cancellationSignal,
          started: () => {
            if (startedAt !== undefined) return;
            startedAt = Date.now();
            reports.push(report({ kind: 'started', at: startedAt }).catch(() => undefined));
          },
          progress: (message: string) => {
            seq++;
            lastMessage = message.slice(0, 500);
            heartbeat();
            if (!progressTimer) progressTimer = setTimeout(sendProgress, deps.progressIntervalMs);
          },
        };

        let result: RunResult;
        try {
          result =
            a.work.kind === 'goal'
              ? await deps.runners.goal.runGoal(a.work.goal, runCtx)
              : await deps.runners.workflow.runDefinition({ name: a.work.definition, steps: a.work.steps }, runCtx);
        } catch (err) {
          if (ctx.cancellationSignal.aborted)
            throw new CancelledFailure(`run stopped: ${String(ctx.cancellationSignal.reason)}`);
          if (err instanceof UnknownDefinitionError)
            throw ApplicationFailure.nonRetryable(err.message, ErrorType.UnknownDefinition);
          throw ApplicationFailure.retryable(
            `runner crashed: ${(err as Error)?.message ?? String(err)}`,
            ErrorType.RunnerFailed,
          );
        } finally {
          if (progressTimer) clearTimeout(progressTimer);
        }
        if (ctx.cancellationSignal.aborted)
          throw new CancelledFailure(`run stopped: ${String(ctx.cancellationSignal.reason)}`);
        sendProgress();
        await Promise.all(reports);
        return {
          status: result.status,
          retryable: result.status === 'failed' ? (result.retryable ?? false) : false,
          reason: result.reason,
          message: result.message,
          output: result.output,
          claimedAt,
          startedAt,
          finishedAt: Date.now(),
          lastProgressSeq: seq,
        };
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
