/**
 * CPU accounting, so figures can be read per unit of work even on a shared machine: this process
 * (workers + clients), the dev server process, and the whole machine (from /proc/stat), in seconds.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { round } from './util';

const TICKS_PER_SEC = 100; // getconf CLK_TCK on Linux

/** The pid of the `temporal server start-dev` listening on `port`, if it can be found in /proc. */
export function findServerPid(port: number): number | undefined {
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const args = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      if (args.includes('start-dev') && args.includes(String(port))) return Number(name);
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}

function procCpuSec(pid: number | undefined): number {
  if (!pid) return NaN;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields[11], fields[12] = utime, stime (stat fields 14 and 15)
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SEC;
  } catch {
    return NaN;
  }
}

function machineBusySec(): number {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const total = v.reduce((a, b) => a + b, 0);
  const idle = (v[3] ?? 0) + (v[4] ?? 0);
  return (total - idle) / TICKS_PER_SEC;
}

export interface CpuMark {
  wall: number;
  self: number;
  server: number;
  machine: number;
  /** Extra processes (e.g. a spawned control plane), by label. */
  extra: Record<string, number>;
}

export interface CpuUse {
  wallSec: number;
  /** This process: the in-process workers and clients. */
  benchProcessSec: number;
  serverSec: number;
  /** Everything on the machine, including other users' processes. */
  machineSec: number;
  /** machineSec minus ours and the server's: what else was running. */
  othersSec: number;
  extra: Record<string, number>;
}

export class CpuMeter {
  constructor(
    readonly serverPid: number | undefined,
    private readonly extraPids: () => Record<string, number> = () => ({}),
  ) {}

  mark(): CpuMark {
    const u = process.cpuUsage();
    return {
      wall: Date.now(),
      self: (u.user + u.system) / 1e6,
      server: procCpuSec(this.serverPid),
      machine: machineBusySec(),
      extra: Object.fromEntries(Object.entries(this.extraPids()).map(([k, pid]) => [k, procCpuSec(pid)])),
    };
  }

  since(m: CpuMark): CpuUse {
    const n = this.mark();
    const extra = Object.fromEntries(Object.entries(n.extra).map(([k, v]) => [k, round(v - (m.extra[k] ?? 0), 2)]));
    const extraSum = Object.values(extra).reduce((a, b) => a + (Number.isFinite(b) ? b : 0), 0);
    const self = n.self - m.self;
    const server = n.server - m.server;
    const machine = n.machine - m.machine;
    return {
      wallSec: round((n.wall - m.wall) / 1000, 2),
      benchProcessSec: round(self, 2),
      serverSec: round(server, 2),
      machineSec: round(machine, 2),
      othersSec: round(machine - self - server - extraSum, 2),
      extra,
    };
  }
}
