/**
 * `npm run control-plane`: the control-plane worker (every fleet workflow + control activities).
 * Configuration: FLEET_CONFIG (JSON file), FLEET_STRATEGY, FLEET_TASK_QUEUE; Temporal: TEMPORAL_*.
 */
import { loadControlPlaneConfig } from './config';
import { connectClient, connectWorker, temporalSettingsFromEnv } from './connection';
import { createControlPlaneWorker, ensurePools } from './worker';

async function main(): Promise<void> {
  const config = loadControlPlaneConfig(); // a bad strategy name stops us here, before anything starts
  const settings = temporalSettingsFromEnv();
  const client = await connectClient(settings);
  const connection = await connectWorker(settings);
  const worker = await createControlPlaneWorker({ connection, client, config, namespace: settings.namespace });
  const running = worker.run(); // the schedulers need a running worker to apply their configuration
  await ensurePools(client, config);
  const log = (message: string, fields: Record<string, unknown> = {}) =>
    console.log(JSON.stringify({ level: 'info', component: 'control-plane', message, ...fields }));
  log('control plane started', { taskQueue: config.controlTaskQueue, pools: Object.keys(config.pools) });
  const stop = () => worker.shutdown();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  await running;
  log('control plane stopped');
  await connection.close();
  await client.connection.close();
}

main().catch((err) => {
  console.error(err instanceof Error ? `${err.name}: ${err.message}` : err);
  process.exit(1);
});
