/**
 * Start-up checks of what a host config names on this machine: the executables of its commands and
 * the runner's working directory. A host whose runner cannot start would otherwise report its
 * devices good and assignable and fail every task put on it (`spawn_failed`); a health check that
 * cannot start would keep its device unhealthy with nothing said. These checks make it refuse to
 * start instead, naming the runner, the field and the value.
 *
 * An executable is looked up the way the command runner's `spawn` (libuv) does: a name with a `/`
 * is a path (a relative one from the command's working directory); a bare name is searched in the
 * command's PATH (empty or relative entries from the working directory; `/usr/bin:/bin` when PATH
 * is unset). It must be a regular file with execute permission for this process.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, resolve } from 'node:path';
import type { HostConfig } from './config';

/** libuv's default search path when the environment has no PATH. */
const DEFAULT_PATH = '/usr/bin:/bin';

export interface LookupOptions {
  /** The command's working directory (default: this process's). */
  cwd?: string;
  /** The command's PATH (`undefined`: none set, libuv's default applies). */
  path?: string;
}

/** Why `command` cannot be started as an executable, or undefined when it can. */
export function executableProblem(command: string, opts: LookupOptions = {}): string | undefined {
  const cwd = opts.cwd ?? process.cwd();
  if (command === '') return 'is empty';
  if (command.includes('/')) return fileProblem(resolve(cwd, command));
  const search = opts.path ?? DEFAULT_PATH;
  for (const dir of search.split(delimiter)) {
    if (fileProblem(resolve(cwd, dir || '.', command)) === undefined) return undefined;
  }
  return `is not found on PATH (${search || 'empty'})`;
}

function fileProblem(path: string): string | undefined {
  let st;
  try {
    st = statSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ENOTDIR' ? 'does not exist' : `cannot be read (${code ?? String(err)})`;
  }
  if (st.isDirectory()) return 'is a directory, not an executable file';
  if (!st.isFile()) return 'is not a regular file';
  try {
    accessSync(path, constants.X_OK);
  } catch {
    return 'is not executable (no execute permission for this user)';
  }
  return undefined;
}

/** Why `dir` cannot be a command's working directory, or undefined when it can. */
export function directoryProblem(dir: string): string | undefined {
  let st;
  try {
    st = statSync(resolve(dir));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ENOTDIR' ? 'does not exist' : `cannot be read (${code ?? String(err)})`;
  }
  if (!st.isDirectory()) return 'is not a directory';
  try {
    accessSync(dir, constants.X_OK);
  } catch {
    return 'cannot be entered (no search permission for this user)';
  }
  return undefined;
}

/**
 * Every command of a parsed host config that cannot start on this machine, one line each
 * (`<what>: <field> "<value>" <problem>`); empty when all can. Checked: the command runner's
 * `command[0]` and `cwd`, the command[0] of each configured definition's steps when the command
 * runner runs them (the sim runner reads them as directives), the local driver's
 * `healthCheck.command[0]` and the adb driver's `adbPath`.
 */
export function hostConfigCommandProblems(
  config: Pick<HostConfig, 'runner' | 'definitions' | 'driver'>,
  env: NodeJS.ProcessEnv = process.env,
): string[] {
  const problems: string[] = [];
  const q = JSON.stringify;
  const runner = config.runner;
  if (runner?.type === 'command') {
    // The runner's commands get its `env` over the agent's own (see childProcessEnv).
    const path = runner.env.PATH ?? env.PATH;
    let cwd: string | undefined;
    if (runner.cwd !== undefined) {
      const bad = directoryProblem(runner.cwd);
      if (bad) problems.push(`command runner: runner.cwd ${q(runner.cwd)} ${bad}`);
      else cwd = resolve(runner.cwd);
    }
    // With a bad cwd, paths are not looked up relative to it (the cwd problem says it all).
    const lookup = runner.cwd === undefined || cwd ? { cwd, path } : undefined;
    if (lookup) {
      const bad = executableProblem(runner.command[0], lookup);
      if (bad) problems.push(`command runner: runner.command[0] ${q(runner.command[0])} ${bad}`);
      for (const [name, steps] of Object.entries(config.definitions)) {
        steps.forEach((step, i) => {
          const stepBad = executableProblem(step.command[0], lookup);
          if (stepBad) {
            problems.push(
              `definition ${q(name)} step ${q(step.name)} (command runner): definitions.${name}.${i}.command[0] ${q(step.command[0])} ${stepBad}`,
            );
          }
        });
      }
    }
  }
  const driver = config.driver;
  if (driver.type === 'local' && driver.healthCheck) {
    const cmd = driver.healthCheck.command[0];
    const bad = executableProblem(cmd, { path: env.PATH });
    if (bad) problems.push(`local driver health check: driver.healthCheck.command[0] ${q(cmd)} ${bad}`);
  }
  if (driver.type === 'adb') {
    const bad = executableProblem(driver.adbPath, { path: env.PATH });
    if (bad) problems.push(`adb driver: driver.adbPath ${q(driver.adbPath)} ${bad}`);
  }
  return problems;
}
