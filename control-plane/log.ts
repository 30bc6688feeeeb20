/**
 * Structured logs: one JSON object per line on stdout, `{ time, level, component, message, ...fields }`.
 * Fields carry the fleet's ids (taskId, hostId, deviceId, pool) so a log pipeline can filter on them.
 * `SdkJsonLogger` adapts it to the Temporal SDK's Logger, so `Runtime.install({ logger })` writes the
 * SDK's own logs (and workflow/activity logs, with the ids derived from the workflow ID) the same way.
 */
import type { LogLevel, LogMetadata, Logger as SdkLogger } from '@temporalio/common';

export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
const RANK: Record<Level, number> = { trace: 0, debug: 1, info: 2, warn: 3, error: 4 };

export type Fields = Record<string, unknown>;

export interface Log {
  trace(message: string, fields?: Fields): void;
  debug(message: string, fields?: Fields): void;
  info(message: string, fields?: Fields): void;
  warn(message: string, fields?: Fields): void;
  error(message: string, fields?: Fields): void;
  /** A logger that adds these fields to every line. */
  child(fields: Fields): Log;
}

export interface LogOptions {
  /** Lines below this level are dropped (default: FLEET_LOG_LEVEL, else info). */
  level?: Level;
  /** Where lines go (default: process.stdout). */
  write?: (line: string) => void;
  now?: () => Date;
}

export function parseLevel(raw: string | undefined, fallback: Level = 'info'): Level {
  const l = raw?.toLowerCase();
  return l && Object.hasOwn(RANK, l) ? (l as Level) : fallback;
}

/**
 * FLEET_LOG_LEVEL (or `raw`) as a level, strictly: unset or empty is `fallback`, anything that is not
 * a level is an error naming the value (for a process that checks it at start-up, instead of
 * `parseLevel`'s silent fallback).
 */
export function parseLevelStrict(
  raw: string | undefined = process.env.FLEET_LOG_LEVEL,
  fallback: Level = 'info',
  name = 'FLEET_LOG_LEVEL',
): Level {
  if (raw === undefined || raw === '') return fallback;
  const l = raw.toLowerCase();
  if (Object.hasOwn(RANK, l)) return l as Level;
  throw new Error(`invalid ${name} ${JSON.stringify(raw)}: expected one of ${Object.keys(RANK).join(', ')}`);
}

/** Errors become `{ name, message }` (stack only at debug); bigints become strings; cycles are cut. */
function jsonSafe(value: unknown, withStack: boolean): unknown {
  const seen = new WeakSet<object>();
  const walk = (v: unknown): unknown => {
    if (v instanceof Error) {
      return { name: v.name, message: v.message, ...(withStack && v.stack ? { stack: v.stack } : {}) };
    }
    if (typeof v === 'bigint') return v.toString();
    if (v instanceof Date) return v.toISOString();
    if (v && typeof v === 'object') {
      if (seen.has(v)) return '[circular]';
      seen.add(v);
      if (Array.isArray(v)) return v.map(walk);
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    }
    return v;
  };
  return walk(value);
}

export function createLog(component: string, base: Fields = {}, opts: LogOptions = {}): Log {
  const min = RANK[opts.level ?? parseLevel(process.env.FLEET_LOG_LEVEL)];
  const write = opts.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  const now = opts.now ?? (() => new Date());
  const emit = (level: Level, message: string, fields: Fields = {}) => {
    if (RANK[level] < min) return;
    const safe = jsonSafe({ ...base, ...fields }, min <= RANK.debug) as Fields;
    // The fixed keys come first and a field of the same name never overwrites them.
    for (const k of HEAD) delete safe[k];
    write(JSON.stringify({ time: now().toISOString(), level, component, message, ...safe }));
  };
  return {
    trace: (m, f) => emit('trace', m, f),
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    child: (fields) => createLog(component, { ...base, ...fields }, opts),
  };
}

const HEAD = ['time', 'level', 'component', 'message'];

/** The fleet ids encoded in a workflow ID (see workflows/ids.ts). */
export function idsFromWorkflowId(workflowId: unknown): Fields {
  if (typeof workflowId !== 'string') return {};
  const [kind, a, b] = workflowId.split('/');
  if (kind === 'task' && a) return { taskId: workflowId.slice('task/'.length) };
  if (kind === 'device' && a && b) return { hostId: a, deviceId: b };
  if (kind === 'host' && a) return { hostId: a };
  if (kind === 'scheduler' && a) return { pool: a };
  return {};
}

const SDK_LEVEL: Record<LogLevel, Level> = {
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'info',
  WARN: 'warn',
  ERROR: 'error',
};

/** The Temporal SDK's Logger interface over `createLog`: SDK, workflow and activity logs as JSON lines. */
export class SdkJsonLogger implements SdkLogger {
  private readonly out: Log;
  constructor(component = 'temporal', opts: LogOptions = {}) {
    this.out = createLog(component, {}, opts);
  }
  log(level: LogLevel, message: string, meta: LogMetadata = {}): void {
    // An activity's task token completes it on the server's say-so alone: never in a log. The SDK
    // puts it in every activity log line, and the whole task (token included) in some errors.
    const { taskToken: _token, task: _task, ...rest } = meta;
    const fields: Fields = { ...rest, ...idsFromWorkflowId(meta.workflowId) };
    // A host's worker runs activities only, on purpose: not worth a warning at every start.
    const expected = level === 'WARN' && message.startsWith('No workflows registered, not polling for workflow tasks');
    this.out[expected ? 'debug' : (SDK_LEVEL[level] ?? 'info')](message, fields);
  }
  trace(message: string, meta?: LogMetadata): void {
    this.log('TRACE', message, meta);
  }
  debug(message: string, meta?: LogMetadata): void {
    this.log('DEBUG', message, meta);
  }
  info(message: string, meta?: LogMetadata): void {
    this.log('INFO', message, meta);
  }
  warn(message: string, meta?: LogMetadata): void {
    this.log('WARN', message, meta);
  }
  error(message: string, meta?: LogMetadata): void {
    this.log('ERROR', message, meta);
  }
}

/** An error with its causes ("Workflow Update failed" alone does not say the host was refused, or why). */
export function describeError(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    parts.push(e instanceof Error ? `${e.name}: ${e.message}` : String(e));
    e = (e as { cause?: unknown }).cause;
  }
  return parts.join(' <- ');
}
