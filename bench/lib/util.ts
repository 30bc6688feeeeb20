/** Small helpers shared by the benchmark scenarios: timing, percentiles, bounded concurrency. */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
export const uid = (prefix: string): string => `${prefix}-${randomBytes(3).toString('hex')}`;
export const round = (v: number, digits = 1): number => {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
};

export function log(message: string): void {
  const t = new Date().toISOString().slice(11, 23);
  process.stderr.write(`[bench ${t}] ${message}\n`);
}

/** Nearest-rank percentile (p in 0..100) of unsorted values; NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const rank = Math.min(s.length, Math.max(1, Math.ceil((p / 100) * s.length)));
  return s[rank - 1];
}

export function mean(values: readonly number[]): number {
  return values.length === 0 ? NaN : values.reduce((a, b) => a + b, 0) / values.length;
}

export interface Summary {
  n: number;
  min: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

export function summarize(values: readonly number[], digits = 1): Summary {
  return {
    n: values.length,
    min: round(Math.min(...values), digits),
    p50: round(percentile(values, 50), digits),
    p90: round(percentile(values, 90), digits),
    p99: round(percentile(values, 99), digits),
    max: round(Math.max(...values), digits),
    mean: round(mean(values), digits),
  };
}

/** Runs fn over items with at most `limit` in flight; results in input order. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, lane));
  return out;
}

/** Polls until probe returns a value (not undefined); throws after timeoutMs. */
export async function waitUntil<T>(
  probe: () => Promise<T | undefined> | T | undefined,
  what: string | (() => string),
  timeoutMs: number,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}${last ? ` (last error: ${String(last)})` : ''}`);
    }
    await sleep(intervalMs);
  }
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** Resident set size of a process in MiB, from /proc/<pid>/status (VmRSS). */
export function rssMiB(pid: number): number | undefined {
  try {
    const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? round(Number(m[1]) / 1024, 1) : undefined;
  } catch {
    return undefined;
  }
}

/** Samples a process's RSS every intervalMs until stopped; returns the samples' peak and last. */
export function rssSampler(pid: number, intervalMs = 200): { stop(): { peak: number; last: number; samples: number } } {
  let peak = 0;
  let last = 0;
  let samples = 0;
  const take = () => {
    const v = rssMiB(pid);
    if (v === undefined) return;
    samples++;
    last = v;
    peak = Math.max(peak, v);
  };
  take();
  const t = setInterval(take, intervalMs);
  return {
    stop() {
      clearInterval(t);
      take();
      return { peak, last, samples };
    },
  };
}

/** Rejects with TimeoutError if p has not settled within ms (p itself keeps running): the control plane's helper. */
export { TimeoutError, within as withTimeout } from '../../control-plane/within';
