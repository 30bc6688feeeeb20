/**
 * /v1/tasks against a real control plane and an in-process simulated host: idempotent submission,
 * queue position and why a task waits, cancel, ownership, listing, server-sent events, and bad
 * input that changes nothing.
 */
import assert from 'node:assert/strict';
import { request as httpRequest, type ClientRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import request from 'supertest';
import { EventEmitter } from 'node:events';
import type { Request, Response } from 'express';
import { FleetClient } from '../../control-plane/client';
import { openEventStreams, streamTaskEvents } from '../../control-plane/rest/tasks/events';
import type { TaskView } from '../../workflows/types';
import { FleetStatus } from '../../workflows/search-attributes';
import { eventually, uid } from '../helpers/fleet';
import {
  assertNoSecrets,
  assertProblem,
  auth,
  callAs,
  parseSse,
  startRestFleet,
  textParser,
  type RestFleet,
  type Who,
} from './helpers';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A stream opened by hand (node:http), collecting its text; resolves `firstTask` on the first task event. */
const openStream = (server: Server, taskId: string) => {
  const { port } = server.address() as AddressInfo;
  let text = '';
  let firstTask!: () => void;
  const gotTask = new Promise<void>((r) => (firstTask = r));
  let ended!: (t: string) => void;
  const done = new Promise<string>((r) => (ended = r));
  const req = httpRequest(
    { port, path: `/v1/tasks/${taskId}/events`, headers: { Authorization: auth('alice')[1] } },
    (res) => {
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
        if (text.includes('event: task')) firstTask();
      });
      res.on('end', () => ended(text));
    },
  );
  req.on('error', () => undefined);
  req.end();
  return { req, gotTask, done, text: () => text };
};

describe('REST: tasks', () => {
  let rf: RestFleet;
  before(async () => {
    rf = await startRestFleet('rest-tasks');
    await rf.f.addHost('h1', [{ deviceId: 'cam-1', driverType: 'android', tags: ['camera'] }]);
    await eventually(async () => ((await rf.f.scheduler()).devices.length === 1 ? true : undefined), 'device known');
  });
  after(async () => {
    await rf?.stop();
  });

  const post = (who: Who, body: unknown) =>
    request(rf.app)
      .post('/v1/tasks')
      .set(...auth(who))
      .send(body as object);
  const get = (who: Who, path: string) =>
    request(rf.app)
      .get(path)
      .set(...auth(who));
  const cancel = (who: Who, taskId: string) =>
    request(rf.app)
      .post(`/v1/tasks/${taskId}/cancel`)
      .set(...auth(who));
  const untilStatus = (taskId: string, status: string) =>
    eventually(async () => {
      const r = await get('admin', `/v1/tasks/${taskId}`);
      return r.body.status === status ? r : undefined;
    }, `task ${taskId} ${status}`);
  const leaseIds = async (taskId: string) =>
    ((await rf.f.fleet.get(taskId)) as TaskView).attempts.map((a) => a.leaseId).filter(Boolean);

  it('a client task id or an Idempotency-Key makes submission idempotent; reuse with another body is 409', async () => {
    const taskId = uid('idem');
    const body = { taskId, goal: 'needs an iphone', constraints: { driverType: 'ios' } };
    const first = await post('alice', body);
    assert.equal(first.status, 201, first.text);
    assert.equal(first.headers.location, `/v1/tasks/${taskId}`);
    assert.equal(first.body.taskId, taskId);
    assert.equal(first.body.owner, 'alice');
    assert.equal(first.body.status, 'queued');
    assert.equal(first.body.pool, rf.f.pool);
    const again = await post('alice', body);
    assert.equal(again.status, 200);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.equal(again.body.taskId, taskId);
    assert.equal(again.body.submittedAt, first.body.submittedAt);
    assertProblem(await post('alice', { ...body, goal: 'something else' }), 409, 'idempotency-conflict');
    assertProblem(await post('bob', body), 409, 'idempotency-conflict');

    const key = uid('key');
    const byHeader = () =>
      request(rf.app)
        .post('/v1/tasks')
        .set(...auth('alice'))
        .set('Idempotency-Key', key);
    const h1 = await byHeader().send({ goal: 'via header', constraints: { driverType: 'ios' } });
    assert.equal(h1.status, 201, h1.text);
    assert.equal(h1.body.taskId, key);
    const h2 = await byHeader().send({ goal: 'via header', constraints: { driverType: 'ios' } });
    assert.equal(h2.status, 200);
    assert.equal(h2.body.taskId, key);
    assertProblem(
      await byHeader().send({ goal: 'via header', priority: 7, constraints: { driverType: 'ios' } }),
      409,
      'idempotency-conflict',
    );
    const mismatch = await byHeader().send({ taskId: uid('other'), goal: 'x' });
    assertProblem(mismatch, 400, 'validation');
    assert.deepEqual(
      mismatch.body.errors.map((e: { in: string; path: string }) => `${e.in}:${e.path}`),
      ['header:idempotency-key'],
    );

    const queue = (await rf.f.scheduler()).queue.map((q) => q.taskId);
    assert.equal(queue.filter((id) => id === taskId).length, 1);
    assert.equal(queue.filter((id) => id === key).length, 1);
    for (const id of [taskId, key]) assert.equal((await cancel('alice', id)).status, 202);
  });

  it('GET says where a task stands and why it waits: backoff, no idle matching device, older tasks; cancel ends it', async () => {
    // Fails once (retryable) and waits a minute for its next attempt.
    const r = await post('alice', {
      goal: 'flaky [sim duration=50 outcome=fail-retryable]',
      policy: { backoff: { initialMs: 60_000, maxMs: 60_000 } },
    });
    assert.equal(r.status, 201, r.text);
    // Admitted before the 201 (never "waiting for admission"), and the idle camera is being reserved.
    assert.equal(r.body.queue.waitingFor, 'assignment', JSON.stringify(r.body.queue));
    const backoff = await eventually(async () => {
      const g = await get('alice', `/v1/tasks/${r.body.taskId}`);
      return g.body.status === 'queued' && g.body.attempts.length === 1 ? g.body : undefined;
    }, 'first attempt failed');
    assert.equal(backoff.queue.waitingFor, 'backoff');
    assert.ok(Date.parse(backoff.queue.nextAttemptAt) > Date.now() + 50_000);
    assert.equal(
      backoff.queue.reason,
      `next attempt at ${backoff.queue.nextAttemptAt} (attempt 2 of 3; the last one ended: runner_failed)`,
    );
    assert.equal(backoff.attempts[0].outcome, 'retryable_failure');
    assert.equal(backoff.attempts[0].deviceId, 'cam-1');
    const c = await cancel('alice', r.body.taskId);
    assert.equal(c.status, 202);
    await untilStatus(r.body.taskId, 'cancelled');
    assertProblem(await cancel('alice', r.body.taskId), 409, 'task-ended');

    // H holds the only camera device; B and C wait for it, I waits for a device that does not exist.
    const camera = { driverType: 'android', tags: ['camera'] };
    const h = await post('alice', { goal: 'hold [sim outcome=hang duration=100]', constraints: camera });
    const running = (await untilStatus(h.body.taskId, 'running')).body;
    assert.equal(running.current.hostId, rf.f.hostId('h1'));
    assert.equal(running.current.deviceId, 'cam-1');
    assert.equal(running.queue, undefined);
    const b = await post('alice', { goal: 'b [sim outcome=hang]', constraints: camera });
    const cc = await post('bob', { goal: 'c [sim outcome=hang]', constraints: camera });
    const i = await post('alice', { goal: 'i', constraints: { driverType: 'ios' } });
    const qb = (await get('alice', `/v1/tasks/${b.body.taskId}`)).body.queue;
    assert.deepEqual([qb.position, qb.ahead, qb.waitingFor], [1, 0, 'device']);
    assert.equal(qb.reason, 'no idle device matches driverType=android tags=[camera] (1 matching device: 1 reserved)');
    const qc = (await get('bob', `/v1/tasks/${cc.body.taskId}`)).body.queue;
    assert.deepEqual([qc.position, qc.ahead], [2, 1]);
    assert.match(qc.reason, /^no idle device matches .*; waiting behind 1 older task$/);
    const qi = (await get('alice', `/v1/tasks/${i.body.taskId}`)).body.queue;
    assert.equal(
      qi.reason,
      `no idle device matches driverType=ios tags=[] (no device in pool ${rf.f.pool} matches at all)`,
    );

    // No response carries the lease.
    const text = (await get('admin', `/v1/tasks/${h.body.taskId}`)).text;
    assertNoSecrets(text, await leaseIds(h.body.taskId));

    for (const [who, t] of [
      ['alice', b],
      ['bob', cc],
      ['alice', i],
    ] as const) {
      assert.equal((await cancel(who, t.body.taskId)).status, 202);
    }
    const hc = await cancel('alice', h.body.taskId);
    assert.equal(hc.status, 202);
    const ended = (await untilStatus(h.body.taskId, 'cancelled')).body;
    assert.equal(ended.attempts[0].outcome, 'cancelled');
    assert.equal(ended.result.status, 'cancelled');
    for (const t of [b, cc, i]) await untilStatus(t.body.taskId, 'cancelled');
    assertProblem(await cancel('admin', uid('missing')), 404, 'not-found');
  });

  it('a submitter sees and cancels only its own tasks; a viewer reads but cannot cancel', async () => {
    const mine = await post('alice', { goal: 'private', constraints: { driverType: 'ios' } });
    const id = mine.body.taskId as string;
    assertProblem(await get('bob', `/v1/tasks/${id}`), 403, 'forbidden');
    assertProblem(await cancel('bob', id), 403, 'forbidden');
    assertProblem(await get('bob', `/v1/tasks/${id}/events`), 403, 'forbidden');
    assertProblem(await cancel('viewer', id), 403, 'forbidden');
    for (const who of ['alice', 'viewer', 'admin'] as const) {
      const r = await get(who, `/v1/tasks/${id}`);
      assert.equal(r.status, 200);
      assert.equal(r.body.owner, 'alice');
    }
    assert.equal((await rf.f.fleet.get(id)).status, 'queued', 'the refused cancels changed nothing');
    assert.equal((await cancel('admin', id)).status, 202);
    await untilStatus(id, 'cancelled');
  });

  /**
   * A pool of its own, served by a host whose only device is in maintenance, so its tasks stay
   * queued; one task submitted by each [who, name] in order. Resolves with the pool and the ids by name.
   */
  const queuedInOwnPool = async (prefix: string, tasks: ReadonlyArray<readonly [Who, string]>) => {
    const pool = uid(prefix);
    await rf.f.addHost(uid('lsth'), [{ deviceId: 'x', pool, health: 'maintenance' }]);
    await eventually(
      async () =>
        (await rf.f.client.workflow.getHandle(`scheduler/${pool}`).describe()).status.name === 'RUNNING'
          ? true
          : undefined,
      'the host pool',
    );
    const ids: Record<string, string> = {};
    for (const [who, n] of tasks) {
      const r = await post(who, { pool, goal: `listed ${n}` });
      assert.equal(r.status, 201, r.text);
      ids[n] = r.body.taskId;
    }
    return { pool, ids };
  };

  it('lists by status, owner and pool, paged with a cursor; a submitter lists only its own', async () => {
    const { pool, ids } = await queuedInOwnPool('lst', [
      ['alice', 'a1'],
      ['bob', 'b1'],
      ['bob', 'b2'],
      ['bob', 'b3'],
    ]);
    const list = (who: Who, q: string) => get(who, `/v1/tasks?pool=${pool}&${q}`);
    await eventually(
      async () => ((await list('admin', 'limit=50')).body.items.length === 4 ? true : undefined),
      'visibility',
    );

    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const r = await list('admin', `limit=3${cursor ? `&cursor=${cursor}` : ''}`);
      assert.equal(r.status, 200, r.text);
      assert.ok(r.body.items.length <= 3);
      seen.push(...r.body.items.map((t: { taskId: string }) => t.taskId));
      cursor = r.body.nextCursor;
      pages++;
    } while (cursor && pages < 5);
    assert.ok(pages >= 2, 'more than one page');
    assert.deepEqual([...seen].sort(), Object.values(ids).sort());

    const bobs = (await list('admin', 'owner=bob')).body.items;
    assert.deepEqual(bobs.map((t: { taskId: string }) => t.taskId).sort(), [ids.b1, ids.b2, ids.b3].sort());
    assert.ok(
      bobs.every(
        (t: { owner: string; status: string; pool: string }) =>
          t.owner === 'bob' && t.status === 'queued' && t.pool === pool,
      ),
    );
    const alices = (await list('alice', 'limit=10')).body.items;
    assert.deepEqual(
      alices.map((t: { taskId: string }) => t.taskId),
      [ids.a1],
    );
    assertProblem(await list('alice', 'owner=bob'), 403, 'forbidden');
    assert.equal((await list('viewer', '')).body.items.length, 4);
    assert.equal((await list('admin', 'status=running')).body.items.length, 0);
    assert.equal((await list('admin', 'status=queued')).body.items.length, 4);

    const p1 = await list('admin', 'owner=bob&limit=2');
    assert.equal(p1.body.items.length, 2);
    assert.ok(p1.body.nextCursor);
    const p2 = await list('admin', `owner=bob&limit=2&cursor=${p1.body.nextCursor}`);
    assert.equal(p2.body.items.length, 1);
    assert.equal(p2.body.nextCursor, undefined);
    const wrong = await list('admin', `owner=alice&limit=2&cursor=${p1.body.nextCursor}`);
    assertProblem(wrong, 400, 'validation');
    assert.equal(wrong.body.errors[0].path, 'cursor');
    assertProblem(await list('admin', 'cursor=garbage'), 400, 'validation');
    // A cursor is signed: a page token edited by the client never reaches Temporal.
    const [body, sig] = (p1.body.nextCursor as string).split('.');
    const edited = { ...JSON.parse(Buffer.from(body, 'base64url').toString()), t: 'AAAA' };
    const forged = `${Buffer.from(JSON.stringify(edited)).toString('base64url')}.${sig}`;
    assertProblem(await list('admin', `owner=bob&limit=2&cursor=${forged}`), 400, 'validation');

    for (const q of ['limit=0', 'limit=abc', 'status=nope', 'foo=1', 'hostId=bad%20id', 'limit=1&limit=2']) {
      const r = await get('admin', `/v1/tasks?${q}`);
      assertProblem(r, 400, 'validation');
      assert.equal(r.body.errors[0].in, 'query', q);
    }
    for (const id of Object.values(ids)) assert.equal((await cancel('admin', id)).status, 202);
  });

  it("a submitter's listing loses no task when one it was shown ends before the next page is asked for", async () => {
    // Newest first, the listing is c, x, d, e; alice sees c, d and e (x is bob's).
    const { pool, ids } = await queuedInOwnPool('lst2', [
      ['alice', 'e'],
      ['alice', 'd'],
      ['bob', 'x'],
      ['alice', 'c'],
    ]);
    const list = (q: string) => get('alice', `/v1/tasks?pool=${pool}&${q}`);
    await eventually(async () => ((await list('limit=50')).body.items.length === 3 ? true : undefined), 'visibility');
    const p1 = await list('limit=2');
    assert.deepEqual(
      p1.body.items.map((t: { taskId: string }) => t.taskId),
      [ids.c, ids.d],
    );
    // d ends (its row leaves the running ones) before alice asks for the rest.
    assert.equal((await cancel('alice', ids.d)).status, 202);
    await eventually(
      async () => ((await list('status=cancelled')).body.items.length === 1 ? true : undefined),
      'd cancelled in visibility',
    );
    const rest: string[] = [];
    let cursor: string | undefined = p1.body.nextCursor;
    for (let pages = 0; cursor && pages < 5; pages++) {
      const r = await list(`limit=2&cursor=${cursor}`);
      assert.equal(r.status, 200, r.text);
      rest.push(...r.body.items.map((t: { taskId: string }) => t.taskId));
      cursor = r.body.nextCursor;
    }
    // (A cursor that counted the rows of a page it re-read skipped e here.) d may show again, as ended.
    assert.ok(rest.includes(ids.e), `e missing from the pages after the first: ${JSON.stringify(rest)}`);
    assert.ok(!rest.includes(ids.c) && !rest.includes(ids.x), JSON.stringify(rest));
    for (const id of [ids.c, ids.e, ids.x]) assert.equal((await cancel('admin', id)).status, 202);
  });

  it('bad requests are 400/401/403/413/415 problems with field paths and change nothing', async () => {
    const before = await rf.f.scheduler();
    const unused = Array.from({ length: 7 }, () => uid('bad'));
    const cases: Array<[() => request.Test, number, string, string[]?]> = [
      [() => post('alice', {}), 400, 'validation', ['body:goal']],
      [() => post('alice', { taskId: unused[0], goal: 'x', definition: 'y' }), 400, 'validation', ['body:goal']],
      [
        () => post('alice', { taskId: 'bad id!', goal: '', priority: 5000, constraints: { tags: 'camera' } }),
        400,
        'validation',
        ['body:taskId', 'body:goal', 'body:constraints.tags', 'body:priority'],
      ],
      [() => post('alice', { taskId: unused[1], goal: 'x', owner: 'mallory' }), 400, 'validation', ['body:(root)']],
      [
        () => post('alice', { taskId: unused[2], goal: 'x', policy: { maxAttempts: 0, reservationGraceMs: 5_000 } }),
        400,
        'validation',
        ['body:policy.maxAttempts', 'body:policy.reservationGraceMs'],
      ],
      [() => post('alice', { taskId: unused[3], definition: 'not an id!' }), 400, 'validation', ['body:definition']],
      [() => post('alice', { taskId: unused[6], goal: 'x', pool: 'no-such-pool' }), 400, 'task-rejected'],
      [
        () =>
          request(rf.app)
            .post('/v1/tasks')
            .set(...auth('alice'))
            .set('Content-Type', 'application/json')
            .send('{"goal": "x",'),
        400,
        'validation',
        ['body:(root)'],
      ],
      [
        () =>
          request(rf.app)
            .post('/v1/tasks')
            .set(...auth('alice'))
            .set('Content-Type', 'text/plain')
            .send('goal=x'),
        415,
        'unsupported-media-type',
      ],
      [
        () =>
          request(rf.app)
            .post('/v1/tasks')
            .set(...auth('alice'))
            .set('Idempotency-Key', 'no spaces allowed')
            .send({ goal: 'x' }),
        400,
        'validation',
        ['header:idempotency-key'],
      ],
      [() => post('alice', { taskId: unused[4], goal: 'x'.repeat(300 * 1024) }), 413, 'payload-too-large'],
      [() => post('viewer', { taskId: unused[5], goal: 'x' }), 403, 'forbidden'],
      [() => request(rf.app).post('/v1/tasks').send({ taskId: unused[5], goal: 'x' }), 401, 'unauthorized'],
      [() => get('admin', '/v1/tasks/bad%20id'), 400, 'validation', ['path:id']],
      [() => get('admin', `/v1/tasks/${uid('nope')}`), 404, 'not-found'],
      [
        () =>
          request(rf.app)
            .post(`/v1/tasks/bad%20id/cancel`)
            .set(...auth('admin')),
        400,
        'validation',
        ['path:id'],
      ],
    ];
    for (const [send, status, slug, paths] of cases) {
      const res = await send();
      assertProblem(res, status, slug);
      if (paths) {
        const got = (res.body.errors as Array<{ in: string; path: string }>).map((e) => `${e.in}:${e.path}`);
        assert.deepEqual([...got].sort(), [...paths].sort(), res.text);
      }
    }
    const after = await rf.f.scheduler();
    assert.equal(after.queue.length, before.queue.length);
    assert.deepEqual(after.counters, before.counters);
    for (const id of unused) assertProblem(await get('admin', `/v1/tasks/${id}`), 404, 'not-found');
  });

  it('GET /v1/tasks/:id/events streams status and progress until the terminal status, then ends', async () => {
    const t = await post('alice', {
      goal: 'stream [sim duration=2400 steps=3]',
      constraints: { driverType: 'android' },
    });
    assert.equal(t.status, 201, t.text);
    const res = await get('alice', `/v1/tasks/${t.body.taskId}/events`).buffer(true).parse(textParser);
    assert.equal(res.status, 200);
    assert.match(String(res.headers['content-type']), /^text\/event-stream/);
    const events = parseSse(res.body as string);
    const last = events[events.length - 1];
    assert.equal(last.event, 'end');
    assert.deepEqual(JSON.parse(last.data), { taskId: t.body.taskId, status: 'done' });
    const views = events.filter((e) => e.event === 'task');
    for (let k = 1; k < views.length; k++) assert.notEqual(views[k].data, views[k - 1].data, 'only changes are sent');
    const parsed = views.map((e) => JSON.parse(e.data));
    assert.equal(parsed[parsed.length - 1].status, 'done');
    assert.equal(parsed[parsed.length - 1].result.output, 'simulated run on cam-1');
    assert.ok(
      parsed.some((v) => v.status === 'running'),
      parsed.map((v) => v.status).join(','),
    );
    assert.ok(
      parsed.some((v) => /sim step [12]\/3/.test(v.progress?.message ?? '')),
      'progress was streamed',
    );
    assertNoSecrets(res.body as string, await leaseIds(t.body.taskId));
    assertProblem(await get('alice', `/v1/tasks/${uid('nope')}/events`), 404, 'not-found');
  });

  it('an event stream stops polling as soon as the client disconnects', async () => {
    class CountingFleet extends FleetClient {
      gets = 0;
      override async get(taskId: string): Promise<TaskView> {
        this.gets++;
        return super.get(taskId);
      }
    }
    const counting = new CountingFleet(rf.f.client, rf.f.config);
    const server: Server = rf.appWith(counting, { ssePollMs: 50 }).listen(0);
    try {
      const t = await post('alice', { goal: 'waits forever', constraints: { driverType: 'ios' } });
      const { port } = server.address() as AddressInfo;
      const req = await new Promise<ClientRequest>((resolve, reject) => {
        const r = httpRequest(
          { port, path: `/v1/tasks/${t.body.taskId}/events`, headers: { Authorization: auth('alice')[1] } },
          (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (chunk: string) => {
              text += chunk;
              if (text.includes('event: task')) resolve(r);
            });
          },
        );
        r.on('error', (err) => ((err as NodeJS.ErrnoException).code === 'ECONNRESET' ? undefined : reject(err)));
        r.end();
      });
      const polling = counting.gets;
      await eventually(async () => (counting.gets >= polling + 3 ? true : undefined), 'the stream polls', 5_000, 20);
      req.destroy();
      await sleep(300);
      const atDisconnect = counting.gets;
      await sleep(600);
      assert.equal(counting.gets, atDisconnect, 'no polls after the client went away');
      assert.equal((await cancel('alice', t.body.taskId)).status, 202);
    } finally {
      await new Promise((r) => server.close(r));
    }
  });
  it('a client that disconnects during the access check gets no stream: nothing polls for it', async () => {
    class SlowFleet extends FleetClient {
      finds = 0;
      gets = 0;
      override async find(taskId: string, opts: { liveTimeoutMs: number }): Promise<TaskView | undefined> {
        if (++this.finds === 1) await sleep(800); // the access check, like a worker that answers late
        return super.find(taskId, opts);
      }
      /** Every read of the task, the access check's (find) and a stream's polls, goes through here. */
      override async get(taskId: string, opts?: { timeoutMs?: number }): Promise<TaskView> {
        this.gets++;
        return super.get(taskId, opts);
      }
    }
    const slow = new SlowFleet(rf.f.client, rf.f.config);
    const server: Server = rf.appWith(slow, { ssePollMs: 50, sseKeepAliveMs: 50 }).listen(0);
    try {
      const t = await post('alice', { goal: 'waits forever', constraints: { driverType: 'ios' } });
      const streams = openEventStreams();
      const s = openStream(server, t.body.taskId);
      await eventually(async () => (slow.finds === 1 ? true : undefined), 'the access check runs', 5_000, 10);
      s.req.destroy();
      // The check answers (its read is the first `get`); a stream would poll every 50 ms from then on.
      await eventually(async () => (slow.gets >= 1 ? true : undefined), 'the access check answered', 10_000, 10);
      await sleep(500);
      assert.deepEqual([slow.finds, slow.gets], [1, 1], 'no polls for a client that went away during the access check');
      assert.equal(openEventStreams(), streams);
      assert.equal((await cancel('alice', t.body.taskId)).status, 202);
    } finally {
      await new Promise((r) => server.close(r));
    }
  });

  it('an event stream queues nothing more for a client that does not read, and ends past the bound', async () => {
    const t = await post('alice', { goal: 'waits forever', constraints: { driverType: 'ios' } });
    /** A response whose socket never drains by itself. */
    class StuckResponse extends EventEmitter {
      chunks: string[] = [];
      writableNeedDrain = false;
      writableLength = 0;
      destroyed = false;
      ended = false;
      status() {
        return this;
      }
      set() {
        return this;
      }
      flushHeaders() {}
      write(chunk: string) {
        this.chunks.push(chunk);
        this.writableLength += chunk.length;
        this.writableNeedDrain = true;
        return false;
      }
      drain() {
        this.writableLength = 0;
        this.writableNeedDrain = false;
        this.emit('drain');
      }
      end() {
        this.ended = true;
        this.emit('close');
      }
      destroy() {
        this.destroyed = true;
        this.emit('close');
      }
    }
    const req = { originalUrl: '/x', socket: { destroyed: false } } as unknown as Request;
    const deps = (maxBuffered: number, keepAliveMs: number) => ({
      fleet: rf.f.fleet,
      client: rf.f.client,
      config: rf.f.config,
      tokens: [],
      definitions: rf.definitions,
      options: { ssePollMs: 20, sseKeepAliveMs: keepAliveMs, sseMaxBufferedBytes: maxBuffered },
    });

    const stuck = new StuckResponse();
    const streams = openEventStreams();
    await streamTaskEvents(deps(1024 * 1024, 10), req, stuck as unknown as Response, t.body.taskId);
    await sleep(400);
    assert.deepEqual(stuck.chunks, ['retry: 2000\n\n'], 'nothing is queued while the socket has not drained');
    assert.equal(openEventStreams(), streams + 1);
    stuck.emit('close');
    assert.equal(openEventStreams(), streams);

    // Without keep-alives (this fake takes one write per drain, which a keep-alive could take first),
    // the latest view goes out once the socket drains.
    const slow = new StuckResponse();
    await streamTaskEvents(deps(1024 * 1024, 60_000), req, slow as unknown as Response, t.body.taskId);
    await sleep(200);
    assert.deepEqual(slow.chunks, ['retry: 2000\n\n']);
    slow.drain();
    await eventually(
      async () => (slow.chunks.some((c) => c.includes('event: task')) ? true : undefined),
      'sent after drain',
    );
    assert.equal(slow.chunks.length, 2);
    slow.emit('close');
    assert.equal(openEventStreams(), streams);

    const tiny = new StuckResponse();
    await streamTaskEvents(deps(8, 60_000), req, tiny as unknown as Response, t.body.taskId);
    assert.equal(tiny.destroyed, true, 'past the bound the stream ends');
    assert.equal(openEventStreams(), streams);

    // A client that stays connected and takes nothing: its stream (and its polling) ends.
    const stalled = new StuckResponse();
    const stallDeps = deps(1024 * 1024, 60_000);
    await streamTaskEvents(
      { ...stallDeps, options: { ...stallDeps.options, sseMaxStallMs: 200 } },
      req,
      stalled as unknown as Response,
      t.body.taskId,
    );
    assert.equal(openEventStreams(), streams + 1);
    await eventually(async () => (stalled.destroyed ? true : undefined), 'the stalled stream ended', 10_000);
    assert.equal(openEventStreams(), streams);
    assert.equal((await cancel('alice', t.body.taskId)).status, 202);
  });
});

describe('REST: a full queue', () => {
  let rf: RestFleet;
  before(async () => {
    rf = await startRestFleet('rest-full', { maxQueueDepth: 1 });
  });
  after(async () => {
    await rf?.stop();
  });

  it('is a 429 problem with Retry-After; nothing is admitted; the id may be submitted again later', async () => {
    const post = (body: object) =>
      request(rf.app)
        .post('/v1/tasks')
        .set(...auth('alice'))
        .send(body);
    const first = await post({ goal: 'fills the queue' });
    assert.equal(first.status, 201, first.text);
    const id = uid('full');
    const res = await post({ taskId: id, goal: 'one too many' });
    assertProblem(res, 429, 'queue-full');
    assert.equal(res.headers['retry-after'], '5');
    assert.match(res.body.detail, /queue is full \(1\/1 queued\)/);
    const s = await rf.f.scheduler();
    assert.deepEqual(
      s.queue.map((q) => q.taskId),
      [first.body.taskId],
    );
    const cancelled = await request(rf.app)
      .post(`/v1/tasks/${first.body.taskId}/cancel`)
      .set(...auth('alice'));
    assert.equal(cancelled.status, 202);
    await eventually(async () => ((await rf.f.scheduler()).queue.length === 0 ? true : undefined), 'queue empty');
    const retry = await post({ taskId: id, goal: 'one too many' });
    assert.equal(retry.status, 201, retry.text);
    assert.equal(retry.body.status, 'queued');
    // Listed once, as it is now: the rejected run it replaced is not (visibility has both runs).
    const listed = async (query: string) =>
      (
        await request(rf.app)
          .get(`/v1/tasks?pool=${rf.f.pool}${query}`)
          .set(...auth('admin'))
      ).body.items.filter((t: { taskId: string }) => t.taskId === id);
    const runs = await eventually(async () => {
      const all = await rf.f.client.workflow.list({ query: `WorkflowId = "task/${id}"` });
      const statuses: string[] = [];
      for await (const wf of all) statuses.push(String(wf.typedSearchAttributes.get(FleetStatus)));
      return statuses.sort().join() === 'queued,rejected' ? statuses : undefined;
    }, 'both runs visible');
    assert.equal(runs.length, 2);
    assert.deepEqual(
      (await listed('')).map((t: { status: string }) => t.status),
      ['queued'],
    );
    assert.deepEqual(await listed('&status=rejected'), []);
    assert.deepEqual(
      (await rf.f.fleet.list({ pool: rf.f.pool })).filter((t) => t.taskId === id).map((t) => t.status),
      ['queued'],
    );
  });
});

describe('REST: with no control-plane worker running', () => {
  let rf: RestFleet;
  before(async () => {
    rf = await startRestFleet('rest-noworker');
    await rf.f.addHost('h1', [{ deviceId: 'd1' }]);
  });
  after(async () => {
    await rf?.stop();
  });

  it('GET shows the task as recorded (status, request, result) and says it is incomplete; a cancel is taken and applied once a worker runs', async function () {
    this.timeout(120_000);
    // Each read waits this long for a worker first (8 s by default).
    const reads = rf.appWith(rf.f.fleet, { liveViewTimeoutMs: 1_500 });
    const call = (method: 'get' | 'post', path: string) => callAs(reads, 'alice', method, path);
    const done = await rf.f.fleet.submit({ goal: 'quick [sim duration=50]', owner: 'alice' });
    assert.equal((await rf.f.fleet.wait(done.taskId, { timeoutMs: 30_000 })).status, 'done');
    const running = (await call('post', '/v1/tasks').send({ goal: 'long [sim outcome=hang]' })).body.taskId as string;
    await rf.f.waitForStatus(running, 'running');
    await rf.f.stopControlPlane();

    const live = await call('get', `/v1/tasks/${running}`);
    assert.equal(live.status, 200, live.text);
    assert.equal(live.body.status, 'running');
    assert.equal(live.body.work.goal, 'long [sim outcome=hang]');
    assert.match(live.body.incomplete, /no control-plane worker answered/);
    assert.deepEqual(live.body.attempts, []);
    const ended = await call('get', `/v1/tasks/${done.taskId}`);
    assert.equal(ended.status, 200, ended.text);
    assert.equal(ended.body.status, 'done');
    assert.equal(ended.body.result.status, 'done');
    assert.ok(ended.body.incomplete);
    assertProblem(await call('get', `/v1/tasks/${uid('nobody')}`), 404, 'not-found');
    // Another owner's task stays another owner's.
    assertProblem(
      await request(reads)
        .get(`/v1/tasks/${running}`)
        .set(...auth('bob')),
      403,
      'forbidden',
    );

    // The event stream reads like GET: the task as recorded, and it keeps going until a worker runs.
    const server: Server = reads.listen(0);
    const stream = openStream(server, running);
    await stream.gotTask;

    const cancelled = await call('post', `/v1/tasks/${running}/cancel`);
    assert.equal(cancelled.status, 202, cancelled.text);
    assert.equal(cancelled.body.cancelRequested, true);
    assertProblem(await call('post', `/v1/tasks/${done.taskId}/cancel`), 409, 'task-ended');

    // A submit is started and kept: 202 after the admission timeout, admitted once a worker runs.
    const app = rf.appWith(rf.f.fleet, { admissionTimeoutMs: 2_000, liveViewTimeoutMs: 1_500 });
    const pending = await callAs(app, 'alice', 'post', '/v1/tasks').send({
      taskId: uid('later'),
      goal: 'later [sim duration=50]',
    });
    assert.equal(pending.status, 202, pending.text);
    assert.equal(pending.body.status, 'queued');
    assert.equal(pending.headers.location, `/v1/tasks/${pending.body.taskId}`);
    await rf.f.startControlPlane();
    const after = await rf.f.waitForStatus(running, 'cancelled', 60_000);
    assert.equal(after.attempts.length, 1);
    try {
      const events = parseSse(await stream.done);
      assert.deepEqual(
        events.filter((e) => e.event === 'error'),
        [],
      );
      const views = events.filter((e) => e.event === 'task').map((e) => JSON.parse(e.data));
      assert.equal(views[0].status, 'running');
      assert.match(views[0].incomplete, /no control-plane worker answered/);
      assert.equal(views[views.length - 1].status, 'cancelled');
      assert.deepEqual(JSON.parse(events[events.length - 1].data), { taskId: running, status: 'cancelled' });
    } finally {
      await new Promise((r) => server.close(r));
    }
    assert.equal((await rf.f.fleet.wait(pending.body.taskId, { timeoutMs: 60_000 })).status, 'done');
  });

  it('concurrent submits of one Idempotency-Key pending admission: only the same request gets 202, others 409', async function () {
    this.timeout(120_000);
    /** Lets the submits through only once all of them passed the look for an existing task. */
    class BarrierFleet extends FleetClient {
      arrived = 0;
      private open!: () => void;
      private readonly all = new Promise<void>((r) => (this.open = r));
      override async submit(...args: Parameters<FleetClient['submit']>): Promise<TaskView> {
        if (++this.arrived === 3) this.open();
        await this.all;
        return super.submit(...args);
      }
    }
    const barrier = new BarrierFleet(rf.f.client, rf.f.config);
    const app = rf.appWith(barrier, { admissionTimeoutMs: 2_000 });
    const key = uid('race');
    const submit = (who: Who, goal: string) =>
      callAs(app, who, 'post', '/v1/tasks').set('Idempotency-Key', key).send({ goal });
    await rf.f.stopControlPlane();
    try {
      const answers = await Promise.all([
        submit('alice', 'race [sim duration=50]'),
        submit('alice', 'another [sim duration=50]'),
        submit('bob', 'race [sim duration=50]'),
      ]);
      assert.equal(barrier.arrived, 3);
      const statuses = answers.map((r) => r.status).sort();
      assert.deepEqual(statuses, [202, 409, 409], answers.map((r) => r.text).join('\n'));
      const won = answers.find((r) => r.status === 202)!;
      assert.equal(won.body.taskId, key);
      for (const r of answers.filter((a) => a.status === 409)) assertProblem(r, 409, 'idempotency-conflict');
    } finally {
      await rf.f.startControlPlane();
    }
    assert.equal((await rf.f.fleet.wait(key, { timeoutMs: 60_000 })).status, 'done');
  });
});
