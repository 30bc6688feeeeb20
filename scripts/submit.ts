/**
 * `npm run submit -- (--goal G | --definition NAME) [--driver-type T] [--tag X]... [--pool P]
 *   [--priority N] [--task-id ID] [--wait]`
 * A minimal submitter on the typed client, straight to Temporal (the full `fleet` CLI goes through
 * the REST facade). It answers like `fleet submit` does:
 * - times as ISO 8601 (the REST presentation, control-plane/rest/tasks/present.ts);
 * - the CLI's exit codes (control-plane/cli/io.ts): 0 ok/done, 1 task failed (or rejected),
 *   2 usage, validation or a refused request, 3 task cancelled, 4 auth, 5 server or network;
 * - a task id already used for a different request is refused (REST: 409), nothing is submitted;
 *   an identical repeat returns the existing task.
 */
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { exitCodeForTask } from '../control-plane/cli/commands/tasks';
import { ExitCode } from '../control-plane/cli/io';
import {
  FleetClient,
  LIVE_VIEW_TIMEOUT_MS,
  TaskNotFoundError,
  TaskRejectedError,
  ValidationError,
  type SubmitRequest,
} from '../control-plane/client';
import { ConfigError, loadControlPlaneConfig } from '../control-plane/config';
import { connectClient, TemporalSettingsError, temporalSettingsFromEnv } from '../control-plane/connection';
import { signalKeysFromEnv } from '../control-plane/signal-auth';
import { grpcCodes } from '../control-plane/rest/problem';
import { presentTask } from '../control-plane/rest/tasks/present';
import type { TaskView } from '../workflows/types';

export const USAGE =
  'usage: npm run submit -- (--goal G | --definition NAME) [--driver-type T] [--tag X]... [--pool P]\n' +
  '                         [--priority N] [--task-id ID] [--wait]\n' +
  'exit codes: 0 ok/done, 1 task failed, 2 usage, validation or a refused request, 3 task cancelled, 4 auth, 5 server\n';

/** A bad command line: exit 2 with the usage. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** The task id is taken by a task submitted with a different request (REST answers 409). */
export class TaskIdConflictError extends Error {
  override name = 'TaskIdConflictError';
  constructor(
    readonly taskId: string,
    readonly differs: string[],
  ) {
    super(
      `task id ${taskId} was already used for a different request (differs in: ${differs.join(', ')}); ` +
        'nothing was submitted',
    );
  }
}

const GRPC_PERMISSION_DENIED = 7;
const GRPC_UNAUTHENTICATED = 16;

/** The CLI's exit code for an error (as REST would answer it: 400/404/409 -> 2, 429/5xx -> 5). */
export function exitCodeForError(err: unknown): ExitCode {
  if (
    err instanceof UsageError ||
    err instanceof ValidationError ||
    err instanceof TaskRejectedError ||
    err instanceof TaskNotFoundError ||
    err instanceof TaskIdConflictError ||
    err instanceof ConfigError ||
    err instanceof TemporalSettingsError
  )
    return ExitCode.usage;
  const codes = grpcCodes(err);
  if (codes.includes(GRPC_PERMISSION_DENIED) || codes.includes(GRPC_UNAUTHENTICATED)) return ExitCode.auth;
  return ExitCode.server; // QueueFullError (429), Temporal unreachable, anything unexpected
}

export interface SubmitIo {
  stdout: { write(chunk: string): unknown };
  stderr: { write(chunk: string): unknown };
}

export interface Connected {
  fleet: FleetClient;
  close(): Promise<void>;
}

function parse(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      strict: true,
      options: {
        goal: { type: 'string' },
        definition: { type: 'string' },
        'driver-type': { type: 'string' },
        tag: { type: 'string', multiple: true },
        'task-id': { type: 'string' },
        pool: { type: 'string' },
        priority: { type: 'string' },
        wait: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }).values;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** Runs the script: prints JSON lines to stdout, errors to stderr, and returns the exit code. */
export async function submitScript(argv: string[], io: SubmitIo, connect: () => Promise<Connected>): Promise<ExitCode> {
  let conn: Connected | undefined;
  try {
    const values = parse(argv);
    if (values.help) {
      io.stdout.write(USAGE);
      return ExitCode.ok;
    }
    const priority = values.priority;
    if (priority !== undefined && !/^-?\d+$/.test(priority.trim())) {
      throw new UsageError(`--priority must be an integer, got "${priority}"`);
    }
    const request: SubmitRequest = {
      taskId: values['task-id'],
      pool: values.pool,
      goal: values.goal,
      definition: values.definition,
      priority: priority === undefined ? undefined : Number(priority),
      constraints: { driverType: values['driver-type'], tags: values.tag ?? [] },
    };
    conn = await connect();
    const { fleet } = conn;
    const input = fleet.buildInput(request); // ValidationError before anything reaches Temporal
    // A definition named here is the host's: by name, unless the task was submitted with its steps
    // inline (REST), which is different work (FleetClient.requestDifferences).
    const refuseIfDifferent = async (v: TaskView) => {
      const differs = await fleet.requestDifferences(v, input, true);
      if (differs.length > 0) throw new TaskIdConflictError(input.taskId, differs);
    };

    let view: TaskView | undefined;
    if (request.taskId !== undefined) {
      // Only a task that was rejected at admission may be submitted again under its id.
      const existing = await fleet.find(request.taskId, { liveTimeoutMs: LIVE_VIEW_TIMEOUT_MS });
      if (existing && existing.status !== 'rejected') {
        await refuseIfDifferent(existing);
        view = existing;
      }
    }
    if (!view) {
      view = await fleet.submit({ ...request, taskId: input.taskId });
      await refuseIfDifferent(view); // two first submissions racing: this one attached to the other's task
    }
    io.stdout.write(`${JSON.stringify({ taskId: view.taskId, status: view.status })}\n`);
    if (!values.wait) return ExitCode.ok;
    const end = presentTask(await fleet.wait(view.taskId));
    io.stdout.write(
      `${JSON.stringify({ taskId: end.taskId, status: end.status, result: end.result, attempts: end.attempts.length })}\n`,
    );
    return exitCodeForTask(end.status);
  } catch (err) {
    io.stderr.write(`${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}\n`);
    if (err instanceof UsageError) io.stderr.write(USAGE);
    return exitCodeForError(err);
  } finally {
    await conn?.close().catch(() => undefined);
  }
}

if (require.main === module) {
  submitScript(process.argv.slice(2), process, async () => {
    const config = loadControlPlaneConfig();
    const client = await connectClient(temporalSettingsFromEnv(), {
      signalKeys: signalKeysFromEnv(process.env, join(__dirname, '..', '.data', 'signal.key')),
    });
    return { fleet: new FleetClient(client, config), close: () => client.connection.close() };
  }).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      console.error(err);
      process.exitCode = ExitCode.server;
    },
  );
}
