/**
 * Runners that execute real commands: a goal runner (one configured argv, the goal appended as the
 * last argument or put in an environment variable) and a step executor for `createStepsRunner`
 * (each step's own argv).
 *
 * Every command is started from an argv array, never through a shell, in its own process group
 * (`detached: true`). The run owns that group: on abort or timeout the whole group gets SIGTERM,
 * then SIGKILL after `killGraceMs` (or as soon as `ctx.kill` aborts: a lost lease leaves less time
 * than that); when the command exits on its own, whatever it left running in
 * its group is terminated the same way, so nothing outlives the run on the device. (A process that
 * moves itself to another group or session, e.g. with setsid, escapes this; so does everything when
 * the host agent itself is SIGKILLed, which is what the journal's pid is for: see
 * `terminateProcessGroup`.)
 *
 * Environment: the host agent's own environment without `TEMPORAL_*`, `FLEET_*` and secret-looking
 * names (`childProcessEnv`; `passEnv` names pass anyway), then `env` from the options, then FLEET_TASK_ID, FLEET_ATTEMPT, FLEET_DEVICE_ID,
 * FLEET_DRIVER_TYPE (and FLEET_STEP_NAME for steps), then the goal variable.
 *
 * Output: stdout and stderr are split into lines (at \n or \r; blank lines skipped) and each line is
 * reported with ctx.progress(line), cut to `maxLineLength` (500) characters. At most
 * `maxProgressLinesPerSecond` (default 20) lines are reported per one-second window; the rest are
 * counted and announced as "[N output lines not reported as progress]" with the next reported line
 * and at the end. The last 4 KiB of the raw output (both streams, in arrival order) are the
 * result's `output`; its last line is also in a failure's `message`.
 *
 * Results:
 *   - exit code in `exitCodes.done` → done; in `exitCodes.retryable` → failed, retryable; any other
 *     code → failed, terminal; reason `exit_code_<n>`;
 *   - killed by a signal it did not get from us → failed, retryable, reason `signal_<NAME>`;
 *   - ctx.signal aborted → failed, retryable, reason `aborted` (resolved once the group is gone);
 *   - step timeout → failed, retryable, reason `step_timeout`;
 *   - the executable cannot be started → failed, retryable, reason `spawn_failed` (another host may
 *     be configured right), its message naming a missing or unusable `cwd` when that is the cause;
 *     an argument or variable Node refuses (a NUL byte) → terminal, `invalid_argument`. (The host
 *     agent checks the configured executables and cwd at start-up: host-worker/preflight.ts.)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { statSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import type { WorkflowStep } from '../workflows/types';
import { childProcessEnv } from './drivers/util';
import { groupAlive, signalGroup, terminateProcessGroup } from './process-group';
import type { GoalRunner, RunContext, RunResult } from './runners';

export interface ExitCodes {
  done: number[];
  retryable: number[];
}

export const DEFAULT_EXIT_CODES: ExitCodes = { done: [0], retryable: [] };
export const DEFAULT_GOAL_ENV_NAME = 'FLEET_GOAL';
export const OUTPUT_TAIL_BYTES = 4096;
export const DEFAULT_MAX_LINE_LENGTH = 500;
export const DEFAULT_MAX_PROGRESS_LINES_PER_SECOND = 20;

export interface CommandOptions {
  /** Exit-code classification; default: 0 is done, everything else terminal. */
  exitCodes?: ExitCodes;
  /** Between SIGTERM and SIGKILL to the process group. */
  killGraceMs: number;
  cwd?: string;
  env?: Record<string, string>;
  /** Variables of the host agent's environment passed on although they look like secrets. */
  passEnv?: readonly string[];
  maxLineLength?: number;
  maxProgressLinesPerSecond?: number;
  /** Called once the process is running (e.g. to journal its pid, which is also its process group id). */
  onSpawn?(pid: number, ctx: RunContext): void;
}

export interface CommandGoalRunnerOptions extends CommandOptions {
  /** argv; the executable is command[0]. Put '--' last if the goal must never be read as an option. */
  command: string[];
  goalAs: 'argument' | 'env';
  /** The variable holding the goal when goalAs is 'env'. Default FLEET_GOAL. */
  envName?: string;
  exitCodes: ExitCodes;
}

export interface CommandStepExecutorOptions extends CommandOptions {
  /** For steps without their own timeoutMs; none by default (the task's execution timeout still applies). */
  defaultStepTimeoutMs?: number;
}

export type StepExecutor = (step: WorkflowStep, ctx: RunContext) => Promise<RunResult>;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

function checkOptions(opts: CommandOptions): Required<Pick<CommandOptions, 'exitCodes'>> {
  const exitCodes = opts.exitCodes ?? DEFAULT_EXIT_CODES;
  const overlap = exitCodes.done.filter((c) => exitCodes.retryable.includes(c));
  if (overlap.length) throw new Error(`exit codes ${overlap.join(', ')} are both done and retryable`);
  if (!(opts.killGraceMs >= 0)) throw new Error(`killGraceMs must be >= 0, got ${opts.killGraceMs}`);
  if (opts.maxLineLength !== undefined && !(opts.maxLineLength >= 2)) throw new Error('maxLineLength must be >= 2');
  if (opts.maxProgressLinesPerSecond !== undefined && !(opts.maxProgressLinesPerSecond >= 1)) {
    throw new Error('maxProgressLinesPerSecond must be >= 1');
  }
  return { exitCodes };
}

export function createCommandGoalRunner(opts: CommandGoalRunnerOptions): GoalRunner {
  const { exitCodes } = checkOptions(opts);
  if (opts.command.length === 0) throw new Error('command runner: command is empty');
  const envName = opts.envName ?? DEFAULT_GOAL_ENV_NAME;
  if (opts.goalAs === 'env' && !ENV_NAME.test(envName))
    throw new Error(`invalid environment variable name "${envName}"`);
  const command = [...opts.command];
  return {
    async runGoal(goal, ctx) {
      const argv = opts.goalAs === 'argument' ? [...command, goal] : command;
      const env = childProcessEnv(
        {
          ...opts.env,
          ...fleetEnv(ctx),
          ...(opts.goalAs === 'env' ? { [envName]: goal } : {}),
        },
        opts.passEnv,
      );
      const r = await runProcess(argv, {
        ...opts,
        env,
        signal: ctx.signal,
        kill: ctx.kill,
        onSpawn: (pid) => {
          ctx.started();
          opts.onSpawn?.(pid, ctx);
        },
        onSurvivors: (pgid) => ctx.leftBehind?.(pgid),
        onLine: (line) => ctx.progress(line),
      });
      return toRunResult(r, exitCodes, `"${command[0]}"`);
    },
  };
}

/** A step executor for `createStepsRunner`: each step's argv, with its own timeout. */
export function createCommandStepExecutor(opts: CommandStepExecutorOptions): StepExecutor {
  const { exitCodes } = checkOptions(opts);
  return async (step, ctx) => {
    if (step.command.length === 0) {
      return {
        status: 'failed',
        retryable: false,
        reason: 'invalid_step',
        message: `step "${step.name}" has no command`,
      };
    }
    const env = childProcessEnv({ ...opts.env, ...fleetEnv(ctx), FLEET_STEP_NAME: step.name }, opts.passEnv);
    const r = await runProcess(step.command, {
      ...opts,
      env,
      signal: ctx.signal,
      kill: ctx.kill,
      timeoutMs: step.timeoutMs ?? opts.defaultStepTimeoutMs,
      onSpawn: (pid) => opts.onSpawn?.(pid, ctx),
      onSurvivors: (pgid) => ctx.leftBehind?.(pgid),
      onLine: (line) => ctx.progress(`${step.name}: ${line}`),
    });
    return toRunResult(r, exitCodes, `step "${step.name}" ("${step.command[0]}")`);
  };
}

function fleetEnv(ctx: RunContext): Record<string, string> {
  return {
    ...runnerMarks({ taskId: ctx.taskId, attempt: ctx.attempt, deviceId: ctx.device.deviceId }),
    FLEET_DRIVER_TYPE: ctx.device.driverType,
  };
}

/**
 * The variables that name an attempt in its runner's environment (and so in every process it starts
 * that keeps its environment): how a restarted host agent finds a runner whose pid its previous
 * process did not live to journal (host.ts `reconcileJournal`).
 */
export function runnerMarks(a: { taskId: string; attempt: number; deviceId: string }): Record<string, string> {
  return { FLEET_TASK_ID: a.taskId, FLEET_ATTEMPT: String(a.attempt), FLEET_DEVICE_ID: a.deviceId };
}

// ---------------------------------------------------------------------------------------------
// One process group, from spawn to the last member gone.

export type ProcessEnd =
  | { end: 'exit'; code: number }
  | { end: 'signal'; signal: string }
  | { end: 'aborted'; reason: unknown }
  | { end: 'timeout'; timeoutMs: number }
  | { end: 'spawn_failed'; error: Error };

export type ProcessResult = ProcessEnd & {
  /** The last OUTPUT_TAIL_BYTES of stdout and stderr. */
  tail: string;
  pid?: number;
  /** Output lines not reported as progress (rate limit). */
  droppedLines: number;
};

export interface RunProcessOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  killGraceMs: number;
  timeoutMs?: number;
  signal: AbortSignal;
  /** SIGKILL to the group when this aborts, whatever stage the stop is at (a stop too, if none began). */
  kill?: AbortSignal;
  maxLineLength?: number;
  maxProgressLinesPerSecond?: number;
  onSpawn?(pid: number): void;
  /** The leader has exited and members of its group outlived SIGKILL: `runProcess` resolves anyway. */
  onSurvivors?(pgid: number): void;
  onLine?(line: string): void;
}

/** Runs argv in its own process group and resolves when the command and its whole group are gone. Never rejects. */
export function runProcess(argv: readonly string[], o: RunProcessOptions): Promise<ProcessResult> {
  return new Promise((resolve) => {
    const tail = new OutputTail(OUTPUT_TAIL_BYTES);
    const gate = new ProgressGate(
      o.onLine ?? (() => undefined),
      o.maxProgressLinesPerSecond ?? DEFAULT_MAX_PROGRESS_LINES_PER_SECOND,
    );
    const maxLineLength = o.maxLineLength ?? DEFAULT_MAX_LINE_LENGTH;
    if (o.signal.aborted || o.kill?.aborted) {
      resolve({ end: 'aborted', reason: o.signal.reason ?? o.kill?.reason, tail: '', droppedLines: 0 });
      return;
    }
    let child: ChildProcess;
    try {
      child = spawn(argv[0], argv.slice(1), {
        cwd: o.cwd,
        env: o.env,
        detached: true,
        shell: false,
        stdio: ['ignore', 'pipe', 'pipe'],
        windowsHide: true,
      });
    } catch (err) {
      resolve({ end: 'spawn_failed', error: explainSpawnError(err as Error, o.cwd), tail: '', droppedLines: 0 });
      return;
    }
    const pid = child.pid;
    let settled = false;
    let exited = false;
    let stopping: ProcessEnd | undefined;
    let terminating: Promise<unknown> | undefined;
    let timer: NodeJS.Timeout | undefined;
    const closed = new Promise<void>((r) => child.once('close', () => r()));
    const splitters = [new LineSplitter(maxLineLength), new LineSplitter(maxLineLength)];
    const emit = (line: string) => gate.line(line);
    child.stdout!.on('data', (b: Buffer) => {
      tail.push(b);
      splitters[0].push(b, emit);
    });
    child.stderr!.on('data', (b: Buffer) => {
      tail.push(b);
      splitters[1].push(b, emit);
    });

    const settle = (end: ProcessEnd) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      o.signal.removeEventListener('abort', onAbort);
      o.kill?.removeEventListener('abort', onKill);
      for (const s of splitters) s.end(emit);
      gate.flush();
      resolve({ ...end, tail: tail.text(), pid, droppedLines: gate.dropped });
    };
    const stop = (why: ProcessEnd) => {
      if (exited || stopping || pid === undefined) return;
      stopping = why;
      terminating ??= terminateProcessGroup(pid, o.killGraceMs);
    };
    const onAbort = () => stop({ end: 'aborted', reason: o.signal.reason });
    const onKill = () => {
      stop({ end: 'aborted', reason: o.signal.reason ?? o.kill?.reason });
      if (pid !== undefined && groupAlive(pid)) signalGroup(pid, 'SIGKILL');
    };
    o.signal.addEventListener('abort', onAbort, { once: true });
    o.kill?.addEventListener('abort', onKill, { once: true });

    child.once('error', (err) => {
      // After a successful spawn, errors come from kill() and the like: the exit event still decides.
      if (pid === undefined) settle({ end: 'spawn_failed', error: explainSpawnError(err, o.cwd) });
    });
    child.once('spawn', () => {
      if (stopping) return;
      if (o.timeoutMs !== undefined) {
        const ms = o.timeoutMs;
        timer = setTimeout(() => stop({ end: 'timeout', timeoutMs: ms }), ms);
      }
      o.onSpawn?.(pid!);
    });
    child.once('exit', (code, signal) => {
      if (pid === undefined) return;
      exited = true;
      clearTimeout(timer);
      void (async () => {
        // The leader is gone; what it left in its group goes too.
        if (!terminating && groupAlive(pid)) terminating = terminateProcessGroup(pid, o.killGraceMs);
        if ((await terminating) === false && groupAlive(pid)) o.onSurvivors?.(pid);
        // All writers are gone, so the pipes close; the bound only guards against a member we could not kill.
        await Promise.race([closed, delay(2_000)]);
        child.stdout?.destroy();
        child.stderr?.destroy();
        if (stopping) settle(stopping);
        else if (signal) settle({ end: 'signal', signal });
        else settle({ end: 'exit', code: code ?? -1 });
      })();
    });
  });
}

/**
 * A spawn error that names its real cause. Node reports a missing working directory as the
 * executable's ENOENT (`spawn /bin/echo ENOENT`), and one that is a file as a bare `spawn ENOTDIR`:
 * when the spawn fails so and `cwd` is not a usable directory, the message says so (Node's words
 * kept in parentheses, and its code on the error).
 */
export function explainSpawnError(err: Error, cwd: string | undefined): Error {
  const code = (err as NodeJS.ErrnoException).code;
  let why: string | undefined;
  if (cwd !== undefined && (code === 'ENOENT' || code === 'ENOTDIR' || code === 'EACCES')) {
    try {
      if (!statSync(cwd).isDirectory()) why = `its working directory (cwd) "${cwd}" is not a directory`;
    } catch (e) {
      const c = (e as NodeJS.ErrnoException).code;
      why =
        c === 'ENOENT' || c === 'ENOTDIR'
          ? `its working directory (cwd) "${cwd}" does not exist`
          : `its working directory (cwd) "${cwd}" cannot be used (${c ?? String(e)})`;
    }
  }
  if (!why && code === 'ENOENT') why = 'the executable (or the interpreter its #! line names) was not found';
  if (!why) return err;
  return Object.assign(new Error(`${why} (${err.message})`, { cause: err }), { code });
}

/** Turns a process result into a runner result (see the module comment). */
export function toRunResult(r: ProcessResult, exitCodes: ExitCodes, what: string): RunResult {
  const output = r.tail || undefined;
  const last = lastLine(r.tail);
  const withLast = (m: string) => (last ? `${m}: ${last}` : m);
  switch (r.end) {
    case 'exit':
      if (exitCodes.done.includes(r.code)) return { status: 'done', output };
      return {
        status: 'failed',
        retryable: exitCodes.retryable.includes(r.code),
        reason: `exit_code_${r.code}`,
        message: withLast(`${what} exited with code ${r.code}`),
        output,
      };
    case 'signal':
      return {
        status: 'failed',
        retryable: true,
        reason: `signal_${r.signal}`,
        message: withLast(`${what} was killed by ${r.signal}`),
        output,
      };
    case 'aborted':
      return {
        status: 'failed',
        retryable: true,
        reason: 'aborted',
        message: `${what} aborted (${describe(r.reason)})`,
        output,
      };
    case 'timeout':
      return {
        status: 'failed',
        retryable: true,
        reason: 'step_timeout',
        message: withLast(`${what} timed out after ${r.timeoutMs} ms`),
        output,
      };
    case 'spawn_failed': {
      const code = (r.error as NodeJS.ErrnoException).code;
      const invalid = code === 'ERR_INVALID_ARG_VALUE' || code === 'ERR_INVALID_ARG_TYPE';
      return {
        status: 'failed',
        retryable: !invalid,
        reason: invalid ? 'invalid_argument' : 'spawn_failed',
        message: `${what} could not be started: ${r.error.message}`,
      };
    }
  }
}

function describe(reason: unknown): string {
  if (reason instanceof Error) return reason.message || reason.name;
  return String(reason ?? 'aborted');
}

function lastLine(text: string): string {
  const lines = text.split(/[\r\n]+/).filter((l) => l.trim());
  return truncate(lines[lines.length - 1] ?? '', 200);
}

// ---------------------------------------------------------------------------------------------
// Process groups: host-worker/process-group.ts (the drivers' commands use them too).

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

// ---------------------------------------------------------------------------------------------
// Output handling.

function truncate(s: string, max: number): string {
  if (s.length <= max) return s;
  let cut = s.slice(0, max - 1);
  if (/[\uD800-\uDBFF]$/.test(cut)) cut = cut.slice(0, -1);
  return `${cut}…`;
}

/** Splits a byte stream into lines at \n or \r, keeping at most maxLength + 1 characters of a pending line. */
export class LineSplitter {
  private readonly decoder = new StringDecoder('utf8');
  private pending = '';

  constructor(private readonly maxLength: number) {}

  push(chunk: Buffer, emit: (line: string) => void): void {
    let text = this.decoder.write(chunk);
    for (let i = text.search(/[\r\n]/); i !== -1; i = text.search(/[\r\n]/)) {
      this.append(text.slice(0, i));
      text = text.slice(i + 1);
      this.take(emit);
    }
    this.append(text);
  }

  end(emit: (line: string) => void): void {
    this.append(this.decoder.end());
    this.take(emit);
  }

  private append(s: string): void {
    const room = this.maxLength + 1 - this.pending.length;
    if (room > 0) this.pending += s.slice(0, room);
  }

  private take(emit: (line: string) => void): void {
    const line = this.pending;
    this.pending = '';
    if (line.trim()) emit(truncate(line, this.maxLength));
  }
}

/** At most `perSecond` lines per one-second window; the rest are counted and announced. */
export class ProgressGate {
  dropped = 0;
  private unannounced = 0;
  private windowStart = 0;
  private inWindow = 0;

  constructor(
    private readonly emit: (line: string) => void,
    private readonly perSecond: number,
    private readonly now: () => number = Date.now,
  ) {}

  line(line: string): void {
    const t = this.now();
    if (t - this.windowStart >= 1_000) {
      this.windowStart = t;
      this.inWindow = 0;
    }
    if (this.inWindow >= this.perSecond) {
      this.dropped++;
      this.unannounced++;
      return;
    }
    if (this.unannounced > 0 && this.inWindow + 1 < this.perSecond) {
      this.announce();
      this.inWindow++;
    }
    this.inWindow++;
    this.emit(line);
  }

  /** Announces lines dropped since the last announcement (called at the end, outside the limit). */
  flush(): void {
    if (this.unannounced > 0) this.announce();
  }

  private announce(): void {
    this.emit(`[${this.unannounced} output lines not reported as progress]`);
    this.unannounced = 0;
  }
}

/** The last `max` bytes written, decoded without a broken first character. */
export class OutputTail {
  private buf = Buffer.alloc(0);

  constructor(private readonly max: number) {}

  push(chunk: Buffer): void {
    this.buf = Buffer.concat([this.buf, chunk]);
    if (this.buf.length > 2 * this.max) this.buf = this.buf.subarray(this.buf.length - this.max);
  }

  text(): string {
    let b = this.buf.length > this.max ? this.buf.subarray(this.buf.length - this.max) : this.buf;
    let skip = 0;
    while (skip < b.length && skip < 3 && (b[skip] & 0xc0) === 0x80) skip++;
    b = b.subarray(skip);
    return b.toString('utf8');
  }
}
