/** Device drivers: sim, local (real health-check commands) and adb (against test/fixtures/fake-adb). */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import {
  AdbDriver,
  createSimDriver,
  defaultLocalDeviceId,
  DriverError,
  LocalDriver,
  parseAdbDevices,
  toValidId,
} from '../../host-worker/drivers';
import { groupAlive } from '../../host-worker/process-group';
import { execArgv } from '../../host-worker/drivers/util';
import { isValidId } from '../../workflows/ids';
import type { DeviceSnapshot } from '../../workflows/types';
import { node, processAlive as running, tempDirs } from './helpers';

const FAKE_ADB = resolve(__dirname, '../fixtures/fake-adb');

const byId = (devices: DeviceSnapshot[]) => new Map(devices.map((d) => [d.deviceId, d]));

describe('host drivers', () => {
  const tmp = tempDirs();
  after(() => tmp.cleanup());

  describe('sim driver', () => {
    it('reports the configured devices with defaults, idle unless configured offline', async () => {
      const driver = createSimDriver({
        devices: [
          { deviceId: 'a', driverType: 'android', tags: ['api34'] },
          { deviceId: 'b', state: 'busy', pool: 'p2' },
          { deviceId: 'c', state: 'offline', health: 'maintenance' },
        ],
      });
      assert.equal(driver.type, 'sim');
      assert.deepEqual(await driver.discover(), [
        { deviceId: 'a', driverType: 'android', tags: ['api34'], state: 'idle', health: 'good' },
        { deviceId: 'b', driverType: 'sim', tags: [], state: 'idle', health: 'good', pool: 'p2' },
        { deviceId: 'c', driverType: 'sim', tags: [], state: 'offline', health: 'maintenance' },
      ]);
    });

    it('applies a per-device health override until it is cleared', async () => {
      const driver = createSimDriver({ devices: [{ deviceId: 'a' }, { deviceId: 'b' }] });
      driver.setHealth('a', 'unhealthy');
      let devices = byId(await driver.discover());
      assert.equal(devices.get('a')!.health, 'unhealthy');
      assert.equal(devices.get('b')!.health, 'good');
      driver.setHealth('a', undefined);
      devices = byId(await driver.discover());
      assert.equal(devices.get('a')!.health, 'good');
      assert.throws(() => driver.setHealth('nope', 'good'), /unknown sim device "nope"/);
    });

    it('hands out copies: a caller mutating a snapshot does not change the next one', async () => {
      const driver = createSimDriver({ devices: [{ deviceId: 'a', tags: ['x'] }] });
      const [first] = await driver.discover();
      first.tags.push('mutated');
      first.health = 'unhealthy';
      const [second] = await driver.discover();
      assert.deepEqual(second.tags, ['x']);
      assert.equal(second.health, 'good');
    });
  });

  describe('device ids', () => {
    it('keeps valid ids and sanitises the rest to the id rule', () => {
      assert.equal(toValidId('lab-host.example.com', 'fallback'), 'lab-host.example.com');
      assert.equal(toValidId('My Mac (2)', 'fallback'), 'My-Mac-2-');
      assert.equal(toValidId('__x', 'fallback'), 'x');
      assert.equal(toValidId('', 'fallback'), 'fallback');
      assert.equal(toValidId('!!!', 'fallback'), 'fallback');
      assert.equal(toValidId('a'.repeat(200), 'fallback'), 'a'.repeat(128));
      for (const raw of ['My Mac (2)', 'ü', 'a/b', '-']) {
        const id = toValidId(raw, 'fb', true);
        assert.ok(isValidId(id), `${raw} -> ${id}`);
      }
      // With disambiguation two inputs that sanitise alike stay distinct.
      assert.notEqual(toValidId('a b', 'fb', true), toValidId('a/b', 'fb', true));
    });

    it('derives the local device id from the hostname', () => {
      assert.equal(defaultLocalDeviceId('build box #1'), 'build-box-1');
      assert.equal(defaultLocalDeviceId('###'), 'local');
      assert.ok(isValidId(defaultLocalDeviceId()));
      assert.equal(defaultLocalDeviceId(), toValidId(hostname(), 'local'));
    });
  });

  describe('local driver', () => {
    it('reports the host as one idle device with configured id, type and tags', async () => {
      const driver = new LocalDriver({ deviceId: 'box-1', driverType: 'linux', tags: ['gpu', 'x86_64'] });
      assert.equal(driver.type, 'local');
      assert.deepEqual(await driver.discover(), [
        { deviceId: 'box-1', driverType: 'linux', tags: ['gpu', 'x86_64'], state: 'idle', health: 'good' },
      ]);
      const [d] = await new LocalDriver().discover();
      assert.equal(d.deviceId, defaultLocalDeviceId());
      assert.equal(d.driverType, 'local');
    });

    it('rejects an invalid configured device id and an empty health command', () => {
      assert.throws(() => new LocalDriver({ deviceId: 'bad id' }), /invalid deviceId "bad id"/);
      assert.throws(() => new LocalDriver({ healthCheck: { command: [] } }), /healthCheck.command is empty/);
    });

    it('is unhealthy while the health command fails, and good again once it passes', async () => {
      const flag = join(tmp.make(), 'healthy');
      const driver = new LocalDriver({
        deviceId: 'box',
        healthCheck: { command: [node, '-e', 'process.exit(require("fs").existsSync(process.argv[1]) ? 0 : 3)', flag] },
      });
      assert.equal((await driver.discover())[0].health, 'unhealthy');
      writeFileSync(flag, '');
      assert.equal((await driver.discover())[0].health, 'good');
    });

    it('is unhealthy when the health command hangs past its timeout or cannot start', async () => {
      const hanging = new LocalDriver({
        deviceId: 'box',
        healthCheck: { command: [node, '-e', 'setTimeout(() => {}, 60000)'], timeoutMs: 200 },
      });
      const t0 = Date.now();
      assert.equal((await hanging.discover())[0].health, 'unhealthy');
      // Far below the command's own 60 s, with room for a stalled test process.
      assert.ok(Date.now() - t0 < 20_000, `the timeout bounds the check (${Date.now() - t0} ms)`);
      const missing = new LocalDriver({ deviceId: 'box', healthCheck: { command: ['/nonexistent/health-check'] } });
      assert.equal((await missing.discover())[0].health, 'unhealthy');
    });

    it('a health check that times out leaves no process behind: its whole process group is killed', async () => {
      const pids = join(tmp.make(), 'pids');
      // The shell starts a child of its own and waits for it: killing only the shell would leave `sleep`.
      const driver = new LocalDriver({
        deviceId: 'box',
        // Room for a slow sh to write the pids before the timeout on a loaded machine.
        healthCheck: { command: ['sh', '-c', `sleep 100 & echo "$$ $!" > '${pids}'; wait`], timeoutMs: 1_500 },
      });
      const t0 = Date.now();
      assert.equal((await driver.discover())[0].health, 'unhealthy');
      // Far below the 100 s sleep, with room for a stalled test process.
      assert.ok(Date.now() - t0 < 20_000, `the timeout bounds the check (${Date.now() - t0} ms)`);
      const [shell, sleeper] = readFileSync(pids, 'utf8').trim().split(' ').map(Number);
      assert.ok(shell > 0 && sleeper > 0);
      const deadline = Date.now() + 3_000;
      while ((running(sleeper) || groupAlive(shell)) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 25));
      if (running(sleeper)) process.kill(sleeper, 'SIGKILL');
      assert.equal(running(sleeper) || groupAlive(shell), false, `the check's child (sleep ${sleeper}) is gone`);
      const r = await execArgv(['sh', '-c', 'sleep 100'], { timeoutMs: 200 });
      assert.equal(r.failure, 'timeout');
    });

    it('a health check that exits leaving a background child behind: the child is killed too', async () => {
      const pids = join(tmp.make(), 'pids');
      const r = await execArgv(['sh', '-c', `sleep 100 > /dev/null 2>&1 & echo "$$ $!" > '${pids}'; exit 0`], {
        timeoutMs: 5_000,
      });
      assert.equal(r.ok, true);
      const [shell, sleeper] = readFileSync(pids, 'utf8').trim().split(' ').map(Number);
      const deadline = Date.now() + 3_000;
      while ((running(sleeper) || groupAlive(shell)) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 25));
      const survived = running(sleeper);
      if (survived) process.kill(sleeper, 'SIGKILL');
      assert.equal(survived, false, `the background child (sleep ${sleeper}) is gone`);
    });

    it('runs the health command without a shell and without the Temporal credentials', async () => {
      const dir = tmp.make();
      const out = join(dir, 'seen.json');
      process.env.TEMPORAL_API_KEY = 'secret-key';
      try {
        const driver = new LocalDriver({
          deviceId: 'box',
          healthCheck: {
            command: [
              node,
              '-e',
              'require("fs").writeFileSync(process.argv[1], JSON.stringify({ arg: process.argv[2], key: process.env.TEMPORAL_API_KEY ?? null }))',
              out,
              '$(touch pwned); echo *',
            ],
          },
        });
        assert.equal((await driver.discover())[0].health, 'good');
      } finally {
        delete process.env.TEMPORAL_API_KEY;
      }
      assert.deepEqual(JSON.parse(readFileSync(out, 'utf8')), { arg: '$(touch pwned); echo *', key: null });
      assert.equal(existsSync(join(process.cwd(), 'pwned')), false);
    });
  });

  describe('adb driver', () => {
    const DEVICES = [
      '* daemon not running; starting now at tcp:5037',
      '* daemon started successfully',
      'List of devices attached',
      '0A1B2C3D4E            device usb:1-1.2 product:panther model:Pixel_7 device:panther transport_id:3',
      '192.168.1.20:5555     device product:oriole model:Pixel_6 device:oriole transport_id:4',
      'emulator-5554         device product:sdk_gphone64_x86_64 model:sdk_gphone64_x86_64 device:emu64xa transport_id:1',
      'R58M12ABCDE           unauthorized usb:1-1.3 transport_id:5',
      'ZY22GXYZ              no permissions (user in plugdev group; are your udev rules wrong?); see [http://developer.android.com/tools/device.html] usb:1-4 transport_id:6',
      '10.0.0.9:5555         offline transport_id:7',
      'FLASHME01             bootloader usb:1-5 transport_id:8',
      '',
    ].join('\n');

    interface FakeState {
      devices?: string;
      devicesExitCode?: number;
      devicesStderr?: string;
      shell?: Record<string, { stdout?: string; exitCode?: number; delayMs?: number }>;
      callLog?: string;
    }

    function fakeAdb(state: FakeState) {
      const dir = tmp.make();
      const statePath = join(dir, 'state.json');
      const callLog = join(dir, 'calls.log');
      const write = (s: FakeState) => writeFileSync(statePath, JSON.stringify({ callLog, ...s }));
      write(state);
      const calls = () =>
        existsSync(callLog)
          ? readFileSync(callLog, 'utf8')
              .trim()
              .split('\n')
              .map((l) => JSON.parse(l) as string[])
          : [];
      return { statePath, write, calls };
    }

    let savedState: string | undefined;
    beforeEach(() => (savedState = process.env.FAKE_ADB_STATE));
    afterEach(() => {
      if (savedState === undefined) delete process.env.FAKE_ADB_STATE;
      else process.env.FAKE_ADB_STATE = savedState;
    });

    const ok = { stdout: 'ok\n' };

    it('parses usb, network, emulator, unauthorized, no-permissions, offline and bootloader devices', () => {
      const lines = parseAdbDevices(DEVICES);
      assert.deepEqual(
        lines.map((l) => [l.serial, l.state]),
        [
          ['0A1B2C3D4E', 'device'],
          ['192.168.1.20:5555', 'device'],
          ['emulator-5554', 'device'],
          ['R58M12ABCDE', 'unauthorized'],
          ['ZY22GXYZ', 'no permissions'],
          ['10.0.0.9:5555', 'offline'],
          ['FLASHME01', 'bootloader'],
        ],
      );
      assert.deepEqual(lines[0].props, {
        usb: '1-1.2',
        product: 'panther',
        model: 'Pixel_7',
        device: 'panther',
        transport_id: '3',
      });
      assert.deepEqual(lines[4].props, { usb: '1-4', transport_id: '6' });
      assert.deepEqual(parseAdbDevices('List of devices attached\n\n'), []);
    });

    it('discovers devices with tags, state and health from the fake adb', async () => {
      const fake = fakeAdb({
        devices: DEVICES,
        shell: { '0A1B2C3D4E': ok, '192.168.1.20:5555': ok, 'emulator-5554': ok },
      });
      process.env.FAKE_ADB_STATE = fake.statePath;
      const driver = new AdbDriver({
        adbPath: FAKE_ADB,
        tags: ['lab:berlin'],
        extraTags: { '0A1B2C3D4E': ['camera', 'api34'] },
      });
      assert.equal(driver.type, 'adb');
      const devices = byId(await driver.discover());
      assert.deepEqual(
        [...devices.keys()],
        ['0A1B2C3D4E', '192.168.1.20:5555', 'emulator-5554', 'R58M12ABCDE', 'ZY22GXYZ', '10.0.0.9:5555', 'FLASHME01'],
      );
      assert.deepEqual(devices.get('0A1B2C3D4E'), {
        deviceId: '0A1B2C3D4E',
        driverType: 'android',
        tags: ['model:Pixel_7', 'product:panther', 'device:panther', 'transport:usb', 'lab:berlin', 'camera', 'api34'],
        state: 'idle',
        health: 'good',
      });
      assert.deepEqual(devices.get('192.168.1.20:5555')!.tags, [
        'model:Pixel_6',
        'product:oriole',
        'device:oriole',
        'transport:network',
        'lab:berlin',
      ]);
      assert.ok(devices.get('emulator-5554')!.tags.includes('transport:emulator'));
      assert.ok(devices.get('R58M12ABCDE')!.tags.includes('transport:usb'));
      for (const id of ['R58M12ABCDE', 'ZY22GXYZ', '10.0.0.9:5555']) {
        assert.deepEqual([devices.get(id)!.state, devices.get(id)!.health], ['offline', 'unhealthy'], id);
      }
      assert.deepEqual([devices.get('FLASHME01')!.state, devices.get('FLASHME01')!.health], ['offline', 'maintenance']);
      for (const d of devices.values())
        assert.ok(!d.tags.some((t) => t.startsWith('transport_id')), 'no transport_id tag');

      // Health checks ran only for the usable devices, as `adb -s <serial> shell echo ok`.
      const checks = fake.calls().filter((c) => c[0] === '-s');
      assert.deepEqual(checks.map((c) => c[1]).sort(), ['0A1B2C3D4E', '192.168.1.20:5555', 'emulator-5554']);
      for (const c of checks) assert.deepEqual(c.slice(2), ['shell', 'echo', 'ok']);
      assert.deepEqual(fake.calls()[0], ['devices', '-l']);
    });

    it('marks a device whose shell check fails unhealthy, and good again once it passes', async () => {
      const list = 'List of devices attached\nSERIAL1 device usb:1-1 model:Pixel_8 transport_id:1\n';
      const fake = fakeAdb({ devices: list, shell: { SERIAL1: { stdout: '', exitCode: 1 } } });
      process.env.FAKE_ADB_STATE = fake.statePath;
      const driver = new AdbDriver({ adbPath: FAKE_ADB });
      assert.deepEqual(
        (await driver.discover()).map((d) => [d.deviceId, d.state, d.health]),
        [['SERIAL1', 'idle', 'unhealthy']],
      );
      // Exit 0 but the wrong output (old adb versions) is not healthy either.
      fake.write({ devices: list, shell: { SERIAL1: { stdout: 'error: closed\n', exitCode: 0 } } });
      assert.equal((await driver.discover())[0].health, 'unhealthy');
      fake.write({ devices: list, shell: { SERIAL1: ok } });
      assert.equal((await driver.discover())[0].health, 'good');
      fake.write({ devices: list, shell: {} }); // "device not found"
      assert.equal((await driver.discover())[0].health, 'unhealthy');
    });

    it('marks a device whose shell check hangs past healthTimeoutMs unhealthy', async () => {
      const list = 'List of devices attached\nSLOW device usb:1-1 transport_id:1\nFAST device usb:1-2 transport_id:2\n';
      const fake = fakeAdb({ devices: list, shell: { SLOW: { ...ok, delayMs: 30_000 }, FAST: ok } });
      process.env.FAKE_ADB_STATE = fake.statePath;
      const driver = new AdbDriver({ adbPath: FAKE_ADB, healthTimeoutMs: 3_000 });
      const t0 = Date.now();
      const devices = byId(await driver.discover());
      assert.ok(Date.now() - t0 < 20_000, `bounded by the timeout (${Date.now() - t0} ms)`);
      assert.equal(devices.get('SLOW')!.health, 'unhealthy');
      assert.equal(devices.get('FAST')!.health, 'good');
    });

    it('reports only allow-listed serials (and checks only those)', async () => {
      const fake = fakeAdb({ devices: DEVICES, shell: { '0A1B2C3D4E': ok, 'emulator-5554': ok } });
      process.env.FAKE_ADB_STATE = fake.statePath;
      const driver = new AdbDriver({ adbPath: FAKE_ADB, allowSerials: ['emulator-5554', 'R58M12ABCDE', 'absent'] });
      assert.deepEqual(
        (await driver.discover()).map((d) => d.deviceId),
        ['emulator-5554', 'R58M12ABCDE'],
      );
      assert.deepEqual(
        fake
          .calls()
          .filter((c) => c[0] === '-s')
          .map((c) => c[1]),
        ['emulator-5554'],
      );
    });

    it('maps a serial that is not a valid id to a valid device id and back', async () => {
      const fake = fakeAdb({
        devices: 'List of devices attached\nweird/serial#1 device usb:1-1 transport_id:1\n',
        shell: { 'weird/serial#1': ok },
      });
      process.env.FAKE_ADB_STATE = fake.statePath;
      const driver = new AdbDriver({ adbPath: FAKE_ADB });
      const [d] = await driver.discover();
      assert.ok(isValidId(d.deviceId), d.deviceId);
      assert.notEqual(d.deviceId, 'weird/serial#1');
      assert.equal(d.health, 'good');
      assert.equal(driver.serialOf(d.deviceId), 'weird/serial#1');
    });

    it('fails with a clear error when the adb executable is missing', async () => {
      const driver = new AdbDriver({ adbPath: '/nonexistent/platform-tools/adb' });
      await assert.rejects(driver.discover(), (err: unknown) => {
        assert.ok(err instanceof DriverError);
        assert.match(err.message, /adb executable not found: "\/nonexistent\/platform-tools\/adb"/);
        return true;
      });
    });

    it('fails with adb’s own message when `adb devices` fails', async () => {
      const fake = fakeAdb({ devicesExitCode: 1, devicesStderr: 'adb: cannot connect to daemon\n' });
      process.env.FAKE_ADB_STATE = fake.statePath;
      await assert.rejects(
        new AdbDriver({ adbPath: FAKE_ADB }).discover(),
        (err: unknown) => err instanceof DriverError && /exit_code_1.*cannot connect to daemon/.test(err.message),
      );
    });
  });
});
