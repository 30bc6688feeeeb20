/**
 * `npm run host -- --config host.json`: runs one host agent. It needs only the Temporal address
 * (standard TEMPORAL_* environment variables) and its credential, and opens no listening socket.
 */
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Runtime } from '@temporalio/worker';
import { connectClient, connectWorker, temporalSettingsFromEnv } from '../control-plane/connection';
import { createLog, parseLevelStrict, SdkJsonLogger } from '../control-plane/log';
import { hostConfigWarnings, loadHostConfig } from './config';
import { createDriver, createRunners } from './factory';
import { DEFAULT_TAKEOVER_WAIT_MS, startHost } from './host';
import { loadHostCredential } from './identity';
import { Journal, JournalLock, processIdentity } from './journal';
import type { HostLog } from './logging';

async function main(): Promise<void> {
  // A misspelt level is an error, not a silent info.
  const level = parseLevelStrict(process.env.FLEET_LOG_LEVEL);
  const { values } = parseArgs({ options: { config: { type: 'string', short: 'c' } } });
  const path = values.config ?? process.env.FLEET_HOST_CONFIG;
  if (!path) throw new Error('usage: npm run host -- --config <host.json>   (or FLEET_HOST_CONFIG=<file>)');
  // `npm run host` runs in the package's folder; INIT_CWD is where the operator typed the command.
  // Started any other way (a service manager, npm start), a relative path is the process's own.
  const base =
    process.env.npm_lifecycle_event === 'host' && process.env.INIT_CWD ? process.env.INIT_CWD : process.cwd();
  const config = loadHostConfig(resolve(base, path));
  const credential = loadHostCredential(config.credentialPath);
  if (credential.hostId !== config.hostId) {
    throw new Error(`credential ${config.credentialFile} is for host ${credential.hostId}, not ${config.hostId}`);
  }
  // The SDK's own lines (and activity logs) as JSON too, like the agent's, before any connection.
  Runtime.install({
    logger: new SdkJsonLogger('temporal', { level }),
    telemetryOptions: { logging: { filter: { core: 'WARN', other: 'ERROR' }, forward: {} } },
  });
  const agentLog = createLog('host-agent', { hostId: config.hostId }, { level });
  const log: HostLog = (message, fields, lvl = 'info') => agentLog[lvl](message, fields);
  for (const warning of hostConfigWarnings(config)) log(warning, {}, 'warn');
  if (process.env.FLEET_SIGNAL_KEYS || process.env.FLEET_SIGNAL_KEYS_FILE) {
    // The host never uses them; holding them would let it sign what only the control plane may send.
    log(
      "FLEET_SIGNAL_KEYS is set for this host: it is the control plane's secret; remove it from the host",
      {},
      'warn',
    );
  }
  // One process per journal (and so per host): a second one started with this config stops here.
  // A lock left by a crash (its process gone) is taken over.
  const lock = await JournalLock.acquire(config.journalPath, { log });
  // Released however the process ends but a crash (then the next start takes it over).
  process.once('exit', () => lock.releaseSync());
  // A corrupt journal stops the host here, with the file named: nothing is silently forgotten.
  const journal = await Journal.open(config.journalPath);
  const settings = temporalSettingsFromEnv();
  const workerConnection = await connectWorker(settings);
  const client = await connectClient(settings, { host: true });
  const simDefaults =
    config.driver.type === 'sim'
      ? { defaultDurationMs: config.driver.defaultDurationMs, defaultOutcome: config.driver.defaultOutcome }
      : undefined;
  const runners = createRunners(config.runner ?? { type: 'sim' }, config.definitions, {
    simDefaults,
    // Record the runner's process group, so a restarted host can stop what it left behind.
    onSpawn: (pid, ctx) => {
      const entry = journal.entries().find((e) => e.taskId === ctx.taskId && e.attempt === ctx.attempt);
      if (entry)
        void journal
          .add({ ...entry, pid, ...processIdentity(pid) })
          .catch((err) => log('journal pid not recorded', { error: String(err) }, 'error'));
    },
  });
  const host = await startHost({
    credential,
    pool: config.pool,
    namespace: settings.namespace,
    workerConnection,
    clientConnection: client.connection,
    driver: createDriver(config.driver),
    journal,
    runnerKillGraceMs: config.runner?.type === 'command' ? config.runner.killGraceMs : undefined,
    runners,
    definitions: new Map(Object.entries(config.definitions)),
    snapshotIntervalMs: config.snapshotIntervalMs,
    discoveryIntervalMs: config.discoveryIntervalMs,
    discoveryFailuresBeforeUnhealthy: config.discoveryFailuresBeforeUnhealthy,
    progressIntervalMs: config.progressIntervalMs,
    reportDelayMs: config.reportDelayMs,
    shutdownGraceMs: config.shutdownGraceMs,
    // Room for a command runner's SIGTERM -> SIGKILL grace when a stale run must make way.
    takeoverWaitMs:
      config.runner?.type === 'command'
        ? Math.max(DEFAULT_TAKEOVER_WAIT_MS, config.runner.killGraceMs + 5_000)
        : DEFAULT_TAKEOVER_WAIT_MS,
    log,
  });
  log('host started', {
    taskQueue: `fleet.host.${config.hostId}`,
    driver: config.driver.type,
    journal: config.journalPath,
    shutdownGraceMs: config.shutdownGraceMs,
  });
  const stop = () => {
    // A second SIGINT or SIGTERM finds no handler: it kills the agent at once (like a crash).
    process.removeListener('SIGINT', stop);
    process.removeListener('SIGTERM', stop);
    log('stopping: running assignments get shutdownGraceMs to finish, then they are cancelled', {
      shutdownGraceMs: config.shutdownGraceMs,
    });
    host.stop().then(
      async () => {
        await lock.release();
        process.exit(0);
      },
      (err) => {
        log('stop failed', { error: String(err) }, 'error');
        process.exit(1);
      },
    );
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

main().catch((err) => {
  console.error(err instanceof Error ? `${err.name}: ${err.message}` : err);
  process.exit(1);
});
