/** The `fleet` CLI: run(argv, io) against a real REST app (listening on an ephemeral port) over a test fleet. */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { run } from '../../control-plane/cli/run';
import { publicKeys, type HostCredential } from '../../host-worker/identity';
import { hostWorkflowId } from '../../workflows/ids';
import { hostStateQuery } from '../../workflows/messages';
import { eventually, uid } from '../helpers/fleet';
import { assertNoSecrets, auth, startRestFleet, TOKEN, type RestFleet, type Who } from '../rest/helpers';

interface Captured {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON (for --json runs). */
  json: () => any; // eslint-disable-line @typescript-eslint/no-explicit-any
  requests: Array<{ method: string; url: string; body?: string }>;
}

describe('fleet CLI', () => {
  let rf: RestFleet;
  let server: Server;
  let url: string;
  let hostId: string;
  const cwd = mkdtempSync(join(tmpdir(), 'fleet-cli-'));

  before(async () => {
    rf = await startRestFleet('cli');
    server = await new Promise<Server>((resolve) => {
      const s = rf.app.listen(0, '127.0.0.1', () => resolve(s));
    });
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    await rf.f.addHost('h1', [
      { deviceId: 'd1', driverType: 'android' },
      { deviceId: 'd2', driverType: 'android' },
    ]);
    hostId = rf.f.hostId('h1');
  });
  after(async () => {
    server?.closeAllConnections();
    await new Promise((r) => server?.close(r));
    await rf?.stop();
  });

  async function fleet(argv: string[], opts: { who?: Who; token?: string; tty?: boolean } = {}): Promise<Captured> {
    let stdout = '';
    let stderr = '';
    const requests: Captured['requests'] = [];
    const code = await run(argv, {
      fetch: (input, init) => {
        requests.push({ method: init?.method ?? 'GET', url: String(input), body: init?.body as string | undefined });
        return fetch(input, init);
      },
      stdout: { write: (c: string) => (stdout += c), isTTY: opts.tty, columns: 100 },
      stderr: { write: (c: string) => (stderr += c) },
      env: { FLEET_URL: url, FLEET_TOKEN: opts.token ?? TOKEN[opts.who ?? 'admin'] },
      cwd,
    });
    return { code, stdout, stderr, requests, json: () => JSON.parse(stdout) };
  }

  it('submit, get, list and cancel with --json; a cancelled task waits out with exit 3', async () => {
    const taskId = uid('cli-task');
    // Pinned to a device no host has: it stays queued.
    const s = await fleet(
      ['submit', '--goal', 'never runs', '--device', 'nodevice', '--priority', '5', '--task-id', taskId, '--json'],
      { who: 'alice' },
    );
    assert.equal(s.code, 0, s.stderr);
    assert.equal(s.json().taskId, taskId);
    assert.equal(s.json().status, 'queued');
    assert.equal(s.json().priority, 5);
    assert.equal(s.json().constraints.deviceId, 'nodevice');

    const g = await fleet(['get', taskId, '--json'], { who: 'alice' });
    assert.equal(g.code, 0, g.stderr);
    assert.equal(g.json().taskId, taskId);
    assert.equal(g.json().owner, 'alice');

    const human = await fleet(['get', taskId], { who: 'alice' });
    assert.match(human.stdout, new RegExp(`^task +${taskId}$`, 'm'));
    assert.match(human.stdout, /^status +queued$/m);

    await eventually(async () => {
      const l = await fleet(['list', '--pool', rf.f.pool, '--status', 'queued', '--json']);
      assert.equal(l.code, 0, l.stderr);
      return l.json().items.some((t: { taskId: string }) => t.taskId === taskId) ? true : undefined;
    }, 'task listed');
    const table = await fleet(['list', '--pool', rf.f.pool]);
    assert.match(table.stdout, /^TASK +STATUS/);
    assert.ok(table.stdout.includes(taskId));

    const c = await fleet(['cancel', taskId, '--json'], { who: 'alice' });
    assert.equal(c.code, 0, c.stderr);
    assert.equal(c.json().taskId, taskId);
    const w = await fleet(['get', taskId, '--wait', '--json'], { who: 'alice' });
    assert.equal(w.code, 3, w.stderr);
    assert.equal(w.json().status, 'cancelled');

    const again = await fleet(['cancel', taskId], { who: 'alice' });
    assert.equal(again.code, 2);
    assert.match(again.stderr, /409/);
  });

  it('submit --wait: exit 0 for a done task (live line on a TTY), 1 for a failing one', async () => {
    const done = await fleet(['submit', '--goal', 'quick [sim duration=100]', '--driver-type', 'android', '--wait'], {
      tty: true,
    });
    assert.equal(done.code, 0, done.stderr + done.stdout);
    assert.match(done.stderr, /^submitted /);
    assert.ok(done.stdout.includes('\r\x1b[2K'), 'live progress line');
    assert.match(done.stdout, /^status +done$/m);

    const plain = await fleet(['submit', '--goal', 'quick [sim duration=50]', '--wait']);
    assert.equal(plain.code, 0, plain.stderr);
    assert.ok(!plain.stdout.includes('\x1b'), 'no escape codes without a TTY');
    assert.match(plain.stdout, / done/);

    const failed = await fleet([
      'submit',
      '--goal',
      'broken [sim duration=50 outcome=fail]',
      '--max-attempts',
      '1',
      '--wait',
      '--json',
    ]);
    assert.equal(failed.code, 1, failed.stderr);
    assert.equal(failed.json().status, 'failed');
    assert.equal(failed.json().result.status, 'failed');

    // No device of that kind: the queue-wait limit fails it (exit 1) with the reason.
    const waited = await fleet([
      'submit',
      '--goal',
      'needs a tv',
      '--driver-type',
      'tv',
      '--max-queue-wait-ms',
      '1000',
      '--wait',
      '--json',
    ]);
    assert.equal(waited.code, 1, waited.stderr);
    assert.equal(waited.json().result.reason, 'queue_timeout');
    assert.equal(waited.json().policy.maxQueueWaitMs, 1000);
  });

  it('validation errors exit 2 and name the field; a bad token exits 4', async () => {
    const v = await fleet(['submit', '--goal', 'x', '--priority', '5000']);
    assert.equal(v.code, 2);
    assert.match(v.stderr, /HTTP 400/);
    assert.match(v.stderr, /body priority:/);
    assert.equal(v.stderr.split('priority').length - 1, 1, `the field error is said once: ${v.stderr}`);

    const both = await fleet(['submit', '--json']);
    assert.equal(both.code, 2);
    assert.equal(JSON.parse(both.stderr).errors[0].path, 'goal');

    const local = await fleet(['submit', '--goal', 'x', '--priority', 'high']);
    assert.equal(local.code, 2);
    assert.match(local.stderr, /--priority must be an integer/);
    assert.equal(local.requests.length, 0);

    assert.equal((await fleet(['submit', '--goal', 'x', '--bogus'])).code, 2);
    assert.equal((await fleet(['frobnicate'])).code, 2);

    const bad = await fleet(['list'], { token: 'not-a-token' });
    assert.equal(bad.code, 4);
    assert.match(bad.stderr, /unknown API token/);
    assert.equal((await fleet(['drain', hostId], { who: 'viewer' })).code, 4);

    const down = await run(['list'], {
      fetch,
      stdout: { write: () => true },
      stderr: { write: () => true },
      env: { FLEET_URL: 'http://127.0.0.1:1', FLEET_TOKEN: TOKEN.admin },
    });
    assert.equal(down, 5);
  });

  it('drain and undrain a host and a device', async () => {
    const hostDrained = async (): Promise<boolean | undefined> => {
      const h = await fleet(['hosts', '--pool', rf.f.pool, '--json']);
      return h.json().items.find((x: { hostId: string }) => x.hostId === hostId)?.drained;
    };
    const d = await fleet(['drain', hostId, '--json']);
    assert.equal(d.code, 0, d.stderr);
    assert.deepEqual(d.json(), { hostId, drained: true });
    await eventually(async () => ((await hostDrained()) === true ? true : undefined), 'host drained');
    const u = await fleet(['undrain', hostId]);
    assert.equal(u.code, 0, u.stderr);
    assert.match(u.stdout, /undrained/);
    await eventually(async () => ((await hostDrained()) === false ? true : undefined), 'host undrained');

    const dd = await fleet(['drain', hostId, 'd2', '--json']);
    assert.deepEqual(dd.json(), { hostId, deviceId: 'd2', drained: true });
    await eventually(async () => {
      const devs = (await fleet(['devices', '--host', hostId, '--json'])).json().items;
      return devs.find((x: { deviceId: string }) => x.deviceId === 'd2')?.deviceDrained ? true : undefined;
    }, 'device drained');
    assert.equal((await fleet(['undrain', hostId, 'd2'])).code, 0);
    const table = await fleet(['devices', '--host', hostId]);
    assert.match(table.stdout, /^HOST +DEVICE/);
    assert.equal((await fleet(['drain', uid('nohost')])).code, 2);
  });

  it('hosts add: a 0600 credential here, exactly its public keys enrolled, no private key on the wire', async () => {
    const newHost = uid('cli-host');
    const r = await fleet(['hosts', 'add', newHost, '--pool', rf.f.pool, '--json']);
    assert.equal(r.code, 0, r.stderr);
    const file = join(cwd, `${newHost}.credential.json`);
    assert.deepEqual(r.json(), {
      hostId: newHost,
      pool: rf.f.pool,
      created: true,
      rotated: false,
      credentialFile: file,
    });
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const cred = JSON.parse(readFileSync(file, 'utf8')) as HostCredential;
    assert.equal(cred.hostId, newHost);
    assert.match(cred.signingKey, /^[0-9a-f]{64}$/);
    assert.match(cred.boxKey, /^[0-9a-f]{64}$/);

    const view = await eventually(
      () => rf.f.client.workflow.getHandle(hostWorkflowId(newHost)).query(hostStateQuery),
      'host workflow',
    );
    assert.deepEqual(view.keys, publicKeys(cred));
    assert.equal(view.pool, rf.f.pool);

    // Nothing that left this process, nor anything that came back, holds a private key.
    const wire = r.requests.map((q) => `${q.url} ${q.body ?? ''}`).join('\n') + r.stdout;
    for (const secret of [cred.signingKey, cred.boxKey]) assert.ok(!wire.includes(secret), 'private key leaked');
    assert.deepEqual(JSON.parse(r.requests[0].body!), { pool: rf.f.pool, keys: publicKeys(cred) });

    // The existing file is enrolled again as it is (no overwrite without --force), and no new keys
    // for an enrolled host without --rotate (another file is no way around it); with both, the keys rotate.
    const again = await fleet(['hosts', 'add', newHost, '--json']);
    assert.equal(again.code, 0, again.stderr);
    assert.deepEqual([again.json().created, again.json().rotated], [false, false]);
    assert.deepEqual(JSON.parse(again.requests[0].body!).keys, publicKeys(cred), 'the same keys enrolled again');
    assert.equal(JSON.parse(readFileSync(file, 'utf8')).signingKey, cred.signingKey, 'the file is kept as it is');
    for (const args of [['--force'], ['--out', 'elsewhere.json']]) {
      const refused = await fleet(['hosts', 'add', newHost, ...args]);
      assert.equal(refused.code, 2, refused.stderr);
      assert.match(refused.stderr, /409.*enrolled with other keys.*--rotate/s);
    }
    assert.ok(!existsSync(join(cwd, 'elsewhere.json')), 'a refused rotation writes no credential');
    assert.equal(JSON.parse(readFileSync(file, 'utf8')).signingKey, cred.signingKey, 'the enrolled credential is kept');
    const rotated = await fleet(['hosts', 'add', newHost, '--force', '--rotate', '--json']);
    assert.equal(rotated.code, 0, rotated.stderr);
    assert.equal(rotated.json().created, false);
    assert.equal(rotated.json().rotated, true);
    const cred2 = JSON.parse(readFileSync(file, 'utf8')) as HostCredential;
    assert.notEqual(cred2.signingKey, cred.signingKey);
    await eventually(async () => {
      const v = await rf.f.client.workflow.getHandle(hostWorkflowId(newHost)).query(hostStateQuery);
      return v.keys?.signing === publicKeys(cred2).signing ? true : undefined;
    }, 'keys rotated');

    // A submitter may not enrol: exit 4, and the credential it made is removed again.
    const other = uid('cli-host');
    const denied = await fleet(['hosts', 'add', other, '--out', 'sub/other.json'], { who: 'alice' });
    assert.equal(denied.code, 4);
    assert.ok(!existsSync(join(cwd, 'sub', 'other.json')));
    assert.deepEqual(readdirSync(join(cwd, 'sub')), [], 'no leftover temporary credential');
    // A failed --force re-enrolment keeps the credential that is enrolled.
    const kept = await fleet(['hosts', 'add', newHost, '--force', '--rotate'], { who: 'alice' });
    assert.equal(kept.code, 4);
    assert.equal(JSON.parse(readFileSync(file, 'utf8')).signingKey, cred2.signingKey);
  });

  it('PUT /v1/hosts/:hostId/keys validates its body and answers without keys', async () => {
    const h = uid('rest-host');
    const keys = { signing: 'a'.repeat(64), box: 'b'.repeat(64) };
    const put = (who: Who, body: object) =>
      request(rf.app)
        .put(`/v1/hosts/${h}/keys`)
        .set(...auth(who))
        .send(body);
    assert.equal((await put('viewer', { keys })).status, 403);
    const bad = await put('admin', { keys: { signing: 'xyz', box: keys.box } });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.errors[0].path, 'keys.signing');
    const extra = await put('admin', { keys: { ...keys, signingKey: 'c'.repeat(64) } });
    assert.equal(extra.status, 400, 'a private key field is refused');
    const ok = await put('admin', { keys });
    assert.equal(ok.status, 201, ok.text);
    assert.deepEqual(ok.body, { hostId: h, pool: rf.f.config.defaultPool, created: true, rotated: false });
    assertNoSecrets(ok.text);
    assert.ok(!ok.text.includes(keys.signing));
    const conflict = await put('admin', { pool: 'other-pool', keys });
    assert.equal(conflict.status, 409);
    const same = await put('admin', { keys });
    assert.equal(same.status, 200, same.text);
    assert.deepEqual(same.body, { hostId: h, pool: rf.f.config.defaultPool, created: false, rotated: false });
    const other = { signing: 'c'.repeat(64), box: 'd'.repeat(64) };
    const unasked = await put('admin', { keys: other });
    assert.equal(unasked.status, 409, 'other keys for an enrolled host need rotate');
    assert.match(unasked.body.detail, /rotate/);
    const view = () => rf.f.client.workflow.getHandle(hostWorkflowId(h)).query(hostStateQuery);
    assert.equal((await view()).keys?.signing, keys.signing, 'nothing changed');
    const rotated = await put('admin', { keys: other, rotate: true });
    assert.equal(rotated.status, 200, rotated.text);
    assert.equal(rotated.body.rotated, true);
    await eventually(async () => ((await view()).keys?.signing === other.signing ? true : undefined), 'keys rotated');
  });

  it('definitions: add from a file, list and get', async () => {
    const name = uid('cli-def');
    const file = join(cwd, `${name}.json`);
    writeFileSync(file, JSON.stringify({ name, steps: [{ name: 'step1', command: ['echo', 'hi'] }] }));
    const a = await fleet(['definitions', 'add', file, '--json']);
    assert.equal(a.code, 0, a.stderr);
    assert.equal(a.json().name, name);
    const l = await fleet(['definitions', '--json']);
    assert.ok(l.json().items.some((d: { name: string }) => d.name === name));
    const g = await fleet(['definitions', name]);
    assert.equal(g.code, 0, g.stderr);
    assert.match(g.stdout, /step1/);
    assert.equal((await fleet(['definitions', 'add', file])).code, 0, 'the same definition again: no change');
    writeFileSync(file, JSON.stringify({ name, steps: [{ name: 'step2', command: ['true'] }] }));
    const conflict = await fleet(['definitions', 'add', file]);
    assert.equal(conflict.code, 2, 'a different definition under the same name needs --replace');
    assert.match(conflict.stderr, /409/);
    assert.match(conflict.stderr, /pass --replace/);
    assert.doesNotMatch(conflict.stderr, /use PUT/);
    const replaced = await fleet(['definitions', 'add', file, '--replace', '--json']);
    assert.equal(replaced.code, 0, replaced.stderr);
    assert.equal(replaced.json().steps[0].name, 'step2');
  });
});
