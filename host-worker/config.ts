/** Host agent configuration (a JSON file): identity, pool, timings, device driver, runner, journal. */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import { DEFAULT_POOL, ID_RULE, isValidId } from '../workflows/ids';
import { DefinitionsConfigSchema, DriverConfigSchema, RunnerConfigSchema } from './config-schemas';

const id = z.string().refine(isValidId, { message: ID_RULE });

/** Strict, like the driver and runner objects: a misspelt key is an error, not a silently ignored setting. */
export const HostConfigSchema = z.strictObject({
  hostId: id,
  /** The credential file issued by `npm run hosts:add` (private keys; keep it 0600). Relative to this file. */
  credentialFile: z.string().min(1),
  pool: id.default(DEFAULT_POOL),
  /**
   * The complete signed snapshot is sent at least this often (and at once when a discovery finds a
   * change). Liveness does not depend on it (the session's heartbeats carry that); keep it well
   * under the control plane's `snapshotTimeoutMs` (default 180 s).
   */
  snapshotIntervalMs: z.number().int().positive().default(60_000),
  /** How often the driver discovers devices; a change goes out in a snapshot at once. */
  discoveryIntervalMs: z.number().int().positive().default(10_000),
  progressIntervalMs: z.number().int().positive().default(5_000),
  /** A run shorter than this sends no status report: its signed result says it all (one update less). */
  reportDelayMs: z.number().int().nonnegative().default(1_000),
  driver: DriverConfigSchema,
  /** Default: the simulated runner (with the sim driver's duration/outcome). */
  runner: RunnerConfigSchema.optional(),
  /** Workflow definitions this host can run by name. */
  definitions: DefinitionsConfigSchema.default({}),
  /** Active assignments journal (0600). Relative to this file; default `<hostId>.journal.json` beside it. */
  journalFile: z.string().min(1).optional(),
});
export type HostConfig = z.infer<typeof HostConfigSchema>;
export type HostConfigInput = z.input<typeof HostConfigSchema>;

export interface LoadedHostConfig extends HostConfig {
  /** Absolute paths, resolved against the config file's folder. */
  credentialPath: string;
  journalPath: string;
}

export function loadHostConfig(path: string): LoadedHostConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`cannot read host config ${path}: ${(err as Error).message}`, { cause: err });
  }
  const r = HostConfigSchema.safeParse(raw);
  if (!r.success) {
    throw new Error(
      `invalid host config ${path}:\n  ${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('\n  ')}`,
    );
  }
  const dir = dirname(resolve(path));
  return {
    ...r.data,
    credentialPath: resolve(dir, r.data.credentialFile),
    journalPath: resolve(dir, r.data.journalFile ?? `${r.data.hostId}.journal.json`),
  };
}
