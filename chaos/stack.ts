/**
 * A whole fleet as real processes on this machine, for fault injection: a Temporal dev server on a
 * SQLite file (so it can be killed and restarted on the same data), a control-plane worker process,
 * and host-agent processes with their own credentials. Loopback only.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { FleetClient } from '../control-plane/client';
import { signingClientOptions } from '../control-plane/connection';
import { signalKeysFromEnv } from '../control-plane/signal-auth';
import {
  parseControlPlaneConfig,
  type ControlPlaneConfig,
  type ControlPlaneConfigInput,
} from '../control-plane/config';
import { enrollHost } from '../control-plane/hosts';
import { devServerTuningArgs, temporalCliPath } from '../control-plane/temporal-cli';
import { generateHostCredential, publicKeys, saveHostCredential, type HostCredential } from '../host-worker/identity';
import { registerHostBoxKey } from '../control-plane/audit';
import { ALL_SEARCH_ATTRIBUTES } from '../workflows/search-attributes';

const root = join(__dirname, '..');

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/**
 * A free port below the kernel's ephemeral range, so no outgoing connection and no listen(0) of
 * another process can take it while the server is down between restarts (a port from listen(0) is
 * in that range: CI once lost the dev server's HTTP port that way). Falls back to listen(0) where
 * the range starts too low to leave room.
 */
export async function stablePort(): Promise<number> {
  let low = 32768;
  try {
    low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || low;
  } catch {
    // not Linux: assume the usual range
  }
  if (low < 12_000) return freePort();
  for (let i = 0; i < 50; i++) {
    const port = 10_000 + Math.floor(Math.random() * (low - 10_000));
    if (await canListen(port)) return port;
  }
  return freePort();
}

export class Proc {
  child: ChildProcess;
  out = '';
  constructor(
    readonly name: string,
    cmd: string,
    args: string[],
    env: NodeJS.ProcessEnv,
  ) {
    this.child = spawn(cmd, args, { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (b: Buffer) => {
      this.out = (this.out + b.toString()).slice(-200_000);
    };
    this.child.stdout!.on('data', keep);
    this.child.stderr!.on('data', keep);
  }
  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }
  kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (!this.alive) return Promise.resolve();
    const exited = new Promise<void>((r) => this.child.once('exit', () => r()));
    this.child.kill(signal);
    return exited;
  }
  signal(signal: NodeJS.Signals): void {
    if (this.alive) this.child.kill(signal);
  }
  async waitFor(text: string, timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.out.includes(text)) {
      if (!this.alive) throw new Error(`${this.name} exited before "${text}":\n${this.out.slice(-4000)}`);
      if (Date.now() > deadline)
        throw new Error(`${this.name}: no "${text}" within ${timeoutMs} ms:\n${this.out.slice(-4000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

export interface StackOptions {
  dir: string;
  hosts: number;
  devicesPerHost: number;
  pool?: string;
  config?: ControlPlaneConfigInput;
  hostTimeoutMs?: number;
  simDurationMs?: number;
}

export class Stack {
  readonly config: ControlPlaneConfig;
  readonly pool: string;
  server?: Proc;
  controlPlane?: Proc;
  readonly hosts = new Map<string, Proc>();
  readonly credentials = new Map<string, HostCredential>();
  client!: Client;
  fleet!: FleetClient;
  private port = 0;
  private sidePorts?: { http: number; metrics: number };
  private readonly configFile: string;

  constructor(readonly opts: StackOptions) {
    mkdirSync(opts.dir, { recursive: true });
    this.pool = opts.pool ?? 'chaos';
    this.config = parseControlPlaneConfig({
      controlTaskQueue: 'fleet.control.chaos',
      defaultPool: this.pool,
      pools: { [this.pool]: { strategy: 'fifo_match', maxQueueDepth: 100_000 } },
      hostTimeoutMs: opts.hostTimeoutMs ?? 3_000,
      ...opts.config,
    });
    this.configFile = join(opts.dir, 'control-plane.json');
    writeFileSync(this.configFile, JSON.stringify(this.config));
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  private env(): NodeJS.ProcessEnv {
    return { TEMPORAL_ADDRESS: this.address, TEMPORAL_NAMESPACE: 'default' };
  }

  async startServer(): Promise<void> {
    if (!this.port) this.port = await stablePort();
    const sa = ALL_SEARCH_ATTRIBUTES.flatMap((k) => [
      '--search-attribute',
      `${k.name}=${k.type === 'INT' ? 'Int' : 'Keyword'}`,
    ]);
    // Besides gRPC the dev server listens on an HTTP API port, a metrics port and one port per
    // internal service, each picked at random in the ephemeral range when not given: free when
    // picked, not always when bound (CI lost the HTTP port once, failing the run). The two that
    // can be given are picked below that range; a start that lost a port race is tried again.
    for (let attempt = 1; ; attempt++) {
      if (!this.sidePorts) this.sidePorts = { http: await stablePort(), metrics: await stablePort() };
      this.server = new Proc(
        'temporal',
        temporalCliPath(),
        [
          'server',
          'start-dev',
          '--headless',
          '--ip',
          '127.0.0.1',
          '--port',
          String(this.port),
          '--http-port',
          String(this.sidePorts.http),
          '--metrics-port',
          String(this.sidePorts.metrics),
          '--db-filename',
          join(this.opts.dir, 'temporal.db'),
          '--log-level',
          'error',
          ...sa,
          ...devServerTuningArgs(),
        ],
        {},
      );
      try {
        await this.waitForServer();
        break;
      } catch (err) {
        if (attempt >= 3 || this.server.alive || !this.server.out.includes('address already in use')) throw err;
        // the internal services' ports are random each start; ours are picked again too. The
        // gRPC port stays once clients and workers hold it.
        this.sidePorts = undefined;
        if (!this.client) this.port = await stablePort();
      }
    }
    if (!this.client) {
      this.client = new Client({
        connection: await Connection.connect({ address: this.address }),
        namespace: 'default',
        ...signingClientOptions(signalKeysFromEnv()),
      });
      this.fleet = new FleetClient(this.client, this.config);
    }
  }

  private async waitForServer(): Promise<void> {
    const server = this.server!;
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        const c = await Connection.connect({ address: this.address, connectTimeout: 1_000 });
        await c.workflowService.getSystemInfo({});
        await c.close();
        return;
      } catch (err) {
        if (!server.alive || Date.now() > deadline) {
          // an exit is seen a moment after its output: give the process a moment to finish
          if (!server.alive) await new Promise((r) => setTimeout(r, 100));
          throw new Error(`Temporal did not start: ${String(err)}\n${server.out}`, { cause: err });
        }
        await new Promise((r) => setTimeout(r, 300));
      }
    }
  }

  async startControlPlane(): Promise<void> {
    this.controlPlane = new Proc('control-plane', process.execPath, ['--import', 'tsx', 'control-plane/main.ts'], {
      ...this.env(),
      FLEET_CONFIG: this.configFile,
    });
    await this.controlPlane.waitFor('control plane started', 120_000);
  }

  hostIds(): string[] {
    return Array.from({ length: this.opts.hosts }, (_, i) => `chaos-h${i + 1}`);
  }

  async enrollHosts(): Promise<void> {
    for (const hostId of this.hostIds()) {
      const cred = generateHostCredential(hostId);
      this.credentials.set(hostId, cred);
      registerHostBoxKey(hostId, cred.boxKey);
      saveHostCredential(join(this.opts.dir, 'hosts', `${hostId}.credential.json`), cred);
      await enrollHost(this.client, this.config, { hostId, pool: this.pool, keys: publicKeys(cred) });
    }
  }

  async startHost(hostId: string): Promise<Proc> {
    const configPath = join(this.opts.dir, 'hosts', `${hostId}.json`);
    writeFileSync(
      configPath,
      JSON.stringify({
        hostId,
        credentialFile: `${hostId}.credential.json`,
        pool: this.pool,
        snapshotIntervalMs: 500,
        progressIntervalMs: 1_000,
        driver: {
          type: 'sim',
          devices: Array.from({ length: this.opts.devicesPerHost }, (_, i) => ({ deviceId: `d${i + 1}` })),
          defaultDurationMs: this.opts.simDurationMs ?? 500,
        },
      }),
    );
    const p = new Proc(
      hostId,
      process.execPath,
      ['--import', 'tsx', 'host-worker/main.ts', '--config', configPath],
      this.env(),
    );
    this.hosts.set(hostId, p);
    await p.waitFor('host started', 60_000);
    return p;
  }

  async stop(): Promise<void> {
    for (const h of this.hosts.values()) {
      h.signal('SIGCONT');
      await h.kill();
    }
    await this.controlPlane?.kill();
    await this.client?.connection.close().catch(() => undefined);
    await this.server?.kill('SIGTERM');
  }
}
