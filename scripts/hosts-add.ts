/**
 * `npm run hosts:add -- <hostId> [--pool P] [--out FILE] [--force] [--rotate]`: issues a host
 * credential. Writes the private keys to FILE (0600; default .data/hosts/<hostId>.json; a relative
 * FILE is taken from the directory npm was run in) for the host's operator to install, and enrolls
 * only the public keys with the control plane. An existing FILE is enrolled again as it is; --force
 * makes a new one. Replacing the keys of an enrolled host needs --rotate: the host is offline until
 * it restarts with the new credential.
 */
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { loadControlPlaneConfig } from '../control-plane/config';
import { connectClient, temporalSettingsFromEnv } from '../control-plane/connection';
import { signalKeysFromEnv } from '../control-plane/signal-auth';
import { enrollHost } from '../control-plane/hosts';
import { enrolCredentialFile } from '../host-worker/identity';

export async function addHost(
  hostId: string,
  opts: { pool?: string; out?: string; force?: boolean; rotate?: boolean },
): Promise<{ out: string; created: boolean; rotated: boolean }> {
  const config = loadControlPlaneConfig();
  // npm runs scripts in the package's folder; INIT_CWD is where the operator typed the command.
  const out = opts.out
    ? resolve(process.env.INIT_CWD ?? process.cwd(), opts.out)
    : join(__dirname, '..', '.data', 'hosts', `${hostId}.json`);
  const client = await connectClient(temporalSettingsFromEnv(), {
    signalKeys: signalKeysFromEnv(process.env, join(__dirname, '..', '.data', 'signal.key')),
  });
  try {
    const { result } = await enrolCredentialFile(out, hostId, !!opts.force, (keys) =>
      enrollHost(client, config, { hostId, pool: opts.pool ?? config.defaultPool, keys, rotate: opts.rotate }),
    );
    return { out, ...result };
  } finally {
    await client.connection.close();
  }
}

if (require.main === module) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      pool: { type: 'string' },
      out: { type: 'string' },
      force: { type: 'boolean' },
      rotate: { type: 'boolean' },
    },
  });
  const hostId = positionals[0];
  if (!hostId) {
    console.error('usage: npm run hosts:add -- <hostId> [--pool P] [--out FILE] [--force] [--rotate]');
    process.exit(2);
  }
  addHost(hostId, values).then(
    ({ out, created, rotated }) => {
      console.log(JSON.stringify({ hostId, credentialFile: out, enrolled: true, created, rotated }));
      if (rotated) console.error(`host ${hostId}: keys rotated; it is offline until it restarts with ${out}`);
    },
    (err) => {
      console.error(err instanceof Error ? err.message : err);
      process.exit(1);
    },
  );
}
