/**
 * A rejected task (its queue was full, say) may be submitted again under the same id, which starts
 * a new run of `task/<id>`; visibility keeps listing the old, rejected run too. Lists hide such a
 * run once a newer one of the same id exists, so a task id is listed once, with its current state.
 * Only rejected runs can be superseded (FleetClient.submit starts a new run for nothing else).
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';

const KNOWN_SUPERSEDED_MAX = 10_000;

export class SupersededRuns {
  /** Runs known to be superseded (that never changes back); bounded, oldest out first. */
  private readonly known = new Set<string>();

  constructor(
    private readonly client: Client,
    private readonly onError?: (err: unknown) => void,
  ) {}

  /** Whether a newer run of `workflowId` than `runId` exists (one describe call, unless known). */
  async superseded(workflowId: string, runId: string): Promise<boolean> {
    if (this.known.has(runId)) return true;
    let latest: string;
    try {
      latest = (await this.client.workflow.getHandle(workflowId).describe()).runId;
    } catch (err) {
      // Not found, or not answered: list the run (a list must not fail over one row).
      if (!(err instanceof WorkflowNotFoundError)) this.onError?.(err);
      return false;
    }
    if (latest === runId) return false;
    if (this.known.size >= KNOWN_SUPERSEDED_MAX) this.known.delete(this.known.values().next().value!);
    this.known.add(runId);
    return true;
  }
}
