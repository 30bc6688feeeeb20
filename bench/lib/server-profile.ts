/**
 * BENCH_PROFILE_SERVER=<dir>: a CPU profile of each scenario's dev server (`perf record -g` on its
 * process), cut into one file per burst, so the server's work for the fleet and for each baseline
 * is read apart: `<dir>/server-<pid>/<n>-<label>.perf.data`, where `label` names the window that
 * file ends (`fleet`, `baseline`, `shape`, ..., and `between` for what ran between two bursts).
 * `bench/server-profile/report.sh <dir>` names the frames and prints where the samples fall.
 *
 * Needs Linux `perf` (Debian: `apt-get install linux-perf`). perf's sampling slows the server (P1
 * ran about 0.6-0.8x its usual rates under it): read a profiled run for its shares, not its rates.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readlinkSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { log, sleep } from './util';

let current: { proc: ChildProcess; dir: string; n: number; exited: boolean } | undefined;

/** Starts perf on the dev server `pid` when BENCH_PROFILE_SERVER is set; a new server replaces the old. */
export async function startServerProfile(pid: number | undefined): Promise<void> {
  const root = process.env.BENCH_PROFILE_SERVER;
  if (!root) return;
  if (!pid) throw new Error('BENCH_PROFILE_SERVER: the dev server process was not found');
  const dir = join(root, `server-${pid}`);
  mkdirSync(dir, { recursive: true });
  // The binary the server runs (a pyenv shim may stand in front of it): the report names frames from it.
  writeFileSync(join(dir, 'exe'), readlinkSync(`/proc/${pid}/exe`));
  const proc = spawn(
    'perf',
    ['record', '-F', '199', '-g', '-p', String(pid), '--switch-output=signal', '-o', join(dir, 'perf.data')],
    // stderr shown, never piped: an unread pipe that fills would stall perf and the run with it.
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const failed = new Promise<Error>((resolve) => {
    proc.once('error', (err) =>
      resolve(new Error(`BENCH_PROFILE_SERVER needs perf (apt-get install linux-perf): ${err.message}`)),
    );
    proc.once('exit', (code) => resolve(new Error(`BENCH_PROFILE_SERVER: perf exited (${code}) at once`)));
  });
  const err = await Promise.race([failed, sleep(1_000).then(() => undefined)]);
  if (err) throw err;
  const state = { proc, dir, n: 0, exited: false };
  // perf ends by itself, writing its last file, when the server it follows exits.
  proc.once('exit', () => (state.exited = true));
  current = state;
  log(`profiling the dev server (pid ${pid}) into ${dir}`);
}

/**
 * Closes the profile's current window as `label`: perf writes what it sampled since the last mark
 * to a file of its own (named by time), which is renamed `<n>-<label>.perf.data`. No-op unprofiled.
 */
export async function profileMark(label: string): Promise<void> {
  const p = current;
  if (!p || p.exited) return;
  const before = new Set(readdirSync(p.dir));
  p.proc.kill('SIGUSR2');
  for (let i = 0; i < 50; i++) {
    await sleep(100);
    const file = readdirSync(p.dir).find((f) => f.startsWith('perf.data.') && !before.has(f));
    if (!file) continue;
    await sleep(200); // perf renames the file once it has written it; let it finish
    p.n++;
    renameSync(join(p.dir, file), join(p.dir, `${String(p.n).padStart(2, '0')}-${label}.perf.data`));
    return;
  }
  log(`profile: perf wrote no file for "${label}" within 5 s`);
}
