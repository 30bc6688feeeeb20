/**
 * Application metrics in the Prometheus text format, served by the REST facade at GET /metrics.
 * Nothing is counted in this process: every value is read at scrape time from Temporal, so any
 * number of REST replicas report the same numbers and a restart loses nothing.
 *
 * - From each configured pool's scheduler (query `schedulerState`): queue depth, the oldest queued
 *   task's wait, devices, and the scheduler's own monotonic counters (admissions, rejections,
 *   assignments, reservation refusals, device releases; kept across continue-as-new).
 * - From Temporal visibility (count of task workflows by the FleetStatus / FleetAttempt search
 *   attributes): tasks per status and tasks that needed more than one attempt.
 *
 * One scrape makes one query per pool and (statuses + 1) count requests per pool, in parallel, each
 * bounded by `timeoutMs`; the result is cached for `cacheMs` so concurrent scrapes share it.
 * A pool whose scheduler does not answer reports fleet_scheduler_up 0 and none of its other series.
 */
import type { Client } from '@temporalio/client';
import type { RequestHandler } from 'express';
import { Counter, Gauge, Registry, register as globalRegistry } from 'prom-client';
import { schedulerWorkflowId } from '../workflows/ids';
import { FleetPool } from '../workflows/search-attributes';
import { schedulerStateQuery, type SchedulerCounters, type SchedulerView } from '../workflows/messages';
import { INDEXED_STATUSES, TASK_STATUSES, type IndexedStatus } from '../workflows/types';
import type { ControlPlaneConfig } from './config';
import { within } from './within';

export { TASK_STATUSES };

export interface FleetMetricsOptions {
  client: Client;
  config: ControlPlaneConfig;
  /** A scrape within this long of the previous one reuses its readings (default 2 s). */
  cacheMs?: number;
  /** Bound on each query / count; a slower answer counts as down (default 3 s). */
  timeoutMs?: number;
  now?: () => number;
}

interface PoolReading {
  pool: string;
  view?: SchedulerView;
  /** Visibility counts; undefined when visibility did not answer. */
  tasks?: Record<IndexedStatus, number>;
  retried?: number;
}

export interface FleetMetrics {
  registry: Registry;
  contentType: string;
  /** The exposition text: these metrics, then whatever the process registered on prom-client's global registry. */
  metrics(): Promise<string>;
}

const literal = (v: string) => `'${v.replace(/['\\]/g, '')}'`;

export function pools(config: ControlPlaneConfig): string[] {
  return [...new Set([config.defaultPool, ...Object.keys(config.pools)])].sort();
}

/** The configured pools, plus any pool a host serves whose scheduler runs on this control plane's queue (from visibility). */
async function poolsNow(client: Client, config: ControlPlaneConfig, timeoutMs: number): Promise<string[]> {
  const found: string[] = [];
  try {
    await within(
      (async () => {
        const query = `FleetKind = 'scheduler' AND ExecutionStatus = 'Running' AND TaskQueue = ${literal(config.controlTaskQueue)}`;
        for await (const wf of client.workflow.list({ query })) {
          const pool = wf.typedSearchAttributes.get(FleetPool);
          if (pool) found.push(pool);
          if (found.length >= 1_000) break;
        }
      })(),
      timeoutMs,
      'list schedulers',
    );
  } catch {
    // Visibility did not answer: the configured pools still report (fleet_visibility_up says so).
  }
  return [...new Set([...pools(config), ...found])].sort();
}

export function createFleetMetrics(opts: FleetMetricsOptions): FleetMetrics {
  const { client, config } = opts;
  const cacheMs = opts.cacheMs ?? 2_000;
  const timeoutMs = opts.timeoutMs ?? 3_000;
  const now = opts.now ?? Date.now;
  const registry = new Registry();
  let cached: { at: number; readings: Promise<PoolReading[]> } | undefined;

  const readPool = async (pool: string): Promise<PoolReading> => {
    const count = async (query: string) =>
      (await within(client.workflow.count(query), timeoutMs, `count ${query}`)).count;
    const base = `FleetKind = 'task' AND FleetPool = ${literal(pool)}`;
    const [view, tasks, retried] = await Promise.all([
      within(
        client.workflow.getHandle(schedulerWorkflowId(pool)).query(schedulerStateQuery),
        timeoutMs,
        `scheduler ${pool}`,
      ).catch(() => undefined),
      Promise.all(INDEXED_STATUSES.map((s) => count(`${base} AND FleetStatus = ${literal(s)}`))).then(
        (ns) => Object.fromEntries(INDEXED_STATUSES.map((s, i) => [s, ns[i]])) as Record<IndexedStatus, number>,
        () => undefined,
      ),
      count(`${base} AND FleetAttempt > 1`).catch(() => undefined),
    ]);
    return { pool, view, tasks, retried };
  };

  const readings = (): Promise<PoolReading[]> => {
    const t = now();
    if (!cached || t - cached.at >= cacheMs) {
      cached = { at: t, readings: poolsNow(client, config, timeoutMs).then((ps) => Promise.all(ps.map(readPool))) };
    }
    return cached.readings;
  };

  const gauge = (name: string, help: string, labelNames: string[], fill: (g: Gauge, r: PoolReading[]) => void) =>
    new Gauge({
      name,
      help,
      labelNames,
      registers: [registry],
      async collect() {
        const r = await readings();
        this.reset();
        fill(this, r);
      },
    });
  const schedulerCounter = (name: string, help: string, key: Exclude<keyof SchedulerCounters, 'attemptEnds'>) =>
    new Counter({
      name,
      help,
      labelNames: ['pool'],
      registers: [registry],
      async collect() {
        const r = await readings();
        this.reset();
        for (const { pool, view } of r) if (view) this.inc({ pool }, view.counters[key]);
      },
    });

  gauge(
    'fleet_scheduler_up',
    "1 if the pool's scheduler answered the state query at this scrape, else 0",
    ['pool'],
    (g, r) => {
      for (const { pool, view } of r) g.set({ pool }, view ? 1 : 0);
    },
  );
  gauge('fleet_queue_depth', "Tasks in the pool's queue, waiting for a device", ['pool'], (g, r) => {
    for (const { pool, view } of r) if (view) g.set({ pool }, view.queue.length);
  });
  gauge(
    'fleet_queue_oldest_wait_seconds',
    'Seconds since the longest-waiting queued task entered the queue (0 when the queue is empty)',
    ['pool'],
    (g, r) => {
      const t = now();
      for (const { pool, view } of r) {
        if (!view) continue;
        const oldest = Math.min(...view.queue.map((q) => q.enqueuedAt));
        g.set({ pool }, view.queue.length ? Math.max(0, (t - oldest) / 1000) : 0);
      }
    },
  );
  gauge(
    'fleet_devices',
    'Devices the pool scheduler knows, by whether a task holds them',
    ['pool', 'reserved'],
    (g, r) => {
      for (const { pool, view } of r) {
        if (!view) continue;
        const reserved = view.devices.filter((d) => d.reservedBy).length;
        g.set({ pool, reserved: 'true' }, reserved);
        g.set({ pool, reserved: 'false' }, view.devices.length - reserved);
      }
    },
  );
  schedulerCounter('fleet_admissions_total', 'Tasks admitted to the pool queue (first enqueue)', 'admitted');
  schedulerCounter('fleet_admissions_rejected_total', 'Tasks refused at admission (queue full or invalid)', 'rejected');
  schedulerCounter(
    'fleet_assignments_total',
    'Device assignments made by the pool scheduler (one per attempt)',
    'assignments',
  );
  schedulerCounter(
    'fleet_reservation_refusals_total',
    'Assignments a device refused because it was still held (stale scheduler view)',
    'refusals',
  );
  schedulerCounter(
    'fleet_device_releases_total',
    'Device reservations released back to the pool, for any reason (end, cancel, lease expiry, hold expiry)',
    'releases',
  );
  new Counter({
    name: 'fleet_attempts_ended_total',
    help: 'Attempts ended, by outcome (done, lease_expired, dispatch_failed, retryable_failure, failed, cancelled, ...) and reason class (ack_timeout, device_unavailable, ...)',
    labelNames: ['pool', 'outcome', 'reason'],
    registers: [registry],
    async collect() {
      const r = await readings();
      this.reset();
      for (const { pool, view } of r) {
        for (const [key, n] of Object.entries(view?.counters.attemptEnds ?? {})) {
          const [outcome, detail] = key.split('|');
          // A cancel is released with its reason or without one, by where it was caught: one series.
          const reason = outcome === 'cancelled' && !detail ? 'cancelled' : detail;
          this.inc({ pool, outcome, reason }, n);
        }
      }
    },
  });
  gauge(
    'fleet_visibility_up',
    '1 if Temporal visibility answered the task counts at this scrape, else 0',
    ['pool'],
    (g, r) => {
      for (const { pool, tasks } of r) g.set({ pool }, tasks ? 1 : 0);
    },
  );
  gauge(
    'fleet_tasks',
    'Task workflows by current status (Temporal visibility count; lags the workflows by up to a few seconds)',
    ['pool', 'status'],
    (g, r) => {
      for (const { pool, tasks } of r) {
        if (!tasks) continue;
        for (const status of INDEXED_STATUSES) g.set({ pool, status }, tasks[status]);
      }
    },
  );
  gauge(
    'fleet_tasks_retried',
    'Task workflows that needed more than one attempt (FleetAttempt > 1), any status',
    ['pool'],
    (g, r) => {
      for (const { pool, retried } of r) if (retried !== undefined) g.set({ pool }, retried);
    },
  );

  return {
    registry,
    contentType: registry.contentType,
    async metrics() {
      const own = await registry.metrics();
      const process = await globalRegistry.metrics();
      return process.trim() ? `${own}\n${process}` : own;
    },
  };
}

/** GET /metrics: unauthenticated, Prometheus text format. */
export function metricsRoute(deps: Pick<FleetMetricsOptions, 'client' | 'config'>): RequestHandler {
  let metrics: FleetMetrics | undefined;
  return (_req, res, next) => {
    metrics ??= createFleetMetrics(deps);
    const m = metrics;
    m.metrics().then((text) => {
      res.set('Content-Type', m.contentType).set('Cache-Control', 'no-store').send(text);
    }, next);
  };
}
