/**
 * host/<hostId>: the host's enrolment (public keys), liveness, complete device snapshot, and drain
 * flags. Only snapshots signed with the enrolled key get in (the update validator refuses the rest
 * before anything reaches history). It publishes to the pool schedulers only when something that
 * matters for assignment changed (device set, driver/tags, health, offline, online, drain, keys).
 */
import {
  allHandlersFinished,
  condition,
  continueAsNew,
  log,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type * as controlActivities from '../activities/control-plane';
import { shouldContinueAsNew } from './continue-as-new';
import { SignDomain, validPublicKeys, verifySignature, type HostPublicKeys } from './identity';
import {
  hostSnapshotUpdate,
  hostStateQuery,
  reconfirmHostSignal,
  registerHostKeysSignal,
  setDeviceDrainSignal,
  setHostDrainSignal,
  type HostView,
} from './messages';
import { FleetHostId, FleetKind, FleetPool } from './search-attributes';
import type { SignedSnapshot } from './types';

const { syncHost } = proxyActivities<ReturnType<typeof controlActivities.createControlPlaneActivities>>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '1s', maximumInterval: '10s' },
});

/** Snapshots stamped further than this from the workflow's clock are refused (replays, bad clocks). */
export const MAX_SNAPSHOT_SKEW_MS = 5 * 60_000;

export interface HostInput {
  hostId: string;
  pool: string;
  /** Silent longer than this: offline, devices not assignable. */
  hostTimeoutMs: number;
  /** Public keys enrolled by the operator; without them every snapshot is refused. */
  keys?: HostPublicKeys;
  historyLimit?: number;
  carried?: {
    view: HostView;
    ensured: string[];
    publishedPools: string[];
    lastPublished: string;
    reconfirmAt?: number;
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
  return JSON.stringify({
    on: view.online,
    dr: view.drained,
    dd: [...view.drainedDevices].sort(),
    devices,
    keys: view.keys,
  });
}

/**
 * Refuses a snapshot that is not this host's: not signed with its enrolled key, claiming another
 * host id, replayed (not newer than the last accepted one) or stamped far from now.
 */
export function validateSnapshot(view: HostView, hostId: string, signed: SignedSnapshot): void {
  const s = signed?.snapshot;
  if (!view.keys) throw new Error(`host ${hostId} is not enrolled: no public key to verify its snapshot`);
  if (!s || s.hostId !== hostId) throw new Error(`snapshot for host ${s?.hostId} sent to host ${hostId}`);
  if (!verifySignature(SignDomain.Snapshot, s, signed.sig, view.keys.signing)) {
    throw new Error(`snapshot signature does not verify with host ${hostId}'s enrolled key`);
  }
  if (Math.abs(s.sentAt - Date.now()) > MAX_SNAPSHOT_SKEW_MS) throw new Error('snapshot timestamp too far from now');
  if (s.bootId === view.bootId ? s.seq <= view.seq : view.lastSentAt !== undefined && s.sentAt <= view.lastSentAt) {
    throw new Error('snapshot is not newer than the last accepted one (replayed?)');
  }
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
        keys: validPublicKeys(input.keys) ? input.keys : undefined,
      };
  const ensured = new Set<string>(input.carried?.ensured ?? []);
  let publishedPools = new Set<string>(input.carried?.publishedPools ?? []);
  let lastPublished = input.carried?.lastPublished ?? '';
  /** A pool presumes this host lost since then: republish once a snapshot verified after it arrives. */
  let reconfirmAt = input.carried?.reconfirmAt;
  let beats = 0;
  upsertSearchAttributes([
    { key: FleetKind, value: 'host' },
    { key: FleetHostId, value: hostId },
    { key: FleetPool, value: input.pool },
  ]);

  setHandler(hostStateQuery, () => view);
  setHandler(registerHostKeysSignal, ({ keys }) => {
    if (!validPublicKeys(keys)) {
      log.warn('malformed host keys ignored', { hostId });
      return;
    }
    view.keys = keys;
    beats++;
  });
  setHandler(
    hostSnapshotUpdate,
    ({ snapshot: s }) => {
      view.bootId = s.bootId;
      view.seq = s.seq;
      view.lastSentAt = s.sentAt;
      view.devices = s.devices.map((d) => ({ ...d, tags: [...d.tags] }));
      view.pool = s.pool || view.pool;
      view.lastSeenAt = Date.now();
      view.online = true;
      beats++;
      return { accepted: true as const };
    },
    { validator: (signed) => validateSnapshot(view, hostId, signed) },
  );
  setHandler(reconfirmHostSignal, ({ reason }) => {
    log.info('a pool presumes this host lost; republishing after its next snapshot', { hostId, reason });
    reconfirmAt = Math.max(reconfirmAt ?? 0, Date.now());
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
    if (!view.keys) return; // nothing to publish before enrolment
    const relevant = assignmentRelevant(view);
    const seenAt = view.lastSeenAt ?? 0;
    const reconfirmed = reconfirmAt !== undefined && seenAt > reconfirmAt;
    if (relevant === lastPublished && !reconfirmed) return;
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
      keys: view.keys,
      lastSeenAt: view.lastSeenAt,
    });
    // A request that came in while we published is only answered by a later snapshot.
    if (reconfirmAt !== undefined && seenAt > reconfirmAt) reconfirmAt = undefined;
    for (const id of newDevices) ensured.add(id);
    publishedPools = pools;
    lastPublished = relevant;
    setCurrentDetails(
      `**${view.online ? 'online' : 'offline'}**${view.drained ? ' · drained' : ''} · ${view.devices.length} devices · pool ${view.pool}`,
    );
  };

  // Liveness watchdog: one timer per silence window, not one per snapshot (each timer is a billed
  // action and two history events; a host snapshots every few seconds).
  void (async () => {
    for (;;) {
      if (!view.online || view.lastSeenAt === undefined) {
        await condition(() => view.online && view.lastSeenAt !== undefined);
        continue;
      }
      const left = view.lastSeenAt + input.hostTimeoutMs - Date.now();
      if (left > 0) {
        await sleep(left);
        continue;
      }
      log.info('host silent past its timeout: offline', { hostId });
      view.online = false;
      beats++;
    }
  })();

  // `handled` lives outside the loop: a change made while a publish was on its way (the watchdog
  // going offline, say) is still seen by the next turn. A new run publishes whatever changed.
  let handled = input.carried ? -1 : 0;
  while (!shouldContinueAsNew(input.historyLimit)) {
    await condition(() => beats !== handled || shouldContinueAsNew(input.historyLimit));
    if (shouldContinueAsNew(input.historyLimit)) break;
    handled = beats;
    await publishIfChanged();
  }
  await condition(allHandlersFinished);
  return await continueAsNew<typeof hostWorkflow>({
    ...input,
    carried: { view, ensured: [...ensured], publishedPools: [...publishedPools], lastPublished, reconfirmAt },
  });
}
