/** The host journal: atomic, private, versioned, and loud about a file it cannot read. */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  Journal,
  JournalCorruptError,
  JournalLock,
  JournalLockedError,
  processIdentity,
  staleLockReason,
  stillSameProcess,
  type JournalEntry,
  type LockOwner,
} from '../../host-worker/journal';
import type { Client } from '@temporalio/client';
import { reconcileJournal } from '../../host-worker/host';
import { runnerMarks } from '../../host-worker/command-runner';
import { groupsWithEnvironment } from '../../host-worker/process-group';
import { generateHostCredential } from '../../host-worker/identity';
import { node, tempDirs } from './helpers';

const entry = (taskId: string, attempt = 1, over: Partial<JournalEntry> = {}): JournalEntry => ({
  taskId,
  attempt,
  leaseId: `lease-${taskId}-${attempt}`,
  deviceId: 'dev-1',
  startedAt: 1_700_000_000_000,
  ...over,
});

describe('host journal', () => {
  const tmp = tempDirs();
  after(() => tmp.cleanup());

  it('starts empty when the file is missing, and round-trips entries through the file', async () => {
    const path = join(tmp.make(), 'state', 'journal.json');
    const j = await Journal.open(path);
    assert.deepEqual(j.entries(), []);
    await j.add(entry('t1', 1, { pid: 4242 }));
    await j.add(entry('t2', 3));
    const onDisk = JSON.parse(readFileSync(path, 'utf8')) as unknown;
    assert.deepEqual(onDisk, { version: 1, entries: [entry('t1', 1, { pid: 4242 }), entry('t2', 3)] });

    const reopened = await Journal.open(path);
    assert.deepEqual(reopened.entries(), [entry('t1', 1, { pid: 4242 }), entry('t2', 3)]);
    assert.equal(await reopened.remove('t1', 1), true);
    assert.equal(await reopened.remove('t1', 1), false);
    assert.equal(await reopened.remove('t2', 1), false, 'another attempt of t2 is not removed');
    assert.deepEqual((await Journal.open(path)).entries(), [entry('t2', 3)]);
  });

  it('replaces an entry with the same task and attempt (e.g. to record the pid)', async () => {
    const path = join(tmp.make(), 'journal.json');
    const j = await Journal.open(path);
    await j.add(entry('t1'));
    await j.add(entry('t1', 2));
    await j.add(entry('t1', 1, { pid: 99 }));
    assert.deepEqual(
      (await Journal.open(path)).entries().map((e) => [e.taskId, e.attempt, e.pid]),
      [
        ['t1', 2, undefined],
        ['t1', 1, 99],
      ],
    );
  });

  it('writes the file with mode 0600 and creates its directory with mode 0700', async () => {
    const dir = join(tmp.make(), 'nested', 'dir');
    const path = join(dir, 'journal.json');
    const j = await Journal.open(path);
    await j.add(entry('t1'));
    assert.equal(statSync(path).mode & 0o777, 0o600);
    assert.equal(statSync(dir).mode & 0o777, 0o700);
    await j.add(entry('t2'));
    assert.equal(statSync(path).mode & 0o777, 0o600, 'still 0600 after a rewrite');
  });

  it('hands out copies: changing a returned entry changes nothing', async () => {
    const j = await Journal.open(join(tmp.make(), 'journal.json'));
    await j.add(entry('t1'));
    j.entries()[0].deviceId = 'mutated';
    assert.equal(j.entries()[0].deviceId, 'dev-1');
  });

  it('never shows a partial file: readers always see a complete journal, and no temp file stays behind', async () => {
    const dir = tmp.make();
    const path = join(dir, 'journal.json');
    const j = await Journal.open(path);
    await j.add(entry('seed'));
    let reads = 0;
    let stop = false;
    const reader = (async () => {
      while (!stop) {
        const parsed = JSON.parse(readFileSync(path, 'utf8')) as { version: number; entries: unknown[] };
        assert.equal(parsed.version, 1);
        reads++;
        await new Promise((r) => setImmediate(r));
      }
    })();
    const padding = 'x'.repeat(20_000); // large writes make a torn read likely if the write were not atomic
    for (let i = 0; i < 40; i++) await j.add(entry(`task-${i}-${padding}`));
    stop = true;
    await reader;
    assert.ok(reads > 10, `the reader ran concurrently (${reads} reads)`);
    assert.deepEqual(readdirSync(dir), ['journal.json']);
  });

  it('a failed write leaves the file, the entries and the directory as they were', async () => {
    const dir = tmp.make();
    const path = join(dir, 'journal.json');
    const j = await Journal.open(path);
    await j.add(entry('t1'));
    // Replace the journal by a non-empty directory: the rename over it fails.
    rmSync(path);
    mkdirSync(path);
    writeFileSync(join(path, 'keep'), '');
    await assert.rejects(j.add(entry('t2')), /cannot write journal/);
    assert.deepEqual(
      j.entries().map((e) => e.taskId),
      ['t1'],
      'memory follows the file: t2 was not added',
    );
    assert.deepEqual(readdirSync(dir), ['journal.json'], 'the temporary file was removed');
    // The journal keeps working once the path is writable again.
    rmSync(path, { recursive: true });
    await j.add(entry('t3'));
    assert.deepEqual(
      (await Journal.open(path)).entries().map((e) => e.taskId),
      ['t1', 't3'],
    );
  });

  it('serializes concurrent changes: every add and remove is kept', async () => {
    const path = join(tmp.make(), 'journal.json');
    const j = await Journal.open(path);
    await Promise.all(Array.from({ length: 50 }, (_, i) => j.add(entry(`t${i}`))));
    await Promise.all([j.remove('t0', 1), j.add(entry('t50')), j.remove('t49', 1), j.add(entry('t51'))]);
    const expected = [...Array.from({ length: 48 }, (_, i) => `t${i + 1}`), 't50', 't51'];
    assert.deepEqual(
      j.entries().map((e) => e.taskId),
      expected,
    );
    assert.deepEqual(
      (await Journal.open(path)).entries().map((e) => e.taskId),
      expected,
    );
  });

  it('refuses a corrupt, truncated, wrongly versioned or malformed file with JournalCorruptError naming it', async () => {
    const dir = tmp.make();
    const cases: [string, string, RegExp][] = [
      ['garbage', 'not json at all', /not JSON/],
      ['truncated', '{"version":1,"entries":[{"taskId":"t1"', /not JSON/],
      ['empty', '', /not JSON/],
      ['version', JSON.stringify({ version: 2, entries: [] }), /unsupported version 2, expected 1/],
      ['no-version', JSON.stringify({ entries: [] }), /unsupported version undefined/],
      ['array', '[]', /unsupported version/],
      ['bad-entry', JSON.stringify({ version: 1, entries: [{ taskId: 't1', attempt: 'one' }] }), /entries\.0\.attempt/],
      [
        'duplicate',
        JSON.stringify({ version: 1, entries: [entry('t1'), entry('t1')] }),
        /duplicate entry for t1 attempt 1/,
      ],
    ];
    for (const [name, content, detail] of cases) {
      const path = join(dir, `${name}.json`);
      writeFileSync(path, content);
      await assert.rejects(Journal.open(path), (err: unknown) => {
        assert.ok(err instanceof JournalCorruptError, name);
        assert.equal(err.path, path);
        assert.ok(err.message.includes(path), `${name}: ${err.message}`);
        assert.match(err.message, detail, name);
        return true;
      });
      assert.equal(readFileSync(path, 'utf8'), content, `${name}: the file is left untouched`);
    }
  });

  it('rejects an invalid entry without writing anything', async () => {
    const path = join(tmp.make(), 'journal.json');
    const j = await Journal.open(path);
    await assert.rejects(j.add({ ...entry('t1'), attempt: 0 }));
    await assert.rejects(j.add({ ...entry('t1'), taskId: '' }));
    assert.deepEqual(j.entries(), []);
    assert.deepEqual((await Journal.open(path)).entries(), []);
  });
});

describe('host journal lock', () => {
  const tmp = tempDirs();
  after(() => tmp.cleanup());

  /** The pid of a process that has exited (and been reaped). */
  const deadPid = (): number => {
    const r = spawnSync(node, ['-e', 'console.log(process.pid)'], { encoding: 'utf8' });
    return Number(r.stdout.trim());
  };
  const logs = () => {
    const lines: { message: string; fields: Record<string, unknown>; level?: string }[] = [];
    return {
      lines,
      log: (message: string, fields: Record<string, unknown>, level?: string) => lines.push({ message, fields, level }),
    };
  };
  const readOwner = (path: string) => JSON.parse(readFileSync(path, 'utf8')) as LockOwner;

  it('takes <journal>.lock (0600) holding the pid and boot time; a second holder is refused naming the pid and the file; release frees it', async () => {
    const journal = join(tmp.make(), 'state', 'lab-1.journal.json');
    const lock = await JournalLock.acquire(journal);
    const path = `${journal}.lock`;
    assert.equal(lock.path, path);
    assert.equal(statSync(path).mode & 0o777, 0o600);
    const owner = readOwner(path);
    assert.equal(owner.pid, process.pid);
    if (process.platform === 'linux') {
      assert.ok(owner.bootTime && owner.bootId && owner.processStart, JSON.stringify(owner));
    }
    await assert.rejects(JournalLock.acquire(journal), (err: unknown) => {
      assert.ok(err instanceof JournalLockedError);
      assert.equal(err.lockPath, path);
      assert.ok(err.message.includes(`held by pid ${process.pid}`), err.message);
      assert.ok(err.message.includes(path), err.message);
      return true;
    });
    assert.equal(readOwner(path).token, owner.token, 'the refused attempt left the lock alone');
    await lock.release();
    assert.equal(existsSync(path), false);
    const again = await JournalLock.acquire(journal);
    again.releaseSync();
    assert.equal(existsSync(path), false);
  });

  it('takes over a stale lock (its process gone, a reused pid, another boot) with an info log', async () => {
    const dir = tmp.make();
    const journal = join(dir, 'j.json');
    const path = `${journal}.lock`;
    const held = await JournalLock.acquire(journal);
    const mine = readOwner(path);
    held.releaseSync();
    const stale: [string, LockOwner, RegExp][] = [
      ['dead pid', { ...mine, pid: deadPid(), token: 'old' }, /is not running/],
      ...(process.platform === 'linux'
        ? ([
            ['pid reused', { ...mine, processStart: '1', token: 'old' }, /now belongs to another process/],
            ['other boot', { ...mine, bootId: 'another-boot', token: 'old' }, /machine restarted/],
          ] as [string, LockOwner, RegExp][])
        : []),
    ];
    for (const [what, owner, why] of stale) {
      assert.match(staleLockReason(owner) ?? 'live', why, what);
      writeFileSync(path, JSON.stringify(owner));
      const { lines, log } = logs();
      const lock = await JournalLock.acquire(journal, { log });
      assert.equal(readOwner(path).token, lock.owner.token, what);
      const line = lines.find((l) => l.message.startsWith('took over a stale journal lock'));
      assert.ok(line, `${what}: ${JSON.stringify(lines)}`);
      assert.equal(line.level, 'info');
      assert.equal(line.fields.stalePid, owner.pid);
      await lock.release();
    }
    assert.equal(staleLockReason(mine), undefined, 'this live process holds a live lock');
    assert.deepEqual(readdirSync(dir), [], 'no lock or take-over guard left behind');
  });

  it('takes over an unreadable lock once it is old, and releases only its own lock', async () => {
    const journal = join(tmp.make(), 'j.json');
    const path = `${journal}.lock`;
    writeFileSync(path, '');
    const old = new Date(Date.now() - 60_000);
    utimesSync(path, old, old);
    const lock = await JournalLock.acquire(journal);
    // Someone else's lock in its place (e.g. it was taken over): release leaves it alone.
    const other = { ...lock.owner, token: 'someone-else' };
    writeFileSync(path, JSON.stringify(other));
    await lock.release();
    assert.equal(readOwner(path).token, 'someone-else');
    lock.releaseSync();
    assert.equal(readOwner(path).token, 'someone-else');
  });
});

describe('host journal: whose pid', () => {
  const entry = (over: Partial<JournalEntry>): JournalEntry => ({
    taskId: 't',
    attempt: 1,
    leaseId: 'L',
    deviceId: 'd',
    startedAt: Date.now(),
    ...over,
  });
  const linux = existsSync('/proc/self/stat');

  it('a recorded runner is signalled only while its pid is still that process (not reused, not before a reboot)', async function () {
    if (!linux) this.skip(); // reason: the identity comes from /proc, which only Linux has
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      await new Promise((r) => child.once('spawn', r));
      const pid = child.pid!;
      const id = processIdentity(pid);
      assert.ok(id.pidBootId && id.pidStart, JSON.stringify(id));
      assert.equal(stillSameProcess(entry({ pid, ...id })), true);
      // Another process now has the number (its start time differs).
      assert.equal(stillSameProcess(entry({ pid, ...id, pidStart: String(Number(id.pidStart) - 1) })), false);
      // Recorded under another boot, or before this boot: never.
      assert.equal(stillSameProcess(entry({ pid, ...id, pidBootId: 'another-boot' })), false);
      assert.equal(stillSameProcess(entry({ pid, startedAt: 0 })), false);
      // With its boot id, a clock set after boot (no RTC) does not make it someone else's.
      assert.equal(stillSameProcess(entry({ pid, ...id, startedAt: 0 })), true);
      // An entry from an agent before the identity, written after this boot: as before.
      assert.equal(stillSameProcess(entry({ pid })), true);
      assert.equal(stillSameProcess(entry({})), false);
    } finally {
      child.kill('SIGKILL');
    }
  });

  /**
   * A runner group whose leader exited unreaped (a zombie: its parent, here a shell that exec'd
   * `sleep`, never waits) while a child it started goes on in its group.
   */
  async function zombieLedGroup(): Promise<{ leader: number; child: number; cleanup(): void }> {
    const pids = join(tmp.make(), 'pids');
    const outer = spawn('sh', ['-c', `setsid sh -c 'sleep 100 & echo $$ $! > "${pids}"; exit 0' & exec sleep 30`], {
      stdio: 'ignore',
    });
    const deadline = Date.now() + 5_000;
    for (;;) {
      const text = existsSync(pids) ? readFileSync(pids, 'utf8').trim() : '';
      const [leader, child] = text.split(' ').map(Number);
      if (leader && child && state(leader) === 'Z') {
        return {
          leader,
          child,
          cleanup: () => {
            if (state(child) && state(child) !== 'Z') process.kill(child, 'SIGKILL');
            outer.kill('SIGKILL');
          },
        };
      }
      if (Date.now() > deadline) {
        outer.kill('SIGKILL');
        throw new Error(`no zombie-led group (${text})`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  const state = (pid: number): string | undefined => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
    } catch {
      return undefined;
    }
  };
  const tmp = tempDirs();
  after(() => tmp.cleanup());

  it('a recorded runner whose group leader is a zombie is still that runner: restart stops the children it left in its group', async function () {
    if (!linux) this.skip(); // reason: zombies and identities are read from /proc, which only Linux has
    const g = await zombieLedGroup();
    try {
      const recorded = entry({ pid: g.leader, ...processIdentity(g.leader) });
      assert.equal(state(g.leader), 'Z');
      assert.equal(stillSameProcess(recorded), true, 'a zombie still holds its pid and its group');
      const journal = await Journal.open(join(tmp.make(), 'journal.json'));
      await journal.add(recorded);
      const logged: string[] = [];
      await reconcileJournal(journal, generateHostCredential('h-zombie'), {} as Client, (m) => logged.push(m), {
        killGraceMs: 100,
      });
      assert.ok(!state(g.child) || state(g.child) === 'Z', `the leader's child ${g.child} is stopped`);
      assert.deepEqual(journal.entries(), [], 'the group is gone: the entry is removed');
      assert.ok(!logged.some((m) => m.includes('survived')), logged.join('; '));
    } finally {
      g.cleanup();
    }
  });

  /** A detached group (leader + a child) whose environment carries `env`, as a command runner's does. */
  async function markedGroup(env: Record<string, string>): Promise<{ leader: number; child: number; cleanup(): void }> {
    const pids = join(tmp.make(), 'pids');
    const leader = spawn('sh', ['-c', `sleep 100 & echo $! > "${pids}"; wait`], {
      detached: true,
      stdio: 'ignore',
      env: { ...process.env, ...env },
    });
    await new Promise((r) => leader.once('spawn', r));
    const deadline = Date.now() + 5_000;
    while (!(existsSync(pids) && readFileSync(pids, 'utf8').trim())) {
      if (Date.now() > deadline) throw new Error('the marked group did not start');
      await new Promise((r) => setTimeout(r, 20));
    }
    const child = Number(readFileSync(pids, 'utf8').trim());
    return {
      leader: leader.pid!,
      child,
      cleanup: () => {
        for (const p of [child, leader.pid!]) if (state(p) && state(p) !== 'Z') process.kill(p, 'SIGKILL');
      },
    };
  }

  it('a runner whose pid the previous process did not live to journal is found by its marks and stopped; other attempts are left alone', async function () {
    if (!linux) this.skip(); // reason: a process's environment is read from /proc, which only Linux has
    const taskId = `t-orphan-${process.pid}-${Date.now()}`;
    const orphan = await markedGroup(runnerMarks({ taskId, attempt: 2, deviceId: 'd' }));
    // The same task's next attempt, and the same attempt on another device: not this entry's runner.
    const next = await markedGroup(runnerMarks({ taskId, attempt: 3, deviceId: 'd' }));
    const elsewhere = await markedGroup(runnerMarks({ taskId, attempt: 2, deviceId: 'd2' }));
    try {
      assert.deepEqual(groupsWithEnvironment(runnerMarks({ taskId, attempt: 2, deviceId: 'd' })), [orphan.leader]);
      const journal = await Journal.open(join(tmp.make(), 'journal.json'));
      // Journaled before the spawn, the pid never recorded: the agent died in between.
      await journal.add(entry({ taskId, attempt: 2, deviceId: 'd' }));
      const logged: string[] = [];
      await reconcileJournal(journal, generateHostCredential('h-orphan'), {} as Client, (m) => logged.push(m), {
        killGraceMs: 100,
      });
      for (const p of [orphan.leader, orphan.child]) {
        assert.ok(!state(p) || state(p) === 'Z', `the orphan's process ${p} is stopped (state ${state(p)})`);
      }
      for (const p of [next.leader, next.child, elsewhere.leader, elsewhere.child]) {
        assert.equal(state(p) !== undefined && state(p) !== 'Z', true, `process ${p} of another attempt still runs`);
      }
      assert.deepEqual(journal.entries(), [], 'the group is gone: the entry is removed');
      assert.ok(logged.some((m) => m.includes('did not journal the pid')), logged.join('; '));
    } finally {
      orphan.cleanup();
      next.cleanup();
      elsewhere.cleanup();
    }
  });

  it("never names this process's own group, whatever its members' environment holds", async function () {
    if (!linux) this.skip(); // reason: a process's environment is read from /proc, which only Linux has
    const marks = runnerMarks({ taskId: `t-own-${process.pid}-${Date.now()}`, attempt: 1, deviceId: 'd' });
    // Not detached: the child is in this process's group.
    const child = spawn('sleep', ['30'], { stdio: 'ignore', env: { ...process.env, ...marks } });
    try {
      await new Promise((r) => child.once('spawn', r));
      assert.deepEqual(groupsWithEnvironment(marks), []);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
