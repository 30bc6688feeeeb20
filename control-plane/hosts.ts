/**
 * Host enrolment, an operator action: registers a host's public keys with its host workflow
 * (creating it if needed). The host's secret never leaves the host's credential file.
 */
import type { Client } from '@temporalio/client';
import type { hostWorkflow } from '../workflows/host';
import { hostWorkflowId } from '../workflows/ids';
import type { HostPublicKeys } from '../workflows/identity';
import { registerHostKeysSignal } from '../workflows/messages';
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

export async function enrollHost(client: Client, config: ControlPlaneConfig, e: Enrollment): Promise<void> {
  await client.workflow.signalWithStart<typeof hostWorkflow, [{ keys: HostPublicKeys }]>('hostWorkflow', {
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
    signalArgs: [{ keys: e.keys }],
    staticSummary: `host ${e.hostId} (pool ${e.pool})`,
  });
}
