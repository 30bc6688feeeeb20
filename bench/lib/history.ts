/**
 * Reads workflow histories (every run: continue-as-new chains are followed back to the first run)
 * and counts billed actions and history events, by workflow kind, by event type and by what caused
 * them: `task` (per-task work), `liveness` (host snapshots and what they trigger), `setup` (first
 * starts, enrolment, configuration) and `background` (periodic timers independent of tasks).
 */
import type { Client } from '@temporalio/client';
import { tsToMs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';
import { mapLimit } from './util';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;
const EventType = temporal.api.enums.v1.EventType;

/** The billed actions, as history events (heartbeats are not in history: counted from server metrics). */
export const BILLED = new Set([
  'WorkflowExecutionStarted',
  'WorkflowExecutionSignaled',
  'WorkflowExecutionUpdateAccepted',
  'ActivityTaskScheduled',
  'TimerStarted',
  'UpsertWorkflowSearchAttributes',
  'WorkflowPropertiesModified',
  'MarkerRecorded',
]);

/**
 * Whether one event is a billed action. A `patched()` version marker (`core_patch`) and the
 * `TemporalChangeVersion` upsert that comes with it are not: Temporal Cloud bills side-effect
 * markers, not versioning, and exempts that search attribute (its actions page).
 */
export function isBilled(e: HistoryEvent, type = eventTypeName(e)): boolean {
  if (!BILLED.has(type)) return false;
  if (type === 'MarkerRecorded') return e.markerRecordedEventAttributes?.markerName !== 'core_patch';
  if (type === 'UpsertWorkflowSearchAttributes') {
    // The SDK's own upsert of TemporalChangeVersion for patched() is exempt as well.
    const fields = Object.keys(e.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes?.indexedFields ?? {});
    return !fields.every((f) => f === 'TemporalChangeVersion');
  }
  return true;
}

export type Kind = 'task' | 'scheduler' | 'device' | 'host' | 'baseline';
export type Category = 'task' | 'liveness' | 'setup' | 'background';
export const CATEGORIES: Category[] = ['task', 'liveness', 'setup', 'background'];

export function eventTypeName(e: HistoryEvent): string {
  const raw = EventType[e.eventType ?? 0] ?? 'UNKNOWN';
  return raw
    .replace(/^EVENT_TYPE_/, '')
    .toLowerCase()
    .replace(/(^|_)([a-z])/g, (_m, _u, c: string) => c.toUpperCase());
}

export const eventMs = (e: HistoryEvent): number => tsToMs(e.eventTime);

export function kindOf(workflowId: string): Kind {
  const k = workflowId.split('/')[0];
  if (k === 'task' || k === 'scheduler' || k === 'device' || k === 'host') return k;
  return 'baseline';
}

export interface Run {
  workflowId: string;
  runId: string;
  events: HistoryEvent[];
  /** First run of the chain (not started by continue-as-new). */
  first: boolean;
}

/** Every run of a workflow, oldest first. */
export async function fetchRuns(client: Client, workflowId: string, maxRuns = 1_000): Promise<Run[]> {
  const runs: Run[] = [];
  let runId: string | undefined;
  for (let i = 0; i < maxRuns; i++) {
    const handle = client.workflow.getHandle(workflowId, runId);
    const history = await handle.fetchHistory();
    const events = history.events ?? [];
    const started = events[0]?.workflowExecutionStartedEventAttributes;
    const prev = started?.continuedExecutionRunId || undefined;
    runs.unshift({ workflowId, runId: runId ?? '(latest)', events, first: !prev });
    if (!prev) break;
    runId = prev;
  }
  return runs;
}

/** What caused one billed or unbilled event (see the module comment). */
function categorize(kind: Kind, run: Run): Category[] {
  const cats: Category[] = new Array(run.events.length);
  const byId = new Map<number, Category>();
  let lastTrigger: Category = run.first ? 'setup' : kind === 'host' ? 'liveness' : 'task';
  let firstSync = run.first;
  const ref = (id: unknown): Category | undefined => byId.get(Number(id ?? -1));
  run.events.forEach((e, i) => {
    const type = eventTypeName(e);
    let c: Category;
    if (kind === 'task' || kind === 'baseline') c = 'task';
    else {
      const restart: Category = run.first ? 'setup' : kind === 'host' ? 'liveness' : 'task';
      switch (type) {
        case 'WorkflowExecutionStarted':
        case 'UpsertWorkflowSearchAttributes':
          c = restart;
          break;
        case 'WorkflowExecutionSignaled': {
          const name = e.workflowExecutionSignaledEventAttributes?.signalName ?? '';
          if (name === 'hostDevices' || name === 'setHostDrain' || name === 'setDeviceDrain') c = 'liveness';
          // adoptDevice comes with a device workflow's signal-with-start, once per enrolment.
          else if (name === 'registerHostKeys' || name === 'setSchedulerConfig' || name === 'adoptDevice') c = 'setup';
          else c = kind === 'host' ? 'liveness' : 'task';
          break;
        }
        case 'WorkflowExecutionUpdateAccepted': {
          const name = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name ?? '';
          c = name === 'configureScheduler' ? 'setup' : name === 'hostSnapshot' ? 'liveness' : 'task';
          break;
        }
        case 'WorkflowExecutionUpdateCompleted':
          c = ref(e.workflowExecutionUpdateCompletedEventAttributes?.acceptedEventId) ?? lastTrigger;
          break;
        case 'TimerStarted':
          c = kind === 'scheduler' ? 'background' : kind === 'host' ? 'liveness' : 'task';
          break;
        case 'TimerFired':
          c = ref(e.timerFiredEventAttributes?.startedEventId) ?? lastTrigger;
          break;
        case 'TimerCanceled':
          c = ref(e.timerCanceledEventAttributes?.startedEventId) ?? lastTrigger;
          break;
        case 'ActivityTaskScheduled':
          c = kind === 'host' ? (firstSync ? 'setup' : 'liveness') : 'task';
          firstSync = false;
          break;
        case 'ActivityTaskStarted':
          c = ref(e.activityTaskStartedEventAttributes?.scheduledEventId) ?? lastTrigger;
          break;
        case 'ActivityTaskCompleted':
          c = ref(e.activityTaskCompletedEventAttributes?.scheduledEventId) ?? lastTrigger;
          break;
        case 'ActivityTaskFailed':
          c = ref(e.activityTaskFailedEventAttributes?.scheduledEventId) ?? lastTrigger;
          break;
        case 'ActivityTaskTimedOut':
          c = ref(e.activityTaskTimedOutEventAttributes?.scheduledEventId) ?? lastTrigger;
          break;
        case 'SignalExternalWorkflowExecutionInitiated':
          c = 'task';
          break;
        case 'ExternalWorkflowExecutionSignaled':
          c = ref(e.externalWorkflowExecutionSignaledEventAttributes?.initiatedEventId) ?? 'task';
          break;
        case 'SignalExternalWorkflowExecutionFailed':
          c = ref(e.signalExternalWorkflowExecutionFailedEventAttributes?.initiatedEventId) ?? 'task';
          break;
        case 'WorkflowTaskScheduled':
          c = lastTrigger;
          break;
        case 'WorkflowTaskStarted':
          c = ref(e.workflowTaskStartedEventAttributes?.scheduledEventId) ?? lastTrigger;
          break;
        case 'WorkflowTaskCompleted':
          c = ref(e.workflowTaskCompletedEventAttributes?.scheduledEventId) ?? lastTrigger;
          break;
        case 'WorkflowTaskFailed':
          c = ref(e.workflowTaskFailedEventAttributes?.scheduledEventId) ?? lastTrigger;
          break;
        case 'WorkflowTaskTimedOut':
          c = ref(e.workflowTaskTimedOutEventAttributes?.scheduledEventId) ?? lastTrigger;
          break;
        case 'WorkflowExecutionContinuedAsNew':
          c = kind === 'host' ? 'liveness' : 'task';
          break;
        default:
          c = lastTrigger;
      }
    }
    cats[i] = c;
    byId.set(Number(e.eventId ?? i + 1), c);
    if (!type.startsWith('WorkflowTask')) lastTrigger = c;
  });
  return cats;
}

export interface CostTally {
  /** billed[kind][category][eventType] */
  billed: Record<string, Record<string, Record<string, number>>>;
  /** events[kind][category] (every history event) */
  events: Record<string, Record<string, number>>;
  /** Signals received, by kind and signal name (category task only). */
  signals: Record<string, Record<string, number>>;
  workflows: Record<string, number>;
  runs: Record<string, number>;
  /** Longest single run, by kind. */
  maxRunEvents: Record<string, number>;
  /** First and last event time of the host histories (for liveness per host-minute). */
  hostWindow?: { fromMs: number; toMs: number; hosts: number };
}

export function emptyTally(): CostTally {
  return { billed: {}, events: {}, signals: {}, workflows: {}, runs: {}, maxRunEvents: {} };
}

const inc = (o: Record<string, number>, k: string, n = 1): void => {
  o[k] = (o[k] ?? 0) + n;
};

export function addRuns(t: CostTally, workflowId: string, runs: Run[]): void {
  const kind = kindOf(workflowId);
  inc(t.workflows, kind);
  inc(t.runs, kind, runs.length);
  for (const run of runs) {
    t.maxRunEvents[kind] = Math.max(t.maxRunEvents[kind] ?? 0, run.events.length);
    const cats = categorize(kind, run);
    run.events.forEach((e, i) => {
      const type = eventTypeName(e);
      const cat = cats[i];
      t.events[kind] ??= {};
      inc(t.events[kind], cat);
      if (isBilled(e, type)) {
        t.billed[kind] ??= {};
        t.billed[kind][cat] ??= {};
        inc(t.billed[kind][cat], type);
      }
      if (type === 'WorkflowExecutionSignaled' && cat === 'task') {
        t.signals[kind] ??= {};
        inc(t.signals[kind], e.workflowExecutionSignaledEventAttributes?.signalName ?? '?');
      }
    });
    if (kind === 'host' && run.events.length > 0) {
      const from = eventMs(run.events[0]);
      const to = eventMs(run.events[run.events.length - 1]);
      t.hostWindow ??= { fromMs: from, toMs: to, hosts: 0 };
      t.hostWindow.fromMs = Math.min(t.hostWindow.fromMs, from);
      t.hostWindow.toMs = Math.max(t.hostWindow.toMs, to);
    }
  }
  if (kind === 'host' && t.hostWindow) t.hostWindow.hosts++;
}

/** Fetches every run of every workflow and tallies them. */
export async function tallyWorkflows(client: Client, workflowIds: string[], concurrency = 16): Promise<CostTally> {
  const t = emptyTally();
  await mapLimit(workflowIds, concurrency, async (id) => addRuns(t, id, await fetchRuns(client, id)));
  return t;
}

export function sumBilled(t: CostTally, category: Category, kind?: string): number {
  let n = 0;
  for (const [k, cats] of Object.entries(t.billed)) {
    if (kind && k !== kind) continue;
    for (const v of Object.values(cats[category] ?? {})) n += v;
  }
  return n;
}

export function sumEvents(t: CostTally, category: Category, kind?: string): number {
  let n = 0;
  for (const [k, cats] of Object.entries(t.events)) if (!kind || k === kind) n += cats[category] ?? 0;
  return n;
}

/** billed[category] by event type, summed over kinds. */
export function billedByType(t: CostTally, category: Category): Record<string, number> {
  const out: Record<string, number> = {};
  for (const cats of Object.values(t.billed))
    for (const [type, v] of Object.entries(cats[category] ?? {})) inc(out, type, v);
  return out;
}

/** Workflow-task timings of one history: scheduled->started (queue wait) and started->completed (worker time). */
export function workflowTaskTimings(
  events: HistoryEvent[],
  fromMs = 0,
  toMs = Infinity,
): { waitMs: number[]; workMs: number[] } {
  const scheduledAt = new Map<number, number>();
  const startedAt = new Map<number, number>();
  const waitMs: number[] = [];
  const workMs: number[] = [];
  for (const e of events) {
    const type = eventTypeName(e);
    const at = eventMs(e);
    if (type === 'WorkflowTaskScheduled') scheduledAt.set(Number(e.eventId), at);
    else if (type === 'WorkflowTaskStarted') {
      const s = scheduledAt.get(Number(e.workflowTaskStartedEventAttributes?.scheduledEventId));
      startedAt.set(Number(e.eventId), at);
      if (s !== undefined && at >= fromMs && at <= toMs) waitMs.push(at - s);
    } else if (type === 'WorkflowTaskCompleted') {
      const s = startedAt.get(Number(e.workflowTaskCompletedEventAttributes?.startedEventId));
      if (s !== undefined && s >= fromMs && s <= toMs) workMs.push(at - s);
    }
  }
  return { waitMs, workMs };
}

/**
 * A task-like workflow's workflow tasks on the dispatch path, from its history: the first (after the
 * start) and the one that took the signal `signalName` (fleet: `assignment`; the shape: its go
 * signal), each as [waiting for a poller, on the worker] in ms; NaN where the history has none.
 */
export function pathWorkflowTasks(
  events: HistoryEvent[],
  signalName?: string,
): { first: [number, number]; signalled: [number, number]; signalledAt: number } {
  const after = (fromMs: number): [number, number] => {
    const idx = events.findIndex((x) => eventTypeName(x) === 'WorkflowTaskScheduled' && eventMs(x) >= fromMs);
    if (idx < 0) return [NaN, NaN];
    const next = (type: string) => events.slice(idx).find((x) => eventTypeName(x) === type);
    const st = next('WorkflowTaskStarted');
    const done = next('WorkflowTaskCompleted');
    return st && done ? [eventMs(st) - eventMs(events[idx]), eventMs(done) - eventMs(st)] : [NaN, NaN];
  };
  const startedEv = events.find((x) => eventTypeName(x) === 'WorkflowExecutionStarted');
  const signalledEv =
    signalName === undefined
      ? undefined
      : events.find(
          (x) =>
            eventTypeName(x) === 'WorkflowExecutionSignaled' &&
            x.workflowExecutionSignaledEventAttributes?.signalName === signalName,
        );
  const signalledAt = signalledEv ? eventMs(signalledEv) : NaN;
  return {
    first: startedEv ? after(eventMs(startedEv)) : [NaN, NaN],
    signalled: signalledEv ? after(signalledAt) : [NaN, NaN],
    signalledAt,
  };
}

/** Work times (ms) of the workflow tasks of `events` that ran at some point between `from` and `to`. */
export function overlappingTasks(events: HistoryEvent[], from: number, to: number): number[] {
  const startedAt = new Map<number, number>();
  const out: number[] = [];
  for (const e of events) {
    const type = eventTypeName(e);
    if (type === 'WorkflowTaskStarted') startedAt.set(Number(e.eventId), eventMs(e));
    else if (type === 'WorkflowTaskCompleted' || type === 'WorkflowTaskFailed') {
      const id = e.workflowTaskCompletedEventAttributes?.startedEventId ?? e.workflowTaskFailedEventAttributes?.startedEventId;
      const s = startedAt.get(Number(id));
      const end = eventMs(e);
      if (s !== undefined && s <= to && end >= from) out.push(end - s);
    }
  }
  return out;
}

/** Closing workflow tasks the server bounced because a signal arrived while they ran (UnhandledCommand). */
export function closeBounces(events: HistoryEvent[]): number {
  const unhandled = temporal.api.enums.v1.WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND;
  return events.filter((e) => e.workflowTaskFailedEventAttributes?.cause === unhandled).length;
}

/**
 * What each roll-over of a long-lived workflow cost the pool, from consecutive runs: the gap between
 * the last `signalName` signal (or batch of signals) a run sent and the first the next run sent (under a saturated queue,
 * time the pool assigned nothing), and how many signals each run left undelivered at its close.
 */
export function rollOverGaps(runs: Array<{ events: HistoryEvent[] }>, signalName: string) {
  // A batch sent by a local activity (the scheduler's, since session 18) counts as a send too.
  const sent = (events: HistoryEvent[]) =>
    events
      .filter(
        (e) =>
          e.signalExternalWorkflowExecutionInitiatedEventAttributes?.signalName === signalName ||
          e.markerRecordedEventAttributes?.markerName === 'core_local_activity',
      )
      .map(eventMs);
  const gapsMs: number[] = [];
  for (let i = 0; i + 1 < runs.length; i++) {
    const last = sent(runs[i].events).at(-1);
    const first = sent(runs[i + 1].events)[0];
    if (last !== undefined && first !== undefined) gapsMs.push(first - last);
  }
  const undelivered = runs.slice(0, -1).map(({ events }) => {
    const open = new Set<number>();
    for (const e of events) {
      if (e.signalExternalWorkflowExecutionInitiatedEventAttributes) open.add(Number(e.eventId));
      const done =
        e.externalWorkflowExecutionSignaledEventAttributes?.initiatedEventId ??
        e.signalExternalWorkflowExecutionFailedEventAttributes?.initiatedEventId;
      if (done != null) open.delete(Number(done));
    }
    return open.size;
  });
  return { gapsMs, undelivered };
}
