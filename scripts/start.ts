/**
 * `npm start`: the whole stack on one machine. A Temporal dev server (SQLite file under .data/,
 * Web UI, the fleet's search attributes), the control-plane worker and one simulated host.
 * Ctrl-C stops everything.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Connection } from '@temporalio/client';
import { temporalCliPath } from '../control-plane/temporal-cli';
import { ALL_SEARCH_ATTRIBUTES } from '../workflows/search-attributes';
import { addHost } from './hosts-add';

const root = join(__dirname, '..');
const port = Number(process.env.FLEET_TEMPORAL_PORT ?? 7233);
const uiPort = Number(process.env.FLEET_UI_PORT ?? 8233);
const dataDir = join(root, '.data');
const children: ChildProcess[] = [];

function run(name: string, cmd: string, args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
  const child = spawn(cmd, args, { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const prefix = (line: string) => line && process.stdout.write(`[${name}] ${line}\n`);
  child.stdout!.on('data', (b: Buffer) => b.toString().split('\n').forEach(prefix));
  child.stderr!.on('data', (b: Buffer) => b.toString().split('\n').forEach(prefix));
  child.on('exit', (code, signal) => {
    if (!stopping) {
      console.error(`[${name}] exited (${code ?? signal}); stopping the stack`);
      void stop(1);
    }
  });
  children.push(child);
  return child;
}

let stopping = false;
async function stop(code = 0): Promise<void> {
  if (stopping) return;
  stopping = true;
  for (const c of [...children].reverse()) c.kill('SIGTERM');
  await Promise.all(children.map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.once('exit', r)))));
  process.exit(code);
}

async function waitForServer(address: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      const c = await Connection.connect({ address, connectTimeout: 1_000 });
      await c.healthService.check({});
      await c.close();
      return;
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`Temporal did not come up on ${address}: ${String(err)}`, { cause: err });
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

async function main(): Promise<void> {
  process.once('SIGINT', () => void stop());
  process.once('SIGTERM', () => void stop());
  mkdirSync(dataDir, { recursive: true });
  const address = `127.0.0.1:${port}`;
  const saFlags = ALL_SEARCH_ATTRIBUTES.flatMap((k) => ['--search-attribute', `${k.name}=${k.type === 'INT' ? 'Int' : 'Keyword'}`]);
  run('temporal', temporalCliPath(), [
    'server', 'start-dev',
    '--ip', '127.0.0.1',
    '--port', String(port),
    '--ui-port', String(uiPort),
    '--db-filename', join(dataDir, 'temporal.db'),
    '--log-level', 'warn',
    ...saFlags,
  ]);
  await waitForServer(address);
  const env = { TEMPORAL_ADDRESS: address, TEMPORAL_NAMESPACE: 'default' };
  process.env.TEMPORAL_ADDRESS = address;
  // The operator step a real lab does once per host: issue a credential and enrol its public keys.
  await addHost('lab-1', { out: join(dataDir, 'hosts', 'lab-1.json') });
  run('control-plane', process.execPath, ['--import', 'tsx', 'control-plane/main.ts'], env);
  run('host lab-1', process.execPath, ['--import', 'tsx', 'host-worker/main.ts', '--config', process.env.FLEET_HOST_CONFIG ?? 'examples/host.json'], env);
  console.log(
    [
      '',
      `Temporal:   ${address}   (data in .data/temporal.db)`,
      `Web UI:     http://127.0.0.1:${uiPort}/namespaces/default/workflows`,
      `Submit:     npm run submit -- --goal "open settings" --driver-type android`,
      'Ctrl-C stops everything.',
      '',
    ].join('\n'),
  );
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  void stop(1);
});
