/** Runners that record what the host really ran, for tests that count executions. */
import type { RunContext, RunResult, Runners } from '../../host-worker/runners';
import { createSimRunners, type SimOptions } from '../../host-worker/sim';

export interface Recorded {
  taskId: string;
  attempt: number;
  deviceId: string;
  aborted: boolean;
}

export function recordingRunners(
  opts: SimOptions & { override?: (ctx: RunContext) => Promise<RunResult> | undefined } = {},
) {
  const sim = createSimRunners(opts);
  const calls: Recorded[] = [];
  const wrap = async (ctx: RunContext, run: () => Promise<RunResult>): Promise<RunResult> => {
    const rec: Recorded = { taskId: ctx.taskId, attempt: ctx.attempt, deviceId: ctx.device.deviceId, aborted: false };
    calls.push(rec);
    ctx.signal.addEventListener('abort', () => (rec.aborted = true), { once: true });
    return opts.override?.(ctx) ?? run();
  };
  const runners: Runners = {
    goal: { runGoal: (goal, ctx) => wrap(ctx, () => sim.goal.runGoal(goal, ctx)) },
    workflow: {
      // What it runs is what the sim runner runs (the host advertises it as device tags).
      definitions: sim.workflow.definitions,
      inlineSteps: sim.workflow.inlineSteps,
      runDefinition: (def, ctx) => wrap(ctx, () => sim.workflow.runDefinition(def, ctx)),
    },
  };
  return { runners, calls };
}
