/**
 * The workflows' payload converter (and the control plane's clients'): the default one, which
 * also writes the name `asSignal` gave a signal's argument into its payload (`fleet-signal`, which
 * the codec binds its tag to), and marks an object decoded from a payload the codec authenticated
 * with what it may be taken as (authenticity.ts). Loaded in the sandbox through
 * `payloadConverterPath` (control-plane/worker.ts), and by the control plane's clients
 * (control-plane/connection.ts).
 */
import { defaultPayloadConverter, type Payload, type PayloadConverter } from '@temporalio/common';
import { AUTHENTIC, authenticAs, SIGNAL_METADATA, signalNameGiven } from './authenticity';

class MarkingPayloadConverter implements PayloadConverter {
  toPayload<T>(value: T): Payload {
    const payload = defaultPayloadConverter.toPayload(value);
    const name = signalNameGiven(value);
    if (name === undefined) return payload;
    return {
      ...payload,
      metadata: { ...payload.metadata, [SIGNAL_METADATA]: Uint8Array.from(name, (c) => c.charCodeAt(0)) /* ASCII */ },
    };
  }
  fromPayload<T>(payload: Payload): T {
    const value = defaultPayloadConverter.fromPayload<T>(payload);
    const as = authenticAs(payload);
    if (as !== undefined && typeof value === 'object' && value !== null) {
      Object.defineProperty(value, AUTHENTIC, { value: as, enumerable: false });
    }
    return value;
  }
}

export const payloadConverter = new MarkingPayloadConverter();
