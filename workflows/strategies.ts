/**
 * Assignment strategies, registered by name. Pure functions of (queue, free devices, now):
 * the scheduler workflow calls `getStrategy(name).assign(...)` and never branches on the name.
 */
import { deviceKey } from './ids';
import type { PoolDevice, TaskConstraints } from './types';

export interface QueuedTask {
  taskId: string;
  constraints: TaskConstraints;
  priority: number;
  submittedAt: number;
  /** When this attempt entered the queue. */
  enqueuedAt: number;
  attempt: number;
  holdMs: number;
  /** Devices (`deviceKey`) where earlier attempts of this task failed: another one first (see `greedy`). */
  avoid?: string[];
}

/**
 * Queue entries as carried across continue-as-new: rows of plain values, constraints deduplicated.
 * About 90 bytes a task instead of about 200 as objects, so a full queue (10,000 by default) stays
 * far below Temporal's 2 MiB payload limit on the continue-as-new input.
 */
export interface PackedQueue {
  constraints: TaskConstraints[];
  /** [taskId, constraints index, priority, submittedAt, enqueuedAt, attempt, holdMs, avoid?] */
  rows: Array<
    | [string, number, number, number, number, number, number]
    | [string, number, number, number, number, number, number, string[]]
  >;
}

export function packQueue(queue: readonly QueuedTask[]): PackedQueue {
  const index = new Map<string, number>();
  const constraints: TaskConstraints[] = [];
  const rows = queue.map((t): PackedQueue['rows'][number] => {
    const key = constraintKey(t.constraints);
    let i = index.get(key);
    if (i === undefined) {
      i = constraints.push(t.constraints) - 1;
      index.set(key, i);
    }
    return t.avoid?.length
      ? [t.taskId, i, t.priority, t.submittedAt, t.enqueuedAt, t.attempt, t.holdMs, t.avoid]
      : [t.taskId, i, t.priority, t.submittedAt, t.enqueuedAt, t.attempt, t.holdMs];
  });
  return { constraints, rows };
}

export function unpackQueue(p: PackedQueue): QueuedTask[] {
  return p.rows.map(([taskId, i, priority, submittedAt, enqueuedAt, attempt, holdMs, avoid]) => ({
    taskId,
    constraints: p.constraints[i],
    priority,
    submittedAt,
    enqueuedAt,
    attempt,
    holdMs,
    ...(avoid?.length ? { avoid } : {}),
  }));
}

export interface StrategyContext {
  now: number;
  agingMs: number;
  /**
   * Whether a device of the pool other than the ones `task.avoid` names could serve the task, now
   * or once it is free (online, healthy, not drained). Without it, `avoid` is ignored.
   */
  servableElsewhere?: (task: QueuedTask) => boolean;
}

export interface Pair {
  task: QueuedTask;
  device: PoolDevice;
}

export interface AssignmentStrategy {
  readonly name: string;
  readonly description: string;
  /**
   * Pairs of (task, device); each device and each task appears at most once. `queue` comes oldest
   * first (ordered by `byAge`): the scheduler keeps it so, inserting in place.
   */
  assign(queue: readonly QueuedTask[], freeDevices: readonly PoolDevice[], ctx: StrategyContext): Pair[];
}

export function matches(constraints: TaskConstraints, device: PoolDevice): boolean {
  if (constraints.driverType !== undefined && constraints.driverType !== device.driverType) return false;
  if (constraints.hostId !== undefined && constraints.hostId !== device.hostId) return false;
  if (constraints.deviceId !== undefined && constraints.deviceId !== device.deviceId) return false;
  for (const tag of constraints.tags) {
    if (!device.tags.includes(tag)) return false;
  }
  return true;
}

/** One string per distinct set of constraints (equal constraints, equal key). */
function constraintKey(c: TaskConstraints): string {
  return JSON.stringify([c.driverType, c.tags, c.hostId, c.deviceId]);
}

const isPlainConstraints = (c: TaskConstraints): boolean =>
  [c.driverType, c.hostId, c.deviceId].every((v) => v === undefined || typeof v === 'string') &&
  Array.isArray(c.tags) &&
  c.tags.every((t) => typeof t === 'string');

/**
 * Hands out one shared object per distinct set of constraints, so greedy's skip (below) covers
 * every queued task with the same constraints. Only constraints made of strings are shared: the
 * key cannot tell a `null` from a missing field (a task started around the client's validation
 * could carry one), and such constraints keep their own object. It holds one entry per distinct
 * set it was given.
 */
export function constraintInterner(): (c: TaskConstraints) => TaskConstraints {
  const byKey = new Map<string, TaskConstraints>();
  return (c) => {
    if (!isPlainConstraints(c)) return c;
    const key = constraintKey(c);
    const have = byKey.get(key);
    if (have) return have;
    byKey.set(key, c);
    return c;
  };
}

/**
 * Greedy: walk tasks in the given order, give each the first matching free device.
 *
 * Constraints objects that matched none of the free devices are remembered for the rest of the
 * round (the free set only shrinks in it), so a long queue of tasks that nothing free can serve
 * costs one set lookup per task instead of a walk over every free device per task. The scheduler
 * interns its queue's constraints (equal constraints share one object), so that is one walk per
 * distinct set of constraints. Measured by `npm run bench -- --scenario P5` (the strategy rows
 * with 100 idle devices of another kind).
 *
 * A retry that names devices to avoid (its earlier attempts failed there) gets a free matching
 * device outside them; failing that, one of them only if no other device of the pool could serve it
 * (`servableElsewhere`): otherwise it waits for one, so a broken device does not take every retry
 * of the task that found it broken. Such tasks never enter the unmatched cache (their own list
 * decides, not their constraints alone).
 */
function greedy(
  orderedTasks: readonly QueuedTask[],
  freeDevices: readonly PoolDevice[],
  servableElsewhere?: (task: QueuedTask) => boolean,
): Pair[] {
  const free = [...freeDevices];
  const pairs: Pair[] = [];
  const unmatched = new Set<TaskConstraints>();
  for (const task of orderedTasks) {
    if (free.length === 0) break;
    if (unmatched.has(task.constraints)) continue;
    const avoid = servableElsewhere && task.avoid?.length ? task.avoid : undefined;
    let i: number;
    if (avoid && servableElsewhere) {
      i = -1;
      let avoided = -1;
      for (let j = 0; j < free.length && i < 0; j++) {
        const d = free[j];
        if (!matches(task.constraints, d)) continue;
        if (!avoid.includes(deviceKey(d.hostId, d.deviceId))) i = j;
        else if (avoided < 0) avoided = j;
      }
      if (i < 0 && avoided >= 0 && !servableElsewhere(task)) i = avoided;
      if (i < 0) continue;
    } else {
      i = free.findIndex((d) => matches(task.constraints, d));
    }
    if (i >= 0) {
      pairs.push({ task, device: free[i] });
      free.splice(i, 1);
    } else {
      unmatched.add(task.constraints);
    }
  }
  return pairs;
}

export const byAge = (a: QueuedTask, b: QueuedTask): number =>
  a.submittedAt - b.submittedAt || (a.taskId < b.taskId ? -1 : a.taskId > b.taskId ? 1 : 0);

const fifoMatch: AssignmentStrategy = {
  name: 'fifo_match',
  description: 'oldest matching task first, first matching idle device',
  // The queue is already oldest first: no copy, no sort, and the walk stops once every free device
  // is given, so a round costs O(assigned x free) when tasks match, not O(queue log queue).
  assign: (queue, freeDevices, ctx) => greedy(queue, freeDevices, ctx.servableElsewhere),
};

const priorityAging: AssignmentStrategy = {
  name: 'priority_aging',
  description: 'highest priority first; every agingMs of waiting adds one to priority, so nothing starves',
  assign(queue, freeDevices, { now, agingMs, servableElsewhere }) {
    const effective = (t: QueuedTask) => t.priority + Math.max(0, now - t.submittedAt) / Math.max(1, agingMs);
    const ordered = [...queue].sort((a, b) => effective(b) - effective(a) || byAge(a, b));
    return greedy(ordered, freeDevices, servableElsewhere);
  },
};

const registry = new Map<string, AssignmentStrategy>();

export function registerStrategy(strategy: AssignmentStrategy): void {
  registry.set(strategy.name, strategy);
}

export function hasStrategy(name: string): boolean {
  return registry.has(name);
}

export function strategyNames(): string[] {
  return [...registry.keys()].sort();
}

export function getStrategy(name: string): AssignmentStrategy {
  const s = registry.get(name);
  if (!s) {
    throw new Error(`unknown assignment strategy "${name}"; registered: ${strategyNames().join(', ')}`);
  }
  return s;
}

registerStrategy(fifoMatch);
registerStrategy(priorityAging);
