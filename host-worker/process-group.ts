/**
 * Process groups: a command started with `detached: true` leads a group of its own (pgid = its
 * pid), and everything it starts stays in it unless it moves itself. Used by the command runner
 * (host-worker/command-runner.ts), the drivers' health checks (drivers/util.ts) and the restart
 * clean-up of the journal's runners (host.ts).
 */
import { readdirSync, readFileSync } from 'node:fs';

/**
 * SIGTERM to the group `pgid`, SIGKILL after `graceMs` if any member is left; resolves true once
 * the group is gone (false if members survived SIGKILL for 5 s, e.g. not ours to kill). Also for
 * groups left behind by a previous host process (their pid from the journal).
 */
export async function terminateProcessGroup(pgid: number, graceMs: number): Promise<boolean> {
  if (!signalGroup(pgid, 'SIGTERM')) return true;
  if (await waitGroupGone(pgid, graceMs)) return true;
  if (!signalGroup(pgid, 'SIGKILL')) return true;
  return waitGroupGone(pgid, 5_000);
}

/** Sends `signal` to every process in the group; false when no process is in it (ESRCH). */
export function signalGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/**
 * Is any live (non-zombie) process left in the group? kill(-pgid, 0) alone also counts zombies,
 * which an init that does not reap (common in containers) keeps forever; on Linux /proc tells.
 */
export function groupAlive(pgid: number): boolean {
  if (!signalGroup(pgid, 0)) return false;
  if (process.platform !== 'linux') return true;
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((n) => /^\d+$/.test(n));
  } catch {
    return true;
  }
  for (const p of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${p}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) === pgid && fields[0] !== 'Z' && fields[0] !== 'X') return true;
  }
  return false;
}

/**
 * The process groups (Linux, from /proc) with a member whose environment holds every one of `vars`,
 * e.g. a runner's FLEET_TASK_ID, FLEET_ATTEMPT and FLEET_DEVICE_ID: how a restarted host agent finds
 * a runner its previous process started but did not live to journal the pid of. Never this
 * process's own group. Processes not ours to read are passed over. Undefined where the platform
 * cannot tell (no /proc).
 */
export function groupsWithEnvironment(vars: Record<string, string>): number[] | undefined {
  if (process.platform !== 'linux') return undefined;
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((n) => /^\d+$/.test(n));
  } catch {
    return undefined;
  }
  const wanted = Object.entries(vars).map(([k, v]) => `${k}=${v}`);
  const own = groupOf('self');
  const groups = new Set<number>();
  for (const p of pids) {
    let environ: string[];
    try {
      environ = readFileSync(`/proc/${p}/environ`, 'utf8').split('\0');
    } catch {
      continue; // exited meanwhile, or not ours to read
    }
    if (!wanted.every((w) => environ.includes(w))) continue;
    const pgid = groupOf(p);
    if (pgid !== undefined && pgid > 1 && pgid !== own) groups.add(pgid);
  }
  return [...groups];
}

function groupOf(pid: string): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const pgid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
    return Number.isInteger(pgid) ? pgid : undefined;
  } catch {
    return undefined;
  }
}

async function waitGroupGone(pgid: number, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (groupAlive(pgid)) {
    if (Date.now() >= deadline) return false;
    await delay(Math.min(25, Math.max(1, deadline - Date.now())));
  }
  return true;
}

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
