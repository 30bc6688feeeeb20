/**
 * Android devices attached through adb. The device list comes from `adb devices -l`, and every
 * device adb reports as usable ('device') is health-checked with `adb -s <serial> shell echo ok`.
 *
 * Device ids: the adb serial when it is a valid id (USB serials, `emulator-5554`, `10.0.0.7:5555`,
 * mDNS names), otherwise a sanitised form with a hash suffix (see `serialOf` to map back).
 *
 * Tags (in this order, duplicates removed):
 *   - `model:<model>`, `product:<product>`, `device:<device>` from `adb devices -l`;
 *   - `transport:usb` (a `usb:` locator), `transport:network` (`host:port` or mDNS
 *     `._adb-tls-connect._tcp` serials), `transport:emulator` (`emulator-<port>`), else `transport:unknown`;
 *   - the driver's `tags`, then `extraTags[serial]`.
 * `transport_id` is not a tag: adb renumbers it on every reconnect and tags are matched by tasks.
 *
 * State and health by adb state:
 *   - `device`: state 'idle'; health 'good' when the shell check prints `ok` within
 *     `healthTimeoutMs`, else 'unhealthy' (checked again on every discover());
 *   - `bootloader`, `recovery`, `sideload`, `rescue`: state 'offline', health 'maintenance'
 *     (someone is flashing or repairing it on purpose);
 *   - anything else (`offline`, `unauthorized`, `no permissions`, `authorizing`, `connecting`, …):
 *     state 'offline', health 'unhealthy' (adb cannot reach it; usually an operator must act).
 */
import type { DeviceSnapshot } from '../../workflows/types';
import { DriverError, type DeviceDriver } from './types';
import { driverProcessEnv, execArgv, mapLimit, toValidId } from './util';

export interface AdbDriverOptions {
  /** The adb executable (a path, or a name looked up in PATH). Default 'adb'. */
  adbPath?: string;
  /** driverType of every device. Default 'android'. */
  driverType?: string;
  /** Timeout of `adb devices -l`. Default 10 000 ms. */
  listTimeoutMs?: number;
  /** Timeout of one device's health check. Default 5 000 ms. */
  healthTimeoutMs?: number;
  /** Health checks in flight at once. Default 8. */
  healthConcurrency?: number;
  /** Only these serials are reported (all when absent). */
  allowSerials?: string[];
  /** Tags on every device. */
  tags?: string[];
  /** Extra tags per serial. */
  extraTags?: Record<string, string[]>;
}

export interface AdbDeviceLine {
  serial: string;
  /** adb's state word(s): 'device', 'offline', 'unauthorized', 'no permissions', … */
  state: string;
  /** The `key:value` properties (`usb`, `product`, `model`, `device`, `transport_id`). */
  props: Record<string, string>;
}

const PROP_KEYS = new Set(['usb', 'product', 'model', 'device', 'transport_id']);
const MAINTENANCE_STATES = new Set(['bootloader', 'recovery', 'sideload', 'rescue']);

/** Parses `adb devices -l` output; the header, blank lines and `* daemon …` notices are skipped. */
export function parseAdbDevices(output: string): AdbDeviceLine[] {
  const devices: AdbDeviceLine[] = [];
  for (const raw of output.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith('*') || line.startsWith('List of devices') || line.startsWith('adb server')) continue;
    const m = /^(\S+)\s+(.*)$/.exec(line);
    if (!m) continue;
    const [, serial, rest] = m;
    const tokens = rest.split(/\s+/);
    // 'no permissions' is two words followed by free text (a hint with a URL); every other state is one word.
    const state = tokens[0] === 'no' && tokens[1] === 'permissions' ? 'no permissions' : tokens[0];
    const props: Record<string, string> = {};
    for (const token of tokens) {
      const i = token.indexOf(':');
      if (i <= 0) continue;
      const key = token.slice(0, i);
      if (PROP_KEYS.has(key) && !(key in props)) props[key] = token.slice(i + 1);
    }
    devices.push({ serial, state, props });
  }
  return devices;
}

export function adbTransport(d: AdbDeviceLine): 'usb' | 'network' | 'emulator' | 'unknown' {
  if (/^emulator-\d+$/.test(d.serial)) return 'emulator';
  if (d.props.usb !== undefined) return 'usb';
  if (/^[^\s]+:\d+$/.test(d.serial) || d.serial.includes('._adb-tls-connect._tcp')) return 'network';
  return 'unknown';
}

export class AdbDriver implements DeviceDriver {
  readonly type = 'adb';
  private readonly adbPath: string;
  private readonly driverType: string;
  private readonly listTimeoutMs: number;
  private readonly healthTimeoutMs: number;
  private readonly healthConcurrency: number;
  private readonly allow?: ReadonlySet<string>;
  private readonly tags: string[];
  private readonly extraTags: Record<string, string[]>;
  private serials = new Map<string, string>();

  constructor(opts: AdbDriverOptions = {}) {
    this.adbPath = opts.adbPath ?? 'adb';
    this.driverType = opts.driverType ?? 'android';
    this.listTimeoutMs = opts.listTimeoutMs ?? 10_000;
    this.healthTimeoutMs = opts.healthTimeoutMs ?? 5_000;
    this.healthConcurrency = opts.healthConcurrency ?? 8;
    this.allow = opts.allowSerials ? new Set(opts.allowSerials) : undefined;
    this.tags = [...(opts.tags ?? [])];
    this.extraTags = { ...(opts.extraTags ?? {}) };
  }

  /** The adb serial of a device id from the last discover() (they differ only for serials that are not valid ids). */
  serialOf(deviceId: string): string | undefined {
    return this.serials.get(deviceId);
  }

  async discover(): Promise<DeviceSnapshot[]> {
    const listed = await execArgv([this.adbPath, 'devices', '-l'], {
      timeoutMs: this.listTimeoutMs,
      env: driverProcessEnv(),
    });
    if (!listed.ok) {
      if (listed.failure === 'not_found') {
        throw new DriverError(`adb executable not found: "${this.adbPath}" (install platform-tools or set adbPath)`);
      }
      const detail = (listed.stderr || listed.stdout || listed.error?.message || '').trim().slice(0, 500);
      throw new DriverError(
        `"${this.adbPath} devices -l" failed (${listed.failure ?? 'error'})${detail ? `: ${detail}` : ''}`,
      );
    }
    const lines = parseAdbDevices(listed.stdout).filter((d) => !this.allow || this.allow.has(d.serial));
    const serials = new Map<string, string>();
    const devices = await mapLimit(lines, this.healthConcurrency, async (d): Promise<DeviceSnapshot> => {
      const deviceId = toValidId(d.serial, 'adb-device', true);
      serials.set(deviceId, d.serial);
      const base = { deviceId, driverType: this.driverType, tags: this.tagsOf(d) };
      if (d.state === 'device') {
        return { ...base, state: 'idle', health: (await this.healthy(d.serial)) ? 'good' : 'unhealthy' };
      }
      return { ...base, state: 'offline', health: MAINTENANCE_STATES.has(d.state) ? 'maintenance' : 'unhealthy' };
    });
    this.serials = serials;
    return devices;
  }

  private tagsOf(d: AdbDeviceLine): string[] {
    const tags: string[] = [];
    for (const key of ['model', 'product', 'device'] as const) {
      if (d.props[key]) tags.push(`${key}:${d.props[key]}`);
    }
    tags.push(`transport:${adbTransport(d)}`, ...this.tags, ...(this.extraTags[d.serial] ?? []));
    return [...new Set(tags)];
  }

  private async healthy(serial: string): Promise<boolean> {
    const r = await execArgv([this.adbPath, '-s', serial, 'shell', 'echo', 'ok'], {
      timeoutMs: this.healthTimeoutMs,
      maxBuffer: 64 * 1024,
      env: driverProcessEnv(),
    });
    // Old adb versions exit 0 even when the shell command failed: the output must be right too.
    return r.ok && r.stdout.trim() === 'ok';
  }
}

export function createAdbDriver(opts: AdbDriverOptions = {}): AdbDriver {
  return new AdbDriver(opts);
}
