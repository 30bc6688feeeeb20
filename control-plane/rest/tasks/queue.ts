/**
 * Where a queued task stands in its pool's queue and why it waits, from the scheduler's own view
 * (schedulerStateQuery): backoff before the next attempt, no idle matching device, or older tasks
 * that take the matching devices first.
 */
import { deviceKey } from '../../../workflows/ids';
import type { SchedulerView } from '../../../workflows/messages';
import { matches } from '../../../workflows/strategies';
import type { TaskConstraints, TaskView } from '../../../workflows/types';
import { iso } from '../schemas';
import type { QueueInfo } from './schemas';

type QueuedEntry = SchedulerView['queue'][number];
type SchedulerDevice = SchedulerView['devices'][number];

export function describeConstraints(c: TaskConstraints): string {
  const parts = [`driverType=${c.driverType ?? 'any'}`, `tags=[${c.tags.join(',')}]`];
  if (c.hostId) parts.push(`hostId=${c.hostId}`);
  if (c.deviceId) parts.push(`deviceId=${c.deviceId}`);
  return parts.join(' ');
}

/**
 * The order the pool's strategy serves the queue in. The scheduler keeps the queue oldest first
 * (fifo_match's order); priority_aging ranks by priority plus one per agingMs waited. A strategy
 * registered later without a case here is shown in queue (age) order.
 */
export function servingOrder(s: SchedulerView, now: number): QueuedEntry[] {
  if (s.config.strategy !== 'priority_aging') return s.queue;
  const effective = (t: QueuedEntry) => t.priority + Math.max(0, now - t.submittedAt) / Math.max(1, s.config.agingMs);
  return s.queue
    .map((t, i) => ({ t, i, e: effective(t) }))
    .sort((a, b) => b.e - a.e || a.i - b.i)
    .map((x) => x.t);
}

/** Why a device the task could use is not taking it: undefined when it is assignable now. */
export function unavailableBecause(d: SchedulerDevice): string | undefined {
  if (d.reservedBy) return 'reserved';
  if (!d.hostOnline) return 'host offline';
  if (d.hostSuspectSince !== undefined)
    return 'host presumed lost (an attempt on it lost its lease); waiting for its next snapshot';
  if (d.hostDrained) return 'host drained';
  if (d.deviceDrained) return 'drained';
  if (d.health !== 'good') return d.health;
  if (d.state === 'offline') return 'offline';
  return undefined;
}

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;

export function explainWait(task: TaskView, s: SchedulerView | undefined, now: number): QueueInfo {
  const base = { length: s?.queue.length ?? 0, ahead: 0 };
  if (task.nextAttemptAt !== undefined && task.nextAttemptAt > now) {
    const last = task.attempts[task.attempts.length - 1];
    return {
      ...base,
      waitingFor: 'backoff',
      nextAttemptAt: iso(task.nextAttemptAt),
      reason:
        `next attempt at ${iso(task.nextAttemptAt)} (attempt ${task.attempts.length + 1} of ${task.policy.maxAttempts}` +
        `${last?.reason ? `; the last one ended: ${last.reason}` : ''})`,
    };
  }
  if (!s) return { ...base, waitingFor: 'unknown', reason: `the scheduler of pool ${task.pool} did not answer` };
  const order = servingOrder(s, now);
  const index = order.findIndex((q) => q.taskId === task.taskId);
  if (index < 0) {
    // Admitted but not in the queue: a device was free at once and is being reserved for it.
    const awaitingAdmission =
      task.admitted === undefined
        ? task.attempts.length === 0 && !s.queue.length && task.status === 'queued' // a task from before `admitted`
        : !task.admitted;
    return awaitingAdmission
      ? { ...base, waitingFor: 'admission', reason: 'waiting for the pool to admit the task' }
      : { ...base, waitingFor: 'assignment', reason: 'not in the queue right now: a device is being reserved for it' };
  }
  const mine = s.devices.filter((d) => matches(task.constraints, d));
  const idle = mine.filter((d) => unavailableBecause(d) === undefined);
  const competing = order.slice(0, index).filter((q) => mine.some((d) => matches(q.constraints, d))).length;
  const where = {
    ...base,
    position: index + 1,
    ahead: competing,
    matchingDevices: { total: mine.length, idle: idle.length },
  };
  const behind = `waiting behind ${plural(competing, s.config.strategy === 'priority_aging' ? 'higher-ranked task' : 'older task')}`;
  if (idle.length === 0) {
    const counts = new Map<string, number>();
    for (const d of mine) {
      const why = unavailableBecause(d) ?? 'idle';
      counts.set(why, (counts.get(why) ?? 0) + 1);
    }
    const detail =
      mine.length === 0
        ? `no device in pool ${task.pool} matches at all`
        : `${plural(mine.length, 'matching device')}: ${[...counts].map(([k, n]) => `${n} ${k}`).join(', ')}`;
    return {
      ...where,
      waitingFor: 'device',
      reason: `no idle device matches ${describeConstraints(task.constraints)} (${detail})${competing > 0 ? `; ${behind}` : ''}`,
    };
  }
  // A retry waits for a device other than the ones its earlier attempts failed on (the scheduler's rule).
  const avoid = order[index].avoid ?? [];
  const avoided = (d: SchedulerDevice) => avoid.includes(deviceKey(d.hostId, d.deviceId));
  if (avoid.length > 0 && idle.every(avoided)) {
    const elsewhere = mine.filter(
      (d) => !avoided(d) && (unavailableBecause(d) === undefined || unavailableBecause(d) === 'reserved'),
    );
    if (elsewhere.length > 0) {
      return {
        ...where,
        waitingFor: 'device',
        reason:
          `waiting for a matching device other than the ${plural(avoid.length, 'device')} its earlier attempts failed on` +
          ` (${avoid.join(', ')}): ${plural(elsewhere.length, 'other matching device')}, all reserved` +
          `${competing > 0 ? `; ${behind}` : ''}`,
      };
    }
  }
  if (competing > 0) return { ...where, waitingFor: 'older_tasks', reason: behind };
  return { ...where, waitingFor: 'assignment', reason: 'an idle device matches: it is being assigned' };
}
