/**
 * A host's credential: an Ed25519 signing key (everything the host sends is signed) and an X25519
 * box key (task payloads are sealed to it). The secret stays in a 0600 file on the host; the
 * control plane only ever sees the public halves (enrolled by an operator).
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { bytesToHex, hexToBytes } from '@noble/curves/abstract/utils';
import { ed25519, x25519 } from '@noble/curves/ed25519';
import { ed25519Sign } from '../control-plane/native-keys';
import { isValidId } from '../workflows/ids';
import { signedBytes, type HostPublicKeys, type SignDomainName } from '../workflows/identity';

export interface HostCredential {
  hostId: string;
  /** Ed25519 private key (hex). */
  signingKey: string;
  /** X25519 private key (hex). */
  boxKey: string;
}

export function generateHostCredential(hostId: string): HostCredential {
  if (!isValidId(hostId)) throw new Error(`invalid host id "${hostId}"`);
  return { hostId, signingKey: bytesToHex(randomBytes(32)), boxKey: bytesToHex(randomBytes(32)) };
}

export function publicKeys(cred: HostCredential): HostPublicKeys {
  return {
    signing: bytesToHex(ed25519.getPublicKey(hexToBytes(cred.signingKey))),
    box: bytesToHex(x25519.getPublicKey(hexToBytes(cred.boxKey))),
  };
}

export function sign(cred: HostCredential, domain: SignDomainName, body: unknown): string {
  // Native Ed25519 (same signature as noble's; RFC 8032 signatures are deterministic).
  return bytesToHex(ed25519Sign(signedBytes(domain, body), cred.signingKey));
}

export function saveHostCredential(path: string, cred: HostCredential): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileSync(path, JSON.stringify(cred, null, 2) + '\n', { mode: 0o600 });
  chmodSync(path, 0o600);
}

export function loadHostCredential(path: string): HostCredential {
  let raw: Partial<HostCredential>;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`cannot read host credential ${path}: ${(err as Error).message}`, { cause: err });
  }
  const hex64 = /^[0-9a-f]{64}$/;
  if (!isValidId(raw.hostId) || !hex64.test(raw.signingKey ?? '') || !hex64.test(raw.boxKey ?? '')) {
    throw new Error(`host credential ${path} is malformed (expected hostId, signingKey, boxKey)`);
  }
  return raw as HostCredential;
}

/** The credential file given to enrol cannot be used as it is (not a credential, another host's). */
export class CredentialFileError extends Error {
  override name = 'CredentialFileError';
}

/**
 * Enrols the credential in `out` through `enrol` (its public keys only): an existing file of this
 * host as it is, or, when there is none or with `force`, a new credential. A new one is written
 * beside `out` first and moved into place only once enrolled, so a refused enrolment leaves the
 * credential in use as it was, and enrolled keys always have a file.
 */
export async function enrolCredentialFile<T>(
  out: string,
  hostId: string,
  force: boolean,
  enrol: (keys: HostPublicKeys) => Promise<T>,
): Promise<{ result: T; fresh: boolean }> {
  const fresh = force || !existsSync(out);
  let credential: HostCredential;
  if (fresh) credential = generateHostCredential(hostId);
  else {
    try {
      credential = loadHostCredential(out);
    } catch (err) {
      throw new CredentialFileError(
        `${out} exists and is not a host credential (${(err as Error).message}); pass --force to replace it`,
      );
    }
    if (credential.hostId !== hostId)
      throw new CredentialFileError(`${out} holds the credential of host ${credential.hostId}, not ${hostId}`);
  }
  const pending = fresh ? `${out}.${randomBytes(4).toString('hex')}.tmp` : undefined;
  if (pending) saveHostCredential(pending, credential);
  try {
    const result = await enrol(publicKeys(credential));
    if (pending) renameSync(pending, out);
    return { result, fresh };
  } catch (err) {
    if (pending) rmSync(pending, { force: true });
    throw err;
  }
}
