import { workflowInfo } from '@temporalio/workflow';

/** Long-lived workflows roll over well before Temporal's 10K-event warning. Tests lower the limit to force it. */
export const DEFAULT_HISTORY_LIMIT = 4_000;

/**
 * The scheduler rolls over sooner. Under load the server often bounces the closing workflow task
 * of a workflow that receives a steady stream of signals (one arrived while that task ran:
 * UnhandledCommand), and the SDK answers a bounce by evicting the run and replaying its whole
 * history, about 1 ms of CPU per event here. At 4,000 events that replay took 5–7 s on a saturated
 * 2-core machine, during which the pool assigned nothing, against a 10 s workflow-task timeout.
 * At 1,500 a cold replay of the longest run took 1.9 s (BENCHMARKS.md, P1).
 */
export const DEFAULT_SCHEDULER_HISTORY_LIMIT = 1_500;

export function shouldContinueAsNew(historyLimit: number | undefined, defaultLimit = DEFAULT_HISTORY_LIMIT): boolean {
  const info = workflowInfo();
  return info.continueAsNewSuggested || info.historyLength >= (historyLimit ?? defaultLimit);
}

/**
 * Outgoing signals a run has sent and not yet seen delivered, each with an optional record of what
 * it was (the scheduler carries those records to its next run and sends them again; the device
 * waits for the count to reach zero). One promise per signal: the SDK captures a stack trace for
 * every promise a workflow creates, which is most of what a replay costs.
 */
export class InFlight<T = undefined> {
  private seq = 0;
  /** What is still on its way, in the order it was sent. */
  readonly pending = new Map<number, T>();
  get count(): number {
    return this.pending.size;
  }
  track(p: Promise<void>, onError: (err: unknown) => void, item?: T): void {
    const id = this.seq++;
    this.pending.set(id, item as T);
    p.then(
      () => {
        this.pending.delete(id);
      },
      (err: unknown) => {
        try {
          onError(err);
        } finally {
          this.pending.delete(id);
        }
      },
    );
  }
}
