/** Host agent configuration (a JSON file): identity, pool, timings, and the device driver. */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { DEFAULT_POOL, ID_RULE, isValidId } from '../workflows/ids';

const id = z.string().refine(isValidId, { message: ID_RULE });

export const SimDeviceSchema = z.object({
  deviceId: id,
  driverType: z.string().min(1).default('sim'),
  tags: z.array(z.string().min(1)).default([]),
  health: z.enum(['good', 'unhealthy', 'maintenance']).default('good'),
  state: z.enum(['idle', 'busy', 'offline']).default('idle'),
  pool: id.optional(),
});

export const HostConfigSchema = z.object({
  hostId: id,
  /** The credential file issued by `npm run hosts:add` (private keys; keep it 0600). */
  credentialFile: z.string().min(1),
  pool: id.default(DEFAULT_POOL),
  snapshotIntervalMs: z.number().int().positive().default(10_000),
  progressIntervalMs: z.number().int().positive().default(5_000),
  driver: z.object({
    type: z.literal('sim'),
    devices: z.array(SimDeviceSchema).default([]),
    defaultDurationMs: z.number().int().nonnegative().default(1_000),
    defaultOutcome: z.enum(['done', 'fail', 'fail-retryable', 'hang']).default('done'),
  }),
  definitions: z
    .record(
      id,
      z.array(
        z.object({
          name: z.string().min(1),
          command: z.array(z.string()).min(1),
          timeoutMs: z.number().int().positive().optional(),
        }),
      ),
    )
    .default({}),
});
export type HostConfig = z.infer<typeof HostConfigSchema>;

export function loadHostConfig(path: string): HostConfig {
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
  return r.data;
}
