import { workflowInfo } from '@temporalio/workflow';

/** Long-lived workflows roll over well before Temporal's 10K-event warning. Tests lower the limit to force it. */
export const DEFAULT_HISTORY_LIMIT = 4_000;

export function shouldContinueAsNew(historyLimit: number | undefined): boolean {
  const info = workflowInfo();
  return info.continueAsNewSuggested || info.historyLength >= (historyLimit ?? DEFAULT_HISTORY_LIMIT);
}
