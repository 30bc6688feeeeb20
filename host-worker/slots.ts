/**
 * Activity slots that follow the host's device count. A worker's slot count is fixed when it is
 * created, but a host's devices are not: a lab machine may start before its phones are plugged in.
 * With slots fixed at start-up, assignments to the devices found later would wait in the queue
 * until their ack deadline, and so would the host's liveness session. This supplier allows
 * `limit()` permits at a time, read again on every reservation and whenever `changed()` is called.
 */
import type { ActivitySlotInfo, CustomSlotSupplier, SlotPermit } from '@temporalio/worker';

export interface DeviceSlots {
  supplier: CustomSlotSupplier<ActivitySlotInfo>;
  /** Call after the device count changed: waiting pollers may now get a slot. */
  changed(): void;
  /** Permits out (reserved by pollers or running an activity). */
  readonly held: number;
}

export function deviceSlots(limit: () => number): DeviceSlots {
  let held = 0;
  const waiting: Array<() => void> = [];
  const grant = () => {
    while (waiting.length > 0 && held < limit()) {
      held++;
      waiting.shift()!();
    }
  };
  return {
    get held() {
      return held;
    },
    changed: grant,
    supplier: {
      type: 'custom',
      reserveSlot(_ctx, abortSignal): Promise<SlotPermit> {
        // An aborted reservation rejects with the signal's own reason: the SDK logs anything else.
        if (abortSignal.aborted) return Promise.reject(abortSignal.reason);
        if (waiting.length === 0 && held < limit()) {
          held++;
          return Promise.resolve({});
        }
        return new Promise<SlotPermit>((resolve, reject) => {
          const take = () => {
            abortSignal.removeEventListener('abort', onAbort);
            resolve({});
          };
          const onAbort = () => {
            const i = waiting.indexOf(take);
            if (i >= 0) waiting.splice(i, 1);
            reject(abortSignal.reason);
          };
          waiting.push(take);
          abortSignal.addEventListener('abort', onAbort, { once: true });
        });
      },
      tryReserveSlot(): SlotPermit | null {
        if (waiting.length > 0 || held >= limit()) return null;
        held++;
        return {};
      },
      markSlotUsed() {},
      releaseSlot() {
        held = Math.max(0, held - 1);
        grant();
      },
    },
  };
}
