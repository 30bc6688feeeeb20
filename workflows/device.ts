/**
 * device/<hostId>/<deviceId>: the single authority on who holds one device. It accepts a
 * reservation only when free, refuses a second holder, and ignores releases of any lease but the
 * current one, so nothing but the holder (or the hold deadline) frees it.
 *
 * Audit trail (what the invariant checker reads): each accepted reservation is the `assignment`
 * signal this workflow sends to the task; each end is either the `deviceReleased` signal it sends to
 * a scheduler, or a release it applied that the pool passed on (a `releaseDevice` with `via`, or the
 * `release` riding on the next `reserveDevice`), which it does not echo back to that pool.
 * A hold past its deadline (nobody released it: the task was terminated, a signal was lost) is freed
 * when the scheduler's sweep says so; the device checks the deadline itself before it lets go.
 */
import {
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  log,
  patched,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { InFlight, shouldContinueAsNew } from './continue-as-new';
import { schedulerWorkflowId, taskWorkflowId } from './ids';
import { asSignal, onSignal } from './authenticity';
import {
  adoptDeviceSignal,
  assignmentSignal,
  deviceReleasedSignal,
  deviceStateQuery,
  expireHoldSignal,
  releaseDeviceSignal,
  reservationRefusedSignal,
  reserveDeviceSignal,
  retireDeviceSignal,
  type DeviceView,
} from './messages';
import { FleetDeviceId, FleetHostId, FleetKind } from './search-attributes';
import type { ReleaseNote, Reservation, ReservationRequest } from './types';

const RECENT_KEPT = 20;

export interface DeviceInput {
  hostId: string;
  deviceId: string;
  historyLimit?: number;
  carried?: Omit<DeviceView, 'hostId' | 'deviceId'>;
  /**
   * Started again after its workflow was lost (terminated, say) while a task still held the device:
   * that task's lease, found by its host's publish (syncHost), held from the start as if reserved
   * here, so no other reservation is taken until that task lets go (or the hold's deadline).
   */
  restored?: Reservation;
}

export async function deviceWorkflow(input: DeviceInput): Promise<void> {
  const { hostId, deviceId } = input;
  const view: DeviceView = {
    hostId,
    deviceId,
    current: input.carried ? input.carried.current : input.restored,
    recent: input.carried?.recent ?? [],
    reservations: input.carried?.reservations ?? 0,
    refusals: input.carried?.refusals ?? 0,
    runs: (input.carried?.runs ?? 0) + 1,
    refusedPools: input.carried?.refusedPools ?? [],
    ...(input.carried?.retiring ? { retiring: true, retiredAt: input.carried.retiredAt } : {}),
    // When this chain began (0: it began before this was kept, and takes any retirement).
    begunAt: input.carried ? (input.carried.begunAt ?? 0) : workflowInfo().runStartTime.getTime(),
  };
  const inFlight = new InFlight();
  /** Outgoing signals are fire-and-track: continue-as-new waits for them. */
  const send = (p: Promise<void>, onError: (err: unknown) => void): void => inFlight.track(p, onError);
  upsertSearchAttributes([
    { key: FleetKind, value: 'device' },
    { key: FleetHostId, value: hostId },
    { key: FleetDeviceId, value: deviceId },
  ]);

  /** `via`: the pool that passed this release on (it knows already). */
  const release = (r: Reservation, reason: string, detail?: string, via?: string): void => {
    if (view.current?.leaseId !== r.leaseId) return;
    view.current = undefined;
    view.recent.push({ ...r, releasedAt: Date.now(), releaseReason: reason });
    if (view.recent.length > RECENT_KEPT) view.recent.shift();
    // Every pool that believes the device held by this lease: the owner, and any pool we refused meanwhile.
    // The pool that passed the release on knows, unless we refused it meanwhile: its view then says
    // the device is held by this lease (the refusal told it so).
    const pools = new Set(view.refusedPools);
    if (r.pool !== via) pools.add(r.pool);
    view.refusedPools = [];
    for (const pool of pools) {
      send(
        getExternalWorkflowHandle(schedulerWorkflowId(pool)).signal(
          deviceReleasedSignal,
          asSignal(deviceReleasedSignal, {
            hostId,
            deviceId,
            leaseId: r.leaseId,
            taskId: r.taskId,
            reason,
            detail,
          }),
        ),
        (err) => log.warn('could not tell a scheduler about a release', { pool, error: String(err) }),
      );
    }
    describe();
  };

  const describe = (): void => {
    const cur = view.current;
    setCurrentDetails(
      cur
        ? `**reserved** by task ${cur.taskId} (attempt ${cur.attempt}) until ${new Date(cur.expiresAt).toISOString()}`
        : `**free** · ${view.reservations} reservations so far`,
    );
  };

  setHandler(deviceStateQuery, () => view);

  /** Tells the pool that asked that the device is held (by `heldBy`), so it tries elsewhere. */
  const refuse = (req: ReservationRequest, heldBy?: { taskId: string; leaseId: string; expiresAt: number }): void => {
    view.refusals++;
    send(
      getExternalWorkflowHandle(schedulerWorkflowId(req.pool)).signal(
        reservationRefusedSignal,
        asSignal(reservationRefusedSignal, { hostId, deviceId, request: req, heldBy }),
      ),
      (err) => log.warn('could not tell the scheduler about a refusal', { error: String(err) }),
    );
  };

  const onReserve = (req: ReservationRequest): void => {
    // The pool's scheduler learned that the current holder ended and passes that on with the next reservation.
    if (req.release && view.current?.leaseId === req.release.leaseId) {
      release(view.current, req.release.reason, req.release.detail, req.pool);
    }
    if (view.current && view.current.expiresAt <= Date.now() && view.current.leaseId !== req.leaseId) {
      // Past its deadline and nobody released it (the expireHold may have come too early): free it now.
      release(view.current, 'hold_expired');
    }
    const cur = view.current;
    const heldByCur = cur ? { taskId: cur.taskId, leaseId: cur.leaseId, expiresAt: cur.expiresAt } : undefined;
    // A lease id this device knows (held now, or had and let go) can come again for another task or
    // attempt: a pool's round run again after its workflow task was lost (a worker crash, a
    // timeout) decides anew with more input while `uuid4()` replays the same lease ids, and its
    // local activity sends that to the device too. Dropped as a duplicate, that task would hear
    // nothing while its pool believes it holds the device (and frees that hold at the first
    // holder's release): stranded. Refused instead, so the pool puts it back in the queue. Runs
    // recorded before this took it as a duplicate and replay so (the patch is asked only here).
    const otherHolder = (r: Reservation): boolean =>
      (r.taskId !== req.taskId ||
        r.attempt !== req.attempt ||
        (r.submittedAt !== undefined && req.submittedAt !== undefined && r.submittedAt !== req.submittedAt)) &&
      patched('device-refuse-reused-lease-v1');
    if (cur?.leaseId === req.leaseId) {
      if (!otherHolder(cur)) return; // duplicate delivery
      if (!view.refusedPools.includes(req.pool)) view.refusedPools.push(req.pool);
      refuse(req, heldByCur);
      return;
    }
    // A lease this device has already had and let go: the same reservation sent again (a pool's
    // local activity run again after a worker crash, or a replay). Runs recorded before this check
    // took it, and replay so (the patch is asked only here).
    const had = view.recent.find((r) => r.leaseId === req.leaseId);
    if (had && patched('device-reserve-once-v1')) {
      if (otherHolder(had)) {
        // See above. Free: no holder named, the pool just puts the task back.
        if (cur && !view.refusedPools.includes(req.pool)) view.refusedPools.push(req.pool);
        refuse(req, heldByCur);
      }
      return;
    }
    if (view.retiring) {
      // A pool that has not heard yet that the host is gone: refused, as if held (it tries elsewhere).
      // Marked held for a minute, so the pool does not offer it again meanwhile; by then the host's
      // removal has taken the device out of the pool.
      refuse(
        req,
        cur
          ? { taskId: cur.taskId, leaseId: cur.leaseId, expiresAt: cur.expiresAt }
          : { taskId: 'host-removed', leaseId: `retired/${hostId}/${deviceId}`, expiresAt: Date.now() + 60_000 },
      );
      return;
    }
    if (cur) {
      if (!view.refusedPools.includes(req.pool)) view.refusedPools.push(req.pool);
      refuse(req, { taskId: cur.taskId, leaseId: cur.leaseId, expiresAt: cur.expiresAt });
      return;
    }
    const now = Date.now();
    const { release: _passedOn, ...request } = req;
    const r: Reservation = { ...request, hostId, deviceId, reservedAt: now, expiresAt: now + req.holdMs };
    view.current = r;
    view.reservations++;
    describe();
    send(
      getExternalWorkflowHandle(taskWorkflowId(req.taskId)).signal(
        assignmentSignal,
        asSignal(assignmentSignal, {
          taskId: req.taskId,
          attempt: req.attempt,
          ...(req.submittedAt !== undefined ? { submittedAt: req.submittedAt } : {}),
          leaseId: req.leaseId,
          hostId,
          deviceId,
          reservedAt: now,
          hostKeys: req.hostKeys,
        }),
      ),
      // The task ended (cancelled, or gone) before it heard of the device: nobody will use it.
      () => release(r, 'task_gone'),
    );
  };

  const onExpireHold = ({ leaseId }: { leaseId: string }): void => {
    const cur = view.current;
    if (cur?.leaseId === leaseId && cur.expiresAt <= Date.now()) release(cur, 'hold_expired');
  };

  const onRelease = ({ leaseId, reason, detail, via }: ReleaseNote & { via?: string }): void => {
    if (view.current?.leaseId === leaseId) release(view.current, reason, detail, via);
  };

  // Signals that reach a run before its handlers exist (a new run's first workflow task, e.g. right
  // after continue-as-new) are handed to each handler as it is registered, so across signal names
  // the order of registration wins over the order of arrival. Releases go first: a release in that
  // batch is for a lease reserved before it (a lease is only released after its assignment went
  // out), while a reservation handled ahead of the release it followed is refused for nothing,
  // which left the pool believing the device held by a finished task (seen in durability tests).
  // Runs recorded before this change registered the reservation first and replay so.
  if (patched('device-releases-first')) {
    onSignal(releaseDeviceSignal, onRelease);
    onSignal(expireHoldSignal, onExpireHold);
    onSignal(reserveDeviceSignal, onReserve);
  } else {
    onSignal(reserveDeviceSignal, onReserve);
    onSignal(expireHoldSignal, onExpireHold);
    onSignal(releaseDeviceSignal, onRelease);
  }

  onSignal(retireDeviceSignal, (note?: { by?: string; at?: number }) => {
    // A retirement from before this device workflow began (sent again after its host was enrolled anew).
    if (typeof note?.at === 'number' && note.at < (view.begunAt ?? 0)) {
      log.warn('ignored a retirement from before this device workflow began', { hostId, deviceId });
      return;
    }
    if (!view.retiring) log.info('host removed: this device ends once free', { hostId, deviceId });
    view.retiring = true;
    view.retiredAt = Math.max(view.retiredAt ?? 0, note?.at ?? Date.now());
  });

  // The host was enrolled anew while this device was still retiring (a lease held it at the
  // removal): serve the new enrolment instead of ending. The lease held is kept (new reservations
  // are refused until it is released or past its deadline); the wait below then ends with it and
  // the run continues as new. Runs recorded by a build without this ignored it, and replay so.
  onSignal(adoptDeviceSignal, ({ at }) => {
    if (!view.retiring) return;
    if (!(typeof at === 'number' && at > (view.retiredAt ?? 0))) {
      log.warn('ignored an adoption not newer than the retirement (sent again?)', { hostId, deviceId, at });
      return;
    }
    if (!patched('device-adopt-v1')) return;
    log.info('host enrolled anew: this device serves it (no longer retiring)', { hostId, deviceId });
    delete view.retiring;
    delete view.retiredAt;
    // Retirements from before this (the removed enrolment's, sent again) are ignored from here on.
    view.begunAt = Date.now();
  });

  if (!input.carried && input.restored) {
    log.info('started again while a task held the device: holding its lease until it lets go', {
      hostId,
      deviceId,
      taskId: input.restored.taskId,
      attempt: input.restored.attempt,
    });
  }
  describe();
  // No timer of its own (a timer per reservation is a billed action per task): the pool's scheduler
  // sweeps its holds and sends expireHold for any past its deadline.
  await condition(() => shouldContinueAsNew(input.historyLimit) || !!view.retiring);
  // Retiring while held: the holder's release ends it; failing that, the hold's deadline (the pool
  // that would sweep it may have dropped the device with its host).
  while (view.retiring && view.current && !shouldContinueAsNew(input.historyLimit)) {
    const cur = view.current;
    const left = cur.expiresAt - Date.now();
    if (left > 0) await condition(() => view.current?.leaseId !== cur.leaseId, left);
    if (view.current?.leaseId === cur.leaseId && cur.expiresAt <= Date.now()) release(cur, 'hold_expired');
  }
  await condition(() => inFlight.count === 0 && allHandlersFinished());
  if (view.retiring && !view.current) {
    setCurrentDetails(`**retired** · ${view.reservations} reservations`);
    return;
  }
  const { hostId: _h, deviceId: _d, ...carried } = view;
  return await continueAsNew<typeof deviceWorkflow>({ hostId, deviceId, historyLimit: input.historyLimit, carried });
}
