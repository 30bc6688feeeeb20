/**
 * Real host-agent processes (`tsx host-worker/main.ts`), for tests that kill or pause a host.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { HostConfigInput } from '../../host-worker/config';
import { testEnv } from '../setup';

export interface HostProcess {
  child: ChildProcess;
  output(): string;
  kill(signal?: NodeJS.Signals): void;
  pause(): void;
  resume(): void;
  exited: Promise<number | null>;
  waitForOutput(text: string, timeoutMs?: number): Promise<void>;
}

/** A host process; `configPath` reuses an existing config (and so its journal) instead of writing a new one. */
export function spawnHost(config: HostConfigInput | { configPath: string }): HostProcess {
  const path = 'configPath' in config ? config.configPath : writeConfig('host', config);
  const p = spawnEntry(join('host-worker', 'main.ts'), ['--config', path], {});
  return Object.assign(p, { configPath: path });
}

/** `overrides` win over the test server's TEMPORAL_* (another namespace, say). */
export function spawnControlPlane(config: unknown, overrides: Record<string, string> = {}): HostProcess {
  return spawnEntry(join('control-plane', 'main.ts'), [], { FLEET_CONFIG: writeConfig('control', config) }, overrides);
}

function writeConfig(kind: string, config: unknown): string {
  const path = join(mkdtempSync(join(tmpdir(), `fleet-${kind}-`)), `${kind}.json`);
  writeFileSync(path, JSON.stringify(config));
  return path;
}

function spawnEntry(
  entry: string,
  args: string[],
  extraEnv: Record<string, string>,
  overrides: Record<string, string> = {},
): HostProcess {
  const env = testEnv();
  const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, '..', '..', entry), ...args], {
    env: {
      ...process.env,
      ...extraEnv,
      TEMPORAL_ADDRESS: env.address,
      TEMPORAL_NAMESPACE: env.namespace ?? 'default',
      ...overrides,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (b) => (out += b.toString()));
  child.stderr!.on('data', (b) => (out += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    output: () => out,
    kill: (signal = 'SIGKILL') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    },
    pause: () => child.kill('SIGSTOP'),
    resume: () => child.kill('SIGCONT'),
    exited,
    async waitForOutput(text, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (!out.includes(text)) {
        if (child.exitCode !== null || child.signalCode !== null)
          throw new Error(`process exited before "${text}":\n${out}`);
        if (Date.now() > deadline) throw new Error(`timed out waiting for "${text}":\n${out}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
  };
}
