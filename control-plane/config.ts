/**
 * Control-plane configuration: parsed once at start-up, from a JSON file and/or environment.
 * An unknown assignment strategy is a configuration error here, before anything starts.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import {
  DEFAULT_CONTROL_TASK_QUEUE,
  DEFAULT_POOL,
  hostTaskQueue,
  ID_RULE,
  isValidId,
  schedulerWorkflowId,
} from '../workflows/ids';
import {
  DEFAULT_POLICY,
  LEASE_MIN_MESSAGE,
  MAX_ATTEMPTS_LIMIT,
  MAX_TIMER_MESSAGE,
  MAX_TIMER_MS,
  MIN_LEASE_TIMEOUT_MS,
  MIN_RESERVATION_GRACE_MS,
} from '../workflows/policy';
import { hasStrategy, strategyNames } from '../workflows/strategies';
import type { SchedulerInput } from '../workflows/scheduler';

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const strategyName = z.string().superRefine((name, ctx) => {
  if (!hasStrategy(name)) {
    ctx.addIssue({
      code: 'custom',
      message: `unknown assignment strategy "${name}"; registered: ${strategyNames().join(', ')}`,
    });
  }
});

/** Pool names follow the rule of every id: the one a host's (or a device's) `pool` and a task's must pass. */
const poolNameProblem = (name: string): string => `"${name}" is not a valid pool name (${ID_RULE})`;
const poolName = z.string().superRefine((name, ctx) => {
  if (!isValidId(name)) ctx.addIssue({ code: 'custom', message: poolNameProblem(name) });
});

/**
 * Whole milliseconds that end up in a timer: at most MAX_TIMER_MS (a host's Node timer fires a
 * longer one at once; the workflows' dates end soon after). Chain `.positive()` or a minimum.
 */
export function timerMs() {
  return z.number().int().max(MAX_TIMER_MS, MAX_TIMER_MESSAGE);
}

export const SchedulerConfigSchema = z.strictObject({
  strategy: strategyName.default('fifo_match'),
  maxQueueDepth: z.number().int().positive().default(10_000),
  agingMs: timerMs().positive().default(60_000),
});

export const TaskPolicySchema = z
  .strictObject({
    maxAttempts: z.number().int().positive().max(MAX_ATTEMPTS_LIMIT).default(DEFAULT_POLICY.maxAttempts),
    maxDispatchFailures: z.number().int().positive().default(DEFAULT_POLICY.maxDispatchFailures),
    backoff: z
      .strictObject({
        initialMs: timerMs().nonnegative().default(DEFAULT_POLICY.backoff.initialMs),
        multiplier: z.number().min(1).default(DEFAULT_POLICY.backoff.multiplier),
        maxMs: timerMs().nonnegative().default(DEFAULT_POLICY.backoff.maxMs),
      })
      .prefault({}),
    ackTimeoutMs: timerMs().positive().default(DEFAULT_POLICY.ackTimeoutMs),
    leaseTimeoutMs: timerMs().min(MIN_LEASE_TIMEOUT_MS, LEASE_MIN_MESSAGE).default(DEFAULT_POLICY.leaseTimeoutMs),
    executionTimeoutMs: timerMs().positive().default(DEFAULT_POLICY.executionTimeoutMs),
    /** No default: a task waits for a device as long as it takes unless told otherwise. */
    maxQueueWaitMs: timerMs().positive().optional(),
    /** No default here: absent, the task holds with RESERVATION_GRACE_MS (its input as before). */
    reservationGraceMs: timerMs().min(MIN_RESERVATION_GRACE_MS).optional(),
  })
  .refine((p) => p.backoff.maxMs >= p.backoff.initialMs, {
    message: 'must be at least backoff.initialMs',
    path: ['backoff', 'maxMs'],
  });

/** Strict at every level: a misspelt key is an error, not a silently ignored setting. */
export const ControlPlaneConfigSchema = z.strictObject({
  controlTaskQueue: z.string().min(1).default(DEFAULT_CONTROL_TASK_QUEUE),
  defaultPool: poolName.default(DEFAULT_POOL),
  /**
   * Pools whose schedulers start with the control plane. A pool a host names that is not here
   * starts when the host first reports, with poolDefaults; a task for any other pool is refused.
   */
  pools: z
    .record(z.string(), SchedulerConfigSchema.prefault({}))
    .superRefine((pools, ctx) => {
      for (const name of Object.keys(pools)) {
        if (!isValidId(name)) ctx.addIssue({ code: 'custom', message: poolNameProblem(name) });
      }
    })
    .default({ [DEFAULT_POOL]: SchedulerConfigSchema.parse({}) }),
  poolDefaults: SchedulerConfigSchema.prefault({}),
  taskDefaults: TaskPolicySchema.prefault({}),
  /**
   * The host liveness lease: the heartbeat timeout of each host's session activity. A host silent
   * longer than this goes offline and its devices are not assigned.
   */
  hostTimeoutMs: timerMs().positive().default(30_000),
  /**
   * A host with no signed snapshot for longer than this goes offline too (hosts send one at least
   * every `snapshotIntervalMs`, 60 s by default). Only the host's own key signs a snapshot, so this
   * bounds how long anything else polling the host's queue could keep a dead host online.
   */
  snapshotTimeoutMs: timerMs().positive().default(180_000),
  /** History length at which long-lived workflows continue-as-new (undefined: the server's suggestion, or 4,000). */
  historyLimit: z.number().int().min(20).optional(),
  /**
   * Task queue of the task workflows (default `<controlTaskQueue>.tasks`). The control plane polls
   * it with a worker of its own, so queued tasks never push the long-lived workflows out of memory.
   * Do not change it while tasks run: the control plane polls only the current one (and the control
   * queue, where tasks from before the split run).
   */
  taskWorkflowTaskQueue: z.string().min(1).optional(),
  /**
   * Long-lived workflows (schedulers, devices, hosts) the control plane keeps in memory (TS SDK
   * `maxCachedWorkflows` of the worker on `controlTaskQueue`; default the SDK's, about 600 per GiB
   * of heap). Each replays a long history when pushed out: size it above devices + hosts + pools.
   */
  maxCachedWorkflows: z.number().int().positive().optional(),
  /**
   * Task workflows kept in memory (the worker on the task workflows' queue). A queued task that was
   * pushed out replays about 20 events when its device comes; every one kept costs about 0.5 MiB.
   * About the number of devices keeps every running task in memory (README, "Configuration";
   * BENCHMARKS.md, P5).
   */
  maxCachedTasks: z.number().int().positive().default(1_000),
  /**
   * How often the control plane checks that the scheduler of every pool it serves is running (the
   * configured pools, and any pool on its control queue whose scheduler was terminated or failed),
   * and starts again one that is not. A run started anew recovers its queue and devices. The same
   * check has hosts start again their device workflows that stopped (terminated, failed).
   */
  poolWatchMs: timerMs().min(100).default(30_000),
  /** Holds nobody released (a task terminated while holding a device) are swept this often... */
  holdSweepMs: timerMs().positive().optional(),
  /** ...once this long past their deadline. Both default to 60 s. */
  holdSlackMs: timerMs().nonnegative().optional(),
});

export type ControlPlaneConfig = z.infer<typeof ControlPlaneConfigSchema>;
export type ControlPlaneConfigInput = z.input<typeof ControlPlaneConfigSchema>;

export function parseControlPlaneConfig(raw: unknown): ControlPlaneConfig {
  const r = ControlPlaneConfigSchema.safeParse(raw ?? {});
  if (!r.success) {
    const lines = r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
    throw new ConfigError(`invalid control-plane configuration:\n  ${lines.join('\n  ')}`);
  }
  const queueProblems: string[] = [];
  if (r.data.taskWorkflowTaskQueue === r.data.controlTaskQueue) {
    queueProblems.push(
      'taskWorkflowTaskQueue: must differ from controlTaskQueue (task workflows get a worker and a cache of their own)',
    );
  }
  const hostQueuePrefix = hostTaskQueue('');
  for (const field of ['controlTaskQueue', 'taskWorkflowTaskQueue'] as const) {
    if (r.data[field]?.startsWith(hostQueuePrefix)) {
      queueProblems.push(`${field}: "${r.data[field]}" is a host's task queue (${hostQueuePrefix}<hostId>)`);
    }
  }
  if (queueProblems.length > 0) {
    throw new ConfigError(`invalid control-plane configuration:\n  ${queueProblems.join('\n  ')}`);
  }
  return r.data;
}

/** FLEET_CONFIG names a JSON file; FLEET_STRATEGY overrides the default pool's strategy. */
export function loadControlPlaneConfig(env: NodeJS.ProcessEnv = process.env): ControlPlaneConfig {
  let raw: Record<string, unknown> = {};
  if (env.FLEET_CONFIG) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(env.FLEET_CONFIG, 'utf8'));
    } catch (err) {
      throw new ConfigError(`cannot read FLEET_CONFIG ${env.FLEET_CONFIG}: ${(err as Error).message}`);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new ConfigError(`FLEET_CONFIG ${env.FLEET_CONFIG}: must hold a JSON object, not ${JSON.stringify(parsed)}`);
    }
    raw = parsed as Record<string, unknown>;
  }
  if (env.FLEET_TASK_QUEUE) raw.controlTaskQueue = env.FLEET_TASK_QUEUE;
  if (env.FLEET_STRATEGY) {
    const pool = (raw.defaultPool as string) ?? DEFAULT_POOL;
    const pools = (raw.pools as Record<string, Record<string, unknown>>) ?? {};
    raw.pools = { ...pools, [pool]: { ...(pools[pool] ?? {}), strategy: env.FLEET_STRATEGY } };
  }
  return parseControlPlaneConfig(raw);
}

/** Where task workflows run: `taskWorkflowTaskQueue`, or `<controlTaskQueue>.tasks`. */
export function taskWorkflowQueue(
  config: Pick<ControlPlaneConfig, 'controlTaskQueue' | 'taskWorkflowTaskQueue'>,
): string {
  return config.taskWorkflowTaskQueue ?? `${config.controlTaskQueue}.tasks`;
}

export function poolConfig(config: ControlPlaneConfig, pool: string) {
  return config.pools[pool] ?? config.poolDefaults;
}

/** What a pool's scheduler starts with: its pool config plus the control plane's workflow knobs. */
export function schedulerInput(config: ControlPlaneConfig, pool: string): SchedulerInput {
  return {
    pool,
    config: poolConfig(config, pool),
    historyLimit: config.historyLimit,
    holdSweepMs: config.holdSweepMs,
    holdSlackMs: config.holdSlackMs,
  };
}

/**
 * How the control plane starts a pool's scheduler (at start, on a task's or a host's behalf, and
 * again after it stopped): attached to the one that runs, if any.
 */
export function schedulerStart(config: ControlPlaneConfig, pool: string) {
  return {
    workflowId: schedulerWorkflowId(pool),
    taskQueue: config.controlTaskQueue,
    args: [schedulerInput(config, pool)] as [SchedulerInput],
    workflowIdConflictPolicy: 'USE_EXISTING' as const,
    staticSummary: `scheduler of pool ${pool}`,
  };
}
