import { z } from 'zod';
import { INDEXED_STATUSES, TASK_STATUSES, TERMINAL_STATUSES, type TaskStatus } from '../../../workflows/types';
import { TaskPolicyOverrideSchema } from '../../client';
import { StepSchema } from '../definitions/schemas';
import { IdSchema, TimestampSchema } from '../schemas';

export { TASK_STATUSES };
export const TaskStatusSchema = z.enum(TASK_STATUSES);
export const isTerminal = (s: TaskStatus): boolean => TERMINAL_STATUSES.includes(s);

// ---- requests ----

export const TaskIdParamsSchema = z.strictObject({ id: IdSchema });
export type TaskIdParams = z.infer<typeof TaskIdParamsSchema>;

/** Only the header this route reads; every other header passes. */
export const SubmitHeadersSchema = z.object({ 'idempotency-key': IdSchema.optional() });
export type SubmitHeaders = z.infer<typeof SubmitHeadersSchema>;

/** The same overrides the typed client takes (one schema for both). */
export const PolicyOverrideSchema = TaskPolicyOverrideSchema;
export type PolicyOverride = z.infer<typeof PolicyOverrideSchema>;

export const ConstraintsSchema = z.strictObject({
  driverType: z.string().min(1).max(100).optional(),
  tags: z.array(z.string().min(1).max(100)).max(50).optional(),
  hostId: IdSchema.optional(),
  deviceId: IdSchema.optional(),
});

/**
 * POST /v1/tasks. The owner is never part of the body: the server records the token's name.
 * `definition` by name is resolved from the definitions store and its steps snapshotted.
 */
export const SubmitTaskBodySchema = z
  .strictObject({
    taskId: IdSchema.optional().describe('client task id; a repeat returns the same task (or use Idempotency-Key)'),
    pool: IdSchema.optional(),
    goal: z.string().trim().min(1).max(10_000).optional(),
    definition: z
      .union([IdSchema, z.strictObject({ name: IdSchema, steps: z.array(StepSchema).min(1).max(200).optional() })])
      .optional()
      .describe('a registered workflow definition name, or { name, steps } given inline'),
    constraints: ConstraintsSchema.optional(),
    priority: z.number().int().min(-1000).max(1000).optional(),
    policy: PolicyOverrideSchema.optional(),
  })
  .superRefine((b, ctx) => {
    if ((b.goal === undefined) === (b.definition === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['goal'], message: 'exactly one of "goal" or "definition" is required' });
    }
  });
export type SubmitTaskBody = z.infer<typeof SubmitTaskBodySchema>;

export const ListTasksQuerySchema = z.strictObject({
  status: z
    .enum(INDEXED_STATUSES, {
      error: () =>
        `status must be one of ${INDEXED_STATUSES.join(', ')} (assigned and dispatched are not indexed: a task in them lists as queued; GET /v1/tasks/{id} has its exact status)`,
    })
    .optional(),
  owner: z.string().min(1).max(200).optional(),
  hostId: IdSchema.optional(),
  deviceId: IdSchema.optional(),
  pool: IdSchema.optional(),
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z.string().min(1).max(4096).optional().describe('nextCursor of the previous page'),
});
export type ListTasksQuery = z.infer<typeof ListTasksQuerySchema>;

// ---- responses ----

export const AttemptResourceSchema = z.object({
  attempt: z.number().int(),
  hostId: z.string(),
  deviceId: z.string(),
  assignedAt: TimestampSchema,
  ackDeadline: TimestampSchema,
  claimedAt: TimestampSchema.optional(),
  startedAt: TimestampSchema.optional(),
  /** The host's last report (claim, started, progress) to the task; not the lease heartbeat, which stays on the server. */
  lastHeartbeatAt: TimestampSchema.optional(),
  endedAt: TimestampSchema.optional(),
  outcome: z.string().optional(),
  reason: z.string().optional(),
  message: z.string().optional(),
});
export type AttemptResource = z.infer<typeof AttemptResourceSchema>;

export const WAIT_KINDS = ['admission', 'backoff', 'device', 'older_tasks', 'assignment', 'unknown'] as const;
export const QueueInfoSchema = z.object({
  /** 1-based place in the order the pool's strategy serves; absent when not in the queue right now. */
  position: z.number().int().positive().optional(),
  length: z.number().int().nonnegative(),
  /** Tasks before this one in the strategy's order that can use the same devices. */
  ahead: z.number().int().nonnegative(),
  waitingFor: z.enum(WAIT_KINDS),
  reason: z.string(),
  nextAttemptAt: TimestampSchema.optional(),
  matchingDevices: z.object({ total: z.number().int(), idle: z.number().int() }).optional(),
});
export type QueueInfo = z.infer<typeof QueueInfoSchema>;

export const WorkSchema = z.union([
  z.object({ kind: z.literal('goal'), goal: z.string() }),
  z.object({ kind: z.literal('workflow'), definition: z.string(), steps: z.array(StepSchema).optional() }),
]);

export const TaskResourceSchema = z.object({
  taskId: z.string(),
  pool: z.string(),
  owner: z.string().optional(),
  status: TaskStatusSchema,
  work: WorkSchema,
  constraints: z.object({
    driverType: z.string().optional(),
    tags: z.array(z.string()),
    hostId: z.string().optional(),
    deviceId: z.string().optional(),
  }),
  priority: z.number().int(),
  policy: z.object({
    maxAttempts: z.number(),
    maxDispatchFailures: z.number(),
    backoff: z.object({ initialMs: z.number(), multiplier: z.number(), maxMs: z.number() }),
    ackTimeoutMs: z.number(),
    leaseTimeoutMs: z.number(),
    executionTimeoutMs: z.number(),
    maxQueueWaitMs: z.number().optional(),
    reservationGraceMs: z.number().optional(),
  }),
  submittedAt: TimestampSchema,
  attempts: z.array(AttemptResourceSchema),
  /** The attempt in flight: its host and device. */
  current: AttemptResourceSchema.optional(),
  nextAttemptAt: TimestampSchema.optional(),
  consecutiveDispatchFailures: z.number().int(),
  progress: z.object({ seq: z.number().int(), message: z.string(), at: TimestampSchema }).optional(),
  result: z
    .object({
      status: z.enum(['done', 'failed', 'cancelled', 'rejected']),
      reason: z.string().optional(),
      message: z.string().optional(),
      output: z.string().optional(),
      attempts: z.number().int(),
      finishedAt: TimestampSchema,
    })
    .optional(),
  cancelRequested: z.boolean(),
  /** Only while queued: where the task stands and why it waits. */
  queue: QueueInfoSchema.optional(),
  /**
   * Set when no control-plane worker answered: the task as recorded (request, status, result),
   * without its attempts and progress, and why.
   */
  incomplete: z.string().optional(),
});
export type TaskResource = z.infer<typeof TaskResourceSchema>;

export const TaskSummarySchema = z.object({
  taskId: z.string(),
  owner: z.string().optional(),
  status: TaskStatusSchema,
  pool: z.string().optional(),
  hostId: z.string().optional(),
  deviceId: z.string().optional(),
  attempts: z.number().int().optional(),
  submittedAt: TimestampSchema,
  closedAt: TimestampSchema.optional(),
});
export type TaskSummary = z.infer<typeof TaskSummarySchema>;

export const TaskListSchema = z.object({
  items: z.array(TaskSummarySchema),
  nextCursor: z.string().optional(),
});
export type TaskList = z.infer<typeof TaskListSchema>;
