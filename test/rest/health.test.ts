/** Unauthenticated endpoints: liveness, readiness against the real dev server, the OpenAPI document, 404s. */
import assert from 'node:assert/strict';
import { Client, Connection } from '@temporalio/client';
import request from 'supertest';
import { FleetClient } from '../../control-plane/client';
import { parseControlPlaneConfig } from '../../control-plane/config';
import { createApp } from '../../control-plane/rest/app';
import { JsonFileDefinitionsStore } from '../../control-plane/rest/definitions/store';
import { testEnv } from '../setup';
import { API_TOKENS, assertProblem, auth, quietLog } from './helpers';

describe('REST: health, readiness, OpenAPI', () => {
  const config = parseControlPlaneConfig({});
  const definitions = new JsonFileDefinitionsStore('/nonexistent/never-written.json');
  const appFor = (client: Client) =>
    createApp({
      fleet: new FleetClient(client, config),
      client,
      config,
      tokens: API_TOKENS,
      definitions,
      options: { log: quietLog },
    });

  it('GET /healthz answers without a token; /readyz is 200 when Temporal answers', async () => {
    const app = appFor(testEnv().client);
    const h = await request(app).get('/healthz');
    assert.equal(h.status, 200);
    assert.deepEqual(h.body, { status: 'ok' });
    const r = await request(app).get('/readyz');
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { status: 'ready' });
  });

  it('GET /readyz is a 503 problem with Retry-After when Temporal is unreachable', async () => {
    const connection = Connection.lazy({ address: '127.0.0.1:1', connectTimeout: '500ms' });
    const app = appFor(new Client({ connection }));
    const t0 = Date.now();
    const r = await request(app).get('/readyz');
    assertProblem(r, 503, 'unavailable');
    assert.ok(r.headers['retry-after']);
    assert.ok(Date.now() - t0 < 5_000, 'readiness is bounded by its deadline');
    assert.equal((await request(app).get('/healthz')).status, 200, 'liveness does not depend on Temporal');
  });

  it('GET /openapi.json is generated from the zod schemas: every route, bodies, parameters, problems', async () => {
    const res = await request(appFor(testEnv().client)).get('/openapi.json');
    assert.equal(res.status, 200);
    const doc = res.body;
    assert.equal(doc.openapi, '3.1.0');
    for (const path of [
      '/v1/tasks',
      '/v1/tasks/{id}',
      '/v1/tasks/{id}/events',
      '/v1/tasks/{id}/cancel',
      '/v1/hosts',
      '/v1/hosts/{hostId}',
      '/v1/hosts/{hostId}/drain',
      '/v1/hosts/{hostId}/undrain',
      '/v1/hosts/{hostId}/devices/{deviceId}/drain',
      '/v1/hosts/{hostId}/devices/{deviceId}/undrain',
      '/v1/devices',
      '/v1/workflow-definitions',
      '/v1/workflow-definitions/{name}',
      '/healthz',
      '/readyz',
    ]) {
      assert.ok(doc.paths[path], `missing ${path}`);
    }
    const body = doc.components.schemas.SubmitTaskBody;
    assert.equal(body.additionalProperties, false);
    assert.ok(body.properties.goal && body.properties.definition && body.properties.constraints);
    assert.equal(body.properties.owner, undefined, 'the owner is never taken from the body');
    assert.equal(body.properties.priority.maximum, 1000);
    const list = doc.paths['/v1/tasks'].get;
    const limit = list.parameters.find((p: { name: string }) => p.name === 'limit');
    assert.deepEqual([limit.in, limit.schema.maximum, limit.required], ['query', 200, false]);
    const status = list.parameters.find((p: { name: string }) => p.name === 'status');
    assert.ok(status.schema.enum.includes('running'));
    const submit = doc.paths['/v1/tasks'].post;
    assert.ok(
      submit.parameters.some((p: { name: string; in: string }) => p.name === 'idempotency-key' && p.in === 'header'),
    );
    assert.equal(
      submit.responses['429'].content['application/problem+json'].schema.$ref,
      '#/components/schemas/Problem',
    );
    assert.match(submit.responses['409'].description, /problems\/idempotency-conflict/);
    assert.deepEqual(doc.paths['/v1/hosts/{hostId}/drain'].post['x-roles'], ['admin']);
    const task = doc.components.schemas.TaskResource;
    assert.ok(task.properties.queue && task.properties.attempts);
    assert.equal(JSON.stringify(task).includes('leaseId'), false);
    // The document is not run through the redacting replacer: a property named like a secret stays.
    const enroll = doc.components.schemas.EnrollHostBody;
    assert.ok(enroll.required.includes('keys'));
    assert.ok(enroll.properties.keys, 'EnrollHostBody keeps its required "keys"');
    assert.deepEqual(Object.keys(enroll.properties.keys.properties).sort(), ['box', 'signing']);
    // Every required property of every object schema is described (else the schema is unsatisfiable).
    const objects: { required?: string[]; properties?: Record<string, unknown> }[] = [];
    JSON.stringify(doc, (_k, v: unknown) => {
      if (v && typeof v === 'object' && Array.isArray((v as { required?: unknown }).required)) objects.push(v as never);
      return v;
    });
    for (const o of objects)
      for (const r of o.required ?? []) assert.ok(o.properties?.[r], `required ${r} not described`);
  });

  it('unknown routes are 404 problems; known routes still need a token', async () => {
    const app = appFor(testEnv().client);
    assertProblem(await request(app).get('/v2/nothing'), 404, 'not-found');
    assertProblem(
      await request(app)
        .get('/v1/nothing')
        .set(...auth('admin')),
      404,
      'not-found',
    );
    const r = await request(app).get('/v1/nothing');
    assertProblem(r, 401, 'unauthorized');
  });
});
