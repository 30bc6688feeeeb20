/**
 * `npm run chaos [-- --quick] [--tasks N] [--hosts N] [--seed S]`: tasks flow through a fleet of
 * real processes while faults are injected (host SIGKILL and restart, host SIGSTOP past its lease,
 * control-plane SIGKILL, an operator terminating a device's workflow and the pool's scheduler, Temporal server SIGKILL and
 * restart on the same database file, duplicate
 * submissions, forged and replayed reports, impersonated snapshots); then the invariants are
 * checked from the histories and the figures printed. Exit code 1 on any violation.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createServer as createHttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WorkflowNotFoundError, WorkflowUpdateFailedError } from '@temporalio/client';
import { createApp } from '../control-plane/rest/app';
import { sha256Hex } from '../control-plane/rest/auth';
import { JsonFileDefinitionsStore } from '../control-plane/rest/definitions/store';
import { sign } from '../host-worker/identity';
import { SignDomain } from '../workflows/identity';
import { deviceWorkflowId, hostWorkflowId, schedulerWorkflowId, taskWorkflowId } from '../workflows/ids';
import { hostSnapshotUpdate, reportAttemptUpdate } from '../workflows/messages';
import { TERMINAL_STATUSES, type TaskView } from '../workflows/types';
import {
  attemptsOverMax,
  devicesLeftReserved,
  overlappingReservations,
  overlappingRuns,
  supersededReportsAccepted,
  type Violation,
} from './checks';
import { fuzzRest } from './fuzz';
import { Stack } from './stack';

export type Fault =
  | 'host-kill'
  | 'host-pause'
  | 'control-plane-kill'
  | 'device-terminate'
  | 'scheduler-terminate'
  | 'server-restart'
  | 'duplicates'
  | 'forged-reports'
  | 'impersonation'
  | 'rest-fuzz';
export const ALL_FAULTS: Fault[] = [
  'host-kill',
  'host-pause',
  'control-plane-kill',
  // Before the scheduler's termination: the pool started anew then meets a device workflow
  // started again while a task still runs on it.
  'device-terminate',
  'scheduler-terminate',
  'server-restart',
  'duplicates',
  'forged-reports',
  'impersonation',
  'rest-fuzz',
];

export interface ChaosOptions {
  tasks: number;
  hosts: number;
  devicesPerHost: number;
  faults: Fault[];
  /** Rounds of the fault list. */
  rounds: number;
  seed: number;
  leaseMs: number;
  settleTimeoutMs: number;
  fuzzRequests?: number;
  dir?: string;
  log?: (line: string) => void;
}

export interface ChaosReport {
  admitted: number;
  done: number;
  failed: number;
  cancelled: number;
  lost: number;
  reservations: number;
  overlappingReservations: number;
  /** Host runs (`runAssignment` executions) of one device that overlap on the server. */
  overlappingRuns: number;
  attemptsAboveMax: number;
  supersededReportsAccepted: number;
  forgedReportsSent: number;
  forgedReportsAccepted: number;
  impersonationsSent: number;
  impersonationsAccepted: number;
  devicesLeftReserved: number;
  restRequests: number;
  rest5xx: number;
  restInvalidStateChanges: number;
  faultsInjected: string[];
  settleMs: number;
  violations: Violation[];
}

/** Small seeded PRNG (mulberry32) so a run can be repeated. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function retrying<T>(what: string, fn: () => Promise<T>, timeoutMs = 120_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`${what}: ${String(err)}`, { cause: err });
      await sleep(500);
    }
  }
}

export async function runChaos(opts: ChaosOptions): Promise<ChaosReport> {
  const log = opts.log ?? ((l: string) => console.log(l));
  const random = rng(opts.seed);
  const pick = <T>(xs: T[]): T => xs[Math.floor(random() * xs.length)];
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'fleet-chaos-'));
  // Signals tagged as deployed (control-plane/signal-auth.ts); the processes inherit the key.
  process.env.FLEET_SIGNAL_KEYS ||= randomBytes(32).toString('hex');
  const stack = new Stack({
    dir,
    hosts: opts.hosts,
    devicesPerHost: opts.devicesPerHost,
    config: {
      taskDefaults: {
        maxAttempts: 5,
        maxDispatchFailures: 5,
        backoff: { initialMs: 200, multiplier: 2, maxMs: 2_000 },
        ackTimeoutMs: 15_000,
        leaseTimeoutMs: opts.leaseMs,
        executionTimeoutMs: 120_000,
      },
      poolWatchMs: 2_000, // a terminated scheduler is started again soon (scheduler-terminate)
    },
  });
  const report: ChaosReport = {
    admitted: 0,
    done: 0,
    failed: 0,
    cancelled: 0,
    lost: 0,
    reservations: 0,
    overlappingReservations: 0,
    overlappingRuns: 0,
    attemptsAboveMax: 0,
    supersededReportsAccepted: 0,
    forgedReportsSent: 0,
    forgedReportsAccepted: 0,
    impersonationsSent: 0,
    impersonationsAccepted: 0,
    devicesLeftReserved: 0,
    restRequests: 0,
    rest5xx: 0,
    restInvalidStateChanges: 0,
    faultsInjected: [],
    settleMs: 0,
    violations: [],
  };
  const admitted = new Set<string>();
  try {
    log(`chaos: data in ${dir}`);
    await stack.startServer();
    await stack.startControlPlane();
    await stack.enrollHosts();
    await Promise.all(stack.hostIds().map((h) => stack.startHost(h)));
    log(`chaos: ${opts.hosts} hosts x ${opts.devicesPerHost} devices up`);

    // ---- workload: submissions spread over the fault phase ----
    const submit = async (i: number) => {
      const taskId = `chaos-${opts.seed}-${i}`;
      const flaky = random() < 0.1;
      const req = {
        taskId,
        goal: `t${i} [sim duration=${200 + Math.floor(random() * 1300)}${flaky ? ' outcome=fail-retryable' : ''}]`,
      };
      await retrying(`submit ${taskId}`, () => stack.fleet.submit(req));
      admitted.add(taskId);
      if (random() < 0.05) {
        setTimeout(() => void stack.fleet.cancel(taskId).catch(() => undefined), Math.floor(random() * 3_000));
      }
    };
    let next = 0;
    const submitter = (async () => {
      while (next < opts.tasks) {
        const batch = Array.from({ length: Math.min(4, opts.tasks - next) }, () => next++);
        await Promise.all(batch.map((i) => submit(i)));
        await sleep(150);
      }
    })();

    // ---- faults ----
    const runningTask = async (): Promise<TaskView | undefined> => {
      for (const id of [...admitted]) {
        const v = await stack.fleet.get(id).catch(() => undefined);
        if (v?.status === 'running' && v.current) return v;
      }
      // Nothing running right now: start a target of our own (it is cancelled after the fault).
      return await ownTarget(1_000);
    };
    /** A task of our own that runs until it is cancelled, `cancelAfterMs` after it started running. */
    const ownTarget = async (cancelAfterMs: number): Promise<TaskView | undefined> => {
      const taskId = `chaos-${opts.seed}-target-${admitted.size}`;
      await retrying(`submit ${taskId}`, () =>
        stack.fleet.submit({ taskId, goal: 'target [sim outcome=hang duration=300]' }),
      );
      admitted.add(taskId);
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline) {
        const v = await stack.fleet.get(taskId).catch(() => undefined);
        if (v?.status === 'running' && v.current) {
          setTimeout(() => void stack.fleet.cancel(taskId).catch(() => undefined), cancelAfterMs);
          return v;
        }
        await sleep(300);
      }
      return undefined;
    };
    const inject = async (fault: Fault) => {
      const hostIds = stack.hostIds();
      switch (fault) {
        case 'host-kill': {
          const h = pick(hostIds);
          await stack.hosts.get(h)?.kill('SIGKILL');
          await sleep(1_000 + Math.floor(random() * 1_500));
          await stack.startHost(h);
          return `SIGKILL ${h}, restarted`;
        }
        case 'host-pause': {
          const h = pick(hostIds);
          stack.hosts.get(h)?.signal('SIGSTOP');
          await sleep(opts.leaseMs + 1_500);
          stack.hosts.get(h)?.signal('SIGCONT');
          return `SIGSTOP ${h} for ${opts.leaseMs + 1_500} ms, SIGCONT`;
        }
        case 'control-plane-kill': {
          await stack.controlPlane?.kill('SIGKILL');
          await sleep(1_000);
          await stack.startControlPlane();
          return 'SIGKILL control plane, restarted';
        }
        case 'device-terminate': {
          // As an operator would in the Web UI: the reservation workflow of a device that runs a
          // task (a target of our own, cancelled after the scheduler's termination that follows),
          // so that the pool started anew meets that device workflow started again while the
          // task still runs there.
          const v = await ownTarget(10_000);
          if (!v?.current) return 'device-terminate: no target reached a device within 60 s';
          const id = deviceWorkflowId(v.current.hostId, v.current.deviceId);
          try {
            await stack.client.workflow.getHandle(id).terminate('chaos: operator terminates');
          } catch (err) {
            if (!(err instanceof WorkflowNotFoundError)) throw err;
            return `${id} was not running (terminated before and not yet needed)`;
          }
          return `terminated ${id} while ${v.taskId} ran there`;
        }
        case 'scheduler-terminate': {
          // As an operator would in the Web UI: the pool's queue and device view go with the run.
          // The control plane (poolWatchMs) or the next enqueue starts it anew, and that run asks
          // the pool's tasks and hosts again.
          await stack.client.workflow.getHandle(schedulerWorkflowId(stack.pool)).terminate('chaos: operator terminates');
          return `terminated scheduler/${stack.pool}`;
        }
        case 'server-restart': {
          await stack.server?.kill('SIGKILL');
          await sleep(1_000);
          await stack.startServer();
          return 'SIGKILL Temporal server, restarted on the same database file';
        }
        case 'duplicates': {
          const ids = [...admitted].slice(-3);
          await Promise.all(
            ids.flatMap((taskId) =>
              Array.from({ length: 5 }, () => stack.fleet.submit({ taskId, goal: 'duplicate' }).catch(() => undefined)),
            ),
          );
          return `5 concurrent resubmissions of ${ids.length} task ids`;
        }
        case 'forged-reports': {
          const v = await runningTask();
          if (!v) return 'forged reports: no running task to target';
          const cur = v.current!;
          const other = hostIds.find((h) => h !== cur.hostId)!;
          const own = stack.credentials.get(cur.hostId)!;
          const body = {
            taskId: v.taskId,
            attempt: cur.attempt,
            leaseId: cur.leaseId,
            hostId: cur.hostId,
            kind: 'progress' as const,
            seq: 1e9,
            message: 'forged',
            at: Date.now(),
          };
          const forged = [
            { ...body, sig: sign(stack.credentials.get(other)!, SignDomain.Report, body) }, // another host's key
            { ...body, message: 'tampered', sig: sign(own, SignDomain.Report, body) }, // tampered after signing
            (() => {
              const old = { ...body, attempt: cur.attempt - 1, leaseId: 'superseded-lease' };
              return { ...old, sig: sign(own, SignDomain.Report, old) }; // a superseded attempt, correctly signed
            })(),
          ];
          // Rejections count only once all three have a verdict: if one is not delivered (the
          // server restarting, or the task ended meanwhile) the fault is injected again, on a
          // task running then, and the three are counted there. An acceptance counts at once.
          let rejected = 0;
          for (const r of forged) {
            try {
              await stack.client.workflow
                .getHandle(taskWorkflowId(v.taskId))
                .executeUpdate(reportAttemptUpdate, { args: [r] });
              report.forgedReportsSent++;
              report.forgedReportsAccepted++;
            } catch (err) {
              if (!(err instanceof WorkflowUpdateFailedError)) throw err; // not delivered: not a verdict
              rejected++;
            }
          }
          report.forgedReportsSent += rejected;
          return `3 forged/replayed reports at ${v.taskId}`;
        }
        case 'rest-fuzz': {
          const token = 'chaos-admin-token';
          const app = createApp({
            fleet: stack.fleet,
            client: stack.client,
            config: stack.config,
            tokens: [{ name: 'chaos', role: 'admin', tokenSha256: sha256Hex(token) }],
            definitions: new JsonFileDefinitionsStore(join(dir, 'definitions.json')),
          });
          const server = createHttpServer(app).listen(0, '127.0.0.1');
          await new Promise((r) => server.once('listening', r));
          // Task workflows that are not the workload's own (which keeps submitting meanwhile).
          const foreignTasks = async () => {
            const ids = new Set<string>();
            for await (const wf of stack.client.workflow.list({ query: `FleetKind = 'task'` })) {
              const id = wf.workflowId.replace(/^task\//, '');
              if (!admitted.has(id) && !id.startsWith(`chaos-${opts.seed}-`)) ids.add(id);
            }
            return ids.size;
          };
          try {
            const before = await foreignTasks();
            const { port } = server.address() as AddressInfo;
            const fuzz = await fuzzRest(
              `http://127.0.0.1:${port}`,
              [token, 'not-a-token'],
              opts.fuzzRequests ?? 200,
              opts.seed,
            );
            await sleep(1_500); // visibility lags
            const after = await foreignTasks();
            report.restRequests += fuzz.sent;
            report.rest5xx += fuzz.fiveXX;
            // Only accepted submissions may create tasks; everything else must change nothing.
            const unexplained = Math.max(0, after - before - fuzz.created);
            report.restInvalidStateChanges += unexplained;
            for (const msg of fuzz.failures.slice(0, 10)) report.violations.push({ kind: 'REST fuzz', detail: msg });
            if (unexplained > 0)
              report.violations.push({ kind: 'REST invalid request changed state', detail: `${unexplained} tasks` });
            return `${fuzz.sent} fuzzed REST requests (${JSON.stringify(fuzz.statuses)})`;
          } finally {
            server.closeAllConnections();
            server.close();
          }
        }
        case 'impersonation': {
          const [a, b] = [hostIds[0], hostIds[1] ?? hostIds[0]];
          const snapshot = {
            hostId: a,
            pool: stack.pool,
            devices: [],
            sentAt: Date.now(),
            seq: 1e9,
            bootId: 'impostor',
          };
          report.impersonationsSent++;
          try {
            await stack.client.workflow.getHandle(hostWorkflowId(a)).executeUpdate(hostSnapshotUpdate, {
              args: [{ snapshot, sig: sign(stack.credentials.get(b)!, SignDomain.Snapshot, snapshot) }],
            });
            report.impersonationsAccepted++;
          } catch (err) {
            if (!(err instanceof WorkflowUpdateFailedError)) {
              report.impersonationsSent--; // not delivered (server busy or restarting): not a verdict
              throw err;
            }
          }
          return `empty snapshot for ${a} signed with ${b}'s key`;
        }
      }
    };
    for (let round = 0; round < opts.rounds; round++) {
      for (const fault of opts.faults) {
        await sleep(1_000 + Math.floor(random() * 1_500));
        const what = await retrying(`fault ${fault}`, () => inject(fault));
        report.faultsInjected.push(what);
        log(`chaos: fault: ${what}`);
      }
    }
    await submitter;
    const lastFault = Date.now();

    // ---- settle: every admitted task terminal ----
    const views = new Map<string, TaskView>();
    const deadline = Date.now() + opts.settleTimeoutMs;
    while (Date.now() < deadline) {
      for (const id of admitted) {
        if (views.has(id)) continue;
        const v = await stack.fleet.get(id).catch(() => undefined);
        if (v && TERMINAL_STATUSES.includes(v.status)) views.set(id, v);
      }
      if (views.size === admitted.size) break;
      await sleep(500);
    }
    report.settleMs = Date.now() - lastFault;
    report.admitted = admitted.size;
    const all = [...views.values()];
    report.done = all.filter((v) => v.status === 'done').length;
    report.failed = all.filter((v) => v.status === 'failed').length;
    report.cancelled = all.filter((v) => v.status === 'cancelled').length;
    report.lost = admitted.size - views.size;
    for (const id of admitted)
      if (!views.has(id)) report.violations.push({ kind: 'task lost (not terminal)', detail: id });

    // ---- invariants, from histories ----
    const devices = stack
      .hostIds()
      .flatMap((hostId) => Array.from({ length: opts.devicesPerHost }, (_, i) => ({ hostId, deviceId: `d${i + 1}` })));
    const overlaps = await overlappingReservations(stack.client, devices);
    report.reservations = overlaps.reservations;
    report.overlappingReservations = overlaps.violations.length;
    report.violations.push(...overlaps.violations);
    const runOverlaps = await overlappingRuns(stack.client, [...admitted]);
    report.overlappingRuns = runOverlaps.length;
    report.violations.push(...runOverlaps);
    const over = attemptsOverMax(all);
    report.attemptsAboveMax = over.length;
    report.violations.push(...over);
    for (const id of admitted) {
      const v = await supersededReportsAccepted(stack.client, id);
      report.supersededReportsAccepted += v.length;
      report.violations.push(...v);
    }
    const left = await retrying('devices left reserved', () => devicesLeftReserved(stack.client, devices));
    report.devicesLeftReserved = left.length;
    report.violations.push(...left);
    if (report.forgedReportsAccepted > 0)
      report.violations.push({ kind: 'forged report accepted', detail: String(report.forgedReportsAccepted) });
    if (report.impersonationsAccepted > 0)
      report.violations.push({ kind: 'impersonation accepted', detail: String(report.impersonationsAccepted) });
    return report;
  } catch (err) {
    log(`chaos: aborted: ${String(err)}`);
    for (const p of [stack.server, stack.controlPlane, ...stack.hosts.values()]) {
      if (p) log(`--- ${p.name} (last output) ---\n${p.out.slice(-3000)}`);
    }
    throw err;
  } finally {
    await stack.stop();
  }
}

export function printReport(r: ChaosReport, log: (l: string) => void = console.log): void {
  const rows: Array<[string, string | number, string]> = [
    ['tasks admitted', r.admitted, ''],
    ['done / failed / cancelled', `${r.done} / ${r.failed} / ${r.cancelled}`, ''],
    ['lost', r.lost, 'must be 0'],
    ['reservations checked', r.reservations, ''],
    ['overlapping reservations', r.overlappingReservations, 'must be 0'],
    ['overlapping host runs of a device', r.overlappingRuns, 'must be 0'],
    ['attempts above maxAttempts', r.attemptsAboveMax, 'must be 0'],
    ['superseded reports accepted', r.supersededReportsAccepted, 'must be 0'],
    ['forged reports accepted', `${r.forgedReportsAccepted} of ${r.forgedReportsSent}`, 'must be 0'],
    ['impersonated snapshots accepted', `${r.impersonationsAccepted} of ${r.impersonationsSent}`, 'must be 0'],
    ['devices left reserved (task ended)', r.devicesLeftReserved, 'must be 0'],
    ['REST requests (fuzz) / 5xx', `${r.restRequests} / ${r.rest5xx}`, '5xx must be 0'],
    ['REST invalid requests that changed state', r.restInvalidStateChanges, 'must be 0'],
    ['faults injected', r.faultsInjected.length, ''],
    ['settle time after last fault', `${(r.settleMs / 1000).toFixed(1)} s`, ''],
  ];
  for (const [k, v, note] of rows) log(`${k.padEnd(36)} ${String(v).padStart(12)}  ${note}`);
  for (const v of r.violations) log(`VIOLATION ${v.kind}: ${v.detail}`);
}

if (require.main === module) {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean' },
      tasks: { type: 'string' },
      hosts: { type: 'string' },
      seed: { type: 'string' },
      rounds: { type: 'string' },
    },
  });
  const quick = !!values.quick;
  const opts: ChaosOptions = {
    tasks: Number(values.tasks ?? (quick ? 24 : 200)),
    hosts: Number(values.hosts ?? (quick ? 3 : 5)),
    devicesPerHost: quick ? 2 : 3,
    faults: ALL_FAULTS,
    rounds: Number(values.rounds ?? (quick ? 1 : 3)),
    seed: Number(values.seed ?? Date.now() % 100_000),
    leaseMs: 2_000,
    settleTimeoutMs: quick ? 180_000 : 600_000,
  };
  console.log(`chaos: ${JSON.stringify({ ...opts, faults: opts.faults.join(',') })}`);
  runChaos(opts).then(
    (r) => {
      printReport(r);
      console.log(r.violations.length === 0 ? 'chaos: no violations' : `chaos: ${r.violations.length} violation(s)`);
      process.exit(r.violations.length === 0 ? 0 : 1);
    },
    (err) => {
      console.error(err);
      process.exit(2);
    },
  );
}
