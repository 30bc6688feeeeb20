/**
 * Host identity, the part that runs inside workflows: canonical messages and Ed25519 signature
 * checks (pure JS, deterministic, sandbox-safe). Hosts sign what they send with their private key;
 * workflows verify with the public key the operator enrolled. Public keys only ever live here.
 */
import { ed25519 } from '@noble/curves/ed25519';
import { hexToBytes } from '@noble/curves/abstract/utils';

export interface HostPublicKeys {
  /** Ed25519 public key (hex) that verifies what the host signs. */
  signing: string;
  /** X25519 public key (hex) that seals what is sent to the host. */
  box: string;
}

export const SignDomain = {
  Snapshot: 'fleet.snapshot.v1',
  Report: 'fleet.report.v1',
  Result: 'fleet.result.v1',
} as const;
export type SignDomainName = (typeof SignDomain)[keyof typeof SignDomain];

/** JSON with object keys sorted at every level, so both sides sign/verify the same bytes. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

export function signedBytes(domain: SignDomainName, body: unknown): Uint8Array {
  return new TextEncoder().encode(`${domain}\n${canonicalJson(body)}`);
}

const HEX = /^[0-9a-f]*$/;

export function verifySignature(domain: SignDomainName, body: unknown, sigHex: unknown, publicKeyHex: string): boolean {
  if (typeof sigHex !== 'string' || sigHex.length !== 128 || !HEX.test(sigHex)) return false;
  if (publicKeyHex.length !== 64 || !HEX.test(publicKeyHex)) return false;
  try {
    return ed25519.verify(hexToBytes(sigHex), signedBytes(domain, body), hexToBytes(publicKeyHex));
  } catch {
    return false;
  }
}

export function validPublicKeys(keys: HostPublicKeys | undefined): keys is HostPublicKeys {
  return !!keys && /^[0-9a-f]{64}$/.test(keys.signing) && /^[0-9a-f]{64}$/.test(keys.box);
}
