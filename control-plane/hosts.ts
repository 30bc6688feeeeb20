/**
 * Host enrolment, an operator action: registers a host's public keys with its host workflow
 * (creating it if needed). The host's secret never leaves the host's credential file.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { hostWorkflow } from '../workflows/host';
import { hostWorkflowId } from '../workflows/ids';
import { sameKeys, type HostPublicKeys } from '../workflows/identity';
import { hostStateQuery, registerHostKeysSignal } from '../workflows/messages';
import type { ControlPlaneConfig } from './config';

export interface Enrollment {
  hostId: string;
  pool: string;
  keys: HostPublicKeys;
  /** Overrides the configured host timeout for this host. */
  hostTimeoutMs?: number;
  /** Overrides the configured snapshot timeout for this host. */
  snapshotTimeoutMs?: number;
}

/** How long enrolment waits for the host workflow to say which keys it has. */
const ENROLL_QUERY_MS = 5_000;

/** The host is enrolled with other keys, and the caller did not ask to rotate them. */
export class HostKeysConflictError extends Error {
  override name = 'HostKeysConflictError';
  constructor(public readonly hostId: string) {
    super(
      `host ${hostId} is enrolled with other keys; replacing them cuts its running process off (offline until it restarts with the new credential): pass --rotate (REST: "rotate": true)`,
    );
  }
}

/** The host workflow is ending because the host was removed: enrol again once it has ended. */
export class HostBeingRemovedError extends Error {
  override name = 'HostBeingRemovedError';
  constructor(public readonly hostId: string) {
    super(`host ${hostId} is being removed; enrol it again once that has finished (a few seconds)`);
  }
}

/**
 * Enrols the host's public keys, starting its host workflow if needed. The same keys again change
 * nothing; other keys for an enrolled host need `rotate` (HostKeysConflictError otherwise), and the
 * host is then offline until it reports with the new ones.
 */
export async function enrollHost(
  client: Client,
  config: ControlPlaneConfig,
  e: Enrollment & { rotate?: boolean },
): Promise<{ created: boolean; rotated: boolean }> {
  const handle = client.workflow.getHandle(hostWorkflowId(e.hostId));
  let running = false;
  try {
    running = (await handle.describe()).status.name === 'RUNNING';
  } catch (err) {
    if (!(err instanceof WorkflowNotFoundError)) throw err;
  }
  // The enrolled keys, to refuse an unasked rotation with a clear error. Asking needs the control
  // plane's worker: when it does not answer (not started yet, as in `npm start`), the host
  // workflow itself ignores other keys sent without `rotate`.
  let enrolled: HostPublicKeys | undefined;
  if (running) {
    const view = await client
      .withDeadline(Date.now() + ENROLL_QUERY_MS, () => handle.query(hostStateQuery))
      .catch(() => undefined);
    if (view?.retired) throw new HostBeingRemovedError(e.hostId);
    enrolled = view?.keys;
  }
  const rotated = enrolled ? !sameKeys(enrolled, e.keys) : running && !!e.rotate;
  if (enrolled && rotated && !e.rotate) throw new HostKeysConflictError(e.hostId);
  await client.workflow.signalWithStart<typeof hostWorkflow, [{ keys: HostPublicKeys; rotate?: boolean }]>(
    'hostWorkflow',
    {
      workflowId: hostWorkflowId(e.hostId),
      taskQueue: config.controlTaskQueue,
      args: [
        {
          hostId: e.hostId,
          pool: e.pool,
          hostTimeoutMs: e.hostTimeoutMs ?? config.hostTimeoutMs,
          snapshotTimeoutMs: e.snapshotTimeoutMs ?? config.snapshotTimeoutMs,
          keys: e.keys,
          historyLimit: config.historyLimit,
        },
      ],
      signal: registerHostKeysSignal,
      signalArgs: [e.rotate ? { keys: e.keys, rotate: true } : { keys: e.keys }],
      staticSummary: `host ${e.hostId} (pool ${e.pool})`,
    },
  );
  return { created: !running, rotated };
}
