/** The simulated driver: a configured device list, with a per-device health override for tests and drills. */
import type { DeviceHealth, DeviceSnapshot } from '../../workflows/types';
import { simDevices, type SimDeviceSpec } from '../sim';
import type { DeviceDriver } from './types';

export interface SimDriverOptions {
  devices: SimDeviceSpec[];
}

export class SimDriver implements DeviceDriver {
  readonly type = 'sim';
  private readonly specs: SimDeviceSpec[];
  private readonly healthOverrides = new Map<string, DeviceHealth>();

  constructor(opts: SimDriverOptions) {
    this.specs = opts.devices.map((d) => ({ ...d, tags: [...(d.tags ?? [])] }));
  }

  /** Overrides one device's configured health until cleared (`undefined`). */
  setHealth(deviceId: string, health: DeviceHealth | undefined): void {
    if (!this.specs.some((s) => s.deviceId === deviceId)) throw new Error(`unknown sim device "${deviceId}"`);
    if (health === undefined) this.healthOverrides.delete(deviceId);
    else this.healthOverrides.set(deviceId, health);
  }

  /** Configured devices; a configured 'busy' state reads as 'idle' (only the host knows what is busy). */
  discover(): Promise<DeviceSnapshot[]> {
    return Promise.resolve(
      simDevices(this.specs).map((d) => ({
        ...d,
        tags: [...d.tags],
        state: d.state === 'offline' ? 'offline' : 'idle',
        health: this.healthOverrides.get(d.deviceId) ?? d.health,
      })),
    );
  }
}

export function createSimDriver(opts: SimDriverOptions): SimDriver {
  return new SimDriver(opts);
}
