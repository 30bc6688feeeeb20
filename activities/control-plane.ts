/**
 * Control-plane activities: the I/O the fleet's workflows need (starting pool schedulers and
 * device workflows, publishing a host's devices to its pools). Built by a factory so the worker
 * injects the client and the configuration.
 */
import { Context } from '@temporalio/activity';
import { WorkflowNotFoundError, type Client, type WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure, type Payload } from '@temporalio/common';
import type { temporal } from '@temporalio/proto';
import { decodeFromPayloadsAtIndex } from '@temporalio/common/lib/internal-non-workflow';
import { schedulerInput, schedulerStart, taskWorkflowQueue, type ControlPlaneConfig } from '../control-plane/config';
import { signalTagFor } from '../control-plane/signal-auth';
import type { deviceWorkflow } from '../workflows/device';
import {
  deviceKey,
  deviceWorkflowId,
  hostWorkflowId,
  poolRecoveryWorkflowId,
  schedulerWorkflowId,
  taskWorkflowId,
} from '../workflows/ids';
import {
  adoptDeviceSignal,
  deviceStateQuery,
  enqueueTasksSignal,
  expireHoldSignal,
  hostDevicesSignal,
  releaseDeviceSignal,
  republishHostSignal,
  requeueTaskSignal,
  reserveDeviceSignal,
  schedulerStateQuery,
  taskEnqueueRequestQuery,
  taskReleasedSignal,
  taskStateQuery,
  type DeviceReleased,
  type EnqueueRequest,
  type HostDevicesUpdate,
} from '../workflows/messages';
import { FleetKind, FleetPool, STOPPED, visibilityString } from '../workflows/search-attributes';
import type { schedulerWorkflow } from '../workflows/scheduler';
import type { DeviceSnapshot, ReleaseNote, Reservation } from '../workflows/types';
import type { HostPublicKeys } from '../workflows/identity';

export interface SyncHostRequest {
  hostId: string;
  online: boolean;
  drained: boolean;
  drainedDevices: string[];
  devices: Array<DeviceSnapshot & { pool: string }>;
  /**
   * Devices this host workflow has not seen before: their reservation workflows may not exist yet,
   * or may still be retiring from the host's previous enrolment (they are adopted).
   */
  newDevices: string[];
  /**
   * Of `newDevices`, those a pool found without a workflow (republishHost): each is started knowing
   * the lease its lost run held for a task that still holds it, if any, and gets the signals that run
   * never handled (`lostRun`).
   */
  restoreDevices?: string[];
  /** Every pool to tell, including pools the host no longer has devices in (they get an empty list). */
  pools: string[];
  version: number;
  keys: HostPublicKeys;
  lastSeenAt?: number;
}

export interface ControlPlaneDeps {
  client: Client;
  config: ControlPlaneConfig;
}

/**
 * The signals of these names a closed run received after its last completed workflow task: it
 * never handled them (those that came during a workflow task that never completed included).
 */
async function unhandledSignals(
  run: WorkflowHandle,
  names: readonly string[],
  events?: temporal.api.history.v1.IHistoryEvent[],
): Promise<Array<{ signal: string; payloads: Payload[] | null | undefined }>> {
  events ??= (await run.fetchHistory()).events ?? [];
  let from = 0;
  events.forEach((e, i) => {
    if (e.workflowTaskCompletedEventAttributes) from = i + 1;
  });
  const out: Array<{ signal: string; payloads: Payload[] | null | undefined }> = [];
  for (const e of events.slice(from)) {
    const sig = e.workflowExecutionSignaledEventAttributes;
    if (sig?.signalName && names.includes(sig.signalName)) out.push({ signal: sig.signalName, payloads: sig.input?.payloads });
  }
  return out;
}

/**
 * The signals a closed run sent by command (`names`) that the server never delivered: initiated,
 * then neither signalled nor failed before the run ended. A run terminated right after a workflow
 * task that sent one loses it (the server drops a closed run's outstanding signals).
 */
export function undeliveredSignals(
  events: temporal.api.history.v1.IHistoryEvent[],
  names: readonly string[],
): Array<{ workflowId: string; signal: string; payloads: Payload[] | null | undefined }> {
  const settled = new Set<string>();
  for (const e of events) {
    const id =
      e.externalWorkflowExecutionSignaledEventAttributes?.initiatedEventId ??
      e.signalExternalWorkflowExecutionFailedEventAttributes?.initiatedEventId;
    if (id !== undefined && id !== null) settled.add(String(id));
  }
  const out: Array<{ workflowId: string; signal: string; payloads: Payload[] | null | undefined }> = [];
  for (const e of events) {
    const a = e.signalExternalWorkflowExecutionInitiatedEventAttributes;
    const workflowId = a?.workflowExecution?.workflowId;
    if (!a?.signalName || !workflowId || !names.includes(a.signalName) || settled.has(String(e.eventId))) continue;
    out.push({ workflowId, signal: a.signalName, payloads: a.input?.payloads });
  }
  return out;
}

export function createControlPlaneActivities({ client, config }: ControlPlaneDeps) {
  /**
   * Whether the task still holds this lease on this device: its current attempt is under it there.
   * Not when it let go of it (an attempt of its record, ended, or released as a stray), never took
   * it (an assignment the lost run had not yet delivered is dropped with that run), or ended.
   */
  const stillHeld = async (r: Reservation): Promise<boolean> => {
    let view;
    try {
      view = await client.workflow.getHandle(taskWorkflowId(r.taskId)).query(taskStateQuery);
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return false;
      throw err;
    }
    const cur = view.current;
    return !!cur && cur.leaseId === r.leaseId && cur.hostId === r.hostId && cur.deviceId === r.deviceId;
  };

  /**
   * A device workflow a pool found gone (terminated, say), as its last run left it:
   * - `held`: the lease it held for a task that still runs on the device (a pool started anew knows
   *   no holds, and would give the device to another task). Read from that run itself (a query
   *   replays a closed run; only a run of this control queue) and kept if the task still holds it.
   * - `unhandled`: the pools' signals it had received but not handled (after its last completed
   *   workflow task), each with a valid tag for this device: a reservation among them would
   *   otherwise leave its task waiting for an assignment until the pool's hold ran out.
   * A lookup that fails three times starts the device free and says so: a host's publish never
   * waits on it for long.
   */
  const lostRun = async (
    hostId: string,
    deviceId: string,
  ): Promise<{ held?: Reservation; unhandled: Array<{ signal: string; arg: unknown }> }> => {
    const id = deviceWorkflowId(hostId, deviceId);
    for (let attempt = 1; ; attempt++) {
      try {
        let lost;
        try {
          lost = await client.workflow.getHandle(id).describe();
        } catch (err) {
          if (err instanceof WorkflowNotFoundError) return { unhandled: [] }; // never started, or gone from retention
          throw err;
        }
        let target: { runId: string; taskQueue: string } = lost;
        let running = false;
        if (lost.status.name === 'RUNNING') {
          // Started again already (this publish tried before and failed after the start, say): no
          // hold can go into it now, but the signals the run before it never handled are sent
          // again (a device takes a lease it knows, or a release of a lease it does not hold, as nothing).
          running = true;
          const startedAt = lost.startTime.getTime();
          let before: { runId: string; taskQueue: string; closed: number } | undefined;
          for await (const wf of client.workflow.list({ query: `WorkflowId = ${visibilityString(id)} AND ${STOPPED}` })) {
            const closed = wf.closeTime?.getTime() ?? 0;
            const recent = closed <= startedAt && closed > startedAt - RESTORE_RESEND_WINDOW_MS;
            if (recent && (!before || closed > before.closed)) before = { runId: wf.runId, taskQueue: wf.taskQueue, closed };
          }
          if (!before) return { unhandled: [] };
          target = before;
        }
        const run = client.workflow.getHandle(id, target.runId);
        const ours = target.taskQueue === config.controlTaskQueue;
        const current = ours && !running ? (await run.query(deviceStateQuery)).current : undefined;
        const held = current && (await stillHeld(current)) ? current : undefined;
        const unhandled: Array<{ signal: string; arg: unknown }> = [];
        const codecs = client.options.loadedDataConverter.payloadCodecs;
        const where = { namespace: client.options.namespace, workflowId: id };
        for (const { signal, payloads } of await unhandledSignals(run, REDELIVERED_DEVICE_SIGNALS)) {
          if ((await signalTagFor(codecs, where, signal, payloads)) !== 'taken') continue;
          const arg = await decodeFromPayloadsAtIndex(client.options.loadedDataConverter, 0, payloads);
          if (arg && typeof arg === 'object') unhandled.push({ signal, arg });
        }
        return { held, unhandled };
      } catch (err) {
        if (attempt < 3) {
          await new Promise((r) => setTimeout(r, 500 * attempt));
          continue;
        }
        Context.current().log.warn('could not tell what a lost device workflow held; starting it free', {
          device: deviceKey(hostId, deviceId),
          error: String(err),
        });
        return { unhandled: [] };
      }
    }
  };

  /**
   * The task may have let go between the look and the start (its release then found no device
   * workflow to pass on to): looked at again, and released on the device if so.
   */
  const releaseIfLetGo = async (held: Reservation): Promise<void> => {
    if (await stillHeld(held).catch(() => true)) return;
    const note = { leaseId: held.leaseId, reason: 'task_released', detail: 'while its device workflow was started again' };
    await client.workflow.getHandle(deviceWorkflowId(held.hostId, held.deviceId)).signal(releaseDeviceSignal, note);
  };

  return {
    async ensureScheduler(pool: string): Promise<void> {
      await client.workflow.start<typeof schedulerWorkflow>('schedulerWorkflow', schedulerStart(config, pool));
    },

    /**
     * For the recovery a pool's scheduler starts when it begins anew (workflows/recovery.ts): that
     * run knows neither its queue nor its devices. When it is not the pool's first scheduler
     * (another run of its id is on record), every running task of the pool on this control
     * plane's queues that waits for an admission or a device is queued again (its enqueue read by
     * a query and sent in batches, or, where that fails, asked of the task itself), and every
     * running host on the control queue is asked to publish its devices again (one that publishes
     * to this pool does); otherwise nobody. Signals sent twice (this activity retried) change
     * nothing more. Returns how many of each were reached, and how many signals went through only
     * when tried again at the end; one that never does fails the activity (its retry starts over).
     */
    async recoverPool(pool: string): Promise<{ tasks: number; hosts: number; failed: number }> {
      const ctx = Context.current();
      const self = ctx.info.workflowExecution;
      // Only for a recovery the pool's own scheduler started (a look-alike, started by anyone who
      // may start workflows on the control queue, would have us signal every task and host). The
      // parent link is the server's; the scheduler is checked by id, type and queue.
      const parent = self
        ? (await client.workflow.getHandle(self.workflowId, self.runId).describe()).raw.workflowExecutionInfo
            ?.parentExecution
        : undefined;
      const scheduler =
        parent?.workflowId === schedulerWorkflowId(pool) && parent.runId
          ? await client.workflow.getHandle(parent.workflowId, parent.runId).describe()
          : undefined;
      if (
        !self?.workflowId.startsWith(poolRecoveryWorkflowId(pool, '')) ||
        !scheduler ||
        scheduler.type !== 'schedulerWorkflow' ||
        scheduler.taskQueue !== config.controlTaskQueue
      ) {
        throw ApplicationFailure.nonRetryable(
          `recoverPool for pool ${pool} asked by ${self?.workflowId ?? 'no workflow'} (started by ` +
            `${parent?.workflowId ?? 'no workflow'}), not by a recovery that ${schedulerWorkflowId(pool)} started`,
        );
      }
      // The pool's first scheduler (no other run of its id on record): its hosts publish to it as
      // they come, and every task of the pool enqueues to it, so nobody is asked.
      const earlier = await client.workflow.count(
        `WorkflowId = ${visibilityString(scheduler.workflowId)} AND RunId != ${visibilityString(scheduler.runId)}`,
      );
      if (earlier.count === 0) return { tasks: 0, hosts: 0, failed: 0 };
      const reason = `the scheduler of pool ${pool} started anew (run ${scheduler.runId})`;
      const running = `ExecutionStatus = 'Running'`;
      // This deployment's workflows only (another one in the namespace would refuse our signals).
      const control = `TaskQueue = ${visibilityString(config.controlTaskQueue)}`;
      const taskQueues = `(TaskQueue = ${visibilityString(taskWorkflowQueue(config))} OR ${control})`;
      const ids = async (query: string): Promise<string[]> => {
        const out: string[] = [];
        for await (const wf of client.workflow.list({ query })) {
          out.push(wf.workflowId);
          if (out.length % 500 === 0) ctx.heartbeat();
        }
        return out;
      };
      const told = new Set<string>();
      let failed = 0;
      /** `fn` for each item, RECOVERY_PARALLEL at a time, with a heartbeat after each lot. */
      const inLots = async <T>(items: T[], fn: (item: T) => Promise<void>): Promise<void> => {
        for (let i = 0; i < items.length; i += RECOVERY_PARALLEL) {
          await Promise.all(items.slice(i, i + RECOVERY_PARALLEL).map(fn));
          ctx.heartbeat();
        }
      };
      /** The signals that failed three times, tried again at the end (`tellLate`). */
      const late = new Map<string, (id: string) => Promise<void>>();
      /**
       * Each signal is tried a few times; one that still fails is counted and tried again at the
       * end by `later` (a retry of the whole activity would start everything over).
       */
      const tell = async (
        workflowIds: string[],
        send: (id: string) => Promise<void>,
        later: (id: string) => Promise<void> = send,
      ): Promise<void> => {
        await inLots(
          workflowIds.filter((id) => !told.has(id)),
          async (id) => {
            told.add(id);
            for (let attempt = 1; ; attempt++) {
              try {
                return await send(id);
              } catch (err) {
                if (err instanceof WorkflowNotFoundError) return; // ended meanwhile: nothing to tell
                if (attempt >= 3) {
                  failed++;
                  late.set(id, later);
                  ctx.log.warn('pool recovery: a signal failed; it is tried again at the end', {
                    pool,
                    workflowId: id,
                    error: String(err),
                  });
                  return;
                }
                await ctx.sleep(500 * attempt);
              }
            }
          },
        );
      };
      /**
       * The signals that failed, tried again with more patience. Any that still fails fails the
       * activity, and its retry tells everyone again: a task nobody reaches would wait for good,
       * and what was told already changes nothing twice.
       */
      const tellLate = async (): Promise<void> => {
        for (let round = 1; late.size > 0; round++) {
          if (round > RECOVERY_LATE_ROUNDS) {
            throw ApplicationFailure.retryable(
              `pool recovery: ${late.size} signal(s) still failed after ${RECOVERY_LATE_ROUNDS} more rounds ` +
                `(e.g. to ${[...late.keys()][0]}); the recovery starts over`,
              'PoolRecoverySignalsFailed',
            );
          }
          await ctx.sleep(Math.min(1_000 * 2 ** round, 10_000));
          ctx.heartbeat();
          await inLots([...late], async ([id, send]) => {
            try {
              await send(id);
              late.delete(id);
            } catch (err) {
              if (err instanceof WorkflowNotFoundError) late.delete(id); // ended meanwhile
              else ctx.log.warn('pool recovery: a signal failed again', { pool, workflowId: id, error: String(err) });
            }
          });
        }
      };
      const p = visibilityString(pool);
      /**
       * The releases the lost run had received but not yet passed on (after its last completed
       * workflow task), and those it passed on by a command the server had not delivered when the
       * run ended: sent to their devices now, or each would stay held until its hold deadline.
       * A device applies a release only while it holds that lease, so one already applied (or one
       * the lost run did pass on) changes nothing.
       */
      let releasesFrom: string | undefined;
      const passOnLostReleases = async (): Promise<void> => {
        let lost: { workflowId: string; runId: string; start: number } | undefined;
        const query =
          `WorkflowId = ${visibilityString(scheduler.workflowId)} AND ${STOPPED}`;
        for await (const wf of client.workflow.list({ query })) {
          const start = wf.startTime.getTime();
          if (start < scheduler.startTime.getTime() && (!lost || start > lost.start)) {
            lost = { workflowId: wf.workflowId, runId: wf.runId, start };
          }
        }
        if (!lost || lost.runId === releasesFrom) return;
        releasesFrom = lost.runId;
        const notes: Array<{ device: string; note: ReleaseNote & { via?: string } }> = [];
        const run = client.workflow.getHandle(lost.workflowId, lost.runId);
        const events = (await run.fetchHistory()).events ?? [];
        const decode = <T>(payloads: Payload[] | null | undefined) =>
          decodeFromPayloadsAtIndex<T>(client.options.loadedDataConverter, 0, payloads).catch(() => undefined);
        for (const { payloads } of await unhandledSignals(run, [taskReleasedSignal.name], events)) {
          const r = await decode<DeviceReleased>(payloads);
          if (r?.hostId && r.deviceId && r.leaseId) {
            const note = { leaseId: r.leaseId, reason: r.reason, detail: r.detail, via: pool };
            notes.push({ device: deviceWorkflowId(r.hostId, r.deviceId), note });
          }
        }
        for (const { workflowId, payloads } of undeliveredSignals(events, [releaseDeviceSignal.name])) {
          const note = await decode<ReleaseNote & { via?: string }>(payloads);
          if (note?.leaseId) notes.push({ device: workflowId, note });
        }
        const devices = [...new Set(notes.map((n) => n.device))];
        for (const id of devices) told.delete(id); // a second lost run looked at: its releases too
        await tell(devices, async (id) => {
          for (const { note } of notes.filter((n) => n.device === id)) {
            await client.workflow.getHandle(id).signal(releaseDeviceSignal, note);
          }
        });
      };
      /**
       * Many waiting tasks' enqueues in one signal (`enqueueTasks`): each read from its task
       * (`taskEnqueueRequest`, a query: no history) instead of asking each task to send its own.
       * Thousands of single signals into the one scheduler workflow queue up behind each other on
       * the server (P5: 343 s to queue 9,968 tasks again that way, 98 s in batches). A batch that
       * cannot be sent falls back to asking its tasks one by one.
       */
      const batch: EnqueueRequest[] = [];
      let batchBytes = 0;
      /** Tasks whose enqueue went in a batch the scheduler took (confirmBatched checks it applied them). */
      const batched = new Set<string>();
      const requeue = (id: string) => client.workflow.getHandle(id).signal(requeueTaskSignal, { pool, reason });
      const flush = async (): Promise<void> => {
        const requests = batch.splice(0);
        batchBytes = 0;
        if (requests.length === 0) return;
        for (let attempt = 1; ; attempt++) {
          try {
            await client.workflow.getHandle(schedulerWorkflowId(pool)).signal(enqueueTasksSignal, { requests });
            for (const r of requests) batched.add(taskWorkflowId(r.taskId));
            return;
          } catch (err) {
            if (attempt < 2) {
              await ctx.sleep(500);
              continue;
            }
            ctx.log.warn('pool recovery: a batch of enqueues failed; asking its tasks one by one', {
              pool,
              tasks: requests.length,
              error: String(err),
            });
            const ids = requests.map((r) => taskWorkflowId(r.taskId));
            for (const id of ids) told.delete(id);
            return await tell(ids, requeue);
          }
        }
      };
      /** The enqueue the task would send now; undefined when it cannot be read (it is then asked). */
      const readEnqueue = async (id: string): Promise<EnqueueRequest | null | undefined> => {
        try {
          const req = await client.workflow.getHandle(id).query(taskEnqueueRequestQuery);
          // Only the task's own (an answer is signed into a signal by this client: nothing else goes).
          return req === null || (req && taskWorkflowId(req.taskId) === id) ? req : undefined;
        } catch (err) {
          if (err instanceof WorkflowNotFoundError) throw err; // ended meanwhile
          return undefined; // a task from a build without the query, or one no worker answers now
        }
      };
      /** A task still waiting is asked to send its enqueue itself. */
      const askIfWaiting = async (id: string): Promise<void> => {
        if ((await readEnqueue(id)) !== null) await requeue(id);
      };
      const enqueueAgain = async (id: string): Promise<void> => {
        const req = await readEnqueue(id);
        if (req === undefined) return await requeue(id);
        if (req === null) return; // waits for nothing
        batch.push(req);
        batchBytes += JSON.stringify(req).length;
        if (batch.length >= RECOVERY_BATCH || batchBytes >= RECOVERY_BATCH_BYTES) await flush();
      };
      /**
       * Every batched task as the scheduler holds it (queued, or holding a device), or waiting for
       * nothing now (read from the task in a round the scheduler took no more: it ran meanwhile, or
       * ended); any other, still waiting once the scheduler has taken nothing for
       * RECOVERY_CONFIRM_IDLE_MS, is asked itself. A batch a worker from before took (it has no
       * handler for it, and drops it) loses no task.
       */
      const confirmBatched = async (): Promise<void> => {
        let missing = [...batched];
        let fewest = missing.length;
        let progressAt = Date.now();
        while (missing.length > 0 && Date.now() - progressAt < RECOVERY_CONFIRM_IDLE_MS) {
          await ctx.sleep(RECOVERY_CONFIRM_EVERY_MS);
          ctx.heartbeat();
          const view = await client.workflow
            .getHandle(schedulerWorkflowId(pool))
            .query(schedulerStateQuery)
            .catch((err: unknown) => {
              ctx.log.warn('pool recovery: could not read the scheduler to confirm its batches', { pool, error: String(err) });
              return undefined;
            });
          if (!view) continue;
          const known = new Set(view.queue.map((q) => taskWorkflowId(q.taskId)));
          for (const d of view.devices) if (d.reservedBy) known.add(taskWorkflowId(d.reservedBy.taskId));
          missing = missing.filter((id) => !known.has(id));
          if (missing.length < fewest) {
            fewest = missing.length;
            progressAt = Date.now();
          } else if (missing.length <= RECOVERY_CONFIRM_READ_MAX) {
            // The scheduler took no more this round: a task that waits for nothing now (it ran
            // meanwhile, or ended) is settled, and no idle wait is kept for it. Those still waiting
            // wait on (their batch may still be on its way).
            const waits = new Map<string, boolean>();
            await inLots(missing, async (id) => {
              const waiting = await readEnqueue(id).then(
                (req) => req !== null,
                (err: unknown) => !(err instanceof WorkflowNotFoundError),
              );
              waits.set(id, waiting);
            });
            missing = missing.filter((id) => waits.get(id));
            fewest = missing.length;
          }
        }
        // Tasks still not in the scheduler once it takes no more: asked themselves if they still wait.
        for (const id of missing) told.delete(id);
        await tell(missing, askIfWaiting);
      };
      const pass = async (): Promise<void> => {
        const tasks = await ids(`${FleetKind.name} = 'task' AND ${FleetPool.name} = ${p} AND ${running} AND ${taskQueues}`);
        const hosts = await ids(`${FleetKind.name} = 'host' AND ${running} AND ${control}`);
        await tell(hosts, (id) => client.workflow.getHandle(id).signal(republishHostSignal, { pool, reason }));
        await tell(tasks, enqueueAgain, askIfWaiting); // late, one by one: no batch is sent after them
        await flush();
      };
      await passOnLostReleases();
      await pass();
      // Visibility lags behind the workflows: a second look, after a margin, finds what the first
      // missed (a task started just before the old run ended). Whoever was told already is not told again.
      for (let waited = 0; waited < RECOVERY_SECOND_LOOK_MS; waited += 1_000) {
        await ctx.sleep(1_000);
        ctx.heartbeat();
      }
      await passOnLostReleases(); // the lost run itself, if visibility showed an older one (or none) at first
      await pass();
      await confirmBatched();
      await tellLate();
      const count = (prefix: string) => [...told].filter((id) => id.startsWith(prefix)).length;
      return { tasks: count(taskWorkflowId('')), hosts: count(hostWorkflowId('')), failed };
    },

    /**
     * Sends a batch of signals as client calls (each signed by the client's interceptor and codec,
     * as any control-plane signal). Returns the ones whose workflow is not there (closed or never
     * started), by index, as a command's failure would say. Any other error is retried here for the
     * failed signals only, then thrown (the local activity's retry then sends the batch again: a
     * device turns away a reservation it already had, and the other signals change nothing twice).
     */
    async sendSignals(batch: OutgoingSignal[]): Promise<Array<{ i: number; error: string }>> {
      const gone: Array<{ i: number; error: string }> = [];
      let pending = batch.map((s, i) => ({ s, i }));
      for (let round = 0; ; round++) {
        const failed: typeof pending = [];
        let last: unknown;
        await Promise.all(
          pending.map(async (p) => {
            try {
              await client.workflow.getHandle(p.s.workflowId).signal(p.s.signal, p.s.arg);
            } catch (err) {
              if (err instanceof WorkflowNotFoundError) gone.push({ i: p.i, error: String(err) });
              else {
                failed.push(p);
                last = err;
              }
            }
          }),
        );
        if (failed.length === 0) return gone;
        if (round >= 4) throw last;
        pending = failed;
        await new Promise((r) => setTimeout(r, 200 * 2 ** round));
      }
    },

    async syncHost(req: SyncHostRequest): Promise<void> {
      // Only host/<hostId> speaks for a host's devices: a look-alike host workflow (started by
      // anyone who may start workflows on the control queue) publishes nothing.
      const from = Context.current().info.workflowExecution?.workflowId;
      if (from !== hostWorkflowId(req.hostId)) {
        throw ApplicationFailure.nonRetryable(
          `devices of host ${req.hostId} published by ${from ?? 'no workflow'}, not by ${hostWorkflowId(req.hostId)}`,
        );
      }
      // Started, or, when one runs, told to serve this host: a device workflow of a host removed
      // and enrolled again may still be retiring (a lease held it at the removal) and would end
      // once free, leaving the device with no workflow to reserve it. Adopted, it keeps that lease
      // until released or past its deadline, then takes reservations again. Signal-with-start: a
      // run that ends meanwhile is replaced by a new one, never left unadopted.
      //
      // A device a pool found without a workflow (terminated, say) may still run a task: the pool
      // that sent the reservation knew it free, but a pool started anew knows no holds. Started
      // holding that task's lease (lostRun), it refuses other reservations until the task lets go.
      const restore = new Set(req.restoreDevices ?? []);
      await Promise.all(
        req.newDevices.map(async (deviceId) => {
          const lost = restore.has(deviceId) ? await lostRun(req.hostId, deviceId) : { unhandled: [] };
          const restored = lost.held;
          await client.workflow.signalWithStart<typeof deviceWorkflow, [{ by: string; at: number }]>('deviceWorkflow', {
            workflowId: deviceWorkflowId(req.hostId, deviceId),
            taskQueue: config.controlTaskQueue,
            args: [{ hostId: req.hostId, deviceId, historyLimit: config.historyLimit, ...(restored ? { restored } : {}) }],
            signal: adoptDeviceSignal,
            // The publish's version: the host workflow's clock, which is the server's, as is the
            // retirement's `at` (a control-plane machine's clock could be behind it).
            signalArgs: [{ by: req.hostId, at: req.version }],
            staticSummary: `reservations of device ${deviceId} on host ${req.hostId}`,
          });
          if (restored) await releaseIfLetGo(restored);
          // What the lost run never handled, to the new one: releases first (as it registers them).
          const order = (u: { signal: string }) => (u.signal === reserveDeviceSignal.name ? 1 : 0);
          for (const u of [...lost.unhandled].sort((a, b) => order(a) - order(b))) {
            await client.workflow.getHandle(deviceWorkflowId(req.hostId, deviceId)).signal(u.signal, u.arg);
          }
        }),
      );
      await Promise.all(
        req.pools.map((pool) =>
          client.workflow.signalWithStart<typeof schedulerWorkflow, [HostDevicesUpdate]>('schedulerWorkflow', {
            workflowId: schedulerWorkflowId(pool),
            taskQueue: config.controlTaskQueue,
            args: [schedulerInput(config, pool)],
            signal: hostDevicesSignal,
            signalArgs: [
              {
                hostId: req.hostId,
                online: req.online,
                drained: req.drained,
                drainedDevices: req.drainedDevices,
                devices: req.devices.filter((d) => d.pool === pool),
                version: req.version,
                keys: req.keys,
                lastSeenAt: req.lastSeenAt,
              },
            ],
          }),
        ),
      );
    },
  };
}

/** A device workflow running already gets the signals of the run before it that stopped at most this long before it started. */
const RESTORE_RESEND_WINDOW_MS = 10 * 60_000;
/** The pools' signals to a device that a device workflow started again gets, if its lost run had not handled them. */
const REDELIVERED_DEVICE_SIGNALS = [releaseDeviceSignal.name, expireHoldSignal.name, reserveDeviceSignal.name];
/** How many signals (or task queries) `recoverPool` has on their way at once. */
const RECOVERY_PARALLEL = 16;
/** How many waiting tasks' enqueues `recoverPool` sends to the scheduler in one signal, at most, and how many bytes. */
const RECOVERY_BATCH = 200;
const RECOVERY_BATCH_BYTES = 256 * 1024;
/** `recoverPool` checks the scheduler took its batches this often, until it takes no more for the second. */
const RECOVERY_CONFIRM_EVERY_MS = 5_000;
const RECOVERY_CONFIRM_IDLE_MS = 20_000;
/** At most this many batched tasks missing from the scheduler are read in a round it took no more (beyond it, only at the end). */
const RECOVERY_CONFIRM_READ_MAX = 1_000;
/** How long `recoverPool` waits before its second look (visibility lags behind the workflows). */
const RECOVERY_SECOND_LOOK_MS = 5_000;
/** How many more rounds `recoverPool` gives the signals that failed (2, 4, 8, 10, 10 s apart) before it starts over. */
const RECOVERY_LATE_ROUNDS = 5;

export type ControlPlaneActivities = ReturnType<typeof createControlPlaneActivities>;

/** One signal of a batch a workflow sends by a local activity (`sendSignals`). */
export interface OutgoingSignal {
  workflowId: string;
  signal: string;
  arg: unknown;
}
