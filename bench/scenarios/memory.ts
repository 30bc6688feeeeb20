/**
 * Memory: RSS (VmRSS) of a real host process serving 50 sim devices, idle and under a burst of
 * short tasks, next to a plain Temporal activity worker process with 50 slots under the baseline's
 * burst. (The control-plane process at N queued tasks is measured in P5.)
 */
import { saveHostCredential } from '../../host-worker/identity';
import { deviceWorkflowId, hostWorkflowId } from '../../workflows/ids';
import type { baselineTaskWorkflow } from '../baseline-workflows';
import { startBaseline } from '../lib/baseline';
import { taskWorkflowQueue } from '../../control-plane/config';
import { countRunning, longLivedWorkflows, startBenchFleet } from '../lib/fleet';
import { spawnBaselineWorker, spawnHostProcess, stopProc, writeTempJson } from '../lib/procs';
import { tolerant } from '../lib/load';
import { log, rssMiB, rssSampler, sleep, uid, waitUntil } from '../lib/util';
import type { Scenario } from './types';

const DEVICES = 50;

export const memory: Scenario = async (be, o) => {
  const n = o.memTasks;
  const timeoutMs = Math.max(180_000, n * 1_000);

  // ---- baseline: a plain worker process with 50 activity slots ----
  log(`MEM baseline: worker process with ${DEVICES} slots, ${n} workflows`);
  const base = await startBaseline(be, 'mem', 0, DEVICES);
  const q = `bench.base.mem.${uid('q')}`;
  const bw = spawnBaselineWorker(be.env.address, q, DEVICES, 'mem');
  let baseline: { idle?: number; peak: number; after: number };
  try {
    await bw.waitForOutput('baseline worker started');
    await sleep(3_000);
    const idle = rssMiB(bw.pid);
    const sampler = rssSampler(bw.pid);
    await tolerant(Array.from({ length: n }, (_, i) => `memb-${i}`), o.concurrency, (taskId) =>
      be.env.client.workflow.start<typeof baselineTaskWorkflow>('baselineTaskWorkflow', {
        workflowId: base.workflowId(taskId),
        taskQueue: base.workflowQueue,
        args: [{ taskId, taskQueue: q }],
      }),
    );
    await waitUntil(
      async () => ((await countRunning(be.env.client, base.workflowQueue, 'baselineTaskWorkflow')) === 0 ? true : undefined),
      'baseline burst to finish',
      timeoutMs,
      250,
    );
    const s = sampler.stop();
    baseline = { idle, peak: s.peak, after: s.last };
  } finally {
    await stopProc(bw);
    await base.stop();
  }

  // ---- fleet: a host process with 50 sim devices ----
  log(`MEM fleet: host process with ${DEVICES} sim devices, ${n} tasks`);
  const bf = await startBenchFleet(be, { name: 'mem', hosts: 0, devicesPerHost: 0 });
  const hostId = `mem-${bf.pool.replace(/^pool-/, '')}`;
  const credential = await bf.enroll(hostId);
  const credentialFile = writeTempJson('cred', {});
  saveHostCredential(credentialFile, credential);
  const deviceIds = Array.from({ length: DEVICES }, (_, i) => `d${String(i).padStart(2, '0')}`);
  longLivedWorkflows.add(hostWorkflowId(hostId));
  for (const d of deviceIds) longLivedWorkflows.add(deviceWorkflowId(hostId, d));
  const hp = spawnHostProcess(be.env.address, {
    hostId,
    credentialFile,
    pool: bf.pool,
    snapshotIntervalMs: 60_000,
    progressIntervalMs: 5_000,
    driver: {
      type: 'sim',
      devices: deviceIds.map((deviceId) => ({ deviceId, driverType: 'sim', tags: [], health: 'good', state: 'idle' })),
      defaultDurationMs: 0,
      defaultOutcome: 'done',
    },
    definitions: {},
  });
  let fleet: { idle?: number; peak: number; after: number };
  try {
    await hp.waitForOutput('host started');
    await bf.waitForDevices(DEVICES, 120_000);
    await sleep(3_000);
    const idle = rssMiB(hp.pid);
    const sampler = rssSampler(hp.pid);
    await tolerant(Array.from({ length: n }, (_, i) => `memf-${i}`), o.concurrency, (taskId) =>
      bf.fleet.submit({ taskId, goal: 'short [sim duration=0 steps=1]' }),
    );
    await waitUntil(
      async () => ((await countRunning(bf.client, taskWorkflowQueue(bf.config), 'taskWorkflow')) === 0 ? true : undefined),
      'fleet burst to finish',
      timeoutMs,
      250,
    );
    const s = sampler.stop();
    fleet = { idle, peak: s.peak, after: s.last };
  } finally {
    await stopProc(hp);
    await bf.stop();
  }
  return {
    id: 'MEM',
    title: `memory: host process serving ${DEVICES} devices (${n} short tasks)`,
    rows: [
      { metric: 'host process RSS idle (MiB)', fleet: fleet.idle ?? 'n/a', baseline: baseline.idle ?? 'n/a' },
      { metric: 'host process RSS peak under load (MiB)', fleet: fleet.peak, baseline: baseline.peak },
      { metric: 'host process RSS after the burst (MiB)', fleet: fleet.after, baseline: baseline.after },
    ],
    notes: [
      'baseline = a plain Temporal activity worker process (tsx, 50 slots) serving the baseline burst; both via `node --import tsx`',
      'control-plane process RSS at N queued tasks: see P5',
    ],
    details: { fleet, baseline, devices: DEVICES, tasks: n },
  };
};
