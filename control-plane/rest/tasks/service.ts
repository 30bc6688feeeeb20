/**
 * Task operations of the REST facade on top of FleetClient: idempotent submission (client task id
 * or Idempotency-Key), definition resolution, ownership, and the queue explanation of GET.
 */
import type { Client } from '@temporalio/client';
import type { SchedulerView } from '../../../workflows/messages';
import { AdmissionPendingError, LIVE_VIEW_TIMEOUT_MS, TaskEndedError, type SubmitRequest } from '../../client';
import type { ControlPlaneConfig } from '../../config';
import type { TaskPolicy, TaskView } from '../../../workflows/types';
import { assertMayAccessTask, type Principal } from '../auth';
import type { RestDeps } from '../context';
import { HttpProblem, invalid } from '../problem';
import { schedulerState } from '../temporal';
import { presentTask } from './present';
import { explainWait } from './queue';
import { isTerminal, type PolicyOverride, type SubmitTaskBody, type TaskResource } from './schemas';

/** The full policy: the client's partial schema then has nothing left to fill with its own defaults. */
export function mergePolicy(defaults: ControlPlaneConfig['taskDefaults'], o: PolicyOverride): TaskPolicy {
  const pick = <T>(v: T | undefined, d: T): T => (v === undefined ? d : v);
  /** A setting without a default: the request's, else taskDefaults', else left out. */
  const optional = <K extends 'maxQueueWaitMs' | 'reservationGraceMs'>(k: K) => {
    const v = o[k] ?? defaults[k];
    return v === undefined ? {} : { [k]: v };
  };
  return {
    maxAttempts: pick(o.maxAttempts, defaults.maxAttempts),
    maxDispatchFailures: pick(o.maxDispatchFailures, defaults.maxDispatchFailures),
    backoff: {
      initialMs: pick(o.backoff?.initialMs, defaults.backoff.initialMs),
      multiplier: pick(o.backoff?.multiplier, defaults.backoff.multiplier),
      maxMs: pick(o.backoff?.maxMs, defaults.backoff.maxMs),
    },
    ackTimeoutMs: pick(o.ackTimeoutMs, defaults.ackTimeoutMs),
    leaseTimeoutMs: pick(o.leaseTimeoutMs, defaults.leaseTimeoutMs),
    executionTimeoutMs: pick(o.executionTimeoutMs, defaults.executionTimeoutMs),
    ...optional('maxQueueWaitMs'),
    ...optional('reservationGraceMs'),
  };
}

/** The live view, or the recorded one when no control-plane worker answers (FleetClient.find). */
export function findTask(deps: RestDeps, taskId: string): Promise<TaskView | undefined> {
  return deps.fleet.find(taskId, { liveTimeoutMs: deps.options?.liveViewTimeoutMs ?? LIVE_VIEW_TIMEOUT_MS });
}

export async function getTaskFor(deps: RestDeps, p: Principal, taskId: string): Promise<TaskView> {
  const view = await findTask(deps, taskId);
  if (!view) throw new HttpProblem('notFound', `task ${taskId} not found`);
  assertMayAccessTask(p, view.owner, taskId);
  return view;
}

/**
 * GETs of queued tasks share one scheduler query per pool for up to a second. The answer carries
 * the whole queue (about 1.3 MB at 7,000 queued tasks, measured by bench P5), so a dashboard polling
 * many queued tasks would otherwise have the scheduler's worker serialize it once per task.
 */
const SCHEDULER_VIEW_TTL_MS = 1_000;
const schedulerViews = new WeakMap<Client, Map<string, { at: number; view: Promise<SchedulerView | undefined> }>>();

function sharedSchedulerState(client: Client, pool: string, fresh = false): Promise<SchedulerView | undefined> {
  let byPool = schedulerViews.get(client);
  if (!byPool) schedulerViews.set(client, (byPool = new Map()));
  const now = Date.now();
  const hit = byPool.get(pool);
  if (hit && !fresh && now - hit.at < SCHEDULER_VIEW_TTL_MS) return hit.view;
  const view = schedulerState(client, pool).catch(() => {
    byPool.delete(pool); // never keep a failure
    return undefined;
  });
  byPool.set(pool, { at: now, view });
  return view;
}

/** The task as the API shows it; a queued task also says where it stands in the queue and why. */
export async function taskResource(deps: RestDeps, view: TaskView): Promise<TaskResource> {
  // Without a worker the scheduler cannot say where the task stands either.
  if (view.status !== 'queued' || 'incomplete' in view) return presentTask(view);
  let s = await sharedSchedulerState(deps.client, view.pool);
  // A task newer than the shared answer (just admitted) must not be explained from it.
  if (s && !s.queue.some((q) => q.taskId === view.taskId)) s = await sharedSchedulerState(deps.client, view.pool, true);
  return presentTask(view, explainWait(view, s, Date.now()));
}

export interface Submitted {
  view: TaskView;
  /** false: an earlier submission with this id is returned. */
  created: boolean;
  /** Started, but the pool did not admit it within the admission timeout (202). */
  pending?: boolean;
}

const DEFAULT_ADMISSION_TIMEOUT_MS = 30_000;

export async function submitTask(
  deps: RestDeps,
  p: Principal,
  body: SubmitTaskBody,
  idempotencyKey: string | undefined,
): Promise<Submitted> {
  if (idempotencyKey !== undefined && body.taskId !== undefined && idempotencyKey !== body.taskId) {
    throw invalid([
      {
        in: 'header',
        path: 'idempotency-key',
        message: 'differs from the body\'s "taskId"; send one or make them equal',
      },
    ]);
  }
  const taskId = body.taskId ?? idempotencyKey;

  let definition: SubmitRequest['definition'];
  let byName = false;
  if (body.definition !== undefined) {
    const ref = typeof body.definition === 'string' ? { name: body.definition } : body.definition;
    if (ref.steps) definition = { name: ref.name, steps: ref.steps };
    else {
      // A definition stored here travels with the task (a snapshot of its steps: it runs on hosts
      // that take steps along). Any other name is a host's own definition, run by name on a host
      // that has it; the task waits for such a host like for any other constraint.
      const stored = await deps.definitions.get(ref.name);
      definition = stored ? { name: stored.name, steps: stored.steps } : ref.name;
      byName = true;
    }
  }

  const request: SubmitRequest = {
    taskId,
    pool: body.pool,
    goal: body.goal,
    definition,
    constraints: body.constraints,
    priority: body.priority,
    owner: p.name,
    policy: body.policy ? mergePolicy(deps.config.taskDefaults, body.policy) : undefined,
  };
  // Validates everything (ValidationError: 400) before anything reaches Temporal.
  const input = deps.fleet.buildInput(request);
  // By name (a stored definition's steps were snapshotted from a store that may have changed since)
  // only against a task itself submitted by name: FleetClient.requestDifferences.
  const same = async (v: TaskView): Promise<boolean> =>
    (await deps.fleet.requestDifferences(v, input, byName)).length === 0;
  const conflict = () =>
    new HttpProblem('idempotencyConflict', `task id ${input.taskId} was already used for a different request`);

  if (taskId !== undefined) {
    const existing = await findTask(deps, taskId);
    if (existing && existing.status !== 'rejected') {
      if (!(await same(existing))) throw conflict();
      return { view: existing, created: false };
    }
  }
  let view: TaskView;
  try {
    view = await deps.fleet.submit(
      { ...request, taskId: input.taskId },
      {
        admissionTimeoutMs: deps.options?.admissionTimeoutMs ?? DEFAULT_ADMISSION_TIMEOUT_MS,
        definitionByName: byName,
      },
    );
  } catch (err) {
    if (!(err instanceof AdmissionPendingError)) throw err;
    // Started and kept, not answered yet: 202, and the caller follows it by GET (or submits again).
    // As recorded: the pool did not answer, so a live view would most likely wait in vain too.
    // USE_EXISTING may have attached this submit to a concurrent one's run: the same check as below.
    const started = await deps.fleet.recorded(input.taskId);
    if (!(await same(started))) throw conflict();
    return { view: started, created: true, pending: true };
  }
  // Two first submissions racing: the loser attached to the winner's task.
  if (!(await same(view))) throw conflict();
  return { view, created: true };
}

export async function cancelTask(deps: RestDeps, p: Principal, taskId: string): Promise<TaskView> {
  const before = await getTaskFor(deps, p, taskId); // 404 / 403 first
  try {
    await deps.fleet.cancel(taskId);
  } catch (err) {
    if (err instanceof TaskEndedError)
      throw new HttpProblem('taskEnded', `task ${taskId} already ended with status ${err.status}: nothing to cancel`);
    throw err;
  }
  // The request is recorded on the server; the task may not have taken it in yet (nor, with no
  // control-plane worker running, until one runs again).
  const view = 'incomplete' in before ? await deps.fleet.recorded(taskId) : ((await findTask(deps, taskId)) ?? before);
  return isTerminal(view.status) ? view : { ...view, cancelRequested: true };
}
