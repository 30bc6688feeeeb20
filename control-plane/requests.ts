/**
 * What makes two submissions "the same request" (a repeat of a task id must be one): shared by the
 * REST facade (409 otherwise) and `npm run submit` (exit 2 otherwise).
 */
import { definitionTag, INLINE_STEPS_TAG } from '../workflows/ids';
import { canonicalJson } from '../workflows/identity';
import type { TaskInput } from '../workflows/types';

export type TaskRequest = Pick<TaskInput, 'pool' | 'work' | 'constraints' | 'priority' | 'owner' | 'policy'>;

/**
 * The parts of a request, each as canonical JSON. `byName`: a definition compares by its name alone
 * (its steps were snapshotted from a store that may have changed since, or, for `npm run submit`,
 * are the host's). The tags a definition adds (definition:<name>, inline-steps) follow from the work,
 * not from the request: a task recorded before they existed, or with its definition since stored or
 * deleted, is still the same request.
 */
export function requestParts(t: TaskRequest, byName: boolean): Record<string, string> {
  const work = byName && t.work.kind === 'workflow' ? { kind: t.work.kind, definition: t.work.definition } : t.work;
  const derived = (tag: string) => tag === INLINE_STEPS_TAG || tag.startsWith(definitionTag(''));
  const parts = {
    pool: t.pool,
    work,
    constraints: { ...t.constraints, tags: t.constraints.tags.filter((tag) => !derived(tag)) },
    priority: t.priority,
    owner: t.owner ?? null,
    policy: t.policy,
  };
  return Object.fromEntries(Object.entries(parts).map(([k, v]) => [k, canonicalJson(v)]));
}

/** The parts in which the recorded task's request differs from this one; empty: the same request. */
export function requestDifferences(recorded: TaskRequest, request: TaskRequest, byName: boolean): string[] {
  const a = requestParts(recorded, byName);
  const b = requestParts(request, byName);
  return Object.keys(b).filter((k) => a[k] !== b[k]);
}
