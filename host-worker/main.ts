/**
 * `npm run host -- --config host.json`: runs one host agent. It needs only the Temporal address
 * (standard TEMPORAL_* environment variables) and opens no listening socket.
 */
import { parseArgs } from 'node:util';
import { connectClient, connectWorker, temporalSettingsFromEnv } from '../control-plane/connection';
import { dirname, resolve } from 'node:path';
import { loadHostConfig } from './config';
import { loadHostCredential } from './identity';
import { startHost } from './host';
import { createSimRunners, simDevices } from './sim';

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { config: { type: 'string', short: 'c' } } });
  const path = values.config ?? process.env.FLEET_HOST_CONFIG;
  if (!path) throw new Error('usage: npm run host -- --config <host.json>   (or FLEET_HOST_CONFIG=<file>)');
  const config = loadHostConfig(path);
  const settings = temporalSettingsFromEnv();
  const workerConnection = await connectWorker(settings);
  const client = await connectClient(settings);
  const log = (message: string, fields: Record<string, unknown>) =>
    console.log(JSON.stringify({ level: 'info', hostId: config.hostId, message, ...fields }));
  const definitions = new Map(Object.entries(config.definitions));
  const credential = loadHostCredential(resolve(dirname(path), config.credentialFile));
  if (credential.hostId !== config.hostId) {
    throw new Error(`credential ${config.credentialFile} is for host ${credential.hostId}, not ${config.hostId}`);
  }
  const host = await startHost({
    credential,
    pool: config.pool,
    namespace: settings.namespace,
    workerConnection,
    clientConnection: client.connection,
    devices: simDevices(config.driver.devices),
    runners: createSimRunners({
      defaultDurationMs: config.driver.defaultDurationMs,
      defaultOutcome: config.driver.defaultOutcome,
      definitions,
    }),
    snapshotIntervalMs: config.snapshotIntervalMs,
    progressIntervalMs: config.progressIntervalMs,
    log,
  });
  log('host started', { taskQueue: `fleet.host.${config.hostId}`, devices: config.driver.devices.length });
  const stop = () => {
    log('stopping', {});
    host.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
