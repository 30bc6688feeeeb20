/**
 * Replay: workflow code must reproduce every history it ever recorded. The scheduler, device and
 * host workflows never end, so every deploy replays them, and so does every bounced
 * continue-as-new, cache eviction and worker restart. Two checks:
 *
 * 1. the histories of a scenario run now (every workflow kind, continue-as-new chains, retries,
 *    a lost lease, cancellations, operator signals and updates) replay from their first event
 *    under the same code;
 * 2. the histories recorded by earlier code, in test/fixtures/histories/<label>/, still replay.
 *    A change that breaks them needs a `patched()` branch (workflows/scheduler.ts has one) or,
 *    if running workflows really must be dropped, a new fixture set and a note in the README.
 *
 * `RECORD_HISTORIES=<label> npm run record-histories` runs check 1 and writes its histories as a new set.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { enrollHost, sendHostChange } from '../control-plane/hosts';
import { parseSignalKeys } from '../control-plane/signal-auth';
import { controlPlaneDataConverter, ensurePools } from '../control-plane/worker';
import { generateHostCredential, publicKeys } from '../host-worker/identity';
import { deviceWorkflowId, hostWorkflowId, schedulerWorkflowId, taskWorkflowId } from '../workflows/ids';
import {
  assignmentSignal,
  hostStateQuery,
  registerHostKeysSignal,
  retireHostSignal,
  setDeviceDrainSignal,
} from '../workflows/messages';
import { FleetKind, FleetPool } from '../workflows/search-attributes';
import { eventually, startFleet, type Fleet } from './helpers/fleet';
import { decodeFirst } from './helpers/invariants';
import { TEST_SIGNAL_KEYS, workflowBundle } from './setup';

const FIXTURES = join(__dirname, 'fixtures', 'histories');
const History = temporal.api.history.v1.History;

interface Recorded {
  workflowId: string;
  runId: string;
  history: temporal.api.history.v1.IHistory;
}

/** Every run of each workflow (continue-as-new chains included), from visibility. */
async function recordRuns(client: Client, workflowIds: string[]): Promise<Recorded[]> {
  const out: Recorded[] = [];
  for (const workflowId of workflowIds) {
    for await (const wf of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) {
      const history = await client.workflow.getHandle(workflowId, wf.runId).fetchHistory();
      out.push({ workflowId, runId: wf.runId, history });
    }
  }
  return out;
}

async function replayAll(histories: Recorded[]): Promise<string[]> {
  const failures: string[] = [];
  const results = Worker.runReplayHistories(
    { workflowBundle: workflowBundle(), dataConverter: controlPlaneDataConverter(parseSignalKeys(TEST_SIGNAL_KEYS)) },
    histories.map((h) => ({ workflowId: h.workflowId, history: h.history })),
  );
  for await (const r of results) {
    if (r.error) failures.push(`${r.workflowId} (${r.runId}): ${r.error.message}`);
  }
  return failures;
}

const kind = (workflowId: string) => workflowId.split('/')[0];
const kinds = (hs: Recorded[]) => [...new Set(hs.map((h) => kind(h.workflowId)))].sort();
const runsOf = (hs: Recorded[], k: string) => hs.filter((h) => kind(h.workflowId) === k).length;

describe('replay: workflow code reproduces its recorded histories', () => {
  const fleets: Fleet[] = [];
  afterEach(async () => {
    await Promise.all(fleets.splice(0).map((f) => f.stop()));
  });

  it('every history of a scenario run now replays from its first event', async function () {
    this.timeout(240_000);
    // A low history limit, so the scheduler, devices and hosts all continue-as-new.
    const f = await startFleet('replay', { historyLimit: 60 });
    fleets.push(f);
    await f.addHost('h1', [
      { deviceId: 'd1', driverType: 'android' },
      { deviceId: 'd2', driverType: 'android', tags: ['camera'] },
    ]);
    await f.addHost('h2', [{ deviceId: 'd1', driverType: 'ios' }]);
    const h3 = await f.spawnHost('h3', ['d1']); // a real process, SIGKILLed below: a lost lease
    const devices = [
      deviceWorkflowId(f.hostId('h1'), 'd1'),
      deviceWorkflowId(f.hostId('h1'), 'd2'),
      deviceWorkflowId(f.hostId('h2'), 'd1'),
      deviceWorkflowId(f.hostId('h3'), 'd1'),
    ];

    const tasks = {
      goal: await f.fleet.submit({ goal: 'open settings [sim duration=50]' }),
      tagged: await f.fleet.submit({ goal: 'take a photo [sim duration=50]', constraints: { tags: ['camera'] } }),
      definition: await f.fleet.submit({
        definition: {
          name: 'login',
          steps: [
            { name: 'open', command: ['open'] },
            { name: 'type', command: ['type'] },
          ],
        },
      }),
      retried: await f.fleet.submit({ goal: 'flaky [sim duration=50 outcome=fail-retryable]' }),
      failed: await f.fleet.submit({ goal: 'broken [sim duration=50 outcome=fail]' }),
      long: await f.fleet.submit({ goal: 'long [sim duration=60000]', constraints: { driverType: 'ios' } }),
    };
    const lost = await f.fleet.submit({ goal: 'lost [sim duration=60000]', constraints: { driverType: 'sim' } });
    await f.waitForStatus(tasks.long.taskId, 'running');
    await f.waitForStatus(lost.taskId, 'running');
    h3.kill('SIGKILL');
    await f.waitFor(lost.taskId, (t) => t.attempts[0]?.outcome === 'lease_expired', 'the lease to expire');
    await f.fleet.cancel(lost.taskId); // no other device matches: cancelled while queued for attempt 2
    await f.waitForStatus(lost.taskId, 'cancelled');
    const queued = await f.fleet.submit({ goal: 'waits [sim duration=50]', constraints: { driverType: 'ios' } });
    await f.fleet.cancel(queued.taskId);
    await f.waitForStatus(queued.taskId, 'cancelled');
    // A second hold for the long task's attempt (a pool round run again): released as it arrives.
    const longRun = (await f.fleet.get(tasks.long.taskId)).attempts[0];
    await f.client.workflow.getHandle(taskWorkflowId(tasks.long.taskId)).signal(assignmentSignal, {
      taskId: tasks.long.taskId,
      attempt: longRun.attempt,
      leaseId: longRun.leaseId,
      hostId: 'ghost-host',
      deviceId: 'g1',
      reservedAt: Date.now(),
      hostKeys: { signing: '00'.repeat(32), box: '00'.repeat(32) },
    });
    await eventually(async () => {
      const events = (await f.client.workflow.getHandle(taskWorkflowId(tasks.long.taskId)).fetchHistory()).events;
      for (const e of events ?? []) {
        const sig = e.signalExternalWorkflowExecutionInitiatedEventAttributes;
        if (sig?.signalName !== 'taskReleased') continue;
        if ((await decodeFirst<{ hostId?: string }>(f.client, sig.input?.payloads))?.hostId === 'ghost-host') return true;
      }
      return undefined;
    }, 'the stray released while the long task runs');
    await f.fleet.cancel(tasks.long.taskId);
    await f.waitForStatus(tasks.long.taskId, 'cancelled');

    // Operator traffic: drain a device and bring it back.
    await sendHostChange(f.client, f.hostId('h1'), setDeviceDrainSignal, { deviceId: 'd2', drained: true });
    await sendHostChange(f.client, f.hostId('h1'), setDeviceDrainSignal, { deviceId: 'd2', drained: false });

    for (const t of [tasks.goal, tasks.tagged, tasks.definition]) await f.waitForStatus(t.taskId, 'done');
    await f.waitForStatus(tasks.failed.taskId, 'failed');
    const retried = await f.fleet.wait(tasks.retried.taskId, { timeoutMs: 60_000 });
    assert.ok(retried.attempts.length > 1, 'the retryable failure was retried');

    // Short tasks until the scheduler has rolled over at least once.
    const scheduler = schedulerWorkflowId(f.pool);
    const more: string[] = [];
    await eventually(
      async () => {
        const t = await f.fleet.submit({ goal: 'filler [sim duration=1]' });
        more.push(t.taskId);
        // Bounded, so a filler that never ends names itself (eventually reports the last error).
        await f.fleet.wait(t.taskId, { timeoutMs: 30_000 });
        const runs = (await recordRuns(f.client, [scheduler])).length;
        return runs >= 2 ? runs : undefined;
      },
      'the scheduler to continue-as-new',
      120_000,
      0,
    );

    // A pool with the default history limit: its scheduler records the patch marker of its limit.
    const g = await startFleet('replay-default');
    fleets.push(g);
    await g.addHost('h1', [{ deviceId: 'd1' }]);
    const plain = await g.fleet.submit({ goal: 'plain [sim duration=1]' });
    await g.waitForStatus(plain.taskId, 'done');

    // g's scheduler is terminated with a task queued in it and started anew: the new run asks its
    // tasks to enqueue again and its hosts to publish again (recoverPool).
    const stranded = await g.fleet.submit({ goal: 'stranded [sim duration=1]', constraints: { driverType: 'nowhere' } });
    await g.client.workflow.getHandle(schedulerWorkflowId(g.pool)).terminate('replay scenario: scheduler lost');
    await ensurePools(g.client, g.config);
    await eventually(async () => {
      const v = await g.scheduler();
      return v.devices.length > 0 && v.queue.some((q) => q.taskId === stranded.taskId) ? true : undefined;
    }, "g's new scheduler run knows d1 and the stranded task");
    await g.fleet.cancel(stranded.taskId);
    await g.waitForStatus(stranded.taskId, 'cancelled');
    // g's device workflow is terminated: the next reservation finds it gone and its host starts it again.
    await g.client.workflow.getHandle(deviceWorkflowId(g.hostId('h1'), 'd1')).terminate('replay scenario: device lost');
    const restored = await g.fleet.submit({ goal: 'after the device came back [sim duration=1]' });
    await g.waitForStatus(restored.taskId, 'done', 60_000);

    // Operator key traffic on g's h1: other keys without rotate (ignored), then a rotation.
    const hostG1 = g.client.workflow.getHandle(hostWorkflowId(g.hostId('h1')));
    const rotatedTo = publicKeys(generateHostCredential(g.hostId('h1')));
    await hostG1.signal(registerHostKeysSignal, { keys: rotatedTo });
    await enrollHost(g.client, g.config, { hostId: g.hostId('h1'), pool: g.pool, keys: rotatedTo, rotate: true });
    await eventually(async () => (!(await hostG1.query(hostStateQuery)).online ? true : undefined), 'h1 of g offline');
    // A host removed: its device workflow and host workflow end.
    const removedHost = await g.addHost('h2', [{ deviceId: 'd1' }]);
    await removedHost.stop();
    const hostG2 = g.client.workflow.getHandle(hostWorkflowId(g.hostId('h2')));
    await eventually(async () => (!(await hostG2.query(hostStateQuery)).online ? true : undefined), 'h2 of g offline');
    await sendHostChange(g.client, g.hostId('h2'), retireHostSignal, { reason: 'replay scenario' });
    for (const id of [hostWorkflowId(g.hostId('h2')), deviceWorkflowId(g.hostId('h2'), 'd1')]) {
      await eventually(
        async () => ((await g.client.workflow.getHandle(id).describe()).status.name === 'COMPLETED' ? true : undefined),
        `${id} ended`,
      );
    }

    const taskIds = [...Object.values(tasks).map((t) => t.taskId), queued.taskId, lost.taskId, ...more, plain.taskId, stranded.taskId, restored.taskId];
    const hosts = ['h1', 'h2', 'h3'].map((h) => hostWorkflowId(f.hostId(h)));
    const ids = [scheduler, ...hosts, ...devices, schedulerWorkflowId(g.pool)];
    ids.push(hostWorkflowId(g.hostId('h1')), deviceWorkflowId(g.hostId('h1'), 'd1'));
    ids.push(hostWorkflowId(g.hostId('h2')), deviceWorkflowId(g.hostId('h2'), 'd1'));
    const recorded = await recordRuns(f.client, [...ids, ...taskIds.map(taskWorkflowId)]);
    // The recoveries the schedulers' fresh runs started (workflows/recovery.ts).
    const recoveries = recorded.flatMap((h) =>
      (h.history.events ?? []).flatMap((e) => {
        const id = e.startChildWorkflowExecutionInitiatedEventAttributes?.workflowId;
        return id ? [id] : [];
      }),
    );
    const histories = [...recorded, ...(await recordRuns(f.client, recoveries))];
    const patches = (h: Recorded) =>
      (h.history.events ?? []).flatMap((e) => {
        const data = e.markerRecordedEventAttributes?.details?.['patch-data']?.payloads?.[0]?.data;
        return data ? [JSON.parse(Buffer.from(data).toString()).id as string] : [];
      });
    assert.ok(
      histories.some(
        (h) => h.workflowId === schedulerWorkflowId(g.pool) && patches(h).includes('scheduler-rollover-v2'),
      ),
      'patch marker',
    );
    assert.deepEqual(kinds(histories), ['device', 'host', 'recovery', 'scheduler', 'task']);
    assert.ok(runsOf(histories, 'scheduler') >= 2);
    // A rolled-over scheduler no longer upserts its search attributes: they came with continue-as-new.
    const sa = (await f.client.workflow.getHandle(scheduler).describe()).typedSearchAttributes;
    assert.equal(sa.get(FleetPool), f.pool);
    assert.equal(sa.get(FleetKind), 'scheduler');
    assert.ok(runsOf(histories, 'host') > 2, 'hosts continued-as-new');
    assert.ok(runsOf(histories, 'device') > devices.length, 'devices continued-as-new');

    const failures = await replayAll(histories);
    assert.deepEqual(failures, [], `histories that no longer replay:\n${failures.join('\n')}`);

    const label = process.env.RECORD_HISTORIES;
    if (label) {
      const dir = join(FIXTURES, label.replace(/[^A-Za-z0-9._-]+/g, '-'));
      mkdirSync(dir, { recursive: true });
      histories.forEach((h, i) => {
        const name = `${String(i).padStart(3, '0')}-${kind(h.workflowId)}.json`;
        const json = { workflowId: h.workflowId, runId: h.runId, history: History.fromObject(h.history).toJSON() };
        writeFileSync(join(dir, name), JSON.stringify(json));
      });
    }
  });

  it('histories recorded by earlier code still replay (test/fixtures/histories)', async function () {
    this.timeout(180_000);
    const sets = readdirSync(FIXTURES, { withFileTypes: true }).filter((d) => d.isDirectory());
    assert.ok(sets.length > 0, 'no recorded history sets');
    for (const set of sets) {
      const dir = join(FIXTURES, set.name);
      const histories: Recorded[] = readdirSync(dir)
        .filter((n) => n.endsWith('.json'))
        .map((n) => {
          const j = JSON.parse(readFileSync(join(dir, n), 'utf8'));
          return { workflowId: j.workflowId, runId: j.runId, history: History.fromObject(j.history) };
        });
      // Sets from 2026-12-03c on also hold the pool recoveries their schedulers started.
      const expected = ['device', 'host', 'scheduler', 'task'];
      const got = kinds(histories);
      assert.deepEqual(got.includes('recovery') ? got.filter((k) => k !== 'recovery') : got, expected, `set ${set.name}`);
      const failures = await replayAll(histories);
      assert.deepEqual(failures, [], `set ${set.name}: histories that no longer replay:\n${failures.join('\n')}`);
    }
  });
});
