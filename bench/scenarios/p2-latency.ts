/**
 * P2 dispatch latency with idle devices: one task at a time (closed loop); latency = submit call ->
 * the host's runner entered (fleet) / the activity entered (baseline). Same process, same clock.
 * Also: what the idle fleet costs before the samples, and a per-hop breakdown from the histories.
 */
import type { Client } from '@temporalio/client';
import { shapeGoSignal } from '../baseline-workflows';
import { startBaseline, type ShapeVariant } from '../lib/baseline';
import { fleetCpuMeter, startLoadFleet } from '../lib/fleet';
import { closedLoop } from '../lib/load';
import {
  closeBounces,
  eventMs,
  eventTypeName,
  fetchRuns,
  overlappingTasks,
  pathWorkflowTasks,
  workflowTaskTimings,
  type Run,
} from '../lib/history';
import { schedulerWorkflowId } from '../../workflows/ids';
import type { CpuUse } from '../lib/cpu';
import { log, mapLimit, round, sleep, summarize } from '../lib/util';
import type { Scenario } from './types';

const IDLE_MS = 20_000;

/**
 * What a workflow task less in series would give, measured rather than guessed: variants of the
 * fleet's shape with empty workflows (bench/baseline-workflows.ts). The fleet works like none of them.
 */
const SHAPE_VARIANTS: Array<{ key: string; prefix: string; variant: ShapeVariant; label: string }> = [
  {
    key: 'shapeDeviceOffPath',
    prefix: 'p2d',
    variant: { direct: true },
    label: 'the shape with the device off the path (scheduler relay signals the task and the device at once; 3 workflow tasks in series)',
  },
  {
    key: 'shapeDeviceOffPathClientEnqueue',
    prefix: 'p2e',
    variant: { direct: true, clientEnqueue: true },
    label: 'the same, the submitter signalling the scheduler relay after the start (2 workflow tasks in series after it)',
  },
  {
    key: 'shapeByUpdates',
    prefix: 'p2u',
    variant: { viaUpdates: true },
    label:
      "the shape by updates: the task's first workflow task runs a local activity that updates the scheduler relay, then the device relay, then schedules the activity",
  },
];

export const p2Latency: Scenario = async (be, o) => {
  const n = o.latencySamples;
  const timeoutMs = 60_000;
  const gapMs = 200;
  log(`P2 baseline: ${n} samples, one at a time`);
  const base = await startBaseline(be, 'p2', o.hosts, o.devices);
  let b: Awaited<ReturnType<typeof closedLoop>>;
  let shape: Awaited<ReturnType<typeof closedLoop>>;
  const variants: Array<Awaited<ReturnType<typeof closedLoop>>> = [];
  // Five warm-up tasks, then the samples, one at a time.
  const samples = (submit: (taskId: string, i: number) => Promise<void>, prefix: string) =>
    closedLoop(5, 100, (i) => submit(`warm-${prefix}-${i}`, i), (i) => base.starts.get(`warm-${prefix}-${i}`), 20_000).then(
      () =>
        closedLoop(
          n,
          gapMs,
          (i) => submit(`${prefix}-${i}`, i),
          (i) => base.starts.get(`${prefix}-${i}`),
          timeoutMs,
        ),
    );
  try {
    b = await samples(base.submit, 'p2b');
    // The fleet's message shape (start, three signals between workflows, four workflow tasks in
    // series) with empty workflows: what that shape alone costs on this server, in the same run.
    log(`P2 the fleet's shape with empty workflows: ${n} samples, one at a time`);
    await base.startShape(o.devices);
    shape = await samples(base.submitShape, 'p2s');
    for (const v of SHAPE_VARIANTS) {
      log(`P2 ${v.label}: ${n} samples`);
      variants.push(await samples((t, i) => base.submitShape(t, i, v.variant), v.prefix));
    }
  } finally {
    await base.stop();
  }
  // The same workflow tasks in the bare baseline's and the shape's sample histories: what the SDK
  // and the server take for one on this machine, against the fleet's own (rows below).
  const basePath = await pathTimings(be.env.client, n, (i) => base.workflowId(`p2b-${i}`));
  const shapePath = await pathTimings(be.env.client, n, (i) => base.workflowId(`p2s-${i}`), shapeGoSignal.name);
  log(`P2 fleet: ${n} samples, one at a time, over ${o.hosts} hosts x ${o.devices} devices`);
  const bf = await startLoadFleet(be, 'p2', o);
  const cpPid = bf.controlPlanePid;
  let f: Awaited<ReturnType<typeof closedLoop>>;
  let idle: CpuUse;
  let breakdown: Record<string, ReturnType<typeof summarize>>;
  let sched: SchedulerDuringSamples;
  try {
    await closedLoop(
      5,
      100,
      (i) => bf.fleet.submit({ taskId: `warm-${i}`, goal: 'warm-up' }),
      (i) => bf.recorder.starts.get(`warm-${i}`)?.at,
      20_000,
    );
    // The fleet at rest first: what 100 idle hosts (snapshots every 10 s) cost the control plane.
    const meter = fleetCpuMeter(be.cpu, bf);
    const idleMark = meter.mark();
    await sleep(IDLE_MS);
    idle = meter.since(idleMark);
    f = await closedLoop(
      n,
      gapMs,
      (i) => bf.fleet.submit({ taskId: `p2f-${i}`, goal: 'bench zero-length' }),
      (i) => bf.recorder.starts.get(`p2f-${i}`)?.at,
      timeoutMs,
    );
    // Where the time goes: server timestamps from each sample task's history (same machine clock).
    const segs: Record<string, number[]> = {
      'submit -> task started': [],
      'task started -> enqueue reached scheduler': [],
      'enqueue -> assignment reached task (scheduler + device)': [],
      'assignment -> activity scheduled (task)': [],
      'activity scheduled -> runner entered (matching + host)': [],
      'task 1st workflow task: waiting for a poller': [],
      'task 1st workflow task: on the worker': [],
      'task 1st workflow task done -> enqueue delivered': [],
      'assignment workflow task: waiting for a poller': [],
      'assignment workflow task: on the worker': [],
    };
    let slowest = { taskId: '', enqueued: NaN, assigned: NaN };
    await mapLimit(Array.from({ length: n }, (_, i) => i), 8, async (i) => {
      const r = bf.recorder.starts.get(`p2f-${i}`);
      if (!r) return;
      const [run] = await fetchRuns(bf.client, `task/p2f-${i}`, 1);
      const at = (type: string, pred: (e: (typeof run.events)[number]) => boolean = () => true) => {
        const e = run.events.find((x) => eventTypeName(x) === type && pred(x));
        return e ? eventMs(e) : NaN;
      };
      const started = at('WorkflowExecutionStarted');
      const enqueued = at('ExternalWorkflowExecutionSignaled');
      const scheduled = at('ActivityTaskScheduled');
      // The workflow task that carried the first enqueue, and the one that took the assignment.
      const path = pathWorkflowTasks(run.events, 'assignment');
      const assigned = path.signalledAt;
      const firstDone = at('WorkflowTaskCompleted');
      const vals = [
        started - f.sentEpoch[i],
        enqueued - started,
        assigned - enqueued,
        scheduled - assigned,
        r.epoch - scheduled,
        path.first[0],
        path.first[1],
        enqueued - firstDone,
        path.signalled[0],
        path.signalled[1],
      ];
      Object.values(segs).forEach((arr, k) => Number.isFinite(vals[k]) && arr.push(vals[k]));
      if (Number.isFinite(assigned - enqueued) && !(assigned - enqueued <= slowest.assigned - slowest.enqueued))
        slowest = { taskId: `p2f-${i}`, enqueued, assigned };
    });
    sched = schedulerDuringSamples(await fetchRuns(bf.client, schedulerWorkflowId(bf.pool)), f.sentEpoch[0], slowest);
    breakdown = Object.fromEntries(Object.entries(segs).map(([k, v]) => [k, summarize(v, 0)]));
  } finally {
    await bf.stop();
  }
  const fs = summarize(f.latencies);
  const bs = summarize(b.latencies);
  const fsub = summarize(f.submitLatencies);
  const bsub = summarize(b.submitLatencies);
  const ss = summarize(shape.latencies);
  const vs = variants.map((v) => summarize(v.latencies));
  log(`  fleet p50 ${fs.p50} p99 ${fs.p99} ms; baseline p50 ${bs.p50} p99 ${bs.p99} ms`);
  return {
    id: 'P2',
    title: `dispatch latency (submit -> host activity started), idle devices, ${o.hosts} hosts x ${o.devices} devices`,
    rows: [
      { metric: 'p50 (ms)', fleet: fs.p50, baseline: bs.p50, ratio: round(fs.p50 / bs.p50, 2), target: '<= 50 ms', met: fs.p50 <= 50 },
      { metric: 'p99 (ms)', fleet: fs.p99, baseline: bs.p99, ratio: round(fs.p99 / bs.p99, 2), target: '<= 250 ms', met: fs.p99 <= 250 },
      { metric: 'p90 / max (ms)', fleet: `${fs.p90} / ${fs.max}`, baseline: `${bs.p90} / ${bs.max}` },
      {
        metric:
          "p50 / p99 (ms), baseline column: the fleet's shape with empty workflows (start, 3 signals, 4 workflow tasks in series)",
        fleet: `${fs.p50} / ${fs.p99}`,
        baseline: `${ss.p50} / ${ss.p99}`,
        ratio: round(fs.p50 / ss.p50, 2),
      },
      { metric: '  shape samples missing (never started)', fleet: '', baseline: shape.missing },
      ...SHAPE_VARIANTS.map((v, k) => ({ metric: `  ${v.label}, p50 / p99 (ms)`, fleet: '', baseline: `${vs[k].p50} / ${vs[k].p99}` })),
      { metric: '  variant samples missing (never started)', fleet: '', baseline: variants.reduce((sum, v) => sum + v.missing, 0) },
      { metric: 'submit call returns, p50 / p99 (ms; fleet: admitted)', fleet: `${fsub.p50} / ${fsub.p99}`, baseline: `${bsub.p50} / ${bsub.p99}` },
      { metric: 'samples missing (never started)', fleet: f.missing, baseline: b.missing },
      {
        metric: `idle fleet before the samples: CPU cores used (this process / dev server${cpPid === undefined ? '' : ' / control-plane process'})`,
        fleet: [idle.benchProcessSec, idle.serverSec, ...Object.values(idle.extra)].map((s) => round(s / idle.wallSec, 2)).join(' / '),
      },
      ...Object.entries(breakdown).map(([k, v]) => ({ metric: `  ${k}, p50 / p99 (ms)`, fleet: `${v.p50} / ${v.p99}` })),
      {
        metric:
          "the bare baseline's one workflow task (start -> activity scheduled): waiting for a poller / on the worker, p50 (ms)",
        fleet: '',
        baseline: `${basePath.firstWait.p50} / ${basePath.firstWork.p50}`,
      },
      // The fleet's workflow tasks and legs beside the same ones of the shape (empty workflows).
      ...(
        [
          ['task 1st workflow task: on the worker', 'firstWork', 'its first workflow task'],
          ['assignment workflow task: on the worker', 'signalledWork', 'the workflow task that takes its go signal'],
          ['task started -> enqueue reached scheduler', 'toSent', 'its first signal delivered'],
          ['enqueue -> assignment reached task (scheduler + device)', 'sentToSignalled', 'that signal -> go back at the task (two relays)'],
          ['assignment -> activity scheduled (task)', 'signalledToScheduled', 'go -> activity scheduled'],
        ] as const
      ).map(([leg, key, theirs]) => ({
        metric: `${leg}, p50 / p99 (ms); baseline column: the shape's (${theirs})`,
        fleet: `${breakdown[leg].p50} / ${breakdown[leg].p99}`,
        baseline: `${shapePath[key].p50} / ${shapePath[key].p99}`,
        ratio: round(breakdown[leg].p50 / shapePath[key].p50, 2),
      })),
      {
        metric:
          "the pool's scheduler during the samples: runs (continue-as-new) / closes bounced by a signal / workflow tasks on the worker p50, max (ms) / over 250 ms",
        fleet: `${sched.runs} / ${sched.bounces} / ${sched.workP50}, ${sched.workMax} / ${sched.workOver250}`,
      },
      {
        metric:
          "the slowest sample's enqueue -> assignment (ms) / the scheduler's longest workflow task that overlapped it (ms) / a new scheduler run started in it",
        fleet: `${sched.slowest.ms} / ${sched.slowest.longestWorkMs} / ${sched.slowest.newRun ? 'yes' : 'no'}`,
      },
    ],
    notes: [
      `${n} samples, closed loop (one task at a time, ${gapMs} ms apart) after 5 warm-up tasks; latency measured in-process (performance.now)`,
      'breakdown rows: server timestamps from each sample task\'s history',
      "shape row: bench/baseline-workflows.ts shapeTaskWorkflow on the baseline's workers; its ratio = fleet p50 / shape p50",
      'shape variants (ShapeHop.direct, ShapeInput.clientEnqueue, ShapeInput.viaUpdates): what a workflow task less in series would give; the fleet works like none of them',
    ],
    details: { fleet: fs, baseline: bs, shape: ss, baselinePath: basePath, shapePath, ...Object.fromEntries(SHAPE_VARIANTS.map((v, k) => [v.key, vs[k]])), fleetSubmit: fsub, baselineSubmit: bsub, breakdown, scheduler: sched, idleFleetCpu: idle, pool: bf.pool },
  };
};

/** The dispatch path's workflow tasks in `n` sample histories (see pathWorkflowTasks), summarized. */
async function pathTimings(client: Client, n: number, workflowId: (i: number) => string, signalName?: string) {
  const firstWait: number[] = [];
  const firstWork: number[] = [];
  const signalledWork: number[] = [];
  // The same legs as the fleet's breakdown rows: start -> its first signal delivered -> the signal
  // back (the shape's go) -> the activity scheduled.
  const toSent: number[] = [];
  const sentToSignalled: number[] = [];
  const signalledToScheduled: number[] = [];
  const push = (arr: number[], v: number) => Number.isFinite(v) && arr.push(v);
  await mapLimit(Array.from({ length: n }, (_, i) => i), 8, async (i) => {
    const [run] = await fetchRuns(client, workflowId(i), 1).catch(() => [] as Run[]);
    if (!run) return;
    const p = pathWorkflowTasks(run.events, signalName);
    push(firstWait, p.first[0]);
    push(firstWork, p.first[1]);
    push(signalledWork, p.signalled[1]);
    const at = (type: string) => {
      const e = run.events.find((x) => eventTypeName(x) === type);
      return e ? eventMs(e) : NaN;
    };
    const sent = at('ExternalWorkflowExecutionSignaled');
    push(toSent, sent - at('WorkflowExecutionStarted'));
    push(sentToSignalled, p.signalledAt - sent);
    push(signalledToScheduled, at('ActivityTaskScheduled') - p.signalledAt);
  });
  return {
    firstWait: summarize(firstWait, 0),
    firstWork: summarize(firstWork, 0),
    signalledWork: summarize(signalledWork, 0),
    toSent: summarize(toSent, 0),
    sentToSignalled: summarize(sentToSignalled, 0),
    signalledToScheduled: summarize(signalledToScheduled, 0),
  };
}

interface SchedulerDuringSamples {
  runs: number;
  bounces: number;
  workP50: number;
  workMax: number;
  workOver250: number;
  slowest: { taskId: string; ms: number; longestWorkMs: number; newRun: boolean };
}

/**
 * The pool's scheduler while the samples ran, from its histories: a p99 far above the p50 is a few
 * slow samples, and the scheduler is where one waits longest when its workflow task is slow (a
 * replay after a bounce or a cache eviction, or a roll-over to a new run).
 */
function schedulerDuringSamples(
  runs: Run[],
  fromMs: number,
  slowest: { taskId: string; enqueued: number; assigned: number },
): SchedulerDuringSamples {
  const lastAt = (r: Run) => (r.events.length ? eventMs(r.events[r.events.length - 1]) : -Infinity);
  const during = runs.filter((r) => lastAt(r) >= fromMs);
  const work = during.flatMap((r) => workflowTaskTimings(r.events, fromMs).workMs);
  // The workflow tasks that ran at some point between the slow sample's enqueue and its assignment.
  const overlapping = during.flatMap((r) => overlappingTasks(r.events, slowest.enqueued, slowest.assigned));
  const summary = summarize(work, 0);
  return {
    runs: during.length,
    bounces: during.reduce((n, r) => n + closeBounces(r.events), 0),
    workP50: summary.p50,
    workMax: summary.max,
    workOver250: work.filter((ms) => ms > 250).length,
    slowest: {
      taskId: slowest.taskId,
      ms: slowest.assigned - slowest.enqueued,
      longestWorkMs: Math.max(0, ...overlapping),
      newRun: during.some((r) => !r.first && eventMs(r.events[0]) > slowest.enqueued && eventMs(r.events[0]) <= slowest.assigned),
    },
  };
}
