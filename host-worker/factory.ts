/** Builds the configured device driver and runners (configurations parsed by host-worker/config-schemas.ts). */
import type { WorkflowStep } from '../workflows/types';
import { createCommandGoalRunner, createCommandStepExecutor, type CommandOptions } from './command-runner';
import type { DriverConfig, RunnerConfig } from './config-schemas';
import { createAdbDriver } from './drivers/adb';
import { createLocalDriver } from './drivers/local';
import { createSimDriver } from './drivers/sim';
import type { DeviceDriver } from './drivers/types';
import { createStepsRunner, type RunContext, type Runners, type WorkflowDefinitionRunner } from './runners';
import { createSimRunners } from './sim';

export function createDriver(cfg: DriverConfig): DeviceDriver {
  switch (cfg.type) {
    case 'sim':
      return createSimDriver({ devices: cfg.devices });
    case 'adb':
      return createAdbDriver({
        adbPath: cfg.adbPath,
        driverType: cfg.driverType,
        listTimeoutMs: cfg.listTimeoutMs,
        healthTimeoutMs: cfg.healthTimeoutMs,
        healthConcurrency: cfg.healthConcurrency,
        allowSerials: cfg.allowSerials,
        tags: cfg.tags,
        extraTags: cfg.extraTags,
      });
    case 'local':
      return createLocalDriver({
        deviceId: cfg.deviceId,
        driverType: cfg.driverType,
        tags: cfg.tags,
        healthCheck: cfg.healthCheck,
      });
  }
}

export type Definitions = ReadonlyMap<string, WorkflowStep[]> | Readonly<Record<string, WorkflowStep[]>>;

export interface RunnerHooks {
  /** Sim runner defaults when the runner configuration has none (e.g. the sim driver's settings). */
  simDefaults?: Pick<Extract<RunnerConfig, { type: 'sim' }>, 'defaultDurationMs' | 'defaultOutcome'>;
  /** A command runner's process started (pid = its process group): e.g. record it in the journal. */
  onSpawn?(pid: number, ctx: RunContext): void;
}

export function createRunners(
  cfg: RunnerConfig,
  definitions: Definitions = new Map(),
  hooks: RunnerHooks = {},
): Runners {
  const registry = toRegistry(definitions);
  if (cfg.type === 'sim') {
    return createSimRunners({
      defaultDurationMs: cfg.defaultDurationMs ?? hooks.simDefaults?.defaultDurationMs,
      defaultOutcome: cfg.defaultOutcome ?? hooks.simDefaults?.defaultOutcome,
      progressSteps: cfg.progressSteps,
      definitions: registry,
    });
  }
  const common: CommandOptions = {
    exitCodes: cfg.exitCodes,
    killGraceMs: cfg.killGraceMs,
    cwd: cfg.cwd,
    env: cfg.env,
    passEnv: cfg.passEnv,
    maxProgressLinesPerSecond: cfg.maxProgressLinesPerSecond,
    onSpawn: hooks.onSpawn,
  };
  const steps = createStepsRunner(
    createCommandStepExecutor({ ...common, defaultStepTimeoutMs: cfg.defaultStepTimeoutMs }),
    registry,
  );
  return {
    goal: createCommandGoalRunner({
      ...common,
      exitCodes: cfg.exitCodes,
      command: cfg.command,
      goalAs: cfg.goalAs,
      envName: cfg.envName,
    }),
    workflow: cfg.allowInlineSteps ? steps : registeredStepsOnly(steps),
  };
}

/** Refuses steps brought by the task itself: only definitions configured on this host run. */
function registeredStepsOnly(inner: WorkflowDefinitionRunner): WorkflowDefinitionRunner {
  return {
    definitions: inner.definitions,
    inlineSteps: false,
    runDefinition(definition, ctx) {
      if (definition.steps) {
        return Promise.resolve({
          status: 'failed',
          retryable: false,
          reason: 'inline_steps_not_allowed',
          message: `definition "${definition.name}" brings its own steps; this host runs only its configured definitions`,
        });
      }
      return inner.runDefinition({ name: definition.name }, ctx);
    },
  };
}

function toRegistry(definitions: Definitions): Map<string, WorkflowStep[]> {
  const entries: [string, WorkflowStep[]][] =
    definitions instanceof Map
      ? [...(definitions as ReadonlyMap<string, WorkflowStep[]>).entries()]
      : Object.entries(definitions);
  return new Map(entries.map(([name, steps]) => [name, steps.map((s) => ({ ...s, command: [...s.command] }))]));
}
