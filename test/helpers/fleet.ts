/**
 * A fleet per test: its own pool, control-plane task queue and host ids, so tests never share a
 * workflow ID or a task queue. Hosts run in-process (real workers on their own queues) or as
 * real child processes (see processes.ts) when a test needs to kill or pause one.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, type WorkflowClientInterceptor, type WorkflowHandle } from '@temporalio/client';
import type { WorkflowBundle } from '@temporalio/worker';
import { signingClientOptions } from '../../control-plane/connection';
import { signalKeysFromEnv } from '../../control-plane/signal-auth';
import { temporal } from '@temporalio/proto';
import { FleetClient } from '../../control-plane/client';
import {
  parseControlPlaneConfig,
  type ControlPlaneConfig,
  type ControlPlaneConfigInput,
} from '../../control-plane/config';
import { enrollHost } from '../../control-plane/hosts';
import { createControlPlaneWorker, ensurePools, type ControlPlaneWorkers } from '../../control-plane/worker';
import {
  generateHostCredential,
  publicKeys,
  saveHostCredential,
  sign,
  type HostCredential,
} from '../../host-worker/identity';
import { startHost, type HostAgent, type HostOptions } from '../../host-worker/host';
import type { HostConfigInput } from '../../host-worker/config';
import { simDevices, type SimDeviceSpec } from '../../host-worker/sim';
import { SignDomain } from '../../workflows/identity';
import { schedulerWorkflowId } from '../../workflows/ids';
import { schedulerStateQuery, type SchedulerView } from '../../workflows/messages';
import type { AttemptReport, TaskStatus, TaskView } from '../../workflows/types';
import { testEnv, workflowBundle } from '../setup';
import { registerTestHostKey } from './invariants';
import { spawnControlPlane, spawnHost as spawnHostProcess, type HostProcess } from './processes';

/** A report signed with a host's credential, as the host agent sends it. */
export function signReport(cred: HostCredential, r: Omit<AttemptReport, 'sig'>): AttemptReport {
  return { ...r, sig: sign(cred, SignDomain.Report, r) };
}

export const uid = (prefix: string): string => `${prefix}-${randomBytes(4).toString('hex')}`;

export interface FleetOptions {
  /** 'process': the control plane runs as a real child process (tests that kill it). */
  controlPlane?: 'in-process' | 'process';
  strategy?: string;
  maxQueueDepth?: number;
  agingMs?: number;
  historyLimit?: number;
  holdSweepMs?: number;
  holdSlackMs?: number;
  poolWatchMs?: number;
  taskDefaults?: NonNullable<ControlPlaneConfigInput['taskDefaults']>;
  /** The in-process control plane's workflow code: a bundle with a test's interceptors (default the suite's). */
  workflowBundle?: WorkflowBundle;
  /** Interceptors of the control plane's client (its activities' and the fleet client's), before its own. */
  clientInterceptors?: WorkflowClientInterceptor[];
}

export interface Fleet {
  pool: string;
  config: ControlPlaneConfig;
  client: Client;
  fleet: FleetClient;
  hostId(name: string): string;
  /** Issues (once per name) and enrols a host credential, as an operator would; returns it. */
  enroll(name: string, opts?: { hostTimeoutMs?: number; snapshotTimeoutMs?: number }): Promise<HostCredential>;
  addHost(
    name: string,
    devices: SimDeviceSpec[],
    /** With `credential`, that one is used as it is (not enrolled here). */
    opts?: Partial<HostOptions> & { hostTimeoutMs?: number },
  ): Promise<HostAgent>;
  /** A host agent as a real child process (for SIGKILL / SIGSTOP), enrolled first. */
  spawnHost(
    name: string,
    deviceIds: string[],
    opts?: {
      hostTimeoutMs?: number;
      snapshotIntervalMs?: number;
      restart?: boolean;
      expectStart?: boolean;
      /** Replaces parts of the generated host config (e.g. another driver or runner). */
      config?: Partial<HostConfigInput>;
    },
  ): Promise<HostProcess>;
  /** The config file of a host spawned as a process (its journal sits beside it). */
  hostConfigPath(name: string): string | undefined;
  /** In-process: graceful worker shutdown; process: SIGKILL. */
  stopControlPlane(): Promise<void>;
  startControlPlane(): Promise<void>;
  scheduler(): Promise<SchedulerView>;
  waitFor(taskId: string, pred: (t: TaskView) => boolean, what: string, timeoutMs?: number): Promise<TaskView>;
  waitForStatus(taskId: string, status: TaskStatus, timeoutMs?: number): Promise<TaskView>;
  stop(): Promise<void>;
}

/** Short leases and backoffs so expiry tests run in seconds. */
export const FAST_POLICY = {
  maxAttempts: 3,
  maxDispatchFailures: 3,
  backoff: { initialMs: 200, multiplier: 2, maxMs: 2_000 },
  ackTimeoutMs: 10_000,
  leaseTimeoutMs: 2_000,
  executionTimeoutMs: 60_000,
};

/** The host's liveness session has been picked up by a worker and is running (from describe: pending activities). */
export async function sessionRunning(handle: WorkflowHandle): Promise<true | undefined> {
  const pending = (await handle.describe()).raw.pendingActivities ?? [];
  const STARTED = temporal.api.enums.v1.PendingActivityState.PENDING_ACTIVITY_STATE_STARTED;
  return pending.some((a) => a.activityType?.name === 'hostSession' && a.state === STARTED) ? true : undefined;
}

export async function eventually<T>(
  probe: () => Promise<T | undefined>,
  what: string,
  timeoutMs = 20_000,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`,
      );
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export async function startFleet(name: string, opts: FleetOptions = {}): Promise<Fleet> {
  const env = testEnv();
  const suffix = uid(name.replace(/[^A-Za-z0-9]+/g, '-').slice(0, 24));
  const pool = `pool-${suffix}`;
  const config = parseControlPlaneConfig({
    controlTaskQueue: `control-${suffix}`,
    defaultPool: pool,
    pools: {
      [pool]: {
        strategy: opts.strategy ?? 'fifo_match',
        maxQueueDepth: opts.maxQueueDepth ?? 1000,
        agingMs: opts.agingMs ?? 60_000,
      },
    },
    taskDefaults: opts.taskDefaults ?? FAST_POLICY,
    historyLimit: opts.historyLimit,
    holdSweepMs: opts.holdSweepMs,
    holdSlackMs: opts.holdSlackMs,
    poolWatchMs: opts.poolWatchMs,
  });
  // A control-plane client: it tags its signals with the fleet's key (env.client, without, is a
  // stranger to the workflows: what a host's credential would be).
  const signing = signingClientOptions(signalKeysFromEnv());
  const client = new Client({
    connection: env.connection,
    namespace: env.namespace ?? 'default',
    ...signing,
    interceptors: { workflow: [...(opts.clientInterceptors ?? []), ...signing.interceptors.workflow] },
  });
  const fleet = new FleetClient(client, config);
  const hosts: HostAgent[] = [];
  const procs: HostProcess[] = [];
  const credentials = new Map<string, HostCredential>();
  const hostConfigs = new Map<string, string>();
  let worker: ControlPlaneWorkers | undefined;
  let running: Promise<void> | undefined;
  let proc: HostProcess | undefined;

  const startControlPlane = async () => {
    if (opts.controlPlane === 'process') {
      proc = spawnControlPlane(config);
      await proc.waitForOutput('control plane started');
      return;
    }
    worker = await createControlPlaneWorker({
      connection: env.nativeConnection,
      client,
      config,
      workflowBundle: opts.workflowBundle ?? workflowBundle(),
      namespace: env.namespace ?? 'default',
    });
    running = worker.run();
  };
  const stopControlPlane = async () => {
    if (proc) {
      proc.kill('SIGKILL');
      await proc.exited;
      proc = undefined;
    }
    worker?.shutdown();
    await running;
    worker = undefined;
  };
  await startControlPlane();
  if (opts.controlPlane !== 'process') await ensurePools(client, config);

  const self: Fleet = {
    pool,
    config,
    client,
    fleet,
    hostId: (n) => `${n}-${suffix}`,
    async enroll(n, enrollOpts = {}) {
      const hostId = self.hostId(n);
      let cred = credentials.get(hostId);
      if (!cred) {
        cred = generateHostCredential(hostId);
        credentials.set(hostId, cred);
        registerTestHostKey(hostId, cred.boxKey);
      }
      await enrollHost(client, config, {
        hostId,
        pool,
        keys: publicKeys(cred),
        hostTimeoutMs: enrollOpts.hostTimeoutMs ?? 5_000,
        snapshotTimeoutMs: enrollOpts.snapshotTimeoutMs,
      });
      return cred;
    },
    async addHost(n, devices, hostOpts = {}) {
      const { hostTimeoutMs, ...rest } = hostOpts;
      const credential = rest.credential ?? (await self.enroll(n, { hostTimeoutMs }));
      const host = await startHost({
        credential,
        pool,
        namespace: env.namespace ?? 'default',
        workerConnection: env.nativeConnection,
        clientConnection: client.connection,
        devices: simDevices(devices),
        snapshotIntervalMs: 1_000,
        progressIntervalMs: 100,
        ...rest,
      });
      hosts.push(host);
      return host;
    },
    async spawnHost(n, deviceIds, spawnOpts = {}) {
      const credential = await self.enroll(n, { hostTimeoutMs: spawnOpts.hostTimeoutMs ?? 1_500 });
      const existing = hostConfigs.get(n);
      if (existing && spawnOpts.restart) {
        const again = spawnHostProcess({ configPath: existing });
        procs.push(again);
        if (spawnOpts.expectStart !== false) await again.waitForOutput('host started');
        return again;
      }
      const dir = mkdtempSync(join(tmpdir(), 'fleet-cred-'));
      const credentialFile = join(dir, 'credential.json');
      saveHostCredential(credentialFile, credential);
      const p = spawnHostProcess({
        hostId: credential.hostId,
        credentialFile,
        pool,
        snapshotIntervalMs: spawnOpts.snapshotIntervalMs ?? 300,
        progressIntervalMs: 200,
        driver: {
          type: 'sim',
          devices: deviceIds.map((id) => ({
            deviceId: id,
            driverType: 'sim',
            tags: [],
            health: 'good' as const,
            state: 'idle' as const,
          })),
          defaultDurationMs: 100,
          defaultOutcome: 'done',
        },
        definitions: {},
        ...spawnOpts.config,
      });
      procs.push(p);
      hostConfigs.set(n, (p as HostProcess & { configPath: string }).configPath);
      await p.waitForOutput('host started');
      return p;
    },
    hostConfigPath: (n) => hostConfigs.get(n),
    stopControlPlane,
    startControlPlane,
    scheduler: () => client.workflow.getHandle(schedulerWorkflowId(pool)).query(schedulerStateQuery),
    waitFor: (taskId, pred, what, timeoutMs = 20_000) =>
      eventually(
        async () => {
          const t = await fleet.get(taskId);
          return pred(t) ? t : undefined;
        },
        `task ${taskId}: ${what}`,
        timeoutMs,
      ),
    waitForStatus: (taskId, status, timeoutMs) =>
      self.waitFor(taskId, (t) => t.status === status, `status ${status}`, timeoutMs),
    async stop() {
      for (const p of procs) {
        p.resume();
        p.kill('SIGKILL');
      }
      await Promise.all(hosts.map((h) => h.stop().catch(() => undefined)));
      await stopControlPlane();
    },
  };
  return self;
}
