/**
 * When this host last heard from the Temporal server, for self-fencing.
 *
 * A run's lease is its activity's heartbeat timeout, and the SDK sends heartbeats without telling
 * the activity whether they arrive. A host cut off from the server (a network partition, a NAT
 * gateway that dropped its flows) keeps heartbeating into the void while the server times the
 * attempt out and the task retries on another device; without a check of its own the old runner
 * would go on for as long as the partition lasts, the same task running twice at once.
 *
 * So while at least one run depends on it, the host probes the server (`GetSystemInfo`: no
 * history, no billed action) every quarter of the shortest lease held, each probe with a deadline
 * of half a lease. A run that has had no contact for a whole lease stops its runner: by then no
 * heartbeat of it can have reached the server within the lease, so the server has timed the
 * attempt out (or will before anything the run sends could arrive) and whatever the run produced
 * would be refused anyway. Nothing is probed while the host runs nothing.
 */
import type { HostLog } from './logging';

export interface ContactOptions {
  /** One round trip to the server that ends by `deadline` (ms since the epoch) or rejects. */
  probe: (deadline: number) => Promise<unknown>;
  log?: HostLog;
  /** Floor of the probe period (default 250 ms). */
  minPeriodMs?: number;
  now?: () => number;
}

export class ServerContact {
  private lastOkAt: number;
  private readonly leases = new Map<symbol, number>();
  private timer: NodeJS.Timeout | undefined;
  private probing = false;
  private failing = false;
  private readonly now: () => number;

  constructor(private readonly opts: ContactOptions) {
    this.now = opts.now ?? Date.now;
    this.lastOkAt = this.now();
  }

  /** When a request last reached the server and was answered (the time it was sent). */
  lastContactAt(): number {
    return this.lastOkAt;
  }

  /** Something else reached the server (a report answered, a task polled): it counts as contact. */
  noteContact(sentAt: number = this.now()): void {
    if (sentAt > this.lastOkAt) this.lastOkAt = sentAt;
  }

  /**
   * Keeps the probes going while a run with this lease is on; call the returned function when it
   * ends. The run itself began with contact (its task came from the server), so pass that moment
   * to `lost()` as well.
   */
  hold(leaseMs: number): () => void {
    const key = Symbol('run');
    this.leases.set(key, leaseMs);
    this.schedule(true);
    return () => {
      this.leases.delete(key);
      if (this.leases.size === 0) {
        clearTimeout(this.timer);
        this.timer = undefined;
      }
    };
  }

  /**
   * How long a run that started at `since` with this lease has been without contact, if that is a
   * whole lease or more (its lease is surely gone); undefined while it may still hold.
   */
  lost(since: number, leaseMs: number): number | undefined {
    const silent = this.now() - Math.max(since, this.lastOkAt);
    return silent >= leaseMs ? silent : undefined;
  }

  private period(): number {
    const shortest = Math.min(...this.leases.values());
    return Math.max(this.opts.minPeriodMs ?? 250, Math.floor(shortest / 4));
  }

  private schedule(soon = false): void {
    if (this.leases.size === 0) return;
    if (soon && this.timer) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.probeOnce(), soon ? 0 : this.period());
  }

  private async probeOnce(): Promise<void> {
    this.timer = undefined;
    if (this.probing || this.leases.size === 0) return;
    this.probing = true;
    const sentAt = this.now();
    try {
      // Half a lease to answer: a slow server is not a lost one (the next probe follows the answer).
      await this.opts.probe(sentAt + 2 * this.period());
      this.noteContact(sentAt);
      if (this.failing) this.opts.log?.('the Temporal server answers again', {}, 'info');
      this.failing = false;
    } catch (err) {
      if (!this.failing)
        this.opts.log?.(
          'the Temporal server does not answer; runs stop when their lease is gone',
          { error: String((err as Error)?.message ?? err) },
          'warn',
        );
      this.failing = true;
    } finally {
      this.probing = false;
      this.schedule();
    }
  }
}
