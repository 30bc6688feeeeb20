/** Workflow definitions: the JSON-file store, the admin-only API, and snapshotting into submitted tasks. */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { DefinitionConflictError, JsonFileDefinitionsStore } from '../../control-plane/rest/definitions/store';
import { eventually, uid } from '../helpers/fleet';
import { assertProblem, auth, call, startRestFleet, type RestFleet, type Who } from './helpers';

const steps = (...names: string[]) => names.map((name) => ({ name, command: [name, '--fast'] }));

describe('REST: workflow definitions store (JSON file)', () => {
  it('writes atomically (temp file + rename), serializes concurrent writes, survives a reload', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'fleet-store-')), 'nested');
    const path = join(dir, 'definitions.json');
    const store = new JsonFileDefinitionsStore(path);
    assert.deepEqual(await store.list(), []);
    let reads = 0;
    let reading = true;
    const reader = (async () => {
      while (reading) {
        try {
          JSON.parse(readFileSync(path, 'utf8'));
          reads++;
        } catch (err) {
          // Before the first write there is no file; a half-written file would be a SyntaxError.
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        }
        await new Promise((r) => setImmediate(r));
      }
    })();
    const results = await Promise.all(
      Array.from({ length: 25 }, (_, i) =>
        store.create({ name: `def-${String(i).padStart(2, '0')}`, steps: steps('a') }, 'ops'),
      ),
    );
    reading = false;
    await reader;
    assert.ok(results.every((r) => r.created));
    assert.ok(reads > 0);
    const reloaded = new JsonFileDefinitionsStore(path);
    assert.deepEqual(
      (await reloaded.list()).map((d) => d.name),
      Array.from({ length: 25 }, (_, i) => `def-${String(i).padStart(2, '0')}`),
    );
    assert.deepEqual(readdirSync(dir), ['definitions.json'], 'no temporary files left behind');

    const same = await store.create({ name: 'def-00', steps: steps('a') }, 'someone-else');
    assert.equal(same.created, false);
    assert.equal(same.definition.updatedBy, 'ops');
    await assert.rejects(store.create({ name: 'def-00', steps: steps('b') }, 'ops'), DefinitionConflictError);
    const replaced = await store.put({ name: 'def-00', steps: steps('b', 'c') }, 'ops2');
    assert.equal(replaced.created, false);
    assert.deepEqual(replaced.definition.steps, steps('b', 'c'));
    assert.equal(replaced.definition.updatedBy, 'ops2');
    assert.deepEqual((await reloaded.get('def-00'))?.steps, steps('b', 'c'));

    writeFileSync(path, '{"version": 1, "definitions": [{"name": 5}]}');
    await assert.rejects(reloaded.list(), /invalid/);
  });
});

describe('REST: workflow definitions API', () => {
  let rf: RestFleet;
  before(async () => {
    rf = await startRestFleet('rest-defs');
  });
  after(async () => {
    await rf?.stop();
  });
  const send = (who: Who, method: 'post' | 'put', path: string, body: object) =>
    call(rf.app, method, path)
      .set(...auth(who))
      .send(body);
  const get = (who: Who, path: string) =>
    request(rf.app)
      .get(path)
      .set(...auth(who));

  it('admin registers and replaces; everyone reads; identical repeat 200, different 409, invalid 400', async () => {
    const name = uid('smoke');
    const created = await send('admin', 'post', '/v1/workflow-definitions', { name, steps: steps('boot') });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.headers.location, `/v1/workflow-definitions/${name}`);
    assert.equal(created.body.updatedBy, 'ops');
    assert.equal((await send('admin', 'post', '/v1/workflow-definitions', { name, steps: steps('boot') })).status, 200);
    assertProblem(
      await send('admin', 'post', '/v1/workflow-definitions', { name, steps: steps('other') }),
      409,
      'conflict',
    );
    assertProblem(
      await send('alice', 'post', '/v1/workflow-definitions', { name: uid('x'), steps: steps('a') }),
      403,
      'forbidden',
    );
    for (const who of ['viewer', 'alice', 'admin'] as const) {
      const one = await get(who, `/v1/workflow-definitions/${name}`);
      assert.equal(one.status, 200);
      assert.deepEqual(one.body.steps, steps('boot'));
      assert.ok((await get(who, '/v1/workflow-definitions')).body.items.some((d: { name: string }) => d.name === name));
    }
    assertProblem(await get('viewer', `/v1/workflow-definitions/${uid('none')}`), 404, 'not-found');
    const put = await send('admin', 'put', `/v1/workflow-definitions/${name}`, { steps: steps('boot', 'check') });
    assert.equal(put.status, 200);
    assert.deepEqual(put.body.steps, steps('boot', 'check'));
    const fresh = await send('admin', 'put', `/v1/workflow-definitions/${uid('new')}`, { steps: steps('a') });
    assert.equal(fresh.status, 201);

    const bad = await send('admin', 'post', '/v1/workflow-definitions', {
      name: 'bad name',
      steps: [
        { name: '', command: 'rm -rf /' },
        { name: 'ok', command: [] },
      ],
    });
    assertProblem(bad, 400, 'validation');
    assert.deepEqual(bad.body.errors.map((e: { path: string }) => e.path).sort(), [
      'name',
      'steps.0.command',
      'steps.0.name',
      'steps.1.command',
    ]);
    assertProblem(
      await send('admin', 'post', '/v1/workflow-definitions', { name: uid('e'), steps: [] }),
      400,
      'validation',
    );
    assert.equal(
      (await get('admin', `/v1/workflow-definitions/${name}`)).body.steps.length,
      2,
      'refusals changed nothing',
    );
  });

  it("a task submitted by definition name snapshots the steps; later changes do not touch it; other names are hosts' own definitions", async () => {
    const name = uid('login');
    await send('admin', 'post', '/v1/workflow-definitions', { name, steps: steps('open', 'type') });
    const taskId = uid('bydef');
    const t = await send('alice', 'post', '/v1/tasks', { taskId, definition: name });
    assert.equal(t.status, 201, t.text);
    assert.deepEqual(t.body.work, { kind: 'workflow', definition: name, steps: steps('open', 'type') });
    assert.deepEqual(
      t.body.constraints.tags,
      ['inline-steps'],
      'its steps travel with it: hosts that take steps along',
    );
    assert.equal(
      (await send('admin', 'put', `/v1/workflow-definitions/${name}`, { steps: steps('changed') })).status,
      200,
    );
    const later = await get('alice', `/v1/tasks/${taskId}`);
    assert.deepEqual(later.body.work.steps, steps('open', 'type'), 'the task kept its snapshot');
    // A repeat by name is still the same request, even though the definition changed since.
    const repeat = await send('alice', 'post', '/v1/tasks', { taskId, definition: { name } });
    assert.equal(repeat.status, 200);
    assert.deepEqual(repeat.body.work.steps, steps('open', 'type'));

    const inline = await send('alice', 'post', '/v1/tasks', { definition: { name: 'adhoc', steps: steps('x') } });
    assert.equal(inline.status, 201);
    assert.deepEqual(inline.body.work, { kind: 'workflow', definition: 'adhoc', steps: steps('x') });

    // Not stored here: a host's own definition, run by name where a host has it (none does here,
    // so it waits, and says for what).
    const hostOwn = uid('nope');
    const byHost = await send('alice', 'post', '/v1/tasks', { taskId: uid('byhost'), definition: hostOwn });
    assert.equal(byHost.status, 201, byHost.text);
    assert.deepEqual(byHost.body.work, { kind: 'workflow', definition: hostOwn });
    assert.deepEqual(byHost.body.constraints.tags, [`definition:${hostOwn}`]);
    const waits = await eventually(async () => {
      const g = await get('alice', `/v1/tasks/${byHost.body.taskId}`);
      return g.body.queue?.waitingFor === 'device' ? g.body.queue : undefined;
    }, 'the explanation');
    assert.match(waits.reason, new RegExp(`definition:${hostOwn}.*no device in pool .* matches at all`));
    // Stored here since: the same request again is still the same task (the derived tags differ).
    await send('admin', 'post', '/v1/workflow-definitions', { name: hostOwn, steps: steps('late') });
    const again = await send('alice', 'post', '/v1/tasks', { taskId: byHost.body.taskId, definition: hostOwn });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.body.taskId, byHost.body.taskId);

    // A task submitted with its steps inline is not the same request as a repeat by name: not when
    // the name is a host's own definition, nor when it is stored with other steps; with the very
    // same steps stored it is the same work.
    const inlineId = uid('inline');
    const own = uid('own');
    const first = await send('alice', 'post', '/v1/tasks', {
      taskId: inlineId,
      definition: { name: own, steps: steps('x') },
    });
    assert.equal(first.status, 201, first.text);
    assertProblem(
      await send('alice', 'post', '/v1/tasks', { taskId: inlineId, definition: own }),
      409,
      'idempotency-conflict',
    );
    await send('admin', 'post', '/v1/workflow-definitions', { name: own, steps: steps('y') });
    assertProblem(
      await send('alice', 'post', '/v1/tasks', { taskId: inlineId, definition: { name: own } }),
      409,
      'idempotency-conflict',
    );
    await send('admin', 'put', `/v1/workflow-definitions/${own}`, { steps: steps('x') });
    const sameWork = await send('alice', 'post', '/v1/tasks', { taskId: inlineId, definition: own });
    assert.equal(sameWork.status, 200, sameWork.text);
    const sameInline = await send('alice', 'post', '/v1/tasks', {
      taskId: inlineId,
      definition: { name: own, steps: steps('x') },
    });
    assert.equal(sameInline.status, 200, sameInline.text);

    for (const id of [taskId, inline.body.taskId, byHost.body.taskId, inlineId]) {
      assert.equal((await send('alice', 'post', `/v1/tasks/${id}/cancel`, {})).status, 202);
    }
  });
});
