import { z } from 'zod';
import { IdSchema, TimestampSchema } from '../schemas';

export const HostParamsSchema = z.strictObject({ hostId: IdSchema });
export type HostParams = z.infer<typeof HostParamsSchema>;

export const DeviceParamsSchema = z.strictObject({ hostId: IdSchema, deviceId: IdSchema });
export type DeviceParams = z.infer<typeof DeviceParamsSchema>;

export const HostsQuerySchema = z.strictObject({ pool: IdSchema.optional() });
export type HostsQuery = z.infer<typeof HostsQuerySchema>;

export const DevicesQuerySchema = z.strictObject({
  pool: IdSchema.optional(),
  hostId: IdSchema.optional(),
  driverType: z.string().min(1).max(100).optional(),
});
export type DevicesQuery = z.infer<typeof DevicesQuerySchema>;

export const ReservationSchema = z.object({ taskId: z.string(), attempt: z.number().int() });

export const DeviceResourceSchema = z.object({
  hostId: z.string(),
  deviceId: z.string(),
  pool: z.string(),
  driverType: z.string(),
  tags: z.array(z.string()),
  /**
   * `offline` while its host is offline, `busy` while a task holds it (or the host reports a run on
   * it), else as the host last reported it. The host reports idle/busy changes only with its
   * periodic snapshot, so the reservation is what tells a device in use.
   */
  state: z.enum(['idle', 'busy', 'offline']),
  health: z.enum(['good', 'unhealthy', 'maintenance']),
  hostOnline: z.boolean(),
  hostDrained: z.boolean(),
  deviceDrained: z.boolean(),
  /** The pool's scheduler would hand it to a matching task now. */
  assignable: z.boolean(),
  /** Why it is not assignable (reserved, host offline, drained, unhealthy, ...); absent when it is. */
  unassignableBecause: z.string().optional(),
  /** The task holding it, as the pool's scheduler knows it; null when free. */
  reservation: ReservationSchema.nullable(),
});
export type DeviceResource = z.infer<typeof DeviceResourceSchema>;

export const HostResourceSchema = z.object({
  hostId: z.string(),
  pool: z.string(),
  online: z.boolean(),
  drained: z.boolean(),
  drainedDevices: z.array(z.string()),
  /** When the host's last verified snapshot arrived (liveness itself is the session lease: see `online`). */
  lastSeenAt: TimestampSchema.optional(),
  devices: z.array(DeviceResourceSchema),
});
export type HostResource = z.infer<typeof HostResourceSchema>;

export const HostListSchema = z.object({ items: z.array(HostResourceSchema) });
export type HostList = z.infer<typeof HostListSchema>;
export const DeviceListSchema = z.object({ items: z.array(DeviceResourceSchema) });
export type DeviceList = z.infer<typeof DeviceListSchema>;

export const DrainResultSchema = z.object({
  hostId: z.string(),
  deviceId: z.string().optional(),
  drained: z.boolean(),
});
export type DrainResult = z.infer<typeof DrainResultSchema>;

/** DELETE /v1/hosts/:hostId: the host is being removed (its devices leave the pools at once). */
export const RemoveResultSchema = z.object({ hostId: z.string(), removed: z.literal(true) });
export type RemoveResult = z.infer<typeof RemoveResultSchema>;

const PublicKeyHexSchema = z
  .string()
  .regex(/^[0-9a-f]{64}$/, 'a 32-byte public key in lowercase hex (64 characters)')
  .describe('public key, hex');

/**
 * PUT /v1/hosts/:hostId/keys: enrols (or rotates) a host's PUBLIC keys. The credential is made
 * where the operator runs `fleet hosts add`; its private halves never reach the API.
 */
export const EnrollHostBodySchema = z.strictObject({
  pool: IdSchema.optional().describe('the host pool (default: the configured default pool)'),
  keys: z.strictObject({ signing: PublicKeyHexSchema, box: PublicKeyHexSchema }),
  rotate: z
    .boolean()
    .optional()
    .describe(
      'required to replace the keys of an enrolled host: its running process is cut off (offline, no assignments) until it restarts with the new credential',
    ),
});
export type EnrollHostBody = z.infer<typeof EnrollHostBodySchema>;

export const EnrollResultSchema = z.object({
  hostId: z.string(),
  pool: z.string(),
  /** False when a running host workflow already existed (key rotation / re-enrolment). */
  created: z.boolean(),
  /** True when other keys were enrolled before: the host is offline until it reports with the new ones. */
  rotated: z.boolean(),
});
export type EnrollResult = z.infer<typeof EnrollResultSchema>;
