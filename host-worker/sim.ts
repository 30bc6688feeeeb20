/**
 * The simulated driver: a configurable fleet of devices and runners whose duration and outcome
 * come from configuration or from directives in the goal, e.g. `"open app [sim duration=200 outcome=fail-retryable]"`.
 * Outcomes: done, fail (terminal), fail-retryable, hang (runs until cancelled or the lease is lost).
 */
import type { DeviceSnapshot, WorkflowStep } from '../workflows/types';
import { abortableDelay, createStepsRunner, type RunContext, type RunResult, type Runners } from './runners';

export type SimOutcome = 'done' | 'fail' | 'fail-retryable' | 'hang';

export interface SimBehaviour {
  durationMs: number;
  outcome: SimOutcome;
  progressSteps: number;
}

export interface SimOptions {
  defaultDurationMs?: number;
  defaultOutcome?: SimOutcome;
  progressSteps?: number;
  definitions?: Map<string, WorkflowStep[]>;
}

const DIRECTIVE = /\[sim([^\]]*)\]/;

export function parseSimDirectives(text: string, defaults: SimBehaviour): SimBehaviour {
  const m = DIRECTIVE.exec(text);
  const b = { ...defaults };
  if (!m) return b;
  for (const part of m[1].trim().split(/\s+/).filter(Boolean)) {
    const [k, v] = part.split('=');
    if (k === 'duration' && /^\d+$/.test(v)) b.durationMs = Number(v);
    else if (k === 'steps' && /^\d+$/.test(v)) b.progressSteps = Math.max(1, Number(v));
    else if (k === 'outcome' && ['done', 'fail', 'fail-retryable', 'hang'].includes(v)) b.outcome = v as SimOutcome;
  }
  return b;
}

async function simulate(b: SimBehaviour, ctx: RunContext): Promise<RunResult> {
  if (b.outcome === 'hang') {
    for (let i = 1; ; i++) {
      await abortableDelay(Math.max(50, b.durationMs), ctx.signal);
      ctx.progress(`still working (${i})`);
    }
  }
  for (let i = 1; i <= b.progressSteps; i++) {
    await abortableDelay(b.durationMs / b.progressSteps, ctx.signal);
    ctx.progress(`sim step ${i}/${b.progressSteps}`);
  }
  switch (b.outcome) {
    case 'fail':
      return { status: 'failed', retryable: false, reason: 'runner_failed', message: 'simulated terminal failure' };
    case 'fail-retryable':
      return { status: 'failed', retryable: true, reason: 'runner_failed', message: 'simulated retryable failure' };
    default:
      return { status: 'done', output: `simulated run on ${ctx.device.deviceId}` };
  }
}

export function createSimRunners(opts: SimOptions = {}): Runners {
  const defaults: SimBehaviour = {
    durationMs: opts.defaultDurationMs ?? 100,
    outcome: opts.defaultOutcome ?? 'done',
    progressSteps: opts.progressSteps ?? 2,
  };
  return {
    goal: {
      async runGoal(goal, ctx) {
        ctx.started();
        return simulate(parseSimDirectives(goal, defaults), ctx);
      },
    },
    workflow: createStepsRunner(
      (step, ctx) => simulate(parseSimDirectives(step.command.join(' '), { ...defaults, progressSteps: 1 }), ctx),
      opts.definitions,
    ),
  };
}

export interface SimDeviceSpec {
  deviceId: string;
  driverType?: string;
  tags?: string[];
  health?: DeviceSnapshot['health'];
  state?: DeviceSnapshot['state'];
  pool?: string;
}

export function simDevices(specs: SimDeviceSpec[]): DeviceSnapshot[] {
  return specs.map((s) => ({
    deviceId: s.deviceId,
    driverType: s.driverType ?? 'sim',
    tags: s.tags ?? [],
    state: s.state ?? 'idle',
    health: s.health ?? 'good',
    ...(s.pool ? { pool: s.pool } : {}),
  }));
}
