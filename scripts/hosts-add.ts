/**
 * `npm run hosts:add -- <hostId> [--pool P] [--out FILE] [--force]`: issues a host credential.
 * Writes the private keys to FILE (0600; default .data/hosts/<hostId>.json) for the host's
 * operator to install, and enrolls only the public keys with the control plane.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadControlPlaneConfig } from '../control-plane/config';
import { connectClient, temporalSettingsFromEnv } from '../control-plane/connection';
import { enrollHost } from '../control-plane/hosts';
import { generateHostCredential, loadHostCredential, publicKeys, saveHostCredential } from '../host-worker/identity';

export async function addHost(hostId: string, opts: { pool?: string; out?: string; force?: boolean }): Promise<string> {
  const config = loadControlPlaneConfig();
  const out = opts.out ?? join(__dirname, '..', '.data', 'hosts', `${hostId}.json`);
  let credential;
  if (existsSync(out) && !opts.force) {
    credential = loadHostCredential(out); // re-enrol the existing credential (idempotent)
    if (credential.hostId !== hostId) throw new Error(`${out} holds the credential of host ${credential.hostId}`);
  } else {
    credential = generateHostCredential(hostId);
    saveHostCredential(out, credential);
  }
  const client = await connectClient(temporalSettingsFromEnv());
  try {
    await enrollHost(client, config, { hostId, pool: opts.pool ?? config.defaultPool, keys: publicKeys(credential) });
  } finally {
    await client.connection.close();
  }
  return out;
}

if (require.main === module) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { pool: { type: 'string' }, out: { type: 'string' }, force: { type: 'boolean' } },
  });
  const hostId = positionals[0];
  if (!hostId) {
    console.error('usage: npm run hosts:add -- <hostId> [--pool P] [--out FILE] [--force]');
    process.exit(2);
  }
  addHost(hostId, values).then(
    (out) => console.log(JSON.stringify({ hostId, credentialFile: out, enrolled: true })),
    (err) => {
      console.error(err instanceof Error ? err.message : err);
      process.exit(1);
    },
  );
}
