/**
 * GET /v1/tasks/:id/events: server-sent events with the task's live status and progress. The
 * stream polls the task (FleetClient.find, like GET /v1/tasks/:id: with no control-plane worker
 * answering it shows the task as recorded, marked `incomplete`) and sends an event only when the
 * view changed; it ends after the terminal status, and stops polling as soon as the client goes
 * away, also when it went away before the stream started (during the access check).
 */
import type { Request, Response } from 'express';
import { TaskNotFoundError } from '../../client';
import type { RestDeps } from '../context';
import { HttpProblem, problemBody, toProblem } from '../problem';
import { safeStringify } from '../redact';
import { isTerminal } from './schemas';
import { findTask, taskResource } from './service';

/** Past this much written but not yet taken by the client, the stream is ended (default 1 MiB). */
export const DEFAULT_SSE_MAX_BUFFERED_BYTES = 1024 * 1024;

/** Streams open now (polling), for tests and diagnostics. */
let openStreams = 0;
export const openEventStreams = (): number => openStreams;

/**
 * `check` runs first (the access check: it throws a problem before anything is sent); a client that
 * disconnects meanwhile is noticed, and no stream starts for it.
 */
export async function streamTaskEvents(
  deps: RestDeps,
  req: Request,
  res: Response,
  taskId: string,
  check: () => Promise<unknown> = async () => undefined,
): Promise<void> {
  const pollMs = deps.options?.ssePollMs ?? 500;
  const keepAliveMs = deps.options?.sseKeepAliveMs ?? 15_000;
  const maxBuffered = deps.options?.sseMaxBufferedBytes ?? DEFAULT_SSE_MAX_BUFFERED_BYTES;
  const maxStallMs = deps.options?.sseMaxStallMs ?? Math.max(60_000, 2 * keepAliveMs);

  let closed = false;
  let started = false;
  const timers: { poll?: NodeJS.Timeout; keepAlive?: NodeJS.Timeout } = {};
  const stop = () => {
    if (closed) return;
    closed = true;
    clearTimeout(timers.poll);
    clearInterval(timers.keepAlive);
    if (started) openStreams--;
  };
  // 'close' on the response: the client disconnected (or we ended the stream). Registered before
  // the access check, which may wait for a control-plane worker for seconds.
  res.on('close', stop);
  await check();
  if (closed || res.destroyed || req.socket?.destroyed === true) {
    stop();
    return;
  }

  res.status(200);
  res.set({
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-cache, no-transform',
    Connection: 'keep-alive',
    'X-Accel-Buffering': 'no',
  });
  res.flushHeaders();
  started = true;
  openStreams++;

  let seq = 0;
  let last = '';
  const end = () => {
    stop();
    res.end();
  };
  /**
   * A client that does not read: while the socket has not drained, nothing more is queued (the
   * latest view is sent once it drains, as only changes are sent); a stream stalled for
   * `maxStallMs`, or with more than `maxBuffered` unread, ends (and its polling with it).
   */
  let stalledSince: number | undefined;
  res.on('drain', () => (stalledSince = undefined));
  const write = (chunk: string): boolean => {
    if (closed) return false;
    if (res.writableNeedDrain) {
      stalledSince ??= Date.now();
      if (Date.now() - stalledSince >= maxStallMs) {
        stop();
        res.destroy();
      }
      return false;
    }
    res.write(chunk);
    if (res.writableLength > maxBuffered) {
      stop();
      res.destroy();
      return false;
    }
    return true;
  };
  timers.keepAlive = setInterval(() => write(': keep-alive\n\n'), keepAliveMs);
  const send = (event: string, data: string): boolean => {
    if (!write(`id: ${seq + 1}\nevent: ${event}\ndata: ${data}\n\n`)) return false;
    seq++;
    return true;
  };

  write('retry: 2000\n\n');
  let failures = 0;
  const tick = async (): Promise<void> => {
    if (closed) return;
    try {
      const view = await findTask(deps, taskId);
      if (!view) throw new HttpProblem('notFound', `task ${taskId} not found`);
      if (closed) return;
      failures = 0;
      const data = safeStringify(await taskResource(deps, view));
      if (closed) return;
      if (data !== last && send('task', data)) last = data;
      if (isTerminal(view.status) && data === last) {
        // The end only after the last view went out (a slow client gets it once it drains).
        if (send('end', safeStringify({ taskId, status: view.status }))) {
          end();
          return;
        }
      }
    } catch (err) {
      if (closed) return;
      // A task that vanished, or Temporal down for several polls: tell the client and stop.
      if (err instanceof TaskNotFoundError || err instanceof HttpProblem || ++failures >= 5) {
        send('error', safeStringify(problemBody(toProblem(err), req.originalUrl)));
        end();
        return;
      }
    }
    timers.poll = setTimeout(() => void tick(), pollMs);
  };
  await tick();
}
