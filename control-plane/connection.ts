/**
 * Temporal connection settings from Temporal's standard environment variables, so the same
 * processes run against the dev server, a self-hosted cluster or Temporal Cloud. The names are the
 * ones Temporal documents for every client and the `temporal` CLI
 * (docs.temporal.io, "Environment configuration"); the CLI's older names for the three files
 * (TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY, TEMPORAL_TLS_CA, and their _DATA forms) are read too.
 *
 *   TEMPORAL_ADDRESS (default localhost:7233), TEMPORAL_NAMESPACE (default "default"),
 *   TEMPORAL_API_KEY, TEMPORAL_TLS (true/false/1/0, any case),
 *   TEMPORAL_TLS_CLIENT_CERT_PATH / _DATA, TEMPORAL_TLS_CLIENT_KEY_PATH / _DATA,
 *   TEMPORAL_TLS_SERVER_CA_CERT_PATH / _DATA, TEMPORAL_TLS_SERVER_NAME.
 *
 * Strict, so a slightly-off setting stops the process instead of silently connecting some other way:
 * an empty variable is unset; any other TEMPORAL_TLS value is an error; a certificate, key, CA or
 * server name turns TLS on, and with TEMPORAL_TLS=false is an error; a client certificate needs its
 * key and the other way round; a file that cannot be read is an error naming its variable; an API
 * key is sent over TLS (the default with one), and TEMPORAL_TLS=false with an API key is refused
 * unless the address is localhost, 127.0.0.1 or [::1], where plaintext does not leave the machine.
 * Every problem found is reported at once, in one TemporalSettingsError.
 */
import { readFileSync } from 'node:fs';
import { Client, Connection, type WorkflowClientInterceptor } from '@temporalio/client';
import { asSignal } from '../workflows/authenticity';
import { createSignalAuthCodec, type SignalKeys } from './signal-auth';
import { NativeConnection } from '@temporalio/worker';

export interface TemporalSettings {
  address: string;
  namespace: string;
  apiKey?: string;
  /** TLS options; absent: plaintext (even with an API key: the variables said so, for a local server). */
  tls?: {
    serverNameOverride?: string;
    serverRootCACertificate?: Buffer;
    clientCertPair?: { crt: Buffer; key: Buffer };
  };
}

export class TemporalSettingsError extends Error {
  override name = 'TemporalSettingsError';
}

export const DEFAULT_TEMPORAL_ADDRESS = 'localhost:7233';
export const DEFAULT_TEMPORAL_NAMESPACE = 'default';

/**
 * One piece of TLS material: a file (`paths`) or the PEM text itself (`data`), each under Temporal's
 * name first and the CLI's older name second.
 */
interface TlsMaterial {
  what: string;
  paths: readonly string[];
  data: readonly string[];
}
const CLIENT_CERT: TlsMaterial = {
  what: 'client certificate',
  paths: ['TEMPORAL_TLS_CLIENT_CERT_PATH', 'TEMPORAL_TLS_CERT'],
  data: ['TEMPORAL_TLS_CLIENT_CERT_DATA', 'TEMPORAL_TLS_CERT_DATA'],
};
const CLIENT_KEY: TlsMaterial = {
  what: 'client key',
  paths: ['TEMPORAL_TLS_CLIENT_KEY_PATH', 'TEMPORAL_TLS_KEY'],
  data: ['TEMPORAL_TLS_CLIENT_KEY_DATA', 'TEMPORAL_TLS_KEY_DATA'],
};
const SERVER_CA: TlsMaterial = {
  what: 'server CA certificate',
  paths: ['TEMPORAL_TLS_SERVER_CA_CERT_PATH', 'TEMPORAL_TLS_CA'],
  data: ['TEMPORAL_TLS_SERVER_CA_CERT_DATA', 'TEMPORAL_TLS_CA_DATA'],
};
const SERVER_NAME = 'TEMPORAL_TLS_SERVER_NAME';
/** Every variable that asks for TLS by being set. */
const TLS_VARIABLES: readonly string[] = [
  ...[CLIENT_CERT, CLIENT_KEY, SERVER_CA].flatMap((m) => [...m.paths, ...m.data]),
  SERVER_NAME,
];
/** Hosts where an API key over plaintext does not leave the machine. */
const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '::1']);

export function temporalSettingsFromEnv(env: NodeJS.ProcessEnv = process.env): TemporalSettings {
  const problems: string[] = [];
  const get = (name: string): string | undefined => (env[name] === '' ? undefined : env[name]);

  const address = get('TEMPORAL_ADDRESS') ?? DEFAULT_TEMPORAL_ADDRESS;
  const namespace = get('TEMPORAL_NAMESPACE') ?? DEFAULT_TEMPORAL_NAMESPACE;
  const apiKey = get('TEMPORAL_API_KEY');

  const tlsFlag = parseBoolean('TEMPORAL_TLS', get('TEMPORAL_TLS'), problems);
  if (parseBoolean('TEMPORAL_TLS_DISABLE_HOST_VERIFICATION', get('TEMPORAL_TLS_DISABLE_HOST_VERIFICATION'), problems)) {
    problems.push(
      'TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: not supported here (the TypeScript SDK always verifies the server); ' +
        `set ${SERVER_CA.paths[0]} to the server's CA, or ${SERVER_NAME} to the name its certificate carries`,
    );
  }

  const tlsVariablesSet = TLS_VARIABLES.filter((name) => get(name) !== undefined);
  if (tlsFlag === false && tlsVariablesSet.length > 0) {
    problems.push(
      `TEMPORAL_TLS=false contradicts ${tlsVariablesSet.join(', ')} (TLS settings): ` +
        'unset TEMPORAL_TLS (they turn TLS on by themselves) or unset them',
    );
  }
  if (tlsFlag === false && apiKey !== undefined && !isLoopback(address)) {
    problems.push(
      `TEMPORAL_API_KEY with TEMPORAL_TLS=false would send the API key unencrypted to ${address} ` +
        '(TEMPORAL_ADDRESS): plaintext is allowed only to localhost, 127.0.0.1 or [::1]; unset TEMPORAL_TLS to use TLS',
    );
  }
  const useTls = tlsFlag ?? (tlsVariablesSet.length > 0 || apiKey !== undefined);

  const crt = readMaterial(CLIENT_CERT, get, problems);
  const key = readMaterial(CLIENT_KEY, get, problems);
  const ca = readMaterial(SERVER_CA, get, problems);
  if (crt.from !== undefined && key.from === undefined) {
    problems.push(`${crt.from} is set without a client key: set ${CLIENT_KEY.paths[0]} (or ${CLIENT_KEY.data[0]}) too`);
  }
  if (key.from !== undefined && crt.from === undefined) {
    problems.push(
      `${key.from} is set without a client certificate: set ${CLIENT_CERT.paths[0]} (or ${CLIENT_CERT.data[0]}) too`,
    );
  }

  if (problems.length > 0) {
    throw new TemporalSettingsError(`invalid Temporal connection settings:\n  ${problems.join('\n  ')}`);
  }

  const settings: TemporalSettings = { address, namespace };
  if (apiKey !== undefined) settings.apiKey = apiKey;
  if (useTls) {
    const tls: NonNullable<TemporalSettings['tls']> = {};
    const serverName = get(SERVER_NAME);
    if (serverName !== undefined) tls.serverNameOverride = serverName;
    if (ca.value) tls.serverRootCACertificate = ca.value;
    if (crt.value && key.value) tls.clientCertPair = { crt: crt.value, key: key.value };
    settings.tls = tls;
  }
  return settings;
}

/** true/false/1/0 in any case; unset: undefined; anything else is a problem (and undefined). */
function parseBoolean(name: string, raw: string | undefined, problems: string[]): boolean | undefined {
  if (raw === undefined) return undefined;
  const value = raw.toLowerCase();
  if (value === 'true' || value === '1') return true;
  if (value === 'false' || value === '0') return false;
  problems.push(`${name}: ${JSON.stringify(raw)} is not one of true, false, 1, 0 (any case)`);
  return undefined;
}

/**
 * The material from whichever of its variables is set (`from`: the first of them). Two names for
 * the same thing must agree; a file and inline data for the same thing, or a file that cannot be
 * read or is empty, is a problem. Inline values never appear in a message: a key may be one.
 */
function readMaterial(
  m: TlsMaterial,
  get: (name: string) => string | undefined,
  problems: string[],
): { from?: string; value?: Buffer } {
  const paths = m.paths.filter((name) => get(name) !== undefined);
  const data = m.data.filter((name) => get(name) !== undefined);
  if (paths.length === 0 && data.length === 0) return {};
  const from = paths[0] ?? data[0];
  if (paths.length > 0 && data.length > 0) {
    problems.push(`${paths[0]} and ${data[0]} both set the ${m.what}: set only one`);
    return { from };
  }
  const differing = (names: string[]) => names.find((name) => get(name) !== get(names[0]));
  const other = differing(paths) ?? differing(data);
  if (other !== undefined) {
    const detail = paths.length > 1 ? ` (${get(paths[0])} and ${get(other)})` : '';
    problems.push(`${from} and ${other} set different ${m.what}s${detail}: set only one`);
    return { from };
  }
  if (data.length > 0) return { from, value: Buffer.from(get(from) as string) };
  const path = get(from) as string;
  let value: Buffer;
  try {
    value = readFileSync(path);
  } catch (err) {
    problems.push(`${from}: cannot read the ${m.what} file ${path}: ${(err as Error).message}`);
    return { from };
  }
  if (value.length === 0) {
    problems.push(`${from}: the ${m.what} file ${path} is empty`);
    return { from };
  }
  return { from, value };
}

/** The host part of TEMPORAL_ADDRESS (`host:port`, `[v6]:port` or a bare host) is a loopback name. */
function isLoopback(address: string): boolean {
  const bracketed = /^\[([^\]]+)\](?::\d*)?$/.exec(address);
  const host = bracketed ? bracketed[1] : address.replace(/:\d*$/, '');
  return LOOPBACK_HOSTS.has(host.toLowerCase());
}

/**
 * No `tls` in the settings means plaintext: the SDK would otherwise turn TLS on by itself whenever
 * there is an API key, and TEMPORAL_TLS=false (with a local server) would have no effect.
 */
/** `host`: a host's own client, which never has the signal key (and says nothing of it). */
export async function connectClient(
  s: TemporalSettings,
  opts: { signalKeys?: SignalKeys; host?: boolean } = {},
): Promise<Client> {
  const connection = await named(s, Connection.connect({ address: s.address, tls: s.tls ?? false, apiKey: s.apiKey }));
  return new Client({
    connection,
    namespace: s.namespace,
    ...signingClientOptions(opts.signalKeys, { warn: !opts.host }),
  });
}

/** The payload converter of the workflows and of the control plane's clients (it writes a signal's name). */
export const PAYLOAD_CONVERTER_PATH = require.resolve('../workflows/payload-converter');

/**
 * A control-plane client's data converter: it tags the signals it sends to a workflow with the
 * signal keys (signal-auth.ts), so the workflows take them. Hosts never get the keys.
 */
export function signingClientOptions(signalKeys: SignalKeys | undefined, opts: { warn?: boolean } = {}) {
  if (!signalKeys && opts.warn !== false) warnUnsignedOnce();
  return {
    dataConverter: { payloadConverterPath: PAYLOAD_CONVERTER_PATH, payloadCodecs: [createSignalAuthCodec(signalKeys)] },
    interceptors: { workflow: [namingSignals] },
  };
}

/**
 * Names every signal's argument (and the one update the control plane may send) for the codec,
 * so that what this client sends is tagged for that name only (workflows/authenticity.ts).
 */
const namingSignals: WorkflowClientInterceptor = {
  signal: (input, next) => next({ ...input, args: namedArgs(input.signalName, input.args) }),
  signalWithStart: (input, next) => next({ ...input, signalArgs: namedArgs(input.signalName, input.signalArgs) }),
  startUpdate: (input, next) => next({ ...input, args: namedArgs(input.updateName, input.args) }),
};

function namedArgs(name: string, args: unknown[]): unknown[] {
  const [first, ...rest] = args;
  return typeof first === 'object' && first !== null ? [asSignal({ name }, first), ...rest] : args;
}

let warnedUnsigned = false;
/**
 * A control-plane process without keys: its signals carry no tag, and a fleet whose workflows
 * refuse untagged signals ignores them. Said once, on stderr (never the key: there is none).
 */
function warnUnsignedOnce(): void {
  if (warnedUnsigned) return;
  warnedUnsigned = true;
  console.warn(
    'fleet: no FLEET_SIGNAL_KEYS (nor FLEET_SIGNAL_KEYS_FILE): signals from this process are not tagged; ' +
      'workers with keys ignore them, and workers without keys take signals from anyone (README, "Configuration")',
  );
}

export async function connectWorker(s: TemporalSettings): Promise<NativeConnection> {
  return named(s, NativeConnection.connect({ address: s.address, tls: s.tls ?? false, apiKey: s.apiKey }));
}

/** A connection failure names the address it tried and where that came from. */
async function named<T>(s: TemporalSettings, p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (err) {
    throw new Error(
      `cannot connect to Temporal at ${s.address} (TEMPORAL_ADDRESS): ${(err as Error)?.message ?? String(err)}`,
      { cause: err },
    );
  }
}
