/**
 * P3 cost: billed Temporal actions and history events per completed task, summed over every
 * workflow a task touches (task/*, scheduler/<pool>, device/*, host/*; every continue-as-new run),
 * read from the histories. Heartbeats are not in history: they are the server's frontend
 * RecordActivityTaskHeartbeat request count over the run (Prometheus metrics of the dev server).
 * Host liveness (the hosts' session heartbeats) is measured first, in an idle window, and its rate
 * is taken off the heartbeats counted during the burst.
 */
import { startBaseline } from '../lib/baseline';
import { diffCounts, frontendRequests } from '../lib/env';
import { startLoadFleet } from '../lib/fleet';
import { billedByType, sumBilled, sumEvents, tallyWorkflows, type CostTally } from '../lib/history';
import { burstBaseline, burstFleet } from '../lib/load';
import { deviceWorkflowId, hostWorkflowId, schedulerWorkflowId } from '../../workflows/ids';
import { log, round, waitUntil } from '../lib/util';
import type { Scenario } from './types';

const per = (n: number, d: number, digits = 2) => round(n / Math.max(1, d), digits);

function perTaskByType(t: CostTally, tasks: number): Record<string, number> {
  return Object.fromEntries(Object.entries(billedByType(t, 'task')).map(([k, v]) => [k, per(v, tasks)]));
}

export const p3Cost: Scenario = async (be, o) => {
  const m = o.p3Tasks;
  const timeoutMs = Math.max(180_000, m * 500);
  const ids = (p: string) => Array.from({ length: m }, (_, i) => `${p}-${String(i).padStart(6, '0')}`);

  log(`P3 baseline: ${m} workflows`);
  const base = await startBaseline(be, 'p3', o.hosts, o.devices);
  const bm0 = await frontendRequests(be.metricsUrl);
  let bRun;
  try {
    bRun = await burstBaseline(be.cpu, be.env.client, base, ids('p3b'), o.concurrency, timeoutMs);
  } finally {
    await base.stop();
  }
  const bOps = diffCounts(await frontendRequests(be.metricsUrl), bm0);
  const bTally = await tallyWorkflows(
    be.env.client,
    ids('p3b').map((t) => base.workflowId(t)),
  );

  log(`P3 fleet: ${m} tasks over ${o.hosts} hosts x ${o.devices} devices`);
  const bf = await startLoadFleet(be, 'p3', o);
  // Idle first: every host online and holding its session, nothing submitted. Long enough for a
  // few throttled beats per host (the SDK sends one per 0.8 x the lease).
  const idleMs = Math.max(2 * o.hostTimeoutMs, o.quick ? 30_000 : 90_000);
  log(`  idle window: ${round(idleMs / 1000, 0)} s`);
  const im0 = await frontendRequests(be.metricsUrl);
  const idleStart = Date.now();
  await new Promise((r) => setTimeout(r, idleMs));
  const idleOps = diffCounts(await frontendRequests(be.metricsUrl), im0);
  const idleHostMin = (o.hosts * (Date.now() - idleStart)) / 60_000;
  const idleBeatsPerHostMin = (idleOps.RecordActivityTaskHeartbeat ?? 0) / idleHostMin;
  const fm0 = await frontendRequests(be.metricsUrl);
  const runStart = Date.now();
  let fRun;
  let attemptEnds: Record<string, number> | undefined;
  try {
    fRun = await burstFleet(be.cpu, bf, ids('p3f'), o.concurrency, timeoutMs);
    // Releases reach the scheduler after the task closed: wait for all of them before reading.
    let seen = '';
    await waitUntil(
      async () => {
        const s = await bf.scheduler();
        const held = s.devices.filter((d) => d.reservedBy);
        seen = `releases ${s.counters.releases} of ${fRun!.completed}, still held: ${JSON.stringify(held.slice(0, 5).map((d) => [d.hostId, d.deviceId, d.reservedBy?.taskId, d.reservedBy?.attempt]))}, counters ${JSON.stringify(s.counters)}`;
        return s.counters.releases >= fRun!.completed && held.length === 0 ? true : undefined;
      },
      () => `every release to reach the scheduler (${seen})`,
      60_000,
      250,
    );
    // How the attempts ended (reason|detail): explains any attempt beyond one per task.
    attemptEnds = (await bf.scheduler()).counters.attemptEnds ?? {};
  } finally {
    await bf.stop();
  }
  const runMs = Date.now() - runStart;
  const fOps = diffCounts(await frontendRequests(be.metricsUrl), fm0);
  const wfIds = [
    ...ids('p3f').map((t) => `task/${t}`),
    schedulerWorkflowId(bf.pool),
    ...bf.hostIds.map(hostWorkflowId),
    ...bf.hostIds.flatMap((h) => bf.deviceIdsOf(h).map((d) => deviceWorkflowId(h, d))),
  ];
  log(`  reading ${wfIds.length} histories`);
  const t = await tallyWorkflows(be.env.client, wfIds);
  const done = fRun.completed;
  const bDone = bRun.completed;

  const billed = sumBilled(t, 'task');
  const bBilled = sumBilled(bTally, 'task');
  // The burst's heartbeats, less the hosts' session beats at the idle rate (liveness, reported apart).
  const sessionBeats = (idleBeatsPerHostMin * o.hosts * runMs) / 60_000;
  const heartbeats = Math.max(0, (fOps.RecordActivityTaskHeartbeat ?? 0) - sessionBeats);
  const bHeartbeats = bOps.RecordActivityTaskHeartbeat ?? 0;
  const events = sumEvents(t, 'task');
  const bEvents = sumEvents(bTally, 'task');
  const hw = t.hostWindow;
  const hostMinutes = hw ? (hw.hosts * (hw.toMs - hw.fromMs)) / 60_000 : NaN;
  const liveness = sumBilled(t, 'liveness');
  const livenessHost = sumBilled(t, 'liveness', 'host');
  const livenessSched = sumBilled(t, 'liveness', 'scheduler');
  const perTask = per(billed, done);
  log(`  fleet ${perTask} billed actions/task (+${per(heartbeats, done)} heartbeats); baseline ${per(bBilled, bDone)}`);

  const kinds = ['task', 'scheduler', 'device'];
  return {
    id: 'P3',
    title: `cost per completed task (${m} tasks; histories of every workflow touched)`,
    rows: [
      {
        metric: 'billed actions / task (excl. heartbeats)',
        fleet: perTask,
        baseline: per(bBilled, bDone),
        ratio: round(perTask / per(bBilled, bDone), 2),
        target: '<= 8',
        met: perTask <= 8,
      },
      ...kinds.map((k) => ({ metric: `  of which in ${k} workflows`, fleet: per(sumBilled(t, 'task', k), done) })),
      {
        metric: 'heartbeats / task (server RecordActivityTaskHeartbeat)',
        fleet: per(heartbeats, done),
        baseline: per(bHeartbeats, bDone),
      },
      {
        // Not billed, but server work: the submit call reads the task's history for the pool's answer
        // (long poll), and a worker reads history when a workflow is not in its cache.
        metric: 'history reads / task (server Get/PollWorkflowExecutionHistory; not billed)',
        fleet: per((fOps.GetWorkflowExecutionHistory ?? 0) + (fOps.PollWorkflowExecutionHistory ?? 0), done),
        baseline: per((bOps.GetWorkflowExecutionHistory ?? 0) + (bOps.PollWorkflowExecutionHistory ?? 0), bDone),
      },
      {
        metric: 'billed incl. heartbeats / task',
        fleet: per(billed + heartbeats, done),
        baseline: per(bBilled + bHeartbeats, bDone),
      },
      {
        metric: 'history events / task',
        fleet: per(events, done),
        baseline: per(bEvents, bDone),
        ratio: round(per(events, done) / per(bEvents, bDone), 2),
      },
      ...kinds.map((k) => ({ metric: `  of which in ${k} workflows`, fleet: per(sumEvents(t, 'task', k), done) })),
      {
        metric: 'host liveness: billed actions / host / minute (excl. heartbeats)',
        fleet: round(liveness / hostMinutes, 2),
        baseline: 0,
      },
      {
        metric: 'host liveness: session heartbeats / host / minute (idle window)',
        fleet: round(idleBeatsPerHostMin, 2),
        baseline: 0,
      },
      {
        metric: 'one-time setup: billed actions / host (enrol, first start, devices)',
        fleet: per(sumBilled(t, 'setup'), o.hosts),
      },
    ],
    notes: [
      'billed = WorkflowExecutionStarted (incl. continue-as-new), WorkflowExecutionSignaled, WorkflowExecutionUpdateAccepted, ActivityTaskScheduled, TimerStarted, UpsertWorkflowSearchAttributes, WorkflowPropertiesModified, MarkerRecorded',
      'per-task = caused by tasks (task workflows; enqueue/release/refusal signals, continue-as-new of scheduler and device workflows; reservation timers); host snapshots, hostDevices publications and host timers are liveness; first starts, enrolment and configuration are setup; the scheduler hold-sweep timer is background',
      `heartbeats from the dev server's frontend metrics over the fleet run (${round(runMs / 1000, 1)} s), less the hosts' session heartbeats at the rate of an idle window of ${round(idleMs / 1000, 0)} s before it; control-plane activities do not heartbeat`,
      `host liveness: lease (session heartbeat timeout) ${o.hostTimeoutMs} ms, snapshot every ${o.snapshotMs} ms`,
    ],
    details: {
      attemptEnds,
      completed: done,
      perTaskByType: perTaskByType(t, done),
      perTaskByKind: Object.fromEntries(kinds.map((k) => [k, per(sumBilled(t, 'task', k), done)])),
      signalsPerTask: Object.fromEntries(
        Object.entries(t.signals).map(([k, v]) => [
          k,
          Object.fromEntries(Object.entries(v).map(([n, c]) => [n, per(c, done)])),
        ]),
      ),
      eventsPerTaskByKind: Object.fromEntries(kinds.map((k) => [k, per(sumEvents(t, 'task', k), done)])),
      liveness: {
        billedTotal: liveness,
        inHostWorkflows: livenessHost,
        hostDevicesSignalsInScheduler: livenessSched,
        byType: billedByType(t, 'liveness'),
        hostMinutes: round(hostMinutes, 1),
        perHostPerMinute: round(liveness / hostMinutes, 2),
        idleWindowMs: idleMs,
        idleFrontendRequests: idleOps,
        sessionHeartbeatsPerHostPerMinute: round(idleBeatsPerHostMin, 2),
        sessionHeartbeatsDuringBurst: Math.round(sessionBeats),
        events: sumEvents(t, 'liveness'),
      },
      setup: { billedTotal: sumBilled(t, 'setup'), byType: billedByType(t, 'setup') },
      background: { billedTotal: sumBilled(t, 'background'), byType: billedByType(t, 'background') },
      runs: t.runs,
      workflows: t.workflows,
      maxRunEvents: t.maxRunEvents,
      frontendRequestsDuringFleetRun: fOps,
      frontendRequestsDuringBaselineRun: bOps,
      baselineByType: perTaskByType(bTally, bDone),
      fleetRun: fRun,
      baselineRun: bRun,
      tally: t,
    },
  };
};
