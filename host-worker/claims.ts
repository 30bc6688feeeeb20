/**
 * Which of the host's devices have a runner on them. At most one assignment runs on a device at a
 * time; a newer one for a device that is still held asks the runner there to stop and waits for
 * it (the pool only gives a device to a newer attempt once the one before has ended on the server,
 * so that runner's work can no longer be recorded: its host simply has not heard yet).
 */
export interface DeviceHolder {
  stop(reason: string): void;
}

export class DeviceClaims {
  /**
   * `onStuck` / `onFreed`: a runner asked to stop did not within a claimant's wait (the device is
   * kept out of the pool until it lets go), and that runner let go at last.
   */
  constructor(private readonly events: { onStuck?(deviceId: string): void; onFreed?(deviceId: string): void } = {}) {}

  private readonly held = new Map<string, { holder: DeviceHolder; released: Promise<void>; release(): void }>();
  /** Devices whose runner was asked to stop and outlasted a claimant's wait. */
  private readonly stuckSet = new Set<string>();
  /** The newest claimant of each device still in claim(). */
  private readonly latest = new Map<string, DeviceHolder>();

  has(deviceId: string): boolean {
    return this.held.has(deviceId);
  }

  /** Held by a runner that was asked to stop and has not, past a claimant's whole wait. */
  stuck(deviceId: string): boolean {
    return this.stuckSet.has(deviceId);
  }

  /**
   * Takes the device for `holder`. When another holds it, asks that one to stop and waits up to
   * `waitMs` for it to let go; false if it does not, or `signal` aborts first.
   */
  async claim(deviceId: string, holder: DeviceHolder, waitMs: number, signal: AbortSignal): Promise<boolean> {
    const until = Date.now() + waitMs;
    // The newest claimant is the one the pool wants there: an older one still waiting gives up.
    this.latest.set(deviceId, holder);
    try {
      for (;;) {
        if (this.latest.get(deviceId) !== holder) return false;
        const current = this.held.get(deviceId);
        if (!current) {
          let release!: () => void;
          const released = new Promise<void>((r) => (release = r));
          this.held.set(deviceId, { holder, released, release });
          return true;
        }
        if (current.holder === holder) return true;
        current.holder.stop('the device was assigned to a newer attempt');
        const left = until - Date.now();
        if (signal.aborted) return false;
        if (left <= 0) {
          if (!this.stuckSet.has(deviceId)) {
            this.stuckSet.add(deviceId);
            this.events.onStuck?.(deviceId);
          }
          return false;
        }
        await untilFirst(current.released, left, signal);
      }
    } finally {
      if (this.latest.get(deviceId) === holder) this.latest.delete(deviceId);
    }
  }

  /** Gives the device back, if `holder` has it. */
  release(deviceId: string, holder: DeviceHolder): void {
    const current = this.held.get(deviceId);
    if (current?.holder !== holder) return;
    this.held.delete(deviceId);
    current.release();
    if (this.stuckSet.delete(deviceId)) this.events.onFreed?.(deviceId);
  }
}

/** Resolves when `p` does, after `ms`, or when `signal` aborts, whichever comes first. */
function untilFirst(p: Promise<void>, ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    void p.then(done);
  });
}
