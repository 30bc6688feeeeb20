/**
 * P5 (second half): after the run, the history length of every long-lived workflow the benchmark
 * created (scheduler/*, device/*, host/*): current run's length (describe) and runs so far
 * (continue-as-new), against Temporal's 10K-event warning.
 */
import type { BenchEnv } from '../lib/env';
import { kindOf } from '../lib/history';
import { mapLimit } from '../lib/util';
import type { ScenarioResult } from './types';

export async function historyCheck(be: BenchEnv, workflowIds: string[]): Promise<ScenarioResult> {
  const client = be.env.client;
  const continued = new Map<string, number>();
  for await (const wf of client.workflow.list({ query: `ExecutionStatus = 'ContinuedAsNew'` })) {
    continued.set(wf.workflowId, (continued.get(wf.workflowId) ?? 0) + 1);
  }
  const byKind: Record<string, { workflows: number; maxLength: number; maxId: string; maxRuns: number; totalRuns: number }> = {};
  await mapLimit(workflowIds, 16, async (id) => {
    let length: number;
    try {
      length = (await client.workflow.getHandle(id).describe()).historyLength;
    } catch {
      return; // never started (e.g. a device whose host never published)
    }
    const k = kindOf(id);
    const s = (byKind[k] ??= { workflows: 0, maxLength: 0, maxId: '', maxRuns: 0, totalRuns: 0 });
    const runs = 1 + (continued.get(id) ?? 0);
    s.workflows++;
    s.totalRuns += runs;
    s.maxRuns = Math.max(s.maxRuns, runs);
    if (length > s.maxLength) {
      s.maxLength = length;
      s.maxId = id;
    }
  });
  const kinds = ['scheduler', 'device', 'host'].filter((k) => byKind[k]);
  return {
    id: 'P5h',
    title: 'history length of every long-lived workflow after the run (current run; continue-as-new at 4,000, schedulers at 1,500)',
    rows: kinds.map((k) => ({
      metric: `${k}: longest current run (events) / max runs, over ${byKind[k].workflows} workflows`,
      fleet: `${byKind[k].maxLength} / ${byKind[k].maxRuns}`,
      target: '< 10,000 events',
      met: byKind[k].maxLength < 10_000,
    })),
    notes: ['baseline workflows are short-lived (one per task): nothing to compare'],
    details: byKind,
  };
}
