/**
 * The runner interface the host executes assignments through: a goal runner (a goal string run
 * by an agent runtime on the device) and a workflow-definition runner (declared steps in order).
 */
import { definitionTag, INLINE_STEPS_TAG } from '../workflows/ids';
import type { DeviceSnapshot, WorkflowStep } from '../workflows/types';

export interface RunContext {
  taskId: string;
  attempt: number;
  device: DeviceSnapshot;
  /** Aborted when the task is cancelled or the lease is lost: stop as soon as possible. */
  signal: AbortSignal;
  /**
   * Aborted (always after `signal`) when the run must be gone at once, whatever grace the runner
   * gives: a lost lease's deadline came (the server may time the attempt out next), or the server
   * no longer has the attempt (its retry may be running). A command runner SIGKILLs its group.
   */
  kill?: AbortSignal;
  /** Call once the work has really started on the device (recorded as the `running` fact). */
  started(): void;
  /**
   * Call when the run ends with processes of its own left on the device that would not die (its
   * process group `pgid` outlived SIGKILL): the host keeps the device out of rotation (reported
   * offline, assignments refused) until the group is gone, and keeps the attempt's journal entry so
   * that a restarted host agent deals with the group too.
   */
  leftBehind?(pgid: number): void;
  /** A progress line; the host numbers them with a monotonic sequence. */
  progress(message: string): void;
}

export interface RunResult {
  status: 'done' | 'failed';
  /** For failures: may another attempt (possibly on another device) succeed? */
  retryable?: boolean;
  reason?: string;
  message?: string;
  output?: string;
}

export interface GoalRunner {
  runGoal(goal: string, ctx: RunContext): Promise<RunResult>;
}

export interface WorkflowDefinitionRunner {
  runDefinition(definition: { name: string; steps?: WorkflowStep[] }, ctx: RunContext): Promise<RunResult>;
  /**
   * The definitions it runs by name. The host advertises each on its devices as the tag
   * `definition:<name>`, and a task naming a definition requires that tag, so it is only assigned
   * where it can run. A runner that leaves this out is given no task by definition name.
   */
  readonly definitions?: readonly string[];
  /** Whether it runs steps a task brings along; advertised as the tag `inline-steps`, which such tasks require. */
  readonly inlineSteps?: boolean;
}

/** The tags a host's runner earns each of its devices. */
export function capabilityTags(runner: WorkflowDefinitionRunner): string[] {
  return [...(runner.definitions ?? []).map(definitionTag), ...(runner.inlineSteps ? [INLINE_STEPS_TAG] : [])];
}

export interface Runners {
  goal: GoalRunner;
  workflow: WorkflowDefinitionRunner;
}

/** The definition is unknown to this host: a terminal failure, never retried. */
export class UnknownDefinitionError extends Error {
  override name = 'UnknownDefinitionError';
}

/** Resolves when `ms` passed; rejects with the signal's reason if aborted first. */
export function abortableDelay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Runs a definition's steps in order through a step executor, with per-step progress. */
export function createStepsRunner(
  executeStep: (step: WorkflowStep, ctx: RunContext) => Promise<RunResult>,
  registry: Map<string, WorkflowStep[]> = new Map(),
): WorkflowDefinitionRunner {
  return {
    definitions: [...registry.keys()],
    inlineSteps: true,
    async runDefinition(definition, ctx) {
      const steps = definition.steps ?? registry.get(definition.name);
      if (!steps) throw new UnknownDefinitionError(`unknown workflow definition "${definition.name}"`);
      ctx.started();
      for (const [i, step] of steps.entries()) {
        ctx.progress(`step ${i + 1}/${steps.length} ${step.name}: started`);
        const r = await executeStep(step, ctx);
        if (r.status === 'failed') {
          return {
            ...r,
            message: `step ${i + 1}/${steps.length} ${step.name} failed${r.message ? `: ${r.message}` : ''}`,
          };
        }
        ctx.progress(`step ${i + 1}/${steps.length} ${step.name}: done`);
      }
      return { status: 'done', output: `${steps.length} steps done` };
    },
  };
}
