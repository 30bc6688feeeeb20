/**
 * The typed client used by the REST facade, the CLI and tests: submit, get, list, cancel, wait.
 * Submission validates input (zod) before anything reaches Temporal, fills policy defaults from
 * configuration, and is idempotent on the task id.
 */
import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  WorkflowNotFoundError,
  type WorkflowExecutionDescription,
  type Client,
  type WorkflowIdReusePolicy,
} from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { decodeFromPayloadsAtIndex } from '@temporalio/common/lib/internal-non-workflow';
import { tsToMs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';
import { z } from 'zod';
import { ErrorType } from '../workflows/errors';
import {
  definitionTag,
  INLINE_STEPS_TAG,
  isValidId,
  ID_RULE,
  schedulerWorkflowId,
  taskWorkflowId,
} from '../workflows/ids';
import { admissionSignal, assignmentSignal, taskStateQuery, type Admission } from '../workflows/messages';
import {
  FleetAttempt,
  FleetDeviceId,
  FleetDriverType,
  FleetHostId,
  FleetKind,
  FleetPool,
  FleetStatus,
  visibilityString,
} from '../workflows/search-attributes';
import type { taskWorkflow } from '../workflows/task';
import {
  TERMINAL_STATUSES,
  type Assignment,
  type IndexedStatus,
  type TaskInput,
  type TaskResult,
  type TaskStatus,
  type TaskView,
} from '../workflows/types';
import { requestDifferences, type TaskRequest } from './requests';
import {
  initialTaskView,
  LEASE_MIN_MESSAGE,
  MAX_ATTEMPTS_LIMIT,
  MAX_TIMER_MESSAGE,
  MAX_TIMER_MS,
  MIN_LEASE_TIMEOUT_MS,
  MIN_RESERVATION_GRACE_MS,
  policyBoundProblems,
  validateTaskInput,
} from '../workflows/policy';
import { taskWorkflowQueue, timerMs, type ControlPlaneConfig } from './config';
import { recordsPatch, signalTagFor } from './signal-auth';
import { SIGNAL_AUTH_PATCH, SIGNAL_NAMES_PATCH } from '../workflows/authenticity';
import { SupersededRuns } from './superseded';

export class ValidationError extends Error {
  override name = 'ValidationError';
  constructor(public readonly issues: Array<{ path: string; message: string }>) {
    super(`invalid task: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`);
  }
}
/** The pool's queue holds its maximum number of queued tasks; nothing was admitted. */
export class QueueFullError extends Error {
  override name = 'QueueFullError';
}
export class TaskRejectedError extends Error {
  override name = 'TaskRejectedError';
  constructor(
    message: string,
    public readonly reason: string,
  ) {
    super(message);
  }
}
export class TaskNotFoundError extends Error {
  override name = 'TaskNotFoundError';
}
/** `cancel` found the task already ended: nothing was changed. `task` is its recorded state. */
export class TaskEndedError extends Error {
  override name = 'TaskEndedError';
  constructor(
    public readonly taskId: string,
    public readonly status: TaskStatus,
  ) {
    super(`task ${taskId} already ended with status ${status}: nothing to cancel`);
  }
}
/** The memo key of a task's start that says whether its definition was submitted by name. */
const DEFINITION_BY_NAME_MEMO = 'fleetDefinitionByName';
/** How long a read waits for a control-plane worker before it shows the task as recorded (`find`). */
export const LIVE_VIEW_TIMEOUT_MS = 8_000;

/**
 * `submit` with `admissionTimeoutMs`: the task was started (it is kept, and shows as queued) but its
 * pool did not answer in time, typically because no control plane runs. It is admitted or refused
 * once one does; submitting the same id again waits again and never starts a second run.
 */
export class AdmissionPendingError extends Error {
  override name = 'AdmissionPendingError';
  constructor(
    public readonly taskId: string,
    public readonly waitedMs: number,
  ) {
    super(
      `task ${taskId} was started, but its pool did not admit it within ${waitedMs} ms (is a control plane running?); ` +
        'it is kept, and will be admitted or refused once the pool answers',
    );
  }
}
/** `wait` gave up: the task has not ended within the time allowed (it goes on running). */
export class TaskWaitTimeoutError extends Error {
  override name = 'TaskWaitTimeoutError';
  constructor(
    public readonly taskId: string,
    public readonly timeoutMs: number,
  ) {
    super(`task ${taskId} has not ended within ${timeoutMs} ms (it goes on; wait again or cancel it)`);
  }
}

const id = z.string().refine(isValidId, { message: ID_RULE });
/** Like TaskPolicySchema but without defaults: `.partial()` would still fill zod defaults in. */
export const TaskPolicyOverrideSchema = z.strictObject({
  maxAttempts: z.number().int().positive().max(MAX_ATTEMPTS_LIMIT).optional(),
  maxDispatchFailures: z.number().int().positive().optional(),
  backoff: z
    .strictObject({
      initialMs: timerMs().nonnegative().optional(),
      multiplier: z.number().min(1).optional(),
      maxMs: timerMs().nonnegative().optional(),
    })
    .optional(),
  ackTimeoutMs: timerMs().positive().optional(),
  leaseTimeoutMs: timerMs().min(MIN_LEASE_TIMEOUT_MS, LEASE_MIN_MESSAGE).optional(),
  executionTimeoutMs: timerMs().positive().optional(),
  maxQueueWaitMs: timerMs().positive().optional(),
  reservationGraceMs: timerMs().min(MIN_RESERVATION_GRACE_MS).optional(),
});
const StepSchema = z.strictObject({
  name: z.string().min(1).max(200),
  command: z.array(z.string()).min(1),
  timeoutMs: z.number().int().positive().max(MAX_TIMER_MS, MAX_TIMER_MESSAGE).optional(),
});

/** Strict throughout, like the REST schemas: a misspelt field is an error, never silently dropped. */
export const SubmitRequestSchema = z
  .strictObject({
    taskId: id.optional(),
    pool: id.optional(),
    goal: z.string().trim().min(1).max(10_000).optional(),
    definition: z.union([id, z.strictObject({ name: id, steps: z.array(StepSchema).min(1).optional() })]).optional(),
    constraints: z
      .strictObject({
        driverType: z.string().min(1).max(100).optional(),
        tags: z.array(z.string().min(1).max(100)).max(50).default([]),
        hostId: id.optional(),
        deviceId: id.optional(),
      })
      .prefault({}),
    priority: z.number().int().min(-1000).max(1000).default(0),
    owner: z.string().max(200).optional(),
    /** Overrides of the configured task defaults; what is left out comes from configuration. */
    policy: TaskPolicyOverrideSchema.optional(),
  })
  .refine((r) => (r.goal === undefined) !== (r.definition === undefined), {
    message: 'exactly one of "goal" or "definition" is required',
    path: ['goal'],
  });
export type SubmitRequest = z.input<typeof SubmitRequestSchema>;

export interface TaskSummary {
  taskId: string;
  status: TaskStatus;
  pool?: string;
  hostId?: string;
  deviceId?: string;
  attempt?: number;
  startedAt?: Date;
  closedAt?: Date;
}

export interface ListFilter {
  /** Indexed statuses only: a task that is assigned or dispatched lists as queued (INDEXED_STATUSES). */
  status?: IndexedStatus;
  pool?: string;
  hostId?: string;
  deviceId?: string;
  limit?: number;
}

export class FleetClient {
  private readonly superseded: SupersededRuns;

  constructor(
    readonly client: Client,
    readonly config: ControlPlaneConfig,
    private readonly newId: () => string = () => crypto.randomUUID(),
  ) {
    this.superseded = new SupersededRuns(client);
  }

  /** Validates and fills defaults; throws ValidationError and touches nothing on bad input. */
  buildInput(req: SubmitRequest): TaskInput {
    const r = SubmitRequestSchema.safeParse(req);
    if (!r.success) {
      throw new ValidationError(
        r.error.issues.flatMap((i) =>
          i.code === 'unrecognized_keys'
            ? i.keys.map((k) => ({ path: [...i.path, k].join('.'), message: 'unknown field' }))
            : [{ path: i.path.join('.') || '(root)', message: i.message }],
        ),
      );
    }
    const v = r.data;
    const d = this.config.taskDefaults;
    const defined = <T extends object>(o: T | undefined) =>
      Object.fromEntries(Object.entries(o ?? {}).filter(([, x]) => x !== undefined)) as Partial<T>;
    const policy = {
      ...d,
      ...defined(v.policy),
      backoff: { ...d.backoff, ...defined(v.policy?.backoff) },
    };
    const def = typeof v.definition === 'string' ? { name: v.definition } : v.definition;
    // A definition runs only where the host's runner has it (by name) or takes steps along: its
    // hosts advertise that as a device tag (host-worker/runners.ts), and the task requires it.
    const needs = def ? [def.steps ? INLINE_STEPS_TAG : definitionTag(def.name)] : [];
    const constraints = needs.length
      ? { ...v.constraints, tags: [...new Set([...v.constraints.tags, ...needs])] }
      : v.constraints;
    const input: TaskInput = {
      taskId: v.taskId ?? this.newId(),
      pool: v.pool ?? this.config.defaultPool,
      work:
        v.goal !== undefined
          ? { kind: 'goal', goal: v.goal }
          : { kind: 'workflow', definition: def!.name, ...(def!.steps ? { steps: def!.steps } : {}) },
      constraints,
      priority: v.priority,
      owner: v.owner,
      policy,
      releaseViaPool: true,
    };
    // What the task workflow would refuse (a backoff whose maxMs is below its initialMs with the
    // defaults filled in, say) is refused here, before anything starts.
    const problems = [...validateTaskInput(input), ...policyBoundProblems(input.policy)];
    if (problems.length > 0) {
      throw new ValidationError(
        problems.map((p) => {
          const at = p.indexOf(': ');
          return at < 0 ? { path: '(root)', message: p } : { path: p.slice(0, at), message: p.slice(at + 2) };
        }),
      );
    }
    return input;
  }

  /**
   * Starts the task (or finds the existing one with this id) and returns once its pool admitted it.
   * A repeat of an id returns the recorded task and runs nothing; a full queue throws QueueFullError.
   */
  async submit(
    req: SubmitRequest,
    opts: {
      admissionTimeoutMs?: number;
      /**
       * The definition was named by the caller, its steps (if any) resolved from a store (REST's
       * definitions): recorded with the task, so a later repeat by name compares by the name alone
       * only with a task itself submitted by name (`submittedByName`). Default: a definition given
       * without steps.
       */
      definitionByName?: boolean;
    } = {},
  ): Promise<TaskView> {
    const input = this.buildInput(req);
    await this.assertPoolExists(input.pool, input.taskId);
    const byName =
      input.work.kind !== 'workflow'
        ? undefined
        : (opts.definitionByName ?? (typeof req.definition === 'string' || !req.definition?.steps));
    const start = (reuse: WorkflowIdReusePolicy) =>
      this.startAndAwaitAdmission(input, reuse, opts.admissionTimeoutMs, byName);
    try {
      return await start('REJECT_DUPLICATE');
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    }
    // The id belongs to a task that already ended: return what it recorded. Only a task that was never
    // admitted (rejected) may be submitted again under the same id. Temporal has no "start only if
    // the latest run is this one", so two callers re-submitting a rejected id at once both see it
    // rejected; the first one's run wins, and the second attaches to it while it runs. What is left
    // is a window between the look and the start (the latest run's state, read from the server
    // without a worker, a round trip before the start): if the first caller's run started and
    // *ended* inside it, a run ended `done` still refuses the start (failed-only reuse: rejected runs
    // close as failed, done ones as completed); one ended failed or cancelled would not.
    // The recorded task. With an admission timeout, no longer than that for a worker to answer
    // (none may run): the task as recorded then.
    const current = async (): Promise<TaskView> =>
      opts.admissionTimeoutMs === undefined
        ? this.get(input.taskId)
        : ((await this.find(input.taskId, { liveTimeoutMs: opts.admissionTimeoutMs })) ?? this.get(input.taskId));
    const latest = await this.client.workflow.getHandle(taskWorkflowId(input.taskId)).describe();
    const rejected = latest.status.name !== 'RUNNING' && latest.typedSearchAttributes.get(FleetStatus) === 'rejected';
    if (!rejected) return current();
    try {
      return await start('ALLOW_DUPLICATE_FAILED_ONLY');
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) return current();
      throw err;
    }
  }

  /** Pools known to exist (configured, or a scheduler found running): a pool never goes away. */
  private readonly knownPools = new Set<string>();

  /**
   * A pool is one in the configuration or one a host serves (its scheduler was started when the
   * host reported devices in it). Anything else is most likely a typo: refused, nothing started.
   */
  private async assertPoolExists(pool: string, taskId: string): Promise<void> {
    if (pool === this.config.defaultPool || Object.hasOwn(this.config.pools, pool) || this.knownPools.has(pool)) return;
    try {
      const d = await this.client.workflow.getHandle(schedulerWorkflowId(pool)).describe();
      if (d.status.name === 'RUNNING') {
        this.knownPools.add(pool);
        return;
      }
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
    }
    // A repeat of a task that exists returns that task, whatever became of its pool since.
    if (
      await this.get(taskId).then(
        () => true,
        () => false,
      )
    )
      return;
    const known = Object.keys(this.config.pools).join(', ');
    throw new TaskRejectedError(
      `unknown pool "${pool}": not configured (${known}) and no host serves it; nothing was submitted`,
      ErrorType.UnknownPool,
    );
  }

  /**
   * Starts the task and waits for its pool's answer without an update of its own (an update is a
   * billed action): the answer is the scheduler's `admission` or the device's `assignment` signal,
   * which the task's history records anyway, so the client long-polls that history (not billed).
   */
  private async startAndAwaitAdmission(
    input: TaskInput,
    reuse: WorkflowIdReusePolicy,
    admissionTimeoutMs?: number,
    definitionByName?: boolean,
  ): Promise<TaskView> {
    const handle = await this.client.workflow.start<typeof taskWorkflow>('taskWorkflow', {
      workflowId: taskWorkflowId(input.taskId),
      ...(definitionByName === undefined ? {} : { memo: { [DEFINITION_BY_NAME_MEMO]: definitionByName } }),
      taskQueue: taskWorkflowQueue(this.config),
      args: [input],
      workflowIdConflictPolicy: 'USE_EXISTING',
      workflowIdReusePolicy: reuse,
      // Everything the workflow would publish at start, so it starts without an upsert of its own.
      typedSearchAttributes: [
        { key: FleetKind, value: 'task' },
        { key: FleetStatus, value: 'queued' },
        { key: FleetPool, value: input.pool },
        { key: FleetAttempt, value: 0 },
        ...(input.constraints.driverType ? [{ key: FleetDriverType, value: input.constraints.driverType }] : []),
      ],
      staticSummary:
        input.work.kind === 'goal' ? `goal: ${input.work.goal.slice(0, 200)}` : `workflow: ${input.work.definition}`,
    });
    const answer =
      admissionTimeoutMs === undefined
        ? await this.readAdmission(handle.workflowId, handle.firstExecutionRunId, input)
        : await this.within(admissionTimeoutMs, input, (given) =>
            this.readAdmission(handle.workflowId, handle.firstExecutionRunId, input, given),
          );
    if (answer.kind === 'closed') {
      // Refused (a full queue), invalid, or ended without an answer we saw: a rejection is typed.
      try {
        await handle.result();
      } catch (err) {
        if (err instanceof WorkflowFailedError && err.cause instanceof ApplicationFailure) {
          const type = err.cause.type;
          if (type === ErrorType.QueueFull) throw new QueueFullError(err.cause.message);
          if (type === ErrorType.InvalidTask || type === ErrorType.UnknownPool) {
            throw new TaskRejectedError(err.cause.message, type);
          }
        }
      }
      return this.get(input.taskId);
    }
    // The run is another caller's (USE_EXISTING attached to it), or it was answered before we began
    // to wait (a task already under way): its recorded state, not one built from this request, is the
    // honest answer. That costs a query (billed), so only on these rare paths.
    if (!answer.ours || answer.alreadyThere) return this.get(input.taskId);
    return { ...initialTaskView(input, answer.startedAt), admitted: true };
  }

  /**
   * `read`'s answer, or AdmissionPendingError after `ms`. The read is not aborted (an aborted call
   * is retried by the client's retry interceptor): it is told it was given up on, and stops after the
   * long poll it is in.
   */
  private async within<R>(ms: number, input: TaskInput, read: (given: { up: boolean }) => Promise<R>): Promise<R> {
    const given = { up: false };
    let timer: NodeJS.Timeout | undefined;
    const reading = read(given);
    reading.catch(() => undefined); // once given up on, nobody waits for it
    try {
      return await Promise.race([
        reading,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            given.up = true;
            reject(new AdmissionPendingError(input.taskId, ms));
          }, ms);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Follows one task run's history until the pool's answer, by the workflow's own rule: the first
   * `admission` signal, or an `assignment` for attempt 1 before any admission (the device's
   * assignment stands for the admission when a device was free at once). A refusal is followed by
   * the run's close, which carries the typed reason. Also tells whether the run was started with
   * this request's input (`ours`): with USE_EXISTING it may be another caller's run.
   */
  private async readAdmission(
    workflowId: string,
    runId: string,
    input: TaskInput,
    given: { up: boolean } = { up: false },
  ): Promise<{ kind: 'admitted'; startedAt: number; alreadyThere: boolean; ours: boolean } | { kind: 'closed' }> {
    const converter = this.client.workflow.options.loadedDataConverter;
    const decode = <T>(payloads: Parameters<typeof decodeFromPayloadsAtIndex>[2]) =>
      decodeFromPayloadsAtIndex<T>(converter, 0, payloads);
    let nextPageToken: Uint8Array | undefined;
    let startedAt = Date.now();
    let ours = false;
    let refused = false;
    let refusesUntagged = false;
    let refusesUnnamed = false;
    const where = { namespace: this.client.options.namespace, workflowId };
    for (let page = 0; !given.up; page++) {
      // A long poll returns at each new batch of events: about 6.5 reads per submit in P3 (not billed).
      // Pausing between polls does not merge batches under load (they come seconds apart), so none.
      const res = await this.client.workflowService.getWorkflowExecutionHistory({
        namespace: this.client.options.namespace,
        execution: { workflowId, runId },
        nextPageToken,
        waitNewEvent: true,
      });
      for (const e of res.history?.events ?? []) {
        // The run's own rule for older tags (workflows/authenticity.ts): taken until it first refused one.
        if (recordsPatch(e, SIGNAL_AUTH_PATCH)) refusesUntagged = true;
        if (recordsPatch(e, SIGNAL_NAMES_PATCH)) refusesUnnamed = true;
        const started = e.workflowExecutionStartedEventAttributes;
        if (started) {
          if (e.eventTime) startedAt = tsToMs(e.eventTime);
          ours = JSON.stringify(await decode<TaskInput>(started.input?.payloads)) === JSON.stringify(input);
        }
        const signal = e.workflowExecutionSignaledEventAttributes;
        // Only what the control plane sent counts (the task workflow ignores the rest too).
        const tag =
          signal && !refused
            ? await signalTagFor(converter.payloadCodecs, where, signal.signalName ?? '', signal.input?.payloads)
            : undefined;
        const taken =
          tag === 'taken' || (tag === 'unnamed' && !refusesUnnamed) || (tag === 'untagged' && !refusesUntagged);
        if (signal && taken) {
          // An answer for an earlier submission under this id (sent again) does not count, as in the run.
          const submittedAt = input.submittedAt ?? startedAt;
          const other = (m: { submittedAt?: number }) => m.submittedAt !== undefined && m.submittedAt !== submittedAt;
          if (signal.signalName === admissionSignal.name) {
            const admission = await decode<Admission>(signal.input?.payloads);
            if (other(admission)) continue;
            if (admission.accepted) return { kind: 'admitted', startedAt, alreadyThere: page === 0, ours };
            refused = true; // the run's close follows, with the typed reason
          } else if (
            signal.signalName === assignmentSignal.name &&
            ((a: Assignment) => a.attempt === 1 && !other(a))(await decode<Assignment>(signal.input?.payloads))
          ) {
            return { kind: 'admitted', startedAt, alreadyThere: page === 0, ours };
          }
        }
        if (e.eventType != null && CLOSE_EVENTS.has(e.eventType)) return { kind: 'closed' };
      }
      nextPageToken = res.nextPageToken?.length ? res.nextPageToken : undefined;
      if (!nextPageToken) return { kind: 'closed' };
    }
    throw new AdmissionPendingError(input.taskId, 0); // given up on: nobody reads this
  }

  /** The task workflow's latest run as the server describes it (no worker needed); TaskNotFoundError if none. */
  private async describeTask(taskId: string): Promise<WorkflowExecutionDescription> {
    try {
      return await this.client.workflow.getHandle(taskWorkflowId(taskId)).describe();
    } catch (err) {
      if ((err as Error)?.name === 'WorkflowNotFoundError') throw new TaskNotFoundError(`task ${taskId} not found`);
      throw err;
    }
  }

  /**
   * The parts in which the recorded task's request differs from this one (empty: the same request,
   * a repeat). `byName`: this request names its definition (its steps, if any, come from a store or
   * the host); it then compares by the name alone, but only with a task itself submitted by name,
   * or started before that was recorded: one submitted with its steps inline is other work than
   * whatever the name means now.
   */
  async requestDifferences(recorded: TaskView, request: TaskRequest, byName: boolean): Promise<string[]> {
    const exact = requestDifferences(recorded, request, false);
    if (exact.length === 0 || !byName) return exact;
    if (recorded.work.kind === 'workflow' && (await this.submittedByName(recorded.taskId)) === false) return exact;
    return requestDifferences(recorded, request, true);
  }

  /**
   * Whether the task's definition was submitted by name (true) or with its steps inline (false), as
   * recorded at its start (the latest run's memo; no worker needed); undefined for a task that runs
   * no definition or was started before this was recorded. TaskNotFoundError if none.
   */
  async submittedByName(taskId: string): Promise<boolean | undefined> {
    const v = (await this.describeTask(taskId)).memo?.[DEFINITION_BY_NAME_MEMO];
    return typeof v === 'boolean' ? v : undefined;
  }

  /** The task's live state, from its workflow (a query: a control-plane worker must answer it). */
  async get(taskId: string, opts: { timeoutMs?: number } = {}): Promise<TaskView> {
    const handle = this.client.workflow.getHandle(taskWorkflowId(taskId));
    try {
      return opts.timeoutMs === undefined
        ? await handle.query(taskStateQuery)
        : await this.client.withDeadline(Date.now() + opts.timeoutMs, () => handle.query(taskStateQuery));
    } catch (err) {
      if ((err as Error)?.name === 'WorkflowNotFoundError') throw new TaskNotFoundError(`task ${taskId} not found`);
      throw err;
    }
  }

  /**
   * The live view (`get`), or, when no control-plane worker answers within `liveTimeoutMs` (REST and
   * `npm run submit` use LIVE_VIEW_TIMEOUT_MS) (down or
   * restarting), the task as recorded (`recorded`, marked `incomplete`); undefined for an unknown
   * id. Temporal itself not answering stays an error.
   */
  async find(taskId: string, opts: { liveTimeoutMs: number }): Promise<TaskView | undefined> {
    try {
      return await this.get(taskId, { timeoutMs: opts.liveTimeoutMs });
    } catch (err) {
      if (err instanceof TaskNotFoundError) return undefined;
      try {
        return await this.recorded(taskId);
      } catch (again) {
        if (again instanceof TaskNotFoundError) return undefined;
        throw err;
      }
    }
  }

  /**
   * The task as the server has it on record, without a worker: its request (the start input), its
   * status (the indexed one, or how the run closed) and, once ended, its result (the close event).
   * For when no control-plane worker answers `get`: attempts and progress are not in it, and
   * `incomplete` says so.
   */
  async recorded(taskId: string): Promise<TaskView & { incomplete: string }> {
    const handle = this.client.workflow.getHandle(taskWorkflowId(taskId));
    const d = await this.describeTask(taskId);
    const input = await readTaskInput(this.client, d.workflowId, d.runId);
    const view: TaskView = initialTaskView(input, input.submittedAt ?? d.startTime.getTime());
    view.admitted = undefined;
    const indexed = d.typedSearchAttributes.get(FleetStatus) as TaskStatus | undefined;
    if (indexed) view.status = indexed;
    const cancelRequested = (d.raw.workflowExecutionInfo as { cancelRequested?: boolean } | null)?.cancelRequested;
    if (cancelRequested) view.cancelRequested = true;
    if (d.status.name !== 'RUNNING') {
      view.status = indexed && TERMINAL_STATUSES.includes(indexed) ? indexed : closeStatus(d.status.name);
      const result = await handle.result().then(
        (r: unknown) => r,
        (err: unknown) => (err instanceof WorkflowFailedError ? failureResult(err) : undefined),
      );
      if (isTaskResult(result)) view.result = result;
    }
    return {
      ...view,
      incomplete: 'no control-plane worker answered: this is the task as recorded, without its attempts and progress',
    };
  }

  /**
   * Waits until the task ended, then returns its recorded state. With `timeoutMs`, gives up after
   * that long with a TaskWaitTimeoutError; the task itself is not touched.
   */
  async wait(taskId: string, opts: { timeoutMs?: number } = {}): Promise<TaskView> {
    const handle = this.client.workflow.getHandle(taskWorkflowId(taskId));
    const untilEnd = async (): Promise<void> => {
      try {
        await handle.result();
      } catch (err) {
        if ((err as Error)?.name === 'WorkflowNotFoundError') throw new TaskNotFoundError(`task ${taskId} not found`);
        if (!(err instanceof WorkflowFailedError)) throw err;
      }
    };
    const { timeoutMs } = opts;
    if (timeoutMs === undefined) {
      await untilEnd();
    } else {
      if (!Number.isFinite(timeoutMs) || timeoutMs < 0)
        throw new RangeError(`timeoutMs must be >= 0, got ${timeoutMs}`);
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(), timeoutMs);
      try {
        // The abort cancels the long poll itself, so nothing is left waiting on the server.
        await this.client.withAbortSignal(abort.signal, untilEnd);
      } catch (err) {
        if (abort.signal.aborted && !(err instanceof TaskNotFoundError))
          throw new TaskWaitTimeoutError(taskId, timeoutMs);
        throw err;
      } finally {
        clearTimeout(timer);
      }
    }
    return this.get(taskId);
  }

  /**
   * Requests the task's cancellation. It is durable and needs no worker up: a queued task leaves
   * the queue, a running one is stopped on its host. A task that already ended throws
   * TaskEndedError and is not changed; an unknown id throws TaskNotFoundError.
   */
  async cancel(taskId: string): Promise<void> {
    const handle = this.client.workflow.getHandle(taskWorkflowId(taskId));
    const ended = async (): Promise<TaskEndedError | undefined> => {
      const d = await this.describeTask(taskId);
      if (d.status.name === 'RUNNING') return undefined;
      // The status the task recorded, unless it never got to (terminated, timed out).
      const recorded = d.typedSearchAttributes.get(FleetStatus) as TaskStatus | undefined;
      const status = recorded && TERMINAL_STATUSES.includes(recorded) ? recorded : closeStatus(d.status.name);
      return new TaskEndedError(taskId, status);
    };
    // The server takes a cancel request for a closed run without a word, so look first.
    const before = await ended();
    if (before) throw before;
    try {
      // A task that ends meanwhile keeps its own result: the request finds nothing left to cancel.
      await handle.cancel();
    } catch (err) {
      if ((err as Error)?.name !== 'WorkflowNotFoundError') throw err;
      throw (await ended()) ?? err;
    }
  }

  async list(filter: ListFilter = {}): Promise<TaskSummary[]> {
    const clauses = [`FleetKind = 'task'`];
    if (filter.status) clauses.push(`FleetStatus = ${visibilityString(filter.status)}`);
    if (filter.pool) clauses.push(`FleetPool = ${visibilityString(filter.pool)}`);
    if (filter.hostId) clauses.push(`FleetHostId = ${visibilityString(filter.hostId)}`);
    if (filter.deviceId) clauses.push(`FleetDeviceId = ${visibilityString(filter.deviceId)}`);
    const out: TaskSummary[] = [];
    for await (const wf of this.client.workflow.list({ query: clauses.join(' AND ') })) {
      const sa = wf.typedSearchAttributes;
      // A rejected run whose id was submitted again: the newer run stands for the task.
      if (sa.get(FleetStatus) === 'rejected' && (await this.superseded.superseded(wf.workflowId, wf.runId))) continue;
      out.push({
        taskId: wf.workflowId.replace(/^task\//, ''),
        status: (sa.get(FleetStatus) as TaskStatus) ?? 'queued',
        pool: sa.get(FleetPool),
        hostId: sa.get(FleetHostId),
        deviceId: sa.get(FleetDeviceId),
        attempt: sa.get(FleetAttempt),
        startedAt: wf.startTime,
        closedAt: wf.closeTime,
      });
      if (out.length >= (filter.limit ?? 1000)) break;
    }
    return out;
  }
}

/** A closed task run's status when its FleetStatus was never written (terminated, timed out). */
/**
 * A task run's input, from its first history event (no worker needed; the client's codecs decode
 * it). Throws for a workflow that has none (hand-started, or not a task).
 */
export async function readTaskInput(client: Client, workflowId: string, runId: string): Promise<TaskInput> {
  const first = await client.workflowService.getWorkflowExecutionHistory({
    namespace: client.options.namespace,
    execution: { workflowId, runId },
    maximumPageSize: 1,
  });
  const started = first.history?.events?.[0]?.workflowExecutionStartedEventAttributes;
  const input = await decodeFromPayloadsAtIndex<TaskInput>(
    client.workflow.options.loadedDataConverter,
    0,
    started?.input?.payloads,
  );
  if (!input?.taskId) throw new Error(`workflow ${workflowId} has no task input`);
  return input;
}

const isTaskResult = (r: unknown): r is TaskResult =>
  !!r && typeof r === 'object' && typeof (r as TaskResult).status === 'string';

/** The TaskResult a failed task workflow carries in its failure's details. */
function failureResult(err: WorkflowFailedError): TaskResult | undefined {
  const cause = err.cause;
  const details = cause instanceof ApplicationFailure ? cause.details : undefined;
  return isTaskResult(details?.[0]) ? details[0] : undefined;
}

function closeStatus(name: string): TaskStatus {
  return name === 'COMPLETED' ? 'done' : name === 'CANCELLED' ? 'cancelled' : 'failed';
}

const CLOSE_EVENTS = new Set<temporal.api.enums.v1.EventType>([
  temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
  temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
  temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
  temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
  temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
  temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
]);
