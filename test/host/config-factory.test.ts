/** Driver and runner configuration schemas, and the factory that builds drivers and runners from them. */
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import {
  CommandRunnerConfigSchema,
  DefinitionsConfigSchema,
  DriverConfigSchema,
  RunnerConfigSchema,
  type DriverConfigInput,
  type RunnerConfigInput,
} from '../../host-worker/config-schemas';
import { AdbDriver, LocalDriver, SimDriver } from '../../host-worker/drivers';
import { HostConfigSchema, hostConfigWarnings, loadHostConfig } from '../../host-worker/config';
import { SubmitRequestSchema } from '../../control-plane/client';
import { ConfigError, loadControlPlaneConfig, parseControlPlaneConfig } from '../../control-plane/config';
import { parseLevelStrict } from '../../control-plane/log';
import { executableProblem } from '../../host-worker/preflight';
import { createDriver, createRunners } from '../../host-worker/factory';
import { capabilityTags } from '../../host-worker/runners';
import type { WorkflowStep } from '../../workflows/types';
import { node, recordingContext, tempDirs } from './helpers';

const driver = (input: DriverConfigInput) => DriverConfigSchema.parse(input);
const runner = (input: RunnerConfigInput) => RunnerConfigSchema.parse(input);
const issues = (r: { success: boolean; error?: { issues: { path: PropertyKey[]; message: string }[] } }) =>
  (r.error?.issues ?? []).map((i) => `${i.path.join('.')}: ${i.message}`).join('\n');

describe('host driver and runner configuration', () => {
  const tmp = tempDirs();
  after(() => tmp.cleanup());
  describe('driver schemas', () => {
    it('parses the sim driver with the same defaults as the existing host config', () => {
      assert.deepEqual(driver({ type: 'sim', devices: [{ deviceId: 'pixel-7', tags: ['camera'] }] }), {
        type: 'sim',
        devices: [{ deviceId: 'pixel-7', driverType: 'sim', tags: ['camera'], health: 'good', state: 'idle' }],
        defaultDurationMs: 1_000,
        defaultOutcome: 'done',
      });
    });

    it('parses the adb driver with defaults', () => {
      assert.deepEqual(driver({ type: 'adb' }), {
        type: 'adb',
        adbPath: 'adb',
        driverType: 'android',
        listTimeoutMs: 10_000,
        healthTimeoutMs: 5_000,
        healthConcurrency: 8,
        tags: [],
        extraTags: {},
      });
      const full = driver({
        type: 'adb',
        adbPath: '/opt/platform-tools/adb',
        allowSerials: ['A1'],
        extraTags: { A1: ['camera'] },
      });
      assert.equal(full.type === 'adb' && full.extraTags.A1[0], 'camera');
    });

    it('parses the local driver with defaults', () => {
      assert.deepEqual(driver({ type: 'local', healthCheck: { command: ['/usr/bin/true'] } }), {
        type: 'local',
        driverType: 'local',
        tags: [],
        healthCheck: { command: ['/usr/bin/true'], timeoutMs: 10_000 },
      });
    });

    it('rejects unknown types, misspelt keys and invalid values, naming the field', () => {
      const bad: [unknown, RegExp][] = [
        [{ type: 'usb' }, /type/],
        [{ type: 'adb', adbpath: '/x' }, /adbpath/],
        [{ type: 'adb', healthTimeoutMs: 0 }, /healthTimeoutMs/],
        [{ type: 'local', deviceId: 'has space' }, /deviceId: letters, digits/],
        [{ type: 'local', healthCheck: { command: [] } }, /healthCheck\.command/],
        [{ type: 'sim', devices: [{ deviceId: '' }] }, /devices\.0\.deviceId/],
        [
          { type: 'sim', devices: [{ deviceId: 'a', driverTyp: 'android' }] },
          /devices\.0: Unrecognized key: "driverTyp"/,
        ],
      ];
      for (const [input, expected] of bad) {
        const r = DriverConfigSchema.safeParse(input);
        assert.equal(r.success, false, JSON.stringify(input));
        assert.match(issues(r) || 'none', expected, JSON.stringify(input));
      }
    });
  });

  describe('host and control-plane configuration', () => {
    const host = { hostId: 'lab-1', credentialFile: 'lab-1.credential.json', driver: { type: 'sim' } };
    it('a host config with a misspelt top-level key is an error naming it, not the default', () => {
      assert.equal(HostConfigSchema.parse(host).snapshotIntervalMs, 60_000);
      for (const [key, value] of [
        ['snapshotIntervalMS', 1_000],
        ['allowInlineSteps', true], // it belongs in `runner`
      ] as const) {
        const r = HostConfigSchema.safeParse({ ...host, [key]: value });
        assert.equal(r.success, false, key);
        assert.match(issues(r), new RegExp(`Unrecognized key: "${key}"`));
      }
    });
    it('a root-level error in a host config file is printed at (root), as the control plane prints it', () => {
      const path = join(tmp.make(), 'host.json');
      writeFileSync(path, JSON.stringify({ ...host, snapshotIntervalMS: 1_000 }));
      assert.throws(
        () => loadHostConfig(path),
        (err: Error) => {
          assert.match(err.message, /\n {2}\(root\): Unrecognized key: "snapshotIntervalMS"/);
          return true;
        },
      );
    });
    it('a real driver (adb, local) without a runner is refused, saying how to fix it; the sim driver defaults to the sim runner', () => {
      assert.equal(HostConfigSchema.parse(host).runner, undefined, 'sim driver: the sim runner by default');
      for (const driver of [{ type: 'adb' }, { type: 'local' }]) {
        const r = HostConfigSchema.safeParse({ ...host, driver });
        assert.equal(r.success, false, driver.type);
        const text = issues(r);
        assert.match(text, new RegExp(`^runner: the ${driver.type} driver needs a runner`), text);
        assert.match(text, /Configure one/);
        assert.ok(text.includes('"runner": {"type": "sim"}'), text);
        // Simulating on purpose, or a real runner, is fine.
        assert.equal(HostConfigSchema.safeParse({ ...host, driver, runner: { type: 'sim' } }).success, true);
        assert.equal(
          HostConfigSchema.safeParse({
            ...host,
            driver,
            runner: { type: 'command', command: ['/bin/true'], goalAs: 'argument' },
          }).success,
          true,
        );
      }
      const path = join(tmp.make(), 'host.json');
      writeFileSync(path, JSON.stringify({ ...host, driver: { type: 'adb' } }));
      assert.throws(() => loadHostConfig(path, { checkCommands: false }), /runner: the adb driver needs a runner/);
    });
    it("timer settings are bounded by Node's largest timer (2^31 - 1 ms), with a clear message", () => {
      const max = 2_147_483_647;
      const tooBig = /at most 2147483647 ms/;
      for (const key of ['snapshotIntervalMs', 'discoveryIntervalMs', 'progressIntervalMs', 'reportDelayMs']) {
        assert.equal(HostConfigSchema.safeParse({ ...host, [key]: max }).success, true, key);
        const r = HostConfigSchema.safeParse({ ...host, [key]: max + 1 });
        assert.equal(r.success, false, key);
        assert.match(issues(r), new RegExp(`^${key}: `), key);
        assert.match(issues(r), tooBig, key);
      }
      const drivers: [object, string][] = [
        [{ type: 'adb', listTimeoutMs: max + 1 }, 'listTimeoutMs'],
        [{ type: 'adb', healthTimeoutMs: max + 1 }, 'healthTimeoutMs'],
        [{ type: 'local', healthCheck: { command: ['true'], timeoutMs: max + 1 } }, 'healthCheck.timeoutMs'],
        [{ type: 'sim', defaultDurationMs: max + 1 }, 'defaultDurationMs'],
      ];
      for (const [input, field] of drivers) {
        const r = DriverConfigSchema.safeParse(input);
        assert.equal(r.success, false, field);
        assert.match(issues(r), new RegExp(`^${field.replace('.', '\\.')}: at most 2147483647 ms`), field);
      }
      const cmd = { type: 'command', command: ['x'], goalAs: 'argument' };
      for (const over of [{ killGraceMs: max + 1 }, { defaultStepTimeoutMs: max + 1 }]) {
        const r = RunnerConfigSchema.safeParse({ ...cmd, ...over });
        assert.equal(r.success, false, JSON.stringify(over));
        assert.match(issues(r), tooBig);
      }
      assert.equal(RunnerConfigSchema.safeParse({ ...cmd, killGraceMs: max, defaultStepTimeoutMs: max }).success, true);
      const step = { name: 's', command: ['x'] };
      assert.equal(DefinitionsConfigSchema.safeParse({ d: [{ ...step, timeoutMs: max }] }).success, true);
      assert.match(issues(DefinitionsConfigSchema.safeParse({ d: [{ ...step, timeoutMs: max + 1 }] })), tooBig);
      // A step a task brings inline (the submit API) is bounded the same way.
      const submit = (timeoutMs: number) =>
        SubmitRequestSchema.safeParse({ definition: { name: 'd', steps: [{ ...step, timeoutMs }] } });
      assert.equal(submit(max).success, true, issues(submit(max)));
      assert.match(issues(submit(max + 1)), /at most 2147483647 ms/);
    });
    it('discoveryFailuresBeforeUnhealthy: 3 by default, a whole number >= 1', () => {
      assert.equal(HostConfigSchema.parse(host).discoveryFailuresBeforeUnhealthy, 3);
      assert.equal(
        HostConfigSchema.parse({ ...host, discoveryFailuresBeforeUnhealthy: 6 }).discoveryFailuresBeforeUnhealthy,
        6,
      );
      assert.equal(HostConfigSchema.safeParse({ ...host, discoveryFailuresBeforeUnhealthy: 0 }).success, false);
      assert.equal(HostConfigSchema.safeParse({ ...host, discoveryFailuresBeforeUnhealthy: 1.5 }).success, false);
    });
    it('shutdownGraceMs: 5000 by default, a non-negative whole number of ms up to a day', () => {
      assert.equal(HostConfigSchema.parse(host).shutdownGraceMs, 5_000);
      assert.equal(HostConfigSchema.parse({ ...host, shutdownGraceMs: 600_000 }).shutdownGraceMs, 600_000);
      assert.equal(HostConfigSchema.parse({ ...host, shutdownGraceMs: 0 }).shutdownGraceMs, 0);
      for (const bad of [-1, 1.5, '5000', 2 * 24 * 60 * 60_000]) {
        const r = HostConfigSchema.safeParse({ ...host, shutdownGraceMs: bad });
        assert.equal(r.success, false, String(bad));
        assert.match(issues(r), /^shutdownGraceMs: /, String(bad));
      }
    });
    it("warns about a snapshotIntervalMs not comfortably less than the control plane's default snapshotTimeoutMs", () => {
      assert.deepEqual(hostConfigWarnings(HostConfigSchema.parse(host)), [], 'the default 60 s is fine');
      assert.deepEqual(hostConfigWarnings({ snapshotIntervalMs: 60_000 }), []);
      for (const ms of [90_000, 180_000, 300_000]) {
        const [w, ...more] = hostConfigWarnings({ snapshotIntervalMs: ms });
        assert.equal(more.length, 0);
        assert.match(
          w ?? '',
          new RegExp(`snapshotIntervalMs ${ms} is not comfortably less than .*snapshotTimeoutMs \\(180000 ms\\)`),
        );
      }
    });
    it('FLEET_LOG_LEVEL: a level (any case), unset or empty is info, anything else a clear error', () => {
      assert.equal(parseLevelStrict(undefined), 'info');
      assert.equal(parseLevelStrict(''), 'info');
      assert.equal(parseLevelStrict('WARN'), 'warn');
      assert.equal(parseLevelStrict('debug'), 'debug');
      for (const bad of ['verbose', 'warning', 'constructor', ' info']) {
        assert.throws(
          () => parseLevelStrict(bad),
          new RegExp(
            `invalid FLEET_LOG_LEVEL ${JSON.stringify(JSON.stringify(bad)).slice(1, -1)}: expected one of trace, debug, info, warn, error`,
          ),
          bad,
        );
      }
    });
    it('a control-plane config with a misspelt key at any level is an error naming it', () => {
      assert.equal(parseControlPlaneConfig({}).hostTimeoutMs, 30_000);
      for (const [raw, expected] of [
        [{ hostTimeoutMS: 1 }, /\(root\): Unrecognized key: "hostTimeoutMS"/],
        [{ taskDefaults: { maxAttempt: 2 } }, /taskDefaults: Unrecognized key: "maxAttempt"/],
        [{ taskDefaults: { backoff: { initialMS: 2 } } }, /taskDefaults\.backoff: Unrecognized key: "initialMS"/],
        [{ pools: { default: { stratgy: 'fifo_match' } } }, /pools\.default: Unrecognized key: "stratgy"/],
        [{ poolDefaults: { maxQueue: 5 } }, /poolDefaults: Unrecognized key: "maxQueue"/],
      ] as const) {
        assert.throws(
          () => parseControlPlaneConfig(raw),
          (err: Error) => {
            assert.ok(err instanceof ConfigError);
            assert.match(err.message, expected);
            return true;
          },
        );
      }
    });
    it("control-plane durations are bounded like the host's, taskDefaults need a lease of 1 s and a backoff capped at or above its start, and a FLEET_CONFIG that is not an object is named", () => {
      const max = 2_147_483_647;
      for (const [raw, expected] of [
        [{ poolWatchMs: max + 1 }, /poolWatchMs: at most 2147483647 ms/],
        [{ hostTimeoutMs: max + 1 }, /hostTimeoutMs: at most 2147483647 ms/],
        [{ taskDefaults: { executionTimeoutMs: 9e15 } }, /taskDefaults\.executionTimeoutMs: at most 2147483647 ms/],
        [{ taskDefaults: { backoff: { maxMs: max + 1 } } }, /taskDefaults\.backoff\.maxMs: at most 2147483647 ms/],
        [{ taskDefaults: { leaseTimeoutMs: 999 } }, /taskDefaults\.leaseTimeoutMs: at least 1000 ms/],
        [
          { taskDefaults: { backoff: { initialMs: 120_000 } } },
          /taskDefaults\.backoff\.maxMs: must be at least backoff\.initialMs/,
        ],
      ] as const) {
        assert.throws(
          () => parseControlPlaneConfig(raw),
          (err: Error) => {
            assert.ok(err instanceof ConfigError, String(err));
            assert.match(err.message, expected);
            return true;
          },
        );
      }
      assert.equal(
        parseControlPlaneConfig({ poolWatchMs: max, taskDefaults: { leaseTimeoutMs: 1_000 } }).poolWatchMs,
        max,
      );
      const dir = tmp.make();
      for (const text of ['null', '[]', '"x"']) {
        const file = join(dir, 'config.json');
        writeFileSync(file, text);
        assert.throws(
          () => loadControlPlaneConfig({ FLEET_CONFIG: file, FLEET_STRATEGY: 'fifo_match' }),
          (err: Error) => {
            assert.ok(err instanceof ConfigError, String(err));
            assert.match(err.message, /must hold a JSON object/);
            return true;
          },
          text,
        );
      }
    });
    it('a pool name under pools (or defaultPool) must pass the id rule hosts apply, an error naming it', () => {
      const pools = { 'lab-1': {}, 'ios.fleet:eu_2': {} };
      assert.deepEqual(Object.keys(parseControlPlaneConfig({ pools }).pools), Object.keys(pools));
      // The very names a host config refuses as its pool.
      for (const bad of ['bad pool!', '', '-lab', 'lab/1', 'x'.repeat(129)]) {
        assert.equal(HostConfigSchema.safeParse({ ...host, pool: bad }).success, false, bad);
        for (const raw of [{ pools: { [bad]: {} } }, { defaultPool: bad }]) {
          assert.throws(
            () => parseControlPlaneConfig(raw),
            (err: Error) => {
              assert.ok(err instanceof ConfigError);
              const field = 'pools' in raw ? 'pools' : 'defaultPool';
              assert.ok(
                err.message.includes(`${field}: "${bad}" is not a valid pool name (letters, digits,`),
                err.message,
              );
              return true;
            },
          );
        }
      }
    });
  });

  describe('runner schemas', () => {
    it('parses the sim runner and the command runner with defaults', () => {
      assert.deepEqual(runner({ type: 'sim' }), { type: 'sim' });
      assert.deepEqual(runner({ type: 'command', command: ['agent', '--goal'], goalAs: 'argument' }), {
        type: 'command',
        command: ['agent', '--goal'],
        goalAs: 'argument',
        exitCodes: { done: [0], retryable: [] },
        killGraceMs: 5_000,
        env: {},
        passEnv: [],
        maxProgressLinesPerSecond: 20,
        allowInlineSteps: false,
      });
    });

    it('rejects overlapping exit codes, envName without goalAs env, bad names and an empty command', () => {
      const bad: [unknown, RegExp][] = [
        [
          { type: 'command', command: ['a'], goalAs: 'env', exitCodes: { done: [0, 2], retryable: [2] } },
          /both done and retryable/,
        ],
        [{ type: 'command', command: ['a'], goalAs: 'argument', envName: 'GOAL' }, /envName: envName is only used/],
        [{ type: 'command', command: ['a'], goalAs: 'env', envName: 'MY-GOAL' }, /envName/],
        [{ type: 'command', command: [], goalAs: 'env' }, /command/],
        [{ type: 'command', command: ['a'], goalAs: 'stdin' }, /goalAs/],
        [{ type: 'command', command: ['a'], goalAs: 'env', exitCodes: { done: [256] } }, /exitCodes\.done\.0/],
        [{ type: 'command', command: 'agent --goal', goalAs: 'env' }, /command/],
      ];
      for (const [input, expected] of bad) {
        const r = CommandRunnerConfigSchema.safeParse(input);
        assert.equal(r.success, false, JSON.stringify(input));
        assert.match(issues(r), expected, JSON.stringify(input));
      }
    });
  });

  describe('start-up checks of the commands a host config names', () => {
    const base = { hostId: 'lab-1', credentialFile: 'c.json', driver: { type: 'sim' } };
    /** Loads a host config written to a temporary file; the error message, or 'loaded'. */
    const load = (config: object, env: NodeJS.ProcessEnv = process.env): string => {
      const path = join(tmp.make(), 'host.json');
      writeFileSync(path, JSON.stringify({ ...base, ...config }));
      try {
        loadHostConfig(path, { env });
        return 'loaded';
      } catch (err) {
        return (err as Error).message;
      }
    };
    const command = (over: object) => ({ runner: { type: 'command', goalAs: 'argument', command: [node], ...over } });
    /** A real driver needs a runner configured: these checks are about the driver's own commands. */
    const simRunner = { runner: { type: 'sim' } };

    it('refuses a command runner whose command[0] cannot start, naming the runner, the field and the value', () => {
      const dir = tmp.make();
      const plain = join(dir, 'not-executable');
      writeFileSync(plain, '#!/bin/sh\n');
      chmodSync(plain, 0o644);
      const cases: [string, string][] = [
        ['/nonexistent/agent', 'does not exist'],
        [plain, 'is not executable'],
        [dir, 'is a directory, not an executable file'],
        ['no-such-agent-d41d8cd9', 'is not found on PATH'],
        ['./relative/agent', 'does not exist'],
      ];
      for (const [cmd, problem] of cases) {
        const message = load(command({ command: [cmd, '--goal'] }));
        assert.ok(message.includes('names commands that cannot run on this machine'), message);
        assert.ok(message.includes(`command runner: runner.command[0] ${JSON.stringify(cmd)} ${problem}`), message);
      }
      assert.equal(load(command({})), 'loaded', 'an absolute path to an executable');
      assert.equal(load(command({ command: ['node'] }), { PATH: dirname(node) }), 'loaded', 'a bare name on PATH');
      assert.match(
        load(command({ command: ['node'] }), { PATH: '/nonexistent' }),
        /"node" is not found on PATH \(\/nonexistent\)/,
      );
      assert.equal(
        load(command({ command: ['node'], env: { PATH: dirname(node) } }), { PATH: '/nonexistent' }),
        'loaded',
        "the runner's own env PATH is the one its command sees",
      );
    });

    it('refuses a command runner whose cwd does not exist or is not a directory; a relative command is looked up from it', () => {
      const dir = tmp.make();
      mkdirSync(join(dir, 'bin'));
      writeFileSync(join(dir, 'bin', 'agent'), '#!/bin/sh\n');
      chmodSync(join(dir, 'bin', 'agent'), 0o755);
      const missing = join(dir, 'missing');
      assert.ok(
        load(command({ cwd: missing })).includes(
          `command runner: runner.cwd ${JSON.stringify(missing)} does not exist`,
        ),
      );
      const file = join(dir, 'bin', 'agent');
      assert.ok(
        load(command({ cwd: file })).includes(`command runner: runner.cwd ${JSON.stringify(file)} is not a directory`),
      );
      assert.equal(load(command({ cwd: dir, command: ['./bin/agent'] })), 'loaded');
      assert.equal(load(command({ cwd: dir })), 'loaded');
    });

    it("checks the command runner's definition steps, the local health check and the adb executable too (not the sim runner's directives)", () => {
      const definitions = {
        smoke: [
          { name: 'ok', command: [node] },
          { name: 'build', command: ['/nonexistent/make'] },
        ],
      };
      const message = load({ ...command({}), definitions });
      assert.ok(
        message.includes(
          'definition "smoke" step "build" (command runner): definitions.smoke.1.command[0] "/nonexistent/make" does not exist',
        ),
        message,
      );
      assert.equal(
        load({ definitions: { smoke: [{ name: 'install', command: ['install', '[sim duration=10]'] }] } }),
        'loaded',
      );
      assert.ok(
        load({ driver: { type: 'local', healthCheck: { command: ['/nonexistent/check'] } }, ...simRunner }).includes(
          'local driver health check: driver.healthCheck.command[0] "/nonexistent/check" does not exist',
        ),
      );
      assert.equal(
        load({ driver: { type: 'local', healthCheck: { command: [node, '-e', '0'] } }, ...simRunner }),
        'loaded',
      );
      assert.ok(
        load({ driver: { type: 'adb', adbPath: '/nonexistent/adb' }, ...simRunner }).includes(
          'adb driver: driver.adbPath "/nonexistent/adb" does not exist',
        ),
      );
      assert.ok(
        load({ driver: { type: 'adb' }, ...simRunner }, { PATH: '/nonexistent' }).includes(
          'adb driver: driver.adbPath "adb" is not found on PATH',
        ),
      );
      assert.equal(
        load({ driver: { type: 'adb', adbPath: resolve(__dirname, '../fixtures/fake-adb') }, ...simRunner }),
        'loaded',
      );
    });

    it('looks executables up like spawn: a path from the cwd, a bare name in PATH (empty entries: the cwd)', () => {
      const dir = tmp.make();
      writeFileSync(join(dir, 'tool'), '');
      chmodSync(join(dir, 'tool'), 0o755);
      assert.equal(executableProblem('tool', { cwd: dir, path: '' }), undefined);
      assert.equal(executableProblem('tool', { cwd: dir, path: `/nonexistent:.` }), undefined);
      assert.equal(executableProblem('./tool', { cwd: dir, path: '/nonexistent' }), undefined);
      assert.match(executableProblem('tool', { cwd: '/', path: '/nonexistent' }) ?? '', /not found on PATH/);
      assert.equal(executableProblem('sh', { path: undefined }), undefined, "libuv's default /usr/bin:/bin");
    });
  });

  describe('factory', () => {
    it('builds each driver type from its configuration', async () => {
      const sim = createDriver(driver({ type: 'sim', devices: [{ deviceId: 'd1', driverType: 'android' }] }));
      assert.ok(sim instanceof SimDriver);
      assert.deepEqual(await sim.discover(), [
        { deviceId: 'd1', driverType: 'android', tags: [], state: 'idle', health: 'good' },
      ]);
      const local = createDriver(driver({ type: 'local', deviceId: 'box', tags: ['gpu'] }));
      assert.ok(local instanceof LocalDriver);
      assert.deepEqual(await local.discover(), [
        { deviceId: 'box', driverType: 'local', tags: ['gpu'], state: 'idle', health: 'good' },
      ]);
      const adb = createDriver(driver({ type: 'adb', adbPath: '/nonexistent/adb' }));
      assert.ok(adb instanceof AdbDriver);
      await assert.rejects(adb.discover(), /adb executable not found: "\/nonexistent\/adb"/);
    });

    it('builds sim runners that run configured definitions', async () => {
      const runners = createRunners(runner({ type: 'sim', defaultDurationMs: 10 }), {
        smoke: [{ name: 'one', command: ['x', '[sim duration=10]'] }],
      });
      const ctx = recordingContext();
      assert.equal((await runners.workflow.runDefinition({ name: 'smoke' }, ctx)).status, 'done');
      assert.equal((await runners.goal.runGoal('go [sim outcome=fail]', recordingContext())).reason, 'runner_failed');
      const fromDriver = createRunners(runner({ type: 'sim' }), new Map(), {
        simDefaults: { defaultDurationMs: 5, defaultOutcome: 'fail-retryable' },
      });
      const r = await fromDriver.goal.runGoal('go', recordingContext());
      assert.deepEqual([r.status, r.retryable], ['failed', true]);
    });

    it('builds command runners: the goal runner and the definition runner over configured steps', async () => {
      const definitions = new Map<string, WorkflowStep[]>([
        ['check', [{ name: 'print', command: [node, '-e', 'console.log("step " + process.env.FLEET_STEP_NAME)'] }]],
      ]);
      const spawned: number[] = [];
      const runners = createRunners(
        runner({
          type: 'command',
          command: [
            node,
            '-e',
            'console.log("goal=" + process.env.G); process.exit(process.env.G === "retry" ? 9 : 0)',
          ],
          goalAs: 'env',
          envName: 'G',
          exitCodes: { done: [0], retryable: [9] },
          killGraceMs: 200,
        }),
        definitions,
        { onSpawn: (pid) => spawned.push(pid) },
      );
      const ctx = recordingContext();
      const done = await runners.goal.runGoal('ship it', ctx);
      assert.equal(done.status, 'done');
      assert.deepEqual(ctx.lines, ['goal=ship it']);
      const retry = await runners.goal.runGoal('retry', recordingContext());
      assert.deepEqual([retry.status, retry.retryable, retry.reason], ['failed', true, 'exit_code_9']);

      const stepCtx = recordingContext();
      assert.equal((await runners.workflow.runDefinition({ name: 'check' }, stepCtx)).status, 'done');
      assert.ok(stepCtx.lines.includes('print: step print'), stepCtx.lines.join('\n'));
      assert.equal(spawned.length, 3);
    });

    it('refuses steps a task brings inline unless allowInlineSteps is set', async () => {
      const inline = {
        name: 'evil',
        steps: [{ name: 'x', command: [node, '-e', 'console.log("ran")'] }],
      };
      const base = {
        type: 'command' as const,
        command: [node, '-e', '0'],
        goalAs: 'argument' as const,
        killGraceMs: 100,
      };
      const ctx = recordingContext();
      const refused = await createRunners(runner(base)).workflow.runDefinition(inline, ctx);
      assert.deepEqual(
        [refused.status, refused.retryable, refused.reason],
        ['failed', false, 'inline_steps_not_allowed'],
      );
      assert.equal(ctx.startedCalls, 0);
      assert.deepEqual(ctx.lines, []);

      const allowedCtx = recordingContext();
      const allowed = await createRunners(runner({ ...base, allowInlineSteps: true })).workflow.runDefinition(
        inline,
        allowedCtx,
      );
      assert.equal(allowed.status, 'done');
      assert.ok(allowedCtx.lines.includes('x: ran'));
    });

    it('advertises what the runner runs beyond goals: its definitions by name, and inline steps only if allowed', () => {
      const base = { type: 'command' as const, command: [node, '-e', '0'], goalAs: 'argument' as const };
      const definitions = { smoke: [{ name: 's', command: ['true'] }], build: [{ name: 'b', command: ['true'] }] };
      assert.deepEqual(capabilityTags(createRunners(runner(base), definitions).workflow), [
        'definition:smoke',
        'definition:build',
      ]);
      assert.deepEqual(capabilityTags(createRunners(runner({ ...base, allowInlineSteps: true })).workflow), [
        'inline-steps',
      ]);
      assert.deepEqual(capabilityTags(createRunners(runner({ type: 'sim' }), definitions).workflow), [
        'definition:smoke',
        'definition:build',
        'inline-steps',
      ]);
    });

    it('uses the fake adb through the factory too', async () => {
      const adb = createDriver(driver({ type: 'adb', adbPath: resolve(__dirname, '../fixtures/fake-adb') }));
      const saved = process.env.FAKE_ADB_STATE;
      delete process.env.FAKE_ADB_STATE;
      try {
        await assert.rejects(adb.discover(), /FAKE_ADB_STATE is not set/);
      } finally {
        if (saved !== undefined) process.env.FAKE_ADB_STATE = saved;
      }
    });
  });
});
