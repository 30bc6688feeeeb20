/**
 * Which signals the control plane sent (control-plane/signal-auth.ts has the whole scheme). The
 * codec marks a payload whose tag verifies with metadata `fleet-auth`; the payload converter
 * (payload-converter.ts) marks the object decoded from it with a symbol that JSON cannot carry.
 */
import { log, patched, setHandler, type SignalDefinition } from '@temporalio/workflow';

export const AUTH_METADATA = 'fleet-auth';
export const AUTHENTIC = Symbol.for('fleet.authentic');

/** Whether a payload carries the codec's mark (the metadata value `1`). */
export function carriesAuthMark(payload: { metadata?: Record<string, Uint8Array | null | undefined> | null }): boolean {
  const mark = payload.metadata?.[AUTH_METADATA];
  return !!mark && mark.length === 1 && mark[0] === 0x31;
}

export function isAuthentic(value: unknown): boolean {
  return typeof value === 'object' && value !== null && (value as { [AUTHENTIC]?: boolean })[AUTHENTIC] === true;
}

/** The patch that turns refusal on: a run from before it took every signal, and replays so. */
export const SIGNAL_AUTH_PATCH = 'signal-auth-v1';

/**
 * Whether a workflow takes this signal: yes when the control plane sent it. Otherwise no, and the
 * refusal is logged, except in a run recorded before refusals existed (`patched` is only asked
 * here, so a run that meets no forged signal records no marker and costs nothing).
 */
export function fromControlPlane(arg: unknown, signal: string): boolean {
  if (isAuthentic(arg)) return true;
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
