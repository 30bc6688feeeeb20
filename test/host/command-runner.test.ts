/** Command runners against real child processes (node -e scripts): argv only, process groups, classification. */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  createCommandGoalRunner,
  createCommandStepExecutor,
  LineSplitter,
  OutputTail,
  ProgressGate,
  type CommandGoalRunnerOptions,
} from '../../host-worker/command-runner';
import { createStepsRunner, UnknownDefinitionError } from '../../host-worker/runners';
import type { WorkflowStep } from '../../workflows/types';
import { node, processAlive, recordingContext, tempDirs, waitFor } from './helpers';

const script = (src: string) => [node, '-e', src];
const exitCodes = { done: [0], retryable: [75] };

function goalRunner(src: string, over: Partial<CommandGoalRunnerOptions> = {}) {
  return createCommandGoalRunner({ command: script(src), goalAs: 'argument', exitCodes, killGraceMs: 2_000, ...over });
}

/** Prints the pids of itself and of a grandchild that shares its process group, then waits. */
const WITH_GRANDCHILD = `
  const { spawn } = require('child_process');
  const g = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'inherit' });
  console.log('pids ' + process.pid + ' ' + g.pid);
  setInterval(() => {}, 1000);
`;

describe('host command runners', () => {
  const tmp = tempDirs();
  after(() => tmp.cleanup());

  describe('goal runner', () => {
    it('passes the goal as the last argument, verbatim, with no shell in between', async () => {
      const dir = tmp.make();
      const marker = join(dir, 'pwned');
      const goal = `open app; rm -rf / && touch ${marker} | cat $(touch ${marker}) \`touch ${marker}\` "quoted" 'single' * ~ $HOME`;
      const ctx = recordingContext();
      const r = await goalRunner('console.log(JSON.stringify(process.argv.slice(1)))', {
        command: [...script('console.log(JSON.stringify(process.argv.slice(1)))'), 'fixed-arg'],
      }).runGoal(goal, ctx);
      assert.equal(r.status, 'done');
      assert.deepEqual(JSON.parse(r.output!), ['fixed-arg', goal]);
      assert.equal(existsSync(marker), false, 'nothing was interpreted by a shell');
      assert.equal(ctx.startedCalls, 1);
    });

    it("passes the goal in an environment variable (and not as an argument) with the fleet variables, and none of the host agent's secrets", async () => {
      const ctx = recordingContext({ deviceId: 'pixel-7', driverType: 'android' });
      const src = `console.log(JSON.stringify({ argv: process.argv.slice(1), goal: process.env.MY_GOAL,
        task: process.env.FLEET_TASK_ID, attempt: process.env.FLEET_ATTEMPT, device: process.env.FLEET_DEVICE_ID,
        type: process.env.FLEET_DRIVER_TYPE, extra: process.env.EXTRA, key: process.env.TEMPORAL_API_KEY ?? null,
        token: process.env.FLEET_TOKEN ?? null, gh: process.env.GITHUB_TOKEN ?? null,
        aws: process.env.AWS_SECRET_ACCESS_KEY ?? null, passed: process.env.LAB_PASSWORD ?? null,
        plain: process.env.LAB_SITE ?? null, pg: process.env.PGPASSWORD ?? null, db: process.env.DB_PASS ?? null,
        android: process.env.ANDROID_HOME ?? null, ngrok: process.env.NGROK_AUTHTOKEN ?? null,
        dburl: process.env.DATABASE_URL ?? null }))`;
      const goal = 'say "hi"; $(reboot) \n second line';
      // The host agent's own secrets: its command output is the task's result (history, REST).
      const hostEnv = {
        TEMPORAL_API_KEY: 'secret-key',
        FLEET_TOKEN: 'fleet_admin',
        GITHUB_TOKEN: 'ghp_x',
        AWS_SECRET_ACCESS_KEY: 'aws-x',
        LAB_PASSWORD: 'wanted',
        LAB_SITE: 'berlin',
        PGPASSWORD: 'pg',
        DB_PASS: 'db',
        NGROK_AUTHTOKEN: 'ngrok',
        DATABASE_URL: 'postgres://u:pw@db/x',
        ANDROID_HOME: '/opt/android',
      };
      Object.assign(process.env, hostEnv);
      let r;
      try {
        r = await goalRunner(src, {
          goalAs: 'env',
          envName: 'MY_GOAL',
          env: { EXTRA: 'x' },
          passEnv: ['LAB_PASSWORD'],
        }).runGoal(goal, ctx);
      } finally {
        for (const k of Object.keys(hostEnv)) delete process.env[k];
      }
      assert.equal(r.status, 'done');
      assert.deepEqual(JSON.parse(r.output!), {
        argv: [],
        goal,
        task: 'task-1',
        attempt: '2',
        device: 'pixel-7',
        type: 'android',
        extra: 'x',
        key: null,
        token: null,
        gh: null,
        aws: null,
        passed: 'wanted',
        plain: 'berlin',
        pg: null,
        db: null,
        android: '/opt/android',
        ngrok: null,
        dburl: null,
      });
    });

    it('uses FLEET_GOAL when no envName is given', async () => {
      const r = await goalRunner('process.stdout.write(process.env.FLEET_GOAL)', { goalAs: 'env' }).runGoal(
        'the goal',
        recordingContext(),
      );
      assert.equal(r.output, 'the goal');
    });

    it('classifies exit codes: done, retryable, terminal', async () => {
      const run = (code: number) =>
        goalRunner(`console.log('exiting with ${code}'); process.exit(${code})`, {
          exitCodes: { done: [0, 3], retryable: [75, 76] },
        }).runGoal('g', recordingContext());
      const done0 = await run(0);
      assert.equal(done0.status, 'done');
      assert.equal(done0.output, 'exiting with 0\n');
      assert.equal((await run(3)).status, 'done');
      assert.deepEqual(await run(75), {
        status: 'failed',
        retryable: true,
        reason: 'exit_code_75',
        message: '"' + node + '" exited with code 75: exiting with 75',
        output: 'exiting with 75\n',
      });
      const terminal = await run(1);
      assert.equal(terminal.status, 'failed');
      assert.equal(terminal.retryable, false);
      assert.equal(terminal.reason, 'exit_code_1');
    });

    it('a command killed by a signal is a retryable failure', async () => {
      const r = await goalRunner('process.kill(process.pid, "SIGKILL")').runGoal('g', recordingContext());
      assert.equal(r.status, 'failed');
      assert.equal(r.retryable, true);
      assert.equal(r.reason, 'signal_SIGKILL');
    });

    it('reports stdout and stderr lines as progress, in order, after started', async () => {
      const ctx = recordingContext();
      const src = `
        const lines = ['one', 'two', '', '  ', 'three\\r', 'four'];
        (async () => {
          for (const l of lines) { process.stdout.write(l + '\\n'); await new Promise((r) => setTimeout(r, 10)); }
          process.stderr.write('err-line\\n');
          await new Promise((r) => setTimeout(r, 20));
          process.stdout.write('no newline at the end');
        })();`;
      const r = await goalRunner(src).runGoal('g', ctx);
      assert.equal(r.status, 'done');
      assert.deepEqual(ctx.events, [
        'started',
        'progress:one',
        'progress:two',
        'progress:three',
        'progress:four',
        'progress:err-line',
        'progress:no newline at the end',
      ]);
      assert.match(r.output!, /one\ntwo\n[\s\S]*err-line\nno newline at the end$/);
    });

    it('truncates long lines to 500 characters and caps progress lines per second', async () => {
      const ctx = recordingContext();
      const src = `console.log('x'.repeat(2000)); for (let i = 0; i < 300; i++) console.log('line ' + i);`;
      const r = await goalRunner(src, { maxProgressLinesPerSecond: 10 }).runGoal('g', ctx);
      assert.equal(r.status, 'done');
      assert.equal(ctx.lines[0].length, 500);
      assert.ok(ctx.lines[0].endsWith('…'));
      // 301 lines in well under a second: 10 reported, the rest announced as dropped at the end.
      assert.equal(ctx.lines.length, 11, ctx.lines.join('\n'));
      assert.deepEqual(ctx.lines.slice(1, 10), [
        'line 0',
        'line 1',
        'line 2',
        'line 3',
        'line 4',
        'line 5',
        'line 6',
        'line 7',
        'line 8',
      ]);
      assert.equal(ctx.lines[10], '[291 output lines not reported as progress]');
      // The output tail holds the last 4 KiB, ending with the last line.
      assert.ok(Buffer.byteLength(r.output!) <= 4096);
      assert.ok(Buffer.byteLength(r.output!) > 3000);
      assert.ok(r.output!.endsWith('line 299\n'));
    });

    it('fails retryably with spawn_failed when the executable does not exist, without calling started', async () => {
      const ctx = recordingContext();
      const r = await createCommandGoalRunner({
        command: ['/nonexistent/agent'],
        goalAs: 'argument',
        exitCodes,
        killGraceMs: 100,
      }).runGoal('g', ctx);
      assert.equal(r.status, 'failed');
      assert.equal(r.retryable, true);
      assert.equal(r.reason, 'spawn_failed');
      assert.match(r.message!, /ENOENT/);
      assert.equal(ctx.startedCalls, 0);
    });

    it('names a missing or non-directory cwd as the cause when the spawn fails, not the executable', async () => {
      const dir = tmp.make();
      const file = join(dir, 'a-file');
      writeFileSync(file, '');
      for (const [cwd, cause] of [
        [join(dir, 'missing'), 'does not exist'],
        [file, 'is not a directory'],
      ] as const) {
        const ctx = recordingContext();
        const r = await createCommandGoalRunner({
          command: ['/bin/echo'],
          goalAs: 'argument',
          exitCodes,
          killGraceMs: 100,
          cwd,
        }).runGoal('g', ctx);
        assert.deepEqual([r.status, r.retryable, r.reason], ['failed', true, 'spawn_failed'], cwd);
        assert.ok(r.message!.includes(`its working directory (cwd) "${cwd}" ${cause}`), r.message);
        assert.equal(ctx.startedCalls, 0);
      }
      // A missing executable in a good cwd is still named as such.
      const r = await createCommandGoalRunner({
        command: ['/nonexistent/agent'],
        goalAs: 'argument',
        exitCodes,
        killGraceMs: 100,
        cwd: dir,
      }).runGoal('g', recordingContext());
      assert.match(
        r.message!,
        /"\/nonexistent\/agent" could not be started: the executable .*was not found \(spawn \/nonexistent\/agent ENOENT\)/,
      );
    });

    it('fails terminally on a goal Node cannot pass (a NUL byte)', async () => {
      const r = await goalRunner('console.log(1)').runGoal('bad\u0000goal', recordingContext());
      assert.equal(r.status, 'failed');
      assert.equal(r.retryable, false);
      assert.equal(r.reason, 'invalid_argument');
    });

    it('rejects bad options at construction', () => {
      assert.throws(() => goalRunner('1', { command: [] }), /command is empty/);
      assert.throws(() => goalRunner('1', { goalAs: 'env', envName: 'BAD-NAME' }), /invalid environment variable name/);
      assert.throws(() => goalRunner('1', { exitCodes: { done: [0, 1], retryable: [1] } }), /both done and retryable/);
      assert.throws(() => goalRunner('1', { killGraceMs: -1 }), /killGraceMs/);
    });

    it('on abort, kills the whole process group (grandchild included) and fails retryably with reason aborted', async () => {
      const ctx = recordingContext();
      const running = goalRunner(WITH_GRANDCHILD, { killGraceMs: 20_000 }).runGoal('g', ctx);
      await waitFor(() => ctx.lines.some((l) => l.startsWith('pids ')), 10_000, 'the pids line');
      const [leader, grandchild] = ctx.lines[0].split(' ').slice(1).map(Number);
      assert.ok(processAlive(leader) && processAlive(grandchild));
      const t0 = Date.now();
      ctx.controller.abort(new Error('lease lost'));
      const r = await running;
      assert.equal(r.status, 'failed');
      assert.equal(r.retryable, true);
      assert.equal(r.reason, 'aborted');
      assert.match(r.message!, /lease lost/);
      assert.ok(Date.now() - t0 < 15_000, 'SIGTERM sufficed: no wait for the 20 s grace period');
      assert.equal(processAlive(leader), false, 'leader gone');
      assert.equal(processAlive(grandchild), false, 'grandchild gone');
    });

    it('sends SIGKILL to the group after killGraceMs when the command traps SIGTERM', async () => {
      const ctx = recordingContext();
      const src = `process.on('SIGTERM', () => console.log('ignoring SIGTERM'));
        console.log('ready ' + process.pid); setInterval(() => {}, 1000);`;
      const running = goalRunner(src, { killGraceMs: 700 }).runGoal('g', ctx);
      await waitFor(() => ctx.lines.some((l) => l.startsWith('ready ')), 10_000, 'ready');
      const pid = Number(ctx.lines[0].split(' ')[1]);
      const t0 = Date.now();
      ctx.controller.abort();
      const r = await running;
      const elapsed = Date.now() - t0;
      assert.equal(r.reason, 'aborted');
      assert.equal(r.retryable, true);
      assert.ok(elapsed >= 650, `waited the grace period (${elapsed} ms)`);
      assert.ok(elapsed < 10_000, `then killed (${elapsed} ms)`);
      assert.ok(ctx.lines.includes('ignoring SIGTERM'), 'it did get SIGTERM first');
      assert.equal(processAlive(pid), false);
    });

    it('ctx.kill (a lost lease\'s deadline) SIGKILLs the group mid-grace: a command that ignores SIGTERM is gone long before its killGraceMs', async () => {
      const ctx = recordingContext();
      const kill = new AbortController();
      ctx.kill = kill.signal;
      const src = `process.on('SIGTERM', () => console.log('ignoring SIGTERM'));
        console.log('ready ' + process.pid); setInterval(() => {}, 1000);`;
      const running = goalRunner(src, { killGraceMs: 60_000 }).runGoal('g', ctx);
      await waitFor(() => ctx.lines.some((l) => l.startsWith('ready ')), 10_000, 'ready');
      const pid = Number(ctx.lines[0].split(' ')[1]);
      ctx.controller.abort(new Error('lease lost: no heartbeat answered'));
      await waitFor(() => ctx.lines.includes('ignoring SIGTERM'), 10_000, 'SIGTERM first');
      assert.equal(processAlive(pid), true, 'in its grace');
      kill.abort(new Error('lease deadline'));
      const r = await running;
      assert.equal(r.reason, 'aborted');
      assert.match(r.message!, /lease lost/);
      assert.equal(processAlive(pid), false, 'killed, not left for the 60 s grace');
    });

    it('ctx.kill alone stops and kills; it also kills what a command left in its group after it exited', async () => {
      const ctx = recordingContext();
      const kill = new AbortController();
      ctx.kill = kill.signal;
      // The leader exits at once; a grandchild in its group ignores SIGTERM.
      const src = `const { spawn } = require('child_process');
        const g = spawn(process.execPath, ['-e', "process.on('SIGTERM', () => {}); setInterval(() => {}, 1000)"], { stdio: 'ignore' });
        console.log('grandchild ' + g.pid); setTimeout(() => process.exit(0), 300);`;
      const running = goalRunner(src, { killGraceMs: 60_000 }).runGoal('g', ctx);
      await waitFor(() => ctx.lines.some((l) => l.startsWith('grandchild ')), 10_000, 'grandchild');
      const grandchild = Number(ctx.lines[0].split(' ')[1]);
      await new Promise((res) => setTimeout(res, 800)); // the leader is gone; the grace for its group runs
      assert.equal(processAlive(grandchild), true, 'the grandchild is still in its grace');
      kill.abort(new Error('the server no longer has the attempt'));
      await running;
      assert.equal(processAlive(grandchild), false, 'killed at once');
      // Killed before anything started: nothing is spawned.
      const late = recordingContext();
      late.kill = AbortSignal.abort(new Error('gone'));
      const r = await goalRunner('setInterval(() => {}, 1000)').runGoal('g', late);
      assert.equal(r.reason, 'aborted');
      assert.equal(late.startedCalls, 0);
    });

    it('does not start anything when already aborted', async () => {
      const dir = tmp.make();
      const marker = join(dir, 'ran');
      const ctx = recordingContext();
      ctx.controller.abort();
      const r = await goalRunner(`require('fs').writeFileSync(${JSON.stringify(marker)}, '')`).runGoal('g', ctx);
      assert.equal(r.reason, 'aborted');
      assert.equal(ctx.startedCalls, 0);
      assert.equal(existsSync(marker), false);
    });

    it('terminates what the command left running in its group when it exits on its own', async () => {
      const ctx = recordingContext();
      const src = `
        const { spawn } = require('child_process');
        const g = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'inherit' });
        console.log('grandchild ' + g.pid);
        setTimeout(() => process.exit(0), 100);`;
      const r = await goalRunner(src).runGoal('g', ctx);
      assert.equal(r.status, 'done');
      const grandchild = Number(ctx.lines.find((l) => l.startsWith('grandchild '))!.split(' ')[1]);
      assert.equal(processAlive(grandchild), false);
    });

    it('reports the pid (= process group id) through onSpawn', async () => {
      const pids: number[] = [];
      const ctx = recordingContext();
      const src = `const stat = require('fs').readFileSync('/proc/self/stat', 'utf8');
        console.log(process.pid + ' ' + stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);`;
      const r = await goalRunner(src, {
        onSpawn: (pid, c) => {
          assert.equal(c, ctx);
          pids.push(pid);
        },
      }).runGoal('g', ctx);
      assert.equal(r.status, 'done');
      assert.equal(pids.length, 1);
      assert.deepEqual(ctx.lines[0].split(' ').map(Number), [pids[0], pids[0]], 'its own process group');
    });
  });

  describe('step executor', () => {
    const step = (name: string, src: string, timeoutMs?: number): WorkflowStep => ({
      name,
      command: script(src),
      ...(timeoutMs ? { timeoutMs } : {}),
    });

    it('fails a step that overruns its timeoutMs retryably with step_timeout, and kills it', async function () {
      // The step never ends by itself, so a runner that failed to kill it fails by this timeout. No
      // tighter wall-clock bound: in one full CI run on two cores this took over 10 s (the test
      // process stalled), while alone it takes 2.05 s, also with six busy loops beside it.
      this.timeout(30_000);
      const ctx = recordingContext();
      const exec = createCommandStepExecutor({ killGraceMs: 500 });
      const t0 = Date.now();
      const r = await exec(step('hang', 'console.log("pid " + process.pid); setInterval(() => {}, 1000)', 2_000), ctx);
      assert.equal(r.status, 'failed');
      assert.equal(r.retryable, true);
      assert.equal(r.reason, 'step_timeout');
      assert.ok(Date.now() - t0 >= 1_900, 'not before its timeout');
      const pid = Number(ctx.lines[0].split(' ').pop());
      assert.equal(processAlive(pid), false);
      assert.equal(ctx.lines[0], `hang: pid ${pid}`, 'lines carry the step name');
    });

    it('uses defaultStepTimeoutMs for steps without their own', async () => {
      const exec = createCommandStepExecutor({ killGraceMs: 100, defaultStepTimeoutMs: 200 });
      const r = await exec(step('hang', 'setInterval(() => {}, 1000)'), recordingContext());
      assert.equal(r.reason, 'step_timeout');
    });

    it('runs the steps in order and stops at the first failing step', async () => {
      const dir = tmp.make();
      const log = join(dir, 'log');
      const append = (what: string, code = 0) =>
        `require('fs').appendFileSync(${JSON.stringify(log)}, ${JSON.stringify(what)} + ':' + process.env.FLEET_STEP_NAME + '\\n'); process.exit(${code})`;
      const registry = new Map<string, WorkflowStep[]>([
        ['ok', [step('install', append('1')), step('launch', append('2')), step('check', append('3'))]],
        ['broken', [step('install', append('1')), step('launch', append('2', 4)), step('check', append('3'))]],
      ]);
      const runner = createStepsRunner(createCommandStepExecutor({ killGraceMs: 500, exitCodes }), registry);

      const ctx = recordingContext();
      assert.equal((await runner.runDefinition({ name: 'ok' }, ctx)).status, 'done');
      assert.equal(readFileSync(log, 'utf8'), '1:install\n2:launch\n3:check\n');
      assert.equal(ctx.startedCalls, 1);
      assert.deepEqual(ctx.lines, [
        'step 1/3 install: started',
        'step 1/3 install: done',
        'step 2/3 launch: started',
        'step 2/3 launch: done',
        'step 3/3 check: started',
        'step 3/3 check: done',
      ]);

      const broken = await runner.runDefinition({ name: 'broken' }, recordingContext());
      assert.equal(broken.status, 'failed');
      assert.equal(broken.retryable, false);
      assert.equal(broken.reason, 'exit_code_4');
      assert.match(broken.message!, /^step 2\/3 launch failed: step "launch"/);
      assert.equal(readFileSync(log, 'utf8'), '1:install\n2:launch\n3:check\n1:install\n2:launch\n', 'check never ran');

      await assert.rejects(runner.runDefinition({ name: 'missing' }, recordingContext()), UnknownDefinitionError);
    });

    it('stops the running step on abort', async () => {
      const ctx = recordingContext();
      const runner = createStepsRunner(createCommandStepExecutor({ killGraceMs: 500 }));
      const running = runner.runDefinition(
        { name: 'inline', steps: [step('wait', 'console.log("waiting"); setInterval(() => {}, 1000)')] },
        ctx,
      );
      await waitFor(() => ctx.lines.includes('wait: waiting'), 10_000, 'the step to start');
      ctx.controller.abort();
      const r = await running;
      assert.equal(r.reason, 'aborted');
      assert.equal(r.retryable, true);
    });

    it('fails a step without a command terminally', async () => {
      const r = await createCommandStepExecutor({ killGraceMs: 100 })(
        { name: 'empty', command: [] },
        recordingContext(),
      );
      assert.deepEqual([r.status, r.retryable, r.reason], ['failed', false, 'invalid_step']);
    });
  });

  describe('output helpers', () => {
    it('splits lines across chunk and multi-byte boundaries and bounds a line without newline', () => {
      const lines: string[] = [];
      const s = new LineSplitter(10);
      const bytes = Buffer.from('héllo\r\nwörld\n0123456789abcdef\nend');
      for (let i = 0; i < bytes.length; i += 3) s.push(bytes.subarray(i, i + 3), (l) => lines.push(l));
      s.end((l) => lines.push(l));
      assert.deepEqual(lines, ['héllo', 'wörld', '012345678…', 'end']);
    });

    it('keeps only the last bytes of the output, without a broken first character', () => {
      const tail = new OutputTail(8);
      tail.push(Buffer.from('aaaa'));
      tail.push(Buffer.from('€€€€')); // 12 bytes
      assert.equal(tail.text(), '€€');
      const small = new OutputTail(100);
      small.push(Buffer.from('short'));
      assert.equal(small.text(), 'short');
    });

    it('rate-limits per one-second window and announces dropped lines', () => {
      let now = 0;
      const out: string[] = [];
      const gate = new ProgressGate(
        (l) => out.push(l),
        3,
        () => now,
      );
      for (let i = 0; i < 5; i++) gate.line(`a${i}`);
      now = 1_000;
      gate.line('b0');
      gate.line('b1');
      gate.line('b2');
      assert.deepEqual(out, ['a0', 'a1', 'a2', '[2 output lines not reported as progress]', 'b0', 'b1']);
      gate.flush();
      assert.equal(out.length, 7);
      assert.equal(out[6], '[1 output lines not reported as progress]');
      assert.equal(gate.dropped, 3);
    });
  });
});
