/**
 * GET /v1/tasks/:id/events: server-sent events with the task's live status and progress. The
 * stream polls the task (FleetClient.get) and sends an event only when the view changed; it ends
 * after the terminal status, and stops polling as soon as the client goes away.
 */
import type { Request, Response } from 'express';
import { TaskNotFoundError } from '../../client';
import type { RestDeps } from '../context';
import { problemBody, toProblem } from '../problem';
import { safeStringify } from '../redact';
import { isTerminal } from './schemas';
import { taskResource } from './service';

export async function streamTaskEvents(deps: RestDeps, req: Request, res: Response, taskId: string): Promise<void> {
  const pollMs = deps.options?.ssePollMs ?? 500;
  const keepAliveMs = deps.options?.sseKeepAliveMs ?? 15_000;
  res.status(200);
  res.set({
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-cache, no-transform',
    Connection: 'keep-alive',
    'X-Accel-Buffering': 'no',
  });
  res.flushHeaders();

  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  let seq = 0;
  let last = '';
  const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), keepAliveMs);
  const stop = () => {
    closed = true;
    clearTimeout(timer);
    clearInterval(keepAlive);
  };
  // 'close' on the response: the client disconnected (or we ended the stream).
  res.on('close', stop);
  const send = (event: string, data: string) => {
    res.write(`id: ${++seq}\nevent: ${event}\ndata: ${data}\n\n`);
  };
  const end = () => {
    stop();
    res.end();
  };

  res.write('retry: 2000\n\n');
  let failures = 0;
  const tick = async (): Promise<void> => {
    if (closed) return;
    try {
      const view = await deps.fleet.get(taskId);
      if (closed) return;
      failures = 0;
      const data = safeStringify(await taskResource(deps, view));
      if (closed) return;
      if (data !== last) {
        last = data;
        send('task', data);
      }
      if (isTerminal(view.status)) {
        send('end', safeStringify({ taskId, status: view.status }));
        end();
        return;
      }
    } catch (err) {
      if (closed) return;
      // A task that vanished, or Temporal down for several polls: tell the client and stop.
      if (err instanceof TaskNotFoundError || ++failures >= 5) {
        send('error', safeStringify(problemBody(toProblem(err), req.originalUrl)));
        end();
        return;
      }
    }
    timer = setTimeout(() => void tick(), pollMs);
  };
  await tick();
}
