/**
 * How soon the control plane's watch starts again a workflow it found stopped (a pool's scheduler,
 * a host's device workflow). One that was terminated or failed after running a while is started
 * again at the next check. One whose runs keep stopping soon after they start (a bug that fails
 * its first workflow task, an operator who keeps terminating it) is started again less and less
 * often: each new run that stopped within `quickMs` of its start waits twice as long after it
 * closed as the one before, from `firstDelayMs` up to `maxDelayMs`; the first such run waits for
 * nothing. A run that lived `quickMs` or longer ends the streak, and so does one that was not
 * started soon after the one before was due (the streak is of prompt restarts that stopped at
 * once, not of stops weeks apart). A run continued-as-new from another is judged as one that
 * lived: a busy scheduler rolls over every few seconds, and its current run is young whenever it
 * stops. Judged from the run itself (its start and close times), so a check that could not reach
 * the server changes nothing.
 */
export interface StoppedRun {
  runId: string;
  startTime: Date;
  closeTime?: Date;
  /** The first run of its chain: a run continued-as-new from another was not just started. */
  firstRunId?: string;
}

export interface RestartBackoffOptions {
  /** A run that stopped sooner than this after it started counts as one that stops at once. */
  quickMs: number;
  /** The wait after the second quick run in a row; doubled for each one after it. */
  firstDelayMs: number;
  maxDelayMs: number;
}

export interface RestartDecision {
  /** Whether the workflow may be started again now. */
  due: boolean;
  /** Quick runs in a row, this one included (0: this run lived a while). */
  streak: number;
  /** How long after the run closed it waits before it is started again. */
  delayMs: number;
  /** The first time this run is looked at (say it once, not at every check). */
  fresh: boolean;
}

/** The watch's defaults, from its check interval: a run quicker than two checks is a quick one. */
export function restartBackoffFor(watchMs: number): RestartBackoffOptions {
  return { quickMs: Math.max(60_000, 2 * watchMs), firstDelayMs: 2 * watchMs, maxDelayMs: Math.max(10 * 60_000, 2 * watchMs) };
}

export class RestartBackoff {
  private readonly seen = new Map<string, { runId: string; streak: number; notBefore: number; delayMs: number }>();

  constructor(private readonly opts: RestartBackoffOptions) {}

  /** Whether `key`, whose latest run `run` has stopped, may be started again at `now` (ms). */
  consider(key: string, run: StoppedRun, now: number): RestartDecision {
    const known = this.seen.get(key);
    if (known?.runId === run.runId) {
      return { due: known.delayMs === 0 || now >= known.notBefore, streak: known.streak, delayMs: known.delayMs, fresh: false };
    }
    const closedAt = (run.closeTime ?? new Date(now)).getTime();
    const started = run.startTime.getTime();
    const quick = closedAt - started < this.opts.quickMs && (run.firstRunId ?? run.runId) === run.runId;
    const prompt = known !== undefined && started <= known.notBefore + this.opts.quickMs;
    const streak = quick ? (prompt ? known.streak : 0) + 1 : 0;
    const delayMs = streak < 2 ? 0 : Math.min(this.opts.maxDelayMs, this.opts.firstDelayMs * 2 ** (streak - 2));
    if (streak === 0) this.seen.delete(key); // kept only while its runs stop at once
    else this.seen.set(key, { runId: run.runId, streak, notBefore: closedAt + delayMs, delayMs });
    // No wait is no wait, whatever the local clock says of the server's close time.
    return { due: delayMs === 0 || now >= closedAt + delayMs, streak, delayMs, fresh: true };
  }

  /** The longest a workflow is held back after its run closed. */
  get maxDelayMs(): number {
    return this.opts.maxDelayMs;
  }
}
