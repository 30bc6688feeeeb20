/**
 * Temporal connection settings from Temporal's standard environment variables, so the same
 * processes run against the dev server, a self-hosted cluster or Temporal Cloud.
 *   TEMPORAL_ADDRESS (default localhost:7233), TEMPORAL_NAMESPACE (default "default"),
 *   TEMPORAL_API_KEY, TEMPORAL_TLS ("true" to enable TLS), TEMPORAL_TLS_CLIENT_CERT_PATH,
 *   TEMPORAL_TLS_CLIENT_KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_SERVER_NAME.
 */
import { readFileSync } from 'node:fs';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';

export interface TemporalSettings {
  address: string;
  namespace: string;
  apiKey?: string;
  tls?: {
    serverNameOverride?: string;
    serverRootCACertificate?: Buffer;
    clientCertPair?: { crt: Buffer; key: Buffer };
  };
}

export function temporalSettingsFromEnv(env: NodeJS.ProcessEnv = process.env): TemporalSettings {
  const certPath = env.TEMPORAL_TLS_CLIENT_CERT_PATH;
  const keyPath = env.TEMPORAL_TLS_CLIENT_KEY_PATH;
  const caPath = env.TEMPORAL_TLS_SERVER_CA_CERT_PATH;
  const useTls = env.TEMPORAL_TLS === 'true' || !!certPath || !!env.TEMPORAL_API_KEY;
  return {
    address: env.TEMPORAL_ADDRESS || 'localhost:7233',
    namespace: env.TEMPORAL_NAMESPACE || 'default',
    apiKey: env.TEMPORAL_API_KEY || undefined,
    tls: useTls
      ? {
          serverNameOverride: env.TEMPORAL_TLS_SERVER_NAME || undefined,
          serverRootCACertificate: caPath ? readFileSync(caPath) : undefined,
          clientCertPair: certPath && keyPath ? { crt: readFileSync(certPath), key: readFileSync(keyPath) } : undefined,
        }
      : undefined,
  };
}

export async function connectClient(s: TemporalSettings): Promise<Client> {
  const connection = await named(s, Connection.connect({ address: s.address, tls: s.tls, apiKey: s.apiKey }));
  return new Client({ connection, namespace: s.namespace });
}

export async function connectWorker(s: TemporalSettings): Promise<NativeConnection> {
  return named(s, NativeConnection.connect({ address: s.address, tls: s.tls, apiKey: s.apiKey }));
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
