/** Schemas shared by the feature folders. */
import { z } from 'zod';
import { ID_RULE, isValidId } from '../../workflows/ids';

/** Task, pool, host and device ids: they become parts of workflow IDs, so the same rule as everywhere. */
export const IdSchema = z.string().min(1).max(128).refine(isValidId, { message: ID_RULE }).describe(ID_RULE);
export type Id = z.infer<typeof IdSchema>;

/** Epoch milliseconds in the core types; ISO 8601 over HTTP. */
export const TimestampSchema = z.iso.datetime();
export const iso = (ms: number | undefined): string | undefined =>
  ms === undefined ? undefined : new Date(ms).toISOString();
