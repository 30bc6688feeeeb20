/** hosts, devices, drain/undrain, and `hosts add` (a host credential made here, public keys enrolled). */
import { resolve } from 'node:path';
import { CredentialFileError, enrolCredentialFile } from '../../../host-worker/identity';
import { isValidId, ID_RULE } from '../../../workflows/ids';
import type { DeviceList, DrainResult, EnrollResult, HostList, RemoveResult } from '../../rest/fleet/schemas';
import { query, seg } from '../api';
import { arg, flag, str, type Ctx } from '../context';
import { deviceTable, hostTable } from '../format';
import { ExitCode, UsageError } from '../io';

export async function hosts(ctx: Ctx): Promise<ExitCode> {
  if (ctx.args[1] === 'add') return hostsAdd(ctx);
  if (ctx.args[1] === 'remove') return hostsRemove(ctx);
  if (ctx.args.length > 1) throw new UsageError(`unexpected argument "${ctx.args[1]}"`, ctx.usage);
  const list = await ctx.api.get<HostList>(`/v1/hosts${query({ pool: str(ctx, 'pool') })}`);
  ctx.print(hostTable(list.items), list);
  return ExitCode.ok;
}

export async function devices(ctx: Ctx): Promise<ExitCode> {
  const list = await ctx.api.get<DeviceList>(
    `/v1/devices${query({ pool: str(ctx, 'pool'), hostId: str(ctx, 'host'), driverType: str(ctx, 'driver-type') })}`,
  );
  ctx.print(deviceTable(list.items), list);
  return ExitCode.ok;
}

export function drain(drained: boolean) {
  return async (ctx: Ctx): Promise<ExitCode> => {
    const hostId = arg(ctx, 1, 'host id');
    const deviceId = ctx.args[2];
    const action = drained ? 'drain' : 'undrain';
    const path =
      deviceId === undefined
        ? `/v1/hosts/${seg(hostId)}/${action}`
        : `/v1/hosts/${seg(hostId)}/devices/${seg(deviceId)}/${action}`;
    const r = await ctx.api.post<DrainResult>(path);
    const what = r.deviceId ? `device ${r.hostId}/${r.deviceId}` : `host ${r.hostId}`;
    ctx.print(`${what} ${r.drained ? 'drained' : 'undrained'}\n`, r);
    return ExitCode.ok;
  };
}

/** `fleet hosts remove HOST_ID`: an offline host leaves the fleet (its devices leave the pools). */
async function hostsRemove(ctx: Ctx): Promise<ExitCode> {
  const hostId = arg(ctx, 2, 'host id');
  if (ctx.args.length > 3) throw new UsageError(`unexpected argument "${ctx.args[3]}"`, ctx.usage);
  const r = await ctx.api.delete<RemoveResult>(`/v1/hosts/${seg(hostId)}`);
  ctx.print(`host ${r.hostId} removed: its devices left the pools; enrol it again to bring it back\n`, r);
  return ExitCode.ok;
}

/**
 * `fleet hosts add HOST_ID [--pool P] [--out FILE] [--force] [--rotate]`: the credential (private keys) is
 * generated and written (0600) on this machine; only its public keys go to the API. It is written
 * beside the target first and moved into place only once enrolled: a failed enrolment leaves no new
 * file and keeps (with --force) the previous credential as it was. An existing FILE of this host is
 * enrolled again as it is (as `npm run hosts:add` does); --force makes a new one.
 */
async function hostsAdd(ctx: Ctx): Promise<ExitCode> {
  const hostId = arg(ctx, 2, 'host id');
  if (ctx.args.length > 3) throw new UsageError(`unexpected argument "${ctx.args[3]}"`, ctx.usage);
  if (!isValidId(hostId)) throw new UsageError(`invalid host id "${hostId}": ${ID_RULE}`, ctx.usage);
  const out = resolve(ctx.io.cwd ?? process.cwd(), str(ctx, 'out') ?? `${hostId}.credential.json`);
  let enrolled: { result: EnrollResult; fresh: boolean };
  try {
    enrolled = await enrolCredentialFile(out, hostId, flag(ctx, 'force'), (keys) =>
      ctx.api.put<EnrollResult>(`/v1/hosts/${seg(hostId)}/keys`, {
        pool: str(ctx, 'pool'),
        keys,
        ...(flag(ctx, 'rotate') ? { rotate: true } : {}),
      }),
    );
  } catch (err) {
    if (err instanceof CredentialFileError) throw new UsageError(err.message);
    throw err;
  }
  const { result, fresh } = enrolled;
  const summary = {
    hostId: result.hostId,
    pool: result.pool,
    created: result.created,
    rotated: result.rotated,
    credentialFile: out,
  };
  ctx.print(
    `host ${result.hostId} ${result.created ? 'enrolled' : result.rotated ? 're-enrolled: keys rotated' : 're-enrolled'} in pool ${result.pool}\n` +
      (fresh
        ? `credential written to ${out} (mode 0600): install it on the host; it holds the private keys\n`
        : `credential ${out} enrolled as it is (--force makes a new one)\n`) +
      (result.rotated
        ? `the host is offline until it restarts with this credential (its running process can no longer read assignments)\n`
        : ''),
    summary,
  );
  return ExitCode.ok;
}
