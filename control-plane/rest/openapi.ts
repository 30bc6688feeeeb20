/**
 * /openapi.json, generated from the same zod schemas the routes validate with (z.toJSONSchema), so
 * the document cannot drift from what the server accepts.
 */
import { z } from 'zod';
import type { Role } from './auth';
import {
  DefinitionListSchema,
  DefinitionNameParamsSchema,
  DefinitionStepsBodySchema,
  StoredDefinitionSchema,
  WorkflowDefinitionSchema,
} from './definitions/schemas';
import {
  DeviceListSchema,
  DeviceParamsSchema,
  DevicesQuerySchema,
  DrainResultSchema,
  RemoveResultSchema,
  EnrollHostBodySchema,
  EnrollResultSchema,
  HostListSchema,
  HostParamsSchema,
  HostResourceSchema,
  HostsQuerySchema,
} from './fleet/schemas';
import { HealthSchema } from './health/router';
import { Problems, ProblemSchema, problemType, type ProblemKind } from './problem';
import {
  ListTasksQuerySchema,
  SubmitHeadersSchema,
  SubmitTaskBodySchema,
  TaskIdParamsSchema,
  TaskListSchema,
  TaskResourceSchema,
} from './tasks/schemas';

type AnyObject = z.ZodObject<z.ZodRawShape>;

const components = {
  SubmitTaskBody: [SubmitTaskBodySchema, 'input'],
  TaskResource: [TaskResourceSchema, 'output'],
  TaskList: [TaskListSchema, 'output'],
  HostResource: [HostResourceSchema, 'output'],
  HostList: [HostListSchema, 'output'],
  DeviceList: [DeviceListSchema, 'output'],
  DrainResult: [DrainResultSchema, 'output'],
  RemoveResult: [RemoveResultSchema, 'output'],
  EnrollHostBody: [EnrollHostBodySchema, 'input'],
  EnrollResult: [EnrollResultSchema, 'output'],
  WorkflowDefinition: [WorkflowDefinitionSchema, 'input'],
  DefinitionStepsBody: [DefinitionStepsBodySchema, 'input'],
  StoredDefinition: [StoredDefinitionSchema, 'output'],
  DefinitionList: [DefinitionListSchema, 'output'],
  Health: [HealthSchema, 'output'],
  Problem: [ProblemSchema, 'output'],
} as const satisfies Record<string, readonly [z.ZodType, 'input' | 'output']>;
type ComponentName = keyof typeof components;

interface Operation {
  method: 'get' | 'post' | 'put' | 'delete';
  path: string;
  summary: string;
  /** Who may call it; undefined: no authentication. */
  roles?: Role[];
  params?: AnyObject;
  query?: AnyObject;
  headers?: AnyObject;
  body?: ComponentName;
  ok: Array<[status: number, description: string, schema?: ComponentName, contentType?: string]>;
  errors: ProblemKind[];
}

const ALL: Role[] = ['admin', 'submitter', 'viewer'];
const WRITE: Role[] = ['admin', 'submitter'];
const AUTH_ERRORS: ProblemKind[] = ['unauthorized', 'forbidden'];

const operations: Operation[] = [
  {
    method: 'post',
    path: '/v1/tasks',
    summary: 'Submit a task (idempotent on taskId or the Idempotency-Key header); owner = the token name',
    roles: WRITE,
    headers: SubmitHeadersSchema,
    body: 'SubmitTaskBody',
    ok: [
      [201, 'admitted (status queued)', 'TaskResource'],
      [200, 'a repeat: the task submitted earlier with this id', 'TaskResource'],
      [
        202,
        'started and kept, but its pool did not admit it within the admission timeout (no control plane running?): follow it by GET',
        'TaskResource',
      ],
    ],
    errors: ['validation', 'taskRejected', ...AUTH_ERRORS, 'idempotencyConflict', 'payloadTooLarge', 'queueFull'],
  },
  {
    method: 'get',
    path: '/v1/tasks',
    summary: 'List tasks (a submitter sees only its own); paged with nextCursor',
    roles: ALL,
    query: ListTasksQuerySchema,
    ok: [[200, 'one page', 'TaskList']],
    errors: ['validation', ...AUTH_ERRORS],
  },
  {
    method: 'get',
    path: '/v1/tasks/{id}',
    summary: 'A task: status, attempts, current host/device, progress, queue position and why it waits, result',
    roles: ALL,
    params: TaskIdParamsSchema,
    ok: [[200, 'the task', 'TaskResource']],
    errors: ['validation', ...AUTH_ERRORS, 'notFound'],
  },
  {
    method: 'get',
    path: '/v1/tasks/{id}/events',
    summary: 'Server-sent events: `task` on every change of the view, `end` after the terminal status',
    roles: ALL,
    params: TaskIdParamsSchema,
    ok: [[200, 'an event stream; each `task` event carries a TaskResource', undefined, 'text/event-stream']],
    errors: ['validation', ...AUTH_ERRORS, 'notFound'],
  },
  {
    method: 'post',
    path: '/v1/tasks/{id}/cancel',
    summary: 'Cancel a task that has not ended',
    roles: WRITE,
    params: TaskIdParamsSchema,
    ok: [[202, 'cancellation requested', 'TaskResource']],
    errors: ['validation', ...AUTH_ERRORS, 'notFound', 'taskEnded'],
  },
  {
    method: 'get',
    path: '/v1/hosts',
    summary: 'Hosts with liveness, drain flags and their devices',
    roles: ALL,
    query: HostsQuerySchema,
    ok: [[200, 'hosts', 'HostList']],
    errors: ['validation', ...AUTH_ERRORS],
  },
  {
    method: 'get',
    path: '/v1/hosts/{hostId}',
    summary: 'One host',
    roles: ALL,
    params: HostParamsSchema,
    ok: [[200, 'the host', 'HostResource']],
    errors: ['validation', ...AUTH_ERRORS, 'notFound'],
  },
  {
    method: 'delete',
    path: '/v1/hosts/{hostId}',
    summary:
      'Remove a host that is offline (admin): its devices leave the pools, their workflows end once free, and so does the host workflow; enrolling the id again starts afresh',
    roles: ['admin'],
    params: HostParamsSchema,
    ok: [[202, 'the host workflow is removing the host', 'RemoveResult']],
    errors: ['validation', ...AUTH_ERRORS, 'notFound', 'conflict'],
  },
  {
    method: 'put',
    path: '/v1/hosts/{hostId}/keys',
    summary: 'Enrol a host (or rotate its keys): its public keys only (admin)',
    roles: ['admin'],
    params: HostParamsSchema,
    body: 'EnrollHostBody',
    ok: [
      [201, 'enrolled', 'EnrollResult'],
      [200, 'already enrolled: the same keys again (nothing changed), or new keys with rotate: true', 'EnrollResult'],
    ],
    errors: ['validation', ...AUTH_ERRORS, 'conflict'],
  },
  ...(['drain', 'undrain'] as const).flatMap((action): Operation[] => [
    {
      method: 'post',
      path: `/v1/hosts/{hostId}/${action}`,
      summary: `${action === 'drain' ? 'Drain' : 'Undrain'} a host (admin)`,
      roles: ['admin'],
      params: HostParamsSchema,
      ok: [[202, 'signalled to the host workflow', 'DrainResult']],
      errors: ['validation', ...AUTH_ERRORS, 'notFound'],
    },
    {
      method: 'post',
      path: `/v1/hosts/{hostId}/devices/{deviceId}/${action}`,
      summary: `${action === 'drain' ? 'Drain' : 'Undrain'} one device (admin)`,
      roles: ['admin'],
      params: DeviceParamsSchema,
      ok: [[202, 'signalled to the host workflow', 'DrainResult']],
      errors: ['validation', ...AUTH_ERRORS, 'notFound'],
    },
  ]),
  {
    method: 'get',
    path: '/v1/devices',
    summary: 'Devices: pool, state, health, drain, reservation',
    roles: ALL,
    query: DevicesQuerySchema,
    ok: [[200, 'devices', 'DeviceList']],
    errors: ['validation', ...AUTH_ERRORS],
  },
  {
    method: 'get',
    path: '/v1/workflow-definitions',
    summary: 'Registered workflow definitions',
    roles: ALL,
    ok: [[200, 'definitions', 'DefinitionList']],
    errors: AUTH_ERRORS,
  },
  {
    method: 'post',
    path: '/v1/workflow-definitions',
    summary: 'Register a workflow definition (admin); an identical repeat is a no-op',
    roles: ['admin'],
    body: 'WorkflowDefinition',
    ok: [
      [201, 'created', 'StoredDefinition'],
      [200, 'identical definition already registered', 'StoredDefinition'],
    ],
    errors: ['validation', ...AUTH_ERRORS, 'conflict', 'payloadTooLarge'],
  },
  {
    method: 'get',
    path: '/v1/workflow-definitions/{name}',
    summary: 'One workflow definition',
    roles: ALL,
    params: DefinitionNameParamsSchema,
    ok: [[200, 'the definition', 'StoredDefinition']],
    errors: ['validation', ...AUTH_ERRORS, 'notFound'],
  },
  {
    method: 'put',
    path: '/v1/workflow-definitions/{name}',
    summary: 'Create or replace a workflow definition (admin); tasks already submitted keep their steps',
    roles: ['admin'],
    params: DefinitionNameParamsSchema,
    body: 'DefinitionStepsBody',
    ok: [
      [201, 'created', 'StoredDefinition'],
      [200, 'replaced (or unchanged)', 'StoredDefinition'],
    ],
    errors: ['validation', ...AUTH_ERRORS, 'payloadTooLarge'],
  },
  {
    method: 'get',
    path: '/healthz',
    summary: 'The process is up',
    ok: [[200, 'up', 'Health']],
    errors: [],
  },
  {
    method: 'get',
    path: '/readyz',
    summary: 'Temporal is reachable',
    ok: [[200, 'ready', 'Health']],
    errors: ['unavailable'],
  },
];

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const { $schema: _ignored, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  return rest;
}

function parameters(where: 'path' | 'query' | 'header', obj: AnyObject | undefined) {
  return Object.entries(obj?.shape ?? {}).map(([name, s]) => ({
    name,
    in: where,
    required: where === 'path' || !(s as z.ZodType).safeParse(undefined).success,
    schema: jsonSchema(s as z.ZodType, 'input'),
  }));
}

const ref = (name: ComponentName) => ({ $ref: `#/components/schemas/${name}` });

export function buildOpenApiDocument(): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of operations) {
    const responses: Record<string, unknown> = {};
    for (const [status, description, schema, contentType] of op.ok) {
      responses[String(status)] = {
        description,
        content: { [contentType ?? 'application/json']: schema ? { schema: ref(schema) } : {} },
      };
    }
    // Every authenticated route but the definitions' (a file) asks Temporal, and answers 503 when it
    // does not answer (or, for drains and removals, when no control-plane worker does); a route
    // with a body refuses one that is not JSON.
    const errors: ProblemKind[] = [
      ...op.errors,
      ...(op.body ? (['unsupportedMediaType'] as const) : []),
      ...(op.roles && !op.path.startsWith('/v1/workflow-definitions') && !op.errors.includes('unavailable')
        ? (['unavailable'] as const)
        : []),
    ];
    for (const kind of errors) {
      const status = String(Problems[kind].status);
      const existing = responses[status] as { description: string } | undefined;
      const description = `${Problems[kind].title} (${problemType(kind)})`;
      responses[status] = {
        description: existing ? `${existing.description}; ${description}` : description,
        content: { 'application/problem+json': { schema: ref('Problem') } },
      };
    }
    paths[op.path] ??= {};
    paths[op.path][op.method] = {
      summary: op.summary,
      ...(op.roles ? { security: [{ bearer: [] }], 'x-roles': op.roles } : { security: [] }),
      parameters: [
        ...parameters('path', op.params),
        ...parameters('query', op.query),
        ...parameters('header', op.headers),
      ],
      ...(op.body
        ? { requestBody: { required: true, content: { 'application/json': { schema: ref(op.body) } } } }
        : {}),
      responses,
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Device-fleet task orchestrator',
      version: '1',
      description:
        'REST facade over the Temporal-based fleet. Errors are RFC 9457 problem+json with stable `type` URIs. ' +
        'Bearer API tokens with roles admin, submitter (its own tasks) and viewer (read-only).',
    },
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      schemas: Object.fromEntries(
        Object.entries(components).map(([name, [schema, io]]) => [name, jsonSchema(schema, io)]),
      ),
    },
  };
}
