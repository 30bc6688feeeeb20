/** The signal tag codec alone (pure logic; the forged-signal scenarios run in identity.test.ts). */
import assert from 'node:assert/strict';
import type { Payload } from '@temporalio/common';
import {
  createSignalAuthCodec,
  parseSignalKeys,
  SignalKeyError,
  signalKeysFromEnv,
} from '../control-plane/signal-auth';

const K1 = 'a1'.repeat(32);
const K2 = Buffer.alloc(32, 2).toString('base64');
const ctx = (workflowId: string) => ({ type: 'workflow' as const, namespace: 'ns', workflowId });
const json = (v: unknown): Payload => ({
  metadata: { encoding: Buffer.from('json/plain') },
  data: Buffer.from(JSON.stringify(v)),
});
const marked = (p: Payload) => Buffer.from(p.metadata?.['fleet-auth'] ?? []).toString() === '1';

describe('signal tags (control-plane/signal-auth.ts)', () => {
  it('keys: hex or base64 of 32+ bytes, comma-separated, the first signs; short ones are refused by position', () => {
    assert.equal(parseSignalKeys(undefined), undefined);
    assert.equal(parseSignalKeys(' , '), undefined);
    const keys = parseSignalKeys(`${K1}, ${K2}`)!;
    assert.equal(keys.all.length, 2);
    assert.deepEqual(keys.current, Buffer.from(K1, 'hex'));
    assert.throws(
      () => parseSignalKeys(`${K1},abcd`),
      (e: unknown) => e instanceof SignalKeyError && /key 2 has 2 bytes/.test(e.message),
    );
    assert.throws(() => signalKeysFromEnv({ FLEET_SIGNAL_KEYS_FILE: '/nonexistent/key' }), SignalKeyError);
    assert.equal(signalKeysFromEnv({}, '/nonexistent/fallback'), undefined);
  });

  it('a tag verifies for the workflow it was made for, under any listed key, and nowhere else', async () => {
    const signer = createSignalAuthCodec(parseSignalKeys(K1));
    const [tagged] = await signer.encode([json({ a: 1 })], ctx('task/x'));
    assert.ok(tagged.metadata?.['fleet-mac']);
    assert.ok(marked((await signer.decode([tagged], ctx('task/x')))[0]));
    assert.ok(!marked((await signer.decode([tagged], ctx('task/y')))[0]), 'moved to another workflow');
    const tampered = { ...tagged, data: Buffer.from(JSON.stringify({ a: 2 })) };
    assert.ok(!marked((await signer.decode([tampered], ctx('task/x')))[0]), 'changed data');
    // After a rotation the old key still verifies what it signed; a stranger's key does not.
    const rotated = createSignalAuthCodec(parseSignalKeys(`${K2},${K1}`));
    assert.ok(marked((await rotated.decode([tagged], ctx('task/x')))[0]));
    const stranger = createSignalAuthCodec(parseSignalKeys(K2));
    assert.ok(!marked((await stranger.decode([tagged], ctx('task/x')))[0]));
  });

  it("a sender's own fleet-auth mark is removed; activity payloads are left alone; no keys marks every workflow payload", async () => {
    const codec = createSignalAuthCodec(parseSignalKeys(K1));
    const forged = json({ a: 1 });
    forged.metadata!['fleet-auth'] = Buffer.from('1');
    const [decoded] = await codec.decode([forged], ctx('task/x'));
    assert.ok(!marked(decoded));
    const activity = { type: 'activity' as const, namespace: 'ns', isLocal: false };
    const [plain] = await codec.encode([json({ a: 1 })], activity);
    assert.equal(plain.metadata?.['fleet-mac'], undefined);
    const off = createSignalAuthCodec(undefined);
    assert.ok(marked((await off.decode([json({ a: 1 })], ctx('task/x')))[0]));
    assert.equal((await off.encode([json({ a: 1 })], ctx('task/x')))[0].metadata?.['fleet-mac'], undefined);
  });
});
