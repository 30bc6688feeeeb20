/**
 * Host enrolment, an operator action: registers a host's public keys with its host workflow
 * (creating it if needed). The host's secret never leaves the host's credential file.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { SignalDefinition } from '@temporalio/common';
import type { hostWorkflow } from '../workflows/host';
import { hostWorkflowId } from '../workflows/ids';
import { sameKeys, type HostPublicKeys } from '../workflows/identity';
import { hostStateQuery, registerHostKeysSignal, type HostAdminRef, type HostView } from '../workflows/messages';
import { FleetPool } from '../workflows/search-attributes';
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

/** A rotation needs the running host workflow to answer (the control plane's worker is not up?). */
export class HostNotAnsweringError extends Error {
  override name = 'HostNotAnsweringError';
  constructor(
    public readonly hostId: string,
    why = 'a key rotation needs it',
  ) {
    super(
      `host ${hostId}'s workflow does not answer (is the control plane's worker running?); ${why}: try again once it runs`,
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

/** What enrolment needs to know of a host workflow: whether it runs, its pool, what it says. */
export interface EnrolmentState {
  running: boolean;
  /** Its pool (the FleetPool search attribute), when it runs. */
  pool?: string;
  /** Its answer to the state query; missing when the control plane's worker did not answer in time. */
  view?: HostView;
}

/** One describe and, for a running host, one state query with a short deadline. */
export async function enrolmentState(client: Client, hostId: string): Promise<EnrolmentState> {
  const handle = client.workflow.getHandle(hostWorkflowId(hostId));
  try {
    const d = await handle.describe();
    if (d.status.name !== 'RUNNING') return { running: false };
    // Asking needs the control plane's worker: when it does not answer (not started yet, as in
    // `npm start`), the host workflow itself ignores other keys sent without `rotate`.
    const view = await client
      .withDeadline(Date.now() + ENROLL_QUERY_MS, () => handle.query(hostStateQuery))
      .catch(() => undefined);
    return { running: true, pool: view?.pool ?? d.typedSearchAttributes.get(FleetPool), view };
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return { running: false };
    throw err;
  }
}

/**
 * Enrols the host's public keys, starting its host workflow if needed. The same keys again change
 * nothing; other keys for an enrolled host need `rotate` (HostKeysConflictError otherwise), and the
 * host is then offline until it reports with the new ones. `state` is what the caller already read
 * with enrolmentState (read here otherwise).
 */
export async function enrollHost(
  client: Client,
  config: ControlPlaneConfig,
  e: Enrollment & { rotate?: boolean },
  state?: EnrolmentState,
): Promise<{ created: boolean; rotated: boolean }> {
  const { running, view } = state ?? (await enrolmentState(client, e.hostId));
  // The enrolled keys, to refuse an unasked rotation with a clear error.
  if (view?.retired) throw new HostBeingRemovedError(e.hostId);
  const enrolled: HostPublicKeys | undefined = view?.keys;
  const rotated = enrolled ? !sameKeys(enrolled, e.keys) : running && !!e.rotate;
  if (enrolled && rotated && !e.rotate) throw new HostKeysConflictError(e.hostId);
  // A rotation names what the host workflow says of itself (its enrolment): it must answer.
  if (running && e.rotate && !view) throw new HostNotAnsweringError(e.hostId);
  await client.workflow.signalWithStart<
    typeof hostWorkflow,
    [{ keys: HostPublicKeys; rotate?: boolean } & HostAdminRef]
  >('hostWorkflow', {
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
    // A rotation of a running host names its enrolment and the next version (HostAdminRef).
    signalArgs: [e.rotate ? { keys: e.keys, rotate: true, ...(view ? nextAdminRef(view) : {}) } : { keys: e.keys }],
    staticSummary: `host ${e.hostId} (pool ${e.pool})`,
  });
  return { created: !running, rotated };
}

let lastAdminVersion = 0;

/**
 * Sends an operator's change (drain, undrain, removal) to a host workflow, naming the enrolment it
 * is for and a version above any applied (`HostAdminRef`): sent again later, or after the host was
 * removed and enrolled anew, it changes nothing. `view`: the host's state when the caller has just
 * read it (else it is queried here).
 */
export async function sendHostChange<T extends object>(
  client: Client,
  hostId: string,
  def: SignalDefinition<[T & HostAdminRef]>,
  change: T,
  view?: HostView,
): Promise<void> {
  const handle = client.workflow.getHandle(hostWorkflowId(hostId));
  const state =
    view ??
    (await client
      .withDeadline(Date.now() + ENROLL_QUERY_MS, () => handle.query(hostStateQuery))
      .catch((err: unknown) => {
        if (err instanceof WorkflowNotFoundError) throw err;
        throw new HostNotAnsweringError(hostId, 'a change to it names what it says of itself');
      }));
  await handle.signal(def, { ...change, ...nextAdminRef(state) });
}

/** The enrolment and next version an operator's change to this host names (`HostAdminRef`). */
function nextAdminRef(view: HostView): HostAdminRef {
  // A host workflow of a build before HostAdminRef says no enrolment: it takes the change as it was.
  if (view.enrolment === undefined) return {};
  // Wall-clock milliseconds, so that changes from several control-plane processes order as sent;
  // never below what the host applied, nor below this process's last.
  lastAdminVersion = Math.max(Date.now(), (view.adminVersion ?? 0) + 1, lastAdminVersion + 1);
  return { enrolment: view.enrolment, version: lastAdminVersion };
}
