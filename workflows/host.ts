/**
 * host/<hostId>: the host's enrolment (public keys), liveness, complete device snapshot, and drain
 * flags. Only snapshots signed with the enrolled key get in (the update validator refuses the rest
 * before anything reaches history). It publishes to the pool schedulers only when something that
 * matters for assignment changed (device set, driver/tags, health, offline, online, drain, keys).
 *
 * Liveness: while the host is online this workflow keeps one session activity scheduled on the
 * host's own queue (host-worker/session.ts). The host heartbeats it, and its heartbeat timeout
 * (`hostTimeoutMs`) is the liveness lease: a host that dies goes offline within it, at no history
 * event per beat. Signed snapshots come less often (on change, and periodically); a host with no
 * signed snapshot for `snapshotTimeoutMs` goes offline too, so only the host itself, not a worker
 * polling its queue, can keep it online for long.
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  CancellationScope,
  TimeoutFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  patched,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type * as controlActivities from '../activities/control-plane';
import type { HostSessionActivities } from '../host-worker/session';
import { shouldContinueAsNew } from './continue-as-new';
import {
  SignDomain,
  sameKeys,
  sessionStopBody,
  validPublicKeys,
  verifySignature,
  type HostPublicKeys,
} from './identity';
import { deviceWorkflowId, hostTaskQueue } from './ids';
import { asSignal, onSignal } from './authenticity';
import {
  hostSnapshotUpdate,
  hostStateQuery,
  reconfirmHostSignal,
  republishHostSignal,
  registerHostKeysSignal,
  retireDeviceSignal,
  retireHostSignal,
  setDeviceDrainSignal,
  setHostDrainSignal,
  type HostAdminRef,
  type HostView,
} from './messages';
import { FleetHostId, FleetKind, FleetPool } from './search-attributes';
import { assignmentDevices, type SignedSnapshot } from './types';

const { syncHost } = proxyActivities<ReturnType<typeof controlActivities.createControlPlaneActivities>>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '1s', maximumInterval: '10s' },
});

/** Snapshots stamped further than this from the workflow's clock are refused (replays, bad clocks). */
export const MAX_SNAPSHOT_SKEW_MS = 5 * 60_000;

/** How long one liveness session runs before the next replaces it (six history events each). */
export const SESSION_MS = 30 * 60_000;

export interface HostInput {
  hostId: string;
  pool: string;
  /**
   * The liveness lease: the heartbeat timeout of the host's session (and how long a scheduled
   * session may wait for the host to pick it up). A host silent longer than this goes offline.
   */
  hostTimeoutMs: number;
  /**
   * No signed snapshot for longer than this: offline (default 6 x hostTimeoutMs). Hosts snapshot
   * every `snapshotIntervalMs` (default 60 s), so keep it a few times that.
   */
  snapshotTimeoutMs?: number;
  /** Public keys enrolled by the operator; without them every snapshot is refused. */
  keys?: HostPublicKeys;
  historyLimit?: number;
  carried?: {
    view: HostView;
    ensured: string[];
    publishedPools: string[];
    lastPublished: string;
    /** A republish asked for and not yet done when the run rolled over. */
    republish?: boolean;
    reconfirmAt?: number;
    /** Devices a pool found without a workflow, not yet started again when the run rolled over. */
    restoring?: string[];
  };
}

/** What assignment depends on; idle/busy flips and timestamps are left out on purpose. */
export function assignmentRelevant(view: HostView): string {
  const devices = assignmentDevices(view.devices, view.pool);
  return JSON.stringify({
    on: view.online,
    dr: view.drained,
    dd: [...view.drainedDevices].sort(),
    devices,
    keys: view.keys,
  });
}

/**
 * Refuses a snapshot that is not this host's: not signed with its enrolled key, claiming another
 * host id, replayed (not newer than the last accepted one) or stamped far from now.
 */
export function validateSnapshot(view: HostView, hostId: string, signed: SignedSnapshot): void {
  const s = signed?.snapshot;
  if (view.retired) throw new Error(`host ${hostId} was removed by an operator; enrol it again to bring it back`);
  if (!view.keys) throw new Error(`host ${hostId} is not enrolled: no public key to verify its snapshot`);
  if (!s || s.hostId !== hostId) throw new Error(`snapshot for host ${s?.hostId} sent to host ${hostId}`);
  if (!verifySignature(SignDomain.Snapshot, s, signed.sig, view.keys.signing)) {
    throw new Error(
      `snapshot signature does not verify with host ${hostId}'s enrolled key (keys rotated? restart this host with its new credential file)`,
    );
  }
  if (Math.abs(s.sentAt - Date.now()) > MAX_SNAPSHOT_SKEW_MS) throw new Error('snapshot timestamp too far from now');
  if (s.bootId === view.bootId ? s.seq <= view.seq : view.lastSentAt !== undefined && s.sentAt <= view.lastSentAt) {
    throw new Error('snapshot is not newer than the last accepted one (replayed?)');
  }
  // A process that said it stopped does not come back (a snapshot it had on its way arrives late).
  if (view.stoppedBootId !== undefined && s.bootId === view.stoppedBootId) {
    throw new Error('snapshot from a host process that has stopped');
  }
}

export async function hostWorkflow(input: HostInput): Promise<void> {
  const { hostId } = input;
  const view: HostView = input.carried
    ? { ...input.carried.view, runs: input.carried.view.runs + 1 }
    : {
        hostId,
        pool: input.pool,
        online: false,
        drained: false,
        drainedDevices: [],
        seq: -1,
        devices: [],
        published: 0,
        runs: 1,
        keys: validPublicKeys(input.keys) ? input.keys : undefined,
      };
  const ensured = new Set<string>(input.carried?.ensured ?? []);
  let publishedPools = new Set<string>(input.carried?.publishedPools ?? []);
  let lastPublished = input.carried?.lastPublished ?? '';
  /** A pool started anew asked for everything again: the next turn publishes even if nothing changed. */
  let republish = input.carried?.republish ?? false;
  /** Devices a pool found without a workflow (republishHost): started again knowing their holder. */
  const restoring = new Set<string>(input.carried?.restoring ?? []);
  /** A pool presumes this host lost since then: republish once a snapshot verified after it arrives. */
  let reconfirmAt = input.carried?.reconfirmAt;
  let beats = 0;
  // Hosts enrolled before the setting existed: at least three of the hosts' default snapshot periods.
  const snapshotTimeoutMs = input.snapshotTimeoutMs ?? Math.max(input.hostTimeoutMs * 6, 180_000);
  let continuing = false;
  upsertSearchAttributes([
    { key: FleetKind, value: 'host' },
    { key: FleetHostId, value: hostId },
    { key: FleetPool, value: input.pool },
  ]);
  /** The pool the FleetPool search attribute says (what the Web UI and REST's pool filter see). */
  let indexedPool = input.pool;

  // What an operator's change names (HostAdminRef). Not carried: the chain's first run, the same in every run.
  view.enrolment = workflowInfo().firstExecutionRunId;
  /**
   * Whether an operator's change applies: one naming this enrolment and a version above the last
   * applied (which it then becomes). One without comes from a build before them: taken only by runs
   * recorded then (`patched` is asked only here).
   */
  const adminChange = (signal: string, ref: HostAdminRef): boolean => {
    if (ref.enrolment === undefined && ref.version === undefined) {
      if (!patched('host-admin-ref-v1')) return true;
      log.warn('ignored an operator change that names no enrolment and version', { hostId, signal });
      return false;
    }
    if (
      ref.enrolment !== view.enrolment ||
      typeof ref.version !== 'number' ||
      !(ref.version > (view.adminVersion ?? 0))
    ) {
      log.warn('ignored an operator change for another enrolment or not newer than the last (sent again?)', {
        hostId,
        signal,
        version: ref.version,
        last: view.adminVersion,
      });
      return false;
    }
    view.adminVersion = ref.version;
    return true;
  };
  setHandler(hostStateQuery, () => view);
  onSignal(registerHostKeysSignal, ({ keys, rotate, ...ref }) => {
    if (!validPublicKeys(keys)) {
      log.warn('malformed host keys ignored', { hostId });
      return;
    }
    // Other keys than the enrolled ones replace them only when the operator said so (enrolHost
    // checks first when it can; this holds when it could not ask, or two enrolments raced).
    const rotated = view.keys !== undefined && !sameKeys(view.keys, keys);
    if (rotated && !rotate && patched('host-keys-rotate-explicit-v1')) {
      log.warn('other keys for this host without rotate: ignored (enrol with --rotate to replace them)', { hostId });
      return;
    }
    // A rotation names this enrolment and a version (enrollHost): sent again later, it would put
    // back keys replaced since, so it changes nothing.
    if (rotated && !adminChange(registerHostKeysSignal.name, ref)) return;
    // Rotated: the running process can neither sign for the new keys nor open assignments sealed
    // for them, so the host is offline until a snapshot signed with them arrives (the host
    // restarted with its new credential).
    view.keys = keys;
    if (rotated && view.online && patched('host-keys-rotation-offline-v1')) {
      log.info('host keys rotated: offline until the host reports with the new keys', { hostId });
      view.online = false;
    }
    beats++;
  });
  setHandler(
    hostSnapshotUpdate,
    ({ snapshot: s }) => {
      view.bootId = s.bootId;
      view.seq = s.seq;
      view.lastSentAt = s.sentAt;
      view.devices = s.devices.map((d) => ({ ...d, tags: [...d.tags] }));
      view.pool = s.pool || view.pool;
      view.lastSeenAt = Date.now();
      view.online = true;
      beats++;
      return { accepted: true as const };
    },
    { validator: (signed) => validateSnapshot(view, hostId, signed) },
  );
  onSignal(reconfirmHostSignal, ({ reason }) => {
    log.info('a pool presumes this host lost; republishing after its next snapshot', { hostId, reason });
    reconfirmAt = Math.max(reconfirmAt ?? 0, Date.now());
  });
  // A pool lost track of this host's devices: publish everything again, now. Device workflows it
  // found gone are started again by that publish (signal-with-start; a running one ignores it).
  onSignal(republishHostSignal, ({ pool, reason, missingDevices }) => {
    // Asked only when it applies: a run recorded by a worker from before took the signal and did nothing.
    if (!publishedPools.has(pool) || !patched('host-republish-v1')) return;
    const missing = Array.isArray(missingDevices) ? missingDevices.filter((id) => typeof id === 'string') : [];
    for (const id of missing) {
      ensured.delete(id);
      // Only a device this host has: nothing to start for one it no longer reports.
      if (view.devices.some((d) => d.deviceId === id)) restoring.add(id);
    }
    log.info('publishing the devices again to a pool that lost track of them', { hostId, pool, reason, missing });
    republish = true;
    beats++;
  });
  onSignal(retireHostSignal, ({ reason, ...ref }) => {
    if (view.retired || !adminChange(retireHostSignal.name, ref)) return;
    log.info('host removed by an operator: its devices leave the pools', { hostId, reason });
    view.retired = true;
    view.online = false;
    view.devices = [];
    beats++;
  });
  onSignal(setHostDrainSignal, ({ drained, ...ref }) => {
    if (!adminChange(setHostDrainSignal.name, ref)) return;
    view.drained = drained;
    beats++;
  });
  onSignal(setDeviceDrainSignal, ({ deviceId, drained, ...ref }) => {
    if (!adminChange(setDeviceDrainSignal.name, ref)) return;
    const rest = view.drainedDevices.filter((d) => d !== deviceId);
    view.drainedDevices = drained ? [...rest, deviceId] : rest;
    beats++;
  });

  const publishIfChanged = async (): Promise<void> => {
    if (!view.keys) return; // nothing to publish before enrolment
    const relevant = assignmentRelevant(view);
    const seenAt = view.lastSeenAt ?? 0;
    const reconfirmed = reconfirmAt !== undefined && seenAt > reconfirmAt;
    if (relevant === lastPublished && !reconfirmed && !republish) return;
    republish = false; // asked again while this publish is on its way: the next turn publishes again
    // The version pools order this host's publications by (they drop one not newer than the last
    // they applied): the workflow clock, so a host removed and enrolled again, which starts a new
    // workflow, still publishes above anything the removed one sent. Never smaller than before
    // (runs from before this counted 1, 2, 3...). Not a command: replays the same.
    view.published = Math.max(view.published + 1, Date.now());
    const newDevices = view.devices.map((d) => d.deviceId).filter((id) => !ensured.has(id));
    const restoreDevices = newDevices.filter((id) => restoring.has(id));
    const pools = new Set(view.devices.map((d) => d.pool ?? view.pool));
    pools.add(view.pool);
    await syncHost({
      hostId,
      online: view.online,
      drained: view.drained,
      drainedDevices: view.drainedDevices,
      devices: view.devices.map((d) => ({ ...d, pool: d.pool ?? view.pool })),
      newDevices,
      restoreDevices,
      pools: [...new Set([...pools, ...publishedPools])],
      version: view.published,
      keys: view.keys,
      lastSeenAt: view.lastSeenAt,
    });
    // A request that came in while we published is only answered by a later snapshot.
    if (reconfirmAt !== undefined && seenAt > reconfirmAt) reconfirmAt = undefined;
    for (const id of newDevices) ensured.add(id);
    for (const id of restoreDevices) restoring.delete(id);
    publishedPools = pools;
    lastPublished = relevant;
    setCurrentDetails(
      `**${view.online ? 'online' : 'offline'}**${view.drained ? ' · drained' : ''} · ${view.devices.length} devices · pool ${view.pool}`,
    );
  };

  /**
   * The lease ran out (or the session was never picked up). Still alive if a new process of the
   * host reported since the session began (a restart: the old process's session ran out, the new
   * one is fine). Otherwise wait half a lease for a snapshot verified after the loss: a live host
   * that was only late or cut off for a moment learns of the loss when the server refuses its next
   * beat, and sends one at once (host-worker/session.ts). The SDK beats at 0.8 x the lease, which
   * alone would leave a late beat only a fifth of it.
   */
  const stillAlive = async (bootAtStart: string | undefined): Promise<boolean> => {
    if (view.bootId !== bootAtStart) return true;
    const lostAt = Date.now();
    return await condition(() => continuing || (view.lastSeenAt ?? 0) > lostAt, Math.round(input.hostTimeoutMs / 2));
  };
  let sessionNo = 0;
  const runSessions = async (): Promise<void> => {
    for (;;) {
      await condition(() => continuing || (view.online && view.keys !== undefined));
      if (continuing) return;
      const activityId = `session-${++sessionNo}`;
      const { hostSession } = proxyActivities<HostSessionActivities>({
        taskQueue: hostTaskQueue(hostId),
        activityId,
        scheduleToStartTimeout: input.hostTimeoutMs,
        heartbeatTimeout: input.hostTimeoutMs,
        startToCloseTimeout: SESSION_MS + input.hostTimeoutMs,
        retry: { maximumAttempts: 1 },
        // At a continue-as-new the session is cancelled and the run waits for the host to end it,
        // so no session outlives its run (its completion would then find no run to report to).
        cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary: 'liveness session',
      });
      const began = Date.now();
      const bootAtStart = view.bootId;
      try {
        const end = await hostSession({ maxMs: SESSION_MS });
        const keys = view.keys;
        // The stop names its process (bootId): a process that stops after a newer one of the same
        // host reported (a restart that overlapped) does not take the host offline.
        const body = sessionStopBody(hostId, workflowInfo().runId, activityId, end?.bootId ?? '');
        const signed = !!end?.stopping && !!keys && verifySignature(SignDomain.Session, body, end.sig, keys.signing);
        if (signed && end.bootId === view.bootId) {
          log.info('host stopping: offline', { hostId });
          view.online = false;
          view.stoppedBootId = end.bootId;
          beats++;
          continue;
        }
        // Otherwise the session ran its length, or it was a stale or unsigned stop: the next starts.
      } catch (err) {
        if (continuing) return;
        const timedOut = err instanceof ActivityFailure && err.cause instanceof TimeoutFailure;
        if (!timedOut) {
          // The host cannot hold a session (an agent from before sessions, say): its snapshots
          // alone keep it online; try again later rather than in a loop.
          log.warn('host liveness session failed; relying on snapshots', { hostId, error: String(err) });
          await sleep(snapshotTimeoutMs);
          continue;
        }
        if (view.online && !(await stillAlive(bootAtStart)) && !continuing) {
          log.info('host liveness lease lost: offline', { hostId, hostTimeoutMs: input.hostTimeoutMs, bootAtStart });
          view.online = false;
          beats++;
        }
      }
      // A session that ended well before its time (a rogue poller completing or failing sessions
      // at once, say) must not turn this into a loop of workflow tasks: at most one per lease.
      const early = began + input.hostTimeoutMs - Date.now();
      if (early > 0 && !continuing) await sleep(early);
    }
  };

  /** A pool presumes the host lost: ask it for a snapshot now (its answer is the proof). */
  let askedFor: number | undefined;
  const askForSnapshots = async (): Promise<void> => {
    const { hostSnapshotNow } = proxyActivities<HostSessionActivities>({
      taskQueue: hostTaskQueue(hostId),
      scheduleToStartTimeout: input.hostTimeoutMs,
      startToCloseTimeout: '30s',
      retry: { maximumAttempts: 1 },
      summary: 'snapshot now',
    });
    for (;;) {
      await condition(() => continuing || (reconfirmAt !== undefined && reconfirmAt !== askedFor && view.online));
      if (continuing) return;
      askedFor = reconfirmAt;
      // Not answered: the periodic snapshot answers later (or the host is offline by then).
      await hostSnapshotNow().catch(() => undefined);
    }
  };
  /**
   * Liveness through the session, from the first workflow task that runs this code: at once in a
   * new run, and in a run from before sessions (replayed without them) at its next snapshot or
   * timer, so new hosts, which snapshot only once a minute, are not timed out by the old 30 s rule.
   */
  let sessionsStarted = false;
  /** Holds the session loop: cancelled when this run hands over to the next (the end of this function). */
  const sessionScope = new CancellationScope();
  let sessionsEnded: Promise<unknown> = Promise.resolve();
  let snapshotAsksEnded: Promise<unknown> = Promise.resolve();
  function sessionsOn(): boolean {
    if (!sessionsStarted && patched('host-session-v1')) {
      sessionsStarted = true;
      const stopped = (what: string) => (err: unknown) => {
        if (!isCancellation(err)) log.error(`${what} stopped`, { hostId, error: String(err) });
      };
      sessionsEnded = sessionScope.run(runSessions).catch(stopped('liveness sessions'));
      snapshotAsksEnded = askForSnapshots().catch(stopped('snapshot requests'));
    }
    return sessionsStarted;
  }
  sessionsOn();

  // Snapshot watchdog: one timer per silence window, not one per snapshot (each timer is a billed
  // action and two history events).
  void (async () => {
    for (;;) {
      if (!view.online || view.lastSeenAt === undefined) {
        await condition(() => view.online && view.lastSeenAt !== undefined);
        continue;
      }
      const timeout = sessionsOn() ? snapshotTimeoutMs : input.hostTimeoutMs;
      const left = view.lastSeenAt + timeout - Date.now();
      if (left > 0) {
        await sleep(left);
        continue;
      }
      log.info('no signed snapshot within its timeout: offline', { hostId, timeout });
      view.online = false;
      beats++;
    }
  })();

  // `handled` lives outside the loop: a change made while a publish was on its way (the watchdog
  // going offline, say) is still seen by the next turn. A new run publishes whatever changed.
  let handled = input.carried ? -1 : 0;

  /**
   * Cancels the session and waits, at most two leases, until the host ended it (it learns of the
   * cancel at its next beat) and a snapshot request in flight finished. `publishMeanwhile`: what
   * changes while it waits (a drain, the watchdog) still reaches the pools from this run.
   */
  const endSessions = async (publishMeanwhile: boolean): Promise<void> => {
    sessionScope.cancel();
    let ended = false;
    void Promise.all([sessionsEnded, snapshotAsksEnded]).then(() => (ended = true));
    if (!publishMeanwhile) {
      await condition(() => ended, 2 * input.hostTimeoutMs);
      return;
    }
    const until = Date.now() + 2 * input.hostTimeoutMs;
    while (!ended && Date.now() < until) {
      await condition(() => ended || beats !== handled, until - Date.now());
      if (beats !== handled) {
        handled = beats;
        await publishIfChanged();
      }
    }
  };

  while (!shouldContinueAsNew(input.historyLimit)) {
    await condition(() => beats !== handled || shouldContinueAsNew(input.historyLimit));
    if (shouldContinueAsNew(input.historyLimit)) break;
    sessionsOn();
    handled = beats;
    await publishIfChanged();
    // The host was restarted with another pool in its configuration: index it under that one.
    if (view.pool !== indexedPool && patched('host-pool-index-v1')) {
      upsertSearchAttributes([{ key: FleetPool, value: view.pool }]);
      indexedPool = view.pool;
    }
    // Removed, and the pools were told (an empty device list): the run ends below.
    if (view.retired && handled === beats) break;
  }
  continuing = true;
  if (view.retired) {
    // Each device workflow ends once nobody holds it; the session ends; then this workflow.
    await Promise.all(
      [...ensured].map((deviceId) =>
        getExternalWorkflowHandle(deviceWorkflowId(hostId, deviceId))
          .signal(retireDeviceSignal, asSignal(retireDeviceSignal, { by: hostId, at: Date.now() }))
          .catch((err) => log.warn('could not retire a device workflow', { hostId, deviceId, error: String(err) })),
      ),
    );
    if (sessionsStarted) await endSessions(false);
    await condition(allHandlersFinished);
    setCurrentDetails(`**removed** · ${ensured.size} devices retired`);
    return;
  }
  // Hand the session over: cancel it and wait until the host has ended it (it learns of the cancel
  // at its next beat, within about 1.1 leases; a host that is gone ends it by timing out), and let
  // a snapshot request in flight finish. The next run opens a new session at once, and nothing of
  // this run's is left to complete against a closed run. Bounded, so a poller that ignores the
  // cancel cannot hold the run open.
  if (sessionsStarted && patched('host-session-handoff-v2')) {
    await endSessions(true);
  } else if (sessionsStarted && patched('host-session-handoff-v1')) {
    // Runs recorded by the first version of the hand-over (fixture set 2026-12-01c): it only waited.
    await endSessions(false);
  }
  await condition(allHandlersFinished);
  return await continueAsNew<typeof hostWorkflow>({
    ...input,
    // The next run indexes the pool the host is in now, not the one it was enrolled with.
    pool: view.pool,
    carried: {
      view,
      ensured: [...ensured],
      publishedPools: [...publishedPools],
      lastPublished,
      reconfirmAt,
      ...(republish ? { republish } : {}),
      ...(restoring.size > 0 ? { restoring: [...restoring] } : {}),
    },
  });
}
