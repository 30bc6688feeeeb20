/** Submitting a burst of zero-length tasks, to the fleet or to the baseline, and timing it end to end. */
import type { Client } from '@temporalio/client';
import type { BaselineFleet, ShapeVariant } from './baseline';
import type { CpuMark, CpuMeter, CpuUse } from './cpu';
import { taskWorkflowQueue } from '../../control-plane/config';
import { countRunning, fleetCpuMeter, type BenchFleet } from './fleet';
import { log, mapLimit, round, sleep, waitUntil, withTimeout } from './util';
import { profileMark } from './server-profile';

/** No submit call may block a scenario for longer than this. */
export const SUBMIT_TIMEOUT_MS = 120_000;

/** mapLimit that counts (and logs the first few) failures instead of stopping; returns the failure count. */
export async function tolerant<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T, i: number) => Promise<unknown>,
): Promise<number> {
  let errors = 0;
  await mapLimit(items, limit, async (item, i) => {
    try {
      await withTimeout(fn(item, i), SUBMIT_TIMEOUT_MS, 'submit');
    } catch (err) {
      if (++errors <= 3) log(`  submit failed (${errors}): ${String(err)}`);
    }
  });
  return errors;
}

export interface BurstResult {
  tasks: number;
  completed: number;
  notCompleted: number;
  /** First submit call to last workflow close (visibility close time). */
  durationMs: number;
  /** First submit call to the last submit call returning. */
  submitMs: number;
  tasksPerSecond: number;
  /** Tasks whose workflow had not closed when visibility said none was running (should be 0). */
  unclosed?: number;
  /** Submit calls that threw (e.g. an admission wait past the RPC deadline); the task may still run. */
  submitErrors: number;
  cpu: CpuUse;
  /** CPU ms of this process + the dev server (+ a control-plane process, when there is one) per completed task. */
  cpuMsPerTask: number;
}

async function finish(
  cpu: CpuMeter,
  mark: CpuMark,
  client: Client,
  taskQueue: string,
  workflowType: string,
  ids: Set<string>,
  t0: number,
  submitMs: number,
  submitErrors: number,
  timeoutMs: number,
): Promise<BurstResult> {
  await waitUntil(
    async () => ((await countRunning(client, taskQueue, workflowType)) === 0 ? true : undefined),
    `${workflowType} on ${taskQueue} to finish`,
    timeoutMs,
    250,
  );
  let last = 0;
  let completed = 0;
  let closed = 0;
  for await (const wf of client.workflow.list({
    query: `TaskQueue = '${taskQueue}' AND WorkflowType = '${workflowType}'`,
  })) {
    if (!ids.has(wf.workflowId) || !wf.closeTime) continue;
    closed++;
    if (wf.status.name === 'COMPLETED') completed++;
    last = Math.max(last, wf.closeTime.getTime());
  }
  const durationMs = last - t0;
  const use = cpu.since(mark);
  const extraSec = Object.values(use.extra).reduce((a, b) => a + (Number.isFinite(b) ? b : 0), 0);
  return {
    submitErrors,
    cpu: use,
    cpuMsPerTask: round(((use.benchProcessSec + use.serverSec + extraSec) * 1000) / Math.max(1, completed), 2),
    tasks: ids.size,
    completed,
    notCompleted: ids.size - completed,
    durationMs,
    submitMs,
    tasksPerSecond: round((completed / durationMs) * 1000, 1),
    ...(closed < ids.size ? { unclosed: ids.size - closed } : {}),
  };
}

export async function burstFleet(
  cpu: CpuMeter,
  bf: BenchFleet,
  taskIds: string[],
  concurrency: number,
  timeoutMs: number,
): Promise<BurstResult> {
  cpu = fleetCpuMeter(cpu, bf); // a control plane in its own process counts with this one
  await profileMark('between');
  const mark = cpu.mark();
  const t0 = Date.now();
  const progress = setInterval(
    () => log(`  fleet: ${bf.recorder.starts.size}/${taskIds.length} reached a host`),
    30_000,
  );
  const errors = await tolerant(taskIds, concurrency, (taskId) =>
    bf.fleet.submit({ taskId, goal: 'bench zero-length' }),
  ).finally(() => clearInterval(progress));
  const submitMs = Date.now() - t0;
  log(`  fleet: ${taskIds.length} submitted (admitted) in ${submitMs} ms`);
  await bf.recorder.waitForCount(taskIds.length, timeoutMs).catch((err: unknown) => log(`  ${String(err)}`));
  const ids = new Set(taskIds.map((t) => `task/${t}`));
  const result = await finish(
    cpu,
    mark,
    bf.client,
    taskWorkflowQueue(bf.config),
    'taskWorkflow',
    ids,
    t0,
    submitMs,
    errors,
    timeoutMs,
  );
  await profileMark('fleet');
  return result;
}

/**
 * A burst of baseline tasks; `shape`: through the fleet's message shape (BaselineFleet.submitShape),
 * `true` for the fleet's own shape or a variant with hops taken off it.
 */
export async function burstBaseline(
  cpu: CpuMeter,
  client: Client,
  base: BaselineFleet,
  taskIds: string[],
  concurrency: number,
  timeoutMs: number,
  shape: boolean | ShapeVariant = false,
): Promise<BurstResult> {
  const before = base.starts.size; // an earlier burst on the same workers
  await profileMark('between');
  const mark = cpu.mark();
  const t0 = Date.now();
  const errors = await tolerant(taskIds, concurrency, (taskId, i) =>
    shape ? base.submitShape(taskId, i, shape === true ? undefined : shape) : base.submit(taskId, i),
  );
  const submitMs = Date.now() - t0;
  const label = shape ? 'shape' : 'baseline';
  log(`  ${label}: ${taskIds.length} started in ${submitMs} ms`);
  await base.waitForCount(before + taskIds.length, timeoutMs).catch((err: unknown) => log(`  ${String(err)}`));
  const ids = new Set(taskIds.map((t) => base.workflowId(t)));
  const type = shape ? 'shapeTaskWorkflow' : 'baselineTaskWorkflow';
  const result = await finish(cpu, mark, client, base.workflowQueue, type, ids, t0, submitMs, errors, timeoutMs);
  const variant = typeof shape === 'object' ? Object.keys(shape).filter((k) => shape[k as keyof ShapeVariant]) : [];
  await profileMark(shape ? ['shape', ...variant].join('-') : 'baseline');
  return result;
}

/**
 * Closed loop: one task at a time (the previous one started and its submit call returned, then a
 * short gap), so every sample sees idle devices and no queue of our own making.
 */
export async function closedLoop(
  count: number,
  gapMs: number,
  submit: (i: number) => Promise<unknown>,
  startedAt: (i: number) => number | undefined,
  perSampleTimeoutMs: number,
): Promise<{ latencies: number[]; submitLatencies: number[]; missing: number; sentEpoch: number[] }> {
  const latencies: number[] = [];
  const submitLatencies: number[] = [];
  const sentEpoch: number[] = [];
  let missing = 0;
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    sentEpoch[i] = Date.now();
    const p = withTimeout(submit(i), SUBMIT_TIMEOUT_MS, 'submit').then(
      () => void submitLatencies.push(performance.now() - t0),
      (err) => log(`  submit ${i} failed: ${String(err)}`),
    );
    const deadline = Date.now() + perSampleTimeoutMs;
    while (startedAt(i) === undefined && Date.now() < deadline) await sleep(5);
    const s = startedAt(i);
    if (s === undefined) missing++;
    else latencies.push(s - t0);
    await p;
    await sleep(gapMs);
  }
  return { latencies, submitLatencies, missing, sentEpoch };
}
