/**
 * P5 scale. (1) The pure strategy cost: getStrategy('fifo_match').assign over a queue of 100 vs N
 * entries with a few free devices, many iterations, hrtime. (2) End to end in the real scheduler,
 * with the control plane as its own process: fill a pool's queue with tasks no device matches,
 * then add one matching device running zero-length work and time (a) device added -> first task
 * started and (b) the cycle between consecutive starts on that device (release -> decision ->
 * reservation -> assignment -> dispatch), with 100 vs N queued. Also the scheduler's workflow-task
 * times in that window, and the control-plane process RSS at N queued.
 */
import { randomUUID } from 'node:crypto';
import type { PoolDevice } from '../../workflows/types';
import { getStrategy, type QueuedTask } from '../../workflows/strategies';
import { taskWorkflowQueue } from '../../control-plane/config';
import { deviceWorkflowId, poolRecoveryWorkflowId, schedulerWorkflowId, taskWorkflowId } from '../../workflows/ids';
import { restartStoppedSchedulers } from '../../control-plane/worker';
import { startBaseline } from '../lib/baseline';
import { CpuMeter } from '../lib/cpu';
import { runnersFor, startBenchFleet, type BenchFleet } from '../lib/fleet';
import { eventMs, eventTypeName, fetchRuns, workflowTaskTimings, type Run } from '../lib/history';
import { diffOpTimes, serverOpTimes, type OpTime } from '../lib/env';
import { SUBMIT_TIMEOUT_MS } from '../lib/load';
import { spawnControlPlaneProcess, stopProc } from '../lib/procs';
import {
  freePort,
  log,
  mapLimit,
  round,
  rssMiB,
  sleep,
  summarize,
  TimeoutError,
  waitUntil,
  withTimeout,
  type Summary,
} from '../lib/util';
import type { Runners } from '../../host-worker/runners';
import type { Scenario } from './types';

/** The driver type of P5's queued tasks and of the devices that take them. */
const driverType = 'p5match';

// ---- (1) the strategy alone ----

/** A queue as the scheduler holds it: equal constraints share one object (scheduler.ts interns them). */
function queueOf(n: number, matching: (i: number) => boolean): QueuedTask[] {
  const t0 = 1_700_000_000_000;
  const sim = { driverType: 'sim', tags: [] };
  const ios = { driverType: 'ios', tags: [] };
  return Array.from({ length: n }, (_, i) => ({
    taskId: randomUUID(),
    constraints: matching(i) ? sim : ios,
    priority: 0,
    submittedAt: t0 + i,
    enqueuedAt: t0 + i,
    attempt: 1,
    holdMs: 3_690_000,
  }));
}

const idleSims = (n: number): PoolDevice[] =>
  Array.from({ length: n }, (_, i) => ({
    hostId: 'h',
    deviceId: `d${i}`,
    driverType: 'sim',
    tags: [],
    state: 'idle',
    health: 'good',
    hostOnline: true,
    hostDrained: false,
    deviceDrained: false,
  }));

/** Microseconds per assign() call (median of 5 batches), by default fifo_match with 3 free devices. */
function timeAssign(queue: QueuedTask[], freeDevices = idleSims(3), strategy = 'fifo_match'): number {
  const s = getStrategy(strategy);
  const ctx = { now: Date.now(), agingMs: 60_000 };
  const iterations = Math.max(20, Math.round(400_000 / queue.length));
  for (let i = 0; i < Math.ceil(iterations / 5); i++) s.assign(queue, freeDevices, ctx); // warm-up
  const batches: number[] = [];
  for (let b = 0; b < 5; b++) {
    const t = process.hrtime.bigint();
    for (let i = 0; i < iterations; i++) s.assign(queue, freeDevices, ctx);
    batches.push(Number(process.hrtime.bigint() - t) / 1_000 / iterations);
  }
  return round(summarize(batches, 3).p50, 2);
}

// ---- (2) the real scheduler ----

interface QueuePhase {
  pool: string;
  wanted: number;
  queued: number;
  fillMs: number;
  fillStoppedByBudget: boolean;
  submitErrors: number;
  /**
   * Submits never answered (admission reply lost), and where their enqueue landed in the
   * scheduler's history: run index and how many events before that run's continue-as-new.
   */
  unanswered: { count: number; enqueueEventsBeforeContinueAsNew: number[]; runs: number[] };
  firstAssignMs?: number;
  cycles: Summary;
  cycleStarts: number;
  /** Each cycle cut into its legs, from the server's timestamps in the histories (ms, p50 per leg). */
  legs: Record<string, Summary>;
  /** Waiting, before the device is added, for the server to finish what the fill left it (CPU below SETTLED_CORES). */
  settle: { ms: number; cores: number };
  /**
   * The server's latency histograms over the cycles, per cycle: calls and ms spent, by
   * `<histogram> <service>/<operation>` (long polls left out).
   */
  serverOps: Record<string, { calls: number; ms: number }>;
  /** CPU cores used while the cycles ran (device added -> last start). */
  cycleCores: { server: number; controlPlane: number; benchProcess: number; others: number };
  schedulerWftWorkMs: Summary;
  schedulerWftWaitMs: Summary;
  schedulerRuns: number;
  queueAfter: number;
  controlPlaneRssMiB?: number;
  /** Over the cycles (device added -> last start): the control plane's workflow-cache hits and misses. */
  stickyCache?: { tasks: CacheCounts; longLived: CacheCounts };
  /** Size of the schedulerState query answer at the filled queue (the whole queue is in it). */
  queryBytes: number;
  /** Largest continue-as-new input of the scheduler so far, and the queue it carried. */
  largestCarry?: { bytes: number; queued: number; bytesPerQueuedTask: number };
}

/** Input size of each scheduler run (continue-as-new carries the queue) and the queue length it carried. */
function carries(runs: Awaited<ReturnType<typeof fetchRuns>>): Array<{ bytes: number; queued: number }> {
  const out: Array<{ bytes: number; queued: number }> = [];
  for (const r of runs) {
    const payloads = r.events[0]?.workflowExecutionStartedEventAttributes?.input?.payloads ?? [];
    const bytes = payloads.reduce((a, p) => a + (p.data?.length ?? 0), 0);
    let queued = 0;
    try {
      const input = JSON.parse(Buffer.from(payloads[0]?.data ?? []).toString()) as {
        carried?: { queue?: unknown[]; packedQueue?: { rows: unknown[] } };
      };
      queued = input.carried?.packedQueue?.rows.length ?? input.carried?.queue?.length ?? 0;
    } catch {
      // not JSON: leave 0
    }
    out.push({ bytes, queued });
  }
  return out;
}

/** The taskId in a signal's JSON input (the fleet's workflow-to-workflow signals are not encoded). */
function signalTaskId(input: { payloads?: Array<{ data?: Uint8Array | null }> | null } | null | undefined): string | undefined {
  try {
    return (JSON.parse(Buffer.from(input?.payloads?.[0]?.data ?? []).toString()) as { taskId?: string }).taskId;
  } catch {
    return undefined;
  }
}

type Ev = Run['events'][number];
const signalled = (events: Ev[], name: string, taskId: string) =>
  events.find(
    (e) =>
      e.workflowExecutionSignaledEventAttributes?.signalName === name &&
      signalTaskId(e.workflowExecutionSignaledEventAttributes.input) === taskId,
  );
const signalSent = (events: Ev[], name: string, taskId: string) =>
  events.find(
    (e) =>
      e.signalExternalWorkflowExecutionInitiatedEventAttributes?.signalName === name &&
      signalTaskId(e.signalExternalWorkflowExecutionInitiatedEventAttributes.input) === taskId,
  );
/** The first workflow task scheduled at or after `from` in `events`: [scheduled, started, completed] (ms). */
function wftAfter(events: Ev[], from: number): [number, number, number] {
  const i = events.findIndex((e) => eventTypeName(e) === 'WorkflowTaskScheduled' && eventMs(e) >= from);
  if (i < 0) return [NaN, NaN, NaN];
  const next = (type: string) => events.slice(i).find((e) => eventTypeName(e) === type);
  const st = next('WorkflowTaskStarted');
  const done = next('WorkflowTaskCompleted');
  return [eventMs(events[i]), st ? eventMs(st) : NaN, done ? eventMs(done) : NaN];
}

/**
 * One cycle (task A's work ends -> task B's work starts on the same device) cut at every message:
 * A's workflow task that takes the activity's end and tells the pool; delivery to the scheduler;
 * the scheduler's workflow task (queue wait + work) that frees the device and reserves it for B;
 * delivery to the device; the device's workflow task; delivery to B; B's workflow task (wait +
 * work: B has been parked since the fill, so this is where a cold cache would show); B's activity
 * to the host runner (host pickup). Server timestamps from the histories, the runner's clock for the
 * last leg.
 */
async function cycleLegs(
  bf: BenchFleet,
  starts: Array<{ taskId: string; epoch: number }>,
  schedulerEvents: Ev[],
  deviceId: string,
): Promise<Record<string, Summary>> {
  const device = (await fetchRuns(bf.client, deviceId)).flatMap((r) => r.events);
  const tasks = new Map<string, Ev[]>();
  await mapLimit(starts, 8, async (s) => {
    tasks.set(s.taskId, (await fetchRuns(bf.client, taskWorkflowId(s.taskId), 1))[0]?.events ?? []);
  });
  const names = [
    "A's workflow task: activity closed -> release sent",
    'release -> scheduler',
    "scheduler's workflow task: queue wait",
    "scheduler's workflow task: work (release + decision + reserve sent)",
    'reserve -> device',
    "device's workflow task: queue wait",
    "device's workflow task: work (reservation + assignment sent)",
    'assignment -> B',
    "B's workflow task: queue wait",
    "B's workflow task: work (activity scheduled)",
    'activity scheduled -> host runner',
  ];
  const legs: number[][] = names.map(() => []);
  for (let i = 1; i < starts.length; i++) {
    const a = tasks.get(starts[i - 1].taskId) ?? [];
    const b = tasks.get(starts[i].taskId) ?? [];
    const aId = starts[i - 1].taskId;
    const bId = starts[i].taskId;
    const aClosed = a.find((e) => eventTypeName(e) === 'ActivityTaskCompleted');
    const aRelease = signalSent(a, 'taskReleased', aId);
    const sRelease = signalled(schedulerEvents, 'taskReleased', aId);
    const sReserve = signalSent(schedulerEvents, 'reserveDevice', bId);
    const dReserve = signalled(device, 'reserveDevice', bId);
    const dAssign = signalSent(device, 'assignment', bId);
    const bAssign = signalled(b, 'assignment', bId);
    const bScheduled = b.find((e) => eventTypeName(e) === 'ActivityTaskScheduled');
    if (!aClosed || !aRelease || !sRelease || !sReserve || !dReserve || !dAssign || !bAssign || !bScheduled) continue;
    const [sSch, sSt, sDone] = wftAfter(schedulerEvents, eventMs(sRelease));
    const [dSch, dSt] = wftAfter(device, eventMs(dReserve));
    const [bSch, bSt] = wftAfter(b, eventMs(bAssign));
    const v = [
      eventMs(aRelease) - eventMs(aClosed),
      eventMs(sRelease) - eventMs(aRelease),
      sSt - sSch,
      sDone - sSt,
      eventMs(dReserve) - eventMs(sReserve),
      dSt - dSch,
      eventMs(dAssign) - dSt,
      eventMs(bAssign) - eventMs(dAssign),
      bSt - bSch,
      eventMs(bScheduled) - bSt,
      starts[i].epoch - eventMs(bScheduled),
    ];
    v.forEach((x, k) => Number.isFinite(x) && legs[k].push(x));
  }
  return Object.fromEntries(names.map((n, k) => [n, summarize(legs[k], 0)]));
}

function perCycle(ops: Map<string, OpTime>, cycles: number): Record<string, { calls: number; ms: number }> {
  const out: Record<string, { calls: number; ms: number }> = {};
  for (const [k, v] of ops) {
    if (/Poll|GetTaskQueueUserData/.test(k)) continue; // long polls: they wait, they do not work
    out[k] = { calls: round(v.count / cycles, 1), ms: round((v.sec * 1000) / cycles, 2) };
  }
  return out;
}

/** The server counts as settled when a second of it uses less than this many cores. */
const SETTLED_CORES = 0.3;
/** Samples of the raw-Temporal control, per queue size. */
const RAW_SAMPLES = 40;

/**
 * Waits (at most 60 s) until the server's CPU over one second falls below SETTLED_CORES: a fill
 * leaves the server work to finish (transfer and visibility tasks of thousands of starts), and a
 * cycle timed during that measures the fill's aftermath rather than the queue's size.
 */
async function settleServer(cpu: CpuMeter): Promise<{ ms: number; cores: number }> {
  const t0 = Date.now();
  let cores = NaN;
  while (Date.now() - t0 < 60_000) {
    const m = cpu.mark();
    await sleep(1_000);
    const u = cpu.since(m);
    cores = round(u.serverSec / u.wallSec, 2);
    if (!(cores >= SETTLED_CORES)) break; // NaN (server pid unknown) counts as settled
  }
  return { ms: Date.now() - t0, cores };
}

async function queuePhase(
  bf: BenchFleet,
  pool: string,
  wanted: number,
  cycles: number,
  concurrency: number,
  budgetMs: number,
  cpPid: number,
  metricsAddress: string,
  cpu: CpuMeter,
  serverMetricsUrl: string,
): Promise<QueuePhase> {
  const t0 = Date.now();
  let admitted = 0;
  let submitErrors = 0;
  const unanswered: string[] = [];
  let stopped = false;
  const ids = Array.from({ length: wanted }, () => randomUUID());
  await mapLimit(ids, concurrency, async (taskId) => {
    if (Date.now() - t0 > budgetMs) {
      stopped = true;
      return;
    }
    try {
      await withTimeout(
        bf.fleet.submit({ taskId, pool, goal: 'queued [p5]', constraints: { driverType } }),
        SUBMIT_TIMEOUT_MS,
        'submit',
      );
    } catch (err) {
      if (err instanceof TimeoutError) unanswered.push(taskId);
      if (++submitErrors <= 3) log(`  submit failed: ${String(err)}`);
      return;
    }
    admitted++;
    if (admitted % 500 === 0) log(`  ${pool}: ${admitted} admitted (${Math.round((admitted / (Date.now() - t0)) * 1000)}/s)`);
  });
  const fillMs = Date.now() - t0;
  const before = await bf.scheduler(pool);
  const queued = before.queue.length;
  const rss = rssMiB(cpPid);
  log(`  ${pool}: ${queued} queued in ${fillMs} ms; control-plane RSS ${rss} MiB`);

  const hostId = `m-${pool}`;
  const tasksQueue = taskWorkflowQueue(bf.config);
  const cacheBefore = await stickyCache(metricsAddress, tasksQueue);
  const settle = await settleServer(cpu);
  log(`  ${pool}: server settled in ${settle.ms} ms (last second: ${settle.cores} cores)`);
  const opsBefore = await serverOpTimes(serverMetricsUrl);
  const cycleMark = cpu.mark();
  const tAdd = performance.now();
  await bf.addHost(hostId, ['d0'], { pool, driverType });
  const mine = () => bf.recorder.all.filter((r) => r.hostId === hostId);
  await waitUntil(() => (mine().length >= cycles + 1 ? true : undefined), `${cycles + 1} starts on ${hostId}`, 60_000 + cycles * 10_000, 50).catch(
    (err: unknown) => log(`  ${String(err)}`),
  );
  const cycleCpu = cpu.since(cycleMark);
  const ops = diffOpTimes(await serverOpTimes(serverMetricsUrl), opsBefore);
  await bf.stopHost(hostId);
  const cacheAfter = await stickyCache(metricsAddress, tasksQueue);
  const starts = mine();
  const gaps = starts.slice(1).map((s, i) => s.at - starts[i].at);
  const from = starts[0]?.epoch ?? 0;
  const to = starts[starts.length - 1]?.epoch ?? 0;
  const runs = await fetchRuns(bf.client, schedulerWorkflowId(pool));
  const schedulerEvents = runs.flatMap((r) => r.events);
  const wft = workflowTaskTimings(schedulerEvents, from, to);
  const legs = await cycleLegs(bf, starts, schedulerEvents, deviceWorkflowId(hostId, 'd0'));
  const after = await bf.scheduler(pool);
  const lost = new Set(unanswered);
  const where: { enqueueEventsBeforeContinueAsNew: number[]; runs: number[] } = { enqueueEventsBeforeContinueAsNew: [], runs: [] };
  runs.forEach((r, ri) => {
    const can = r.events.findIndex((e) => eventTypeName(e) === 'WorkflowExecutionContinuedAsNew');
    r.events.forEach((e, i) => {
      const a = e.workflowExecutionSignaledEventAttributes;
      if (a?.signalName !== 'enqueueTask') return;
      const taskId = signalTaskId(a.input);
      if (taskId === undefined || !lost.has(taskId)) return;
      where.runs.push(ri);
      where.enqueueEventsBeforeContinueAsNew.push(can >= 0 ? can - i : -1);
    });
  });
  const largest = carries(runs).sort((a, b) => b.bytes - a.bytes)[0];
  return {
    queryBytes: JSON.stringify(before).length,
    largestCarry:
      largest && largest.queued > 0
        ? { ...largest, bytesPerQueuedTask: round(largest.bytes / largest.queued, 0) }
        : undefined,
    pool,
    wanted,
    queued,
    fillMs,
    fillStoppedByBudget: stopped,
    submitErrors,
    unanswered: { count: unanswered.length, ...where },
    firstAssignMs: starts[0] ? round(starts[0].at - tAdd, 0) : undefined,
    cycles: summarize(gaps),
    cycleStarts: starts.length,
    legs,
    settle,
    serverOps: perCycle(ops, Math.max(1, starts.length - 1)),
    cycleCores: {
      server: round(cycleCpu.serverSec / cycleCpu.wallSec, 2),
      controlPlane: round((cycleCpu.extra.controlPlane ?? NaN) / cycleCpu.wallSec, 2),
      benchProcess: round(cycleCpu.benchProcessSec / cycleCpu.wallSec, 2),
      others: round(cycleCpu.othersSec / cycleCpu.wallSec, 2),
    },
    schedulerWftWorkMs: summarize(wft.workMs),
    schedulerWftWaitMs: summarize(wft.waitMs),
    schedulerRuns: runs.length,
    queueAfter: after.queue.length,
    controlPlaneRssMiB: rss,
    stickyCache:
      cacheBefore && cacheAfter
        ? { tasks: cacheDiff(cacheAfter.tasks, cacheBefore.tasks), longLived: cacheDiff(cacheAfter.longLived, cacheBefore.longLived) }
        : undefined,
  };
}

/** Paired blocks: rounds, and cycles timed per block (each block runs one more task than it times). */
const PAIRED_ROUNDS = 6;
const PAIRED_BLOCK = 10;
const SMALL_QUEUE = 100;

/** A device's runner that lets `budget` runs through and holds the next one until `release`. */
interface Gate {
  starts: number[];
  budget: number;
  release?: () => void;
}

function gatedRunners(g: Gate): Runners {
  return runnersFor(async (ctx) => {
    g.starts.push(performance.now());
    ctx.started();
    if (g.budget > 0) g.budget--;
    else await new Promise<void>((resolve) => (g.release = resolve));
  });
}

export interface PairedBlocks {
  rounds: number;
  perBlock: number;
  smallQueued: [number, number];
  largeQueued: [number, number];
  small: Summary;
  large: Summary;
  /** Each round's p50 ratio (large / small). */
  roundRatios: number[];
}

/**
 * The two queue sizes measured at the same time, in turns: a pool with SMALL_QUEUE fresh tasks
 * (submitted after the large queue filled, so its head is as warm as a short queue's is) and the
 * large pool, each with one device whose runner holds every run past its block's budget. Rounds
 * alternate small, large / large, small, a block of PAIRED_BLOCK + 1 cycles each, so both sizes
 * see the same server, the same control-plane heap and the same open workflows, and what differs
 * is the queue behind the scheduler's decision and the head task's cache state. The sequential
 * phases (above) each see the machine of their own minutes, and between runs the 100-queued
 * cycle alone moved 49-72 ms (BENCHMARKS.md, session 34).
 */
async function pairedBlocks(bf: BenchFleet, smallPool: string, largePool: string, concurrency: number): Promise<PairedBlocks> {
  const fill = SMALL_QUEUE + PAIRED_ROUNDS * (PAIRED_BLOCK + 2) + 1;
  await mapLimit(
    Array.from({ length: fill }, () => randomUUID()),
    concurrency,
    (taskId) => bf.fleet.submit({ taskId, pool: smallPool, goal: 'queued [p5 paired]', constraints: { driverType } }).then(() => undefined),
  );
  const gates = new Map<string, Gate>([smallPool, largePool].map((p) => [p, { starts: [], budget: 0 }]));
  const queuedAt = async () => Promise.all([smallPool, largePool].map(async (p) => (await bf.scheduler(p)).queue.length));
  const hostOf = (p: string) => `pb-${p}`;
  const gaps = new Map<string, number[]>([smallPool, largePool].map((p) => [p, []]));
  const roundRatios: number[] = [];
  try {
    for (const p of [smallPool, largePool]) {
      await bf.addHost(hostOf(p), ['d0'], { pool: p, driverType, runners: gatedRunners(gates.get(p)!) });
      await waitUntil(() => (gates.get(p)!.starts.length >= 1 ? true : undefined), `the first run held on ${hostOf(p)}`, 60_000, 20);
    }
    const [small0, large0] = await queuedAt();
    await sleep(1_000);
    for (let r = 0; r < PAIRED_ROUNDS; r++) {
      const order = r % 2 === 0 ? [smallPool, largePool] : [largePool, smallPool];
      const medians = new Map<string, number>();
      for (const p of order) {
        const g = gates.get(p)!;
        const from = g.starts.length;
        g.budget = PAIRED_BLOCK + 1;
        const release = g.release;
        g.release = undefined;
        release?.();
        await waitUntil(
          () => (g.starts.length >= from + PAIRED_BLOCK + 2 ? true : undefined),
          () => `block ${r} on ${p}: ${g.starts.length - from} of ${PAIRED_BLOCK + 2} starts`,
          60_000 + PAIRED_BLOCK * 5_000,
          5,
        );
        const block = g.starts.slice(from, from + PAIRED_BLOCK + 2);
        const d = block.slice(1).map((t, i) => t - block[i]);
        gaps.get(p)!.push(...d);
        medians.set(p, summarize(d).p50);
      }
      roundRatios.push(round(medians.get(largePool)! / medians.get(smallPool)!, 2));
    }
    const [small1, large1] = await queuedAt();
    return {
      rounds: PAIRED_ROUNDS,
      perBlock: PAIRED_BLOCK + 1,
      smallQueued: [small0, small1],
      largeQueued: [large0, large1],
      small: summarize(gaps.get(smallPool)!),
      large: summarize(gaps.get(largePool)!),
      roundRatios,
    };
  } finally {
    for (const [p, g] of gates) {
      g.budget = Infinity;
      g.release?.();
      await bf.stopHost(hostOf(p)).catch(() => undefined);
    }
  }
}

interface RecoveryPhase {
  /** Tasks in the queue when the scheduler was terminated. */
  queued: number;
  /** How many the new run's queue held at the end of the wait. */
  requeued: number;
  /** Terminate -> every one of them queued again in the new run (undefined: not within the wait). */
  allQueuedMs?: number;
  /** Terminate -> the recovery workflow's end, and what it reports. */
  recoveryMs?: number;
  recovery?: { tasks: number; hosts: number; failed: number };
  /** Scheduler runs (roll-overs) of the new chain meanwhile. */
  newRuns: number;
}

/**
 * An operator terminates the pool's scheduler with the whole queue in it (README, "A pool's
 * scheduler or a device workflow terminated or failed"): the time until the new run, started as
 * the control plane's pool watch would, holds every task again.
 */
async function recoveryPhase(bf: BenchFleet, pool: string, budgetMs: number): Promise<RecoveryPhase> {
  const queued = (await bf.scheduler(pool)).queue.length;
  const id = schedulerWorkflowId(pool);
  log(`  ${pool}: terminating its scheduler with ${queued} queued`);
  const t0 = Date.now();
  await bf.client.workflow.getHandle(id).terminate('bench: recovery of a large queue');
  // As the control plane's watch does (its own, every poolWatchMs, may be first: either starts it).
  await restartStoppedSchedulers(bf.client, bf.config);
  const since = `StartTime >= "${new Date(t0).toISOString()}"`;
  // The new chain's first run started it (its id names that run; the chain may have rolled over since).
  const findRecovery = async (): Promise<string | undefined> => {
    for await (const wf of bf.client.workflow.list({ query: `WorkflowId = "${id}" AND ${since}` })) {
      const child = poolRecoveryWorkflowId(pool, wf.runId);
      if (await bf.client.workflow.getHandle(child).describe().then(() => true, () => false)) return child;
    }
    return undefined;
  };
  let recoveryMs: number | undefined;
  let result: RecoveryPhase['recovery'];
  const done = waitUntil(findRecovery, 'the recovery workflow', 60_000, 1_000)
    .then((child) => bf.client.workflow.getHandle(child).result() as Promise<RecoveryPhase['recovery']>)
    .then((r) => {
      recoveryMs = Date.now() - t0;
      result = r;
    })
    .catch((err: unknown) => log(`  recovery workflow: ${String(err)}`));
  let requeued = 0;
  let allQueuedMs: number | undefined;
  let lastLog = 0;
  while (Date.now() - t0 < budgetMs) {
    requeued = (await bf.scheduler(pool).catch(() => undefined))?.queue.length ?? requeued;
    if (requeued >= queued) {
      allQueuedMs = Date.now() - t0;
      break;
    }
    if (Date.now() - lastLog > 30_000) {
      lastLog = Date.now();
      log(`  ${pool}: ${requeued} of ${queued} queued again after ${Math.round((Date.now() - t0) / 1000)} s`);
    }
    await sleep(2_000);
  }
  await withTimeout(done, Math.max(1_000, budgetMs - (Date.now() - t0)), 'the recovery workflow').catch((err: unknown) =>
    log(`  ${String(err)}`),
  );
  let newRuns = 0;
  for await (const _ of bf.client.workflow.list({ query: `WorkflowId = "${id}" AND ${since}` })) newRuns++;
  log(`  ${pool}: ${requeued} of ${queued} queued again${allQueuedMs !== undefined ? ` in ${allQueuedMs} ms` : ' (wait ended)'}; recovery ${JSON.stringify(result)} in ${recoveryMs} ms`);
  return { queued, requeued, allQueuedMs, recoveryMs, recovery: result, newRuns };
}

interface CacheCounts {
  hits: number;
  misses: number;
  size: number;
}
const cacheDiff = (after: CacheCounts, before: CacheCounts): CacheCounts => ({
  hits: after.hits - before.hits,
  misses: after.misses - before.misses,
  size: after.size,
});

/**
 * The control plane's two workflow caches, from its SDK metrics: workflow tasks that found their
 * workflow in memory (hits) or had to replay its history (misses), and how many each holds; the
 * task workflows' worker by its task queue, the long-lived workflows' worker the rest.
 */
async function stickyCache(address: string, tasksQueue: string): Promise<{ tasks: CacheCounts; longLived: CacheCounts } | undefined> {
  try {
    const lines = (await (await fetch(`http://${address}/metrics`)).text()).split('\n').filter((l) => !l.startsWith('#'));
    const counts = (tasks: boolean): CacheCounts => {
      const sum = (name: string) =>
        lines
          .filter((l) => l.startsWith(`temporal_${name}`) && l.includes(`task_queue="${tasksQueue}"`) === tasks)
          .reduce((a, l) => a + Number(l.trim().split(/\s+/).pop()), 0);
      return { hits: sum('sticky_cache_hit'), misses: sum('sticky_cache_miss'), size: sum('sticky_cache_size') };
    };
    return { tasks: counts(true), longLived: counts(false) };
  } catch {
    return undefined;
  }
}

export const p5Scale: Scenario = async (be, o) => {
  const big = o.p5Queue;
  // ---- strategy ----
  const strat = {
    allMatch100: timeAssign(queueOf(100, () => true)),
    allMatchBig: timeAssign(queueOf(big, () => true)),
    lastMatches100: timeAssign(queueOf(100, (i) => i === 99)),
    lastMatchesBig: timeAssign(queueOf(big, (i) => i === big - 1)),
    // 100 idle devices that no queued task can use (a queue of one kind, idle devices of another).
    noneMatch100: timeAssign(queueOf(100, () => false), idleSims(100)),
    noneMatchBig: timeAssign(queueOf(big, () => false), idleSims(100)),
    agingAllMatch100: timeAssign(queueOf(100, () => true), idleSims(3), 'priority_aging'),
    agingAllMatchBig: timeAssign(queueOf(big, () => true), idleSims(3), 'priority_aging'),
  };
  log(`P5 strategy (us/call): ${JSON.stringify(strat)}`);

  // ---- baseline: one slot, a backlog of zero-length activities ----
  const base = await startBaseline(be, 'p5', 1, 1);
  let baseCycles: Summary;
  try {
    const ids = Array.from({ length: o.p5Cycles + 1 }, (_, i) => `p5b-${i}`);
    for (const [i, t] of ids.entries()) await base.submit(t, i);
    await base.waitForCount(ids.length, 120_000);
    const at = ids.map((t) => base.starts.get(t)!).sort((a, b) => a - b);
    baseCycles = summarize(at.slice(1).map((v, i) => v - at[i]));
  } finally {
    await base.stop();
  }

  /**
   * Controls for the server, one sample at a time on the same server with whatever the fleet has
   * open at that moment. `raw`: raw Temporal's start -> activity started. `shape`: the fleet's
   * message shape with empty workflows (start, three signals between workflows, four workflow
   * tasks in series; P2's shape row), made of the same deliveries as the fleet's cycle. If one
   * slows as much as the fleet's cycle between 100 and 10,000 queued, the growth is the server's,
   * not the design's.
   */
  const controlLatency = async (kind: 'raw' | 'shape', label: string): Promise<Summary> => {
    const lat = await startBaseline(be, `p5${kind}-${label}`, 1, 1);
    try {
      if (kind === 'shape') await lat.startShape(1);
      const ms: number[] = [];
      for (let i = 0; i < RAW_SAMPLES; i++) {
        const id = `p5${kind}-${label}-${i}`;
        const t0 = performance.now();
        await (kind === 'shape' ? lat.submitShape(id, i) : lat.submit(id, i));
        await waitUntil(() => (lat.starts.has(id) ? true : undefined), `${kind} sample ${id}`, 30_000);
        ms.push(lat.starts.get(id)! - t0);
      }
      return summarize(ms);
    } finally {
      await lat.stop();
    }
  };
  const raw: Summary[] = [];
  const shapes: Summary[] = [];

  // ---- fleet, control plane as a process ----
  const bf = await startBenchFleet(be, { name: 'p5', hosts: 0, devicesPerHost: 0, controlPlane: false, extraPools: ['large', 'paired'] });
  const metricsAddress = `127.0.0.1:${await freePort()}`;
  const cpConfig = o.p5Cache === undefined ? bf.config : { ...bf.config, maxCachedTasks: o.p5Cache };
  const cp = spawnControlPlaneProcess(be.env.address, cpConfig, metricsAddress);
  const cpu = new CpuMeter(be.cpu.serverPid, () => ({ controlPlane: cp.pid }));
  const phases: QueuePhase[] = [];
  let idleRss: number | undefined;
  let cpuUse;
  let recovered: RecoveryPhase | undefined;
  let paired: PairedBlocks | undefined;
  try {
    await cp.waitForOutput('control plane started', 120_000);
    idleRss = rssMiB(cp.pid);
    const mark = cpu.mark();
    const budgetMs = o.p5FillBudgetMs;
    const [small, large, pairedPool] = bf.pools;
    phases.push(await queuePhase(bf, small, 100, o.p5Cycles, o.concurrency, budgetMs, cp.pid, metricsAddress, cpu, be.metricsUrl));
    raw.push(await controlLatency('raw', 'small'));
    shapes.push(await controlLatency('shape', 'small'));
    phases.push(await queuePhase(bf, large, big, o.p5Cycles, o.concurrency, budgetMs, cp.pid, metricsAddress, cpu, be.metricsUrl));
    raw.push(await controlLatency('raw', 'large'));
    shapes.push(await controlLatency('shape', 'large'));
    cpuUse = cpu.since(mark);
    paired = await pairedBlocks(bf, pairedPool, large, o.concurrency).catch((err: unknown) => {
      log(`  paired blocks failed: ${String(err)}`);
      return undefined;
    });
    if (paired) log(`  paired blocks: ${paired.small.p50} -> ${paired.large.p50} ms (rounds ${paired.roundRatios.join(', ')})`);
    recovered = await recoveryPhase(bf, large, 20 * 60_000);
  } finally {
    await bf.stop();
    await stopProc(cp, 10_000);
  }
  const [s, l] = phases;
  const stratRatio = round(strat.allMatchBig / strat.allMatch100, 1);
  const stratRatioWorst = round(strat.lastMatchesBig / strat.lastMatches100, 1);
  const cycleRatio = round(l.cycles.p50 / s.cycles.p50, 2);
  const wftRatio = round(l.schedulerWftWorkMs.p50 / s.schedulerWftWorkMs.p50, 2);
  const n = l.queued;
  const perTask = l.largestCarry?.bytesPerQueuedTask ?? s.largestCarry?.bytesPerQueuedTask;
  return {
    id: 'P5',
    title: `scale: assignment cost with 100 vs ${n} queued tasks${n < big ? ` (wanted ${big}; fill budget reached)` : ''}`,
    rows: [
      {
        metric: `decision cycle on one device, p50 (ms): 100 -> ${n} queued`,
        fleet: `${s.cycles.p50} -> ${l.cycles.p50}`,
        baseline: baseCycles.p50,
        ratio: cycleRatio,
        target: '<= 1.5x',
        met: cycleRatio <= 1.5,
      },
      { metric: `decision cycle p90 (ms): 100 -> ${n}`, fleet: `${s.cycles.p90} -> ${l.cycles.p90}`, baseline: baseCycles.p90 },
      ...(paired
        ? [
            {
              metric: `decision cycle p50, paired blocks (ms; both sizes in turns on the same server and control plane, ${paired.rounds} rounds of ${paired.perBlock} cycles each): ${paired.smallQueued.join('-')} -> ${paired.largeQueued.join('-')} queued`,
              fleet: `${paired.small.p50} -> ${paired.large.p50}`,
              ratio: round(paired.large.p50 / paired.small.p50, 2),
              target: '<= 1.5x',
              met: paired.large.p50 / paired.small.p50 <= 1.5,
            },
            {
              metric: '  paired blocks: p90 (ms) / each round\'s p50 ratio',
              fleet: `${paired.small.p90} -> ${paired.large.p90} / ${paired.roundRatios.join(', ')}`,
            },
          ]
        : [{ metric: 'decision cycle, paired blocks', fleet: 'failed (see the log)' }]),
      ...(raw.length === 2
        ? [
            {
              metric: `  control: raw Temporal on the same server with the phase's tasks still queued, start -> activity started, p50 (ms), ${RAW_SAMPLES} samples: 100 -> ${n}; ratio`,
              fleet: `${raw[0].p50} -> ${raw[1].p50}`,
              ratio: round(raw[1].p50 / raw[0].p50, 2),
            },
            {
              metric: "  the fleet's cycle ratio over the control's (growth beyond the server's own)",
              fleet: '',
              ratio: round(cycleRatio / (raw[1].p50 / raw[0].p50), 2),
            },
          ]
        : []),
      ...(shapes.length === 2
        ? [
            {
              metric: `  control: the fleet's message shape with empty workflows (start, 3 signals, 4 workflow tasks in series) on the same server, submit -> activity started, p50 (ms), ${RAW_SAMPLES} samples: 100 -> ${n}; ratio`,
              fleet: `${shapes[0].p50} -> ${shapes[1].p50}`,
              ratio: round(shapes[1].p50 / shapes[0].p50, 2),
            },
            {
              metric: "  the fleet's cycle ratio over the shape control's",
              fleet: '',
              ratio: round(cycleRatio / (shapes[1].p50 / shapes[0].p50), 2),
            },
          ]
        : []),
      {
        metric: `  before the cycles: server settled (ms; < ${SETTLED_CORES} cores over a second), 100 -> ${n}`,
        fleet: `${s.settle.ms} -> ${l.settle.ms}`,
      },
      {
        metric: `  CPU cores during the cycles, server / control plane / this process (host, clients) / other processes: 100 -> ${n}`,
        fleet: [s, l].map((p) => `${p.cycleCores.server} / ${p.cycleCores.controlPlane} / ${p.cycleCores.benchProcess} / ${p.cycleCores.others}`).join(' -> '),
      },
      // Where the server's time per cycle went: the eight biggest at the large queue.
      ...Object.entries(l.serverOps)
        .sort((a, b) => b[1].ms - a[1].ms)
        .slice(0, 8)
        .map(([k, v]) => {
          const sm = s.serverOps[k];
          return {
            metric: `  server ${k}: calls / ms per cycle, 100 -> ${n}`,
            fleet: `${sm ? `${sm.calls} / ${sm.ms}` : '0 / 0'} -> ${v.calls} / ${v.ms}`,
          };
        }),
      ...Object.keys(l.legs).map((k) => ({
        metric: `  ${k}, p50 (ms): 100 -> ${n}`,
        fleet: `${s.legs[k]?.p50 ?? 'n/a'} -> ${l.legs[k].p50}`,
      })),
      ...(['tasks', 'longLived'] as const).flatMap((w) => {
        const which = w === 'tasks' ? `task workflows' cache (limit ${cpConfig.maxCachedTasks})` : "long-lived workflows' cache";
        const c = (p: QueuePhase) => p.stickyCache?.[w];
        const fmt = (p: QueuePhase) => (c(p) ? `${c(p)!.misses} / ${c(p)!.hits}` : 'n/a');
        return [
          { metric: `control plane's ${which} over the cycles: misses (replays) / hits: 100 -> ${n}`, fleet: `${fmt(s)} -> ${fmt(l)}` },
          { metric: `  workflows held after the cycles, 100 -> ${n}`, fleet: `${c(s)?.size ?? 'n/a'} -> ${c(l)?.size ?? 'n/a'}` },
        ];
      }),
      {
        metric: `scheduler workflow task, p50 (ms): 100 -> ${n}`,
        fleet: `${s.schedulerWftWorkMs.p50} -> ${l.schedulerWftWorkMs.p50}`,
        ratio: wftRatio,
        target: '<= 1.5x',
        met: wftRatio <= 1.5,
      },
      {
        metric: `fifo_match.assign, all match (us/call): 100 -> ${big}`,
        fleet: `${strat.allMatch100} -> ${strat.allMatchBig}`,
        ratio: stratRatio,
        target: '<= 1.5x',
        met: stratRatio <= 1.5,
      },
      {
        metric: `fifo_match.assign, only the last matches (us/call): 100 -> ${big}`,
        fleet: `${strat.lastMatches100} -> ${strat.lastMatchesBig}`,
        ratio: stratRatioWorst,
      },
      {
        metric: `fifo_match.assign, none match 100 idle devices (us/call): 100 -> ${big}`,
        fleet: `${strat.noneMatch100} -> ${strat.noneMatchBig}`,
        ratio: round(strat.noneMatchBig / strat.noneMatch100, 1),
      },
      {
        metric: `priority_aging.assign, all match (us/call): 100 -> ${big}`,
        fleet: `${strat.agingAllMatch100} -> ${strat.agingAllMatchBig}`,
        ratio: round(strat.agingAllMatchBig / strat.agingAllMatch100, 1),
      },
      { metric: `device added -> first task started (ms): 100 -> ${n}`, fleet: `${s.firstAssignMs} -> ${l.firstAssignMs}` },
      {
        metric: `queue fill: admitted tasks/s (${n} tasks)`,
        fleet: round((n / l.fillMs) * 1000, 1),
      },
      { metric: `control-plane process RSS (MiB): idle -> ${n} queued`, fleet: `${idleRss} -> ${l.controlPlaneRssMiB}` },
      { metric: `scheduler runs (continue-as-new) after ${n} queued`, fleet: l.schedulerRuns },
      {
        metric: `submit calls never answered within ${SUBMIT_TIMEOUT_MS / 1000} s (admission reply lost)`,
        fleet: s.unanswered.count + l.unanswered.count,
        baseline: 0,
        target: '0',
        met: s.unanswered.count + l.unanswered.count === 0,
      },
      {
        metric: '  their enqueue signal: events before the run\'s continue-as-new (max)',
        fleet: l.unanswered.count + s.unanswered.count > 0
          ? Math.max(...l.unanswered.enqueueEventsBeforeContinueAsNew, ...s.unanswered.enqueueEventsBeforeContinueAsNew)
          : 'n/a',
      },
      {
        metric: 'scheduler continue-as-new input: largest (bytes) / queued tasks carried',
        fleet: l.largestCarry ? `${l.largestCarry.bytes} / ${l.largestCarry.queued}` : 'no continue-as-new yet',
      },
      {
        metric: `projected continue-as-new input at ${big} queued (bytes; Temporal rejects payloads > 2 MiB)`,
        fleet: perTask ? Math.round(perTask * big) : `~${Math.round((l.queryBytes / Math.max(1, n)) * big)} (from query size)`,
        target: '< 2,097,152',
        met: (perTask ? perTask * big : (l.queryBytes / Math.max(1, n)) * big) < 2_097_152,
      },
      { metric: `schedulerState query answer at ${n} queued (bytes)`, fleet: l.queryBytes },
      {
        metric: `scheduler terminated with ${recovered?.queued ?? 'n/a'} queued: all queued again in the new run (s)`,
        fleet:
          recovered?.allQueuedMs !== undefined
            ? round(recovered.allQueuedMs / 1000, 1)
            : `not within 20 min (${recovered?.requeued ?? 'n/a'} of ${recovered?.queued ?? 'n/a'})`,
      },
      {
        metric: '  the recovery workflow: ended after (s) / tasks told / failed signals / new scheduler runs',
        fleet: recovered
          ? `${recovered.recoveryMs !== undefined ? round(recovered.recoveryMs / 1000, 1) : 'n/a'} / ${recovered.recovery?.tasks ?? 'n/a'} / ${recovered.recovery?.failed ?? 'n/a'} / ${recovered.newRuns}`
          : 'n/a',
      },
    ],
    notes: [
      `decision cycle = interval between consecutive zero-length tasks started on the only matching device (${o.p5Cycles} cycles); baseline = the same on one raw-Temporal activity slot with a backlog`,
      'strategy timings: 3 free devices unless the row says otherwise, median of 5 batches after warm-up, in this process',
    ],
    details: { strategyMicros: strat, phases, paired, recovery: recovered, baselineCycles: baseCycles, rawLatency: raw, shapeLatency: shapes, controlPlaneIdleRssMiB: idleRss, cpu: cpuUse },
  };
};
