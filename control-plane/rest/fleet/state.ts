/**
 * Hosts and devices, aggregated: the host workflows (their latest snapshot, liveness and drain
 * flags; listed through FleetKind = 'host') and the schedulers of the pools (which device is
 * reserved by which task). The host's view wins for what the host reports; the scheduler's for
 * reservations.
 */
import type { Client } from '@temporalio/client';
import { deviceKey } from '../../../workflows/ids';
import type { HostView, SchedulerView } from '../../../workflows/messages';
import type { ControlPlaneConfig } from '../../config';
import { iso } from '../schemas';
import { hostState, listHostIds, schedulerState } from '../temporal';
import { unavailableBecause } from '../tasks/queue';
import type { DeviceResource, DevicesQuery, HostResource } from './schemas';

type SchedulerDevice = SchedulerView['devices'][number];

export interface FleetState {
  hosts: HostView[];
  /** Scheduler devices by deviceKey, with the pool they are in. */
  scheduled: Map<string, { pool: string; device: SchedulerDevice }>;
}

async function mapAll<T, R>(xs: readonly T[], fn: (x: T) => Promise<R>): Promise<R[]> {
  return Promise.all(xs.map(fn));
}

export async function loadFleetState(
  client: Client,
  config: ControlPlaneConfig,
  filter: { pool?: string; hostId?: string },
): Promise<FleetState> {
  const hostIds = filter.hostId ? [filter.hostId] : await listHostIds(client, filter.pool);
  const hosts = (await mapAll(hostIds, (id) => hostState(client, id))).filter((h): h is HostView => !!h);
  const pools = new Set<string>(filter.pool ? [filter.pool] : Object.keys(config.pools));
  if (!filter.pool) for (const h of hosts) for (const d of h.devices) pools.add(d.pool ?? h.pool);
  const scheduled = new Map<string, { pool: string; device: SchedulerDevice }>();
  const views = await mapAll([...pools], async (pool) => ({ pool, view: await schedulerState(client, pool) }));
  const extraHosts = new Set<string>();
  for (const { pool, view } of views) {
    for (const d of view?.devices ?? []) {
      if (filter.hostId && d.hostId !== filter.hostId) continue;
      scheduled.set(deviceKey(d.hostId, d.deviceId), { pool, device: d });
      if (!hostIds.includes(d.hostId)) extraHosts.add(d.hostId);
    }
  }
  // A device can sit in a pool other than its host's: fetch those hosts too.
  const more = (await mapAll([...extraHosts], (id) => hostState(client, id))).filter((h): h is HostView => !!h);
  return { hosts: [...hosts, ...more], scheduled };
}

function toResource(pool: string, d: SchedulerDevice, known: boolean): DeviceResource {
  // An offline host says more about a held device than its reservation does.
  const why = !known ? 'not known to its pool yet' : !d.hostOnline ? 'host offline' : unavailableBecause(d);
  return {
    hostId: d.hostId,
    deviceId: d.deviceId,
    pool,
    driverType: d.driverType,
    tags: [...d.tags],
    state: !d.hostOnline || d.state === 'offline' ? 'offline' : d.reservedBy ? 'busy' : d.state,
    health: d.health,
    hostOnline: d.hostOnline,
    hostDrained: d.hostDrained,
    deviceDrained: d.deviceDrained,
    // As the scheduler judges it; a device its scheduler does not know yet is not assignable.
    assignable: why === undefined,
    ...(why !== undefined ? { unassignableBecause: why } : {}),
    reservation: d.reservedBy ? { taskId: d.reservedBy.taskId, attempt: d.reservedBy.attempt } : null,
  };
}

function devicesOf(h: HostView, scheduled: FleetState['scheduled']): DeviceResource[] {
  return h.devices.map((d) => {
    const s = scheduled.get(deviceKey(h.hostId, d.deviceId));
    const merged: SchedulerDevice = {
      hostId: h.hostId,
      deviceId: d.deviceId,
      driverType: d.driverType,
      tags: d.tags,
      state: d.state,
      health: d.health,
      hostOnline: h.online,
      hostDrained: h.drained,
      deviceDrained: h.drainedDevices.includes(d.deviceId),
      reservedBy: s?.device.reservedBy,
      hostSuspectSince: s?.device.hostSuspectSince,
    };
    return toResource(d.pool ?? h.pool, merged, !!s);
  });
}

const byKey = (a: DeviceResource, b: DeviceResource): number =>
  a.hostId === b.hostId ? (a.deviceId < b.deviceId ? -1 : 1) : a.hostId < b.hostId ? -1 : 1;

export function presentHosts(state: FleetState): HostResource[] {
  return state.hosts
    .map((h) => ({
      hostId: h.hostId,
      pool: h.pool,
      online: h.online,
      drained: h.drained,
      drainedDevices: [...h.drainedDevices],
      lastSeenAt: iso(h.lastSeenAt),
      devices: devicesOf(h, state.scheduled).sort(byKey),
    }))
    .sort((a, b) => (a.hostId < b.hostId ? -1 : 1));
}

export function presentDevices(state: FleetState, q: DevicesQuery): DeviceResource[] {
  const seen = new Set<string>();
  const out: DeviceResource[] = [];
  for (const h of state.hosts) {
    for (const d of devicesOf(h, state.scheduled)) {
      seen.add(deviceKey(d.hostId, d.deviceId));
      out.push(d);
    }
  }
  // Known to a scheduler but no longer reported by a running host workflow.
  for (const [k, { pool, device: d }] of state.scheduled) {
    if (!seen.has(k)) out.push(toResource(pool, d, true));
  }
  return out
    .filter((d) => (q.pool === undefined || d.pool === q.pool) && (q.hostId === undefined || d.hostId === q.hostId))
    .filter((d) => q.driverType === undefined || d.driverType === q.driverType)
    .sort(byKey);
}
