/** submit (with --wait), get, list, cancel. */
import type { TaskList, TaskResource } from '../../rest/tasks/schemas';
import { ApiError, query, readJson, seg, type ProblemBody } from '../api';
import { arg, flag, int, str, strs, type Ctx } from '../context';
import { progressLine, taskDetails, taskTable } from '../format';
import { ExitCode } from '../io';
import { readSse } from '../sse';

const TERMINAL = new Set(['done', 'failed', 'cancelled', 'rejected']);

/** The exit code of a finished task: 0 done, 1 failed (or rejected), 3 cancelled. */
export function exitCodeForTask(status: string): ExitCode {
  if (status === 'done') return ExitCode.ok;
  if (status === 'cancelled') return ExitCode.taskCancelled;
  return ExitCode.taskFailed;
}

export async function submit(ctx: Ctx): Promise<ExitCode> {
  const tags = strs(ctx, 'tag');
  const constraints = {
    driverType: str(ctx, 'driver-type'),
    tags: tags && tags.length > 0 ? tags : undefined,
    hostId: str(ctx, 'host'),
    deviceId: str(ctx, 'device'),
  };
  const maxAttempts = int(ctx, 'max-attempts');
  const maxQueueWaitMs = int(ctx, 'max-queue-wait-ms');
  const body = {
    taskId: str(ctx, 'task-id'),
    pool: str(ctx, 'pool'),
    goal: str(ctx, 'goal'),
    definition: str(ctx, 'definition'),
    constraints: Object.values(constraints).some((v) => v !== undefined) ? constraints : undefined,
    priority: int(ctx, 'priority'),
    policy:
      maxAttempts === undefined && maxQueueWaitMs === undefined
        ? undefined
        : {
            ...(maxAttempts !== undefined ? { maxAttempts } : {}),
            ...(maxQueueWaitMs !== undefined ? { maxQueueWaitMs } : {}),
          },
  };
  const task = await ctx.api.post<TaskResource>('/v1/tasks', body);
  if (!flag(ctx, 'wait')) {
    ctx.print(taskDetails(task), task);
    return ExitCode.ok;
  }
  if (!ctx.json) ctx.io.stderr.write(`submitted ${task.taskId}\n`);
  return follow(ctx, task);
}

export async function get(ctx: Ctx): Promise<ExitCode> {
  const id = arg(ctx, 1, 'task id');
  const task = await ctx.api.get<TaskResource>(`/v1/tasks/${seg(id)}`);
  if (flag(ctx, 'wait')) return follow(ctx, task);
  ctx.print(taskDetails(task), task);
  return ExitCode.ok;
}

export async function list(ctx: Ctx): Promise<ExitCode> {
  const limit = int(ctx, 'limit') ?? 50;
  const filter = {
    status: str(ctx, 'status'),
    pool: str(ctx, 'pool'),
    hostId: str(ctx, 'host'),
    deviceId: str(ctx, 'device'),
    owner: str(ctx, 'owner'),
  };
  // A page may hold fewer than `limit` items: follow nextCursor until enough or no more.
  const items: TaskList['items'] = [];
  let cursor: string | undefined;
  do {
    const page = await ctx.api.get<TaskList>(
      `/v1/tasks${query({ ...filter, limit: Math.min(200, Math.max(1, limit - items.length)), cursor })}`,
    );
    items.push(...page.items);
    cursor = page.nextCursor;
  } while (cursor && items.length < limit);
  const out = { items: items.slice(0, limit), ...(cursor ? { nextCursor: cursor } : {}) };
  ctx.print(taskTable(out.items), out);
  return ExitCode.ok;
}

export async function cancel(ctx: Ctx): Promise<ExitCode> {
  const id = arg(ctx, 1, 'task id');
  const task = await ctx.api.post<TaskResource>(`/v1/tasks/${seg(id)}/cancel`);
  ctx.print(`cancel requested for ${task.taskId} (status ${task.status})\n`, task);
  return ExitCode.ok;
}

const MAX_RECONNECTS = 5;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Follows the task's event stream until its terminal status, with a one-line live display on a
 * terminal (plain lines otherwise, nothing with --json), then prints the task; the exit code is
 * the task's outcome. A stream that drops is reopened a few times.
 */
async function follow(ctx: Ctx, initial: TaskResource): Promise<ExitCode> {
  const out = ctx.io.stdout;
  const live = !ctx.json && out.isTTY === true;
  let last = initial;
  let shown = '';
  const show = (t: TaskResource) => {
    if (ctx.json) return;
    const line = progressLine(t);
    if (line === shown) return;
    shown = line;
    if (live) {
      const width = Math.max(20, (out.columns ?? 120) - 1);
      out.write(`\r\x1b[2K${line.length > width ? `${line.slice(0, width - 1)}…` : line}`);
    } else out.write(`${line}\n`);
  };
  show(initial);

  let reconnects = 0;
  while (!TERMINAL.has(last.status)) {
    const res = await ctx.api.raw('GET', `/v1/tasks/${seg(initial.taskId)}/events`, {
      headers: { Accept: 'text/event-stream' },
    });
    if (!res.ok || !res.body) await readJson(res); // throws the problem
    let failure: ProblemBody | undefined;
    let ended = false;
    await readSse(res.body as ReadableStream<Uint8Array>, (e) => {
      if (e.event === 'task') {
        last = JSON.parse(e.data) as TaskResource;
        show(last);
      } else if (e.event === 'end') {
        ended = true;
        return true;
      } else if (e.event === 'error') {
        failure = JSON.parse(e.data) as ProblemBody;
        return true;
      }
      return false;
    });
    if (failure) {
      if (live) out.write('\n');
      throw new ApiError(failure.status ?? 500, failure);
    }
    if (ended && !TERMINAL.has(last.status)) last = await ctx.api.get<TaskResource>(`/v1/tasks/${seg(last.taskId)}`);
    if (!ended) {
      if (++reconnects > MAX_RECONNECTS) {
        if (live) out.write('\n');
        throw new ApiError(503, { status: 503, detail: `the event stream of ${last.taskId} kept closing` });
      }
      await sleep(500 * reconnects);
    }
  }
  if (live) out.write('\n');
  ctx.print(taskDetails(last), last);
  return exitCodeForTask(last.status);
}
