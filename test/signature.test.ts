/**
 * Unit: the workflows' Ed25519 check (precomputed key points, variable-time) accepts and refuses
 * exactly what the reference noble `ed25519.verify` does, including malleated and foreign signatures.
 */
import assert from 'node:assert/strict';
import { ed25519 } from '@noble/curves/ed25519';
import { bytesToHex } from '@noble/curves/abstract/utils';
import { sha512 } from '@noble/hashes/sha512';
import fc from 'fast-check';
import { verifyEd25519 } from '../workflows/identity';
import { ed25519Sign, x25519Ephemeral, x25519PublicOf, x25519Shared } from '../control-plane/native-keys';
import { x25519 } from '@noble/curves/ed25519';

const keys = Array.from({ length: 3 }, () => {
  const priv = ed25519.utils.randomPrivateKey();
  return { priv, pub: ed25519.getPublicKey(priv) };
});

function both(sig: Uint8Array, msg: Uint8Array, pub: Uint8Array): [boolean, boolean] {
  let reference: boolean;
  try {
    reference = ed25519.verify(sig, msg, pub);
  } catch {
    reference = false;
  }
  let ours: boolean;
  try {
    ours = verifyEd25519(sig, msg, bytesToHex(pub));
  } catch {
    ours = false;
  }
  return [ours, reference];
}

describe('signature check (unit)', () => {
  it('agrees with noble ed25519.verify on valid, tampered and foreign signatures', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 300 }),
        fc.nat({ max: 2 }),
        fc.nat({ max: 2 }),
        fc.nat({ max: 63 }),
        fc.nat({ max: 7 }),
        fc.constantFrom('none', 'flip-sig', 'flip-msg', 'other-key'),
        (msg, signer, verifier, byte, bit, tamper) => {
          const sig = ed25519.sign(msg, keys[signer].priv);
          const m = msg.slice();
          const s = sig.slice();
          let pub = keys[signer].pub;
          if (tamper === 'flip-sig') s[byte] ^= 1 << bit;
          if (tamper === 'flip-msg' && m.length > 0) m[byte % m.length] ^= 1 << bit;
          if (tamper === 'other-key') pub = keys[verifier].pub;
          const [ours, reference] = both(s, m, pub);
          assert.equal(ours, reference);
          if (tamper === 'none') assert.equal(ours, true);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('refuses S + n (the malleated twin of a valid signature) like the reference', () => {
    const msg = new TextEncoder().encode('fleet.report.v1\n{}');
    const sig = ed25519.sign(msg, keys[0].priv);
    let s = 0n;
    for (let i = 63; i >= 32; i--) s = (s << 8n) | BigInt(sig[i]);
    s += ed25519.CURVE.n;
    const twin = sig.slice();
    for (let i = 32; i < 64; i++) {
      twin[i] = Number(s & 0xffn);
      s >>= 8n;
    }
    assert.deepEqual(both(twin, msg, keys[0].pub), [false, false]);
  });
  it('hashes the canonical re-encoding of R, as the reference does (non-canonical R accepted by ZIP-215)', () => {
    // R = identity (nonce 0), written with the x sign bit set: "01 00..00 80" is a non-canonical
    // encoding of the point whose canonical form is "01 00..00". S = k*a with k over the canonical R.
    const { scalar, pointBytes } = ed25519.utils.getExtendedPublicKey(keys[1].priv);
    const msg = new TextEncoder().encode('fleet.result.v1\n{"x":1}');
    const canonicalR = new Uint8Array(32);
    canonicalR[0] = 1;
    const nonCanonicalR = canonicalR.slice();
    nonCanonicalR[31] = 0x80;
    const le = (b: Uint8Array) => b.reduceRight((x, v) => (x << 8n) | BigInt(v), 0n);
    const n = ed25519.CURVE.n;
    const k = le(sha512(new Uint8Array([...canonicalR, ...pointBytes, ...msg]))) % n;
    let s = (k * scalar) % n;
    const sig = new Uint8Array(64);
    sig.set(nonCanonicalR, 0);
    for (let i = 32; i < 64; i++) {
      sig[i] = Number(s & 0xffn);
      s >>= 8n;
    }
    assert.deepEqual(both(sig, msg, keys[1].pub), [true, true]);
  });
  it('native Ed25519 signing and X25519 agreement give the same bytes as noble', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.uint8Array({ maxLength: 200 }),
        (a, b, msg) => {
          const aHex = bytesToHex(a);
          assert.deepEqual(ed25519Sign(msg, aHex), ed25519.sign(msg, a));
          assert.deepEqual(x25519PublicOf(aHex), x25519.getPublicKey(a));
          const bPub = x25519.getPublicKey(b);
          assert.deepEqual(x25519Shared(aHex, bPub), x25519.getSharedSecret(a, bPub));
        },
      ),
      { numRuns: 50 },
    );
    const recipient = ed25519.utils.randomPrivateKey();
    const { ephemeralPublic, shared } = x25519Ephemeral(x25519.getPublicKey(recipient));
    assert.deepEqual(shared, x25519.getSharedSecret(recipient, ephemeralPublic));
  });
});
