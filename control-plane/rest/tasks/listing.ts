/**
 * Task listing through Temporal visibility (the search attributes the Web UI filters on), paged
 * with Temporal's own page tokens wrapped in an opaque cursor. The owner is not a search
 * attribute: it is read from the task's start input (the first history event, no worker needed)
 * and cached per run, since a task's owner never changes.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import type { temporal, google } from '@temporalio/proto';
import {
  FleetAttempt,
  FleetDeviceId,
  FleetHostId,
  FleetKind,
  FleetPool,
  FleetStatus,
  visibilityString,
} from '../../../workflows/search-attributes';
import { taskWorkflowId } from '../../../workflows/ids';
import type { TaskStatus } from '../../../workflows/types';
import { readTaskInput } from '../../client';
import { SupersededRuns } from '../../superseded';
import { invalid, isTemporalUnreachable } from '../problem';
import { iso } from '../schemas';
import type { TaskList, TaskSummary } from './schemas';

type Payload = temporal.api.common.v1.IPayload;
type RawExecution = temporal.api.workflow.v1.IWorkflowExecutionInfo;

export interface TaskListFilter {
  status?: TaskStatus;
  owner?: string;
  hostId?: string;
  deviceId?: string;
  pool?: string;
}

interface Cursor {
  v: 1;
  /** Which filter the cursor belongs to. */
  f: string;
  /** Temporal's page token of the page to read next; absent: the first page. */
  t?: string;
  /**
   * Rows of that page to skip: always 0 in the cursors this version writes (a listing stops only at
   * the end of a page); older ones counted the rows of a page they had already returned.
   */
  s: number;
  /** The first request's limit. */
  p: number;
}

const GRPC_INVALID_ARGUMENT = 3;

/** With an owner filter, a request reads at most this many visibility pages before it returns. */
const MAX_PAGES_PER_REQUEST = 10;

const msOf = (t: google.protobuf.ITimestamp | null | undefined): number | undefined => {
  if (!t?.seconds && !t?.nanos) return undefined;
  const s = t.seconds ?? 0;
  return (typeof s === 'number' ? s : s.toNumber()) * 1000 + Math.floor((t.nanos ?? 0) / 1e6);
};

function searchAttribute(raw: RawExecution, name: string): unknown {
  const p = raw.searchAttributes?.indexedFields?.[name];
  if (!p) return undefined;
  const v: unknown = defaultPayloadConverter.fromPayload(p as Payload & { metadata: Record<string, Uint8Array> });
  return Array.isArray(v) ? v[0] : v;
}

export function visibilityQuery(f: TaskListFilter): string {
  const clauses = [`${FleetKind.name} = 'task'`];
  if (f.status) clauses.push(`${FleetStatus.name} = ${visibilityString(f.status)}`);
  if (f.pool) clauses.push(`${FleetPool.name} = ${visibilityString(f.pool)}`);
  if (f.hostId) clauses.push(`${FleetHostId.name} = ${visibilityString(f.hostId)}`);
  if (f.deviceId) clauses.push(`${FleetDeviceId.name} = ${visibilityString(f.deviceId)}`);
  return clauses.join(' AND ');
}

interface TaskIdentity {
  taskId: string;
  owner?: string;
}

export class TaskLister {
  private readonly identities = new Map<string, TaskIdentity>();
  /** A rejected run whose id was submitted again is not listed (the newer run is). */
  private readonly superseded: SupersededRuns;

  /**
   * @param cursorKey signs cursors, so a forged page token never reaches Temporal. Replicas behind
   * one load balancer share it; the default (random per process) invalidates cursors on restart.
   */
  constructor(
    private readonly client: Client,
    private readonly cursorKey: Buffer = randomBytes(32),
    private readonly maxCached = 20_000,
  ) {
    this.superseded = new SupersededRuns(client);
  }

  async list(filter: TaskListFilter, limit: number, cursorText?: string): Promise<TaskList> {
    const query = visibilityQuery(filter);
    const filterKey = createHash('sha256')
      .update(JSON.stringify([query, filter.owner ?? null]))
      .digest('base64url')
      .slice(0, 16);
    const cursor = cursorText
      ? decodeCursor(cursorText, filterKey, this.cursorKey)
      : { v: 1 as const, f: filterKey, s: 0, p: limit };
    const namespace = this.client.options.namespace;
    const items: TaskSummary[] = [];
    let token = cursor.t;
    let skip = cursor.s;
    // Each page asks for as many rows as the listing still needs, so it stops at the end of a page
    // and the next one starts from Temporal's page token. (Temporal's tokens name the last row's
    // key, not an offset: a cursor that counted the rows already returned from a page it re-reads
    // would skip one whenever an earlier row of that page closed or left the filter meanwhile.)
    for (let pages = 0; pages < MAX_PAGES_PER_REQUEST; pages++) {
      const resp = await this.client.workflowService
        .listWorkflowExecutions({
          namespace,
          query,
          pageSize: skip > 0 ? cursor.p : limit - items.length,
          nextPageToken: token ? Buffer.from(token, 'base64url') : undefined,
        })
        .catch((err: unknown) => {
          // A forged or stale page token: the client's mistake, not ours.
          if (token && (err as { code?: number }).code === GRPC_INVALID_ARGUMENT) {
            throw invalid([{ in: 'query', path: 'cursor', message: 'the cursor is no longer valid' }]);
          }
          throw err;
        });
      const executions = resp.executions ?? [];
      const summaries = await mapLimited(executions.slice(skip), 16, (e) => this.summarize(e));
      for (let i = 0; i < summaries.length; i++) {
        const s = summaries[i];
        if (filter.owner !== undefined && s.owner !== filter.owner) continue;
        const run = executions[skip + i].execution;
        if (s.status === 'rejected' && (await this.superseded.superseded(run?.workflowId ?? '', run?.runId ?? '')))
          continue;
        items.push(s);
        if (items.length === limit) {
          const used = skip + i + 1;
          if (used < executions.length)
            return { items, nextCursor: encodeCursor(this.cursorKey, { ...cursor, t: token, s: used }) };
          const next = resp.nextPageToken?.length ? Buffer.from(resp.nextPageToken).toString('base64url') : undefined;
          return { items, ...(next ? { nextCursor: encodeCursor(this.cursorKey, { ...cursor, t: next, s: 0 }) } : {}) };
        }
      }
      if (!resp.nextPageToken?.length) return { items };
      token = Buffer.from(resp.nextPageToken).toString('base64url');
      skip = 0;
    }
    return { items, nextCursor: encodeCursor(this.cursorKey, { ...cursor, t: token, s: 0 }) };
  }

  private async summarize(e: RawExecution): Promise<TaskSummary> {
    const id = await this.identity(e.execution?.workflowId ?? '', e.execution?.runId ?? '');
    const attempts = searchAttribute(e, FleetAttempt.name);
    return {
      taskId: id.taskId,
      owner: id.owner,
      status: (searchAttribute(e, FleetStatus.name) as TaskStatus | undefined) ?? 'queued',
      pool: searchAttribute(e, FleetPool.name) as string | undefined,
      hostId: searchAttribute(e, FleetHostId.name) as string | undefined,
      deviceId: searchAttribute(e, FleetDeviceId.name) as string | undefined,
      attempts: typeof attempts === 'number' ? attempts : undefined,
      submittedAt: iso(msOf(e.startTime)) ?? new Date(0).toISOString(),
      closedAt: iso(msOf(e.closeTime)),
    };
  }

  /** The task id and owner from the workflow's start input; immutable, so cached per run. */
  private async identity(workflowId: string, runId: string): Promise<TaskIdentity> {
    const cached = this.identities.get(runId);
    if (cached) return cached;
    let id: TaskIdentity;
    try {
      id = await this.readIdentity(workflowId, runId);
    } catch (err) {
      if (isTemporalUnreachable(err)) throw err;
      // An unreadable input (a foreign codec, a hand-started workflow): list it without an owner, uncached.
      const prefix = taskWorkflowId('');
      return { taskId: workflowId.startsWith(prefix) ? workflowId.slice(prefix.length) : workflowId };
    }
    if (this.identities.size >= this.maxCached) {
      const oldest = this.identities.keys().next();
      if (!oldest.done) this.identities.delete(oldest.value);
    }
    this.identities.set(runId, id);
    return id;
  }

  private async readIdentity(workflowId: string, runId: string): Promise<TaskIdentity> {
    const input = await readTaskInput(this.client, workflowId, runId);
    return { taskId: input.taskId, owner: input.owner };
  }
}

const mac = (key: Buffer, body: string): Buffer => createHmac('sha256', key).update(body).digest().subarray(0, 16);

/** `<base64url JSON>.<base64url MAC>` */
function encodeCursor(key: Buffer, c: Cursor): string {
  const body = Buffer.from(JSON.stringify(c)).toString('base64url');
  return `${body}.${mac(key, body).toString('base64url')}`;
}

function decodeCursor(text: string, filterKey: string, key: Buffer): Cursor {
  let c: Partial<Cursor> | undefined;
  const [body, sig, extra] = text.split('.');
  const given = Buffer.from(sig ?? '', 'base64url');
  const expected = body ? mac(key, body) : Buffer.alloc(0);
  if (extra === undefined && body && given.length === expected.length && timingSafeEqual(given, expected)) {
    try {
      c = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as Partial<Cursor>;
    } catch {
      c = undefined;
    }
  }
  const ok =
    c?.v === 1 &&
    typeof c.f === 'string' &&
    Number.isInteger(c.s) &&
    c.s! >= 0 &&
    Number.isInteger(c.p) &&
    c.p! >= 1 &&
    c.p! <= 1000 &&
    (c.t === undefined || typeof c.t === 'string');
  if (!ok) throw invalid([{ in: 'query', path: 'cursor', message: 'not a cursor returned by this API' }]);
  if (c!.f !== filterKey) {
    throw invalid([{ in: 'query', path: 'cursor', message: 'the cursor belongs to a listing with other filters' }]);
  }
  return c as Cursor;
}

async function mapLimited<T, R>(xs: readonly T[], limit: number, fn: (x: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(xs.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < xs.length) {
      const i = next++;
      out[i] = await fn(xs[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, xs.length) }, worker));
  return out;
}
