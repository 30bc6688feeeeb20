/**
 * The host agent as a library: a Temporal worker on this host's own task queue (outbound polling
 * only, no listening socket) that also holds the host's liveness session, plus a snapshot loop that
 * reports the complete device list when it changes and periodically.
 */
import { randomUUID } from 'node:crypto';
import { Client, type ConnectionLike } from '@temporalio/client';
import { type NativeConnection, Worker } from '@temporalio/worker';
import { DEFAULT_POOL, hostTaskQueue, hostWorkflowId } from '../workflows/ids';
import { createHostCodec } from '../control-plane/sealing';
import { SignDomain } from '../workflows/identity';
import { hostSnapshotUpdate } from '../workflows/messages';
import { Reason } from '../workflows/errors';
import {
  assignmentDevices,
  type DeviceSnapshot,
  type HostSnapshot,
  type RunOutcome,
  type WorkflowStep,
} from '../workflows/types';
import { createHostActivities } from './activities';
import { createHostSessionActivities } from './session';
import { sign, type HostCredential } from './identity';
import { groupAlive, groupsWithEnvironment, terminateProcessGroup } from './process-group';
import { runnerMarks } from './command-runner';
import { describeError } from '../control-plane/log';
import { DeviceClaims } from './claims';
import type { DeviceDriver } from './drivers';
import { stillSameProcess, type Journal, type JournalEntry } from './journal';
import { DEFAULT_DISCOVERY_FAILURES_BEFORE_UNHEALTHY, DEFAULT_SHUTDOWN_GRACE_MS } from './config';
import { ProblemLog, snapshotProblem, type HostLog } from './logging';
import { capabilityTags, type Runners } from './runners';
import { createSimRunners } from './sim';

/** Assignment slots a host's worker has at least, whatever it found at start-up. */
export const MIN_ASSIGNMENT_SLOTS = 16;

export interface HostOptions {
  /** The host's credential (its id and private keys); an operator enrolled its public keys. */
  credential: HostCredential;
  pool?: string;
  namespace?: string;
  /** Used by the worker (polling) and by the client (snapshots, reports). */
  workerConnection: NativeConnection;
  clientConnection: ConnectionLike;
  /** Static devices, or a driver whose discover() runs before every snapshot. */
  devices?: DeviceSnapshot[];
  driver?: DeviceDriver;
  /** Persisted active assignments; on start, whatever the last process left is reported failed at once. */
  journal?: Journal;
  /**
   * SIGTERM -> SIGKILL grace for a runner the previous process left behind (the command runner's
   * `killGraceMs`); default 2 s.
   */
  runnerKillGraceMs?: number;
  runners?: Runners;
  definitions?: Map<string, WorkflowStep[]>;
  /** The complete signed snapshot goes at least this often (default 60 s), and at once on a change. */
  snapshotIntervalMs?: number;
  /** How often the driver discovers devices (default 10 s, at most snapshotIntervalMs); a change is sent at once. */
  discoveryIntervalMs?: number;
  /**
   * After this many discoveries in a row fail (default 3, DEFAULT_DISCOVERY_FAILURES_BEFORE_UNHEALTHY),
   * the host no longer vouches for the devices it last saw: each one that was `good` is reported
   * (and treated here) as `unhealthy`, so the pool stops assigning them and an assignment that
   * still arrives is refused as `device_unavailable`. The next discovery that works replaces them.
   */
  discoveryFailuresBeforeUnhealthy?: number;
  progressIntervalMs?: number;
  /** See HostActivityDeps.reportDelayMs (default 1 s). */
  reportDelayMs?: number;
  /**
   * Concurrent assignments; default the number of devices found at start-up, at least
   * MIN_ASSIGNMENT_SLOTS (16). The liveness session takes one slot more.
   */
  maxConcurrentAssignments?: number;
  /**
   * How long a new assignment waits for an earlier attempt's runner that is still on its device
   * (its attempt ended on the server: lease lost, execution timeout, cancelled) to stop once asked;
   * default 15 s, room for the command runner's kill grace. Refused (device_unavailable) after it.
   */
  takeoverWaitMs?: number;
  /**
   * On stop, how long assignments still running may go on to finish before the worker cancels
   * them (each cancelled one costs its task an attempt). Default 5 s (DEFAULT_SHUTDOWN_GRACE_MS, config.ts).
   */
  shutdownGraceMs?: number;
  /** Each message with its level (info when left out). */
  log?: HostLog;
}

export interface HostAgent {
  readonly hostId: string;
  readonly worker: Worker;
  /** Replace the device list (discovery), and report it now. */
  setDevices(devices: DeviceSnapshot[]): Promise<void>;
  /** Report the complete snapshot now. */
  sendSnapshot(): Promise<void>;
  /**
   * Stop polling and the snapshot loop; in-flight assignments finish within the shutdown grace.
   * The host goes offline at once (its session ends saying so). `silently` (tests) says nothing:
   * the host then looks online, like a frozen one, until its snapshot timeout.
   */
  stop(opts?: { silently?: boolean }): Promise<void>;
}

export async function startHost(opts: HostOptions): Promise<HostAgent> {
  const hostId = opts.credential.hostId;
  const pool = opts.pool ?? DEFAULT_POOL;
  const namespace = opts.namespace ?? 'default';
  const snapshotIntervalMs = opts.snapshotIntervalMs ?? 60_000;
  const shutdownGraceMs = opts.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS;
  if (!Number.isFinite(shutdownGraceMs) || shutdownGraceMs < 0) {
    throw new Error(`shutdownGraceMs must be a number of milliseconds >= 0, got ${shutdownGraceMs}`);
  }
  const log: HostLog = (message, fields, level) => opts.log?.(message, fields, level);
  /** Refused or failed snapshots: said once a minute while they go on, and once when they pass. */
  const snapshotProblems = new ProblemLog(log, 'snapshots', 'snapshots are accepted again');
  const discoveryProblems = new ProblemLog(log, 'device discovery', 'device discovery works again');
  const discoveryIntervalMs = Math.min(opts.discoveryIntervalMs ?? 10_000, snapshotIntervalMs);
  const discoveryFailuresBeforeUnhealthy =
    opts.discoveryFailuresBeforeUnhealthy ?? DEFAULT_DISCOVERY_FAILURES_BEFORE_UNHEALTHY;
  if (!Number.isInteger(discoveryFailuresBeforeUnhealthy) || discoveryFailuresBeforeUnhealthy < 1) {
    throw new Error(
      `discoveryFailuresBeforeUnhealthy must be a whole number >= 1, got ${discoveryFailuresBeforeUnhealthy}`,
    );
  }
  /** Discoveries failed in a row, and whether the devices are reported unhealthy because of them. */
  let discoveryFailures = 0;
  let unvouched = false;
  const bootId = randomUUID();
  const client = new Client({ connection: opts.clientConnection, namespace });
  const discover = async () => (opts.driver ? await opts.driver.discover() : (opts.devices ?? []));
  let devices = new Map((await discover()).map((d) => [d.deviceId, d]));

  /**
   * Devices whose runner, left by the previous process, survived SIGKILL (by device id): reported
   * offline, and refused, until its process group is gone; its journal entry stays until then.
   */
  const leftovers = new Map<string, JournalEntry>();
  if (opts.journal) {
    await reconcileJournal(opts.journal, opts.credential, client, log, {
      killGraceMs: opts.runnerKillGraceMs,
      onSurvived: (e) => leftovers.set(e.deviceId, e),
    });
  }
  /** The devices as this host vouches for them: a device with a leftover runner is offline. */
  const current = (): Map<string, DeviceSnapshot> =>
    leftovers.size === 0
      ? devices
      : new Map([...devices].map(([id, d]) => [id, leftovers.has(id) ? { ...d, state: 'offline' as const } : d]));
  /** While there are leftovers: looks every 2 s whether one's group has gone, and then runs the snapshot loop's check. */
  let leftoverWatch: NodeJS.Timeout | undefined;
  const watchLeftovers = (): void => {
    leftoverWatch ??= setInterval(() => {
      if ([...leftovers.values()].some((l) => !(l.pid && groupAlive(l.pid)))) kick();
    }, 2_000).unref();
  };
  /** A run of this process whose processes outlived SIGKILL: its device is held like a leftover. */
  const leftBehind = (e: JournalEntry): void => {
    leftovers.set(e.deviceId, e);
    watchLeftovers();
    kick();
  };
  /** A leftover runner whose group has gone since: its device is back, its journal entry removed. */
  const checkLeftovers = async (): Promise<void> => {
    for (const [deviceId, e] of leftovers) {
      if (e.pid && groupAlive(e.pid)) continue;
      leftovers.delete(deviceId);
      if (leftovers.size === 0) {
        clearInterval(leftoverWatch);
        leftoverWatch = undefined;
      }
      await opts.journal
        ?.remove(e.taskId, e.attempt)
        .catch((err) => log('journal remove failed', { error: String(err) }, 'error'));
      log(
        'the processes a runner left on the device have ended: the device is back in rotation',
        { deviceId, pid: e.pid },
        'warn',
      );
    }
  };
  /**
   * Devices with a runner on them. A runner that will not stop keeps its device out of the pool
   * (reported offline) until it does, so the pool does not offer it again and again, each offer
   * refused and charged to the task it was for.
   */
  const claims = new DeviceClaims({
    onStuck: (deviceId) => {
      log(
        'a runner asked to stop is still on its device: the device is out of rotation until it stops',
        { deviceId },
        'warn',
      );
      kick();
    },
    onFreed: (deviceId) => {
      log('the runner that would not stop has ended: the device is back in rotation', { deviceId }, 'warn');
      kick();
    },
  });
  /** Runs the snapshot loop's check now (defined with the loop). */
  let kick: () => void = () => undefined;
  // A previous process's runner that survived SIGKILL is watched like one of this process's.
  if (leftovers.size > 0) watchLeftovers();
  let seq = 0;
  const runners = opts.runners ?? createSimRunners({ definitions: opts.definitions });
  // What this host's runner can run beyond goals (definitions by name, steps a task brings): as
  // tags on every device, so a task is only assigned where its definition runs.
  const capabilities = capabilityTags(runners.workflow);
  if (runners.workflow.definitions === undefined && runners.workflow.inlineSteps === undefined) {
    log(
      'the workflow runner lists no definitions and no inline steps: no task by definition is assigned here',
      { hostId },
      'warn',
    );
  }
  let beginStop!: (how: 'announce' | 'silent') => void;
  const stopping = new Promise<'announce' | 'silent'>((resolve) => (beginStop = resolve));

  const worker = await Worker.create({
    connection: opts.workerConnection,
    namespace,
    taskQueue: hostTaskQueue(hostId),
    // Task payloads are sealed to this host: only its box key opens them.
    dataConverter: { payloadCodecs: [createHostCodec(hostId, opts.credential.boxKey)] },
    activities: {
      ...createHostSessionActivities({
        credential: opts.credential,
        bootId,
        stopping,
        sendSnapshot: () => sendSnapshot() /* defined below; called once the worker runs */,
        log,
      }),
      ...createHostActivities({
        credential: opts.credential,
        client,
        runners,
        devices: current,
        progressIntervalMs: opts.progressIntervalMs ?? 5_000,
        reportDelayMs: opts.reportDelayMs,
        takeoverWaitMs: opts.takeoverWaitMs ?? DEFAULT_TAKEOVER_WAIT_MS,
        claims,
        journal: opts.journal,
        leftBehind,
        log,
      }),
    },
    // A worker's slot count is fixed when it is created, and a host's devices are not (a lab
    // machine may start before its phones are plugged in): at least MIN_ASSIGNMENT_SLOTS, or one
    // per device found at start-up; one more for the liveness session, and one for an assignment
    // whose predecessor on the same device has not let go yet (it holds a slot while it waits
    // for it). The scheduler only assigns idle devices, so spare slots stay unused.
    maxConcurrentActivityTaskExecutions:
      (opts.maxConcurrentAssignments ?? Math.max(MIN_ASSIGNMENT_SLOTS, devices.size)) + 2,
    identity: `host:${hostId}:${bootId.slice(0, 8)}`,
    // Then the worker cancels what still runs: each such attempt fails, costing its task an attempt.
    shutdownGraceTime: shutdownGraceMs,
  });

  const snapshot = (): HostSnapshot => ({
    hostId: hostId,
    pool,
    seq: ++seq,
    bootId,
    sentAt: Date.now(),
    devices: [...current().values()].map((d) => ({
      ...d,
      tags: capabilities.length ? [...new Set([...d.tags, ...capabilities])] : d.tags,
      state: d.state === 'offline' || claims.stuck(d.deviceId) ? 'offline' : claims.has(d.deviceId) ? 'busy' : d.state,
    })),
  });

  let lastSentAt = 0;
  let lastSentKey = '';
  /** Signed with the host's key; the host workflow (created by enrolment) refuses anything else. */
  /** Snapshots on their way; once the host stops none is sent (its stop must be its last word). */
  const sending = new Set<Promise<unknown>>();
  let closing = false;
  // One snapshot at a time, each built when its turn comes: two on their way at once could land
  // out of order, and the host workflow refuses the older one as a replay.
  let queue: Promise<unknown> = Promise.resolve();
  // Every snapshot's outcome is logged here (callers need not): a failure at its level, repeats
  // held back while it persists, and once when snapshots go through again.
  const sendSnapshot = (): Promise<void> => {
    const turn = queue.then(sendOne);
    queue = turn.catch(() => undefined);
    void turn.then(
      () => closing || snapshotProblems.ok() /* nothing is sent once the host stops */,
      (err: unknown) => snapshotProblems.failed(snapshotProblem(err, hostId, namespace)),
    );
    return turn;
  };
  const sendOne = async (): Promise<void> => {
    if (closing) return;
    const s = snapshot();
    const key = JSON.stringify(assignmentDevices(s.devices));
    const sent = client.workflow.getHandle(hostWorkflowId(hostId)).executeUpdate(hostSnapshotUpdate, {
      args: [{ snapshot: s, sig: sign(opts.credential, SignDomain.Snapshot, s) }],
    });
    sending.add(sent);
    try {
      await sent;
    } finally {
      sending.delete(sent);
    }
    lastSentAt = s.sentAt;
    lastSentKey = key;
  };

  const running = worker.run();
  // The first snapshot may be refused (e.g. another process of this host reported a moment later
  // than us); the loop keeps trying, so it is not fatal. A host that is not enrolled says so here.
  await sendSnapshot().catch(() => undefined /* logged by sendSnapshot */);
  // Single flight: while the control plane cannot answer (restarting, server down), snapshots must
  // not pile up as in-flight updates on the host workflow; the next tick sends a fresh one.
  let inFlight = false;
  // Liveness rides on the session's heartbeats, so the snapshot goes when the devices changed and
  // otherwise once per period (half a discovery tick early, so a period is never skipped).
  /** A kick that came while a snapshot was on its way: checked again once it is done. */
  let again = false;
  const tick = (): void => {
    if (inFlight) {
      again = true;
      return;
    }
    again = false;
    inFlight = true;
    (async () => {
      if (leftovers.size) await checkLeftovers();
      if (opts.driver) {
        try {
          devices = new Map((await discover()).map((d) => [d.deviceId, d]));
          discoveryFailures = 0;
          if (unvouched) {
            unvouched = false;
            log('device discovery works again: its devices are reported as found', { devices: devices.size }, 'warn');
          }
          discoveryProblems.ok();
        } catch (err) {
          const error = describeError(err);
          discoveryFailures++;
          discoveryProblems.failed({
            key: error,
            level: 'warn',
            message: 'device discovery failed; will retry',
            fields: { error },
          });
          // Until that many in a row, the last list stands (a periodic snapshot still goes when due).
          if (discoveryFailures >= discoveryFailuresBeforeUnhealthy) markUnvouched(error);
        }
      }
      const due = Date.now() - lastSentAt >= snapshotIntervalMs - discoveryIntervalMs / 2;
      if (due || JSON.stringify(assignmentDevices(snapshot().devices)) !== lastSentKey) await sendSnapshot();
    })()
      .catch(() => undefined /* a snapshot's failure is logged by sendSnapshot */)
      .finally(() => {
        inFlight = false;
        if (again) tick();
      });
  };
  const markUnvouched = (error: string): void => {
    // The host can no longer see its devices, so it cannot vouch for them: left as they were,
    // the pool would go on assigning them and each runner would fail, costing its task an
    // attempt. Unhealthy, they are out of rotation (refused here as device_unavailable, a
    // dispatch failure, if an assignment still arrives) until a discovery works again.
    const stillGood = [...devices.values()].filter((d) => d.health === 'good');
    if (stillGood.length) {
      devices = new Map(
        [...devices].map(([id, d]) => [id, d.health === 'good' ? { ...d, health: 'unhealthy' as const } : d]),
      );
    }
    if (!unvouched) {
      unvouched = true;
      log(
        'device discovery keeps failing: its devices are reported unhealthy until it works again',
        { failures: discoveryFailures, devices: stillGood.map((d) => d.deviceId), error },
        'error',
      );
    }
    // The tick's snapshot sends the change at once.
  };
  const loop = setInterval(tick, discoveryIntervalMs);
  kick = tick;

  let stopped: Promise<void> | undefined;
  return {
    hostId: hostId,
    worker,
    async setDevices(next) {
      devices = new Map(next.map((d) => [d.deviceId, d]));
      await sendSnapshot();
    },
    sendSnapshot,
    stop(stopOpts) {
      stopped ??= (async () => {
        clearInterval(loop);
        clearInterval(leftoverWatch);
        kick = () => undefined;
        again = false;
        closing = true;
        // A snapshot still on its way would put the host back online after its stop: let it land
        // first (a control plane that does not answer gets 5 s).
        let waited: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([Promise.allSettled([...sending]), new Promise((r) => (waited = setTimeout(r, 5_000)))]);
        clearTimeout(waited);
        // The session ends at once saying "stopping" (signed), and the worker's shutdown still
        // reports it: the host workflow takes the host offline now, not when the lease runs out.
        beginStop(stopOpts?.silently ? 'silent' : 'announce');
        if (worker.getState() === 'RUNNING') worker.shutdown();
        await running;
      })();
      return stopped;
    },
  };
}

/**
 * What the previous process of this host left in its journal never finished here: stop whatever it
 * left running, and report each attempt failed (retryable, signed) at once, so the task retries now
 * instead of after its lease expires.
 */
export async function reconcileJournal(
  journal: Journal,
  credential: HostCredential,
  client: Client,
  log?: HostLog,
  opts: {
    /** SIGTERM -> SIGKILL grace for a leftover runner's group (the command runner's killGraceMs); default 2 s. */
    killGraceMs?: number;
    /**
     * A leftover runner's group survived SIGKILL: its journal entry is kept (not reported cleaned)
     * and the caller keeps its device out of rotation until the group is gone. Without it, the entry
     * is kept and only logged.
     */
    onSurvived?(entry: JournalEntry): void;
  } = {},
): Promise<number> {
  let reported = 0;
  for (const e of journal.entries()) {
    let survived = false;
    for (const pgid of leftoverGroups(e, log)) {
      const gone = await terminateProcessGroup(pgid, opts.killGraceMs ?? 2_000).catch(() => false);
      if (!gone && !survived) {
        survived = true;
        log?.(
          'a runner left by the previous process survived SIGKILL: its device stays out of rotation while its process group lives',
          { pid: pgid, taskId: e.taskId, attempt: e.attempt, deviceId: e.deviceId },
          'error',
        );
        opts.onSurvived?.({ ...e, pid: pgid });
      }
    }
    if (e.workflowId && e.activityId) {
      const now = Date.now();
      const outcome: RunOutcome = {
        status: 'failed',
        retryable: true,
        reason: Reason.HostRestarted,
        message: `host ${credential.hostId} restarted while the attempt ran`,
        claimedAt: e.startedAt,
        finishedAt: now,
        lastProgressSeq: 0,
      };
      const sig = sign(credential, SignDomain.Result, {
        taskId: e.taskId,
        attempt: e.attempt,
        leaseId: e.leaseId,
        hostId: credential.hostId,
        outcome,
      });
      try {
        await client.activity.complete(
          { workflowId: e.workflowId, runId: e.runId, activityId: e.activityId },
          { outcome, sig },
        );
        reported++;
        log?.('reported an interrupted attempt failed', { taskId: e.taskId, attempt: e.attempt }, 'warn');
      } catch (err) {
        // Already timed out or completed: nothing to report.
        log?.('interrupted attempt already closed', { taskId: e.taskId, attempt: e.attempt, error: String(err) });
      }
    }
    // A runner still there keeps its entry: the next start (or its device's recovery) deals with it.
    if (!survived) await journal.remove(e.taskId, e.attempt);
  }
  return reported;
}

/**
 * The process groups a journal entry's runner may have left: the group it recorded, while its pid is
 * still that process (after a reboot, or once the pid is reused, it is someone else's); or, when the
 * previous process died between starting a command and journaling its pid, the groups whose members
 * carry the attempt's marks in their environment (`runnerMarks`). An entry of a runner that started
 * no process (the sim runner) finds none.
 */
function leftoverGroups(e: JournalEntry, log?: HostLog): number[] {
  if (e.pid) {
    if (stillSameProcess(e)) return [e.pid];
    log?.('a runner recorded in the journal is gone (its pid is not that process now): not signalled', {
      pid: e.pid,
      taskId: e.taskId,
    });
    return [];
  }
  const found = groupsWithEnvironment(runnerMarks(e));
  if (found === undefined) {
    log?.(
      'an attempt of the previous process has no runner pid in the journal, and this platform cannot look for its process: if it had started a command, stop it by hand',
      { taskId: e.taskId, attempt: e.attempt, deviceId: e.deviceId },
      'warn',
    );
    return [];
  }
  if (found.length > 0) {
    log?.(
      'found a runner the previous process started but did not journal the pid of: stopping it',
      { pids: found, taskId: e.taskId, attempt: e.attempt, deviceId: e.deviceId },
      'warn',
    );
  }
  return found;
}

/** Default HostOptions.takeoverWaitMs. */
export const DEFAULT_TAKEOVER_WAIT_MS = 15_000;
