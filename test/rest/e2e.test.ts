/** End to end: REST -> Temporal -> a simulated host -> the result, read back through REST. */
import assert from 'node:assert/strict';
import request from 'supertest';
import { eventually, uid } from '../helpers/fleet';
import { assertNoSecrets, auth, startRestFleet, type RestFleet, type Who } from './helpers';

describe('REST: end to end', () => {
  let rf: RestFleet;
  before(async () => {
    rf = await startRestFleet('rest-e2e');
    await rf.f.addHost('h1', [{ deviceId: 'd1', driverType: 'android', tags: ['api34'] }]);
  });
  after(async () => {
    await rf?.stop();
  });
  const get = (who: Who, path: string) =>
    request(rf.app)
      .get(path)
      .set(...auth(who));
  const post = (who: Who, path: string, body: object) =>
    request(rf.app)
      .post(path)
      .set(...auth(who))
      .send(body);

  it('a goal task and a registered-definition task run on the host; status, attempts and result come back through REST', async () => {
    const def = uid('smoke');
    assert.equal(
      (
        await post('admin', '/v1/workflow-definitions', {
          name: def,
          steps: [
            { name: 'boot', command: ['boot', '[sim', 'duration=50]'] },
            { name: 'check', command: ['check'] },
          ],
        })
      ).status,
      201,
    );
    const goal = await post('alice', '/v1/tasks', {
      goal: 'open settings [sim duration=300 steps=2]',
      constraints: { driverType: 'android', tags: ['api34'] },
    });
    assert.equal(goal.status, 201, goal.text);
    assert.equal(goal.body.status, 'queued');
    const byDef = await post('alice', '/v1/tasks', { definition: def });
    assert.equal(byDef.status, 201, byDef.text);

    const done = async (taskId: string) =>
      eventually(
        async () => {
          const r = await get('alice', `/v1/tasks/${taskId}`);
          return r.body.status === 'done' ? r : undefined;
        },
        `task ${taskId} done`,
        30_000,
      );
    const g = await done(goal.body.taskId);
    assert.equal(g.body.result.status, 'done');
    assert.equal(g.body.result.output, 'simulated run on d1');
    assert.equal(g.body.result.attempts, 1);
    assert.equal(g.body.attempts.length, 1);
    const [a] = g.body.attempts;
    assert.equal(a.hostId, rf.f.hostId('h1'));
    assert.equal(a.deviceId, 'd1');
    assert.equal(a.outcome, 'done');
    for (const k of ['assignedAt', 'claimedAt', 'startedAt', 'endedAt']) assert.ok(Date.parse(a[k]) > 0, k);
    assert.equal(g.body.progress.message, 'sim step 2/2');
    assert.equal(g.body.current, undefined);
    assertNoSecrets(
      g.text,
      (await rf.f.fleet.get(goal.body.taskId)).attempts.map((x) => x.leaseId),
    );

    const d = await done(byDef.body.taskId);
    assert.equal(d.body.result.output, '2 steps done');
    assert.equal(d.body.work.steps.length, 2);

    const listed = await eventually(async () => {
      const r = await get('alice', `/v1/tasks?hostId=${rf.f.hostId('h1')}&status=done`);
      return r.body.items.length === 2 ? r.body.items : undefined;
    }, 'both listed as done on the host');
    assert.deepEqual(
      listed.map((t: { taskId: string }) => t.taskId).sort(),
      [goal.body.taskId, byDef.body.taskId].sort(),
    );
    for (const t of listed) {
      assert.equal(t.owner, 'alice');
      assert.equal(t.deviceId, 'd1');
      assert.equal(t.attempts, 1);
      assert.ok(Date.parse(t.closedAt) >= Date.parse(t.submittedAt));
    }
    const [dev] = (await get('viewer', `/v1/devices?pool=${rf.f.pool}`)).body.items;
    assert.equal(dev.reservation, null);
    assert.equal(dev.deviceId, 'd1');
  });
});
