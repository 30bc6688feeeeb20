/**
 * Signals authenticated as the control plane's. A signal carries no sender, and Temporal lets any
 * credential of the namespace signal any workflow, so a host's credential could otherwise forge
 * what the control plane's workflows tell one another (an assignment, another host's device list).
 *
 * Every process of the control plane (its worker, REST, the scripts) shares a secret key
 * (`FLEET_SIGNAL_KEYS`), which hosts never get. This codec adds an HMAC-SHA256 tag to every payload
 * it encodes for a workflow, bound to that workflow's namespace and id. On decode it marks the
 * payloads whose tag is valid (metadata `fleet-auth`, which it first removes from every payload,
 * so a sender cannot set it itself), and the workflows' payload converter
 * (`workflows/payload-converter.ts`) marks the values decoded from them. The workflows take a
 * signal only with that mark (`workflows/authenticity.ts`). The key never reaches the sandbox,
 * a history, a log or a response; the tags in histories are no secret.
 *
 * Without keys the codec marks every workflow payload: authentication is off, as before it
 * existed. Turning it on is one-way: a history replays the same only with a key that verifies
 * its tags, so keep retired keys in the list (the first one signs; every one verifies).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import type { Payload, PayloadCodec, SerializationContext } from '@temporalio/common';
import { AUTH_METADATA, carriesAuthMark } from '../workflows/authenticity';

const MAC_METADATA = 'fleet-mac';
const DOMAIN = 'fleet.signal-mac.v1';
const te = new TextEncoder();
const ONE = te.encode('1');

export class SignalKeyError extends Error {
  override name = 'SignalKeyError';
}

export interface SignalKeys {
  /** Signs; verifies too. */
  current: Buffer;
  /** Every key that verifies (current first, then retired ones). */
  all: Buffer[];
}

/**
 * `FLEET_SIGNAL_KEYS`: comma-separated keys, each 64 hex digits or base64 of at least 32 bytes;
 * the first signs. Empty or unset: none (authentication off).
 */
export function parseSignalKeys(text: string | undefined, from = 'FLEET_SIGNAL_KEYS'): SignalKeys | undefined {
  const parts = (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  if (parts.length === 0) return undefined;
  const all = parts.map((p, i) => {
    const key = /^[0-9a-fA-F]+$/.test(p) && p.length % 2 === 0 ? Buffer.from(p, 'hex') : Buffer.from(p, 'base64');
    if (key.length < 32) {
      throw new SignalKeyError(`${from}: key ${i + 1} has ${key.length} bytes; each needs at least 32 (64 hex digits)`);
    }
    return key;
  });
  return { current: all[0], all };
}

/**
 * `FLEET_SIGNAL_KEYS`, else the file `FLEET_SIGNAL_KEYS_FILE` names (same format), else
 * `fallbackFile` when it exists (the repository's scripts: `.data/signal.key` of `npm start`).
 */
export function signalKeysFromEnv(env: NodeJS.ProcessEnv = process.env, fallbackFile?: string): SignalKeys | undefined {
  if (env.FLEET_SIGNAL_KEYS !== undefined && env.FLEET_SIGNAL_KEYS.trim() !== '')
    return parseSignalKeys(env.FLEET_SIGNAL_KEYS);
  const file = env.FLEET_SIGNAL_KEYS_FILE || (fallbackFile && existsSync(fallbackFile) ? fallbackFile : undefined);
  if (!file) return undefined;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new SignalKeyError(`FLEET_SIGNAL_KEYS_FILE: cannot read ${file}: ${(err as Error).message}`);
  }
  const keys = parseSignalKeys(text.replace(/\s+/g, ','), file);
  if (!keys) throw new SignalKeyError(`FLEET_SIGNAL_KEYS_FILE: ${file} holds no key`);
  return keys;
}

function tag(key: Buffer, ctx: { namespace: string; workflowId: string }, p: Payload): Buffer {
  const h = createHmac('sha256', key);
  for (const part of [DOMAIN, ctx.namespace, ctx.workflowId, Buffer.from(p.metadata?.encoding ?? []).toString()]) {
    h.update(`${Buffer.byteLength(part)}:${part};`);
  }
  h.update(Buffer.from(p.data ?? []));
  return h.digest();
}

const withoutMeta = (p: Payload, ...names: string[]): Payload => {
  if (!p.metadata || !names.some((n) => n in p.metadata!)) return p;
  const metadata = { ...p.metadata };
  for (const n of names) delete metadata[n];
  return { ...p, metadata };
};

const BRAND = Symbol.for('fleet.signal-auth-codec');

export function createSignalAuthCodec(keys: SignalKeys | undefined): PayloadCodec {
  const codec: PayloadCodec & { [BRAND]: true } = {
    [BRAND]: true,
    async encode(payloads: Payload[], context?: SerializationContext) {
      if (!keys || context?.type !== 'workflow') return payloads;
      return payloads.map((raw) => {
        const p = withoutMeta(raw, MAC_METADATA, AUTH_METADATA);
        return { ...p, metadata: { ...p.metadata, [MAC_METADATA]: tag(keys.current, context, p) } };
      });
    },
    async decode(payloads: Payload[], context?: SerializationContext) {
      return payloads.map((raw) => {
        const p = withoutMeta(raw, AUTH_METADATA);
        if (context?.type !== 'workflow') return p;
        let authentic = !keys;
        const mac = p.metadata?.[MAC_METADATA];
        if (keys && mac && mac.length === 32) {
          const bare = withoutMeta(p, MAC_METADATA);
          authentic = keys.all.some((k) => timingSafeEqual(tag(k, context, bare), Buffer.from(mac)));
        }
        return authentic ? { ...p, metadata: { ...p.metadata, [AUTH_METADATA]: ONE } } : p;
      });
    },
  };
  return codec;
}

/**
 * For a client that reads a workflow's history itself (the submit's admission): whether the first
 * payload carries the control plane's valid tag for that workflow. A client without this codec
 * cannot tell, and takes every payload as before.
 */
export async function taggedForWorkflow(
  codecs: PayloadCodec[],
  context: { namespace: string; workflowId: string },
  payloads: Payload[] | null | undefined,
): Promise<boolean> {
  if (!codecs.some((c) => (c as { [BRAND]?: boolean })[BRAND])) return true;
  let ps = payloads ?? [];
  for (const c of [...codecs].reverse()) ps = await c.decode(ps, { type: 'workflow', ...context });
  return ps.length > 0 && carriesAuthMark(ps[0]);
}
