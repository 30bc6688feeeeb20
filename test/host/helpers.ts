/** Shared helpers of the host-agent unit tests (no Temporal server needed). */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RunContext } from '../../host-worker/runners';
import type { DeviceSnapshot } from '../../workflows/types';

export interface RecordingContext extends RunContext {
  controller: AbortController;
  lines: string[];
  startedCalls: number;
  /** Each call in order: 'started' or 'progress:<line>'. */
  events: string[];
}

export function recordingContext(device: Partial<DeviceSnapshot> = {}): RecordingContext {
  const controller = new AbortController();
  const ctx: RecordingContext = {
    taskId: 'task-1',
    attempt: 2,
    device: { deviceId: 'dev-1', driverType: 'android', tags: [], state: 'idle', health: 'good', ...device },
    signal: controller.signal,
    controller,
    lines: [],
    startedCalls: 0,
    events: [],
    started() {
      ctx.startedCalls++;
      ctx.events.push('started');
    },
    progress(message) {
      ctx.lines.push(message);
      ctx.events.push(`progress:${message}`);
    },
  };
  return ctx;
}

/** A fresh temporary directory, removed after the suite. */
export function tempDirs(): { make(): string; cleanup(): void } {
  const dirs: string[] = [];
  return {
    make() {
      const d = mkdtempSync(join(tmpdir(), 'fleet-host-test-'));
      dirs.push(d);
      return d;
    },
    cleanup() {
      for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    },
  };
}

/** Is a process with this pid alive (zombies count as gone)? */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
    return state !== 'Z' && state !== 'X';
  } catch {
    return process.platform !== 'linux';
  }
}

export function waitFor(cond: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const tick = () => {
      if (cond()) return resolve();
      if (Date.now() > deadline) return reject(new Error(`timed out waiting for ${what}`));
      setTimeout(tick, 10);
    };
    tick();
  });
}

export const node = process.execPath;
