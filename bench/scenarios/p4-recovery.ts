/**
 * P4 lease recovery: real host processes; host A runs K long tasks, host B stands by with K idle
 * devices; A is SIGKILLed. Recovery = kill -> the task's next attempt started on another device
 * (startedAt as reported by host B). Baseline: raw Temporal with a heartbeating activity on a
 * shared queue served by two worker processes, one killed: heartbeat timeout + activity retry.
 */
import { saveHostCredential } from '../../host-worker/identity';
import type { baselineLeaseWorkflow } from '../baseline-workflows';
import { startBaseline } from '../lib/baseline';
import { startBenchFleet, longLivedWorkflows } from '../lib/fleet';
import { spawnBaselineWorker, spawnHostProcess, stopProc, writeTempJson, type Proc } from '../lib/procs';
import { SUBMIT_TIMEOUT_MS } from '../lib/load';
import { log, round, sleep, summarize, uid, waitUntil, withTimeout } from '../lib/util';
import { deviceWorkflowId, hostWorkflowId } from '../../workflows/ids';
import type { AttemptRecord } from '../../workflows/types';
import type { Scenario } from './types';

interface AttemptTrace {
  attempt: number;
  host: string;
  outcome?: string;
  reason?: string;
  assignedAfterKillMs?: number;
  startedAfterKillMs?: number;
  endedAfterKillMs?: number;
}

export const p4Recovery: Scenario = async (be, o) => {
  const { leaseMs, hostTimeoutMs, snapshotIntervalMs, ackTimeoutMs, backoffMs, tasks: k } = o.p4;
  const bound = 3 * (leaseMs + hostTimeoutMs + ackTimeoutMs) + 30_000;
  const target = leaseMs + 1_000;
  const address = be.env.address;

  // ---- baseline ----
  log(`P4 baseline: ${k} heartbeating activities (heartbeat timeout ${leaseMs} ms), worker process killed`);
  const base = await startBaseline(be, 'p4', 0, k);
  const q = `bench.base.p4q.${uid('q')}`;
  const procs: Proc[] = [];
  let baseline: { recoveries: number[]; missing: number };
  try {
    const a = spawnBaselineWorker(address, q, k, 'A');
    procs.push(a);
    await a.waitForOutput('baseline worker started');
    const ids = Array.from({ length: k }, (_, i) => `p4b-${i}`);
    for (const taskId of ids) {
      await be.env.client.workflow.start<typeof baselineLeaseWorkflow>('baselineLeaseWorkflow', {
        workflowId: base.workflowId(taskId),
        taskQueue: base.workflowQueue,
        args: [{ taskId, taskQueue: q, durationMs: 600_000, heartbeatTimeoutMs: leaseMs }],
      });
    }
    await waitUntil(() => (a.jsonLines().filter((l) => l.event === 'start').length >= k ? true : undefined), 'baseline A to run all', 60_000);
    const b = spawnBaselineWorker(address, q, k, 'B');
    procs.push(b);
    await b.waitForOutput('baseline worker started');
    await sleep(1_000);
    const killedAt = Date.now();
    a.kill('SIGKILL');
    const retried = () => b.jsonLines().filter((l) => l.event === 'start' && Number(l.attempt) >= 2);
    await waitUntil(() => (retried().length >= k ? true : undefined), 'baseline retries on B', bound, 100).catch(() => undefined);
    const recoveries = retried().map((l) => Number(l.at) - killedAt);
    baseline = { recoveries, missing: k - recoveries.length };
    await Promise.all(ids.map((t) => be.env.client.workflow.getHandle(base.workflowId(t)).terminate('bench done').catch(() => undefined)));
  } finally {
    await Promise.all(procs.map((p) => stopProc(p)));
    await base.stop();
  }
  log(`  baseline recovery: ${JSON.stringify(baseline.recoveries)}`);

  // ---- fleet ----
  log(`P4 fleet: lease ${leaseMs} ms, host timeout ${hostTimeoutMs} ms, snapshot ${snapshotIntervalMs} ms, ack ${ackTimeoutMs} ms`);
  const bf = await startBenchFleet(be, {
    name: 'p4',
    hosts: 0,
    devicesPerHost: 0,
    hostTimeoutMs,
    taskDefaults: {
      maxAttempts: 5,
      maxDispatchFailures: 5,
      backoff: { initialMs: backoffMs, multiplier: 2, maxMs: 60_000 },
      ackTimeoutMs,
      leaseTimeoutMs: leaseMs,
      executionTimeoutMs: 3_600_000,
    },
  });
  const hostProcs = new Map<string, Proc>();
  const spawnHost = async (name: string) => {
    const hostId = `${name}-${bf.pool.replace(/^pool-/, '')}`;
    const credential = await bf.enroll(hostId);
    const credentialFile = writeTempJson('cred', {});
    saveHostCredential(credentialFile, credential);
    const deviceIds = Array.from({ length: k }, (_, i) => `d${i}`);
    for (const d of deviceIds) longLivedWorkflows.add(deviceWorkflowId(hostId, d));
    longLivedWorkflows.add(hostWorkflowId(hostId));
    const p = spawnHostProcess(address, {
      hostId,
      credentialFile,
      pool: bf.pool,
      snapshotIntervalMs,
      progressIntervalMs: 5_000,
      driver: {
        type: 'sim',
        devices: deviceIds.map((deviceId) => ({ deviceId, driverType: 'sim', tags: [], health: 'good', state: 'idle' })),
        defaultDurationMs: 600_000,
        defaultOutcome: 'done',
      },
      definitions: {},
    });
    hostProcs.set(hostId, p);
    await p.waitForOutput('host started');
    return hostId;
  };
  const traces: Record<string, AttemptTrace[]> = {};
  const recoveries: number[] = [];
  let killedAt = 0;
  let hostA = '';
  try {
    hostA = await spawnHost('p4a');
    await bf.waitForDevices(k, 60_000);
    const ids = Array.from({ length: k }, (_, i) => `p4f-${i}`);
    for (const taskId of ids) {
      await withTimeout(bf.fleet.submit({ taskId, goal: 'hold the device [sim duration=600000 steps=1]' }), SUBMIT_TIMEOUT_MS, 'submit');
    }
    await waitUntil(
      async () => {
        const views = await Promise.all(ids.map((t) => bf.fleet.get(t)));
        return views.every((v) => v.status === 'running' && v.current?.hostId === hostA) ? true : undefined;
      },
      `all ${k} tasks running on host A`,
      60_000,
      200,
    );
    await spawnHost('p4b');
    await bf.waitForDevices(2 * k, 60_000);
    await sleep(1_000);
    killedAt = Date.now();
    hostProcs.get(hostA)!.kill('SIGKILL');
    log(`  host A killed; waiting up to ${bound} ms for recovery`);
    const recovered = new Map<string, number>();
    const deadline = Date.now() + bound;
    while (recovered.size < k && Date.now() < deadline) {
      for (const t of ids) {
        if (recovered.has(t)) continue;
        const v = await bf.fleet.get(t);
        const next = v.attempts.find((a: AttemptRecord) => a.attempt > 1 && a.startedAt !== undefined && a.hostId !== hostA);
        if (next) recovered.set(t, next.startedAt! - killedAt);
      }
      await sleep(100);
    }
    recoveries.push(...recovered.values());
    for (const t of ids) {
      const v = await bf.fleet.get(t);
      traces[t] = v.attempts.map((a) => ({
        attempt: a.attempt,
        host: a.hostId === hostA ? 'A (killed)' : 'B',
        outcome: a.outcome,
        reason: a.reason,
        assignedAfterKillMs: a.assignedAt - killedAt,
        startedAfterKillMs: a.startedAt !== undefined ? a.startedAt - killedAt : undefined,
        endedAfterKillMs: a.endedAt !== undefined ? a.endedAt - killedAt : undefined,
      }));
    }
    await Promise.all(ids.map((t) => bf.fleet.cancel(t).catch(() => undefined)));
  } finally {
    await Promise.all([...hostProcs.values()].map((p) => stopProc(p)));
    await bf.stop();
  }
  const fs = summarize(recoveries, 0);
  const bs = summarize(baseline.recoveries, 0);
  const missing = k - recoveries.length;
  log(`  fleet recovery: ${JSON.stringify(recoveries)}`);
  const wasted = Object.values(traces).flat().filter((a) => a.host === 'A (killed)' && a.attempt > 1).length;
  return {
    id: 'P4',
    title: `lease recovery: host SIGKILLed with ${k} running tasks (lease ${leaseMs} ms)`,
    rows: [
      {
        metric: 'kill -> running on another device, max (ms)',
        fleet: missing > 0 ? `> ${bound} (${missing} never)` : fs.max,
        baseline: bs.max,
        ratio: missing > 0 ? 'n/a' : round(fs.max / bs.max, 2),
        target: `<= ${target} (lease + 1 s)`,
        met: missing === 0 && fs.max <= target,
      },
      { metric: 'kill -> running on another device, median (ms)', fleet: fs.p50, baseline: bs.p50 },
      { metric: 'retries sent to the dead host (attempts > 1 on A)', fleet: wasted, baseline: 0 },
    ],
    notes: [
      `timings: lease ${leaseMs} ms, host timeout ${hostTimeoutMs} ms, snapshot every ${snapshotIntervalMs} ms, ack ${ackTimeoutMs} ms, backoff ${backoffMs} ms (product default proportions; --lease-ms scales them)`,
      'host processes are real `host-worker/main.ts` processes; the control plane runs in the bench process',
    ],
    details: { fleet: fs, baseline: bs, traces, baselineRecoveries: baseline.recoveries, killedAt },
  };
};
