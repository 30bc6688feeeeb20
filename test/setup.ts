/**
 * Mocha root hooks: one Temporal dev server (the real `temporal` CLI, SQLite in memory, our search
 * attributes registered) and one workflow bundle for the whole run.
 */
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, DefaultLogger, Runtime, type WorkflowBundle } from '@temporalio/worker';
import { devServerTuningArgs, temporalCliPath } from '../control-plane/temporal-cli';
import { WORKFLOW_PAYLOAD_CONVERTER, WORKFLOW_PRELOAD_MODULES } from '../control-plane/worker';
import { ALL_SEARCH_ATTRIBUTES } from '../workflows/search-attributes';

/**
 * The signal key of every test fleet, in-process and spawned (they inherit the environment), and of
 * the recorded histories (test/fixtures/histories from set 2026-12-02c on). Not a secret.
 */
export const TEST_SIGNAL_KEYS = '7e57'.repeat(16);
process.env.FLEET_SIGNAL_KEYS ??= TEST_SIGNAL_KEYS;

let env: TestWorkflowEnvironment | undefined;
let bundle: WorkflowBundle | undefined;

export function testEnv(): TestWorkflowEnvironment {
  if (!env) throw new Error('the Temporal test environment is not started (test/setup.ts)');
  return env;
}

export function workflowBundle(): WorkflowBundle {
  if (!bundle) throw new Error('the workflow bundle is not built (test/setup.ts)');
  return bundle;
}

/** The fleet's workflows bundled as the control plane bundles them, with a test's interceptors if any. */
export function bundleFleetWorkflows(workflowInterceptorModules: string[] = []): Promise<WorkflowBundle> {
  return bundleWorkflowCode({
    workflowsPath: require.resolve('../workflows'),
    preloadModules: WORKFLOW_PRELOAD_MODULES,
    payloadConverterPath: WORKFLOW_PAYLOAD_CONVERTER,
    workflowInterceptorModules,
    logger: new DefaultLogger('ERROR'),
  });
}

export const mochaHooks = {
  async beforeAll(this: Mocha.Context) {
    this.timeout(180_000);
    Runtime.install({ logger: new DefaultLogger(process.env.FLEET_TEST_LOG === '1' ? 'INFO' : 'ERROR') });
    const path = temporalCliPath();
    [env, bundle] = await Promise.all([
      TestWorkflowEnvironment.createLocal({
        server: {
          executable: { type: 'existing-path', path },
          searchAttributes: ALL_SEARCH_ATTRIBUTES,
          extraArgs: ['--log-level', 'error', ...devServerTuningArgs()],
        },
      }),
      bundleFleetWorkflows(),
    ]);
  },
  async afterAll(this: Mocha.Context) {
    this.timeout(60_000);
    await env?.teardown();
  },
};
