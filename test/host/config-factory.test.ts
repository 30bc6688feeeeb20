/** Driver and runner configuration schemas, and the factory that builds drivers and runners from them. */
import assert from 'node:assert/strict';
import { resolve } from 'node:path';
import {
  CommandRunnerConfigSchema,
  DriverConfigSchema,
  RunnerConfigSchema,
  type DriverConfigInput,
  type RunnerConfigInput,
} from '../../host-worker/config-schemas';
import { AdbDriver, LocalDriver, SimDriver } from '../../host-worker/drivers';
import { HostConfigSchema } from '../../host-worker/config';
import { ConfigError, parseControlPlaneConfig } from '../../control-plane/config';
import { createDriver, createRunners } from '../../host-worker/factory';
import { capabilityTags } from '../../host-worker/runners';
import type { WorkflowStep } from '../../workflows/types';
import { node, recordingContext } from './helpers';

const driver = (input: DriverConfigInput) => DriverConfigSchema.parse(input);
const runner = (input: RunnerConfigInput) => RunnerConfigSchema.parse(input);
const issues = (r: { success: boolean; error?: { issues: { path: PropertyKey[]; message: string }[] } }) =>
  (r.error?.issues ?? []).map((i) => `${i.path.join('.')}: ${i.message}`).join('\n');

describe('host driver and runner configuration', () => {
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
