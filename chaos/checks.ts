/**
 * The invariants of architecture.md, checked from workflow histories (what was recorded), not from
 * the code's own bookkeeping.
 */
import type { Client } from '@temporalio/client';
import {
  decodeFirst,
  deviceReservationIntervals,
  findOverlaps,
  findRunOverlaps,
  runHistories,
  taskAttemptRuns,
} from '../control-plane/audit';
import { deviceWorkflowId, taskWorkflowId } from '../workflows/ids';
import { deviceStateQuery } from '../workflows/messages';
import type { AttemptReport, HostAssignment, Sealed, TaskView } from '../workflows/types';

export interface Violation {
  kind: string;
  detail: string;
}

/**
 * Reports that took effect (update completed successfully) though, at the point in history where
 * they were accepted, their attempt was not the open one (closed by Temporal: lease expired, done).
 */
export async function supersededReportsAccepted(client: Client, taskId: string): Promise<Violation[]> {
  const out: Violation[] = [];
  for (const run of await runHistories(client, taskWorkflowId(taskId))) {
    const open = new Map<number, { leaseId: string; attempt: number }>();
    const suspicious = new Map<string, string>();
    for (const e of run.events) {
      const id = Number(e.eventId);
      const s = e.activityTaskScheduledEventAttributes;
      if (s && s.activityType?.name === 'runAssignment') {
        const a = (await decodeFirst<Sealed<HostAssignment>>(client, s.input?.payloads))?.body;
        if (a) open.set(id, { leaseId: a.leaseId, attempt: a.attempt });
        continue;
      }
      const closed =
        e.activityTaskCompletedEventAttributes ??
        e.activityTaskFailedEventAttributes ??
        e.activityTaskTimedOutEventAttributes ??
        e.activityTaskCanceledEventAttributes;
      if (closed?.scheduledEventId != null) {
        open.delete(Number(closed.scheduledEventId));
        continue;
      }
      const accepted = e.workflowExecutionUpdateAcceptedEventAttributes;
      if (accepted?.acceptedRequest?.input?.name === 'reportAttempt') {
        const r = await decodeFirst<AttemptReport>(client, accepted.acceptedRequest.input.args?.payloads);
        const current = [...open.values()].pop();
        if (!r || !current || current.leaseId !== r.leaseId || current.attempt !== r.attempt) {
          const detail = `${taskId}: ${r?.kind} for attempt ${r?.attempt} lease ${r?.leaseId}`;
          suspicious.set(accepted.acceptedRequest.meta?.updateId ?? '', detail);
        }
        continue;
      }
      const completed = e.workflowExecutionUpdateCompletedEventAttributes;
      const updateId = completed?.meta?.updateId ?? '';
      if (completed && suspicious.has(updateId) && completed.outcome?.success) {
        out.push({ kind: 'superseded report accepted', detail: suspicious.get(updateId)! });
      }
    }
  }
  return out;
}

export async function overlappingReservations(
  client: Client,
  devices: Array<{ hostId: string; deviceId: string }>,
): Promise<{ violations: Violation[]; reservations: number }> {
  const violations: Violation[] = [];
  let reservations = 0;
  for (const d of devices) {
    const intervals = await deviceReservationIntervals(client, d.hostId, d.deviceId);
    reservations += intervals.length;
    for (const [a, b] of findOverlaps(intervals)) {
      violations.push({
        kind: 'overlapping reservations',
        detail: `${d.hostId}/${d.deviceId}: ${a.leaseId} and ${b.leaseId}`,
      });
    }
  }
  return { violations, reservations };
}

/** Host runs of one device (the tasks' `runAssignment` executions, as the server recorded them) that overlap. */
export async function overlappingRuns(client: Client, taskIds: string[]): Promise<Violation[]> {
  const runs = (await Promise.all(taskIds.map((id) => taskAttemptRuns(client, id)))).flat();
  return findRunOverlaps(runs).map(([a, b]) => ({
    kind: 'overlapping host runs',
    detail: `${a.deviceKey}: ${a.taskId} attempt ${a.attempt} and ${b.taskId} attempt ${b.attempt}`,
  }));
}

/** A device still held by a lease whose task has ended. */
export async function devicesLeftReserved(
  client: Client,
  devices: Array<{ hostId: string; deviceId: string }>,
): Promise<Violation[]> {
  const out: Violation[] = [];
  for (const d of devices) {
    let view;
    try {
      const handle = client.workflow.getHandle(deviceWorkflowId(d.hostId, d.deviceId));
      // Terminated and not needed since (the pool's next reservation has its host start it again):
      // what the terminated run held is no one's now. (A run that failed holding a lease is reported.)
      if ((await handle.describe()).status.name === 'TERMINATED') continue;
      view = await handle.query(deviceStateQuery);
    } catch {
      continue; // never reserved: no workflow
    }
    if (!view.current) continue;
    const task = await client.workflow.getHandle(taskWorkflowId(view.current.taskId)).describe();
    if (task.status.name !== 'RUNNING') {
      out.push({
        kind: 'device left reserved',
        detail: `${d.hostId}/${d.deviceId} held by ended task ${view.current.taskId}`,
      });
    }
  }
  return out;
}

export function attemptsOverMax(views: TaskView[]): Violation[] {
  return views
    .filter((v) => v.attempts.length > v.policy.maxAttempts)
    .map((v) => ({
      kind: 'attempts above maxAttempts',
      detail: `${v.taskId}: ${v.attempts.length} > ${v.policy.maxAttempts}`,
    }));
}
