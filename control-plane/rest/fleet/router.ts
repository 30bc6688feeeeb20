import { Router } from 'express';
import { retireHostSignal, setDeviceDrainSignal, setHostDrainSignal } from '../../../workflows/messages';
import { enrolmentState, enrollHost, HostBeingRemovedError, HostKeysConflictError, sendHostChange } from '../../hosts';
import { requireRole } from '../auth';
import type { RestDeps } from '../context';
import { HttpProblem } from '../problem';
import { hostRunning, hostState } from '../temporal';
import { parsed, validate } from '../validate';
import {
  DeviceParamsSchema,
  DevicesQuerySchema,
  EnrollHostBodySchema,
  HostParamsSchema,
  HostsQuerySchema,
  type DeviceList,
  type DrainResult,
  type EnrollResult,
  type HostList,
  type RemoveResult,
} from './schemas';
import { loadFleetState, presentDevices, presentHosts } from './state';

const Hosts = { query: HostsQuerySchema };
const Devices = { query: DevicesQuerySchema };
const OneHost = { params: HostParamsSchema };
const OneDevice = { params: DeviceParamsSchema };
const Enroll = { params: HostParamsSchema, body: EnrollHostBodySchema };

const hostMissing = (hostId: string) => new HttpProblem('notFound', `host ${hostId} not found`);

export function hostsRouter(deps: RestDeps): Router {
  const r = Router();
  const { client, config } = deps;

  r.get('/', validate(Hosts), async (_req, res) => {
    const { query } = parsed(res, Hosts);
    const state = await loadFleetState(client, config, { pool: query.pool });
    const items = presentHosts(state).filter((h) => query.pool === undefined || h.pool === query.pool);
    res.json({ items } satisfies HostList);
  });

  r.get('/:hostId', validate(OneHost), async (_req, res) => {
    const { params } = parsed(res, OneHost);
    const state = await loadFleetState(client, config, { hostId: params.hostId });
    const host = presentHosts(state).find((h) => h.hostId === params.hostId);
    if (!host) throw hostMissing(params.hostId);
    res.json(host);
  });

  // Admin only: removes a host (decommissioned). Only an offline host: a running host process would
  // keep reporting (refused) and its running work would lose its device's record. Its devices leave
  // the pools at once; the workflows end once nothing holds them.
  r.delete('/:hostId', requireRole('admin'), validate(OneHost), async (_req, res) => {
    const { params } = parsed(res, OneHost);
    const host = (await hostRunning(client, params.hostId)) ? await hostState(client, params.hostId) : undefined;
    if (!host || host.retired) throw hostMissing(params.hostId);
    if (host.online) {
      throw new HttpProblem(
        'conflict',
        `host ${params.hostId} is online: stop its host process first (a clean stop takes it offline at once), then remove it`,
      );
    }
    await sendHostChange(client, params.hostId, retireHostSignal, { reason: 'removed via REST' }, host);
    res.status(202).json({ hostId: params.hostId, removed: true } satisfies RemoveResult);
  });

  // Admin only: enrols a host's public keys (signal-with-start of its host workflow). The same keys
  // again change nothing. Other keys for an enrolled host need `rotate: true`: the running process
  // cannot read its assignments any more, so the host goes offline until it restarts with the new
  // credential. Its pool stays what it was.
  r.put('/:hostId/keys', requireRole('admin'), validate(Enroll), async (_req, res) => {
    const { params, body } = parsed(res, Enroll);
    // One describe and one short query, shared with enrollHost.
    const state = await enrolmentState(client, params.hostId);
    if (state.pool !== undefined && body.pool !== undefined && body.pool !== state.pool) {
      throw new HttpProblem('conflict', `host ${params.hostId} is enrolled in pool ${state.pool}, not ${body.pool}`);
    }
    const pool = state.pool ?? body.pool ?? config.defaultPool;
    let enrolled;
    try {
      enrolled = await enrollHost(
        client,
        config,
        { hostId: params.hostId, pool, keys: body.keys, rotate: body.rotate },
        state,
      );
    } catch (err) {
      if (err instanceof HostKeysConflictError || err instanceof HostBeingRemovedError) {
        throw new HttpProblem('conflict', err.message);
      }
      throw err;
    }
    res.status(enrolled.created ? 201 : 200).location(`/v1/hosts/${encodeURIComponent(params.hostId)}`);
    res.json({ hostId: params.hostId, pool, ...enrolled } satisfies EnrollResult);
  });

  for (const [action, drained] of [
    ['drain', true],
    ['undrain', false],
  ] as const) {
    r.post(`/:hostId/${action}`, requireRole('admin'), validate(OneHost), async (_req, res) => {
      const { params } = parsed(res, OneHost);
      if (!(await hostRunning(client, params.hostId))) throw hostMissing(params.hostId);
      await sendHostChange(client, params.hostId, setHostDrainSignal, { drained });
      res.status(202).json({ hostId: params.hostId, drained } satisfies DrainResult);
    });

    r.post(`/:hostId/devices/:deviceId/${action}`, requireRole('admin'), validate(OneDevice), async (_req, res) => {
      const { params } = parsed(res, OneDevice);
      const host = await hostState(client, params.hostId);
      if (!host || !(await hostRunning(client, params.hostId))) throw hostMissing(params.hostId);
      const known =
        host.devices.some((d) => d.deviceId === params.deviceId) || host.drainedDevices.includes(params.deviceId);
      if (!known) throw new HttpProblem('notFound', `host ${params.hostId} has no device ${params.deviceId}`);
      await sendHostChange(client, params.hostId, setDeviceDrainSignal, { deviceId: params.deviceId, drained }, host);
      res.status(202).json({ hostId: params.hostId, deviceId: params.deviceId, drained } satisfies DrainResult);
    });
  }

  return r;
}

export function devicesRouter(deps: RestDeps): Router {
  const r = Router();
  r.get('/', validate(Devices), async (_req, res) => {
    const { query } = parsed(res, Devices);
    const state = await loadFleetState(deps.client, deps.config, { pool: query.pool, hostId: query.hostId });
    res.json({ items: presentDevices(state, query) } satisfies DeviceList);
  });
  return r;
}
