/**
 * A workflow interceptor (bundled only by the test that uses it): the scheduler of any pool named
 * `broken-...` indexes itself as a scheduler and then fails at once, as a run whose workers refuse
 * its configuration would. Every other workflow runs as usual.
 */
import { ApplicationFailure, upsertSearchAttributes, workflowInfo, type WorkflowInterceptorsFactory } from '@temporalio/workflow';
import { FleetKind, FleetPool } from '../../workflows/search-attributes';

export const interceptors: WorkflowInterceptorsFactory = () => ({
  inbound: [
    {
      async execute(input, next) {
        const pool = (input.args[0] as { pool?: unknown } | undefined)?.pool;
        if (workflowInfo().workflowType === 'schedulerWorkflow' && typeof pool === 'string' && pool.startsWith('broken-')) {
          upsertSearchAttributes([
            { key: FleetKind, value: 'scheduler' },
            { key: FleetPool, value: pool },
          ]);
          throw ApplicationFailure.nonRetryable('test: this scheduler fails at once');
        }
        return next(input);
      },
    },
  ],
});
