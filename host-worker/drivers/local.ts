/**
 * The host itself as one device (a build box, a browser farm node). Its id defaults to the
 * hostname made into a valid id; its optional health check is an argv command whose non-zero exit
 * (or timeout, or failure to start) marks the device unhealthy until a later check passes.
 */
import { hostname } from 'node:os';
import { ID_RULE, isValidId } from '../../workflows/ids';
import type { DeviceSnapshot } from '../../workflows/types';
import type { DeviceDriver } from './types';
import { driverProcessEnv, execArgv, toValidId } from './util';

export interface LocalDriverOptions {
  /** Default: os.hostname(), sanitised to the id rule (see `defaultLocalDeviceId`). */
  deviceId?: string;
  /** Default 'local'. */
  driverType?: string;
  tags?: string[];
  healthCheck?: {
    /** argv, run without a shell. */
    command: string[];
    /** Default 10 000 ms. */
    timeoutMs?: number;
  };
}

/** `os.hostname()` as a valid id: invalid characters become '-', 'local' when nothing is left. */
export function defaultLocalDeviceId(name: string = hostname()): string {
  return toValidId(name, 'local');
}

export class LocalDriver implements DeviceDriver {
  readonly type = 'local';
  readonly deviceId: string;
  private readonly driverType: string;
  private readonly tags: string[];
  private readonly healthCheck?: { command: string[]; timeoutMs: number };

  constructor(opts: LocalDriverOptions = {}) {
    this.deviceId = opts.deviceId ?? defaultLocalDeviceId();
    if (!isValidId(this.deviceId)) throw new Error(`local driver: invalid deviceId "${this.deviceId}": ${ID_RULE}`);
    this.driverType = opts.driverType ?? 'local';
    this.tags = [...(opts.tags ?? [])];
    if (opts.healthCheck) {
      if (opts.healthCheck.command.length === 0) throw new Error('local driver: healthCheck.command is empty');
      this.healthCheck = { command: [...opts.healthCheck.command], timeoutMs: opts.healthCheck.timeoutMs ?? 10_000 };
    }
  }

  async discover(): Promise<DeviceSnapshot[]> {
    let healthy = true;
    if (this.healthCheck) {
      healthy = (
        await execArgv(this.healthCheck.command, {
          timeoutMs: this.healthCheck.timeoutMs,
          maxBuffer: 64 * 1024,
          env: driverProcessEnv(),
        })
      ).ok;
    }
    return [
      {
        deviceId: this.deviceId,
        driverType: this.driverType,
        tags: [...this.tags],
        state: 'idle',
        health: healthy ? 'good' : 'unhealthy',
      },
    ];
  }
}

export function createLocalDriver(opts: LocalDriverOptions = {}): LocalDriver {
  return new LocalDriver(opts);
}
