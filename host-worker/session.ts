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
import type { HostSessionEnd } from '../workflows/types';
import { sign, type HostCredential } from './identity';

export interface HostSessionActivities {
  /** Heartbeats until `maxMs` passed (then returns, and the workflow starts the next) or the host stops. */
  hostSession(input: { maxMs: number }): Promise<HostSessionEnd>;
  /** Sends the host's complete signed snapshot now. */
  hostSnapshotNow(): Promise<void>;
}

export interface HostSessionDeps {
  credential: HostCredential;
  /**
   * Resolves when the host begins to stop: 'announce' ends the session saying so (signed);
   * 'silent' fails it with nothing said, as a frozen host would look until its snapshots stop.
   */
  stopping: Promise<'announce' | 'silent'>;
  sendSnapshot(): Promise<void>;
  log?(message: string, fields: Record<string, unknown>): void;
}

export function createHostSessionActivities(deps: HostSessionDeps): HostSessionActivities {
  const hostId = deps.credential.hostId;
  return {
    async hostSession({ maxMs }) {
      const ctx = Context.current();
      // A third of the timeout: two beats may be late or lost before the lease goes. The SDK sends
      // at most one per 0.8 x the timeout to the server; the rest stay in the worker.
      const every = Math.max(50, Math.floor((ctx.info.heartbeatTimeoutMs ?? 30_000) / 3));
      const until = Date.now() + Math.max(0, maxMs);
      let stopped: 'announce' | 'silent' | undefined;
      void deps.stopping.then((how) => (stopped = how));
      const stop = deps.stopping.then(() => 'stop' as const);
      ctx.heartbeat();
      for (;;) {
        const left = until - Date.now();
        if (left <= 0) return { stopping: false };
        // ctx.sleep rejects with CancelledFailure when the session is cancelled: the server refused
        // a beat (the lease ran out while this host was frozen or cut off, so it may be offline now,
        // and nothing tells it; or the host workflow's run moved on). A snapshot now brings it back.
        const r = await Promise.race([ctx.sleep(Math.min(every, left)).then(() => 'tick' as const), stop]).catch(
          (err: unknown) => {
            if (!stopped) {
              deps.log?.('liveness session lost; sending a snapshot', {
                reason: String(ctx.cancellationSignal.reason),
              });
              deps.sendSnapshot().catch((e) => deps.log?.('snapshot failed; will retry', { error: String(e) }));
            }
            throw err;
          },
        );
        if (r === 'stop' || stopped) {
          if (stopped === 'silent') throw ApplicationFailure.nonRetryable('host stopped without announcing it');
          const runId = ctx.info.workflowExecution?.runId ?? '';
          return {
            stopping: true,
            sig: sign(deps.credential, SignDomain.Session, sessionStopBody(hostId, runId, ctx.info.activityId)),
          };
        }
        ctx.heartbeat();
      }
    },
    async hostSnapshotNow() {
      await deps.sendSnapshot();
    },
  };
}
