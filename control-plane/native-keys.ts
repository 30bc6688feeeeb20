/**
 * Ed25519 signing and X25519 key agreement with Node's native crypto (OpenSSL), for code that runs
 * outside workflows: the host agent (signing every report and snapshot, opening sealed payloads) and
 * the control plane's sealing codec. Same keys, same bytes as noble's pure-JS versions (Ed25519
 * signatures are deterministic), at a fraction of the CPU. Workflows cannot use this (sandbox) and
 * verify with workflows/identity.ts.
 */
import {
  createPrivateKey,
  createPublicKey,
  diffieHellman,
  generateKeyPairSync,
  sign,
  type KeyObject,
} from 'node:crypto';

const PKCS8 = {
  ed25519: Buffer.from('302e020100300506032b657004220420', 'hex'),
  x25519: Buffer.from('302e020100300506032b656e04220420', 'hex'),
};
const SPKI_X25519 = Buffer.from('302a300506032b656e032100', 'hex');

/** Decoded private keys by (kind, hex); a host holds two, the cache stays tiny. */
const privateKeys = new Map<string, KeyObject>();
/** Decoded recipient public keys (one per host the control plane seals to), bounded. */
const publicKeys = new Map<string, KeyObject>();
const PUBLIC_CACHE_MAX = 4096;

function privateKey(kind: 'ed25519' | 'x25519', hex: string): KeyObject {
  const id = `${kind}:${hex}`;
  let k = privateKeys.get(id);
  if (!k) {
    const raw = Buffer.from(hex, 'hex');
    if (raw.length !== 32) throw new Error(`${kind} private key must be 32 bytes`);
    k = createPrivateKey({ key: Buffer.concat([PKCS8[kind], raw]), format: 'der', type: 'pkcs8' });
    privateKeys.set(id, k);
  }
  return k;
}

function x25519Public(raw: Uint8Array): KeyObject {
  const hex = Buffer.from(raw).toString('hex');
  let k = publicKeys.get(hex);
  if (!k) {
    if (raw.length !== 32) throw new Error('x25519 public key must be 32 bytes');
    k = createPublicKey({ key: Buffer.concat([SPKI_X25519, raw]), format: 'der', type: 'spki' });
    if (publicKeys.size >= PUBLIC_CACHE_MAX) publicKeys.delete(publicKeys.keys().next().value!);
    publicKeys.set(hex, k);
  }
  return k;
}

const rawPublic = (k: KeyObject): Uint8Array =>
  new Uint8Array((createPublicKey(k).export({ format: 'der', type: 'spki' }) as Buffer).subarray(-32));

/** Ed25519 signature (64 bytes) of msg with a 32-byte private key given as hex. */
export function ed25519Sign(msg: Uint8Array, privateKeyHex: string): Uint8Array {
  return new Uint8Array(sign(null, msg, privateKey('ed25519', privateKeyHex)));
}

/** X25519 shared secret between our private key (hex) and their public key (raw bytes). */
export function x25519Shared(privateKeyHex: string, theirPublic: Uint8Array): Uint8Array {
  return new Uint8Array(
    diffieHellman({ privateKey: privateKey('x25519', privateKeyHex), publicKey: x25519Public(theirPublic) }),
  );
}

const ownPublic = new Map<string, Uint8Array>();

/** X25519 public key (raw bytes) of a private key given as hex. */
export function x25519PublicOf(privateKeyHex: string): Uint8Array {
  let p = ownPublic.get(privateKeyHex);
  if (!p) {
    p = rawPublic(privateKey('x25519', privateKeyHex));
    ownPublic.set(privateKeyHex, p);
  }
  return p;
}

/** A fresh ephemeral X25519 key pair and its shared secret with the recipient's public key. */
export function x25519Ephemeral(recipientPublic: Uint8Array): { ephemeralPublic: Uint8Array; shared: Uint8Array } {
  const { privateKey: eph, publicKey } = generateKeyPairSync('x25519');
  const shared = new Uint8Array(diffieHellman({ privateKey: eph, publicKey: x25519Public(recipientPublic) }));
  return {
    ephemeralPublic: new Uint8Array((publicKey.export({ format: 'der', type: 'spki' }) as Buffer).subarray(-32)),
    shared,
  };
}
