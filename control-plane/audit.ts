/**
 * Invariant checks that read workflow histories, never queries: what the device and task workflows
 * actually did (the commands they recorded), not what they say about themselves.
 *
 * - Device reservations: a reservation begins at the device workflow's `assignment` signal to the task
 *   and ends at its `deviceReleased` signal to a scheduler with the same leaseId, or at a release of
 *   that lease the device received (a pool passing on the task's release, on its own or riding on the
 *   next `reserveDevice`): the device applies a release exactly when it names the lease it holds, and
 *   does not echo a passed-on release back to the pool. Two reservations of one device must never
 *   overlap, in time or in event order.
 * - Host activity executions (`runAssignment`) of one device must never overlap either.
 */
import { AssertionError } from 'node:assert';
import { WorkflowNotFoundError, type Client, type WorkflowHandle } from '@temporalio/client';
import { open, SEALED_ENCODING } from './sealing';
import { recordsPatch, signalTagFor } from './signal-auth';
import type { temporal } from '@temporalio/proto';
import { SIGNAL_AUTH_PATCH, SIGNAL_NAMES_PATCH } from '../workflows/authenticity';
import type { Payload } from '@temporalio/common';
import type { DeviceInput } from '../workflows/device';
import { deviceKey, deviceWorkflowId, taskWorkflowId } from '../workflows/ids';
import type { DeviceReleased } from '../workflows/messages';
import type { Assignment, HostAssignment, ReleaseNote, ReservationRequest, Sealed } from '../workflows/types';

type History = Awaited<ReturnType<WorkflowHandle['fetchHistory']>>;
type HistoryEvent = NonNullable<History['events']>[number];
type Timestamp = HistoryEvent['eventTime'];
type LongLike = number | { toNumber(): number } | null | undefined;

export interface ReservationInterval {
  leaseId: string;
  taskId: string;
  attempt: number;
  /** Epoch ms of the `assignment` signal command (or the carried reservation's reservedAt, see below). */
  begin: number;
  /** Epoch ms of the matching `deviceReleased` signal command or received release; undefined while the device still holds the lease. */
  end?: number;
  endReason?: string;
  /** The run whose history holds the begin. */
  runId: string;
  /** The run whose history holds the end (differs from runId when the lease crossed a continue-as-new). */
  endRunId?: string;
  /** `hostId/deviceId`; findOverlaps only compares intervals with the same key (absent = all one device). */
  deviceKey?: string;
  /**
   * Position of the begin / end in the device's history across all runs (runs by start time, events by
   * eventId). Timestamps tie within a workflow task; these do not. Used by findOverlaps when every interval has them.
   */
  beginSeq?: number;
  endSeq?: number;
  /** True when the begin was not seen as an `assignment` event but taken from a continue-as-new input (carried.current). */
  carried?: boolean;
}

export interface TaskAttemptRun {
  taskId: string;
  runId: string;
  scheduledEventId: number;
  attempt: number;
  leaseId: string;
  hostId: string;
  deviceId: string;
  deviceKey: string;
  scheduledAt: number;
  /**
   * Epoch ms of ActivityTaskStarted. The server writes that event only when the activity closes (it has a
   * retry policy), with the real start time: an activity still running has no startedAt here.
   */
  startedAt?: number;
  closedAt?: number;
  closeKind?: 'completed' | 'failed' | 'timedOut' | 'canceled';
}

export interface RunLike {
  deviceKey: string;
  taskId: string;
  startedAt?: number;
  closedAt?: number;
}

// ---------------------------------------------------------------------------------------------------------------
// History access
// ---------------------------------------------------------------------------------------------------------------

interface RunHistory {
  runId: string;
  startTime: number;
  /** The run this one continued from (continue-as-new), if any. */
  previousRunId?: string;
  events: HistoryEvent[];
}

const num = (v: LongLike): number => (v == null ? 0 : typeof v === 'number' ? v : v.toNumber());

function tsMs(ts: Timestamp): number {
  if (!ts) return 0;
  return num(ts.seconds) * 1000 + Math.floor((ts.nanos ?? 0) / 1_000_000);
}

/**
 * Box keys of hosts whose payloads the auditor may open (tests, chaos runs), so the checker can open task payloads sealed to them (as the host
 * itself would); the control plane cannot.
 */
const testHostBoxKeys = new Map<string, string>();
export function registerHostBoxKey(hostId: string, boxKey: string): void {
  testHostBoxKeys.set(hostId, boxKey);
}

/** Decodes the first payload (opening it when sealed to a host whose box key is registered). */
export async function decodeFirst<T>(client: Client, payloads: Payload[] | null | undefined): Promise<T | undefined> {
  let first = payloads?.[0];
  if (!first) return undefined;
  if (Buffer.from(first.metadata?.encoding ?? []).toString() === SEALED_ENCODING) {
    const hostId = Buffer.from(first.metadata?.['fleet-sealed-for'] ?? []).toString();
    const key = testHostBoxKeys.get(hostId);
    if (!key) throw new Error(`payload sealed for host ${hostId}, whose key the checker does not know`);
    first = open(first, key);
  }
  const converter = client.options.loadedDataConverter;
  let decoded: Payload[] = [first];
  // Codecs encode in order, so decode in reverse.
  for (const codec of [...converter.payloadCodecs].reverse()) decoded = await codec.decode(decoded);
  return converter.payloadConverter.fromPayload<T>(decoded[0]);
}

/**
 * Every run of a workflow ID, oldest first. Runs come from visibility (`list`) and, because visibility
 * lags, also from the continue-as-new chain walked back from the latest run.
 */
export async function runHistories(client: Client, workflowId: string): Promise<RunHistory[]> {
  const pending: string[] = [];
  for await (const ex of client.workflow.list({ query: `WorkflowId = "${workflowId}"` })) pending.push(ex.runId);
  try {
    pending.push((await client.workflow.getHandle(workflowId).describe()).runId);
  } catch (err) {
    if (!(err instanceof WorkflowNotFoundError)) throw err;
  }
  const runs = new Map<string, RunHistory>();
  while (pending.length > 0) {
    const runId = pending.pop()!;
    if (runs.has(runId)) continue;
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    const events = [...(history.events ?? [])].sort((a, b) => num(a.eventId) - num(b.eventId));
    const started = events[0]?.workflowExecutionStartedEventAttributes;
    const previousRunId = started?.continuedExecutionRunId || undefined;
    runs.set(runId, { runId, startTime: tsMs(events[0]?.eventTime), previousRunId, events });
    if (previousRunId) pending.push(previousRunId);
  }
  return [...runs.values()].sort(
    (a, b) =>
      a.startTime - b.startTime ||
      (b.previousRunId === a.runId ? -1 : a.previousRunId === b.runId ? 1 : a.runId.localeCompare(b.runId)),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Device reservations
// ---------------------------------------------------------------------------------------------------------------

export async function deviceReservationIntervals(
  client: Client,
  hostId: string,
  deviceId: string,
): Promise<ReservationInterval[]> {
  const key = deviceKey(hostId, deviceId);
  const runs = await runHistories(client, deviceWorkflowId(hostId, deviceId));
  const intervals: ReservationInterval[] = [];
  /** Open intervals by leaseId; they survive run boundaries (continue-as-new carries the reservation). */
  const open = new Map<string, ReservationInterval[]>();
  const openOf = (leaseId: string): ReservationInterval[] => open.get(leaseId) ?? [];
  const begin = (iv: ReservationInterval): void => {
    intervals.push(iv);
    open.set(iv.leaseId, [...openOf(iv.leaseId), iv]);
  };
  let seq = 0;
  /** Leases still held when a run stopped without continuing as new, by run (and when, where it stopped). */
  const lostWith = new Map<string, { leaseIds: string[]; stoppedAt: number; seq: number }>();

  const where = { namespace: client.options.namespace, workflowId: deviceWorkflowId(hostId, deviceId) };
  for (const run of runs) {
    const refusingFrom = refusalStart(run.events);
    const refusingUnnamedFrom = refusalStart(run.events, SIGNAL_NAMES_PATCH);
    for (const [i, event] of run.events.entries()) {
      seq++;
      const at = tsMs(event.eventTime);
      const started = event.workflowExecutionStartedEventAttributes;
      if (started) {
        // A reservation carried over a continue-as-new whose begin we never saw (e.g. an older run is gone).
        // Or a lease a running task held when this device workflow was started again after it was
        // lost (`restored`): the interval from the lost run goes on here.
        const input = await decodeFirst<DeviceInput>(client, started.input?.payloads);
        const cur = input?.carried ? input.carried.current : input?.restored;
        if (cur && openOf(cur.leaseId).length === 0) {
          begin({
            leaseId: cur.leaseId,
            taskId: cur.taskId,
            attempt: cur.attempt,
            begin: cur.reservedAt,
            runId: run.runId,
            deviceKey: key,
            beginSeq: seq,
            carried: true,
          });
        }
        continue;
      }
      const end = (leaseId: string, reason: string): void => {
        for (const iv of openOf(leaseId)) {
          iv.end = at;
          iv.endReason = reason;
          iv.endRunId = run.runId;
          iv.endSeq = seq;
        }
        open.delete(leaseId);
      };
      let received = event.workflowExecutionSignaledEventAttributes;
      // A signal the device refused (workflows/authenticity.ts, fromControlPlane) did nothing.
      if (received) {
        const codecs = client.options.loadedDataConverter.payloadCodecs;
        const tag = await signalTagFor(codecs, where, received.signalName ?? '', received.input?.payloads);
        const taken =
          tag === 'taken' || (tag === 'unnamed' && i < refusingUnnamedFrom) || (tag === 'untagged' && i < refusingFrom);
        if (!taken) received = undefined;
      }
      if (received?.signalName === 'releaseDevice') {
        const r = await decodeFirst<ReleaseNote>(client, received.input?.payloads);
        if (r) end(r.leaseId, r.reason);
        continue;
      }
      if (received?.signalName === 'reserveDevice') {
        const r = (await decodeFirst<ReservationRequest>(client, received.input?.payloads))?.release;
        if (r) end(r.leaseId, r.reason);
        continue;
      }
      const attrs = event.signalExternalWorkflowExecutionInitiatedEventAttributes;
      if (!attrs) continue;
      if (attrs.signalName === 'assignment') {
        const a = await decodeFirst<Assignment>(client, attrs.input?.payloads);
        if (!a) continue;
        begin({
          leaseId: a.leaseId,
          taskId: a.taskId,
          attempt: a.attempt,
          begin: at,
          runId: run.runId,
          deviceKey: key,
          beginSeq: seq,
        });
      } else if (attrs.signalName === 'deviceReleased') {
        const r = await decodeFirst<DeviceReleased>(client, attrs.input?.payloads);
        if (r) end(r.leaseId, r.reason);
      }
    }
    // A run that stopped (terminated, say) rather than continuing as new: a lease it still held
    // was not carried on. The device was held for that task until the task let go of the lease
    // (its pool offers the device to no one else before), or until a later run took the lease
    // over (`restored`, above). Unless a later run takes it, it ends when the task let go.
    if (stoppedRun(run.events)) {
      const stoppedAt = tsMs(run.events[run.events.length - 1].eventTime);
      lostWith.set(run.runId, { leaseIds: [...open.keys()], stoppedAt, seq });
    }
  }
  for (const [runId, lost] of lostWith) {
    for (const leaseId of lost.leaseIds) {
      for (const iv of openOf(leaseId)) {
        const letGo = await leaseLetGo(client, iv.taskId, leaseId);
        if (letGo === undefined) continue; // the task still holds it
        iv.endRunId = runId;
        if (letGo === 'unheard') {
          // Its task never took the assignment: the lease ended with the run that granted it.
          iv.end = lost.stoppedAt;
          iv.endSeq = lost.seq;
          iv.endReason = 'its device workflow was lost before the task took it';
        } else {
          iv.end = letGo;
          iv.endSeq = undefined;
          iv.endReason = 'task let go (its device workflow was lost)';
        }
      }
    }
  }
  return intervals;
}

/** The run ended without continuing as new: terminated, failed or timed out. */
function stoppedRun(events: HistoryEvent[]): boolean {
  const last = events[events.length - 1];
  return !!(
    last?.workflowExecutionTerminatedEventAttributes ||
    last?.workflowExecutionFailedEventAttributes ||
    last?.workflowExecutionTimedOutEventAttributes
  );
}

/**
 * When the task let go of a lease: its release of it (`taskReleased` to its pool, or
 * `releaseDevice` to the device), else the end of the run that took its assignment; `unheard` when
 * no run of the task took that assignment (the device workflow was lost before it arrived), and
 * undefined while the task still runs holding it.
 */
async function leaseLetGo(client: Client, taskId: string, leaseId: string): Promise<number | 'unheard' | undefined> {
  let heard = false;
  for (const run of await runHistories(client, taskWorkflowId(taskId))) {
    let took = false;
    for (const event of run.events) {
      const received = event.workflowExecutionSignaledEventAttributes;
      if (received?.signalName === 'assignment') {
        const a = await decodeFirst<{ leaseId?: string }>(client, received.input?.payloads).catch(() => undefined);
        if (a?.leaseId === leaseId) took = heard = true;
        continue;
      }
      const attrs = event.signalExternalWorkflowExecutionInitiatedEventAttributes;
      if (attrs && (attrs.signalName === 'taskReleased' || attrs.signalName === 'releaseDevice')) {
        const r = await decodeFirst<{ leaseId?: string }>(client, attrs.input?.payloads).catch(() => undefined);
        if (r?.leaseId === leaseId) return tsMs(event.eventTime);
      }
    }
    const last = run.events[run.events.length - 1];
    if (took && last && closes(last)) return tsMs(last.eventTime);
  }
  return heard ? undefined : 'unheard';
}

const closes = (e: HistoryEvent): boolean =>
  !!(
    e.workflowExecutionCompletedEventAttributes ||
    e.workflowExecutionFailedEventAttributes ||
    e.workflowExecutionTimedOutEventAttributes ||
    e.workflowExecutionTerminatedEventAttributes ||
    e.workflowExecutionCanceledEventAttributes
  );

/**
 * The index from which a run refuses untagged signals (or, with `SIGNAL_NAMES_PATCH`, tags without
 * a name): the signals delivered with the workflow task that recorded the patch's marker, and all
 * after it. A run without the marker refused none (it met no such signal since it could refuse; or
 * it predates refusing).
 */
export function refusalStart(
  events: temporal.api.history.v1.IHistoryEvent[],
  patchId: string = SIGNAL_AUTH_PATCH,
): number {
  const marker = events.findIndex((e) => recordsPatch(e, patchId));
  if (marker < 0) return Number.POSITIVE_INFINITY;
  // The marker follows its workflow task's completion; that task took what came after the one before.
  let completed = marker;
  while (completed > 0 && !events[completed].workflowTaskCompletedEventAttributes) completed--;
  let previous = completed - 1;
  while (previous > 0 && !events[previous].workflowTaskCompletedEventAttributes) previous--;
  return previous + 1;
}

const endOf = (iv: ReservationInterval): number => iv.end ?? Number.POSITIVE_INFINITY;

function groupBy<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const g = groups.get(k);
    if (g) g.push(item);
    else groups.set(k, [item]);
  }
  return groups;
}

/**
 * Pairs [earlier, later] of reservations of the same device that overlap:
 * - in time: [begin, end) intersect (no end = still held = +infinity), or
 * - in event order (when every interval has beginSeq; an interval ended without endSeq is compared in time
 *   only): a lease begins while another has not ended yet. This catches overlaps hidden by equal timestamps.
 */
export function findOverlaps(intervals: ReservationInterval[]): Array<[ReservationInterval, ReservationInterval]> {
  const pairs: Array<[ReservationInterval, ReservationInterval]> = [];
  for (const group of groupBy(intervals, (iv) => iv.deviceKey ?? '').values()) {
    const bySeq = group.every((iv) => iv.beginSeq !== undefined);
    const sorted = [...group].sort((a, b) => (bySeq ? a.beginSeq! - b.beginSeq! : 0) || a.begin - b.begin);
    for (let i = 0; i < sorted.length; i++) {
      for (let j = i + 1; j < sorted.length; j++) {
        const a = sorted[i];
        const b = sorted[j];
        const inTime = a.begin < endOf(b) && b.begin < endOf(a);
        // An end outside the device's history (no endSeq: its task let go while the device
        // workflow was lost) is compared in time only.
        const inOrder = bySeq && (a.end === undefined || (a.endSeq !== undefined && a.endSeq > b.beginSeq!));
        if (inTime || inOrder) pairs.push([a, b]);
      }
    }
  }
  return pairs;
}

function describeInterval(iv: ReservationInterval): string {
  const end = iv.end === undefined ? 'still held' : `${new Date(iv.end).toISOString()} (${iv.endReason ?? '?'})`;
  return (
    `lease ${iv.leaseId} (task ${iv.taskId} attempt ${iv.attempt}, run ${iv.runId}${iv.carried ? ', carried' : ''}) ` +
    `${new Date(iv.begin).toISOString()} -> ${end}`
  );
}

export async function assertNoOverlappingReservations(
  client: Client,
  devices: Array<{ hostId: string; deviceId: string }>,
): Promise<{ devices: number; reservations: number }> {
  const violations: string[] = [];
  let reservations = 0;
  for (const { hostId, deviceId } of devices) {
    const intervals = await deviceReservationIntervals(client, hostId, deviceId);
    reservations += intervals.length;
    for (const [a, b] of findOverlaps(intervals)) {
      violations.push(`device ${deviceKey(hostId, deviceId)}: ${describeInterval(a)} overlaps ${describeInterval(b)}`);
    }
  }
  if (violations.length > 0) {
    throw new AssertionError({
      message: `${violations.length} overlapping device reservation(s):\n  ${violations.join('\n  ')}`,
    });
  }
  return { devices: devices.length, reservations };
}

// ---------------------------------------------------------------------------------------------------------------
// Host activity executions
// ---------------------------------------------------------------------------------------------------------------

/** Every `runAssignment` activity the task scheduled, in history order, with how (and whether) it closed. */
export async function taskAttemptRuns(client: Client, taskId: string): Promise<TaskAttemptRun[]> {
  const out: TaskAttemptRun[] = [];
  for (const run of await runHistories(client, taskWorkflowId(taskId))) {
    const byScheduledId = new Map<number, TaskAttemptRun>();
    for (const event of run.events) {
      const at = tsMs(event.eventTime);
      const scheduled = event.activityTaskScheduledEventAttributes;
      if (scheduled) {
        if (scheduled.activityType?.name !== 'runAssignment') continue;
        const a = (await decodeFirst<Sealed<HostAssignment>>(client, scheduled.input?.payloads))?.body;
        if (!a) continue;
        const r: TaskAttemptRun = {
          taskId: a.taskId,
          runId: run.runId,
          scheduledEventId: num(event.eventId),
          attempt: a.attempt,
          leaseId: a.leaseId,
          hostId: a.hostId,
          deviceId: a.deviceId,
          deviceKey: deviceKey(a.hostId, a.deviceId),
          scheduledAt: at,
        };
        byScheduledId.set(r.scheduledEventId, r);
        out.push(r);
        continue;
      }
      const startedId = event.activityTaskStartedEventAttributes?.scheduledEventId;
      if (startedId != null) {
        const r = byScheduledId.get(num(startedId));
        if (r) r.startedAt = at;
        continue;
      }
      const closes: Array<[TaskAttemptRun['closeKind'], LongLike]> = [
        ['completed', event.activityTaskCompletedEventAttributes?.scheduledEventId],
        ['failed', event.activityTaskFailedEventAttributes?.scheduledEventId],
        ['timedOut', event.activityTaskTimedOutEventAttributes?.scheduledEventId],
        ['canceled', event.activityTaskCanceledEventAttributes?.scheduledEventId],
      ];
      for (const [kind, id] of closes) {
        if (id == null) continue;
        const r = byScheduledId.get(num(id));
        if (r) {
          r.closedAt = at;
          r.closeKind = kind;
        }
      }
    }
  }
  return out;
}

/**
 * Pairs [earlier, later] of activity executions on the same device whose [startedAt, closedAt) overlap
 * (not closed = +infinity). Executions that never started are ignored.
 */
export function findRunOverlaps<T extends RunLike>(runs: T[]): Array<[T, T]> {
  const pairs: Array<[T, T]> = [];
  const started = runs.filter((r) => r.startedAt !== undefined);
  for (const group of groupBy(started, (r) => r.deviceKey).values()) {
    const sorted = [...group].sort((a, b) => a.startedAt! - b.startedAt!);
    for (let i = 0; i < sorted.length; i++) {
      for (let j = i + 1; j < sorted.length; j++) {
        const a = sorted[i];
        const b = sorted[j];
        const aEnd = a.closedAt ?? Number.POSITIVE_INFINITY;
        const bEnd = b.closedAt ?? Number.POSITIVE_INFINITY;
        if (a.startedAt! < bEnd && b.startedAt! < aEnd) pairs.push([a, b]);
      }
    }
  }
  return pairs;
}
