/**
 * The host agent's log calls: every message carries its level (the agent's `log` option takes it as
 * a third argument; callers that leave it out log at info), and problems that persist, like
 * snapshots the control plane refuses every tick, are said once a minute and once more when they
 * clear, not on every attempt.
 */
import { WorkflowNotFoundError } from '@temporalio/common';
import { describeError } from '../control-plane/log';
import { hostWorkflowId } from '../workflows/ids';

export type HostLogLevel = 'debug' | 'info' | 'warn' | 'error';

/** How the host agent logs: `level` defaults to info. */
export type HostLog = (message: string, fields: Record<string, unknown>, level?: HostLogLevel) => void;

export interface Problem {
  /** Same key = same problem (repeats are held back). */
  key: string;
  level: HostLogLevel;
  message: string;
  fields?: Record<string, unknown>;
}

/** How often a problem that persists is said again. */
export const REPEAT_INTERVAL_MS = 60_000;

/**
 * One kind of recurring failure (e.g. sending the snapshot): `failed` logs a problem at once the
 * first time and then at most once per `intervalMs` while it persists (with how many attempts were
 * held back); `ok` logs once that it cleared (at warn: whoever saw the problem should see it end).
 */
export class ProblemLog {
  /** Problems since the last success: when each was last said, and the attempts not said since. */
  private readonly open = new Map<string, { saidAt: number; held: number }>();
  private since: number | undefined;
  private failures = 0;

  constructor(
    private readonly log: HostLog | undefined,
    /** What is failing, for the message that it cleared (e.g. "snapshots"). */
    private readonly what: string,
    private readonly clearedMessage: string,
    private readonly intervalMs = REPEAT_INTERVAL_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** Is a problem open (failed since the last success)? */
  get failing(): boolean {
    return this.since !== undefined;
  }

  failed(p: Problem): void {
    const t = this.now();
    this.since ??= t;
    this.failures++;
    const seen = this.open.get(p.key);
    if (seen && t - seen.saidAt < this.intervalMs) {
      seen.held++;
      return;
    }
    const fields = { ...p.fields, ...(seen?.held ? { repeatedSinceLastLog: seen.held } : {}) };
    this.open.set(p.key, { saidAt: t, held: 0 });
    this.log?.(p.message, fields, p.level);
  }

  ok(fields: Record<string, unknown> = {}): void {
    if (this.since === undefined) return;
    const failingForMs = this.now() - this.since;
    const failures = this.failures;
    this.open.clear();
    this.since = undefined;
    this.failures = 0;
    this.log?.(this.clearedMessage, { ...fields, what: this.what, failingForMs, failures }, 'warn');
  }
}

/** The errors of `err`'s cause chain, outermost first. */
function chain(err: unknown): unknown[] {
  const out: unknown[] = [];
  for (let e: unknown = err, depth = 0; e !== undefined && e !== null && depth < 8; depth++) {
    out.push(e);
    e = (e as { cause?: unknown }).cause;
  }
  return out;
}

const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/**
 * What a failed snapshot means, for the operator: the host is not enrolled in this namespace or
 * was removed (its host workflow is missing or has completed, or holds no keys) is an error with
 * what to do; snapshots that do not verify with the enrolled key (rotated) is a warning to restart
 * with the new credential; anything else (the control plane or server not answering) a warning
 * that it will be retried.
 */
export function snapshotProblem(err: unknown, hostId: string, namespace: string): Problem {
  const errors = chain(err);
  const error = describeError(err);
  const text = errors.map(messageOf).join(' <- ');
  const workflowId = hostWorkflowId(hostId);
  const notEnrolled: Problem = {
    key: 'not-enrolled',
    level: 'error',
    message:
      `host ${hostId} is not enrolled in namespace ${namespace} (no running workflow ${workflowId}): ` +
      `enrol it with \`npx fleet hosts add ${hostId}\` / \`npm run hosts:add -- ${hostId}\`, or check TEMPORAL_NAMESPACE`,
    fields: { namespace, workflowId, error },
  };
  if (errors.some((e) => e instanceof WorkflowNotFoundError || (e as Error)?.name === 'WorkflowNotFoundError')) {
    return notEnrolled;
  }
  if (/\bis not enrolled\b/.test(text)) return notEnrolled;
  if (/was removed by an operator/.test(text)) {
    return {
      key: 'removed',
      level: 'error',
      message:
        `host ${hostId} was removed from the fleet by an operator (workflow ${workflowId} in namespace ${namespace}): ` +
        `stop this host, or enrol it again with \`npx fleet hosts add ${hostId}\` / \`npm run hosts:add -- ${hostId}\``,
      fields: { namespace, workflowId, error },
    };
  }
  if (/signature does not verify/.test(text)) {
    return {
      key: 'signature',
      level: 'warn',
      message:
        `host ${hostId}'s snapshots are refused: they do not verify with its enrolled key ` +
        `(keys rotated? restart this host with its new credential file)`,
      fields: { error },
    };
  }
  return { key: `other:${error}`, level: 'warn', message: 'snapshot failed; will retry', fields: { error } };
}
