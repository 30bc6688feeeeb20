/**
 * Device drivers: each one discovers the devices this host can run work on and health-checks them.
 * The host calls `discover()` on every snapshot tick and reports the complete list it returns.
 */
import type { DeviceSnapshot } from '../../workflows/types';

export interface DeviceDriver {
  /** The driver's configuration type ('sim', 'adb', 'local'). */
  readonly type: string;
  /**
   * The complete current device list. Every device carries the health found by this call's own
   * health check ('good' | 'unhealthy' | 'maintenance') and state 'idle' or 'offline' (the host
   * overlays 'busy' itself). A device that failed its check is 'unhealthy' until a later call's
   * check passes. Rejects with a `DriverError` when the device list itself cannot be read; the
   * caller decides whether to keep its previous list.
   */
  discover(): Promise<DeviceSnapshot[]>;
}

/** The driver could not list devices at all (e.g. the adb executable is missing). */
export class DriverError extends Error {
  override name = 'DriverError';
}
