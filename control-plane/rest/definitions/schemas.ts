import { z } from 'zod';
import { MAX_TIMER_MESSAGE, MAX_TIMER_MS } from '../../../workflows/policy';
import { IdSchema, TimestampSchema } from '../schemas';

export const StepSchema = z.strictObject({
  name: z.string().min(1).max(200),
  /** argv: never interpolated into a shell string. */
  command: z.array(z.string().max(10_000)).min(1).max(1_000),
  // A host waits it out with a Node timer, which fires at once past 2^31 - 1 ms.
  timeoutMs: z.number().int().positive().max(MAX_TIMER_MS, MAX_TIMER_MESSAGE).optional(),
});
export type Step = z.infer<typeof StepSchema>;

export const WorkflowDefinitionSchema = z.strictObject({
  name: IdSchema,
  steps: z.array(StepSchema).min(1).max(200),
});
export type WorkflowDefinition = z.infer<typeof WorkflowDefinitionSchema>;

export const StoredDefinitionSchema = WorkflowDefinitionSchema.extend({
  createdAt: TimestampSchema,
  updatedAt: TimestampSchema,
  updatedBy: z.string(),
});
export type StoredDefinition = z.infer<typeof StoredDefinitionSchema>;

export const DefinitionNameParamsSchema = z.strictObject({ name: IdSchema });
export type DefinitionNameParams = z.infer<typeof DefinitionNameParamsSchema>;

export const DefinitionListSchema = z.object({ items: z.array(StoredDefinitionSchema) });
export type DefinitionList = z.infer<typeof DefinitionListSchema>;

/** The body of PUT /v1/workflow-definitions/:name: the name comes from the path. */
export const DefinitionStepsBodySchema = z.strictObject({ steps: WorkflowDefinitionSchema.shape.steps });
export type DefinitionStepsBody = z.infer<typeof DefinitionStepsBodySchema>;
