/**
 * P5 (second half): the history length of every long-lived workflow the benchmark created
 * (scheduler/*, device/*, host/*): current run's length (describe) and runs so far
 * (continue-as-new), against Temporal's 10K-event warning. Read after each scenario, before its
 * fleet is retired (bench/lib/fleet.ts retireFleets), so the lengths are the scenario's own.
 */
import { WorkflowNotFoundError } from '@temporalio/client';
import type { BenchEnv } from '../lib/env';
import { kindOf } from '../lib/history';
import { mapLimit } from '../lib/util';
import type { ScenarioResult } from './types';

interface KindTally {
  workflows: number;
  maxLength: number;
  maxId: string;
  maxRuns: number;
  totalRuns: number;
}

export class HistoryTally {
  private readonly byKind: Record<string, KindTally> = {};
  private readonly seen = new Set<string>();

  private readonly failures: string[] = [];
  /** Workflows counted by merge() (read in another bench process). */
  private merged = 0;

  /**
   * Reads the workflows of `workflowIds` not read yet. A workflow whose reading failed stays
   * unread (a later call tries again) and the failure is reported in the result.
   */
  async measure(be: BenchEnv, workflowIds: Iterable<string>): Promise<void> {
    const ids = [...workflowIds].filter((id) => !this.seen.has(id));
    if (ids.length === 0) return;
    const client = be.env.client;
    const continued = new Map<string, number>();
    try {
      for await (const wf of client.workflow.list({ query: `ExecutionStatus = 'ContinuedAsNew'` })) {
        continued.set(wf.workflowId, (continued.get(wf.workflowId) ?? 0) + 1);
      }
    } catch (err) {
      this.failures.push(`listing continued-as-new runs for ${ids.length} workflows: ${String(err)}`);
      return;
    }
    let failed = 0;
    let firstError = '';
    await mapLimit(ids, 16, async (id) => {
      let length: number;
      try {
        length = (await client.workflow.getHandle(id).describe()).historyLength;
      } catch (err) {
        // Never started (e.g. a device whose host never published) is not a failure.
        if (!(err instanceof WorkflowNotFoundError)) {
          failed++;
          firstError ||= String(err);
          return;
        }
        this.seen.add(id);
        return;
      }
      this.seen.add(id);
      const k = kindOf(id);
      const s = (this.byKind[k] ??= { workflows: 0, maxLength: 0, maxId: '', maxRuns: 0, totalRuns: 0 });
      const runs = 1 + (continued.get(id) ?? 0);
      s.workflows++;
      s.totalRuns += runs;
      s.maxRuns = Math.max(s.maxRuns, runs);
      if (length > s.maxLength) {
        s.maxLength = length;
        s.maxId = id;
      }
    });
    if (failed > 0) this.failures.push(`${failed} of ${ids.length} workflows could not be read: ${firstError}`);
  }

  /**
   * Adds a tally another bench process made (bench/run.ts runs each scenario in a child process of
   * its own): its `result().details`. Each workflow ID lives in one scenario, so kinds add up.
   */
  merge(details: Record<string, unknown>): void {
    const { failures, ...kinds } = details as Record<string, KindTally> & { failures?: string[] };
    for (const [k, t] of Object.entries(kinds)) {
      const s = (this.byKind[k] ??= { workflows: 0, maxLength: 0, maxId: '', maxRuns: 0, totalRuns: 0 });
      s.workflows += t.workflows;
      s.totalRuns += t.totalRuns;
      s.maxRuns = Math.max(s.maxRuns, t.maxRuns);
      if (t.maxLength > s.maxLength) {
        s.maxLength = t.maxLength;
        s.maxId = t.maxId;
      }
      this.merged += t.workflows;
    }
    this.failures.push(...(failures ?? []));
  }

  /** A reading that could not happen at all (its server is gone). */
  fail(what: string): void {
    this.failures.push(what);
  }

  get empty(): boolean {
    return this.seen.size === 0 && this.merged === 0 && this.failures.length === 0;
  }

  result(): ScenarioResult {
    const byKind = this.byKind;
    const kinds = ['scheduler', 'device', 'host'].filter((k) => byKind[k]);
    return {
      id: 'P5h',
      title:
        'history length of every long-lived workflow at the end of its scenario (current run; continue-as-new at 4,000, schedulers at 1,500)',
      rows: kinds.map((k) => ({
        metric: `${k}: longest current run (events) / max runs, over ${byKind[k].workflows} workflows`,
        fleet: `${byKind[k].maxLength} / ${byKind[k].maxRuns}`,
        target: '< 10,000 events',
        met: byKind[k].maxLength < 10_000,
      })),
      notes: ['baseline workflows are short-lived (one per task): nothing to compare', ...this.failures.map((f) => `NOT READ: ${f}`)],
      details: { ...byKind, failures: this.failures },
      ...(this.failures.length > 0 ? { error: `some histories were not read: ${this.failures.join('; ')}` } : {}),
    };
  }
}
