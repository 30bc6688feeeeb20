export {
  AdbDriver,
  adbTransport,
  createAdbDriver,
  parseAdbDevices,
  type AdbDeviceLine,
  type AdbDriverOptions,
} from './adb';
export { createLocalDriver, defaultLocalDeviceId, LocalDriver, type LocalDriverOptions } from './local';
export { createSimDriver, SimDriver, type SimDriverOptions } from './sim';
export { DriverError, type DeviceDriver } from './types';
export { toValidId } from './util';
