/** Host agent configuration (a JSON file): identity, pool, timings, device driver, runner, journal. */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import { DEFAULT_POOL, ID_RULE, isValidId } from '../workflows/ids';
import { DefinitionsConfigSchema, DriverConfigSchema, RunnerConfigSchema, timerMs } from './config-schemas';
import { hostConfigCommandProblems } from './preflight';

const id = z.string().refine(isValidId, { message: ID_RULE });

/** Default `shutdownGraceMs`: running assignments get 5 s to finish on a clean stop. */
export const DEFAULT_SHUTDOWN_GRACE_MS = 5_000;
export const MAX_SHUTDOWN_GRACE_MS = 24 * 60 * 60_000;
/**
 * The control plane's default `snapshotTimeoutMs` (workflows/host.ts: 6 x its default
 * `hostTimeoutMs` of 30 s, at least 180 s): a host with no signed snapshot for that long goes offline.
 */
export const CONTROL_PLANE_SNAPSHOT_TIMEOUT_MS = 180_000;

/** Default HostOptions.discoveryFailuresBeforeUnhealthy: about 30 s at the default discovery interval. */
export const DEFAULT_DISCOVERY_FAILURES_BEFORE_UNHEALTHY = 3;

/**
 * Why a config without a `runner` is refused: only the sim driver's devices may default to the
 * simulated runner. A real driver (adb, local) with it would report every task `done` without
 * running anything on its devices.
 */
export function missingRunnerProblem(c: { driver: { type: string }; runner?: unknown }): string | undefined {
  if (c.runner !== undefined || c.driver.type === 'sim') return undefined;
  return (
    `the ${c.driver.type} driver needs a runner: without one every task would run in the simulator and report done ` +
    `without running anything on the device. Configure one (e.g. "runner": {"type": "command", "command": [...], "goalAs": "argument"}), ` +
    `or set "runner": {"type": "sim"} to simulate on purpose`
  );
}

/** Strict, like the driver and runner objects: a misspelt key is an error, not a silently ignored setting. */
export const HostConfigSchema = z
  .strictObject({
    hostId: id,
    /** The credential file issued by `npm run hosts:add` (private keys; keep it 0600). Relative to this file. */
    credentialFile: z.string().min(1),
    pool: id.default(DEFAULT_POOL),
    /**
     * The complete signed snapshot is sent at least this often (and at once when a discovery finds a
     * change). Liveness does not depend on it (the session's heartbeats carry that); keep it well
     * under the control plane's `snapshotTimeoutMs` (default 180 s).
     */
    snapshotIntervalMs: timerMs().positive().default(60_000),
    /** How often the driver discovers devices; a change goes out in a snapshot at once. */
    discoveryIntervalMs: timerMs().positive().default(10_000),
    /**
     * After this many discoveries in a row fail, the devices last seen are reported unhealthy (no
     * work) until one works again.
     */
    discoveryFailuresBeforeUnhealthy: z
      .number()
      .int()
      .min(1)
      .max(1_000)
      .default(DEFAULT_DISCOVERY_FAILURES_BEFORE_UNHEALTHY),
    progressIntervalMs: timerMs().positive().default(5_000),
    /** A run shorter than this sends no status report: its signed result says it all (one update less). */
    reportDelayMs: timerMs().nonnegative().default(1_000),
    driver: DriverConfigSchema,
    /**
     * Default (sim driver only): the simulated runner, with the sim driver's duration/outcome. A real
     * driver needs one configured (see `missingRunnerProblem`).
     */
    runner: RunnerConfigSchema.optional(),
    /** Workflow definitions this host can run by name. */
    definitions: DefinitionsConfigSchema.default({}),
    /** Active assignments journal (0600). Relative to this file; default `<hostId>.journal.json` beside it. */
    journalFile: z.string().min(1).optional(),
    /**
     * On a clean stop (SIGINT/SIGTERM), how long running assignments may go on to finish before they
     * are cancelled (each cancelled one costs its task an attempt). At most a day.
     */
    shutdownGraceMs: z.number().int().nonnegative().max(MAX_SHUTDOWN_GRACE_MS).default(DEFAULT_SHUTDOWN_GRACE_MS),
  })
  .superRefine((c, ctx) => {
    const problem = missingRunnerProblem(c);
    if (problem) ctx.addIssue({ code: 'custom', path: ['runner'], message: problem });
  });
export type HostConfig = z.infer<typeof HostConfigSchema>;
export type HostConfigInput = z.input<typeof HostConfigSchema>;

export interface LoadedHostConfig extends HostConfig {
  /** Absolute paths, resolved against the config file's folder. */
  credentialPath: string;
  journalPath: string;
}

/** A zod issue as `path: message`, the root as `(root)` (as the control plane prints it). */
export function formatIssue(issue: { path: PropertyKey[]; message: string }): string {
  return `${issue.path.map(String).join('.') || '(root)'}: ${issue.message}`;
}

/**
 * Settings that are valid but probably wrong, one line each, for a warning at start-up: a
 * `snapshotIntervalMs` that is not comfortably (three times) less than the control plane's default
 * `snapshotTimeoutMs` (180 s) lets one lost or late snapshot take the host offline.
 */
export function hostConfigWarnings(config: Pick<HostConfig, 'snapshotIntervalMs'>): string[] {
  const warnings: string[] = [];
  const limit = CONTROL_PLANE_SNAPSHOT_TIMEOUT_MS / 3;
  if (config.snapshotIntervalMs > limit) {
    warnings.push(
      `snapshotIntervalMs ${config.snapshotIntervalMs} is not comfortably less than the control plane's default snapshotTimeoutMs (${CONTROL_PLANE_SNAPSHOT_TIMEOUT_MS} ms): ` +
        `a host with no signed snapshot for that long goes offline, so one lost or late snapshot can take it offline. ` +
        `Keep it at most ${limit} ms (or raise the host's snapshotTimeoutMs on the control plane to a few times it)`,
    );
  }
  return warnings;
}

export interface LoadHostConfigOptions {
  /** Refuse commands that cannot start on this machine (see preflight.ts). Default true. */
  checkCommands?: boolean;
  /** The environment the commands will see (PATH). Default process.env. */
  env?: NodeJS.ProcessEnv;
}

export function loadHostConfig(path: string, opts: LoadHostConfigOptions = {}): LoadedHostConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`cannot read host config ${path}: ${(err as Error).message}`, { cause: err });
  }
  const r = HostConfigSchema.safeParse(raw);
  if (!r.success) {
    throw new Error(`invalid host config ${path}:\n  ${r.error.issues.map(formatIssue).join('\n  ')}`);
  }
  if (opts.checkCommands !== false) {
    const problems = hostConfigCommandProblems(r.data, opts.env);
    if (problems.length) {
      throw new Error(
        `host config ${path} names commands that cannot run on this machine (the host would fail every task):\n  ${problems.join('\n  ')}`,
      );
    }
  }
  const dir = dirname(resolve(path));
  return {
    ...r.data,
    credentialPath: resolve(dir, r.data.credentialFile),
    journalPath: resolve(dir, r.data.journalFile ?? `${r.data.hostId}.journal.json`),
  };
}
