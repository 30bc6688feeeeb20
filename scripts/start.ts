/**
 * `npm start`: the whole stack on one machine. A Temporal dev server (SQLite file under .data/,
 * Web UI, the fleet's search attributes), the control-plane worker, the REST facade and one
 * simulated host. Prints the addresses and a fresh admin API token. Ctrl-C stops everything:
 * the fleet processes first, the Temporal server last.
 *
 * Ports: FLEET_TEMPORAL_PORT (7233), FLEET_UI_PORT (8233), FLEET_REST_PORT (8080),
 * FLEET_SDK_METRICS_PORT (9464, the control plane's Temporal SDK metrics).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { Connection } from '@temporalio/client';
import { sha256Hex, type ApiToken } from '../control-plane/rest/auth';
import { devServerTuningArgs, temporalCliPath } from '../control-plane/temporal-cli';
import { ALL_SEARCH_ATTRIBUTES } from '../workflows/search-attributes';
import { addHost } from './hosts-add';

const root = join(__dirname, '..');
const port = Number(process.env.FLEET_TEMPORAL_PORT ?? 7233);
const uiPort = Number(process.env.FLEET_UI_PORT ?? 8233);
const restPort = Number(process.env.FLEET_REST_PORT ?? 8080);
const sdkMetricsPort = Number(process.env.FLEET_SDK_METRICS_PORT ?? 9464);
const dataDir = join(root, '.data');
const tokensFile = join(dataDir, 'api-tokens.json');
const LOCAL_ADMIN = 'local-admin';
const STOP_GRACE_MS = 15_000;

let temporal: ChildProcess | undefined;
const fleet: ChildProcess[] = [];

function run(
  name: string,
  cmd: string,
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; detached?: boolean; onLine?: (line: string) => void } = {},
): ChildProcess {
  const child = spawn(cmd, args, {
    cwd: root,
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: opts.detached ?? false,
  });
  for (const stream of [child.stdout!, child.stderr!]) {
    createInterface({ input: stream, crlfDelay: Infinity }).on('line', (line) => {
      if (!line) return;
      process.stdout.write(`[${name}] ${line}\n`);
      opts.onLine?.(line);
    });
  }
  child.on('exit', (code, signal) => {
    if (!stopping) {
      console.error(`[${name}] exited (${code ?? signal}); stopping the stack`);
      void stop(1);
    }
  });
  return child;
}

const running = (c: ChildProcess) => c.exitCode === null && c.signalCode === null;

/** SIGTERM, then SIGKILL after the grace period; resolves when the process is gone. */
function terminate(c: ChildProcess): Promise<void> {
  if (!running(c)) return Promise.resolve();
  return new Promise((resolve) => {
    const force = setTimeout(() => c.kill('SIGKILL'), STOP_GRACE_MS);
    c.once('exit', () => {
      clearTimeout(force);
      resolve();
    });
    c.kill('SIGTERM');
  });
}

let stopping = false;
async function stop(code = 0): Promise<void> {
  if (stopping) return;
  stopping = true;
  console.log('stopping: host, REST, control plane, then Temporal');
  // The fleet processes first, so they do not log a vanished server while they shut down.
  await Promise.all(fleet.map(terminate));
  if (temporal) await terminate(temporal);
  console.log('stopped');
  process.exit(code);
}

async function waitFor(what: string, probe: () => Promise<void>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await probe();
      return;
    } catch (err) {
      if (stopping) throw new Error(`${what}: stopped`, { cause: err });
      if (Date.now() > deadline) throw new Error(`${what} did not come up: ${String(err)}`, { cause: err });
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

async function temporalUp(address: string): Promise<void> {
  const c = await Connection.connect({ address, connectTimeout: 1_000 });
  try {
    await c.healthService.check({});
  } finally {
    await c.close();
  }
}

async function httpOk(url: string): Promise<void> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  if (!res.ok) throw new Error(`${url}: ${res.status}`);
}

/**
 * A fresh admin token for this run: only its sha256 is written to .data/api-tokens.json (0600), next
 * to any other tokens an operator added there; the plain token is printed once and kept nowhere.
 */
function issueAdminToken(): string {
  let tokens: ApiToken[] = [];
  if (existsSync(tokensFile)) {
    const raw: unknown = JSON.parse(readFileSync(tokensFile, 'utf8'));
    const list = Array.isArray(raw) ? raw : ((raw as { tokens?: ApiToken[] }).tokens ?? []);
    tokens = (list as ApiToken[]).filter((t) => t.name !== LOCAL_ADMIN);
  }
  const token = `fleet_${randomBytes(24).toString('base64url')}`;
  tokens.push({ name: LOCAL_ADMIN, role: 'admin', tokenSha256: sha256Hex(token) });
  writeFileSync(tokensFile, `${JSON.stringify(tokens, null, 2)}\n`, { mode: 0o600 });
  return token;
}

async function main(): Promise<void> {
  // `on`, not `once`: Ctrl-C reaches us twice (from the terminal and relayed by npm/tsx), and a second
  // signal must not kill us before the Temporal server (in its own process group) is stopped.
  process.on('SIGINT', () => void stop());
  process.on('SIGTERM', () => void stop());
  // The dev server runs in its own process group (so Ctrl-C reaches it only through us, last):
  // make sure it never outlives this script.
  process.once('exit', () => {
    if (temporal && running(temporal)) temporal.kill('SIGKILL');
  });
  mkdirSync(dataDir, { recursive: true });
  const address = `127.0.0.1:${port}`;
  const saFlags = ALL_SEARCH_ATTRIBUTES.flatMap((k) => [
    '--search-attribute',
    `${k.name}=${k.type === 'INT' ? 'Int' : 'Keyword'}`,
  ]);
  temporal = run(
    'temporal',
    temporalCliPath(),
    [
      'server',
      'start-dev',
      '--ip',
      '127.0.0.1',
      '--port',
      String(port),
      '--ui-port',
      String(uiPort),
      '--db-filename',
      join(dataDir, 'temporal.db'),
      '--log-level',
      'warn',
      ...saFlags,
      ...devServerTuningArgs(),
    ],
    { detached: true },
  );
  await waitFor(`Temporal on ${address}`, () => temporalUp(address));
  const env = {
    TEMPORAL_ADDRESS: address,
    TEMPORAL_NAMESPACE: 'default',
    FLEET_SDK_METRICS_PORT: String(sdkMetricsPort),
  };
  // The control plane's signal key (control-plane/signal-auth.ts): made once, kept with the data
  // (its histories replay only with it). The control plane and REST get it; the host never does.
  const controlEnv = { ...env, FLEET_SIGNAL_KEYS: process.env.FLEET_SIGNAL_KEYS || signalKeyFile(dataDir) };
  process.env.FLEET_SIGNAL_KEYS = controlEnv.FLEET_SIGNAL_KEYS; // enrolment below signals too
  process.env.TEMPORAL_ADDRESS = address;
  // The operator step a real lab does once per host: issue a credential and enrol its public keys.
  await addHost('lab-1', { out: join(dataDir, 'hosts', 'lab-1.json') });
  const token = issueAdminToken();
  const tsx = (entry: string, ...args: string[]): [string, string[]] => [
    process.execPath,
    ['--import', 'tsx', entry, ...args],
  ];
  // The control plane says where its SDK metrics really are (another process may hold the port).
  let sdkMetrics: string | undefined;
  const controlPlaneStarted = new Promise<void>((resolve) => {
    fleet.push(
      run('control-plane', ...tsx('control-plane/main.ts'), {
        env: controlEnv,
        onLine: (line) => {
          if (!line.includes('"control plane started"')) return;
          try {
            sdkMetrics = String((JSON.parse(line) as { sdkMetrics?: string }).sdkMetrics ?? 'off');
          } catch {
            sdkMetrics = 'unknown';
          }
          resolve();
        },
      }),
    );
  });
  fleet.push(
    run('rest', ...tsx('control-plane/rest-main.ts'), {
      env: { ...controlEnv, FLEET_REST_HOST: '127.0.0.1', PORT: String(restPort), FLEET_API_TOKENS: tokensFile },
    }),
  );
  fleet.push(
    run(
      'host lab-1',
      ...tsx(
        'host-worker/main.ts',
        '--config',
        process.env.FLEET_HOST_CONFIG
          ? resolve(process.env.INIT_CWD ?? process.cwd(), process.env.FLEET_HOST_CONFIG)
          : join(root, 'examples', 'host.json'),
      ),
      { env: { ...env, FLEET_SIGNAL_KEYS: '' } },
    ),
  );
  const rest = `http://127.0.0.1:${restPort}`;
  await waitFor('the REST facade', () => httpOk(`${rest}/healthz`));
  await controlPlaneStarted;
  console.log(
    [
      '',
      `Temporal:     ${address}   (data in .data/temporal.db)`,
      `Web UI:       http://127.0.0.1:${uiPort}/namespaces/default/workflows`,
      `REST:         ${rest}   (OpenAPI: ${rest}/openapi.json)`,
      `Metrics:      ${rest}/metrics   (fleet: queues, assignments, task outcomes)`,
      `SDK metrics:  ${sdkMetrics}   (control-plane worker, Temporal SDK; FLEET_SDK_METRICS_PORT)`,
      `Admin token:  ${token}   (shown once; only its sha256 is in .data/api-tokens.json)`,
      '',
      'Submit:',
      `  curl -s -X POST ${rest}/v1/tasks -H "Authorization: Bearer ${token}" \\`,
      `    -H 'Content-Type: application/json' -d '{"goal":"open settings","constraints":{"driverType":"android"}}'`,
      '  npm run submit -- --goal "open settings" --driver-type android --wait',
      '',
      'For the CLI (npx fleet ...) and npm run submit in another shell:',
      `  export TEMPORAL_ADDRESS=${address} FLEET_URL=${rest} FLEET_TOKEN=${token}`,
      'Ctrl-C stops everything.',
      '',
    ].join('\n'),
  );
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  void stop(1);
});

/** `<data>/signal.key` (64 hex digits, mode 0600), made on first use. */
function signalKeyFile(dataDir: string): string {
  const file = join(dataDir, 'signal.key');
  if (!existsSync(file)) writeFileSync(file, randomBytes(32).toString('hex') + '\n', { mode: 0o600, flag: 'wx' });
  return readFileSync(file, 'utf8').trim();
}
