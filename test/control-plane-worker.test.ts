/** The control-plane worker takes its workflow-cache size from the configuration. */
import assert from 'node:assert/strict';
import type { Worker } from '@temporalio/worker';
import { ConfigError, parseControlPlaneConfig } from '../control-plane/config';
import { createControlPlaneWorker } from '../control-plane/worker';
import { testEnv, workflowBundle } from './setup';
import { uid } from './helpers/fleet';

describe('control-plane worker options', () => {
  const make = async (input: Record<string, unknown>): Promise<Worker> => {
    const env = testEnv();
    return createControlPlaneWorker({
      connection: env.nativeConnection,
      client: env.client,
      config: parseControlPlaneConfig({ controlTaskQueue: uid('cp-options'), ...input }),
      workflowBundle: workflowBundle(),
    });
  };
  const stop = async (w: Worker) => {
    const running = w.run();
    w.shutdown();
    await running;
  };

  it('maxCachedWorkflows from the configuration sizes the worker cache; without it, the SDK default', async () => {
    const sized = await make({ maxCachedWorkflows: 12_345 });
    const plain = await make({});
    try {
      assert.equal(sized.options.maxCachedWorkflows, 12_345);
      assert.notEqual(plain.options.maxCachedWorkflows, 12_345);
      assert.ok(plain.options.maxCachedWorkflows >= 10, 'the SDK default is at least 10');
    } finally {
      await stop(sized);
      await stop(plain);
    }
  });

  it('a maxCachedWorkflows that is not a positive integer is a configuration error', () => {
    for (const bad of [0, -5, 1.5, 'many']) {
      assert.throws(() => parseControlPlaneConfig({ maxCachedWorkflows: bad }), (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, /maxCachedWorkflows/);
        return true;
      });
    }
  });
});
