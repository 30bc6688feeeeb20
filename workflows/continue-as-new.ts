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
 * Outgoing signals a run has to see delivered before it may continue-as-new (the server drops
 * the undelivered signals of a closed run). One promise per signal: the SDK captures a stack
 * trace for every promise a workflow creates, which is most of what a replay costs.
 */
export class InFlight {
  count = 0;
  track(p: Promise<void>, onError: (err: unknown) => void): void {
    this.count++;
    p.then(
      () => {
        this.count--;
      },
      (err: unknown) => {
        try {
          onError(err);
        } finally {
          this.count--;
        }
      },
    );
  }
}
