import { Router } from 'express';
import { principalOf, requireRole } from '../auth';
import type { RestDeps } from '../context';
import { HttpProblem } from '../problem';
import { parsed, validate } from '../validate';
import {
  DefinitionNameParamsSchema,
  DefinitionStepsBodySchema,
  WorkflowDefinitionSchema,
  type DefinitionList,
} from './schemas';
import { DefinitionConflictError } from './store';

const Get = { params: DefinitionNameParamsSchema };
const Create = { body: WorkflowDefinitionSchema };
const Replace = { params: DefinitionNameParamsSchema, body: DefinitionStepsBodySchema };

export function definitionsRouter({ definitions }: RestDeps): Router {
  const r = Router();

  r.get('/', async (_req, res) => {
    res.json({ items: await definitions.list() } satisfies DefinitionList);
  });

  r.get('/:name', validate(Get), async (_req, res) => {
    const { params } = parsed(res, Get);
    const def = await definitions.get(params.name);
    if (!def) throw new HttpProblem('notFound', `workflow definition "${params.name}" not found`);
    res.json(def);
  });

  r.post('/', requireRole('admin'), validate(Create), async (_req, res) => {
    const { body } = parsed(res, Create);
    try {
      const { definition, created } = await definitions.create(body, principalOf(res).name);
      res.status(created ? 201 : 200).location(`/v1/workflow-definitions/${encodeURIComponent(definition.name)}`);
      res.json(definition);
    } catch (err) {
      if (err instanceof DefinitionConflictError) {
        throw new HttpProblem(
          'conflict',
          `${err.message}; use PUT /v1/workflow-definitions/${body.name} to replace it`,
        );
      }
      throw err;
    }
  });

  r.put('/:name', requireRole('admin'), validate(Replace), async (_req, res) => {
    const { params, body } = parsed(res, Replace);
    const { definition, created } = await definitions.put(
      { name: params.name, steps: body.steps },
      principalOf(res).name,
    );
    res.status(created ? 201 : 200).json(definition);
  });

  return r;
}
