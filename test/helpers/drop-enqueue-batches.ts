/**
 * A workflow interceptor (bundled only by the test that uses it) that drops every `enqueueTasks`
 * signal before its handler: a scheduler served by such a worker takes a pool recovery's batches
 * and applies none of them, as a worker from before the batch signal would.
 */
import type { WorkflowInterceptorsFactory } from '@temporalio/workflow';

export const interceptors: WorkflowInterceptorsFactory = () => ({
  inbound: [
    {
      async handleSignal(input, next) {
        if (input.signalName === 'enqueueTasks') return;
        return next(input);
      },
    },
  ],
});
