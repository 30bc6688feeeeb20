/**
 * Assignment strategies, registered by name. Pure functions of (queue, free devices, now):
 * the scheduler workflow calls `getStrategy(name).assign(...)` and never branches on the name.
 */
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
}

export interface StrategyContext {
  now: number;
  agingMs: number;
}

export interface Pair {
  task: QueuedTask;
  device: PoolDevice;
}

export interface AssignmentStrategy {
  readonly name: string;
  readonly description: string;
  /** Pairs of (task, device); each device and each task appears at most once. */
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

/** Greedy: walk tasks in the given order, give each the first matching free device. */
function greedy(orderedTasks: readonly QueuedTask[], freeDevices: readonly PoolDevice[]): Pair[] {
  const free = [...freeDevices];
  const pairs: Pair[] = [];
  for (const task of orderedTasks) {
    if (free.length === 0) break;
    const i = free.findIndex((d) => matches(task.constraints, d));
    if (i >= 0) {
      pairs.push({ task, device: free[i] });
      free.splice(i, 1);
    }
  }
  return pairs;
}

export const byAge = (a: QueuedTask, b: QueuedTask): number =>
  a.submittedAt - b.submittedAt || (a.taskId < b.taskId ? -1 : a.taskId > b.taskId ? 1 : 0);

const fifoMatch: AssignmentStrategy = {
  name: 'fifo_match',
  description: 'oldest matching task first, first matching idle device',
  assign: (queue, freeDevices) => greedy([...queue].sort(byAge), freeDevices),
};

const priorityAging: AssignmentStrategy = {
  name: 'priority_aging',
  description: 'highest priority first; every agingMs of waiting adds one to priority, so nothing starves',
  assign(queue, freeDevices, { now, agingMs }) {
    const effective = (t: QueuedTask) => t.priority + Math.max(0, now - t.submittedAt) / Math.max(1, agingMs);
    const ordered = [...queue].sort((a, b) => effective(b) - effective(a) || byAge(a, b));
    return greedy(ordered, freeDevices);
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
