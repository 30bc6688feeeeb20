/**
 * P1 throughput: N zero-length tasks over H hosts x D devices, end to end (first submit to last
 * workflow closed), against the baseline (one workflow per task, one activity on a host queue).
 */
import { startBaseline } from '../lib/baseline';
import { startBenchFleet } from '../lib/fleet';
import { burstBaseline, burstFleet } from '../lib/load';
import { log, round } from '../lib/util';
import type { Scenario } from './types';

export const p1Throughput: Scenario = async (be, o) => {
  const ids = (p: string) => Array.from({ length: o.tasks }, (_, i) => `${p}-${String(i).padStart(6, '0')}`);
  const timeoutMs = Math.max(180_000, o.tasks * 500);

  log(`P1 baseline: ${o.tasks} workflows over ${o.hosts} host queues x ${o.devices} slots`);
  const base = await startBaseline(be, 'p1', o.hosts, o.devices);
  let baseline;
  try {
    baseline = await burstBaseline(be.cpu, be.env.client, base, ids('p1b'), o.concurrency, timeoutMs);
  } finally {
    await base.stop();
  }
  log(`  baseline: ${baseline.tasksPerSecond} tasks/s (${baseline.durationMs} ms)`);

  log(`P1 fleet: ${o.tasks} tasks over ${o.hosts} hosts x ${o.devices} devices`);
  const bf = await startBenchFleet(be, { name: 'p1', hosts: o.hosts, devicesPerHost: o.devices, snapshotIntervalMs: o.snapshotMs, hostTimeoutMs: o.snapshotMs * 3 });
  let fleet;
  try {
    fleet = await burstFleet(be.cpu, bf, ids('p1f'), o.concurrency, timeoutMs);
  } finally {
    await bf.stop();
  }
  log(`  fleet: ${fleet.tasksPerSecond} tasks/s (${fleet.durationMs} ms)`);
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
        metric: 'CPU ms / task (this process + dev server)',
        fleet: fleet.cpuMsPerTask,
        baseline: baseline.cpuMsPerTask,
        ratio: round(fleet.cpuMsPerTask / baseline.cpuMsPerTask, 2),
      },
      {
        metric: 'CPU s used by other processes during the run',
        fleet: fleet.cpu.othersSec,
        baseline: baseline.cpu.othersSec,
      },
      { metric: 'submit phase (ms; fleet: until admitted)', fleet: fleet.submitMs, baseline: baseline.submitMs },
      { metric: 'tasks not completed', fleet: fleet.notCompleted, baseline: baseline.notCompleted },
      { metric: 'submit calls that threw (task may still run)', fleet: fleet.submitErrors, baseline: baseline.submitErrors },
      { metric: 'fleet setup: enrol + start hosts, devices online (ms)', fleet: bf.setupMs },
    ],
    notes: [`submit concurrency ${o.concurrency}; end = last workflow close time (visibility)`],
    details: { fleet, baseline, setupMs: bf.setupMs, pool: bf.pool },
  };
};
