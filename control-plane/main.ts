/**
 * `npm run control-plane`: the control-plane worker (every fleet workflow + control activities).
 * Configuration: FLEET_CONFIG (JSON file), FLEET_STRATEGY, FLEET_TASK_QUEUE; Temporal: TEMPORAL_*.
 * Observability: structured JSON logs on stdout (FLEET_LOG_LEVEL, default info), the SDK's own and
 * workflow logs included; the SDK's Prometheus metrics on FLEET_SDK_METRICS_ADDRESS
 * (default 127.0.0.1:9464, path /metrics; "off" disables it).
 */
import { Runtime } from '@temporalio/worker';
import { loadControlPlaneConfig, taskWorkflowQueue } from './config';
import { connectClient, connectWorker, temporalSettingsFromEnv } from './connection';
import { signalKeysFromEnv } from './signal-auth';
import { createLog, SdkJsonLogger } from './log';
import { createControlPlaneWorker, ensurePools, restartStoppedSchedulers, restoreStoppedDevices } from './worker';

const log = createLog('control-plane');

function sdkMetricsAddress(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const raw = env.FLEET_SDK_METRICS_ADDRESS ?? `127.0.0.1:${env.FLEET_SDK_METRICS_PORT ?? 9464}`;
  return raw === 'off' ? undefined : raw;
}

/**
 * Installs the SDK runtime (once per process, before any worker or native connection). A busy metrics
 * port does not stop the control plane: it runs without SDK metrics and says so. Returns the bound address.
 */
function installRuntime(metricsAddress: string | undefined): string | undefined {
  const logging = { filter: { core: 'WARN', other: 'ERROR' }, forward: {} } as const;
  const logger = new SdkJsonLogger('temporal');
  if (metricsAddress) {
    try {
      Runtime.install({
        logger,
        telemetryOptions: { logging, metrics: { prometheus: { bindAddress: metricsAddress } } },
      });
      return metricsAddress;
    } catch (err) {
      log.warn('SDK metrics exporter not started; running without it', { address: metricsAddress, error: err });
    }
  }
  Runtime.install({ logger, telemetryOptions: { logging } });
  return undefined;
}

async function main(): Promise<void> {
  const config = loadControlPlaneConfig(); // a bad strategy name stops us here, before anything starts
  const metricsAddress = installRuntime(sdkMetricsAddress());
  const settings = temporalSettingsFromEnv();
  const signalKeys = signalKeysFromEnv();
  const client = await connectClient(settings, { signalKeys });
  const connection = await connectWorker(settings);
  const worker = await createControlPlaneWorker({
    connection,
    client,
    config,
    namespace: settings.namespace,
    signalKeys,
  });
  const running = worker.run(); // the schedulers need a running worker to apply their configuration
  let stopping = false;
  // A pool that cannot be started or configured (the namespace lacks the search attributes, its
  // scheduler is stuck) must not keep the worker from serving every other workflow: said at error,
  // and tried again in the background until it works (5 s, then twice as long each time, at most
  // poolWatchMs: once the namespace is fixed, the pools start within poolWatchMs).
  const poolsReady = await ensurePools(client, config).then(
    () => true,
    (err: unknown) => {
      log.error('could not start or configure the pools; trying again in the background', { error: err });
      return false;
    },
  );
  log.info('control plane started', {
    taskQueue: config.controlTaskQueue,
    taskWorkflowTaskQueue: taskWorkflowQueue(config),
    pools: Object.keys(config.pools),
    poolsReady,
    sdkMetrics: metricsAddress ? `http://${metricsAddress}/metrics` : 'off',
  });
  if (!poolsReady) {
    void (async () => {
      const next = (ms: number) => Math.min(ms, config.poolWatchMs);
      for (let delayMs = next(5_000); !stopping; delayMs = next(delayMs * 2)) {
        await new Promise((r) => setTimeout(r, delayMs).unref());
        if (stopping) return;
        try {
          await ensurePools(client, config);
          log.info('pools started and configured', { pools: Object.keys(config.pools) });
          return;
        } catch (err) {
          log.error('could not start or configure the pools; trying again', { error: err, nextInMs: next(delayMs * 2) });
        }
      }
    })();
  }
  // A scheduler terminated by an operator (or failed) is started again within poolWatchMs, even in
  // a pool where nothing else happens; its new run asks the pool's tasks and hosts again. So is a
  // device workflow, by its host.
  void (async () => {
    // Each failure is said once per spell (the server may be down a while), not at every check.
    let failing = false;
    const failingPools = new Set<string>();
    const failingHosts = new Set<string>();
    let failingDeviceCheck = false;
    while (!stopping) {
      await new Promise((r) => setTimeout(r, config.poolWatchMs).unref());
      if (stopping) return;
      try {
        const { restarted, failed } = await restartStoppedSchedulers(client, config);
        for (const pool of restarted) {
          log.warn('the scheduler of a pool was not running (terminated or failed): started again', { pool });
        }
        for (const { pool, error } of failed) {
          if (!failingPools.has(pool)) log.error('could not start the scheduler of a pool again; trying again', { pool, error });
        }
        failingPools.clear();
        for (const { pool } of failed) failingPools.add(pool);
        failing = false;
      } catch (err) {
        if (!failing) log.warn('could not check that every pool scheduler runs; trying again', { error: err });
        failing = true;
      }
      // And device workflows lost the same way: their hosts start them again.
      try {
        const devices = await restoreStoppedDevices(client, config);
        for (const device of devices.restored) {
          log.warn('a device workflow was not running (terminated or failed): its host starts it again', { device });
        }
        for (const { host, error } of devices.failed) {
          if (!failingHosts.has(host)) log.error('could not ask a host to start its device workflows again; trying again', { host, error });
        }
        failingHosts.clear();
        for (const { host } of devices.failed) failingHosts.add(host);
        failingDeviceCheck = false;
      } catch (err) {
        if (!failingDeviceCheck) log.warn('could not check that every device workflow runs; trying again', { error: err });
        failingDeviceCheck = true;
      }
    }
  })();
  // The SDK runtime already shuts the worker down on SIGINT/SIGTERM; this covers runtimes installed without that.
  const stop = () => {
    stopping = true;
    worker.shutdown();
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  await running;
  stopping = true;
  log.info('control plane stopped');
  await connection.close();
  await client.connection.close();
}

main().catch((err: unknown) => {
  log.error('control plane failed', { error: err });
  process.exit(1);
});
