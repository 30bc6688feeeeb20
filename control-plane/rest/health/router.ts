import { Router } from 'express';
import { z } from 'zod';
import type { RestDeps } from '../context';
import { HttpProblem } from '../problem';

export const HealthSchema = z.object({ status: z.enum(['ok', 'ready']) });
export type Health = z.infer<typeof HealthSchema>;

const READY_TIMEOUT_MS = 2_000;

/** Unauthenticated: liveness of the process and readiness (Temporal answers). */
export function healthRouter({ client }: RestDeps): Router {
  const r = Router();
  r.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' } satisfies Health);
  });
  r.get('/readyz', async (_req, res) => {
    let timer: NodeJS.Timeout | undefined;
    try {
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${READY_TIMEOUT_MS} ms`)), READY_TIMEOUT_MS);
      });
      await Promise.race([
        client.withDeadline(Date.now() + READY_TIMEOUT_MS, () => client.workflowService.getSystemInfo({})),
        timeout,
      ]);
    } catch (err) {
      throw new HttpProblem('unavailable', `Temporal is not reachable: ${(err as Error).message ?? String(err)}`, {
        headers: { 'Retry-After': '5' },
      });
    } finally {
      clearTimeout(timer);
    }
    res.json({ status: 'ready' } satisfies Health);
  });
  return r;
}
