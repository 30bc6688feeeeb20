/**
 * Payloads sealed to one host: a payload codec that encrypts any payload whose JSON starts with
 * `{"sealedFor":{...}}` to that host's X25519 box key (ephemeral ECDH, HKDF-SHA256, AES-256-GCM).
 * The control plane holds no private key, so it can seal but not open; only the addressed host's
 * worker (with its credential) can open, so a worker polling another host's queue learns nothing.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { bytesToHex, hexToBytes } from '@noble/curves/abstract/utils';
import { x25519Ephemeral, x25519PublicOf, x25519Shared } from './native-keys';

export const SEALED_ENCODING = 'binary/fleet-sealed-x25519-aes256gcm';
const MARKER = Buffer.from('{"sealedFor":');
const te = new TextEncoder();

import type { Sealed } from '../workflows/types';

function key(shared: Uint8Array, ephemeralPub: Uint8Array, recipientPub: Uint8Array): Buffer {
  const salt = Buffer.concat([ephemeralPub, recipientPub]);
  return Buffer.from(hkdfSync('sha256', shared, salt, 'fleet.sealed-payload.v1', 32));
}

export function seal(payload: Payload, recipientBoxHex: string, hostId: string): Payload {
  const recipient = hexToBytes(recipientBoxHex);
  const { ephemeralPublic: ephemeralPub, shared } = x25519Ephemeral(recipient);
  const k = key(shared, ephemeralPub, recipient);
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', k, iv);
  const inner = Buffer.from(
    JSON.stringify({ m: encodeMetadata(payload.metadata), d: Buffer.from(payload.data ?? []).toString('base64') }),
  );
  const sealed = Buffer.concat([cipher.update(inner), cipher.final(), cipher.getAuthTag()]);
  return {
    metadata: {
      encoding: te.encode(SEALED_ENCODING),
      'fleet-sealed-for': te.encode(hostId),
      'fleet-ephemeral': te.encode(bytesToHex(ephemeralPub)),
      'fleet-iv': te.encode(iv.toString('hex')),
    },
    data: sealed,
  };
}

export function open(payload: Payload, boxKeyHex: string): Payload {
  const meta = payload.metadata ?? {};
  const text = (k: string) => Buffer.from(meta[k] ?? []).toString();
  const ephemeralPub = hexToBytes(text('fleet-ephemeral'));
  const k = key(x25519Shared(boxKeyHex, ephemeralPub), ephemeralPub, x25519PublicOf(boxKeyHex));
  const data = Buffer.from(payload.data ?? []);
  const decipher = createDecipheriv('aes-256-gcm', k, Buffer.from(text('fleet-iv'), 'hex'));
  decipher.setAuthTag(data.subarray(data.length - 16));
  const inner = JSON.parse(
    Buffer.concat([decipher.update(data.subarray(0, data.length - 16)), decipher.final()]).toString(),
  );
  return { metadata: decodeMetadata(inner.m), data: Buffer.from(inner.d, 'base64') };
}

function encodeMetadata(m: Payload['metadata']): Record<string, string> {
  return Object.fromEntries(Object.entries(m ?? {}).map(([k, v]) => [k, Buffer.from(v ?? []).toString('base64')]));
}
function decodeMetadata(m: Record<string, string>): Payload['metadata'] {
  return Object.fromEntries(Object.entries(m).map(([k, v]) => [k, Buffer.from(v, 'base64')]));
}

const isSealed = (p: Payload) => Buffer.from(p.metadata?.encoding ?? []).toString() === SEALED_ENCODING;

/** Control plane: seals marked payloads, passes everything else through; cannot open sealed ones. */
export function createSealingCodec(): PayloadCodec {
  return {
    async encode(payloads) {
      return payloads.map((p) => {
        const data = Buffer.from(p.data ?? []);
        if (!data.subarray(0, MARKER.length).equals(MARKER)) return p;
        const { sealedFor } = JSON.parse(data.toString()) as Sealed<unknown>;
        return seal(p, sealedFor.box, sealedFor.hostId);
      });
    },
    async decode(payloads) {
      return payloads;
    },
  };
}

/** Host: opens payloads sealed to this host; a payload sealed to another host fails to decode. */
export function createHostCodec(hostId: string, boxKeyHex: string): PayloadCodec {
  return {
    async encode(payloads) {
      return payloads;
    },
    async decode(payloads) {
      return payloads.map((p) => {
        if (!isSealed(p)) return p;
        const to = Buffer.from(p.metadata?.['fleet-sealed-for'] ?? []).toString();
        if (to !== hostId) throw new Error(`payload sealed for host ${to}, not for ${hostId}`);
        return open(p, boxKeyHex);
      });
    },
  };
}
