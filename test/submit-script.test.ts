/**
 * `npm run submit` (scripts/submit.ts) as a real process against a test fleet: it must answer like
 * REST and the `fleet` CLI (ISO times, the CLI's exit codes, a reused task id refused).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { presentTask } from '../control-plane/rest/tasks/present';
import { eventually, startFleet, uid, type Fleet } from './helpers/fleet';
import { testEnv } from './setup';

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout's JSON lines. */
  lines: Array<Record<string, any>>; // eslint-disable-line @typescript-eslint/no-explicit-any
}

const SCRIPT = join(__dirname, '..', 'scripts', 'submit.ts');
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

describe('npm run submit (scripts/submit.ts)', () => {
  let f: Fleet;
  let configPath: string;

  before(async () => {
    f = await startFleet('submit-script');
    await f.addHost('h1', [
      { deviceId: 'd1', driverType: 'android' },
      { deviceId: 'd2', driverType: 'android' },
    ]);
    configPath = join(mkdtempSync(join(tmpdir(), 'fleet-submit-')), 'control.json');
    writeFileSync(configPath, JSON.stringify(f.config));
  });
  after(async () => f?.stop());

  function submit(args: string[], env: Record<string, string> = {}): Promise<Ran> {
    const e = testEnv();
    const childEnv: NodeJS.ProcessEnv = {
      ...process.env,
      TEMPORAL_ADDRESS: e.address,
      TEMPORAL_NAMESPACE: e.namespace ?? 'default',
      FLEET_CONFIG: configPath,
      ...env,
    };
    delete childEnv.FLEET_TASK_QUEUE;
    delete childEnv.FLEET_STRATEGY;
    const child = spawn(process.execPath, ['--import', 'tsx', SCRIPT, ...args], {
      env: childEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b) => (stdout += b.toString()));
    child.stderr.on('data', (b) => (stderr += b.toString()));
    return new Promise((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code) => {
        const lines = stdout
          .split('\n')
          .filter((l) => l.startsWith('{'))
          .map((l) => JSON.parse(l));
        resolve({ code, stdout, stderr, lines });
      });
    });
  }

  const show = (r: Ran) => `exit ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;

  it('prints the finished task with ISO 8601 times, like REST and the CLI (exit 0 done)', async () => {
    const taskId = uid('iso');
    const r = await submit([
      '--goal',
      'hello [sim duration=50]',
      '--driver-type',
      'android',
      '--task-id',
      taskId,
      '--wait',
    ]);
    assert.equal(r.code, 0, show(r));
    assert.deepEqual(r.lines[0], { taskId, status: 'queued' }, show(r));
    const end = r.lines[1];
    assert.equal(end.status, 'done', show(r));
    assert.equal(end.attempts, 1);
    assert.equal(typeof end.result.finishedAt, 'string', show(r));
    assert.match(end.result.finishedAt, ISO);
    // Exactly what REST shows for the task (the CLI prints REST's resource).
    const recorded = await f.fleet.get(taskId);
    assert.deepEqual(end.result, JSON.parse(JSON.stringify(presentTask(recorded).result)));
  });

  it('exits 3 for a cancelled task and 1 for a failed one, like the CLI', async () => {
    const taskId = uid('cancel');
    const running = submit(['--goal', 'long [sim outcome=hang duration=100]', '--task-id', taskId, '--wait']);
    await eventually(
      async () => ((await f.fleet.get(taskId).catch(() => undefined))?.status === 'running' ? true : undefined),
      `task ${taskId} running`,
      60_000,
    );
    await f.fleet.cancel(taskId);
    const cancelled = await running;
    assert.equal(cancelled.code, 3, show(cancelled));
    assert.equal(cancelled.lines[1]?.status, 'cancelled', show(cancelled));
    assert.match(cancelled.lines[1].result.finishedAt, ISO);

    const failed = await submit(['--goal', 'broken [sim outcome=fail duration=50]', '--wait']);
    assert.equal(failed.code, 1, show(failed));
    assert.equal(failed.lines[1]?.status, 'failed', show(failed));
  });

  it('refuses a task id reused for a different request (exit 2) and returns the task for an identical repeat', async () => {
    const taskId = uid('same');
    const args = ['--goal', 'first [sim duration=50]', '--driver-type', 'android', '--task-id', taskId];
    const first = await submit([...args, '--wait']);
    assert.equal(first.code, 0, show(first));
    assert.equal(first.lines[1]?.status, 'done', show(first));

    // The same request again: the existing task, nothing run again.
    const repeat = await submit(args);
    assert.equal(repeat.code, 0, show(repeat));
    assert.deepEqual(repeat.lines, [{ taskId, status: 'done' }], show(repeat));

    for (const [what, other] of [
      ['work', ['--goal', 'second [sim duration=50]', '--driver-type', 'android', '--task-id', taskId]],
      ['constraints', [...args, '--tag', 'camera']],
      ['priority', [...args, '--priority', '5']],
    ] as const) {
      const r = await submit([...other]);
      assert.equal(r.code, 2, `${what}: ${show(r)}`);
      assert.deepEqual(r.lines, [], `${what}: nothing printed as submitted\n${show(r)}`);
      assert.match(r.stderr, new RegExp(`task id ${taskId} was already used for a different request`), show(r));
      assert.match(r.stderr, new RegExp(`differs in: ${what}`), show(r));
    }
    const after = await f.fleet.get(taskId);
    assert.deepEqual(after.work, { kind: 'goal', goal: 'first [sim duration=50]' });
    assert.equal(after.attempts.length, 1);
  });

  it('exits 2 for a usage error and 5 when Temporal cannot be reached, like the CLI', async () => {
    const usage = await submit(['--goal', 'x', '--no-such-option']);
    assert.equal(usage.code, 2, show(usage));
    const badPriority = await submit(['--goal', 'x', '--priority', 'high']);
    assert.equal(badPriority.code, 2, show(badPriority));
    assert.match(badPriority.stderr, /--priority must be an integer/, show(badPriority));

    const down = await submit(['--goal', 'x'], { TEMPORAL_ADDRESS: '127.0.0.1:1' });
    assert.equal(down.code, 5, show(down));
    assert.match(down.stderr, /cannot connect to Temporal at 127\.0\.0\.1:1/, show(down));
  });
});
