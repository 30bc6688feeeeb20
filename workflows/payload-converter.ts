/**
 * The workflows' payload converter: the default one, which also marks an object decoded from a
 * payload the control plane's codec authenticated (authenticity.ts). Loaded in the sandbox through
 * `payloadConverterPath` (control-plane/worker.ts).
 */
import { defaultPayloadConverter, type Payload, type PayloadConverter } from '@temporalio/common';
import { AUTHENTIC, carriesAuthMark } from './authenticity';

class MarkingPayloadConverter implements PayloadConverter {
  toPayload<T>(value: T): Payload {
    return defaultPayloadConverter.toPayload(value);
  }
  fromPayload<T>(payload: Payload): T {
    const value = defaultPayloadConverter.fromPayload<T>(payload);
    if (carriesAuthMark(payload) && typeof value === 'object' && value !== null) {
      Object.defineProperty(value, AUTHENTIC, { value: true, enumerable: false });
    }
    return value;
  }
}

export const payloadConverter = new MarkingPayloadConverter();
