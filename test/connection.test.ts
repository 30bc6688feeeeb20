/**
 * Temporal connection settings from the environment (control-plane/connection.ts): every rule is
 * checked on the pure function with an env object of its own; one test connects to the test server.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  connectClient,
  connectWorker,
  temporalSettingsFromEnv,
  TemporalSettingsError,
  type TemporalSettings,
} from '../control-plane/connection';
import { testEnv } from './setup';

describe('Temporal connection settings (TEMPORAL_*)', () => {
  let dir: string;
  let cert: string;
  let key: string;
  let ca: string;
  const CERT = '-----BEGIN CERTIFICATE-----\nclient\n-----END CERTIFICATE-----\n';
  const KEY = '-----BEGIN PRIVATE KEY-----\nclient\n-----END PRIVATE KEY-----\n';
  const CA = '-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n';

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'fleet-connection-'));
    cert = join(dir, 'client.pem');
    key = join(dir, 'client.key');
    ca = join(dir, 'ca.pem');
    writeFileSync(cert, CERT);
    writeFileSync(key, KEY);
    writeFileSync(ca, CA);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** Compared without keys whose value is undefined: the shape is free, what it says is not. */
  const defined = (v: unknown): unknown =>
    Buffer.isBuffer(v) || v === null || typeof v !== 'object'
      ? v
      : Object.fromEntries(
          Object.entries(v)
            .filter(([, x]) => x !== undefined)
            .map(([k, x]) => [k, defined(x)]),
        );
  const settings = (env: NodeJS.ProcessEnv): TemporalSettings =>
    defined(temporalSettingsFromEnv(env)) as TemporalSettings;
  /** The settings error for `env`, every one of `expected` in its message. */
  const rejects = (env: NodeJS.ProcessEnv, ...expected: RegExp[]): string => {
    let message = '';
    assert.throws(
      () => temporalSettingsFromEnv(env),
      (err: unknown) => {
        assert.ok(err instanceof TemporalSettingsError, `not a TemporalSettingsError: ${String(err)}`);
        message = err.message;
        for (const re of expected) assert.match(message, re);
        return true;
      },
      `accepted ${JSON.stringify(env)}`,
    );
    return message;
  };

  describe('defaults', () => {
    it('nothing set: the local dev server, namespace "default", plaintext, no API key', () => {
      assert.deepEqual(settings({}), { address: 'localhost:7233', namespace: 'default' });
    });
    it('empty strings count as unset, for every variable', () => {
      const empty = Object.fromEntries(
        [
          'TEMPORAL_ADDRESS',
          'TEMPORAL_NAMESPACE',
          'TEMPORAL_API_KEY',
          'TEMPORAL_TLS',
          'TEMPORAL_TLS_CLIENT_CERT_PATH',
          'TEMPORAL_TLS_CLIENT_KEY_PATH',
          'TEMPORAL_TLS_SERVER_CA_CERT_PATH',
          'TEMPORAL_TLS_SERVER_NAME',
          'TEMPORAL_TLS_CLIENT_CERT_DATA',
          'TEMPORAL_TLS_CLIENT_KEY_DATA',
          'TEMPORAL_TLS_SERVER_CA_CERT_DATA',
          'TEMPORAL_TLS_CERT',
          'TEMPORAL_TLS_KEY',
          'TEMPORAL_TLS_CA',
          'TEMPORAL_TLS_DISABLE_HOST_VERIFICATION',
        ].map((name) => [name, '']),
      );
      assert.deepEqual(settings(empty), { address: 'localhost:7233', namespace: 'default' });
      // An empty TEMPORAL_TLS does not contradict a CA either.
      assert.deepEqual(settings({ TEMPORAL_TLS: '', TEMPORAL_TLS_SERVER_CA_CERT_PATH: ca }).tls, {
        serverRootCACertificate: Buffer.from(CA),
      });
    });
    it('address, namespace and API key as given; an API key alone turns TLS on', () => {
      assert.deepEqual(
        settings({
          TEMPORAL_ADDRESS: 'ns.acct.tmprl.cloud:7233',
          TEMPORAL_NAMESPACE: 'ns.acct',
          TEMPORAL_API_KEY: 'k',
        }),
        { address: 'ns.acct.tmprl.cloud:7233', namespace: 'ns.acct', apiKey: 'k', tls: {} },
      );
    });
  });

  describe('TEMPORAL_TLS', () => {
    it('accepts true/false/1/0 in any case', () => {
      for (const on of ['true', 'TRUE', 'True', '1']) {
        assert.deepEqual(settings({ TEMPORAL_TLS: on }).tls, {}, on);
      }
      for (const off of ['false', 'FALSE', 'False', '0']) {
        assert.equal(settings({ TEMPORAL_TLS: off }).tls, undefined, off);
      }
    });
    it('anything else is an error naming the variable and the value', () => {
      for (const bad of ['yes', 'on', 'enabled', ' true', '2', 'tls']) {
        rejects({ TEMPORAL_TLS: bad }, /TEMPORAL_TLS/, new RegExp(JSON.stringify(bad)), /true, false, 1, 0/);
      }
    });
  });

  describe('TLS files and server name', () => {
    it('each of them turns TLS on by itself', () => {
      assert.deepEqual(settings({ TEMPORAL_TLS_SERVER_CA_CERT_PATH: ca }).tls, {
        serverRootCACertificate: Buffer.from(CA),
      });
      assert.deepEqual(settings({ TEMPORAL_TLS_SERVER_NAME: 'temporal.internal' }).tls, {
        serverNameOverride: 'temporal.internal',
      });
      assert.deepEqual(settings({ TEMPORAL_TLS_CLIENT_CERT_PATH: cert, TEMPORAL_TLS_CLIENT_KEY_PATH: key }).tls, {
        clientCertPair: { crt: Buffer.from(CERT), key: Buffer.from(KEY) },
      });
    });
    it('all together, with TEMPORAL_TLS=true and an API key', () => {
      assert.deepEqual(
        settings({
          TEMPORAL_TLS: 'true',
          TEMPORAL_API_KEY: 'k',
          TEMPORAL_TLS_CLIENT_CERT_PATH: cert,
          TEMPORAL_TLS_CLIENT_KEY_PATH: key,
          TEMPORAL_TLS_SERVER_CA_CERT_PATH: ca,
          TEMPORAL_TLS_SERVER_NAME: 'temporal.internal',
        }),
        {
          address: 'localhost:7233',
          namespace: 'default',
          apiKey: 'k',
          tls: {
            serverNameOverride: 'temporal.internal',
            serverRootCACertificate: Buffer.from(CA),
            clientCertPair: { crt: Buffer.from(CERT), key: Buffer.from(KEY) },
          },
        },
      );
    });
    it('with TEMPORAL_TLS=false they are a contradiction, an error naming them', () => {
      for (const [name, value] of [
        ['TEMPORAL_TLS_SERVER_CA_CERT_PATH', ca],
        ['TEMPORAL_TLS_SERVER_NAME', 'temporal.internal'],
        ['TEMPORAL_TLS_CLIENT_CERT_PATH', cert],
        ['TEMPORAL_TLS_CLIENT_CERT_DATA', CERT],
      ]) {
        rejects({ TEMPORAL_TLS: '0', [name]: value }, /TEMPORAL_TLS=false contradicts/, new RegExp(name));
      }
    });
    it('a client certificate without its key, or a key without its certificate, is an error', () => {
      rejects(
        { TEMPORAL_TLS_CLIENT_CERT_PATH: cert },
        /TEMPORAL_TLS_CLIENT_CERT_PATH is set without a client key/,
        /TEMPORAL_TLS_CLIENT_KEY_PATH/,
      );
      rejects(
        { TEMPORAL_TLS: 'true', TEMPORAL_TLS_CLIENT_KEY_PATH: key },
        /TEMPORAL_TLS_CLIENT_KEY_PATH is set without a client certificate/,
        /TEMPORAL_TLS_CLIENT_CERT_PATH/,
      );
    });
    it('a file that cannot be read is an error naming the variable and the path', () => {
      const missing = join(dir, 'no-such.pem');
      for (const [name, env] of [
        ['TEMPORAL_TLS_SERVER_CA_CERT_PATH', { TEMPORAL_TLS_SERVER_CA_CERT_PATH: missing }],
        [
          'TEMPORAL_TLS_CLIENT_CERT_PATH',
          { TEMPORAL_TLS_CLIENT_CERT_PATH: missing, TEMPORAL_TLS_CLIENT_KEY_PATH: key },
        ],
        [
          'TEMPORAL_TLS_CLIENT_KEY_PATH',
          { TEMPORAL_TLS_CLIENT_CERT_PATH: cert, TEMPORAL_TLS_CLIENT_KEY_PATH: missing },
        ],
      ] as const) {
        const message = rejects(env, new RegExp(`${name}: cannot read the .* file`), /ENOENT/);
        assert.ok(message.includes(missing), message);
      }
      const subdir = join(dir, 'a-directory');
      mkdirSync(subdir, { recursive: true });
      const empty = join(dir, 'empty.pem');
      writeFileSync(empty, '');
      rejects({ TEMPORAL_TLS_SERVER_CA_CERT_PATH: subdir }, /TEMPORAL_TLS_SERVER_CA_CERT_PATH: cannot read/);
      rejects(
        { TEMPORAL_TLS_SERVER_CA_CERT_PATH: empty },
        /TEMPORAL_TLS_SERVER_CA_CERT_PATH: the server CA .* is empty/,
      );
    });
    it('every problem is reported at once', () => {
      const message = rejects(
        { TEMPORAL_TLS: 'yes', TEMPORAL_TLS_CLIENT_CERT_PATH: join(dir, 'gone.pem') },
        /TEMPORAL_TLS: "yes"/,
        /TEMPORAL_TLS_CLIENT_CERT_PATH: cannot read/,
        /without a client key/,
      );
      assert.equal(message.split('\n').length, 4, message);
    });
  });

  describe('the Temporal CLI conventions', () => {
    it("the CLI's older names TEMPORAL_TLS_CERT / _KEY / _CA work like the current ones", () => {
      assert.deepEqual(settings({ TEMPORAL_TLS_CERT: cert, TEMPORAL_TLS_KEY: key, TEMPORAL_TLS_CA: ca }).tls, {
        serverRootCACertificate: Buffer.from(CA),
        clientCertPair: { crt: Buffer.from(CERT), key: Buffer.from(KEY) },
      });
      rejects({ TEMPORAL_TLS_CERT: cert }, /TEMPORAL_TLS_CERT is set without a client key/);
      rejects({ TEMPORAL_TLS: 'false', TEMPORAL_TLS_CA: ca }, /TEMPORAL_TLS=false contradicts TEMPORAL_TLS_CA/);
    });
    it('both names for one file: the same path is fine, different paths are an error', () => {
      assert.deepEqual(settings({ TEMPORAL_TLS_SERVER_CA_CERT_PATH: ca, TEMPORAL_TLS_CA: ca }).tls, {
        serverRootCACertificate: Buffer.from(CA),
      });
      rejects(
        { TEMPORAL_TLS_SERVER_CA_CERT_PATH: ca, TEMPORAL_TLS_CA: cert },
        /TEMPORAL_TLS_SERVER_CA_CERT_PATH and TEMPORAL_TLS_CA set different server CA certificates/,
      );
    });
    it('the PEM text itself in the _DATA variables; a file and data for the same thing is an error', () => {
      assert.deepEqual(
        settings({
          TEMPORAL_TLS_CLIENT_CERT_DATA: CERT,
          TEMPORAL_TLS_CLIENT_KEY_DATA: KEY,
          TEMPORAL_TLS_SERVER_CA_CERT_DATA: CA,
        }).tls,
        { serverRootCACertificate: Buffer.from(CA), clientCertPair: { crt: Buffer.from(CERT), key: Buffer.from(KEY) } },
      );
      const message = rejects(
        { TEMPORAL_TLS_CLIENT_CERT_PATH: cert, TEMPORAL_TLS_CLIENT_KEY_PATH: key, TEMPORAL_TLS_CLIENT_KEY_DATA: KEY },
        /TEMPORAL_TLS_CLIENT_KEY_PATH and TEMPORAL_TLS_CLIENT_KEY_DATA both set the client key/,
      );
      assert.ok(!message.includes('PRIVATE KEY'), 'a key never appears in a message');
    });
    it('TEMPORAL_TLS_DISABLE_HOST_VERIFICATION=true is refused (the TypeScript SDK cannot skip verification)', () => {
      rejects(
        { TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: 'true' },
        /TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: not supported/,
      );
      rejects({ TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: 'maybe' }, /TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: "maybe"/);
      assert.equal(settings({ TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: 'false' }).tls, undefined);
    });
  });

  describe('an API key with TEMPORAL_TLS=false', () => {
    it('is refused for any address but the local machine, naming it (the key would travel unencrypted)', () => {
      for (const address of [
        'temporal.example.com:7233',
        '10.0.0.5:7233',
        'ns.acct.tmprl.cloud:7233',
        'localhost.evil:7233',
      ]) {
        const message = rejects(
          { TEMPORAL_API_KEY: 'secret-key', TEMPORAL_TLS: 'false', TEMPORAL_ADDRESS: address },
          /TEMPORAL_API_KEY with TEMPORAL_TLS=false/,
          /localhost, 127\.0\.0\.1 or \[::1\]/,
        );
        assert.ok(message.includes(address), message);
        assert.ok(!message.includes('secret-key'), 'the API key never appears in a message');
      }
    });
    it('is plaintext with the key to localhost, 127.0.0.1 and [::1] (the default address too)', () => {
      for (const address of [
        undefined,
        'localhost:7233',
        'LOCALHOST:7233',
        '127.0.0.1:7233',
        '[::1]:7233',
        'localhost',
      ]) {
        const s = settings({ TEMPORAL_API_KEY: 'k', TEMPORAL_TLS: 'false', TEMPORAL_ADDRESS: address });
        assert.equal(s.tls, undefined, String(address));
        assert.equal(s.apiKey, 'k');
      }
    });
    it('connecting with such settings really is plaintext (the SDK would turn TLS on for an API key)', async function () {
      this.timeout(60_000);
      // The test server listens on 127.0.0.1 without TLS and ignores the Authorization header.
      const s = settings({ TEMPORAL_ADDRESS: testEnv().address, TEMPORAL_API_KEY: 'k', TEMPORAL_TLS: 'false' });
      const client = await connectClient(s);
      try {
        await client.workflowService.getSystemInfo({});
      } finally {
        await client.connection.close();
      }
      const worker = await connectWorker(s);
      await worker.close();
    });
  });
});
