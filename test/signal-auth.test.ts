/** The signal tag codec alone (pure logic; the forged-signal scenarios run in identity.test.ts). */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import type { Payload } from '@temporalio/common';
import { asSignal, authMark, carriesAuthMark } from '../workflows/authenticity';
import { payloadConverter } from '../workflows/payload-converter';
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
/** A named signal's payload, as the payload converter writes it. */
const signal = (name: string, v: unknown): Payload => {
  const p = json(v);
  p.metadata!['fleet-signal'] = Buffer.from(name);
  return p;
};
const takenAs = (p: Payload, name: string) => carriesAuthMark(p, name);

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

  it('a tag verifies for the workflow and the signal name it was made for, under any listed key, and nowhere else', async () => {
    const signer = createSignalAuthCodec(parseSignalKeys(K1));
    const [tagged] = await signer.encode([signal('assignment', { a: 1 })], ctx('task/x'));
    assert.ok(tagged.metadata?.['fleet-mac']);
    assert.ok(takenAs((await signer.decode([tagged], ctx('task/x')))[0], 'assignment'));
    assert.ok(!takenAs((await signer.decode([tagged], ctx('task/y')))[0], 'assignment'), 'moved to another workflow');
    const tampered = { ...tagged, data: Buffer.from(JSON.stringify({ a: 2 })) };
    assert.ok(!takenAs((await signer.decode([tampered], ctx('task/x')))[0], 'assignment'), 'changed data');
    // Sent again under another signal's name: the tag does not verify for it (nor for any name).
    const renamed = { ...tagged, metadata: { ...tagged.metadata, 'fleet-signal': Buffer.from('dequeueTask') } };
    const [asOther] = await signer.decode([renamed], ctx('task/x'));
    assert.ok(!takenAs(asOther, 'dequeueTask'));
    assert.equal(authMark(asOther), undefined, 'no mark at all');
    // After a rotation the old key still verifies what it signed; a stranger's key does not.
    const rotated = createSignalAuthCodec(parseSignalKeys(`${K2},${K1}`));
    assert.ok(takenAs((await rotated.decode([tagged], ctx('task/x')))[0], 'assignment'));
    const stranger = createSignalAuthCodec(parseSignalKeys(K2));
    assert.ok(!takenAs((await stranger.decode([tagged], ctx('task/x')))[0], 'assignment'));
  });

  it('only a named signal argument gets a tag: a workflow input or query answer cannot pass for a signal', async () => {
    const signer = createSignalAuthCodec(parseSignalKeys(K1));
    const [input] = await signer.encode([json({ taskId: 't' })], ctx('task/x'));
    assert.equal(input.metadata?.['fleet-mac'], undefined);
    const [decoded] = await signer.decode([input], ctx('task/x'));
    assert.equal(authMark(decoded), undefined);
    // The payload converter writes the name asSignal gave; the value's JSON is its own.
    const p = payloadConverter.toPayload(asSignal({ name: 'dequeueTask' }, { taskId: 't' }));
    assert.equal(Buffer.from(p.metadata!['fleet-signal']!).toString(), 'dequeueTask');
    assert.deepEqual(JSON.parse(Buffer.from(p.data!).toString()), { taskId: 't' });
    assert.equal(payloadConverter.toPayload({ taskId: 't' }).metadata?.['fleet-signal'], undefined);
  });

  it('a tag of the first scheme (no signal name) verifies only as such: taken only where a run took it before', async () => {
    const keys = parseSignalKeys(K1)!;
    const p = json({ drained: false });
    const mac = createHmac('sha256', keys.current);
    for (const part of ['fleet.signal-mac.v1', 'ns', 'host/h', 'json/plain'])
      mac.update(`${Buffer.byteLength(part)}:${part};`);
    mac.update(Buffer.from(p.data!));
    const v1 = { ...p, metadata: { ...p.metadata, 'fleet-mac': mac.digest() } };
    const [decoded] = await createSignalAuthCodec(keys).decode([v1], ctx('host/h'));
    assert.equal(authMark(decoded), '1');
    assert.ok(!takenAs(decoded, 'setHostDrain'));
    // sign-only (the first phase of the upgrade from that build): taken; still nothing untagged.
    const signOnly = createSignalAuthCodec({ ...keys, mode: 'sign-only' });
    assert.ok(takenAs((await signOnly.decode([v1], ctx('host/h')))[0], 'setHostDrain'));
    assert.equal(authMark((await signOnly.decode([p], ctx('host/h')))[0]), undefined);
    assert.equal(authMark((await signOnly.decode([v1], ctx('host/other')))[0]), undefined);
  });

  it("a sender's own fleet-auth mark is removed; activity payloads are left alone; no keys or sign-only marks every workflow payload", async () => {
    const codec = createSignalAuthCodec(parseSignalKeys(K1));
    for (const m of ['1', '*', '=']) {
      const forged = signal('assignment', { a: 1 });
      forged.metadata!['fleet-auth'] = Buffer.from(m);
      const [decoded] = await codec.decode([forged], ctx('task/x'));
      assert.equal(authMark(decoded), undefined, m);
    }
    const activity = { type: 'activity' as const, namespace: 'ns', isLocal: false };
    const [plain] = await codec.encode([signal('assignment', { a: 1 })], activity);
    assert.equal(plain.metadata?.['fleet-mac'], undefined);
    const off = createSignalAuthCodec(undefined);
    assert.ok(takenAs((await off.decode([json({ a: 1 })], ctx('task/x')))[0], 'anything'));
    assert.equal(
      (await off.encode([signal('assignment', { a: 1 })], ctx('task/x')))[0].metadata?.['fleet-mac'],
      undefined,
    );
    // The upgrade's first phase tags what it sends; accept-untagged takes what it gets.
    const phase1 = createSignalAuthCodec(
      signalKeysFromEnv({ FLEET_SIGNAL_KEYS: K1, FLEET_SIGNAL_AUTH: 'accept-untagged' })!,
    );
    assert.ok((await phase1.encode([signal('assignment', { a: 1 })], ctx('task/x')))[0].metadata?.['fleet-mac']);
    assert.ok(takenAs((await phase1.decode([json({ a: 1 })], ctx('task/x')))[0], 'assignment'));
    assert.equal(signalKeysFromEnv({ FLEET_SIGNAL_KEYS: K1 })!.mode, 'enforce');
    assert.throws(() => signalKeysFromEnv({ FLEET_SIGNAL_KEYS: K1, FLEET_SIGNAL_AUTH: 'off' }), SignalKeyError);
  });
});
