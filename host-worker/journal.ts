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
 * file (the host agent holds a `JournalLock` on it, see below); changes within the process are
 * serialized.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, unlinkSync } from 'node:fs';
import { mkdir, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { hostname } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { z } from 'zod';
import type { HostLog } from './logging';

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
  /**
   * Who `pid` was (Linux): the kernel's boot id and the process's start time in clock ticks. A
   * restarted host stops the group only if the pid is still that process, never one that reused it.
   */
  pidBootId: z.string().min(1).optional(),
  pidStart: z.string().min(1).optional(),
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
        `invalid journal entry: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`,
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

/** Creates `path` (EEXIST if it is there), mode 0600, with `text` on disk before it returns. */
async function writeNewFile(path: string, text: string): Promise<void> {
  const fh = await open(path, 'wx', 0o600);
  try {
    await fh.writeFile(text, 'utf8');
    await fh.sync();
  } finally {
    await fh.close();
  }
}

async function writeAtomically(path: string, text: string): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  try {
    await writeNewFile(tmp, text);
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

// ---------------------------------------------------------------------------------------------
// One host process per journal.

/**
 * What a journal lock file (`<journal>.lock`) holds: the process that holds it, and enough to tell
 * whether that process is still the one that wrote it (a pid is reused; a machine restarts).
 */
export const LockOwnerSchema = z.object({
  pid: z.number().int().positive(),
  /** When the holder took the lock (ISO). */
  startedAt: z.string(),
  hostname: z.string(),
  /** When the machine booted (ISO, from /proc/stat; Linux only). */
  bootTime: z.string().optional(),
  /** The kernel's boot id (Linux only): another one means the machine restarted since. */
  bootId: z.string().optional(),
  /** The holder's start time in clock ticks since boot (/proc/<pid>/stat; Linux only). */
  processStart: z.string().optional(),
  /** Random: tells this holder's lock from a later one on release. */
  token: z.string(),
});
export type LockOwner = z.infer<typeof LockOwnerSchema>;

/** Another live process holds the journal: this one must not start. */
export class JournalLockedError extends Error {
  override name = 'JournalLockedError';
  constructor(
    readonly lockPath: string,
    readonly owner: LockOwner,
  ) {
    super(
      `another host agent is running with this journal: ${lockPath} is held by pid ${owner.pid}` +
        ` on ${owner.hostname} (since ${owner.startedAt}). Stop that process first; two host processes` +
        ` with one credential and journal would report each other's running attempts as interrupted.` +
        ` (If pid ${owner.pid} is not a host agent, remove the lock file.)`,
    );
  }
}

const readText = (path: string): string | undefined => {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
};

/** The kernel's boot id, when the system has one (Linux). */
function currentBootId(): string | undefined {
  return readText('/proc/sys/kernel/random/boot_id')?.trim() || undefined;
}

function currentBootTime(): string | undefined {
  const m = /^btime (\d+)$/m.exec(readText('/proc/stat') ?? '');
  return m ? new Date(Number(m[1]) * 1_000).toISOString() : undefined;
}

/** A process's state and start time (clock ticks since boot) from /proc, when there is one. */
function procStat(pid: number): { state: string; start: string } | undefined {
  const stat = readText(`/proc/${pid}/stat`);
  if (!stat) return undefined;
  // pid (comm) state ppid ...; comm may contain spaces and parentheses; starttime is field 22.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { state: fields[0], start: fields[19] };
}

/** What identifies `pid` beyond its number, for `stillSameProcess` later (empty off Linux). */
export function processIdentity(pid: number): { pidBootId?: string; pidStart?: string } {
  const bootId = currentBootId();
  const start = procStat(pid)?.start;
  return { ...(bootId ? { pidBootId: bootId } : {}), ...(start ? { pidStart: start } : {}) };
}

/**
 * Whether the runner a journal entry recorded may still be running as `e.pid`: not after a reboot
 * (another boot id, or an entry older than the boot), and not if the pid now belongs to a process
 * started at another time. An entry without the identity (an agent from before it) counts as the
 * same process only when it was written after this boot. A zombie leader is still that process.
 */
export function stillSameProcess(e: JournalEntry): boolean {
  if (!e.pid) return false;
  const bootId = currentBootId();
  if (e.pidBootId && bootId && e.pidBootId !== bootId) return false;
  // Without a boot id (an agent from before it), the wall clock is all there is; with one, the clock
  // may have been set since (no RTC, NTP after boot) and the boot id already said enough.
  const booted = currentBootTime();
  if (!(e.pidBootId && bootId) && booted && e.startedAt < Date.parse(booted)) return false;
  const st = procStat(e.pid);
  // A leader that exited but was not reaped (a zombie, 'Z') still holds its pid, and so its group
  // id: the group is still the old runner's, and the children it left in it must be stopped too
  // (terminateProcessGroup waits only for the live ones). Its start time still tells who it was.
  if (e.pidStart && st && st.start !== e.pidStart) return false;
  return true;
}

/**
 * Why the lock's holder is gone (the lock is stale), or undefined while it still runs: its pid is
 * not alive (or a zombie), the machine restarted since it was taken (another boot id), or the pid
 * now belongs to a process that started later (another start time).
 */
export function staleLockReason(owner: LockOwner): string | undefined {
  try {
    process.kill(owner.pid, 0);
  } catch (err) {
    // EPERM: alive, only not ours to signal.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return `its process ${owner.pid} is not running`;
  }
  const bootId = currentBootId();
  if (owner.bootId && bootId && owner.bootId !== bootId) return 'the machine restarted since it was taken';
  const st = procStat(owner.pid);
  if (st && (st.state === 'Z' || st.state === 'X')) return `its process ${owner.pid} has exited`;
  if (owner.processStart && st && st.start !== owner.processStart) {
    return `pid ${owner.pid} now belongs to another process`;
  }
  return undefined;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * An exclusive lock on a journal: `<journal>.lock`, created with O_EXCL (mode 0600) holding its
 * holder (`LockOwner`). A live holder makes `acquire` fail with `JournalLockedError`; a lock whose
 * holder is gone (see `staleLockReason`: a crash or SIGKILL leaves one behind) is taken over, with
 * an info log. The take-over itself happens under a short-lived `<journal>.lock.takeover` guard
 * (also O_EXCL), so two processes starting at once cannot both take over the same stale lock.
 * Released on a clean stop (`release`; `releaseSync` from an exit handler), only if it is still
 * this holder's.
 */
export class JournalLock {
  private released = false;

  private constructor(
    readonly path: string,
    readonly owner: LockOwner,
  ) {}

  /** `<journal>.lock` beside the journal. */
  static pathFor(journalPath: string): string {
    return `${journalPath}.lock`;
  }

  static async acquire(journalPath: string, opts: { log?: HostLog; waitMs?: number } = {}): Promise<JournalLock> {
    const path = JournalLock.pathFor(journalPath);
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const self = procStat(process.pid);
    const owner: LockOwner = {
      pid: process.pid,
      startedAt: new Date().toISOString(),
      hostname: hostname(),
      bootTime: currentBootTime(),
      bootId: currentBootId(),
      processStart: self?.start,
      token: randomBytes(12).toString('hex'),
    };
    const body = `${JSON.stringify(owner, null, 2)}\n`;
    // Longer than a take-over guard takes to count as stale, so one left by a crash never refuses a start.
    const deadline = Date.now() + (opts.waitMs ?? STALE_GUARD_MS + 5_000);
    for (;;) {
      try {
        await writeNewFile(path, body);
        return new JournalLock(path, owner);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
          throw new Error(`cannot create journal lock ${path}: ${(err as Error).message}`, { cause: err });
        }
      }
      const held = await readLock(path);
      if (held.kind === 'owner' && !staleLockReason(held.owner)) throw new JournalLockedError(path, held.owner);
      if (Date.now() > deadline) {
        throw new Error(
          `cannot take journal lock ${path}: it stays unreadable or keeps changing (another host process starting?)`,
        );
      }
      if (held.kind !== 'missing') await takeOver(path, held.text, opts.log);
      await sleep(25);
    }
  }

  /** Removes the lock if it is still this holder's (not after another process took it over). */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    const held = await readLock(this.path);
    if (held.kind === 'owner' && held.owner.token === this.owner.token) await unlink(this.path).catch(() => undefined);
  }

  /** `release` for an exit handler (synchronous). */
  releaseSync(): void {
    if (this.released) return;
    this.released = true;
    const text = readText(this.path);
    const parsed = text === undefined ? undefined : parseOwner(text);
    if (parsed?.token !== this.owner.token) return;
    try {
      unlinkSync(this.path);
    } catch {
      // gone already
    }
  }
}

type Held = { kind: 'missing' } | { kind: 'invalid'; text: string } | { kind: 'owner'; owner: LockOwner; text: string };

function parseOwner(text: string): LockOwner | undefined {
  try {
    const r = LockOwnerSchema.safeParse(JSON.parse(text));
    return r.success ? r.data : undefined;
  } catch {
    return undefined;
  }
}

async function readLock(path: string): Promise<Held> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { kind: 'missing' };
    throw new Error(`cannot read journal lock ${path}: ${(err as Error).message}`, { cause: err });
  }
  const owner = parseOwner(text);
  return owner ? { kind: 'owner', owner, text } : { kind: 'invalid', text };
}

/** A lock file this young with no valid content may be one being written right now. */
const FRESH_LOCK_MS = 2_000;
/** A take-over guard older than this was left by a process that died taking over. */
const STALE_GUARD_MS = 10_000;

/**
 * Removes the stale lock `path` if it still holds `seen` (under the take-over guard, so no other
 * process removes a lock taken meanwhile). Another state (changed, gone, an unreadable one still
 * fresh) is left for the caller's next round.
 */
async function takeOver(path: string, seen: string, log?: HostLog): Promise<void> {
  const guard = `${path}.takeover`;
  try {
    const fh = await open(guard, 'wx', 0o600);
    await fh.close();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    const age = await stat(guard).then(
      (s) => Date.now() - s.mtimeMs,
      () => 0,
    );
    if (age > STALE_GUARD_MS) await unlink(guard).catch(() => undefined);
    return;
  }
  try {
    const now = await readLock(path);
    if (now.kind === 'missing' || now.text !== seen) return;
    if (now.kind === 'invalid') {
      const age = await stat(path).then(
        (s) => Date.now() - s.mtimeMs,
        () => 0,
      );
      if (age < FRESH_LOCK_MS) return;
      await unlink(path);
      log?.('took over an unreadable journal lock', { lock: path }, 'info');
      return;
    }
    const why = staleLockReason(now.owner);
    if (!why) return;
    await unlink(path);
    log?.(
      'took over a stale journal lock: the host process that held it is gone',
      { lock: path, stalePid: now.owner.pid, staleSince: now.owner.startedAt, why },
      'info',
    );
  } finally {
    await unlink(guard).catch(() => undefined);
  }
}
