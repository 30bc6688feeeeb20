/** Helpers shared by the drivers: bounded argv-only command execution and device-id sanitising. */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { isValidId } from '../../workflows/ids';
import { groupAlive, signalGroup } from '../process-group';

export interface ExecOutcome {
  ok: boolean;
  /** Exit code, when the process exited on its own. */
  code?: number;
  stdout: string;
  stderr: string;
  /** Why it did not succeed: 'not_found', 'timeout', 'maxBuffer', 'exit_code_<n>', 'signal_<SIG>' or the spawn error code. */
  failure?: string;
  error?: Error;
}

/**
 * Runs argv (never through a shell) with a hard timeout and bounded output. It runs in its own
 * process group (`detached`), like the command runner's commands: when the timeout expires the
 * whole group gets SIGKILL, so a check that hangs in a child (`sh -c "sleep 100"`) leaves nothing
 * behind, and whatever the command left running in its group when it ended is killed too. Never
 * rejects: the outcome says what happened.
 */
export function execArgv(
  argv: readonly string[],
  opts: { timeoutMs: number; maxBuffer?: number; env?: NodeJS.ProcessEnv },
): Promise<ExecOutcome> {
  return new Promise((resolve) => {
    if (argv.length === 0) {
      resolve({ ok: false, stdout: '', stderr: '', failure: 'empty_command' });
      return;
    }
    const maxBuffer = opts.maxBuffer ?? 1024 * 1024;
    let child: ChildProcess;
    try {
      // execFile cannot start a process group (it drops `detached`), hence spawn.
      child = spawn(argv[0], argv.slice(1), {
        detached: true,
        shell: false,
        stdio: ['ignore', 'pipe', 'pipe'],
        windowsHide: true,
        env: opts.env,
      });
    } catch (err) {
      // Synchronous spawn errors (e.g. a NUL byte in an argument).
      resolve({ ok: false, stdout: '', stderr: '', failure: 'invalid_argument', error: err as Error });
      return;
    }
    const pgid = child.pid;
    const out = { stdout: '', stderr: '' };
    let size = 0;
    let failure: string | undefined;
    let error: Error | undefined;
    let settled = false;
    const killGroup = () => {
      if (pgid !== undefined) signalGroup(pgid, 'SIGKILL');
    };
    const timer = setTimeout(() => {
      failure ??= 'timeout';
      killGroup();
    }, opts.timeoutMs);
    const collect = (stream: 'stdout' | 'stderr') => (chunk: string) => {
      size += Buffer.byteLength(chunk);
      if (size > maxBuffer) {
        failure ??= 'maxBuffer';
        killGroup();
        return;
      }
      out[stream] += chunk;
    };
    child.stdout!.setEncoding('utf8').on('data', collect('stdout'));
    child.stderr!.setEncoding('utf8').on('data', collect('stderr'));
    const settle = (r: ExecOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(r);
    };
    child.once('error', (err: NodeJS.ErrnoException) => {
      if (pgid !== undefined) return; // after a spawn, 'close' decides
      settle({
        ok: false,
        ...out,
        failure: err.code === 'ENOENT' ? 'not_found' : (err.code ?? 'error'),
        error: err,
      });
    });
    child.once('exit', () => {
      // The leader is done: whatever it left running in its group goes too (and its pipes close).
      if (pgid !== undefined && groupAlive(pgid)) killGroup();
    });
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
      if (pgid === undefined) return;
      if (!failure && code === 0) {
        settle({ ok: true, code: 0, ...out });
        return;
      }
      if (!failure) {
        failure = code !== null ? `exit_code_${code}` : `signal_${signal ?? 'unknown'}`;
        error = new Error(
          `${argv[0]} ${failure === `exit_code_${code}` ? `exited with code ${code}` : `was killed by ${signal}`}`,
        );
      } else {
        error = new Error(
          failure === 'timeout'
            ? `${argv[0]} timed out after ${opts.timeoutMs} ms`
            : `${argv[0]} wrote more than ${maxBuffer} bytes`,
        );
      }
      settle({ ok: false, code: code ?? undefined, ...out, failure, error });
    });
  });
}

/**
 * Turns any string into a valid device id (see workflows/ids.ts): invalid characters become '-',
 * leading characters that are not letters or digits are dropped, and the result is cut to 128
 * characters. When anything had to change and `disambiguate` is set, a short hash of the original
 * is appended so that two different inputs cannot collapse into the same id.
 */
export function toValidId(raw: string, fallback: string, disambiguate = false): string {
  const input: string = raw;
  if (isValidId(raw)) return raw;
  let id = input
    .replace(/[^A-Za-z0-9._:-]/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '')
    .replace(/-+/g, '-');
  if (disambiguate) {
    const hash = createHash('sha256').update(input).digest('hex').slice(0, 8);
    id = `${id.slice(0, 119)}${id ? '-' : ''}${hash}`;
  }
  id = id.slice(0, 128);
  return isValidId(id) ? id : fallback;
}

/** Runs `fn` over `items` with at most `limit` calls in flight; results keep the input order. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  return out;
}

/**
 * Names that look like secrets: PASSWORD, PASSWD, PASSPHRASE or SECRET anywhere in the name; TOKEN(S)
 * at the end of a word (`GITHUB_TOKEN`, `NGROK_AUTHTOKEN`, `OAUTH_TOKEN_URL`); API_KEY / APIKEY,
 * ACCESS_KEY(_ID), PRIVATE_KEY, SIGNING_KEY or CREDENTIAL(S) as a whole word between underscores; a
 * name ending in _PASS, _PWD or _PAT. Case does not matter.
 */
const SECRET_LIKE = [
  /PASSWORD|PASSWD|PASSPHRASE|SECRET/i,
  /TOKENS?(_|$)/i,
  /(^|_)(API_?KEYS?|ACCESS_KEY(_ID)?|PRIVATE_KEY|SIGNING_KEY|CREDENTIALS?)(_|$)/i,
  /_(PASS|PWD|PAT)$/i,
];
/** A URL with a password in it (`postgres://user:pass@host/db`), whatever its variable's name. */
const URL_WITH_PASSWORD = /^[a-z][a-z0-9+.-]*:\/\/[^/\s:@]*:[^/\s@]+@/i;

/** The host agent's own settings: the Temporal connection (API key, TLS key paths) and FLEET_*. */
const agentOwn = (name: string): boolean => /^(TEMPORAL|FLEET)_/i.test(name);

/** Whether the host agent keeps a variable of its own environment from the task commands it starts. */
export function withheldFromCommands(name: string, value = ''): boolean {
  return agentOwn(name) || SECRET_LIKE.some((re) => re.test(name)) || URL_WITH_PASSWORD.test(value);
}

function inherited(keep: (name: string, value: string) => boolean): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && keep(k, v)) env[k] = v;
  return env;
}

/**
 * The environment of a task's commands (the command runner): the host agent's own environment
 * without what a device command has no business reading, because a command's output goes into the
 * task's result (history, REST): the agent's own settings (`TEMPORAL_*`, `FLEET_*`: the CLI's API
 * token, the host's config path) and names that look like secrets (SECRET_LIKE), except the names
 * in `pass`; then `extra` (the runner's configured `env` and the task's own variables).
 */
export function childProcessEnv(extra: Record<string, string> = {}, pass: readonly string[] = []): NodeJS.ProcessEnv {
  return { ...inherited((k, v) => pass.includes(k) || !withheldFromCommands(k, v)), ...extra };
}

/**
 * The environment of the drivers' own commands (discovery, health checks): the host agent's
 * without its own settings (`TEMPORAL_*`, `FLEET_*`). Their output stays on the host, so other
 * variables (a device farm's API token, say) pass.
 */
export function driverProcessEnv(): NodeJS.ProcessEnv {
  return inherited((k) => !agentOwn(k));
}
