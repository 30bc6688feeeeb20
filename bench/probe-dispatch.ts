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
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { devServerTuningArgs, temporalCliPath } from '../control-plane/temporal-cli';
import { eventMs, eventTypeName } from './lib/history';

const { CommandType } = temporal.api.enums.v1;

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
    let stopRaw: (() => Promise<void>) | undefined;
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
        stopRaw = rawPoller(client, 'probe-raw');
        for (const [who, taskQueue] of [['an SDK worker', 'probe'], ['a bare gRPC poller', 'probe-raw']]) {
          const wft = await signalledTask(client, taskQueue, n);
          console.log(
            `signal -> its workflow task, answered by ${who}: picked up p50 ${pct(wft.pickup, 0.5)}, ` +
              `started -> completed p50 ${pct(wft.onWorker, 0.5)} p90 ${pct(wft.onWorker, 0.9)} ms`,
          );
        }
      })(),
    ]);
    workflows.shutdown();
    host.shutdown();
    await stopRaw?.();
    await running;
  } finally {
    await env.teardown();
  }
}

/**
 * A worker with no SDK: long-polls `taskQueue` over the client's gRPC connection and answers each
 * workflow task at once: no command until the history holds a signal, then complete the workflow.
 */
function rawPoller(client: Client, taskQueue: string): () => Promise<void> {
  const svc = client.connection.workflowService;
  const namespace = client.options.namespace;
  let stop = false;
  const loop = (async () => {
    while (!stop) {
      const t = await client.connection.withDeadline(Date.now() + 5_000, () =>
        svc.pollWorkflowTaskQueue({ namespace, taskQueue: { name: taskQueue }, identity: 'probe-raw' }),
      ).catch(() => undefined); // the deadline of an idle poll
      if (!t?.taskToken?.length) continue;
      const signalled = (t.history?.events ?? []).some((e) => eventTypeName(e) === 'WorkflowExecutionSignaled');
      await svc.respondWorkflowTaskCompleted({
        namespace,
        taskToken: t.taskToken,
        identity: 'probe-raw',
        commands: signalled
          ? [{ commandType: CommandType.COMMAND_TYPE_COMPLETE_WORKFLOW_EXECUTION, completeWorkflowExecutionCommandAttributes: {} }]
          : [],
      });
    }
  })();
  return async () => {
    stop = true;
    await loop;
  };
}

/** `probeWait` runs on `taskQueue`, one at a time: signal, then read its workflow task from the history. */
async function signalledTask(client: Client, taskQueue: string, n: number): Promise<{ pickup: number[]; onWorker: number[] }> {
  const pickup: number[] = [];
  const onWorker: number[] = [];
  for (let i = 0; i < n + 5; i++) {
    const h = await client.workflow.start('probeWait', { taskQueue, workflowId: `wait-${taskQueue}-${i}` });
    await sleep(100); // its first workflow task done
    await h.signal('go', false);
    await h.result();
    const events = (await h.fetchHistory()).events ?? [];
    const from = events.findIndex((e) => eventTypeName(e) === 'WorkflowExecutionSignaled');
    const after = events.slice(from);
    const started = after.find((e) => eventTypeName(e) === 'WorkflowTaskStarted');
    const completed = after.find((e) => eventTypeName(e) === 'WorkflowTaskCompleted');
    if (i < 5 || from < 0 || !started || !completed) continue;
    pickup.push(eventMs(started) - eventMs(events[from]));
    onWorker.push(eventMs(completed) - eventMs(started));
  }
  return { pickup, onWorker };
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
