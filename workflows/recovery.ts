/**
 * A pool's recovery: started by a scheduler run that began anew (its previous run terminated or
 * failed), as a child it abandons, so that the scheduler's roll-overs (which the recovery's own
 * enqueues bring about in a large pool) neither wait for it nor start it again. It asks the pool's
 * running tasks to enqueue again and its hosts to publish again (activities/control-plane.ts,
 * recoverPool), retried until that works: a task it does not reach would wait for good.
 */
import { proxyActivities, setCurrentDetails } from '@temporalio/workflow';
import type * as controlActivities from '../activities/control-plane';

const { recoverPool } = proxyActivities<ReturnType<typeof controlActivities.createControlPlaneActivities>>({
  startToCloseTimeout: '10m',
  heartbeatTimeout: '60s',
  // Until it works (visibility down, an old worker without the activity in a rolling upgrade): its
  // signals change nothing twice.
  retry: { initialInterval: '1s', maximumInterval: '60s' },
  summary: 'ask the pool\'s tasks to enqueue again and its hosts to publish again',
});

export async function poolRecoveryWorkflow(input: {
  pool: string;
}): Promise<{ tasks: number; hosts: number; failed: number }> {
  const r = await recoverPool(input.pool); // a pool's first scheduler: nobody to ask (0, 0)
  setCurrentDetails(
    `pool **${input.pool}** recovered · ${r.tasks} tasks and ${r.hosts} hosts asked again` +
      (r.failed > 0 ? ` · ${r.failed} signals went through only when tried again (see the control plane's log)` : ''),
  );
  return r;
}
