import { Router } from 'express';
import { principalOf, requireRole } from '../auth';
import type { RestDeps } from '../context';
import { HttpProblem } from '../problem';
import { parsed, validate } from '../validate';
import { streamTaskEvents } from './events';
import { TaskLister } from './listing';
import { ListTasksQuerySchema, SubmitHeadersSchema, SubmitTaskBodySchema, TaskIdParamsSchema } from './schemas';
import { cancelTask, getTaskFor, submitTask, taskResource } from './service';

const Submit = { headers: SubmitHeadersSchema, body: SubmitTaskBodySchema };
const ById = { params: TaskIdParamsSchema };
const List = { query: ListTasksQuerySchema };

const location = (taskId: string) => `/v1/tasks/${encodeURIComponent(taskId)}`;

export function tasksRouter(deps: RestDeps): Router {
  const r = Router();
  const lister = new TaskLister(deps.client, deps.options?.cursorKey);

  r.post('/', requireRole('admin', 'submitter'), validate(Submit), async (_req, res) => {
    const { headers, body } = parsed(res, Submit);
    const { view, created, pending } = await submitTask(deps, principalOf(res), body, headers['idempotency-key']);
    res.status(pending ? 202 : created ? 201 : 200).location(location(view.taskId));
    if (!created) res.setHeader('Idempotent-Replayed', 'true');
    res.json(await taskResource(deps, view));
  });

  r.get('/', validate(List), async (_req, res) => {
    const { query } = parsed(res, List);
    const p = principalOf(res);
    let owner = query.owner;
    if (p.role === 'submitter') {
      if (owner !== undefined && owner !== p.name) {
        throw new HttpProblem('forbidden', 'a submitter lists only its own tasks');
      }
      owner = p.name;
    }
    const { status, hostId, deviceId, pool } = query;
    res.json(await lister.list({ status, hostId, deviceId, pool, owner }, query.limit, query.cursor));
  });

  r.get('/:id', validate(ById), async (_req, res) => {
    const { params } = parsed(res, ById);
    res.json(await taskResource(deps, await getTaskFor(deps, principalOf(res), params.id)));
  });

  r.get('/:id/events', validate(ById), async (req, res) => {
    const { params } = parsed(res, ById);
    await streamTaskEvents(deps, req, res, params.id, () => getTaskFor(deps, principalOf(res), params.id));
  });

  r.post('/:id/cancel', requireRole('admin', 'submitter'), validate(ById), async (_req, res) => {
    const { params } = parsed(res, ById);
    const view = await cancelTask(deps, principalOf(res), params.id);
    res.status(202).json(await taskResource(deps, view));
  });

  return r;
}
