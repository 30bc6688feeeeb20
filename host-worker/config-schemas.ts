/**
 * Configuration schemas of the host's device drivers and runners, each paired with its parsed type
 * (`z.infer`) and, where defaults apply, its input type (`z.input`). Every object is strict: a
 * misspelt key is an error, not a silently ignored setting.
 */
import { z } from 'zod';
import { ID_RULE, isValidId } from '../workflows/ids';
import { MAX_TIMER_MESSAGE, MAX_TIMER_MS } from '../workflows/policy';

const id = z.string().refine(isValidId, { message: ID_RULE });
const tag = z.string().min(1);
const argv = z.array(z.string()).min(1);
const exitCode = z.number().int().min(0).max(255);

/**
 * Whole milliseconds that a Node timer will wait: at most MAX_TIMER_MS. Chain `.positive()` or
 * `.nonnegative()` as the field needs. Every host setting that becomes a timer is one of these.
 */
export function timerMs() {
  return z.number().int().max(MAX_TIMER_MS, MAX_TIMER_MESSAGE);
}

// Drivers -------------------------------------------------------------------------------------

/** One simulated device (the same fields as the sim driver's devices in host-worker/config.ts). */
export const SimDeviceConfigSchema = z.strictObject({
  deviceId: id,
  driverType: z.string().min(1).default('sim'),
  tags: z.array(tag).default([]),
  health: z.enum(['good', 'unhealthy', 'maintenance']).default('good'),
  state: z.enum(['idle', 'busy', 'offline']).default('idle'),
  pool: id.optional(),
});
export type SimDeviceConfig = z.infer<typeof SimDeviceConfigSchema>;

export const SimDriverConfigSchema = z.strictObject({
  type: z.literal('sim'),
  devices: z.array(SimDeviceConfigSchema).default([]),
  /** Kept here for existing host.json files; the sim runner reads them when its own are absent. */
  defaultDurationMs: timerMs().nonnegative().default(1_000),
  defaultOutcome: z.enum(['done', 'fail', 'fail-retryable', 'hang']).default('done'),
});
export type SimDriverConfig = z.infer<typeof SimDriverConfigSchema>;

export const AdbDriverConfigSchema = z.strictObject({
  type: z.literal('adb'),
  adbPath: z.string().min(1).default('adb'),
  driverType: z.string().min(1).default('android'),
  listTimeoutMs: timerMs().positive().default(10_000),
  healthTimeoutMs: timerMs().positive().default(5_000),
  healthConcurrency: z.number().int().positive().default(8),
  /** Only these serials are reported (all when absent). */
  allowSerials: z.array(z.string().min(1)).optional(),
  /** Tags on every device. */
  tags: z.array(tag).default([]),
  /** Extra tags per serial. */
  extraTags: z.record(z.string().min(1), z.array(tag)).default({}),
});
export type AdbDriverConfig = z.infer<typeof AdbDriverConfigSchema>;

export const LocalDriverConfigSchema = z.strictObject({
  type: z.literal('local'),
  /** Default: os.hostname() made into a valid id. */
  deviceId: id.optional(),
  driverType: z.string().min(1).default('local'),
  tags: z.array(tag).default([]),
  healthCheck: z
    .strictObject({
      command: argv,
      timeoutMs: timerMs().positive().default(10_000),
    })
    .optional(),
});
export type LocalDriverConfig = z.infer<typeof LocalDriverConfigSchema>;

export const DriverConfigSchema = z.discriminatedUnion('type', [
  SimDriverConfigSchema,
  AdbDriverConfigSchema,
  LocalDriverConfigSchema,
]);
export type DriverConfig = z.infer<typeof DriverConfigSchema>;
export type DriverConfigInput = z.input<typeof DriverConfigSchema>;

// Runners -------------------------------------------------------------------------------------

export const SimRunnerConfigSchema = z.strictObject({
  type: z.literal('sim'),
  defaultDurationMs: timerMs().nonnegative().optional(),
  defaultOutcome: z.enum(['done', 'fail', 'fail-retryable', 'hang']).optional(),
  progressSteps: z.number().int().positive().optional(),
});
export type SimRunnerConfig = z.infer<typeof SimRunnerConfigSchema>;

export const ExitCodesSchema = z
  .strictObject({
    done: z.array(exitCode).default([0]),
    retryable: z.array(exitCode).default([]),
  })
  .refine((c) => !c.done.some((code) => c.retryable.includes(code)), {
    message: 'an exit code cannot be both done and retryable',
  });
export type ExitCodesConfig = z.infer<typeof ExitCodesSchema>;

export const CommandRunnerConfigSchema = z
  .strictObject({
    type: z.literal('command'),
    /** argv of the goal runner; the executable is command[0]. Never run through a shell. */
    command: argv,
    goalAs: z.enum(['argument', 'env']),
    /** Only with goalAs 'env'; default FLEET_GOAL. */
    envName: z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'a valid environment variable name')
      .optional(),
    exitCodes: ExitCodesSchema.default({ done: [0], retryable: [] }),
    killGraceMs: timerMs().nonnegative().default(5_000),
    cwd: z.string().min(1).optional(),
    env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.string()).default({}),
    /**
     * Names of the host agent's environment that commands get although they are withheld by default
     * (`TEMPORAL_*`, `FLEET_*`, and names that look like secrets such as `*_TOKEN`): a command's
     * output ends up in the task's result, in history and over REST.
     */
    passEnv: z.array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/)).default([]),
    maxProgressLinesPerSecond: z.number().int().positive().default(20),
    /** Workflow-definition steps without their own timeoutMs. */
    defaultStepTimeoutMs: timerMs().positive().optional(),
    /**
     * Run steps a task brings inline (`definition: { name, steps }`)? They are argv chosen by whoever
     * submits the task, so by default only this host's configured definitions run.
     */
    allowInlineSteps: z.boolean().default(false),
  })
  .refine((c) => c.goalAs === 'env' || c.envName === undefined, {
    message: 'envName is only used with goalAs "env"',
    path: ['envName'],
  });
export type CommandRunnerConfig = z.infer<typeof CommandRunnerConfigSchema>;

export const RunnerConfigSchema = z.discriminatedUnion('type', [SimRunnerConfigSchema, CommandRunnerConfigSchema]);
export type RunnerConfig = z.infer<typeof RunnerConfigSchema>;
export type RunnerConfigInput = z.input<typeof RunnerConfigSchema>;

export const WorkflowStepConfigSchema = z.strictObject({
  name: z.string().min(1),
  command: argv,
  timeoutMs: timerMs().positive().optional(),
});
export const DefinitionsConfigSchema = z.record(id, z.array(WorkflowStepConfigSchema).min(1));
export type DefinitionsConfig = z.infer<typeof DefinitionsConfigSchema>;
