/**
 * A run's lease as the host can prove it, for self-fencing.
 *
 * The lease is the activity's heartbeat timeout: the server times the attempt out a lease after the
 * last heartbeat that reached it, and the task retries elsewhere at once. A host cut off from the
 * server (a network partition, a NAT gateway that dropped its flows) cannot see that happen, so it
 * must stop its runner before it can: otherwise the task runs twice at once.
 *
 * The SDK's own heartbeats cannot tell the host which of them arrived (and it sends them only 0.8
 * lease apart), and any other contact with the server (a probe, a report) renews nothing. So the
 * host sends its heartbeats itself and waits for each answer: a heartbeat answered was received
 * after it was sent, so the server's timer cannot fire before `sent + lease`. The run stops at
 * `sent + fenceAfterMs` of the last answered one, checked every `checkEveryMs`: always some time
 * before the server's timer, with three heartbeats (a quarter lease apart) sent in between, so
 * two may fail or be slow without stopping a healthy run. Before the first answer the lease counts
 * from when the activity reached the host, just after the server started its timer.
 *
 * Stopping takes time: a command gets SIGTERM and, after its `killGraceMs`, SIGKILL. A stop for a
 * lost lease must be complete by `sent + killAfterMs` whatever that grace says, so the run's kill
 * signal fires then (`RunContext.kill`) and its command is SIGKILLed.
 *
 * Time is read from two clocks (`instant()`), and a span is the longer of the two: the monotonic
 * one, so a step back of the system clock does not keep a cut-off run going, and the wall clock,
 * which also runs while the machine is suspended (the monotonic one stops; the server's timer does
 * not). A step forward can only stop a run early, never late.
 */
export interface Instant {
  /** `performance.now()` */
  mono: number;
  /** `Date.now()` */
  wall: number;
}

export const instant = (): Instant => ({ mono: performance.now(), wall: Date.now() });

/** From `a` to `b` by whichever clock says longer. */
export const elapsedMs = (a: Instant, b: Instant): number => Math.max(b.mono - a.mono, b.wall - a.wall);

export interface LeaseTimings {
  /** Between heartbeats. */
  beatEveryMs: number;
  /** How long one heartbeat may take to be answered before it counts as not answered. */
  beatDeadlineMs: number;
  /** From the sending of the last answered heartbeat to the run stopping itself. */
  fenceAfterMs: number;
  /** How often the run checks whether its lease is gone. */
  checkEveryMs: number;
  /** From the sending of the last answered heartbeat to the run being gone (its command SIGKILLed). */
  killAfterMs: number;
}

export function leaseTimings(leaseMs: number): LeaseTimings {
  const beatEveryMs = Math.max(1, Math.floor(leaseMs / 4));
  return {
    beatEveryMs,
    beatDeadlineMs: beatEveryMs,
    fenceAfterMs: Math.floor(leaseMs * 0.8),
    checkEveryMs: Math.max(1, Math.floor(leaseMs / 40)),
    killAfterMs: Math.floor(leaseMs * 0.9),
  };
}

/** The lease as proven by answered heartbeats: when it began and whether it is gone. */
export class ProvenLease {
  private from: Instant;
  private readonly fenceAfterMs: number;
  private readonly killAfterMs: number;

  constructor(
    leaseMs: number,
    /** When the activity reached the host (the server started its timer just before). */
    receivedAt: Instant,
  ) {
    this.from = receivedAt;
    ({ fenceAfterMs: this.fenceAfterMs, killAfterMs: this.killAfterMs } = leaseTimings(leaseMs));
  }

  /** A heartbeat sent at `sentAt` was answered. */
  answered(sentAt: Instant): void {
    if (sentAt.mono > this.from.mono) this.from = sentAt;
  }

  /** When the lease was last proven (the sending of the last answered heartbeat). */
  provenAt(): Instant {
    return this.from;
  }

  /** How long without an answered heartbeat, once that is long enough to stop the run; else undefined. */
  lost(now: Instant): number | undefined {
    const silent = elapsedMs(this.from, now);
    return silent >= this.fenceAfterMs ? silent : undefined;
  }

  /** How long a run stopped at `now` for a lost lease has left to be gone (0 when already late). */
  stopWithin(now: Instant): number {
    return Math.max(0, this.killAfterMs - elapsedMs(this.from, now));
  }
}
