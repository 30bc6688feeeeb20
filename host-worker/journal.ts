/**
 * The host's journal of active assignments: what it was running when it stopped, so that a
 * restarted host can find (and kill) leftovers and report them. One JSON file,
 * `{ "version": 1, "entries": [...] }`, replaced atomically on every change: a temporary file in the
 * same directory (mode 0600), fsync, rename over the journal, fsync of the directory. A reader (or a
 * crash) sees the old file or the new one, never a mix. The directory is created with mode 0700
 * when missing (an existing directory's mode is left alone).
 *
 * A file that exists but cannot be read as this format is an error (`JournalCorruptError`), never an
 * empty journal: forgetting running work silently is worse than stopping. One process per journal
 * file; changes within the process are serialized.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rename, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { z } from 'zod';

export const JOURNAL_VERSION = 1;

export const JournalEntrySchema = z.strictObject({
  taskId: z.string().min(1),
  attempt: z.number().int().positive(),
  leaseId: z.string().min(1),
  deviceId: z.string().min(1),
  /** Epoch ms. */
  startedAt: z.number().int().nonnegative(),
  /** The runner's process (and process group) id, when it runs a command. */
  pid: z.number().int().positive().optional(),
  /** Where the attempt's activity lives, so a restarted host can report it failed at once. */
  workflowId: z.string().min(1).optional(),
  runId: z.string().min(1).optional(),
  activityId: z.string().min(1).optional(),
});
export type JournalEntry = z.infer<typeof JournalEntrySchema>;

const JournalFileSchema = z.strictObject({
  version: z.literal(JOURNAL_VERSION),
  entries: z.array(JournalEntrySchema),
});

export class JournalCorruptError extends Error {
  override name = 'JournalCorruptError';
  constructor(
    readonly path: string,
    detail: string,
    options?: ErrorOptions,
  ) {
    super(`journal ${path} is unreadable (${detail}); move it aside after checking what it held`, options);
  }
}

const key = (taskId: string, attempt: number) => `${taskId}\u0000${attempt}`;

export class Journal {
  private list: JournalEntry[];
  private tail: Promise<unknown> = Promise.resolve();

  private constructor(
    readonly path: string,
    entries: JournalEntry[],
  ) {
    this.list = entries;
  }

  /** Loads the journal; a missing file is an empty journal, anything unreadable throws JournalCorruptError. */
  static async open(path: string): Promise<Journal> {
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new Journal(path, []);
      throw new Error(`cannot read journal ${path}: ${(err as Error).message}`, { cause: err });
    }
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch (err) {
      throw new JournalCorruptError(path, `not JSON: ${(err as Error).message}`, { cause: err });
    }
    const version = (raw as { version?: unknown } | null)?.version;
    if (version !== JOURNAL_VERSION) {
      throw new JournalCorruptError(
        path,
        `unsupported version ${JSON.stringify(version)}, expected ${JOURNAL_VERSION}`,
      );
    }
    const parsed = JournalFileSchema.safeParse(raw);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
      throw new JournalCorruptError(path, `invalid format: ${issues}`);
    }
    const seen = new Set<string>();
    for (const e of parsed.data.entries) {
      const k = key(e.taskId, e.attempt);
      if (seen.has(k)) throw new JournalCorruptError(path, `duplicate entry for ${e.taskId} attempt ${e.attempt}`);
      seen.add(k);
    }
    return new Journal(path, parsed.data.entries);
  }

  /** The current entries (copies). */
  entries(): JournalEntry[] {
    return this.list.map((e) => ({ ...e }));
  }

  /** Adds an entry, or replaces the one with the same taskId and attempt (e.g. to record its pid). Persisted before it resolves. */
  async add(entry: JournalEntry): Promise<void> {
    const parsed = JournalEntrySchema.safeParse(entry);
    if (!parsed.success) {
      throw new Error(
        `invalid journal entry: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
      );
    }
    const e = parsed.data;
    return this.change((list) => [...list.filter((x) => key(x.taskId, x.attempt) !== key(e.taskId, e.attempt)), e]);
  }

  /** Removes the entry (no-op when absent); persisted before it resolves. Resolves whether it was there. */
  async remove(taskId: string, attempt: number): Promise<boolean> {
    let found = false;
    await this.change((list) => {
      const next = list.filter((x) => key(x.taskId, x.attempt) !== key(taskId, attempt));
      found = next.length !== list.length;
      return found ? next : list;
    });
    return found;
  }

  /** Changes are applied one at a time, in call order; memory changes only once the file has. */
  private change(fn: (list: JournalEntry[]) => JournalEntry[]): Promise<void> {
    const run = this.tail.then(async () => {
      const next = fn(this.list);
      if (next === this.list) return;
      await writeAtomically(this.path, `${JSON.stringify({ version: JOURNAL_VERSION, entries: next }, null, 2)}\n`);
      this.list = next;
    });
    this.tail = run.catch(() => undefined);
    return run;
  }
}

async function writeAtomically(path: string, text: string): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  try {
    const fh = await open(tmp, 'wx', 0o600);
    try {
      await fh.writeFile(text, 'utf8');
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (err) {
    await unlink(tmp).catch(() => undefined);
    throw new Error(`cannot write journal ${path}: ${(err as Error).message}`, { cause: err });
  }
  // The rename itself is durable only once the directory is synced (not supported everywhere).
  try {
    const d = await open(dir, 'r');
    try {
      await d.sync();
    } finally {
      await d.close();
    }
  } catch {
    // best effort
  }
}
