/**
 * The host's liveness session: a long-running activity on the host's own queue that the host
 * workflow keeps scheduled while the host is online. The host heartbeats it; its heartbeat timeout
 * is the host's liveness lease, so a host that dies is noticed within that timeout without a
 * workflow task or a history event per beat (heartbeats touch neither, and the SDK throttles them).
 * A host that stops says so (signed), and goes offline at once.
 *
 * `hostSnapshotNow` lets the host workflow ask for a fresh signed snapshot (a pool suspects the
 * host after a lost lease), instead of waiting for the next periodic one.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { SignDomain, sessionStopBody } from '../workflows/identity';
import { hostWorkflowId } from '../workflows/ids';
import type { HostSessionEnd } from '../workflows/types';
import { sign, type HostCredential } from './identity';
import type { HostLog } from './logging';

export interface HostSessionActivities {
  /** Heartbeats until `maxMs` passed (then returns, and the workflow starts the next) or the host stops. */
  hostSession(input: { maxMs: number }): Promise<HostSessionEnd>;
  /** Sends the host's complete signed snapshot now. */
  hostSnapshotNow(): Promise<void>;
}

export interface HostSessionDeps {
  credential: HostCredential;
  /** This process's incarnation (its snapshots' bootId); a stop names it. */
  bootId: string;
  /**
   * Resolves when the host begins to stop: 'announce' ends the session saying so (signed);
   * 'silent' fails it with nothing said, as a frozen host would look until its snapshots stop.
   */
  stopping: Promise<'announce' | 'silent'>;
  /** Sends the signed snapshot; logs its own failures (the host's sendSnapshot does). */
  sendSnapshot(): Promise<void>;
  log?: HostLog;
}

/** Longest session the host accepts (the host workflow asks for 30 minutes). */
const MAX_SESSION_MS = 2 * 60 * 60_000;

export function createHostSessionActivities(deps: HostSessionDeps): HostSessionActivities {
  const hostId = deps.credential.hostId;
  let stopHow: 'announce' | 'silent' | undefined;
  const stopWaiters = new Set<() => void>();
  void deps.stopping.then((how) => {
    stopHow = how;
    for (const wake of stopWaiters) wake();
  });
  /** The session being held: a newer one (the host workflow moved on) supersedes it. */
  let current = 0;

  /** Only the host's own workflow may open a session or ask for a snapshot; anything else is refused at once. */
  const fromHostWorkflow = (what: string) => {
    const wf = Context.current().info.workflowExecution?.workflowId;
    if (wf !== hostWorkflowId(hostId)) {
      throw ApplicationFailure.nonRetryable(
        `${what} scheduled by ${wf ?? 'no workflow'}, not by ${hostWorkflowId(hostId)}`,
      );
    }
  };

  /** Sleeps `ms`, or less if the host begins to stop; rejects with CancelledFailure if the session is cancelled. */
  const nap = async (ms: number): Promise<void> => {
    let wake!: () => void;
    const stopped = new Promise<void>((resolve) => (wake = resolve));
    stopWaiters.add(wake);
    try {
      await Promise.race([Context.current().sleep(ms), stopped]);
    } finally {
      stopWaiters.delete(wake);
    }
  };

  return {
    async hostSession({ maxMs }) {
      fromHostWorkflow('liveness session');
      const ctx = Context.current();
      const me = ++current;
      // A third of the timeout between beats; the SDK sends at most one per 0.8 x the timeout to
      // the server (the rest stay in the worker), and the host workflow allows half a timeout more
      // for a host that was late to learn it and report.
      const every = Math.max(50, Math.floor((ctx.info.heartbeatTimeoutMs ?? 30_000) / 3));
      const until = Date.now() + Math.min(Math.max(0, maxMs), MAX_SESSION_MS);
      ctx.heartbeat();
      for (;;) {
        const left = until - Date.now();
        if (left <= 0 || me !== current) return { stopping: false };
        if (stopHow === undefined) {
          try {
            await nap(Math.min(every, left));
          } catch (err) {
            // Cancelled by the host workflow: its run hands over to the next one, which opens a
            // new session at once. Nothing is lost, so nothing to report.
            if (ctx.cancellationDetails?.cancelRequested) {
              deps.log?.("liveness session handed over to the host workflow's next run", {});
              throw err;
            }
            // Otherwise the server refused a beat (the lease ran out while this host was frozen
            // or cut off, so it may be offline now and nothing tells it), or the host workflow's
            // run moved on. A snapshot now brings it back.
            if (stopHow === undefined) {
              deps.log?.(
                'liveness session lost; sending a snapshot',
                { reason: String(ctx.cancellationSignal.reason) },
                'warn',
              );
              deps.sendSnapshot().catch(() => undefined /* logged by sendSnapshot */);
            }
            throw err;
          }
        }
        if (stopHow === 'silent') throw ApplicationFailure.nonRetryable('host stopped without announcing it');
        if (stopHow === 'announce') {
          const runId = ctx.info.workflowExecution?.runId ?? '';
          return {
            stopping: true,
            bootId: deps.bootId,
            sig: sign(
              deps.credential,
              SignDomain.Session,
              sessionStopBody(hostId, runId, ctx.info.activityId, deps.bootId),
            ),
          };
        }
        ctx.heartbeat();
      }
    },
    async hostSnapshotNow() {
      fromHostWorkflow('snapshot request');
      await deps.sendSnapshot();
    },
  };
}
