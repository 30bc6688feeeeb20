/**
 * Seed 002 host-agent behaviour on the real server: complete snapshots per host, liveness,
 * health, drain, and outbound-only operation.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { temporal } from '@temporalio/proto';
import { enrollHost, sendHostChange } from '../control-plane/hosts';
import { generateHostCredential, publicKeys, saveHostCredential } from '../host-worker/identity';
import { hostWorkflowId } from '../workflows/ids';
import { hostStateQuery, setDeviceDrainSignal, setHostDrainSignal } from '../workflows/messages';
import { spawn, type ChildProcess } from 'node:child_process';
import { Journal, type JournalEntry } from '../host-worker/journal';
import type { Runners } from '../host-worker/runners';
import { createSimRunners, simDevices, type SimDeviceSpec } from '../host-worker/sim';
import { eventually, sessionRunning, startFleet, uid, type Fleet } from './helpers/fleet';
import { spawnHost as spawnHostProcess, type HostProcess } from './helpers/processes';
import { testEnv } from './setup';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** TCP sockets in LISTEN state that belong to a process (from /proc: socket inodes x /proc/net/tcp*). */
function listeningSockets(pid: number): string[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]);
    } catch {
      // fd closed meanwhile
    }
  }
  const listening: string[] = [];
  for (const table of ['tcp', 'tcp6', 'udp', 'udp6']) {
    let lines: string[];
    try {
      lines = readFileSync(`/proc/${pid}/net/${table}`, 'utf8').trim().split('\n').slice(1);
    } catch {
      continue;
    }
    for (const line of lines) {
      const cols = line.trim().split(/\s+/);
      const [local, state, inode] = [cols[1], cols[3], cols[9]] as const;
      const isListen = table.startsWith('tcp') ? state === '0A' : true;
      if (isListen && inodes.has(inode)) listening.push(`${table} ${local}`);
    }
  }
  return listening;
}

describe('host agent (seed 002)', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  const poolDevices = async () => (await f!.scheduler()).devices.map((d) => `${d.hostId}/${d.deviceId}`).sort();

  it('Host reports devices / reports no devices: a complete snapshot replaces only that host’s devices', async () => {
    f = await startFleet('snapshots');
    const a = await f.addHost('A', [{ deviceId: 'a1' }, { deviceId: 'a2' }]);
    await f.addHost('B', [{ deviceId: 'b1' }]);
    const A = f.hostId('A');
    const B = f.hostId('B');
    await eventually(async () => ((await poolDevices()).length === 3 ? true : undefined), 'three devices');
    await a.setDevices([]);
    await eventually(
      async () => (JSON.stringify(await poolDevices()) === JSON.stringify([`${B}/b1`]) ? true : undefined),
      'only B remains',
    );
    const hostA = await f.client.workflow.getHandle(hostWorkflowId(A)).query(hostStateQuery);
    assert.equal(hostA.devices.length, 0);
    assert.ok(hostA.lastSeenAt! > 0);
  });

  it('A host silent past its timeout goes offline (not assignable) and comes back online on its next snapshot', async () => {
    f = await startFleet('liveness');
    const a = await f.spawnHost('A', ['a1'], { hostTimeoutMs: 1_500 });
    const hostA = f.client.workflow.getHandle(hostWorkflowId(f.hostId('A')));
    await eventually(async () => ((await hostA.query(hostStateQuery)).online ? true : undefined), 'online');
    a.pause();
    await eventually(async () => (!(await hostA.query(hostStateQuery)).online ? true : undefined), 'offline');
    await eventually(
      async () => ((await f!.scheduler()).devices[0]?.hostOnline === false ? true : undefined),
      'pool sees offline',
    );
    const { taskId } = await f.fleet.submit({ goal: 'x [sim duration=50]' });
    await sleep(1_000);
    assert.equal((await f.fleet.get(taskId)).status, 'queued', 'an offline host gets nothing');
    a.resume();
    await eventually(async () => ((await hostA.query(hostStateQuery)).online ? true : undefined), 'online again');
    await f.waitForStatus(taskId, 'done');
  });

  it('Liveness is the session lease, not the snapshots: a frozen host goes offline within 1.5 leases, and beats write no history', async () => {
    f = await startFleet('session-lease');
    // Snapshots a minute apart and a snapshot timeout of three: only the session can notice in seconds.
    const a = await f.spawnHost('A', ['a1'], { hostTimeoutMs: 1_500, snapshotIntervalMs: 60_000 });
    const hostA = f.client.workflow.getHandle(hostWorkflowId(f.hostId('A')));
    await eventually(async () => ((await hostA.query(hostStateQuery)).online ? true : undefined), 'online');
    await eventually(() => sessionRunning(hostA), 'session running');
    const before = (await hostA.fetchHistory()).events!.length;
    // Three leases' worth of beats (the SDK sends about one per 1.2 s here), and no snapshot due.
    await sleep(4_500);
    const after = (await hostA.fetchHistory()).events!.length;
    assert.ok(after - before <= 1, `host history grew by ${after - before} events while idle`);
    assert.equal((await hostA.query(hostStateQuery)).online, true, 'beats keep it online');
    a.pause(); // SIGSTOP: no beats
    await eventually(async () => (!(await hostA.query(hostStateQuery)).online ? true : undefined), 'offline');
    const down = await hostA.query(hostStateQuery);
    assert.ok(Date.now() - down.lastSeenAt! < 60_000, 'offline long before a snapshot was even due');
    // Resumed, the host learns its session was lost (the server refuses its next beat) and sends a
    // snapshot at once, a minute before its next periodic one.
    a.resume();
    await eventually(async () => ((await hostA.query(hostStateQuery)).online ? true : undefined), 'online again');
  });

  it('A host that stops cleanly goes offline at once, not after its lease', async () => {
    f = await startFleet('session-stop');
    const host = await f.addHost('A', [{ deviceId: 'a1' }], { hostTimeoutMs: 120_000, snapshotIntervalMs: 60_000 });
    const hostA = f.client.workflow.getHandle(hostWorkflowId(f.hostId('A')));
    await eventually(async () => ((await hostA.query(hostStateQuery)).online ? true : undefined), 'online');
    await eventually(() => sessionRunning(hostA), 'session running');
    await host.stop();
    await eventually(async () => (!(await hostA.query(hostStateQuery)).online ? true : undefined), 'offline');
    await eventually(
      async () => ((await f!.scheduler()).devices[0]?.hostOnline === false ? true : undefined),
      'pool sees offline',
    );
  });

  it('A host workflow that continues-as-new hands its session over: the old run ends it first, and the host stays online', async () => {
    // Snapshots every 200 ms fill a 30-event history in seconds.
    f = await startFleet('session-handoff', { historyLimit: 30 });
    const logs: string[] = [];
    await f.addHost('A', [{ deviceId: 'a1' }], {
      hostTimeoutMs: 3_000,
      snapshotIntervalMs: 200,
      log: (message) => logs.push(message),
    });
    const hostA = f.client.workflow.getHandle(hostWorkflowId(f.hostId('A')));
    const firstRunId = (await hostA.describe()).runId;
    await eventually(() => sessionRunning(hostA), 'session running');
    await eventually(
      async () => ((await hostA.describe()).runId !== firstRunId ? true : undefined),
      'continued as new',
      30_000,
    );
    const EventType = temporal.api.enums.v1.EventType;
    const events = (await f.client.workflow.getHandle(hostA.workflowId, firstRunId).fetchHistory()).events!;
    const sessions = new Map<string, number>();
    for (const e of events) {
      const a = e.activityTaskScheduledEventAttributes;
      if (a?.activityType?.name === 'hostSession') sessions.set(String(e.eventId), 0);
    }
    assert.ok(sessions.size >= 1, 'the first run held a session');
    const closes = events.filter((e) => {
      const scheduled =
        e.activityTaskCompletedEventAttributes?.scheduledEventId ??
        e.activityTaskFailedEventAttributes?.scheduledEventId ??
        e.activityTaskTimedOutEventAttributes?.scheduledEventId ??
        e.activityTaskCanceledEventAttributes?.scheduledEventId;
      return scheduled !== undefined && scheduled !== null && sessions.has(String(scheduled));
    });
    assert.equal(closes.length, sessions.size, 'every session of the run ended before the run did');
    assert.ok(
      closes.some((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED),
      'the last one was cancelled at the hand-over',
    );
    assert.equal(events.at(-1)!.eventType, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW);
    // The next run opens its own session, and the host never looked offline or lost.
    await eventually(() => sessionRunning(hostA), 'session running in the next run');
    assert.equal((await hostA.query(hostStateQuery)).online, true);
    assert.ok(logs.includes("liveness session handed over to the host workflow's next run"), logs.join(' | '));
    assert.ok(!logs.some((m) => m.startsWith('liveness session lost')), logs.join(' | '));
    const { taskId } = await f.fleet.submit({ goal: 'after the hand-over [sim duration=50]' });
    assert.equal((await f.fleet.wait(taskId, { timeoutMs: 30_000 })).status, 'done');
  });

  it('Devices found after start-up get activity slots: a host that started empty runs four tasks at once', async () => {
    f = await startFleet('slots-grow');
    const host = await f.addHost('A', []); // no devices yet: slots for one assignment and the session
    const dev = (deviceId: string) => ({
      deviceId,
      driverType: 'sim',
      tags: [],
      state: 'idle' as const,
      health: 'good' as const,
    });
    await host.setDevices(['a1', 'a2', 'a3', 'a4'].map(dev));
    await eventually(async () => ((await f!.scheduler()).devices.length === 4 ? true : undefined), 'four devices');
    const ids = await Promise.all(
      [1, 2, 3, 4].map(async (i) => (await f!.fleet.submit({ goal: `t${i} [sim duration=4000]` })).taskId),
    );
    // All four run at the same time: with slots fixed at start-up two would wait in the queue.
    await eventually(
      async () => {
        const ts = await Promise.all(ids.map((id) => f!.fleet.get(id)));
        return ts.every((t) => t.status === 'running') ? true : undefined;
      },
      'four tasks running at once',
      20_000,
      100,
    );
    await Promise.all(ids.map((id) => f!.waitForStatus(id, 'done', 30_000)));
  });

  it('An unhealthy device is out of rotation until its health check passes again', async () => {
    f = await startFleet('health');
    const host = await f.addHost('A', [{ deviceId: 'a1', health: 'unhealthy' }]);
    const { taskId } = await f.fleet.submit({ goal: 'x [sim duration=50]' });
    await eventually(async () => ((await f!.scheduler()).devices.length === 1 ? true : undefined), 'device known');
    await sleep(1_000);
    assert.equal((await f.fleet.get(taskId)).status, 'queued');
    await host.setDevices([{ deviceId: 'a1', driverType: 'sim', tags: [], state: 'idle', health: 'good' }]);
    await f.waitForStatus(taskId, 'done');
  });

  it('A run whose processes outlive SIGKILL keeps its device out of rotation, and journaled, until they are gone', async () => {
    f = await startFleet('left-behind');
    const journal = await Journal.open(join(mkdtempSync(join(tmpdir(), 'fleet-left-')), 'journal.json'));
    const sim = createSimRunners();
    let group: ChildProcess | undefined;
    // Stands in for the command runner's report (runProcess onSurvivors -> ctx.leftBehind): a
    // process that survives SIGKILL (uninterruptible sleep) cannot be made on purpose here.
    const runners: Runners = {
      ...sim,
      goal: {
        async runGoal(goal, ctx) {
          if (goal !== 'leave a process') return sim.goal.runGoal(goal, ctx);
          group = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
          await new Promise((r) => group!.once('spawn', r));
          ctx.started();
          ctx.leftBehind?.(group.pid!);
          return { status: 'failed', retryable: false, reason: 'exit_code_1', message: 'left a process behind' };
        },
      },
    };
    await f.addHost('L', [{ deviceId: 'l1' }], { runners, journal });
    try {
      const first = await f.fleet.submit({ goal: 'leave a process' });
      await f.waitForStatus(first.taskId, 'failed');
      assert.deepEqual(
        journal.entries().map((e) => [e.taskId, e.pid]),
        [[first.taskId, group!.pid]],
        'the attempt stays journaled, with the group that lives on',
      );
      await eventually(
        async () =>
          (await f!.scheduler()).devices.find((d) => d.deviceId === 'l1')?.state === 'offline' ? true : undefined,
        'l1 reported offline',
      );
      const second = await f.fleet.submit({ goal: 'x [sim duration=50]' });
      await sleep(1_500);
      assert.equal((await f.fleet.get(second.taskId)).status, 'queued', 'nothing runs on l1 while the group lives');
      process.kill(-group!.pid!, 'SIGKILL');
      await f.waitForStatus(second.taskId, 'done', 20_000);
      assert.deepEqual(
        journal.entries().filter((e) => e.taskId === first.taskId),
        [],
        'the entry goes with the group',
      );
    } finally {
      try {
        if (group?.pid) process.kill(-group.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });

  it('Discovery that keeps failing: the devices the host can no longer see are reported unhealthy (no work) until it works again', async () => {
    f = await startFleet('discovery-fails');
    const device = { deviceId: 'a1', driverType: 'sim', tags: [], state: 'idle' as const, health: 'good' as const };
    let failing = false;
    let calls = 0;
    const driver = {
      type: 'test',
      discover: async () => {
        calls++;
        if (failing) throw new Error('adb devices -l timed out');
        return [{ ...device }];
      },
    };
    const logged: string[] = [];
    await f.addHost('A', [], {
      driver,
      discoveryIntervalMs: 100,
      discoveryFailuresBeforeUnhealthy: 3,
      log: (message) => logged.push(message),
    });
    const health = async () => (await f!.scheduler()).devices.find((d) => d.deviceId === 'a1')?.health;
    await eventually(async () => ((await health()) === 'good' ? true : undefined), 'device good');
    failing = true;
    const failedFrom = calls;
    await eventually(async () => ((await health()) === 'unhealthy' ? true : undefined), 'device unhealthy', 20_000);
    assert.ok(calls - failedFrom >= 3, `only after 3 failed discoveries in a row (${calls - failedFrom})`);
    assert.ok(
      logged.includes('device discovery keeps failing: its devices are reported unhealthy until it works again'),
    );
    const { taskId } = await f.fleet.submit({ goal: 'x [sim duration=50]' });
    await sleep(1_000);
    assert.equal((await f.fleet.get(taskId)).status, 'queued', 'a device the host cannot see gets nothing');
    failing = false;
    const done = await f.waitForStatus(taskId, 'done');
    assert.equal(done.attempts.length, 1, 'no attempt was burnt on the unseen device');
    assert.equal(await health(), 'good');
    assert.ok(logged.includes('device discovery works again: its devices are reported as found'));
  });

  it('Hot-plug through discovery: a device unplugged mid-run leaves the pool at the next tick (its task still ends once), one plugged in gets work, without waiting for the periodic snapshot', async () => {
    f = await startFleet('hotplug');
    let found: SimDeviceSpec[] = [{ deviceId: 'a1', tags: ['camera'] }];
    const driver = { type: 'test', discover: async () => simDevices(found) };
    // A periodic snapshot a minute apart: every change below must go out because discovery saw it.
    await f.addHost('A', [], { driver, discoveryIntervalMs: 200, snapshotIntervalMs: 60_000 });
    const A = f.hostId('A');
    const sameAs = (want: string[]) => async () =>
      JSON.stringify(await poolDevices()) === JSON.stringify(want.map((d) => `${A}/${d}`)) ? true : undefined;
    await eventually(sameAs(['a1']), 'a1 known', 15_000);

    const first = await f.fleet.submit({ goal: 'long [sim duration=4000]', constraints: { tags: ['camera'] } });
    await f.waitForStatus(first.taskId, 'running', 15_000);
    found = [{ deviceId: 'a2' }]; // a1 unplugged while it runs, a2 plugged in
    await eventually(sameAs(['a2']), 'the pool sees a1 gone and a2 found', 15_000);

    const camera = await f.fleet.submit({
      goal: 'needs the camera [sim duration=50]',
      constraints: { tags: ['camera'] },
    });
    const other = await f.fleet.submit({ goal: 'anything [sim duration=50]' });
    const ranOther = await f.waitForStatus(other.taskId, 'done', 20_000);
    assert.deepEqual(
      ranOther.attempts.map((a) => a.deviceId),
      ['a2'],
      'the task went to the device plugged in, not the one unplugged',
    );
    const ranFirst = await f.waitForStatus(first.taskId, 'done', 20_000);
    assert.deepEqual(
      ranFirst.attempts.map((a) => a.deviceId),
      ['a1'],
      'the run on the unplugged device ends with its one result, no retry',
    );
    await sleep(1_000);
    assert.equal(
      (await f.fleet.get(camera.taskId)).status,
      'queued',
      'nothing runs on a device the host no longer finds',
    );

    found = [{ deviceId: 'a1', tags: ['camera'] }, { deviceId: 'a2' }]; // a1 plugged back in
    const ranCamera = await f.waitForStatus(camera.taskId, 'done', 20_000);
    assert.deepEqual(
      ranCamera.attempts.map((a) => a.deviceId),
      ['a1'],
    );
    assert.deepEqual(await poolDevices(), [`${A}/a1`, `${A}/a2`]);
  });

  it('Drain / undrain a host and a device: no new assignments, running work finishes', async () => {
    f = await startFleet('drain');
    await f.addHost('A', [{ deviceId: 'a1' }, { deviceId: 'a2' }]);
    const running = await f.fleet.submit({ goal: 'running [sim duration=2500]', constraints: { deviceId: 'a1' } });
    await f.waitForStatus(running.taskId, 'running');
    await sendHostChange(f.client, f.hostId('A'), setHostDrainSignal, { drained: true });
    await eventually(
      async () => ((await f!.scheduler()).devices.every((d) => d.hostDrained) ? true : undefined),
      'drained',
    );
    const waiting = await f.fleet.submit({ goal: 'waiting [sim duration=50]' });
    assert.equal((await f.fleet.wait(running.taskId)).status, 'done', 'running work finishes while drained');
    await sleep(500);
    assert.equal((await f.fleet.get(waiting.taskId)).status, 'queued', 'no new assignment on a drained host');
    // Undrain the host but drain device a2: the waiting task may only get a1.
    await sendHostChange(f.client, f.hostId('A'), setDeviceDrainSignal, { deviceId: 'a2', drained: true });
    await sendHostChange(f.client, f.hostId('A'), setHostDrainSignal, { drained: false });
    const done = await f.fleet.wait(waiting.taskId);
    assert.equal(done.status, 'done');
    assert.equal(done.attempts[0].deviceId, 'a1');
    const pinned = await f.fleet.submit({ goal: 'pinned [sim duration=50]', constraints: { deviceId: 'a2' } });
    await sleep(1_000);
    assert.equal((await f.fleet.get(pinned.taskId)).status, 'queued', 'a drained device gets nothing');
    await sendHostChange(f.client, f.hostId('A'), setDeviceDrainSignal, { deviceId: 'a2', drained: false });
    await f.waitForStatus(pinned.taskId, 'done');
    // The operator's drains, tagged by the control plane, sent again later by anyone: ignored
    // (each names a version the host has passed), so a2 and the host stay undrained.
    const host = f.client.workflow.getHandle(hostWorkflowId(f.hostId('A')));
    for (const e of (await host.fetchHistory()).events ?? []) {
      const sig = e.workflowExecutionSignaledEventAttributes;
      if (sig?.signalName !== 'setDeviceDrain' && sig?.signalName !== 'setHostDrain') continue;
      await testEnv().client.workflowService.signalWorkflowExecution({
        namespace: testEnv().namespace ?? 'default',
        workflowExecution: { workflowId: hostWorkflowId(f.hostId('A')) },
        signalName: sig.signalName,
        input: sig.input,
      });
    }
    const after = await host.query(hostStateQuery);
    assert.deepEqual([after.drained, after.drainedDevices], [false, []]);
  });

  it('Host is behind NAT: the host process opens no listening socket and still runs work', async () => {
    f = await startFleet('nat');
    const a = await f.spawnHost('A', ['a1']);
    const { taskId } = await f.fleet.submit({ goal: 'x [sim duration=300]' });
    await f.waitForStatus(taskId, 'done');
    assert.deepEqual(listeningSockets(a.child.pid!), []);
    // The check can see a listener when there is one: open one in this process and look.
    const { createServer } = await import('node:net');
    const server = createServer().listen(0, '127.0.0.1');
    await new Promise((r) => server.once('listening', r));
    try {
      assert.ok(listeningSockets(process.pid).length >= 1, 'the socket check detects a listener');
    } finally {
      server.close();
    }
  });
});

describe('host journal and restart (seed 004)', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  it('On host restart, an attempt whose process is gone is reported failed (retryable) at once, not at lease expiry', async () => {
    f = await startFleet('journal');
    const first = await f.spawnHost('A', ['a1'], { hostTimeoutMs: 60_000 });
    const { taskId } = await f.fleet.submit({
      goal: 'long [sim outcome=hang duration=300]',
      policy: { leaseTimeoutMs: 60_000 }, // waiting for the lease would take a minute
    });
    await f.waitForStatus(taskId, 'running');
    const journal = JSON.parse(
      readFileSync(join(dirname(f.hostConfigPath('A')!), `${f.hostId('A')}.journal.json`), 'utf8'),
    );
    assert.equal(journal.entries.length, 1, 'the active assignment was journaled before it ran');
    assert.equal(journal.entries[0].taskId, taskId);
    first.kill('SIGKILL');
    const killedAt = Date.now();
    await f.spawnHost('A', ['a1'], { restart: true });
    const t = await f.waitFor(taskId, (v) => v.attempts[0]?.outcome !== undefined, 'attempt 1 ended', 30_000);
    assert.ok(Date.now() - killedAt < 30_000, 'well before the 60 s lease');
    assert.equal(t.attempts[0].outcome, 'retryable_failure');
    assert.equal(t.attempts[0].reason, 'host_restarted');
    await f.waitFor(taskId, (v) => v.status === 'running' && v.current?.attempt === 2, 'attempt 2 running');
    await f.fleet.cancel(taskId);
  });

  it('On host restart, a command runner the crashed process left behind is stopped: the recorded pid with its identity, never another process', async () => {
    f = await startFleet('journal-pid');
    const first = await f.spawnHost('P', ['p1'], {
      hostTimeoutMs: 60_000,
      config: {
        runner: { type: 'command', command: ['sleep', '120'], goalAs: 'env', killGraceMs: 500 },
      },
    });
    const { taskId } = await f.fleet.submit({ goal: 'sleeps', policy: { leaseTimeoutMs: 60_000 } });
    const journalPath = join(dirname(f.hostConfigPath('P')!), `${f.hostId('P')}.journal.json`);
    const entry = await eventually(async () => {
      const e = (JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: JournalEntry[] }).entries[0];
      return e?.pid ? (e as JournalEntry & { pid: number }) : undefined;
    }, 'the runner pid journaled');
    assert.equal(entry.taskId, taskId);
    assert.ok(entry.pidStart, 'recorded with its start time');
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    assert.equal(alive(entry.pid), true);
    first.kill('SIGKILL'); // the runner's own process group outlives the agent
    await first.exited;
    assert.equal(alive(entry.pid), true, 'the runner outlived its agent');
    await f.spawnHost('P', ['p1'], { restart: true });
    await eventually(async () => (alive(entry.pid) ? undefined : true), 'the leftover runner stopped', 20_000);
    await f.waitFor(taskId, (v) => v.attempts[0]?.reason === 'host_restarted', 'attempt 1 reported', 30_000);
    await f.fleet.cancel(taskId);
  });

  it('On host restart, a command runner whose pid the crashed process never journaled is still found (by its attempt in its environment) and stopped', async () => {
    f = await startFleet('journal-nopid');
    const first = await f.spawnHost('N', ['n1'], {
      hostTimeoutMs: 60_000,
      config: {
        runner: { type: 'command', command: ['sh', '-c', 'sleep 120 & wait'], goalAs: 'env', killGraceMs: 500 },
      },
    });
    const { taskId } = await f.fleet.submit({ goal: 'sleeps', policy: { leaseTimeoutMs: 60_000 } });
    const journalPath = join(dirname(f.hostConfigPath('N')!), `${f.hostId('N')}.journal.json`);
    const entry = await eventually(async () => {
      const e = (JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: JournalEntry[] }).entries[0];
      return e?.pid ? (e as JournalEntry & { pid: number }) : undefined;
    }, 'the runner pid journaled');
    const alive = (pid: number) => {
      try {
        process.kill(-pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    first.kill('SIGKILL');
    await first.exited;
    assert.equal(alive(entry.pid), true, "the runner's group outlived its agent");
    // The journal as it is when the agent dies after the spawn but before the pid's write lands.
    const { pid: _pid, pidBootId: _boot, pidStart: _start, ...withoutPid } = entry;
    writeFileSync(journalPath, JSON.stringify({ version: 1, entries: [withoutPid] }));
    await f.spawnHost('N', ['n1'], { restart: true });
    await eventually(async () => (alive(entry.pid) ? undefined : true), 'the leftover runner group stopped', 20_000);
    await f.waitFor(taskId, (v) => v.attempts[0]?.reason === 'host_restarted', 'attempt 1 reported', 30_000);
    await f.fleet.cancel(taskId);
  });

  it('A second host process with the same config is refused while the first runs (journal lock); a crashed one’s stale lock is taken over; a clean stop releases it', async () => {
    f = await startFleet('journal-lock');
    const first = await f.spawnHost('A', ['a1'], { hostTimeoutMs: 60_000 });
    const lock = join(dirname(f.hostConfigPath('A')!), `${f.hostId('A')}.journal.json.lock`);
    const { taskId } = await f.fleet.submit({
      goal: 'long [sim outcome=hang duration=300]',
      policy: { leaseTimeoutMs: 60_000 },
    });
    await f.waitForStatus(taskId, 'running');
    const second = await f.spawnHost('A', ['a1'], { restart: true, expectStart: false });
    const code = await Promise.race([second.exited, sleep(30_000).then(() => 'still running')]);
    second.kill('SIGKILL');
    assert.notEqual(code, 0, second.output());
    assert.notEqual(code, 'still running', `the second host started:\n${second.output()}`);
    assert.ok(
      second
        .output()
        .includes(
          `JournalLockedError: another host agent is running with this journal: ${lock} is held by pid ${first.child.pid}`,
        ),
      second.output(),
    );
    assert.ok(!second.output().includes('host started'));
    assert.equal(JSON.parse(readFileSync(lock, 'utf8')).pid, first.child.pid, 'the lock names the running host');
    await sleep(1_000);
    const t = await f.fleet.get(taskId);
    assert.deepEqual(
      [t.status, t.attempts.length, t.attempts[0].outcome],
      ['running', 1, undefined],
      'the live attempt was left alone',
    );
    // A crash leaves the lock behind; the next start takes it over and reports the interrupted attempt.
    first.kill('SIGKILL');
    await first.exited;
    assert.ok(existsSync(lock), 'a SIGKILLed host leaves its lock');
    const third = await f.spawnHost('A', ['a1'], { restart: true });
    assert.ok(third.output().includes('took over a stale journal lock'), third.output());
    assert.equal(JSON.parse(readFileSync(lock, 'utf8')).pid, third.child.pid);
    const ended = await f.waitFor(taskId, (v) => v.attempts[0]?.outcome !== undefined, 'attempt 1 ended', 30_000);
    assert.equal(ended.attempts[0].reason, 'host_restarted');
    await f.fleet.cancel(taskId);
    third.kill('SIGTERM');
    assert.equal(await third.exited, 0, third.output());
    assert.equal(existsSync(lock), false, 'a clean stop releases the lock');
  });

  it('A corrupt journal stops the host from starting with a clear error', async () => {
    f = await startFleet('journal-corrupt');
    const first = await f.spawnHost('A', ['a1']);
    first.kill('SIGKILL');
    await first.exited;
    const path = join(dirname(f.hostConfigPath('A')!), `${f.hostId('A')}.journal.json`);
    writeFileSync(path, '{"version": 1, "entries": [ {"taskId": ');
    const again = await f.spawnHost('A', ['a1'], { restart: true, expectStart: false });
    const code = await again.exited;
    assert.notEqual(code, 0);
    assert.match(again.output(), /JournalCorruptError: journal .*journal\.json is unreadable/);
    assert.ok(!again.output().includes('host started'));
  });
});

describe('real drivers and runners through the whole system', () => {
  let f: Fleet | undefined;
  const saved = process.env.FAKE_ADB_STATE;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
    if (saved === undefined) delete process.env.FAKE_ADB_STATE;
    else process.env.FAKE_ADB_STATE = saved;
  });

  it('adb devices (fake adb) run goals through a command runner: progress lines, exit-code rules, argv only', async () => {
    f = await startFleet('adb-command');
    const dir = mkdtempSync(join(tmpdir(), 'fleet-adb-'));
    const state = join(dir, 'adb.json');
    writeFileSync(
      state,
      JSON.stringify({
        devices:
          'List of devices attached\nemulator-5554          device product:sdk_gphone64 model:Pixel_7 device:emu64 transport_id:1\n\n',
        shell: { 'emulator-5554': {} },
      }),
    );
    process.env.FAKE_ADB_STATE = state; // inherited by the host process, and by fake-adb through it
    const script = [
      'const goal = process.argv[1];',
      'console.log("device " + process.env.FLEET_DEVICE_ID);',
      'console.log("goal " + goal);',
      'process.exit(goal.includes("retry") ? 75 : goal.includes("boom") ? 3 : 0);',
    ].join('\n');
    await f.spawnHost('A', [], {
      config: {
        driver: { type: 'adb', adbPath: join(__dirname, 'fixtures', 'fake-adb') },
        runner: {
          type: 'command',
          command: [process.execPath, '-e', script],
          goalAs: 'argument',
          exitCodes: { done: [0], retryable: [75] },
          killGraceMs: 1_000,
        },
      },
    });
    const device = await eventually(async () => (await f!.scheduler()).devices[0], 'adb device in the pool');
    assert.equal(device.driverType, 'android');
    assert.ok(device.tags.includes('model:Pixel_7'), device.tags.join(','));
    const ok = await f.fleet.submit({
      goal: 'open "settings"; rm -rf /tmp/nothing',
      constraints: { driverType: 'android', tags: ['model:Pixel_7'] },
    });
    const boom = await f.fleet.submit({ goal: 'boom', constraints: { driverType: 'android' } });
    const retry = await f.fleet.submit({
      goal: 'retry',
      constraints: { driverType: 'android' },
      policy: { maxAttempts: 2 },
    });
    const [rOk, rBoom, rRetry] = await Promise.all([ok, boom, retry].map((t) => f!.fleet.wait(t.taskId)));
    assert.equal(rOk.status, 'done');
    assert.match(
      rOk.result?.output ?? '',
      /goal open "settings"; rm -rf \/tmp\/nothing/,
      'the goal arrived verbatim as one argument',
    );
    assert.equal(rOk.attempts[0].deviceId, device.deviceId);
    assert.ok((rOk.progress?.seq ?? 0) >= 1, 'output lines became progress');
    assert.match(rOk.progress?.message ?? '', /^(device|goal) /);
    assert.equal(rBoom.status, 'failed');
    assert.equal(rBoom.attempts.length, 1, 'a terminal exit code is not retried');
    assert.equal(rBoom.result?.reason, 'exit_code_3');
    assert.equal(rRetry.status, 'failed');
    assert.equal(rRetry.attempts.length, 2, 'a retryable exit code is retried up to maxAttempts');
  });

  it('local driver: the host itself is one device; a failing health command takes it out of rotation until it passes', async () => {
    f = await startFleet('local-driver');
    const flag = join(mkdtempSync(join(tmpdir(), 'fleet-local-')), 'unhealthy');
    writeFileSync(flag, 'x');
    await f.spawnHost('A', [], {
      config: {
        driver: {
          type: 'local',
          deviceId: 'this-box',
          driverType: 'linux',
          tags: ['gpu'],
          healthCheck: {
            command: [process.execPath, '-e', 'process.exit(require("fs").existsSync(process.argv[1]) ? 1 : 0)', flag],
          },
        },
        // The local driver has no default runner; this test is about the driver's health check.
        runner: { type: 'sim' },
      },
    });
    const dev = await eventually(async () => (await f!.scheduler()).devices[0], 'local device in the pool');
    assert.deepEqual(
      [dev.deviceId, dev.driverType, dev.tags, dev.health],
      ['this-box', 'linux', ['gpu', 'inline-steps'], 'unhealthy'], // inline-steps: its sim runner's capability
    );
    const { taskId } = await f.fleet.submit({
      goal: 'x [sim duration=50]',
      constraints: { driverType: 'linux', tags: ['gpu'] },
    });
    await sleep(1_000);
    assert.equal((await f.fleet.get(taskId)).status, 'queued', 'an unhealthy device gets nothing');
    unlinkSync(flag);
    const done = await f.fleet.wait(taskId);
    assert.equal(done.status, 'done');
    assert.equal(done.attempts[0].deviceId, 'this-box');
  });
});

describe('command runner lifecycle through the whole system', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  it('Cancelling a running task stops the command: SIGTERM to its whole process group (child included)', async () => {
    f = await startFleet('command-cancel');
    const dir = mkdtempSync(join(tmpdir(), 'fleet-cmd-'));
    const pids = join(dir, 'pids');
    // The runner starts a child of its own and writes both pids; both must be gone after the cancel.
    const script = [
      'const { spawn } = require("child_process");',
      'const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], { stdio: "ignore" });',
      `require("fs").writeFileSync(${JSON.stringify(pids)}, process.pid + " " + child.pid);`,
      'setInterval(() => console.log("tick"), 200);',
    ].join('\n');
    await f.spawnHost('A', ['a1'], {
      config: {
        runner: {
          type: 'command',
          command: [process.execPath, '-e', script],
          goalAs: 'env',
          exitCodes: { done: [0], retryable: [] },
          killGraceMs: 1_000,
        },
      },
    });
    const { taskId } = await f.fleet.submit({ goal: 'run until cancelled' });
    await f.waitFor(taskId, (t) => (t.progress?.seq ?? 0) >= 2, 'ticks as progress');
    const [parent, child] = readFileSync(pids, 'utf8').split(' ').map(Number);
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z');
      } catch {
        return false;
      }
    };
    assert.ok(alive(parent) && alive(child));
    await f.fleet.cancel(taskId);
    const t = await f.waitForStatus(taskId, 'cancelled');
    assert.equal(t.attempts.length, 1);
    await eventually(async () => (!alive(parent) && !alive(child) ? true : undefined), 'process group gone', 10_000);
  });
});

describe('host start-up checks and log levels', () => {
  let f: Fleet | undefined;
  const procs: HostProcess[] = [];
  const savedLevel = process.env.FLEET_LOG_LEVEL;
  afterEach(async () => {
    for (const p of procs.splice(0)) p.kill('SIGKILL');
    await f?.stop();
    f = undefined;
    if (savedLevel === undefined) delete process.env.FLEET_LOG_LEVEL;
    else process.env.FLEET_LOG_LEVEL = savedLevel;
  });

  it('A host whose command runner cannot start (command[0] or cwd) refuses to start, naming the runner, the field and the value', async () => {
    f = await startFleet('startup-checks');
    const cwd = join(tmpdir(), uid('no-such-dir'));
    await assert.rejects(
      f.spawnHost('A', ['a1'], {
        config: {
          runner: { type: 'command', command: ['/nonexistent/agent', '--goal'], goalAs: 'argument', cwd },
        },
      }),
      (err: Error) => {
        assert.match(err.message, /process exited before "host started"/);
        assert.ok(
          err.message.includes(`command runner: runner.cwd ${JSON.stringify(cwd)} does not exist`),
          err.message,
        );
        return true;
      },
    );
    await assert.rejects(
      f.spawnHost('B', ['b1'], {
        config: { runner: { type: 'command', command: ['/nonexistent/agent', '--goal'], goalAs: 'argument' } },
      }),
      /command runner: runner\.command\[0\] "\/nonexistent\/agent" does not exist/,
    );
  });

  it('An invalid FLEET_LOG_LEVEL stops the host at start-up with a clear error', async () => {
    f = await startFleet('startup-log-level');
    process.env.FLEET_LOG_LEVEL = 'verbose';
    await assert.rejects(
      f.spawnHost('A', ['a1']),
      /invalid FLEET_LOG_LEVEL "verbose": expected one of trace, debug, info, warn, error/,
    );
  });

  it("A snapshotIntervalMs not comfortably under the control plane's snapshotTimeoutMs is a warning at start-up", async () => {
    f = await startFleet('startup-snapshot-interval');
    const host = await f.spawnHost('A', ['a1'], { snapshotIntervalMs: 120_000 });
    const line = host
      .output()
      .split('\n')
      .find((l) => l.includes('snapshotIntervalMs 120000 is not comfortably less than'));
    assert.ok(line, host.output());
    assert.equal((JSON.parse(line) as { level: string }).level, 'warn');
  });

  it('A host that is not enrolled (or whose host workflow ended) logs an actionable error, once a minute, even at FLEET_LOG_LEVEL=warn; rotated keys a warning', async () => {
    f = await startFleet('not-enrolled');
    const hostId = f.hostId('A');
    const dir = mkdtempSync(join(tmpdir(), 'fleet-cred-'));
    const credentialFile = join(dir, 'credential.json');
    const credential = generateHostCredential(hostId);
    saveHostCredential(credentialFile, credential);
    process.env.FLEET_LOG_LEVEL = 'warn';
    const host = spawnHostProcess({
      hostId,
      credentialFile,
      pool: f.pool,
      snapshotIntervalMs: 300, // a snapshot (and a refusal) every 300 ms
      driver: { type: 'sim', devices: [{ deviceId: 'a1' }] },
    });
    procs.push(host);
    const namespace = testEnv().namespace ?? 'default';
    const lines = () =>
      host
        .output()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as { level: string; message: string; component: string });
    const notEnrolled = () => lines().filter((l) => l.message.startsWith(`host ${hostId} is not enrolled`));
    await host.waitForOutput(`host ${hostId} is not enrolled in namespace`);
    await sleep(3_000); // about ten refused snapshots
    assert.equal(notEnrolled().length, 1, host.output());
    const [line] = notEnrolled();
    assert.equal(line.level, 'error');
    assert.ok(line.message.startsWith(`host ${hostId} is not enrolled in namespace ${namespace} `), line.message);
    assert.ok(
      line.message.endsWith(
        `(no running workflow host/${hostId}): enrol it with \`npx fleet hosts add ${hostId}\` / \`npm run hosts:add -- ${hostId}\`, or check TEMPORAL_NAMESPACE`,
      ),
      line.message,
    );
    assert.ok(!lines().some((l) => l.level === 'info'), 'nothing below warn');
    // Enrolled: the host says once that its snapshots pass again.
    const enrol = (keys = publicKeys(credential)) =>
      enrollHost(f!.client, f!.config, { hostId, pool: f!.pool, keys, hostTimeoutMs: 5_000 });
    await enrol();
    await host.waitForOutput('snapshots are accepted again');
    const handle = f.client.workflow.getHandle(hostWorkflowId(hostId));
    await eventually(async () => ((await handle.query(hostStateQuery)).online ? true : undefined), 'online');
    // Its host workflow ends (as a removal ends it): not enrolled again, said at once.
    await handle.terminate('test: host removed');
    await eventually(async () => (notEnrolled().length === 2 ? true : undefined), 'not enrolled said again');
    // Enrolled with other keys (a rotation): a warning to restart with the new credential.
    await enrol(publicKeys(generateHostCredential(hostId)));
    await host.waitForOutput('keys rotated? restart this host with its new credential file');
    const rotated = lines().filter((l) => l.message.includes('keys rotated? restart this host'));
    assert.equal(rotated.length, 1);
    assert.equal(rotated[0].level, 'warn');
  });
});

describe('host stop and running attempts', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  it('shutdownGraceMs: on SIGTERM a running task finishes within the grace instead of losing its attempt (the default 5 s cuts it)', async () => {
    f = await startFleet('shutdown-grace');
    const patient = await f.spawnHost('A', ['a1'], { hostTimeoutMs: 60_000, config: { shutdownGraceMs: 30_000 } });
    const hasty = await f.spawnHost('B', ['b1'], { hostTimeoutMs: 60_000 });
    const policy = { leaseTimeoutMs: 60_000, maxAttempts: 3 };
    const long = { goal: 'long [sim duration=8000]', policy };
    const onA = await f.fleet.submit({ ...long, constraints: { deviceId: 'a1' } });
    const onB = await f.fleet.submit({ ...long, constraints: { deviceId: 'b1' } });
    await Promise.all([f.waitForStatus(onA.taskId, 'running'), f.waitForStatus(onB.taskId, 'running')]);
    const stoppedAt = Date.now();
    patient.kill('SIGTERM');
    hasty.kill('SIGTERM');
    const a = await f.waitForStatus(onA.taskId, 'done', 60_000);
    assert.equal(a.attempts.length, 1, 'no attempt lost');
    assert.equal(a.attempts[0].outcome, 'done');
    assert.equal(await patient.exited, 0, patient.output());
    assert.ok(Date.now() - stoppedAt < 30_000, 'the host exits once its work is done, not at the end of the grace');
    // The default grace cut the other attempt after 5 s: it failed (retryable), costing its task an attempt.
    const b = await f.waitFor(onB.taskId, (v) => v.attempts[0]?.outcome !== undefined, 'attempt 1 ended', 30_000);
    assert.deepEqual(
      [b.attempts[0].outcome, b.attempts[0].reason, b.attempts[0].message],
      ['retryable_failure', 'host_error', 'Worker is shutting down and this activity did not complete in time'],
    );
    assert.equal(await hasty.exited, 0, hasty.output());
  });
});
