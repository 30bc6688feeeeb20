/**
 * Which signals the control plane sent (control-plane/signal-auth.ts has the whole scheme).
 *
 * A sender names what it sends as a signal (`asSignal`): the payload converter writes the name into
 * the payload's metadata (`fleet-signal`), and the codec tags only payloads so named, binding the
 * tag to that name as well as to the namespace and workflow id. Workflow inputs, query answers and
 * activity payloads carry no tag, so none of them can be sent back as a signal, and a signal cannot
 * be sent again under another signal's name. On receipt the codec marks what verified (metadata
 * `fleet-auth`) and the converter marks the object decoded from it with a symbol JSON cannot carry.
 */
import { log, patched, setHandler, type SignalDefinition } from '@temporalio/workflow';

export const AUTH_METADATA = 'fleet-auth';
export const SIGNAL_METADATA = 'fleet-signal';
export const AUTHENTIC = Symbol.for('fleet.authentic');
const SIGNAL_NAME = Symbol.for('fleet.signal-name');

/**
 * What the codec's mark (metadata `fleet-auth`) says:
 * - `*`: authentication is off (no keys, or `FLEET_SIGNAL_AUTH=sign-only`): take it under any name;
 * - `=`: its tag verified for the signal named in `fleet-signal`;
 * - `1`: a tag of the first scheme (session 15's build), which named no signal.
 */
export type AuthMark = '*' | '=' | '1';
export const MARK_ANY: AuthMark = '*';
export const MARK_NAMED: AuthMark = '=';
export const MARK_UNNAMED: AuthMark = '1';

type Meta = { metadata?: Record<string, Uint8Array | null | undefined> | null };

/** The codec's mark on a payload, if any. */
export function authMark(payload: Meta): AuthMark | undefined {
  const mark = payload.metadata?.[AUTH_METADATA];
  if (!mark || mark.length !== 1) return undefined;
  const c = String.fromCharCode(mark[0]);
  return c === '*' || c === '=' || c === '1' ? c : undefined;
}

/** The signal name a payload's metadata gives (`fleet-signal`), if any. */
export function signalNameOf(payload: Meta): string | undefined {
  const name = payload.metadata?.[SIGNAL_METADATA];
  return name && name.length > 0 ? String.fromCharCode(...name) : undefined; // signal names are ASCII
}

/**
 * What the receiver may take a payload as: `'*'` any signal; a name, that signal only; `'1'` a
 * tag of the first scheme; undefined: not the control plane's.
 */
export function authenticAs(payload: Meta): string | undefined {
  const mark = authMark(payload);
  if (mark === MARK_ANY) return '*';
  if (mark === MARK_UNNAMED) return MARK_UNNAMED;
  if (mark === MARK_NAMED) return signalNameOf(payload);
  return undefined;
}

/** Whether a payload was the control plane's signal of this name (as a workflow that enforces takes it). */
export function carriesAuthMark(payload: Meta, signal: string): boolean {
  const as = authenticAs(payload);
  return as === '*' || as === signal;
}

/**
 * The argument of a signal, named for the codec: `handle.signal(def, asSignal(def, arg))`. Only so
 * named does the control plane's codec tag it (and then only for this signal's name). The JSON
 * sent is the argument's own.
 */
export function asSignal<T extends object>(
  def: SignalDefinition<[T]> | SignalDefinition<[T?]> | { name: string },
  arg: T,
): T {
  const copy = (Array.isArray(arg) ? [...arg] : { ...arg }) as T;
  Object.defineProperty(copy, SIGNAL_NAME, { value: def.name, enumerable: false });
  return copy;
}

/** The name `asSignal` gave a value (the payload converter writes it into the payload). */
export function signalNameGiven(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const name = (value as { [SIGNAL_NAME]?: unknown })[SIGNAL_NAME];
  return typeof name === 'string' ? name : undefined;
}

/** What the payload converter marked a decoded value with: see `authenticAs`. */
function authenticityOf(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const as = (value as { [AUTHENTIC]?: unknown })[AUTHENTIC];
  return typeof as === 'string' ? as : undefined;
}

/** Whether a decoded value came from the control plane as this signal (or update) by name. */
export function isAuthentic(value: unknown, name: string): boolean {
  const as = authenticityOf(value);
  return as === '*' || as === name;
}

/** The patch that turns refusal on: a run from before it took every signal, and replays so. */
export const SIGNAL_AUTH_PATCH = 'signal-auth-v1';
/** The patch from which a tag of the first scheme (no signal name) is refused: runs from before took it. */
export const SIGNAL_NAMES_PATCH = 'signal-auth-v2-named';

/**
 * Whether a workflow takes this signal: yes when the control plane sent it under this name.
 * Otherwise no, and the refusal is logged, except in a run recorded before refusals existed
 * (`patched` is only asked here, so a run that meets no forged signal records no marker and costs
 * nothing). A tag of the first scheme (no name) is refused from this build on, and taken where a
 * run recorded before this build took it.
 */
export function fromControlPlane(arg: unknown, signal: string): boolean {
  const as = authenticityOf(arg);
  if (as === '*' || as === signal) return true;
  if (as === MARK_UNNAMED) {
    if (!patched(SIGNAL_NAMES_PATCH)) return true;
    log.warn('ignored a signal tagged without a signal name (a build before named tags, or a payload reused)', {
      signal,
    });
    return false;
  }
  if (as !== undefined) {
    // A valid tag for another signal of this workflow: a payload sent again under another name.
    log.warn('ignored a signal tagged for another signal name', { signal, taggedFor: as });
    return false;
  }
  if (!patched(SIGNAL_AUTH_PATCH)) return true;
  log.warn('ignored a signal the control plane did not send (no valid FLEET_SIGNAL_KEYS tag)', { signal });
  return false;
}

/** `setHandler` for a signal the control plane sends: one from anyone else is refused and logged. */
export function onSignal<Args extends unknown[]>(def: SignalDefinition<Args>, handler: (...args: Args) => void): void {
  setHandler(def, (...args: Args) => {
    if (fromControlPlane(args[0], def.name)) handler(...args);
  });
}
