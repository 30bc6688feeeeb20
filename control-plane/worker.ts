/**
 * The control-plane workers: one for the long-lived workflows (schedulers, devices, hosts) on
 * `controlTaskQueue`, one for the task workflows on their own queue, each with its own workflow
 * cache, both with the control-plane activities. Queued tasks are most of the workflows and each
 * costs memory while cached; sharing one cache, they filled it (it keeps whatever ran last, so a
 * device idle for a while could be pushed out and replay thousands of events) and grew the process
 * past 1.3 GiB at 10,000 queued (BENCHMARKS.md, P5).
 */
import { isDeepStrictEqual } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { QueryNotRegisteredError, WorkflowNotFoundError, type Client, type WorkflowExecutionDescription } from '@temporalio/client';
import { bundleWorkflowCode, Runtime, Worker, type NativeConnection, type WorkflowBundle } from '@temporalio/worker';
import { createControlPlaneActivities } from '../activities/control-plane';
import { deviceWorkflowId, hostWorkflowId, schedulerWorkflowId } from '../workflows/ids';
import {
  configureSchedulerUpdate,
  hostStateQuery,
  republishHostSignal,
  schedulerConfigQuery,
  setSchedulerConfigSignal,
  type SchedulerConfig,
} from '../workflows/messages';
import type { schedulerWorkflow } from '../workflows/scheduler';
import {
  ALL_SEARCH_ATTRIBUTES,
  FleetDeviceId,
  FleetHostId,
  FleetKind,
  FleetPool,
  STOPPED,
  visibilityString,
} from '../workflows/search-attributes';
import { poolConfig, schedulerStart, taskWorkflowQueue, type ControlPlaneConfig } from './config';
import { PAYLOAD_CONVERTER_PATH } from './connection';
import { createSealingCodec } from './sealing';
import { createSignalAuthCodec, signalKeysFromEnv, type SignalKeys } from './signal-auth';
import type { RestartBackoff, StoppedRun } from './restart-backoff';
import { within } from './within';

/**
 * Modules evaluated once per worker and shared by every workflow run (TS SDK `preloadModules`):
 * only pure code with pure caches. workflows/identity.ts keeps decoded host keys and, through
 * noble, the Ed25519 base-point table; without preloading each workflow run rebuilds both.
 */
export const WORKFLOW_PRELOAD_MODULES = [require.resolve('../workflows/identity')];
/** The workflows' payload converter (marks what the control plane signed); every bundle needs it. */
export const WORKFLOW_PAYLOAD_CONVERTER = PAYLOAD_CONVERTER_PATH;

/** What the control plane's workers (and replays of their histories) encode and decode with. */
export function controlPlaneDataConverter(signalKeys: SignalKeys | undefined) {
  return {
    payloadConverterPath: WORKFLOW_PAYLOAD_CONVERTER,
    // Seals what the task workflow sends to a host to that host's key (sealing.ts); tags and checks
    // the control plane's own signals (signal-auth.ts).
    payloadCodecs: [createSealingCodec(), createSignalAuthCodec(signalKeys)],
  };
}

export interface ControlPlaneWorkerOptions {
  connection: NativeConnection;
  client: Client;
  config: ControlPlaneConfig;
  namespace?: string;
  /** A pre-built bundle (tests build one per run); otherwise the workflows are bundled at start. */
  workflowBundle?: WorkflowBundle;
  identity?: string;
  /** The keys that tag and check the control plane's signals; default `FLEET_SIGNAL_KEYS`. */
  signalKeys?: SignalKeys;
}

/** The two workers, run and stopped together. */
export interface ControlPlaneWorkers {
  /** Schedulers, devices and hosts, on `controlTaskQueue` (and task workflows started there before the split). */
  readonly longLived: Worker;
  /** Task workflows, on `taskWorkflowQueue(config)`. */
  readonly tasks: Worker;
  /** Runs both until both stop; if one fails, the other is shut down and the failure is thrown. */
  run(): Promise<void>;
  /** Shuts down whichever is running; safe to call at any time and more than once. */
  shutdown(): void;
  /** RUNNING while both run; otherwise the state of the first that does not. */
  getState(): ReturnType<Worker['getState']>;
}

export async function createControlPlaneWorker(opts: ControlPlaneWorkerOptions): Promise<ControlPlaneWorkers> {
  const workflowBundle =
    opts.workflowBundle ??
    (await bundleWorkflowCode({
      workflowsPath: require.resolve('../workflows'),
      preloadModules: WORKFLOW_PRELOAD_MODULES,
      payloadConverterPath: WORKFLOW_PAYLOAD_CONVERTER,
      logger: Runtime.instance().logger,
    }));
  const signalKeys = 'signalKeys' in opts ? opts.signalKeys : signalKeysFromEnv();
  const activities = createControlPlaneActivities({ client: opts.client, config: opts.config });
  const make = (taskQueue: string, maxCachedWorkflows: number | undefined) =>
    Worker.create({
      connection: opts.connection,
      namespace: opts.namespace ?? opts.client.options.namespace,
      taskQueue,
      workflowBundle,
      activities,
      dataConverter: controlPlaneDataConverter(signalKeys),
      ...(maxCachedWorkflows ? { maxCachedWorkflows } : {}),
      ...(opts.identity ? { identity: opts.identity } : {}),
    });
  // Every workflow type is registered on both: the long-lived worker still serves task workflows
  // started on its queue by a control plane from before the split.
  // Created side by side (each loads the bundle into its own workflow thread).
  const made = await Promise.allSettled([
    make(opts.config.controlTaskQueue, opts.config.maxCachedWorkflows),
    make(taskWorkflowQueue(opts.config), opts.config.maxCachedTasks),
  ]);
  const failed = made.find((m): m is PromiseRejectedResult => m.status === 'rejected');
  if (failed) {
    for (const m of made) {
      if (m.status === 'fulfilled') await m.value.runUntil(Promise.resolve()).catch(() => undefined); // releases its native worker
    }
    throw failed.reason;
  }
  const [longLived, tasks] = made.map((m) => (m as PromiseFulfilledResult<Worker>).value);
  const both = [longLived, tasks];
  let stopped = false;
  const shutdown = () => {
    stopped = true;
    for (const w of both) if (w.getState() === 'RUNNING') w.shutdown();
  };
  return {
    longLived,
    tasks,
    async run() {
      if (stopped) return; // shut down before it ran
      const results = await Promise.allSettled(
        both.map((w) =>
          w.run().catch((err: unknown) => {
            shutdown();
            throw err;
          }),
        ),
      );
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
    },
    shutdown,
    getState: () => both.map((w) => w.getState()).find((st) => st !== 'RUNNING') ?? 'RUNNING',
  };
}

/**
 * Starts the scheduler of every configured pool (no-op when it runs) and applies the configured
 * strategy and limits to it: a strategy is changed by configuration alone. A scheduler that already
 * has the configuration is only asked (a query writes nothing to its history), so a restart of the
 * control plane sends it nothing. Every pool is tried; the first failure is thrown after that.
 */
export async function ensurePools(
  client: Client,
  config: ControlPlaneConfig,
  { timeoutMs = ENSURE_POOL_TIMEOUT_MS }: { timeoutMs?: number } = {},
): Promise<void> {
  const failures: unknown[] = [];
  for (const pool of Object.keys(config.pools)) {
    // Bounded: a scheduler whose workflow task keeps failing never applies a configuration (nor
    // answers), and would hold every pool after it (and the caller's retry) forever.
    try {
      await within(ensurePool(client, config, pool, timeoutMs), timeoutMs, `configure the scheduler of pool ${pool}`);
    } catch (err) {
      failures.push(err);
    }
  }
  if (failures.length > 0) throw await explainPoolFailure(client, failures[0]);
}

/**
 * The pools whose scheduler is not running although it should: every configured pool, and every
 * pool on this control queue whose scheduler was terminated or failed (pools a host named), with no
 * run of it going now. Each is started again (configured ones configured as by `ensurePools`); the
 * new run recovers its queue and devices (workflows/recovery.ts). Each pool on its own: one that
 * cannot be checked or started is reported in `failed` and does not keep the others from it. With
 * `backoff`, a scheduler whose runs keep failing soon after they start (a configuration its workers
 * refuse; each failure says why) is started again less and less often (restart-backoff.ts), and is
 * reported in `deferred` meanwhile.
 */
export async function restartStoppedSchedulers(
  client: Client,
  config: ControlPlaneConfig,
  { timeoutMs = ENSURE_POOL_TIMEOUT_MS, backoff }: { timeoutMs?: number; backoff?: RestartBackoff } = {},
): Promise<{ restarted: string[]; failed: Array<{ pool: string; error: unknown }>; deferred: Deferred[] }> {
  const pools = new Set(Object.keys(config.pools));
  const query =
    `${FleetKind.name} = 'scheduler' AND TaskQueue = ${visibilityString(config.controlTaskQueue)} AND ${STOPPED}`;
  for await (const wf of client.workflow.list({ query })) {
    const pool = wf.typedSearchAttributes.get(FleetPool);
    if (pool && wf.workflowId === schedulerWorkflowId(pool)) pools.add(pool);
  }
  const restarted: string[] = [];
  const failed: Array<{ pool: string; error: unknown }> = [];
  const deferred: Deferred[] = [];
  for (const pool of pools) {
    try {
      try {
        const d = await client.workflow.getHandle(schedulerWorkflowId(pool)).describe();
        if (d.status.name === 'RUNNING') continue;
        const wait = backoff?.consider(schedulerWorkflowId(pool), stoppedRun(d), Date.now());
        if (wait && !wait.due) {
          deferred.push({ workflowId: schedulerWorkflowId(pool), streak: wait.streak, delayMs: wait.delayMs, fresh: wait.fresh });
          continue;
        }
      } catch (err) {
        if (!(err instanceof WorkflowNotFoundError)) throw err;
      }
      if (config.pools[pool]) {
        await within(ensurePool(client, config, pool, timeoutMs), timeoutMs, `configure the scheduler of pool ${pool}`);
      } else {
        await client.workflow.start<typeof schedulerWorkflow>('schedulerWorkflow', schedulerStart(config, pool));
      }
      restarted.push(pool);
    } catch (error) {
      failed.push({ pool, error });
    }
  }
  return { restarted, failed, deferred };
}

/** What the watch's backoff needs of a stopped run. */
function stoppedRun(d: WorkflowExecutionDescription): StoppedRun {
  const firstRunId = d.raw.workflowExecutionInfo?.firstRunId;
  return { runId: d.runId, startTime: d.startTime, closeTime: d.closeTime, ...(firstRunId ? { firstRunId } : {}) };
}

/** A stopped workflow the watch starts again only later: its runs keep stopping soon after they start. */
export interface Deferred {
  workflowId: string;
  /** Quick runs in a row (restart-backoff.ts). */
  streak: number;
  /** How long after its last run closed it is started again. */
  delayMs: number;
  /** The first check that held this run back. */
  fresh: boolean;
}

/** How far back `restoreStoppedDevices` looks for device workflows that stopped. */
const DEVICE_WATCH_WINDOW_MS = 10 * 60_000;

/**
 * Device workflows of this control queue that stopped (terminated, failed, timed out) in the last
 * ten minutes (with `backoff`, at least its longest wait and two checks) and have no run going now: each one's host is asked to start it again
 * (`republishHost` with the device as missing), as a pool's reservation that found it gone would.
 * Without this a device whose workflow was lost while it had a reservation to handle kept that
 * reservation's task waiting until the pool's hold ran out. Devices of a removed host (its
 * workflow not running), and devices the host no longer reports, are left alone. One signal per
 * host. With `backoff`, a device whose runs keep stopping soon after they start is asked for less
 * and less often. Returns the devices asked for, those held back, and the hosts that failed.
 */
export async function restoreStoppedDevices(
  client: Client,
  config: ControlPlaneConfig,
  { backoff }: { backoff?: RestartBackoff } = {},
): Promise<{ restored: string[]; failed: Array<{ host: string; error: unknown }>; deferred: Deferred[] }> {
  // A device held back by the backoff is still looked at when it is due.
  const windowMs = Math.max(DEVICE_WATCH_WINDOW_MS, (backoff?.maxDelayMs ?? 0) + 2 * config.poolWatchMs);
  const since = new Date(Date.now() - windowMs).toISOString();
  const query =
    `${FleetKind.name} = 'device' AND WorkflowType = 'deviceWorkflow' AND ` +
    `TaskQueue = ${visibilityString(config.controlTaskQueue)} AND ${STOPPED} AND CloseTime > "${since}"`;
  /** Stopped device workflows by host. */
  const byHost = new Map<string, Set<string>>();
  for await (const wf of client.workflow.list({ query })) {
    const hostId = wf.typedSearchAttributes.get(FleetHostId);
    const deviceId = wf.typedSearchAttributes.get(FleetDeviceId);
    if (!hostId || !deviceId || wf.workflowId !== deviceWorkflowId(hostId, deviceId)) continue;
    byHost.set(hostId, (byHost.get(hostId) ?? new Set()).add(deviceId));
  }
  const restored: string[] = [];
  const failed: Array<{ host: string; error: unknown }> = [];
  const deferred: Deferred[] = [];
  for (const [hostId, deviceIds] of byHost) {
    try {
      const host = client.workflow.getHandle(hostWorkflowId(hostId));
      const d = await host.describe().catch((err: unknown) => {
        if (err instanceof WorkflowNotFoundError) return undefined;
        throw err;
      });
      const pool = d?.typedSearchAttributes.get(FleetPool);
      if (!d || d.status.name !== 'RUNNING' || !pool) continue; // a removed host: its devices retire
      // Only devices the host has now (one it no longer reports stays gone), and not running again.
      const has = new Set((await host.query(hostStateQuery)).devices.map((x) => x.deviceId));
      const missing: string[] = [];
      for (const deviceId of deviceIds) {
        if (!has.has(deviceId)) continue;
        const workflowId = deviceWorkflowId(hostId, deviceId);
        const d = await client.workflow.getHandle(workflowId).describe();
        if (d.status.name === 'RUNNING') continue;
        const wait = backoff?.consider(workflowId, stoppedRun(d), Date.now());
        if (wait && !wait.due) deferred.push({ workflowId, streak: wait.streak, delayMs: wait.delayMs, fresh: wait.fresh });
        else missing.push(deviceId);
      }
      if (missing.length === 0) continue;
      await host.signal(republishHostSignal, { pool, reason: 'its device workflow stopped', missingDevices: missing });
      restored.push(...missing.map((deviceId) => deviceWorkflowId(hostId, deviceId)));
    } catch (error) {
      failed.push({ host: hostWorkflowId(hostId), error });
    }
  }
  return { restored, failed, deferred };
}

async function ensurePool(client: Client, config: ControlPlaneConfig, pool: string, timeoutMs: number): Promise<void> {
  const workflowId = schedulerWorkflowId(pool);
  await client.workflow.start<typeof schedulerWorkflow>('schedulerWorkflow', schedulerStart(config, pool));
  // Not through the handle start() returns: attached to a running scheduler, that handle takes the
  // current run for the first of its chain, and once the scheduler has continued-as-new the server
  // finds no such chain (NOT_FOUND): every control-plane restart after a roll-over failed here.
  // By workflow id alone a query or signal reaches whichever run is current.
  const handle = client.workflow.getHandle(workflowId);
  const wanted = poolConfig(config, pool);
  const same = (c: (SchedulerConfig & { version?: number }) | undefined) => {
    if (c === undefined) return false;
    const { version: _version, ...config } = c;
    return isDeepStrictEqual(config, { ...wanted });
  };
  let current: (SchedulerConfig & { version?: number }) | undefined;
  try {
    current = await handle.query(schedulerConfigQuery);
  } catch (err) {
    if (!(err instanceof QueryNotRegisteredError)) throw err;
    // A scheduler of a build without this query (nor the signal): configure it as that build was.
    await handle.executeUpdate(configureSchedulerUpdate, { args: [wanted] });
    return;
  }
  if (same(current)) return;
  // A signal, not an update (workflows/messages.ts, setSchedulerConfigSignal), then read back: it is
  // recorded at once and applied at the scheduler's next workflow task.
  // With a version above the applied one, so that the scheduler ignores this one sent again later.
  await handle.signal(setSchedulerConfigSignal, {
    ...wanted,
    version: Math.max(Date.now(), (current?.version ?? 0) + 1),
  });
  const deadline = Date.now() + timeoutMs;
  for (let pause = 50; ; pause = Math.min(pause * 2, 1_000)) {
    if (same(await handle.query(schedulerConfigQuery).catch(() => undefined))) return;
    if (Date.now() >= deadline) {
      throw new Error(`the scheduler of pool ${pool} has not applied its configuration within ${timeoutMs} ms`);
    }
    await sleep(pause);
  }
}

const ENSURE_POOL_TIMEOUT_MS = 60_000;

/** The `temporal operator search-attribute create --type` of each fleet attribute. */
const CLI_TYPE: Record<string, string> = { KEYWORD: 'Keyword', INT: 'Int' };

/** A start or update that failed because the namespace lacks the fleet's search attributes says so. */
async function explainPoolFailure(client: Client, err: unknown): Promise<unknown> {
  try {
    const resp = await client.connection.operatorService.listSearchAttributes({
      namespace: client.options.namespace,
    });
    const have = new Set(Object.keys(resp.customAttributes ?? {}));
    const missing = ALL_SEARCH_ATTRIBUTES.filter((k) => !have.has(k.name));
    if (missing.length === 0) return err;
    return new Error(
      `namespace ${client.options.namespace} lacks the fleet's search attributes ${missing.map((k) => k.name).join(', ')}; ` +
        `create them (README, "Running on a real Temporal cluster"), e.g. ` +
        missing
          .map(
            (k) =>
              `temporal operator search-attribute create --namespace ${client.options.namespace} --name ${k.name} --type ${CLI_TYPE[k.type] ?? k.type}`,
          )
          .join('; '),
      { cause: err },
    );
  } catch {
    return err; // the operator service is not offered (Temporal Cloud) or did not answer
  }
}
