/**
 * What one pass through the Temporal server costs on this machine, without the fleet:
 *
 *   npx tsx bench/probe-dispatch.ts                    # the project's dev-server tuning
 *   npx tsx bench/probe-dispatch.ts --server-tuning off  # the server's own defaults
 *
 * Starts its own dev server and one worker, then measures, one sample at a time: a bare workflow
 * start -> its activity entered (the baseline's path), and a client signal -> a chain of 1 or 3
 * workflows each signalling the next -> the last one's activity entered (the fleet's task ->
 * scheduler -> device -> task path has three such hops). Prints p50 / p90 in ms. Measures, never asserts.
 */
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { devServerTuningArgs, temporalCliPath } from '../control-plane/temporal-cli';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor(p * (xs.length - 1))].toFixed(1);

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { 'server-tuning': { type: 'string' }, samples: { type: 'string' } } });
  const tuning = values['server-tuning'] ?? 'on';
  const n = Number(values.samples ?? 60);
  const extra = devServerTuningArgs({ FLEET_DEV_SERVER_TUNING: tuning });
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  // The same way bench/lib/env.ts starts its server, with this run's choice of tuning.
  const env = await TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: temporalCliPath() },
      ip: '127.0.0.1',
      extraArgs: ['--log-level', 'error', ...extra],
    },
  });
  try {
    const { client, nativeConnection: native } = env;
    let entered = 0;
    const workflows = await Worker.create({
      connection: native,
      taskQueue: 'probe',
      workflowsPath: require.resolve('./probe-workflows'),
    });
    const host = await Worker.create({
      connection: native,
      taskQueue: 'probe-host',
      activities: {
        async touch() {
          entered = performance.now();
        },
      },
    });
    const waitEntered = async () => {
      for (let i = 0; !entered && i < 10_000; i++) await sleep(1);
    };
    const running = Promise.all([workflows.run(), host.run()]);
    await Promise.race([
      running,
      (async () => {
        console.log(
          `dev server tuning: ${tuning} (${extra.filter((a) => !a.startsWith('--')).join(' ') || 'defaults'})`,
        );
        const bare: number[] = [];
        for (let i = 0; i < n + 5; i++) {
          entered = 0;
          const t0 = performance.now();
          await client.workflow.start('probeBare', { taskQueue: 'probe', workflowId: `bare-${i}` });
          await waitEntered();
          if (i >= 5) bare.push(entered - t0); // the first few warm the worker up
          await sleep(100);
        }
        console.log(`start -> activity entered: p50 ${pct(bare, 0.5)} p90 ${pct(bare, 0.9)} ms`);
        for (const len of [1, 3]) {
          const ids = Array.from({ length: len }, (_, i) => `relay-${len}-${i}`);
          for (let i = len - 1; i >= 0; i--) {
            await client.workflow.start('probeRelay', {
              taskQueue: 'probe',
              workflowId: ids[i],
              args: [ids[i + 1] ?? null],
            });
          }
          const head = client.workflow.getHandle(ids[0]);
          const lat: number[] = [];
          for (let i = 0; i < n + 5; i++) {
            entered = 0;
            const t0 = performance.now();
            await head.signal('go', false);
            await waitEntered();
            if (i >= 5) lat.push(entered - t0);
            await sleep(100);
          }
          await head.signal('go', true);
          console.log(
            `signal -> ${len} workflow(s) in a chain -> activity entered: p50 ${pct(lat, 0.5)} p90 ${pct(lat, 0.9)} ms`,
          );
        }
      })(),
    ]);
    workflows.shutdown();
    host.shutdown();
    await running;
  } finally {
    await env.teardown();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
