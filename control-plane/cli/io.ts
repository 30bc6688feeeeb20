/** What a command needs from the outside world, injected so handlers run in tests unchanged. */
export interface CliWritable {
  write(chunk: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export interface CliIo {
  fetch: typeof fetch;
  stdout: CliWritable;
  stderr: CliWritable;
  env: Record<string, string | undefined>;
  /** Relative paths (credential and definition files) resolve against it; default process.cwd(). */
  cwd?: string;
}

/** Exit codes: a finished task's outcome, or why the command itself did not succeed. */
export const ExitCode = {
  ok: 0,
  taskFailed: 1,
  usage: 2,
  taskCancelled: 3,
  auth: 4,
  server: 5,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** Bad command line or local input: exit 2 with the message (and the usage line when given). */
export class UsageError extends Error {
  override name = 'UsageError';
  constructor(
    message: string,
    readonly usage?: string,
  ) {
    super(message);
  }
}
