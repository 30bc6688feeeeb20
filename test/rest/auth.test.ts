/** Bearer tokens and roles: 401 for a missing or unknown token, 403 for a role that may not act. */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { FleetClient } from '../../control-plane/client';
import { parseControlPlaneConfig } from '../../control-plane/config';
import { createApp } from '../../control-plane/rest/app';
import {
  loadApiTokens,
  parseApiTokens,
  sha256Hex,
  TokensConfigError,
  watchedApiTokens,
} from '../../control-plane/rest/auth';
import { JsonFileDefinitionsStore } from '../../control-plane/rest/definitions/store';
import { testEnv } from '../setup';
import { API_TOKENS, assertProblem, auth, call, quietLog, TOKEN } from './helpers';

describe('REST: authentication and roles', () => {
  const appFor = () => {
    const config = parseControlPlaneConfig({});
    const { client } = testEnv();
    return createApp({
      fleet: new FleetClient(client, config),
      client,
      config,
      tokens: API_TOKENS,
      definitions: new JsonFileDefinitionsStore(join(mkdtempSync(join(tmpdir(), 'fleet-auth-')), 'd.json')),
      options: { log: quietLog },
    });
  };

  it('401 without a token, with another scheme, or with an unknown token; WWW-Authenticate: Bearer', async () => {
    const app = appFor();
    for (const header of [undefined, `Basic ${Buffer.from('a:b').toString('base64')}`, 'Bearer', 'Bearer nope']) {
      const req = request(app).get('/v1/tasks');
      const res = await (header ? req.set('Authorization', header) : req);
      assertProblem(res, 401, 'unauthorized');
      assert.match(String(res.headers['www-authenticate']), /^Bearer/);
    }
    // The configured hash itself is not a token.
    const res = await request(app)
      .get('/v1/devices')
      .set('Authorization', `Bearer ${sha256Hex(TOKEN.admin)}`);
    assertProblem(res, 401, 'unauthorized');
    // A 401 never reaches the body parser or the handler: a huge body is still just a 401.
    const big = await request(app)
      .post('/v1/tasks')
      .set('Content-Type', 'application/json')
      .send(JSON.stringify({ goal: 'x'.repeat(400_000) }));
    assertProblem(big, 401, 'unauthorized');
  });

  it('403 when the role may not: viewers only read; drain, undrain and definitions are admin only', async () => {
    const app = appFor();
    const forbidden: Array<[ReturnType<typeof auth>, 'get' | 'post' | 'put', string, object?]> = [
      [auth('viewer'), 'post', '/v1/tasks', { goal: 'x' }],
      [auth('viewer'), 'post', '/v1/tasks/t-1/cancel'],
      [auth('viewer'), 'post', '/v1/hosts/h-1/drain'],
      [auth('alice'), 'post', '/v1/hosts/h-1/drain'],
      [auth('alice'), 'post', '/v1/hosts/h-1/undrain'],
      [auth('alice'), 'post', '/v1/hosts/h-1/devices/d-1/drain'],
      [auth('bob'), 'post', '/v1/hosts/h-1/devices/d-1/undrain'],
      [auth('alice'), 'post', '/v1/workflow-definitions', { name: 'x', steps: [{ name: 's', command: ['c'] }] }],
      [auth('viewer'), 'put', '/v1/workflow-definitions/x', { steps: [{ name: 's', command: ['c'] }] }],
    ];
    for (const [header, method, path, body] of forbidden) {
      const res = await call(app, method, path)
        .set(...header)
        .send(body);
      assertProblem(res, 403, 'forbidden');
    }
    // Reading is fine for every role.
    for (const who of ['viewer', 'alice', 'admin'] as const) {
      const res = await request(app)
        .get('/v1/workflow-definitions')
        .set(...auth(who));
      assert.equal(res.status, 200);
      assert.deepEqual(res.body, { items: [] });
    }
  });

  it('tokens config: sha256 hex only, known roles, no duplicates; loaded from the FLEET_API_TOKENS file', () => {
    const ok = parseApiTokens([{ name: 'ci', role: 'submitter', tokenSha256: sha256Hex('s3cret').toUpperCase() }]);
    assert.equal(ok[0].tokenSha256, sha256Hex('s3cret'), 'stored lower-case');
    assert.throws(
      () => parseApiTokens([{ name: 'x', role: 'root', tokenSha256: 'abc' }]),
      (err: unknown) =>
        err instanceof TokensConfigError && /0\.role/.test(err.message) && /0\.tokenSha256/.test(err.message),
    );
    const h = sha256Hex('same');
    assert.throws(
      () =>
        parseApiTokens({
          tokens: [
            { name: 'a', role: 'admin', tokenSha256: h },
            { name: 'b', role: 'viewer', tokenSha256: h },
          ],
        }),
      /duplicate token/,
    );
    assert.throws(() => parseApiTokens([{ name: 'p', role: 'admin', token: 'plain' }]), TokensConfigError);
    assert.throws(() => loadApiTokens(undefined), /FLEET_API_TOKENS is not set/);
    const dir = mkdtempSync(join(tmpdir(), 'fleet-tokens-'));
    writeFileSync(join(dir, 't.json'), JSON.stringify({ tokens: [{ name: 'ops', role: 'admin', tokenSha256: h }] }));
    assert.deepEqual(loadApiTokens(join(dir, 't.json')), [{ name: 'ops', role: 'admin', tokenSha256: h }]);
    writeFileSync(join(dir, 'bad.json'), '{ not json');
    assert.throws(() => loadApiTokens(join(dir, 'bad.json')), /cannot read FLEET_API_TOKENS/);
  });

  it('an edited tokens file takes effect without a restart; one that no longer parses keeps the tokens it had', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fleet-tokens-'));
    const file = join(dir, 'tokens.json');
    const entry = (name: string, token: string) => ({ name, role: 'submitter', tokenSha256: sha256Hex(token) });
    writeFileSync(file, JSON.stringify([entry('ops', 'fleet_ops')]));
    const errors: string[] = [];
    const source = watchedApiTokens(file, (e) => errors.push(e.message));
    const config = parseControlPlaneConfig({});
    const { client } = testEnv();
    const app = createApp({
      fleet: new FleetClient(client, config),
      client,
      config,
      tokens: source,
      definitions: new JsonFileDefinitionsStore(join(dir, 'd.json')),
      options: { log: quietLog },
    });
    const as = (token: string) => request(app).get('/v1/workflow-definitions').set('Authorization', `Bearer ${token}`);
    assert.equal((await as('fleet_ops')).status, 200);
    assertProblem(await as('fleet_new'), 401, 'unauthorized');
    writeFileSync(file, JSON.stringify([entry('ops', 'fleet_ops'), entry('ci', 'fleet_new')]));
    await new Promise((r) => setTimeout(r, 1_100));
    assert.equal((await as('fleet_new')).status, 200, 'the new token works');
    writeFileSync(file, '[{ "name": "half');
    await new Promise((r) => setTimeout(r, 1_100));
    assert.equal((await as('fleet_new')).status, 200, 'a broken edit keeps the tokens');
    assert.equal(errors.length, 1);
    assert.match(errors[0], /cannot read FLEET_API_TOKENS/);
  });
});
