/** Reads of the fleet's entity workflows through their queries; IDs only from workflows/ids.ts. */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { hostWorkflowId, schedulerWorkflowId } from '../../workflows/ids';
import { hostStateQuery, schedulerStateQuery, type HostView, type SchedulerView } from '../../workflows/messages';
import { FleetHostId, FleetKind, FleetPool } from '../../workflows/search-attributes';

const notFound = (err: unknown): boolean =>
  err instanceof WorkflowNotFoundError || (err as Error)?.name === 'WorkflowNotFoundError';

/** The pool's scheduler state; undefined when the pool has no scheduler. */
export async function schedulerState(client: Client, pool: string): Promise<SchedulerView | undefined> {
  try {
    return await client.workflow.getHandle(schedulerWorkflowId(pool)).query(schedulerStateQuery);
  } catch (err) {
    if (notFound(err)) return undefined;
    throw err;
  }
}

/** The host workflow's state; undefined when there is no such host workflow. */
export async function hostState(client: Client, hostId: string): Promise<HostView | undefined> {
  try {
    return await client.workflow.getHandle(hostWorkflowId(hostId)).query(hostStateQuery);
  } catch (err) {
    if (notFound(err)) return undefined;
    throw err;
  }
}

/** True when the host workflow exists and runs (a closed one takes no signals). */
export async function hostRunning(client: Client, hostId: string): Promise<boolean> {
  try {
    const d = await client.workflow.getHandle(hostWorkflowId(hostId)).describe();
    return d.status.name === 'RUNNING';
  } catch (err) {
    if (notFound(err)) return false;
    throw err;
  }
}

/** Host ids of the running host workflows (visibility: FleetKind = 'host'), optionally of one pool. */
export async function listHostIds(client: Client, pool?: string): Promise<string[]> {
  const clauses = [`${FleetKind.name} = 'host'`, `ExecutionStatus = 'Running'`];
  if (pool) clauses.push(`${FleetPool.name} = "${pool.replace(/["\\]/g, '')}"`);
  const ids = new Set<string>();
  for await (const wf of client.workflow.list({ query: clauses.join(' AND ') })) {
    const hostId = wf.typedSearchAttributes.get(FleetHostId);
    if (hostId) ids.add(hostId);
  }
  return [...ids];
}
