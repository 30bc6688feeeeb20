/**
 * A fleet for one scenario, assembled the way the product assembles it: parsed control-plane
 * configuration, the control-plane worker, ensurePools, then per host an operator enrolment
 * (generateHostCredential / publicKeys / enrollHost) and startHost in-process with a zero-length
 * runner that records when each attempt reached the host. Every scenario gets its own pool,
 * control task queue and host ids, so nothing is shared between scenarios.
 */
import { Client } from '@temporalio/client';
import { signingClientOptions } from '../../control-plane/connection';
import { signalKeysFromEnv } from '../../control-plane/signal-auth';
import { Worker, type WorkerOptions } from '@temporalio/worker';
import { FleetClient } from '../../control-plane/client';
import {
  parseControlPlaneConfig,
  taskWorkflowQueue,
  type ControlPlaneConfig,
  type ControlPlaneConfigInput,
} from '../../control-plane/config';
import { enrollHost } from '../../control-plane/hosts';
import { createControlPlaneWorker, ensurePools, type ControlPlaneWorkers } from '../../control-plane/worker';
import { startHost, type HostAgent } from '../../host-worker/host';
import { generateHostCredential, publicKeys, type HostCredential } from '../../host-worker/identity';
import type { RunContext, Runners } from '../../host-worker/runners';
import { simDevices } from '../../host-worker/sim';
import { deviceWorkflowId, hostWorkflowId, schedulerWorkflowId } from '../../workflows/ids';
import { schedulerStateQuery, type SchedulerView } from '../../workflows/messages';
import type { BenchOptions } from '../scenarios/types';
import { CpuMeter } from './cpu';
import type { BenchEnv } from './env';
import { spawnControlPlaneProcess, stopProc, type Proc } from './procs';
import { log, mapLimit, uid, waitUntil } from './util';

// ---- poller count of in-process host workers ----

let hostPollers: number | undefined;
let patched = false;
/**
 * startHost has no option for the activity poller count (SDK default: min(10, slots), i.e. 10 per
 * 10-device host). With 100 hosts in one process that is 1,000 long polls; the benchmark may cap it
 * by wrapping Worker.create for `fleet.host.*` queues only. The baseline's host workers use the
 * same count, so both sides poll alike. undefined = SDK default.
 */
export function setHostPollers(n: number | undefined): void {
  hostPollers = n;
  if (patched) return;
  patched = true;
  const original = Worker.create.bind(Worker);
  Worker.create = (options: WorkerOptions) =>
    original(
      hostPollers !== undefined && options.taskQueue.startsWith('fleet.host.')
        ? { ...options, maxConcurrentActivityTaskPolls: hostPollers }
        : options,
    );
}
export const currentHostPollers = (): number | undefined => hostPollers;

// ---- every long-lived workflow the run created, for the history-length check at the end ----

export const longLivedWorkflows = new Set<string>();

// ---- retiring a scenario's fleet ----

/** The control and task-workflow queues of every fleet started and not yet retired. */
const openQueues = new Set<string>();

/** Forgets the open fleets without touching them (their server is about to go). */
export function forgetFleets(): void {
  openQueues.clear();
}

/**
 * Terminates every workflow still running on the task queues of the fleets started since the last
 * call (schedulers, devices, hosts, tasks left queued), so nothing of one scenario keeps working on
 * the server during the next. A fleet whose workers have stopped is not idle: its host watchdogs
 * fire, the hosts go offline, devices and schedulers are signalled, and each of those workflow
 * tasks goes to a queue nobody polls (and from a dead worker's sticky queue back to the normal one).
 * Run between scenarios (bench/run.ts --server shared), after a scenario has read its histories.
 * Returns how many workflows it terminated.
 */
export async function retireFleets(client: Client): Promise<number> {
  const queues = [...openQueues];
  openQueues.clear();
  let terminated = 0;
  for (const q of queues) {
    // Visibility lags behind a start by a moment; list until a pass finds nothing running.
    for (let pass = 0; pass < 5; pass++) {
      const ids: string[] = [];
      for await (const wf of client.workflow.list({ query: `TaskQueue = '${q}' AND ExecutionStatus = 'Running'` })) {
        ids.push(wf.workflowId);
      }
      if (ids.length === 0) break;
      await mapLimit(ids, 16, async (id) => {
        try {
          await client.workflow.getHandle(id).terminate('bench scenario done');
          terminated++;
        } catch {
          // already closed
        }
      });
    }
  }
  return terminated;
}

// ---- the zero-length runner ----

export interface StartRecord {
  taskId: string;
  attempt: number;
  hostId: string;
  deviceId: string;
  /** performance.now() when the runner was entered (the host activity started the work). */
  at: number;
  /** Date.now() at the same moment. */
  epoch: number;
}

/** Runners that hand every goal and every definition to `run`, then report the attempt done. */
export function runnersFor(run: (ctx: RunContext) => Promise<void>): Runners {
  const done = async (ctx: RunContext) => {
    await run(ctx);
    return { status: 'done' as const };
  };
  return {
    goal: { runGoal: (_goal, ctx) => done(ctx) },
    workflow: { definitions: [], inlineSteps: false, runDefinition: (_def, ctx) => done(ctx) },
  };
}

export class RunRecorder {
  readonly starts = new Map<string, StartRecord>();
  readonly all: StartRecord[] = [];
  calls = 0;

  constructor(private readonly hostId: (ctx: RunContext) => string = () => '') {}

  record(ctx: RunContext, hostId: string): void {
    const r: StartRecord = {
      taskId: ctx.taskId,
      attempt: ctx.attempt,
      hostId: hostId || this.hostId(ctx),
      deviceId: ctx.device.deviceId,
      at: performance.now(),
      epoch: Date.now(),
    };
    this.calls++;
    this.all.push(r);
    if (!this.starts.has(ctx.taskId)) this.starts.set(ctx.taskId, r);
  }

  /** A Runners object whose runners call ctx.started() and return done at once. */
  runners(hostId: string): Runners {
    return runnersFor(async (ctx) => {
      this.record(ctx, hostId);
      ctx.started();
    });
  }

  waitForCount(n: number, timeoutMs: number): Promise<true> {
    return waitUntil(
      () => (this.starts.size >= n ? true : undefined),
      () => `${n} tasks to reach a host (${this.starts.size} did)`,
      timeoutMs,
      20,
    );
  }
}

// ---- the fleet ----

export interface BenchFleetOptions {
  name: string;
  hosts: number;
  devicesPerHost: number;
  driverType?: string;
  maxQueueDepth?: number;
  taskDefaults?: ControlPlaneConfigInput['taskDefaults'];
  /** The host liveness lease (session heartbeat timeout); product default 30 s. */
  hostTimeoutMs?: number;
  /** No signed snapshot for this long: offline; product default 180 s. */
  snapshotTimeoutMs?: number;
  /** Host snapshot period; product default 60 s. */
  snapshotIntervalMs?: number;
  /**
   * Who serves the control queue: 'in-process' (default) a control-plane worker in this process;
   * 'process' a `control-plane/main.ts` child process, as the product runs it; false: nobody yet
   * (the scenario spawns its own control-plane process).
   */
  controlPlane?: 'in-process' | 'process' | false;
  /** Extra pools (same config) on the same control queue. */
  extraPools?: string[];
}

export interface BenchFleet {
  pool: string;
  pools: string[];
  config: ControlPlaneConfig;
  client: Client;
  fleet: FleetClient;
  recorder: RunRecorder;
  hostIds: string[];
  deviceIdsOf(hostId: string): string[];
  setupMs: number;
  /** The control-plane child process (controlPlane: 'process'), for CPU accounting. */
  controlPlanePid?: number;
  /** Enrols and starts one more in-process host (zero-length runner); returns it once started. */
  addHost(
    hostId: string,
    deviceIds: string[],
    opts?: { pool?: string; driverType?: string; tags?: string[]; runners?: Runners },
  ): Promise<HostAgent>;
  enroll(hostId: string, pool?: string): Promise<HostCredential>;
  scheduler(pool?: string): Promise<SchedulerView>;
  /** Waits until the pool's scheduler sees `n` online devices. */
  waitForDevices(n: number, timeoutMs: number, pool?: string): Promise<void>;
  stopHost(hostId: string): Promise<void>;
  stop(): Promise<void>;
}

export function benchConfig(opts: BenchFleetOptions, suffix: string): ControlPlaneConfig {
  const pool = `pool-${suffix}`;
  const poolCfg = { strategy: 'fifo_match', maxQueueDepth: opts.maxQueueDepth ?? 20_000, agingMs: 60_000 };
  return parseControlPlaneConfig({
    controlTaskQueue: `bench.control.${suffix}`,
    defaultPool: pool,
    pools: Object.fromEntries([pool, ...(opts.extraPools ?? []).map((p) => `${p}-${suffix}`)].map((p) => [p, poolCfg])),
    taskDefaults: opts.taskDefaults ?? {},
    hostTimeoutMs: opts.hostTimeoutMs,
    snapshotTimeoutMs: opts.snapshotTimeoutMs,
  });
}

export async function startBenchFleet(be: BenchEnv, opts: BenchFleetOptions): Promise<BenchFleet> {
  const t0 = Date.now();
  const suffix = uid(opts.name);
  const config = benchConfig(opts, suffix);
  const pool = config.defaultPool;
  const pools = Object.keys(config.pools);
  const client = new Client({
    connection: be.env.connection,
    namespace: be.env.namespace ?? 'default',
    ...signingClientOptions(signalKeysFromEnv()),
  });
  const fleet = new FleetClient(client, config);
  const recorder = new RunRecorder();
  const hosts = new Map<string, HostAgent>();
  const devicesOf = new Map<string, string[]>();
  let worker: ControlPlaneWorkers | undefined;
  let running: Promise<void> | undefined;
  let cpProc: Proc | undefined;

  if (opts.controlPlane === 'process') {
    cpProc = spawnControlPlaneProcess(be.env.address, config);
    await cpProc.waitForOutput('control plane started', 120_000);
  } else if (opts.controlPlane !== false) {
    worker = await createControlPlaneWorker({
      connection: be.env.nativeConnection,
      client,
      config,
      workflowBundle: be.fleetBundle,
      namespace: be.namespace,
      identity: `bench-control-${suffix}`,
    });
    running = worker.run();
    await ensurePools(client, config);
  }
  for (const p of pools) longLivedWorkflows.add(schedulerWorkflowId(p));
  openQueues.add(config.controlTaskQueue);
  openQueues.add(taskWorkflowQueue(config));

  const enroll = async (hostId: string, hostPool = pool): Promise<HostCredential> => {
    const credential = generateHostCredential(hostId);
    await enrollHost(client, config, { hostId, pool: hostPool, keys: publicKeys(credential) });
    longLivedWorkflows.add(hostWorkflowId(hostId));
    return credential;
  };

  const addHost: BenchFleet['addHost'] = async (hostId, deviceIds, hostOpts = {}) => {
    const hostPool = hostOpts.pool ?? pool;
    const credential = await enroll(hostId, hostPool);
    const host = await startHost({
      credential,
      pool: hostPool,
      namespace: be.namespace,
      workerConnection: be.env.nativeConnection,
      clientConnection: client.connection,
      devices: simDevices(
        deviceIds.map((deviceId) => ({
          deviceId,
          driverType: hostOpts.driverType ?? opts.driverType ?? 'sim',
          tags: hostOpts.tags ?? [],
        })),
      ),
      runners: hostOpts.runners ?? recorder.runners(hostId),
      snapshotIntervalMs: opts.snapshotIntervalMs ?? 60_000,
      progressIntervalMs: 5_000,
    });
    hosts.set(hostId, host);
    devicesOf.set(hostId, deviceIds);
    for (const d of deviceIds) longLivedWorkflows.add(deviceWorkflowId(hostId, d));
    return host;
  };

  const hostIds = Array.from({ length: opts.hosts }, (_, i) => `h${String(i).padStart(3, '0')}-${suffix}`);
  const deviceIds = Array.from({ length: opts.devicesPerHost }, (_, i) => `d${String(i).padStart(2, '0')}`);
  await mapLimit(hostIds, 10, (h) => addHost(h, deviceIds));

  const scheduler = (p = pool) => client.workflow.getHandle(schedulerWorkflowId(p)).query(schedulerStateQuery);
  const waitForDevices = async (n: number, timeoutMs: number, p = pool) => {
    await waitUntil(
      async () => {
        const s = await scheduler(p);
        return s.devices.filter((d) => d.hostOnline).length >= n ? true : undefined;
      },
      `${n} devices online in ${p}`,
      timeoutMs,
      2_000,
    );
  };
  if (opts.hosts > 0) await waitForDevices(opts.hosts * opts.devicesPerHost, 120_000);
  const setupMs = Date.now() - t0;
  log(`fleet ${opts.name}: ${opts.hosts} hosts x ${opts.devicesPerHost} devices ready in ${setupMs} ms (pool ${pool})`);

  return {
    pool,
    pools,
    config,
    client,
    fleet,
    recorder,
    hostIds,
    deviceIdsOf: (h) => devicesOf.get(h) ?? [],
    setupMs,
    ...(cpProc ? { controlPlanePid: cpProc.pid } : {}),
    addHost,
    enroll,
    scheduler,
    waitForDevices,
    async stopHost(hostId) {
      await hosts.get(hostId)?.stop();
      hosts.delete(hostId);
    },
    async stop() {
      await Promise.all([...hosts.values()].map((h) => h.stop().catch(() => undefined)));
      hosts.clear();
      worker?.shutdown();
      await running?.catch(() => undefined);
      if (cpProc) await stopProc(cpProc, 10_000);
    },
  };
}

/** `cpu`, plus the fleet's control-plane process when it has one (controlPlane: 'process'). */
export function fleetCpuMeter(cpu: CpuMeter, bf: BenchFleet): CpuMeter {
  const pid = bf.controlPlanePid;
  return pid === undefined ? cpu : new CpuMeter(cpu.serverPid, () => ({ controlPlane: pid }));
}

/** Workflows still running on a control queue, by workflow type (visibility count). */
export async function countRunning(client: Client, taskQueue: string, workflowType: string): Promise<number> {
  const r = await client.workflow.count(
    `TaskQueue = '${taskQueue}' AND WorkflowType = '${workflowType}' AND ExecutionStatus = 'Running'`,
  );
  return r.count;
}

/** Close times (epoch ms) of every closed workflow of a type on a task queue, from visibility. */
export async function closeTimes(
  client: Client,
  taskQueue: string,
  workflowType: string,
): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for await (const wf of client.workflow.list({
    query: `TaskQueue = '${taskQueue}' AND WorkflowType = '${workflowType}' AND ExecutionStatus != 'Running'`,
  })) {
    if (wf.closeTime) out.set(wf.workflowId, wf.closeTime.getTime());
  }
  return out;
}

/** The P1-P3 fleet: the run's hosts x devices, liveness sessions with the run's lease, snapshots at its period. */
export function startLoadFleet(be: BenchEnv, name: string, o: BenchOptions): Promise<BenchFleet> {
  return startBenchFleet(be, {
    controlPlane: o.controlPlane,
    name,
    hosts: o.hosts,
    devicesPerHost: o.devices,
    snapshotIntervalMs: o.snapshotMs,
    snapshotTimeoutMs: o.snapshotMs * 3,
    hostTimeoutMs: o.hostTimeoutMs,
  });
}
