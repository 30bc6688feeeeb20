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
import { watchFleet } from './watch';
import { createControlPlaneWorker, ensurePools } from './worker';

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
  // Schedulers and device workflows that stopped (terminated, failed) are started again (watch.ts).
  const watch = watchFleet(client, config, log);
  // The SDK runtime already shuts the worker down on SIGINT/SIGTERM; this covers runtimes installed without that.
  const stop = () => {
    stopping = true;
    void watch.stop(); // no check starts a scheduler while the worker shuts down
    worker.shutdown();
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  await running;
  stopping = true;
  void watch.stop(); // not awaited: a check under way ends with the connections (said at warn, if at all)
  log.info('control plane stopped');
  await connection.close();
  await client.connection.close();
}

main().catch((err: unknown) => {
  log.error('control plane failed', { error: err });
  process.exit(1);
});
