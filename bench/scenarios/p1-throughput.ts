/**
 * P1 throughput: N zero-length tasks over H hosts x D devices, end to end (first submit to last
 * workflow closed), against the baseline (one workflow per task, one activity on a host queue).
 */
import { writeFileSync } from 'node:fs';
import { temporal } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { signalKeysFromEnv } from '../../control-plane/signal-auth';
import { controlPlaneDataConverter } from '../../control-plane/worker';
import { schedulerWorkflowId } from '../../workflows/ids';
import { startBaseline } from '../lib/baseline';
import type { BenchEnv } from '../lib/env';
import { closeBounces, fetchRuns, rollOverGaps, workflowTaskTimings, type Run } from '../lib/history';
import { startLoadFleet } from '../lib/fleet';
import { burstBaseline, burstFleet, type BurstResult } from '../lib/load';
import { log, percentile, round } from '../lib/util';
import type { Scenario } from './types';

/** P1's floor: the shape with the task's enqueue and the device's hop off the path (P2's 2-workflow-task variant). */
const SHAPE_FLOOR = { direct: true, clientEnqueue: true } as const;

/** Server / this process CPU ms per completed task (a control-plane process counted with this process). */
function cpuSplit(r: BurstResult): string {
  const n = Math.max(1, r.completed);
  const extra = Object.values(r.cpu.extra).reduce((a, b) => a + (Number.isFinite(b) ? b : 0), 0);
  return `${round((r.cpu.serverSec * 1000) / n, 1)} / ${round(((r.cpu.benchProcessSec + extra) * 1000) / n, 1)}`;
}

export const p1Throughput: Scenario = async (be, o) => {
  const ids = (p: string) => Array.from({ length: o.tasks }, (_, i) => `${p}-${String(i).padStart(6, '0')}`);
  const timeoutMs = Math.max(180_000, o.tasks * 500);

  log(`P1 baseline: ${o.tasks} workflows over ${o.hosts} host queues x ${o.devices} slots`);
  const base = await startBaseline(be, 'p1', o.hosts, o.devices);
  let baseline;
  let shape;
  let floor;
  let shapeLA;
  try {
    baseline = await burstBaseline(be.cpu, be.env.client, base, ids('p1b'), o.concurrency, timeoutMs);
    log(`  baseline: ${baseline.tasksPerSecond} tasks/s (${baseline.durationMs} ms)`);
    // The fleet's message shape with empty workflows on the same workers: one scheduler relay and a
    // relay per device. What the shape alone allows on this server, in the same run.
    log(`P1 the fleet's shape with empty workflows: ${o.tasks} tasks, ${o.hosts * o.devices} device relays`);
    await base.startShape(o.hosts * o.devices);
    shape = await burstBaseline(be.cpu, be.env.client, base, ids('p1s'), o.concurrency, timeoutMs, true);
    log(`  shape: ${shape.tasksPerSecond} tasks/s (${shape.durationMs} ms)`);
    // The lightest shape that still passes a scheduler and a device workflow: the submitter signals
    // the scheduler relay, which tells the task and the device relay at once (no device gate before
    // the run, no task-side enqueue). A floor for any design with the three workflows, not a design.
    log(`P1 the lightest shape (submitter enqueues, device off the task's path): ${o.tasks} tasks`);
    floor = await burstBaseline(be.cpu, be.env.client, base, ids('p1l'), o.concurrency, timeoutMs, SHAPE_FLOOR);
    log(`  lightest shape: ${floor.tasksPerSecond} tasks/s (${floor.durationMs} ms)`);
    log(`P1 the shape with the scheduler relay signalling by a local activity: ${o.tasks} tasks`);
    shapeLA = await burstBaseline(be.cpu, be.env.client, base, ids('p1a'), o.concurrency, timeoutMs, {
      relayByLocalActivity: true,
    });
    log(`  shape, relay by local activity: ${shapeLA.tasksPerSecond} tasks/s (${shapeLA.durationMs} ms)`);
  } finally {
    await base.stop();
  }

  log(`P1 fleet: ${o.tasks} tasks over ${o.hosts} hosts x ${o.devices} devices`);
  const bf = await startLoadFleet(be, 'p1', o);
  let fleet;
  let schedulerRuns: Run[];
  try {
    fleet = await burstFleet(be.cpu, bf, ids('p1f'), o.concurrency, timeoutMs);
    schedulerRuns = await fetchRuns(be.env.client, schedulerWorkflowId(bf.pool));
  } finally {
    await bf.stop();
  }
  log(`  fleet: ${fleet.tasksPerSecond} tasks/s (${fleet.durationMs} ms)`);
  const sched = await schedulerRunStats(be, schedulerRuns);
  const ratio = round(fleet.tasksPerSecond / baseline.tasksPerSecond, 2);
  return {
    id: 'P1',
    title: `throughput, ${o.tasks} zero-length tasks, ${o.hosts} hosts x ${o.devices} devices`,
    rows: [
      {
        metric: 'end-to-end tasks/s',
        fleet: fleet.tasksPerSecond,
        baseline: baseline.tasksPerSecond,
        ratio,
        target: '>= 0.5x baseline',
        met: ratio >= 0.5,
      },
      {
        metric:
          "end-to-end tasks/s, baseline column: the fleet's shape with empty workflows (start, 3 signals between workflows, a release signal)",
        fleet: fleet.tasksPerSecond,
        baseline: shape.tasksPerSecond,
        ratio: round(fleet.tasksPerSecond / shape.tasksPerSecond, 2),
      },
      {
        metric: '  the shape against the bare baseline: tasks/s ratio / CPU ms per task / tasks not completed',
        fleet: '',
        baseline: `${round(shape.tasksPerSecond / baseline.tasksPerSecond, 2)} / ${shape.cpuMsPerTask} / ${shape.notCompleted}`,
      },
      {
        metric:
          '  the lightest shape with a scheduler and a device workflow (the submitter signals the scheduler relay; it signals the task and the device relay at once; a release signal): tasks/s, ratio to the bare baseline / CPU ms per task / tasks not completed',
        fleet: '',
        baseline: `${floor.tasksPerSecond}, ${round(floor.tasksPerSecond / baseline.tasksPerSecond, 2)} / ${floor.cpuMsPerTask} / ${floor.notCompleted}`,
      },
      {
        metric:
          "  the fleet's shape, the scheduler relay sending its signals by a local activity (the client) instead of by commands: tasks/s, ratio to the bare baseline / CPU ms per task / tasks not completed",
        fleet: '',
        baseline: `${shapeLA.tasksPerSecond}, ${round(shapeLA.tasksPerSecond / baseline.tasksPerSecond, 2)} / ${shapeLA.cpuMsPerTask} / ${shapeLA.notCompleted}`,
      },
      {
        metric: `CPU ms / task (this process + dev server${o.controlPlane === 'process' ? '; fleet: + control-plane process' : ''})`,
        fleet: fleet.cpuMsPerTask,
        baseline: baseline.cpuMsPerTask,
        ratio: round(fleet.cpuMsPerTask / baseline.cpuMsPerTask, 2),
      },
      {
        metric:
          'CPU ms / task, split: dev server / this process (workers, hosts, clients); shape, lightest shape, relay by local activity in the baseline column after the bare baseline',
        fleet: cpuSplit(fleet),
        baseline: [baseline, shape, floor, shapeLA].map(cpuSplit).join('; '),
      },
      {
        metric: 'CPU s used by other processes during the run',
        fleet: fleet.cpu.othersSec,
        baseline: baseline.cpu.othersSec,
      },
      { metric: 'submit phase (ms; fleet: until admitted)', fleet: fleet.submitMs, baseline: baseline.submitMs },
      { metric: 'tasks not completed', fleet: fleet.notCompleted, baseline: baseline.notCompleted },
      {
        metric: 'submit calls that threw (task may still run)',
        fleet: fleet.submitErrors,
        baseline: baseline.submitErrors,
      },
      { metric: 'fleet setup: enrol + start hosts, devices online (ms)', fleet: bf.setupMs },
      {
        metric: 'scheduler runs (continue-as-new) / closes bounced by a signal (UnhandledCommand)',
        fleet: `${sched.runs} / ${sched.bounces}`,
      },
      {
        metric:
          'scheduler roll-overs: pool idle across each, max / median (ms; last reserve or batch of sends of a run -> first of the next)',
        fleet: sched.rollGapsMs.length
          ? `${Math.max(...sched.rollGapsMs)} / ${percentile(sched.rollGapsMs, 50)}`
          : 'n/a',
      },
      {
        metric: 'scheduler roll-overs: signals undelivered at close (the server drops them: must be 0)',
        fleet: sched.undelivered.reduce((a, b) => a + b, 0),
      },
      {
        metric: 'scheduler: longest workflow task (ms; after a bounce the SDK replays the whole run)',
        fleet: sched.longestTaskMs,
      },
      {
        metric: 'scheduler: cold replay of its longest run, after the burst (ms / events)',
        fleet: `${sched.replayMs} / ${sched.replayEvents}`,
      },
    ],
    notes: [`submit concurrency ${o.concurrency}; end = last workflow close time (visibility)`],
    details: { fleet, baseline, shape, floor, shapeLA, setupMs: bf.setupMs, pool: bf.pool, scheduler: sched },
  };
};

/**
 * The scheduler under saturation: how often it rolled over, how often the server bounced the
 * closing workflow task, its longest workflow task, and what replaying its longest run costs on
 * the quiet machine afterwards (what a bounce, a cache eviction or a worker restart costs).
 * BENCH_DUMP_SCHEDULER=<prefix> also writes every run as a binary History proto (<prefix>.<n>.pb).
 */
async function schedulerRunStats(be: BenchEnv, runs: Run[]) {
  const History = temporal.api.history.v1.History;
  const dump = process.env.BENCH_DUMP_SCHEDULER;
  if (dump)
    runs.forEach((r, i) =>
      writeFileSync(`${dump}.${i}.pb`, History.encode(History.create({ events: r.events })).finish()),
    );
  const longest = runs.reduce<Run | undefined>((a, r) => (!a || r.events.length > a.events.length ? r : a), undefined);
  let replayMs = 0;
  if (longest) {
    const started = performance.now();
    await Worker.runReplayHistory(
      { workflowBundle: be.fleetBundle, dataConverter: controlPlaneDataConverter(signalKeysFromEnv()) },
      History.create({ events: longest.events }),
      longest.workflowId,
    );
    replayMs = Math.round(performance.now() - started);
  }
  const { gapsMs: rollGapsMs, undelivered } = rollOverGaps(runs, 'reserveDevice');
  return {
    rollGapsMs,
    undelivered,
    runs: runs.length,
    bounces: runs.reduce((n, r) => n + closeBounces(r.events), 0),
    longestTaskMs: Math.max(0, ...runs.flatMap((r) => workflowTaskTimings(r.events).workMs)),
    replayMs,
    replayEvents: longest?.events.length ?? 0,
  };
}
