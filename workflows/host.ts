/**
 * host/<hostId>: liveness, the host's complete device snapshot, and drain flags. It publishes to
 * the pool schedulers only when something that matters for assignment changed (device set,
 * driver/tags, health, offline, host online, drain), not on every heartbeat.
 */
import {
  allHandlersFinished,
  condition,
  continueAsNew,
  log,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type * as controlActivities from '../activities/control-plane';
import { shouldContinueAsNew } from './continue-as-new';
import {
  hostSnapshotSignal,
  hostStateQuery,
  setDeviceDrainSignal,
  setHostDrainSignal,
  type HostView,
} from './messages';
import { FleetHostId, FleetKind, FleetPool } from './search-attributes';
import type { DeviceSnapshot } from './types';

const { syncHost } = proxyActivities<ReturnType<typeof controlActivities.createControlPlaneActivities>>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '1s', maximumInterval: '10s' },
});

export interface HostInput {
  hostId: string;
  pool: string;
  /** Silent longer than this: offline, devices not assignable. */
  hostTimeoutMs: number;
  historyLimit?: number;
  carried?: {
    view: HostView;
    ensured: string[];
    publishedPools: string[];
    lastPublished: string;
  };
}

/** What assignment depends on; idle/busy flips and timestamps are left out on purpose. */
export function assignmentRelevant(view: HostView): string {
  const devices = [...view.devices]
    .map((d) => ({
      id: d.deviceId,
      t: d.driverType,
      tags: [...d.tags].sort(),
      h: d.health,
      off: d.state === 'offline',
      p: d.pool ?? view.pool,
    }))
    .sort((a, b) => (a.id < b.id ? -1 : 1));
  return JSON.stringify({ on: view.online, dr: view.drained, dd: [...view.drainedDevices].sort(), devices });
}

export async function hostWorkflow(input: HostInput): Promise<never> {
  const { hostId } = input;
  const view: HostView = input.carried
    ? { ...input.carried.view, runs: input.carried.view.runs + 1 }
    : {
        hostId,
        pool: input.pool,
        online: false,
        drained: false,
        drainedDevices: [],
        seq: -1,
        devices: [],
        published: 0,
        runs: 1,
      };
  const ensured = new Set<string>(input.carried?.ensured ?? []);
  let publishedPools = new Set<string>(input.carried?.publishedPools ?? []);
  let lastPublished = input.carried?.lastPublished ?? '';
  let beats = 0;
  upsertSearchAttributes([
    { key: FleetKind, value: 'host' },
    { key: FleetHostId, value: hostId },
    { key: FleetPool, value: input.pool },
  ]);

  setHandler(hostStateQuery, () => view);
  setHandler(hostSnapshotSignal, (s) => {
    if (s.hostId !== hostId) {
      log.warn('snapshot for another host ignored', { hostId, claimed: s.hostId });
      return;
    }
    if (s.bootId === view.bootId && s.seq <= view.seq) return; // reordered or repeated
    view.bootId = s.bootId;
    view.seq = s.seq;
    view.devices = s.devices.map((d: DeviceSnapshot) => ({ ...d, tags: [...d.tags] }));
    view.pool = s.pool || view.pool;
    view.lastSeenAt = Date.now();
    view.online = true;
    beats++;
  });
  setHandler(setHostDrainSignal, ({ drained }) => {
    view.drained = drained;
    beats++;
  });
  setHandler(setDeviceDrainSignal, ({ deviceId, drained }) => {
    const rest = view.drainedDevices.filter((d) => d !== deviceId);
    view.drainedDevices = drained ? [...rest, deviceId] : rest;
    beats++;
  });

  const publishIfChanged = async (): Promise<void> => {
    const relevant = assignmentRelevant(view);
    if (relevant === lastPublished) return;
    view.published++;
    const newDevices = view.devices.map((d) => d.deviceId).filter((id) => !ensured.has(id));
    const pools = new Set(view.devices.map((d) => d.pool ?? view.pool));
    pools.add(view.pool);
    await syncHost({
      hostId,
      online: view.online,
      drained: view.drained,
      drainedDevices: view.drainedDevices,
      devices: view.devices.map((d) => ({ ...d, pool: d.pool ?? view.pool })),
      newDevices,
      pools: [...new Set([...pools, ...publishedPools])],
      version: view.published,
    });
    for (const id of newDevices) ensured.add(id);
    publishedPools = pools;
    lastPublished = relevant;
    setCurrentDetails(
      `**${view.online ? 'online' : 'offline'}**${view.drained ? ' · drained' : ''} · ${view.devices.length} devices · pool ${view.pool}`,
    );
  };

  while (!shouldContinueAsNew(input.historyLimit)) {
    const seen = beats;
    const heard = await condition(() => beats !== seen || shouldContinueAsNew(input.historyLimit), input.hostTimeoutMs);
    if (!heard && view.online) {
      log.info('host silent past its timeout: offline', { hostId });
      view.online = false;
    }
    await publishIfChanged();
  }
  await condition(allHandlersFinished);
  return await continueAsNew<typeof hostWorkflow>({
    ...input,
    carried: { view, ensured: [...ensured], publishedPools: [...publishedPools], lastPublished },
  });
}
