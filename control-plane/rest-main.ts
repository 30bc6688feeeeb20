/**
 * The REST facade process: parses its configuration once, connects to Temporal, listens on PORT
 * (default 8080) at FLEET_REST_HOST (default every interface; `npm start` sets 127.0.0.1), and on
 * SIGTERM/SIGINT stops accepting, ends open event streams and exits.
 *   FLEET_API_TOKENS      JSON file of API tokens: [{ name, role, tokenSha256 }] (required)
 *   FLEET_DEFINITIONS     JSON file of workflow definitions (default .data/workflow-definitions.json)
 *   FLEET_CURSOR_KEY      secret that signs list cursors; set the same on every replica (default: random)
 *   FLEET_CONFIG, FLEET_TASK_QUEUE, FLEET_STRATEGY, TEMPORAL_*: as for the control plane
 *   FLEET_LOG_LEVEL       structured JSON logs on stdout at this level and above (default info)
 * GET /metrics serves the fleet's application metrics (control-plane/metrics.ts) and this process's
 * Node.js metrics (prefix fleet_rest_).
 */
import { createHash } from 'node:crypto';
import type { Server } from 'node:http';
import { collectDefaultMetrics } from 'prom-client';
import { FleetClient } from './client';
import { loadControlPlaneConfig } from './config';
import { connectClient, temporalSettingsFromEnv } from './connection';
import { signalKeysFromEnv } from './signal-auth';
import { createLog } from './log';
import { createApp } from './rest/app';
import { loadApiTokens, watchedApiTokens } from './rest/auth';
import { JsonFileDefinitionsStore } from './rest/definitions/store';

const SHUTDOWN_GRACE_MS = 10_000;
const log = createLog('rest');

function parsePort(raw: string | undefined): number {
  const port = Number(raw ?? 8080);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new Error(`PORT must be 0-65535, got "${raw}"`);
  return port;
}

async function main(): Promise<void> {
  const config = loadControlPlaneConfig();
  const tokensPath = process.env.FLEET_API_TOKENS;
  loadApiTokens(tokensPath); // refuses to start without a valid file
  // Edits to the file take effect within a second, without a restart.
  const tokens = watchedApiTokens(tokensPath!, (err) =>
    log.error('API tokens file changed but cannot be used; keeping the tokens it had', { error: err.message }),
  );
  const port = parsePort(process.env.PORT);
  const definitions = new JsonFileDefinitionsStore(process.env.FLEET_DEFINITIONS ?? '.data/workflow-definitions.json');
  collectDefaultMetrics({ prefix: 'fleet_rest_' });
  const client = await connectClient(temporalSettingsFromEnv(), { signalKeys: signalKeysFromEnv() });
  const cursorKey = process.env.FLEET_CURSOR_KEY
    ? createHash('sha256').update(process.env.FLEET_CURSOR_KEY).digest()
    : undefined;
  const app = createApp({
    fleet: new FleetClient(client, config),
    client,
    config,
    tokens,
    definitions,
    options: { cursorKey, log: (message, meta) => log.error(message, meta) },
  });

  const host = process.env.FLEET_REST_HOST || undefined;
  const server: Server = await new Promise((resolve, reject) => {
    const done = (err?: Error) => (err ? reject(err) : resolve(s));
    const s = host ? app.listen(port, host, done) : app.listen(port, done);
  });
  const address = server.address();
  log.info('REST facade listening', {
    host: typeof address === 'object' && address ? address.address : host,
    port: typeof address === 'object' && address ? address.port : port,
  });

  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info('shutting down', { signal });
    const force = setTimeout(() => server.closeAllConnections(), SHUTDOWN_GRACE_MS);
    force.unref();
    server.close(() => {
      clearTimeout(force);
      void client.connection.close().finally(() => process.exit(0));
    });
    // Idle keep-alive sockets close now; event streams end at the grace deadline at the latest.
    server.closeIdleConnections();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

main().catch((err: unknown) => {
  log.error('REST facade failed', { error: err });
  process.exit(1);
});
