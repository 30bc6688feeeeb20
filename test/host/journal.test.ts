/** The host journal: atomic, private, versioned, and loud about a file it cannot read. */
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Journal, JournalCorruptError, type JournalEntry } from '../../host-worker/journal';
import { tempDirs } from './helpers';

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
