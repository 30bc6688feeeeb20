/** GET /metrics on the REST app: Prometheus text with the pool's queue and the task outcomes, read from Temporal. */
import assert from 'node:assert/strict';
import request from 'supertest';
import { eventually } from './helpers/fleet';
import { startRestFleet, type RestFleet } from './rest/helpers';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The text exposition format: `name{a="x",b="y"} value` per line; `#` lines are HELP / TYPE. */
function parseMetrics(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

function value(samples: Sample[], name: string, labels: Record<string, string>): number | undefined {
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
}

describe('GET /metrics', () => {
  let r: RestFleet | undefined;
  afterEach(async () => {
    await r?.stop();
    r = undefined;
  });

  it('exposes queue depth, oldest wait, scheduler counters and task outcomes per pool, unauthenticated', async () => {
    r = await startRestFleet('metrics');
    const { f, app } = r;
    const pool = f.pool;
    await f.addHost('h1', [{ deviceId: 'd1', driverType: 'android' }]);
    const ok = await f.fleet.submit({ goal: 'quick [sim duration=50]', constraints: { driverType: 'android' } });
    const bad = await f.fleet.submit({ goal: 'broken [sim outcome=fail]', constraints: { driverType: 'android' } });
    await f.waitForStatus(ok.taskId, 'done');
    await f.waitForStatus(bad.taskId, 'failed');
    // No ios device in the pool: these two wait in the queue.
    await f.fleet.submit({ goal: 'needs ios', constraints: { driverType: 'ios' } });
    await f.fleet.submit({ goal: 'needs ios too', constraints: { driverType: 'ios' } });

    const samples = await eventually(
      async () => {
        const res = await request(app).get('/metrics');
        assert.equal(res.status, 200);
        assert.match(String(res.headers['content-type']), /^text\/plain; version=0\.0\.4/);
        const s = parseMetrics(res.text);
        const seen = (status: string) => value(s, 'fleet_tasks', { pool, status });
        // The device's release reaches the scheduler asynchronously after the task ended.
        const released = value(s, 'fleet_device_releases_total', { pool }) === 2;
        return seen('done') === 1 && seen('failed') === 1 && seen('queued') === 2 && released ? s : undefined;
      },
      'task outcomes in /metrics',
      30_000,
      500,
    );
    assert.equal(value(samples, 'fleet_scheduler_up', { pool }), 1);
    assert.equal(value(samples, 'fleet_visibility_up', { pool }), 1);
    assert.equal(value(samples, 'fleet_queue_depth', { pool }), 2);
    const wait = value(samples, 'fleet_queue_oldest_wait_seconds', { pool });
    assert.ok(wait !== undefined && wait > 0 && wait < 60, `oldest wait ${wait}`);
    assert.equal(value(samples, 'fleet_admissions_total', { pool }), 4);
    assert.equal(value(samples, 'fleet_admissions_rejected_total', { pool }), 0);
    assert.equal(value(samples, 'fleet_assignments_total', { pool }), 2);
    assert.equal(value(samples, 'fleet_device_releases_total', { pool }), 2);
    assert.equal(value(samples, 'fleet_devices', { pool, reserved: 'false' }), 1);
    assert.equal(value(samples, 'fleet_devices', { pool, reserved: 'true' }), 0);
    for (const status of ['running', 'cancelled', 'rejected']) {
      assert.equal(value(samples, 'fleet_tasks', { pool, status }), 0, status);
    }
    assert.equal(value(samples, 'fleet_tasks_retried', { pool }), 0);
    assert.equal(value(samples, 'fleet_attempts_ended_total', { pool, outcome: 'done', reason: '' }), 1);
    assert.equal(value(samples, 'fleet_attempts_ended_total', { pool, outcome: 'failed', reason: 'runner_failed' }), 1);

    // A pool only a host names (not configured) is reported too, once its scheduler runs.
    const lab = `${pool}-lab`;
    await f.addHost('h2', [{ deviceId: 'l1', pool: lab }]);
    await eventually(async () => {
      const s = parseMetrics((await request(app).get('/metrics')).text);
      return value(s, 'fleet_scheduler_up', { pool: lab }) === 1 &&
        value(s, 'fleet_devices', { pool: lab, reserved: 'false' }) === 1
        ? true
        : undefined;
    }, 'the host pool in /metrics');
  });
});
