/**
 * The host agent as a library: a Temporal worker on this host's own task queue (outbound polling
 * only, no listening socket) plus a snapshot loop that reports the complete device list.
 */
import { randomUUID } from 'node:crypto';
import { Client, type ConnectionLike } from '@temporalio/client';
import { type NativeConnection, Worker } from '@temporalio/worker';
import type { hostWorkflow } from '../workflows/host';
import { DEFAULT_CONTROL_TASK_QUEUE, DEFAULT_POOL, hostTaskQueue, hostWorkflowId } from '../workflows/ids';
import { hostSnapshotSignal } from '../workflows/messages';
import type { DeviceSnapshot, HostSnapshot, WorkflowStep } from '../workflows/types';
import { createHostActivities } from './activities';
import type { Runners } from './runners';
import { createSimRunners } from './sim';

export interface HostOptions {
  hostId: string;
  pool?: string;
  namespace?: string;
  controlTaskQueue?: string;
  /** Used by the worker (polling) and by the client (snapshots, reports). */
  workerConnection: NativeConnection;
  clientConnection: ConnectionLike;
  devices: DeviceSnapshot[];
  runners?: Runners;
  definitions?: Map<string, WorkflowStep[]>;
  snapshotIntervalMs?: number;
  hostTimeoutMs?: number;
  progressIntervalMs?: number;
  /** Concurrent assignments; defaults to the number of devices (at least 1). */
  maxConcurrentAssignments?: number;
  /** History length at which the host workflow continues-as-new (tests lower it). */
  historyLimit?: number;
  log?(message: string, fields: Record<string, unknown>): void;
}

export interface HostAgent {
  readonly hostId: string;
  readonly worker: Worker;
  /** Replace the device list (discovery), and report it now. */
  setDevices(devices: DeviceSnapshot[]): Promise<void>;
  /** Report the complete snapshot now. */
  sendSnapshot(): Promise<void>;
  /** Stop polling and the snapshot loop; in-flight assignments finish within the shutdown grace. */
  stop(): Promise<void>;
}

export async function startHost(opts: HostOptions): Promise<HostAgent> {
  const pool = opts.pool ?? DEFAULT_POOL;
  const namespace = opts.namespace ?? 'default';
  const controlTaskQueue = opts.controlTaskQueue ?? DEFAULT_CONTROL_TASK_QUEUE;
  const snapshotIntervalMs = opts.snapshotIntervalMs ?? 10_000;
  const hostTimeoutMs = opts.hostTimeoutMs ?? 30_000;
  const bootId = randomUUID();
  const client = new Client({ connection: opts.clientConnection, namespace });
  let devices = new Map(opts.devices.map((d) => [d.deviceId, d]));
  const busy = new Set<string>();
  let seq = 0;

  const worker = await Worker.create({
    connection: opts.workerConnection,
    namespace,
    taskQueue: hostTaskQueue(opts.hostId),
    activities: createHostActivities({
      hostId: opts.hostId,
      client,
      runners: opts.runners ?? createSimRunners({ definitions: opts.definitions }),
      devices: () => devices,
      progressIntervalMs: opts.progressIntervalMs ?? 5_000,
      claimDevice: (deviceId) => {
        if (busy.has(deviceId)) return false;
        busy.add(deviceId);
        return true;
      },
      releaseDevice: (deviceId) => busy.delete(deviceId),
      log: opts.log,
    }),
    maxConcurrentActivityTaskExecutions: opts.maxConcurrentAssignments ?? Math.max(1, opts.devices.length),
    identity: `host:${opts.hostId}:${bootId.slice(0, 8)}`,
    shutdownGraceTime: '5s',
  });

  const snapshot = (): HostSnapshot => ({
    hostId: opts.hostId,
    pool,
    seq: ++seq,
    bootId,
    sentAt: Date.now(),
    devices: [...devices.values()].map((d) => ({
      ...d,
      state: d.state === 'offline' ? 'offline' : busy.has(d.deviceId) ? 'busy' : d.state,
    })),
  });

  const sendSnapshot = async (): Promise<void> => {
    await client.workflow.signalWithStart<typeof hostWorkflow, [HostSnapshot]>('hostWorkflow', {
      workflowId: hostWorkflowId(opts.hostId),
      taskQueue: controlTaskQueue,
      args: [{ hostId: opts.hostId, pool, hostTimeoutMs, historyLimit: opts.historyLimit }],
      signal: hostSnapshotSignal,
      signalArgs: [snapshot()],
      staticSummary: `host ${opts.hostId} (pool ${pool})`,
    });
  };

  const running = worker.run();
  await sendSnapshot();
  const loop = setInterval(() => {
    sendSnapshot().catch((err) => opts.log?.('snapshot failed; will retry', { error: String(err) }));
  }, snapshotIntervalMs);

  let stopped: Promise<void> | undefined;
  return {
    hostId: opts.hostId,
    worker,
    async setDevices(next) {
      devices = new Map(next.map((d) => [d.deviceId, d]));
      await sendSnapshot();
    },
    sendSnapshot,
    stop() {
      stopped ??= (async () => {
        clearInterval(loop);
        if (worker.getState() === 'RUNNING') worker.shutdown();
        await running;
      })();
      return stopped;
    },
  };
}
