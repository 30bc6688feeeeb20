/**
 * Real child processes: host agents (`host-worker/main.ts`), the control plane
 * (`control-plane/main.ts`) and the baseline activity worker (`bench/baseline-worker.ts`), so a
 * scenario can SIGKILL one or read its RSS. Same approach as test/helpers/processes.ts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { HostConfig } from '../../host-worker/config';
import { sleep } from './util';

const ROOT = join(__dirname, '..', '..');

export interface Proc {
  child: ChildProcess;
  pid: number;
  output(): string;
  /** Lines printed so far that parse as JSON objects. */
  jsonLines(): Array<Record<string, unknown>>;
  kill(signal?: NodeJS.Signals): void;
  exited: Promise<number | null>;
  waitForOutput(text: string, timeoutMs?: number): Promise<void>;
}

export function writeTempJson(kind: string, value: unknown): string {
  const path = join(mkdtempSync(join(tmpdir(), `bench-${kind}-`)), `${kind}.json`);
  writeFileSync(path, JSON.stringify(value), { mode: 0o600 });
  return path;
}

export function spawnHostProcess(address: string, config: Partial<HostConfig> & Pick<HostConfig, 'hostId' | 'driver'>): Proc {
  return spawnEntry(address, join('host-worker', 'main.ts'), ['--config', writeTempJson('host', config)], {});
}

/** `sdkMetrics`: where its SDK Prometheus endpoint listens (default: off, so runs never collide on a port). */
export function spawnControlPlaneProcess(address: string, config: unknown, sdkMetrics = 'off'): Proc {
  return spawnEntry(address, join('control-plane', 'main.ts'), [], {
    FLEET_CONFIG: writeTempJson('control', config),
    FLEET_SDK_METRICS_ADDRESS: sdkMetrics,
  });
}

export function spawnBaselineWorker(address: string, taskQueue: string, slots: number, name: string): Proc {
  return spawnEntry(address, join('bench', 'baseline-worker.ts'), [], {
    BENCH_TASK_QUEUE: taskQueue,
    BENCH_SLOTS: String(slots),
    BENCH_WORKER_NAME: name,
  });
}

function spawnEntry(address: string, entry: string, args: string[], extraEnv: Record<string, string>): Proc {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, entry), ...args], {
    cwd: ROOT,
    env: { ...process.env, ...extraEnv, TEMPORAL_ADDRESS: address, TEMPORAL_NAMESPACE: 'default' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr!.on('data', (b: Buffer) => (out += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    pid: child.pid!,
    output: () => out,
    jsonLines() {
      const lines: Array<Record<string, unknown>> = [];
      for (const line of out.split('\n')) {
        if (!line.startsWith('{')) continue;
        try {
          lines.push(JSON.parse(line) as Record<string, unknown>);
        } catch {
          // a partial line
        }
      }
      return lines;
    },
    kill(signal = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    },
    exited,
    async waitForOutput(text, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      while (!out.includes(text)) {
        if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${entry} exited before "${text}":\n${out}`);
        if (Date.now() > deadline) throw new Error(`timed out waiting for "${text}" from ${entry}:\n${out}`);
        await sleep(100);
      }
    },
  };
}

/** SIGTERM, then SIGKILL if still alive after graceMs. */
export async function stopProc(p: Proc, graceMs = 5_000): Promise<void> {
  p.kill('SIGTERM');
  const done = await Promise.race([p.exited.then(() => true), sleep(graceMs).then(() => false)]);
  if (!done) {
    p.kill('SIGKILL');
    await p.exited;
  }
}
