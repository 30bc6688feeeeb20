/**
 * `npm run host -- --config host.json`: runs one host agent. It needs only the Temporal address
 * (standard TEMPORAL_* environment variables) and opens no listening socket.
 */
import { parseArgs } from 'node:util';
import { connectClient, connectWorker, temporalSettingsFromEnv } from '../control-plane/connection';
import { loadHostConfig } from './config';
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
  const host = await startHost({
    hostId: config.hostId,
    pool: config.pool,
    namespace: settings.namespace,
    controlTaskQueue: config.controlTaskQueue,
    workerConnection,
    clientConnection: client.connection,
    devices: simDevices(config.driver.devices),
    runners: createSimRunners({
      defaultDurationMs: config.driver.defaultDurationMs,
      defaultOutcome: config.driver.defaultOutcome,
      definitions,
    }),
    snapshotIntervalMs: config.snapshotIntervalMs,
    hostTimeoutMs: config.hostTimeoutMs,
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
