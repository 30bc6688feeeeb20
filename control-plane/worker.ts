/** The control-plane worker: every fleet workflow plus the control-plane activities, on one task queue. */
import { type Client } from '@temporalio/client';
import { Worker, type NativeConnection, type WorkflowBundle } from '@temporalio/worker';
import { createControlPlaneActivities } from '../activities/control-plane';
import { schedulerWorkflowId } from '../workflows/ids';
import { configureSchedulerUpdate } from '../workflows/messages';
import type { schedulerWorkflow } from '../workflows/scheduler';
import { poolConfig, schedulerInput, type ControlPlaneConfig } from './config';
import { createSealingCodec } from './sealing';

/**
 * Modules evaluated once per worker and shared by every workflow run (TS SDK `preloadModules`):
 * only pure code with pure caches. workflows/identity.ts keeps decoded host keys and, through
 * noble, the Ed25519 base-point table; without preloading each workflow run rebuilds both.
 */
export const WORKFLOW_PRELOAD_MODULES = [require.resolve('../workflows/identity')];

export interface ControlPlaneWorkerOptions {
  connection: NativeConnection;
  client: Client;
  config: ControlPlaneConfig;
  namespace?: string;
  /** A pre-built bundle (tests build one per run); otherwise the workflows are bundled at start. */
  workflowBundle?: WorkflowBundle;
  identity?: string;
}

export async function createControlPlaneWorker(opts: ControlPlaneWorkerOptions): Promise<Worker> {
  return Worker.create({
    connection: opts.connection,
    namespace: opts.namespace ?? opts.client.options.namespace,
    taskQueue: opts.config.controlTaskQueue,
    ...(opts.workflowBundle
      ? { workflowBundle: opts.workflowBundle }
      : {
          workflowsPath: require.resolve('../workflows'),
          bundlerOptions: { preloadModules: WORKFLOW_PRELOAD_MODULES },
        }),
    activities: createControlPlaneActivities({ client: opts.client, config: opts.config }),
    // Seals what the task workflow sends to a host to that host's key (see sealing.ts).
    dataConverter: { payloadCodecs: [createSealingCodec()] },
    ...(opts.config.maxCachedWorkflows ? { maxCachedWorkflows: opts.config.maxCachedWorkflows } : {}),
    ...(opts.identity ? { identity: opts.identity } : {}),
  });
}

/**
 * Starts the scheduler of every configured pool (no-op when it runs) and applies the configured
 * strategy and limits to it: a strategy is changed by configuration alone.
 */
export async function ensurePools(client: Client, config: ControlPlaneConfig): Promise<void> {
  for (const pool of Object.keys(config.pools)) {
    const workflowId = schedulerWorkflowId(pool);
    await client.workflow.start<typeof schedulerWorkflow>('schedulerWorkflow', {
      workflowId,
      taskQueue: config.controlTaskQueue,
      args: [schedulerInput(config, pool)],
      workflowIdConflictPolicy: 'USE_EXISTING',
      staticSummary: `scheduler of pool ${pool}`,
    });
    // Not through the handle start() returns: attached to a running scheduler, that handle takes the
    // current run for the first of its chain, and once the scheduler has continued-as-new the server
    // finds no such chain (NOT_FOUND): every control-plane restart after a roll-over failed here.
    // By workflow id alone the update reaches whichever run is current.
    await client.workflow.getHandle(workflowId).executeUpdate(configureSchedulerUpdate, {
      args: [poolConfig(config, pool)],
    });
  }
}
