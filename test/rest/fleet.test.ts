/** /v1/hosts and /v1/devices (host workflows + pool scheduler, aggregated) and drain/undrain. */
import assert from 'node:assert/strict';
import { generateHostCredential, publicKeys } from '../../host-worker/identity';
import { deviceWorkflowId, hostWorkflowId } from '../../workflows/ids';
import { hostStateQuery } from '../../workflows/messages';
import { FleetHostId, FleetPool } from '../../workflows/search-attributes';
import { eventually, uid } from '../helpers/fleet';
import { assertNoOverlappingReservations } from '../helpers/invariants';
import { assertNoSecrets, assertProblem, callAs, startRestFleet, type RestFleet, type Who } from './helpers';

interface Device {
  hostId: string;
  deviceId: string;
  pool: string;
  driverType: string;
  tags: string[];
  state: string;
  health: string;
  hostOnline: boolean;
  hostDrained: boolean;
  deviceDrained: boolean;
  assignable: boolean;
  reservation: { taskId: string; attempt: number } | null;
}

describe('REST: hosts and devices', () => {
  let rf: RestFleet;
  let hostId: string;
  before(async () => {
    rf = await startRestFleet('rest-fleet');
    await rf.f.addHost('h1', [
      { deviceId: 'd1', driverType: 'android', tags: ['camera'] },
      { deviceId: 'd2', driverType: 'ios' },
    ]);
    hostId = rf.f.hostId('h1');
  });
  after(async () => {
    await rf?.stop();
  });

  const get = (who: Who, path: string) => callAs(rf.app, who, 'get', path);
  const post = (who: Who, path: string, body?: object) => callAs(rf.app, who, 'post', path).send(body);
  const devices = async (q = ''): Promise<Device[]> =>
    (await get('viewer', `/v1/devices?pool=${rf.f.pool}${q}`)).body.items;
  const device = async (id: string): Promise<Device | undefined> => (await devices()).find((d) => d.deviceId === id);

  it('lists hosts and devices with pool, state, health, drain and reservation', async () => {
    const hosts = await eventually(async () => {
      const r = await get('viewer', `/v1/hosts?pool=${rf.f.pool}`);
      return r.body.items?.length === 1 && r.body.items[0].devices.every((d: Device) => d.assignable) ? r : undefined;
    }, 'host and devices known');
    const [h] = hosts.body.items;
    assert.equal(h.hostId, hostId);
    assert.equal(h.pool, rf.f.pool);
    assert.equal(h.online, true);
    assert.equal(h.drained, false);
    assert.ok(Date.parse(h.lastSeenAt) > Date.now() - 60_000);
    assert.deepEqual(
      h.devices.map((d: Device) => [d.deviceId, d.driverType, d.tags, d.state, d.health, d.pool, d.reservation]),
      [
        // inline-steps: the sim runner runs steps a task brings along (a capability tag).
        ['d1', 'android', ['camera', 'inline-steps'], 'idle', 'good', rf.f.pool, null],
        ['d2', 'ios', ['inline-steps'], 'idle', 'good', rf.f.pool, null],
      ],
    );
    assertNoSecrets(hosts.text);
    const one = await get('alice', `/v1/hosts/${hostId}`);
    assert.equal(one.status, 200);
    assert.equal(one.body.hostId, hostId);
    assertNoSecrets(one.text);
    assertProblem(await get('viewer', `/v1/hosts/${uid('nohost')}`), 404, 'not-found');

    assert.deepEqual(
      (await devices()).map((d) => d.deviceId),
      ['d1', 'd2'],
    );
    assert.deepEqual(
      (await devices('&driverType=ios')).map((d) => d.deviceId),
      ['d2'],
    );
    assert.equal((await devices(`&hostId=${hostId}`)).length, 2);

    // A running task holds d1: the reservation shows its task, never its lease.
    const t = await post('alice', '/v1/tasks', { goal: 'hold [sim outcome=hang]', constraints: { deviceId: 'd1' } });
    assert.equal(t.status, 201, t.text);
    const held = await eventually(async () => {
      const d = await device('d1');
      return d?.reservation ? d : undefined;
    }, 'reservation visible');
    assert.deepEqual(held.reservation, { taskId: t.body.taskId, attempt: 1 });
    assert.equal(held.assignable, false);
    // In use as soon as it is held, whatever the host's last periodic snapshot said.
    assert.equal(held.state, 'busy');
    assert.equal((held as Device & { unassignableBecause?: string }).unassignableBecause, 'reserved');
    assert.equal(
      (await device('d2')) && 'unassignableBecause' in (await device('d2'))!,
      false,
      'an assignable device has no reason',
    );
    const text = (await get('viewer', `/v1/devices?pool=${rf.f.pool}`)).text;
    assertNoSecrets(
      text,
      (await rf.f.fleet.get(t.body.taskId)).attempts.map((a) => a.leaseId),
    );
    assert.equal((await post('alice', `/v1/tasks/${t.body.taskId}/cancel`)).status, 202);
    await eventually(async () => ((await device('d1'))?.reservation === null ? true : undefined), 'released');

    for (const q of ['pool=bad%20pool', 'foo=1'])
      assertProblem(await get('viewer', `/v1/devices?${q}`), 400, 'validation');
    assertProblem(await get('viewer', '/v1/hosts?pool=a&pool=b'), 400, 'validation');
  });

  it('drain and undrain a device and a host (admin): assignment stops and resumes; 404 for unknown ones', async () => {
    const drained = await post('admin', `/v1/hosts/${hostId}/devices/d1/drain`);
    assert.equal(drained.status, 202);
    assert.deepEqual(drained.body, { hostId, deviceId: 'd1', drained: true });
    await eventually(async () => {
      const d = await device('d1');
      return d?.deviceDrained && !d.assignable ? true : undefined;
    }, 'd1 drained');
    assert.equal((await device('d2'))?.deviceDrained, false);

    const t = await post('alice', '/v1/tasks', { goal: 'quick [sim duration=50]', constraints: { deviceId: 'd1' } });
    const waiting = await eventually(async () => {
      const r = await get('alice', `/v1/tasks/${t.body.taskId}`);
      return /1 drained/.test(r.body.queue?.reason ?? '') ? r.body : undefined;
    }, 'the scheduler sees the drain');
    assert.equal(waiting.status, 'queued');
    assert.equal(
      waiting.queue.reason,
      'no idle device matches driverType=any tags=[] deviceId=d1 (1 matching device: 1 drained)',
    );

    assert.equal((await post('admin', `/v1/hosts/${hostId}/devices/d1/undrain`)).status, 202);
    await eventually(async () => {
      const r = await get('alice', `/v1/tasks/${t.body.taskId}`);
      return r.body.status === 'done' ? true : undefined;
    }, 'task ran after undrain');

    const hd = await post('admin', `/v1/hosts/${hostId}/drain`);
    assert.equal(hd.status, 202);
    assert.deepEqual(hd.body, { hostId, drained: true });
    const hostDrained = await eventually(async () => {
      const r = await get('viewer', `/v1/hosts/${hostId}`);
      return r.body.drained ? r.body : undefined;
    }, 'host drained');
    assert.ok(hostDrained.devices.every((d: Device) => d.hostDrained && !d.assignable));
    assert.equal((await post('admin', `/v1/hosts/${hostId}/undrain`)).status, 202);
    await eventually(
      async () => ((await get('viewer', `/v1/hosts/${hostId}`)).body.drained === false ? true : undefined),
      'undrained',
    );

    assertProblem(await post('admin', `/v1/hosts/${uid('nohost')}/drain`), 404, 'not-found');
    assertProblem(await post('admin', `/v1/hosts/${uid('nohost')}/devices/d1/drain`), 404, 'not-found');
    assertProblem(await post('admin', `/v1/hosts/${hostId}/devices/nodev/drain`), 404, 'not-found');
    assertProblem(await post('admin', '/v1/hosts/bad%20host/undrain'), 400, 'validation');
    assertProblem(await post('alice', `/v1/hosts/${hostId}/drain`), 403, 'forbidden');
    assert.equal((await get('viewer', `/v1/hosts/${hostId}`)).body.drained, false, 'refused drains changed nothing');
  });

  it('PUT keys of an enrolled host: the same keys change nothing; another pool or other keys without rotate are 409', async () => {
    const put = (body: object) => callAs(rf.app, 'admin', 'put', `/v1/hosts/${hostId}/keys`).send(body);
    const handle = rf.f.client.workflow.getHandle(hostWorkflowId(hostId));
    const before = await handle.query(hostStateQuery);
    const same = publicKeys(await rf.f.enroll('h1'));
    const again = await put({ keys: same });
    assert.equal(again.status, 200, again.text);
    assert.deepEqual(again.body, { hostId, pool: rf.f.pool, created: false, rotated: false });
    assertProblem(await put({ keys: same, pool: uid('other-pool') }), 409, 'conflict');
    const other = publicKeys(generateHostCredential(hostId));
    const refused = await put({ keys: other });
    assertProblem(refused, 409, 'conflict');
    assert.match(refused.body.detail, /other keys.*rotate/);
    const after = await handle.query(hostStateQuery);
    assert.deepEqual(after.keys, before.keys, 'refusals changed nothing');
    assert.equal(after.pool, rf.f.pool);
    assert.ok(after.online, 'still online');
  });
});

describe('REST: removing a host', () => {
  let rf: RestFleet;
  before(async () => {
    rf = await startRestFleet('rest-remove');
  });
  after(async () => {
    await rf?.stop();
  });
  const del = (who: Who, path: string) => callAs(rf.app, who, 'delete', path);

  it('an offline host is removed: its devices leave the pool, its workflows end; online or unknown is refused; enrolling again starts afresh', async () => {
    const host = await rf.f.addHost('gone', [{ deviceId: 'g1' }, { deviceId: 'g2' }]);
    const hostId = rf.f.hostId('gone');
    const handle = rf.f.client.workflow.getHandle(`host/${hostId}`);
    await eventually(
      async () => ((await rf.f.scheduler()).devices.length === 2 ? true : undefined),
      'devices in the pool',
    );
    const done = await rf.f.fleet.submit({ goal: 'before [sim duration=50]' });
    assert.equal((await rf.f.fleet.wait(done.taskId, { timeoutMs: 30_000 })).status, 'done');

    assertProblem(await del('admin', `/v1/hosts/${hostId}`), 409, 'conflict'); // online
    assertProblem(await del('alice', `/v1/hosts/${hostId}`), 403, 'forbidden');
    assertProblem(await del('admin', `/v1/hosts/${uid('nobody')}`), 404, 'not-found');
    assert.equal((await rf.f.scheduler()).devices.length, 2, 'refusals changed nothing');

    await host.stop(); // a clean stop: offline at once
    await eventually(async () => (!(await handle.query(hostStateQuery)).online ? true : undefined), 'offline');
    const removed = await del('admin', `/v1/hosts/${hostId}`);
    assert.equal(removed.status, 202, removed.text);
    assert.deepEqual(removed.body, { hostId, removed: true });
    await eventually(async () => ((await rf.f.scheduler()).devices.length === 0 ? true : undefined), 'devices gone');
    await eventually(
      async () => ((await handle.describe()).status.name === 'COMPLETED' ? true : undefined),
      'host workflow ended',
    );
    for (const d of ['g1', 'g2']) {
      await eventually(
        async () =>
          (await rf.f.client.workflow.getHandle(deviceWorkflowId(hostId, d)).describe()).status.name === 'COMPLETED'
            ? true
            : undefined,
        `device workflow ${d} ended`,
      );
    }
    const listed = await callAs(rf.app, 'viewer', 'get', `/v1/hosts?pool=${rf.f.pool}`);
    assert.deepEqual(listed.body.items, []);
    assertProblem(await del('admin', `/v1/hosts/${hostId}`), 404, 'not-found');

    // A task now waits (no device); the host enrolled again (same id, same keys) serves it.
    const waiting = await rf.f.fleet.submit({ goal: 'after [sim duration=50]' });
    assert.equal((await rf.f.fleet.get(waiting.taskId)).status, 'queued');
    await rf.f.addHost('gone', [{ deviceId: 'g1' }]);
    const after = await rf.f.fleet.wait(waiting.taskId, { timeoutMs: 30_000 });
    assert.equal(after.status, 'done');
    assert.equal(after.attempts[0].hostId, hostId);
    await assertNoOverlappingReservations(rf.f.client, [{ hostId, deviceId: 'g1' }]);
  });

  it('a host restarted with another pool is listed and indexed under that pool, not the old one', async () => {
    const cred = await rf.f.enroll('mover');
    const moverId = rf.f.hostId('mover');
    const first = await rf.f.addHost('mover', [{ deviceId: 'm1' }], { credential: cred });
    const indexed = async (pool: string): Promise<boolean> => {
      for await (const wf of rf.f.client.workflow.list({
        query: `FleetKind = 'host' AND FleetPool = "${pool}" AND ExecutionStatus = 'Running'`,
      })) {
        if (wf.typedSearchAttributes.get(FleetHostId) === moverId) return true;
      }
      return false;
    };
    await eventually(async () => ((await indexed(rf.f.pool)) ? true : undefined), 'indexed under its first pool');
    await first.stop();
    const moved = `${rf.f.pool}-moved`;
    await rf.f.addHost('mover', [{ deviceId: 'm1' }], { credential: cred, pool: moved });
    await eventually(
      async () =>
        (await rf.f.client.workflow.getHandle(hostWorkflowId(moverId)).query(hostStateQuery)).pool === moved
          ? true
          : undefined,
      'the host workflow has the new pool',
    );
    await eventually(async () => ((await indexed(moved)) ? true : undefined), 'indexed under the new pool');
    assert.equal(await indexed(rf.f.pool), false, 'no longer indexed under the old pool');
    const d = await rf.f.client.workflow.getHandle(hostWorkflowId(moverId)).describe();
    assert.equal(d.typedSearchAttributes.get(FleetPool), moved);
    const inMoved = await callAs(rf.app, 'viewer', 'get', `/v1/hosts?pool=${moved}`);
    assert.deepEqual(
      inMoved.body.items.map((h: { hostId: string }) => h.hostId),
      [moverId],
    );
    const inOld = await callAs(rf.app, 'viewer', 'get', `/v1/hosts?pool=${rf.f.pool}`);
    assert.equal(
      inOld.body.items.some((h: { hostId: string }) => h.hostId === moverId),
      false,
    );
  });
});
