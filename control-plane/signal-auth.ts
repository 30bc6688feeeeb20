/**
 * Signals authenticated as the control plane's. A signal carries no sender, and Temporal lets any
 * credential of the namespace signal any workflow, so a host's credential could otherwise forge
 * what the control plane's workflows tell one another (an assignment, another host's device list).
 *
 * Every process of the control plane (its worker, REST, the scripts) shares a secret key
 * (`FLEET_SIGNAL_KEYS`), which hosts never get. A sender names each signal's argument
 * (`asSignal`, workflows/authenticity.ts); the payload converter writes the name into the payload
 * (metadata `fleet-signal`), and this codec adds an HMAC-SHA256 tag to every payload so named that
 * it encodes for a workflow, bound to the workflow's namespace and id and to the signal's name.
 * Nothing else gets a tag: a workflow input, a query answer or a continue-as-new input cannot be
 * sent to a workflow as a signal, nor a signal under another signal's name.
 *
 * On decode it marks the payloads whose tag verifies (metadata `fleet-auth`, which it first removes
 * from every payload, so a sender cannot set it itself), and the workflows' payload converter
 * (`workflows/payload-converter.ts`) marks the values decoded from them. The workflows take a
 * signal only with a mark for its name. The key never reaches the sandbox, a history, a log or a
 * response; the tags in histories are no secret.
 *
 * Without keys the codec marks every workflow payload: authentication is off, as before it
 * existed. `FLEET_SIGNAL_AUTH` (`SignalAuthMode`) takes more, for the first phase of an upgrade
 * while processes of an older build still run. Turning refusal on is
 * one-way: a history replays the same only with a key that verifies its tags, so keep retired keys
 * in the list (the first one signs; every one verifies).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import type { Payload, PayloadCodec, SerializationContext } from '@temporalio/common';
import {
  AUTH_METADATA,
  authMark,
  type AuthMark,
  carriesAuthMark,
  MARK_ANY,
  MARK_NAMED,
  MARK_UNNAMED,
  signalNameOf,
} from '../workflows/authenticity';

const MAC_METADATA = 'fleet-mac';
/** The first scheme (session 15): bound to namespace and workflow, not to a signal name. Verified only. */
const DOMAIN_V1 = 'fleet.signal-mac.v1';
const DOMAIN = 'fleet.signal-mac.v2';
const te = new TextEncoder();

export class SignalKeyError extends Error {
  override name = 'SignalKeyError';
}

export interface SignalKeys {
  /** Signs; verifies too. */
  current: Buffer;
  /** Every key that verifies (current first, then retired ones). */
  all: Buffer[];
  /** What the workflows take (`FLEET_SIGNAL_AUTH`, see `SignalAuthMode`). */
  mode: SignalAuthMode;
}

/**
 * What the workflows take, besides a tag for the signal's own name:
 * - `enforce` (the default): nothing else;
 * - `sign-only`: also a valid tag of the first scheme (no name), which processes of the build
 *   before named tags send: the first phase of that upgrade;
 * - `accept-untagged`: also a signal without a valid tag: the first phase of an upgrade from a
 *   build without keys. Only then: a run that has refused an untagged signal replays
 *   differently if it took one in this mode.
 */
export type SignalAuthMode = 'enforce' | 'sign-only' | 'accept-untagged';
const MODES: SignalAuthMode[] = ['enforce', 'sign-only', 'accept-untagged'];

/** `FLEET_SIGNAL_AUTH`: `enforce` (the default), `sign-only` or `accept-untagged`. */
export function parseSignalAuthMode(text: string | undefined): SignalAuthMode {
  const v = (text ?? '').trim() || 'enforce';
  if ((MODES as string[]).includes(v)) return v as SignalAuthMode;
  throw new SignalKeyError(`FLEET_SIGNAL_AUTH: "${v}" is none of ${MODES.join(', ')}`);
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
  return { current: all[0], all, mode: 'enforce' };
}

/**
 * `FLEET_SIGNAL_KEYS`, else the file `FLEET_SIGNAL_KEYS_FILE` names (same format), else
 * `fallbackFile` when it exists (the repository's scripts: `.data/signal.key` of `npm start`).
 */
export function signalKeysFromEnv(env: NodeJS.ProcessEnv = process.env, fallbackFile?: string): SignalKeys | undefined {
  const keys = keysFromEnv(env, fallbackFile);
  const mode = parseSignalAuthMode(env.FLEET_SIGNAL_AUTH);
  return keys && { ...keys, mode };
}

function keysFromEnv(env: NodeJS.ProcessEnv, fallbackFile: string | undefined): SignalKeys | undefined {
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

/** `signal`: the name the tag is bound to; undefined, the first scheme's tag (no name). */
function tag(
  key: Buffer,
  ctx: { namespace: string; workflowId: string },
  p: Payload,
  signal: string | undefined,
): Buffer {
  const h = createHmac('sha256', key);
  const encoding = Buffer.from(p.metadata?.encoding ?? []).toString();
  const parts =
    signal === undefined
      ? [DOMAIN_V1, ctx.namespace, ctx.workflowId, encoding]
      : [DOMAIN, ctx.namespace, ctx.workflowId, signal, encoding];
  for (const part of parts) {
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
  const mark = (p: Payload, m: AuthMark): Payload => ({
    ...p,
    metadata: { ...p.metadata, [AUTH_METADATA]: te.encode(m) },
  });
  const codec: PayloadCodec & { [BRAND]: true } = {
    [BRAND]: true,
    async encode(payloads: Payload[], context?: SerializationContext) {
      if (!keys || context?.type !== 'workflow') return payloads;
      return payloads.map((raw) => {
        const p = withoutMeta(raw, MAC_METADATA, AUTH_METADATA);
        const signal = signalNameOf(p);
        // Only a signal's argument, named by its sender: nothing else can pass for a signal.
        if (signal === undefined) return p;
        return { ...p, metadata: { ...p.metadata, [MAC_METADATA]: tag(keys.current, context, p, signal) } };
      });
    },
    async decode(payloads: Payload[], context?: SerializationContext) {
      return payloads.map((raw) => {
        const p = withoutMeta(raw, AUTH_METADATA);
        if (context?.type !== 'workflow') return p;
        if (!keys) return mark(p, MARK_ANY);
        const untagged = keys.mode === 'accept-untagged' ? mark(p, MARK_ANY) : p;
        const mac = p.metadata?.[MAC_METADATA];
        if (!mac || mac.length !== 32) return untagged;
        const bare = withoutMeta(p, MAC_METADATA);
        const signal = signalNameOf(p);
        const verifies = keys.all.some((k) => timingSafeEqual(tag(k, context, bare, signal), Buffer.from(mac)));
        if (!verifies) return untagged;
        if (signal !== undefined) return mark(p, MARK_NAMED);
        // The first scheme's tag: taken, under any name, while the build before still runs.
        return mark(p, keys.mode === 'enforce' ? MARK_UNNAMED : MARK_ANY);
      });
    },
  };
  return codec;
}

/**
 * For a client that reads a workflow's history itself (the submit's admission, the audit): how the
 * first payload of a signal of this name in that workflow's history stands. `taken`: the control
 * plane's for this name (or authentication is off); `unnamed`: a tag of the first scheme (taken
 * only by runs from before named tags); `other`: a valid tag for another signal's name (refused);
 * `untagged` (taken only by runs from before refusals). A client without this codec cannot
 * tell, and takes every payload as before.
 */
export async function signalTagFor(
  codecs: PayloadCodec[],
  context: { namespace: string; workflowId: string },
  signal: string,
  payloads: Payload[] | null | undefined,
): Promise<'taken' | 'unnamed' | 'other' | 'untagged'> {
  if (!codecs.some((c) => (c as { [BRAND]?: boolean })[BRAND])) return 'taken';
  let ps = payloads ?? [];
  for (const c of [...codecs].reverse()) ps = await c.decode(ps, { type: 'workflow', ...context });
  if (ps.length === 0) return 'untagged';
  if (carriesAuthMark(ps[0], signal)) return 'taken';
  const mark = authMark(ps[0]);
  return mark === MARK_UNNAMED ? 'unnamed' : mark === MARK_NAMED ? 'other' : 'untagged';
}

/** Whether a history event is the marker of this patch (its id as a JSON string: not a later "-v10"). */
export function recordsPatch(
  e: {
    markerRecordedEventAttributes?: {
      markerName?: string | null;
      details?: Record<string, { payloads?: Payload[] | null }> | null;
    } | null;
  },
  patchId: string,
): boolean {
  const m = e.markerRecordedEventAttributes;
  if (m?.markerName !== 'core_patch') return false;
  return Object.values(m.details ?? {}).some((d) =>
    (d.payloads ?? []).some((p) =>
      Buffer.from(p.data ?? [])
        .toString()
        .includes(JSON.stringify(patchId)),
    ),
  );
}
