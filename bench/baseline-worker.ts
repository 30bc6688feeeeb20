/**
 * The baseline's activity worker as a process (lease-recovery baseline and memory reference):
 * a plain Temporal worker on BENCH_TASK_QUEUE with BENCH_SLOTS concurrent activities, serving the
 * baseline activities. Prints one JSON line per activity start (with attempt and epoch ms).
 */
import { Context } from '@temporalio/activity';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { BaselineActivities } from './baseline-workflows';

async function main(): Promise<void> {
  const taskQueue = process.env.BENCH_TASK_QUEUE;
  if (!taskQueue) throw new Error('BENCH_TASK_QUEUE is required');
  const name = process.env.BENCH_WORKER_NAME ?? 'baseline';
  const connection = await NativeConnection.connect({ address: process.env.TEMPORAL_ADDRESS ?? 'localhost:7233' });
  const say = (fields: Record<string, unknown>) => console.log(JSON.stringify({ worker: name, ...fields }));
  const activities: BaselineActivities = {
    async run(taskId) {
      say({ event: 'start', taskId, attempt: Context.current().info.attempt, at: Date.now() });
    },
    async hold({ taskId, durationMs, beatMs }) {
      const ctx = Context.current();
      say({ event: 'start', taskId, attempt: ctx.info.attempt, at: Date.now() });
      ctx.heartbeat();
      const beat = setInterval(() => ctx.heartbeat(), Math.max(100, beatMs));
      try {
        await ctx.sleep(durationMs);
      } finally {
        clearInterval(beat);
      }
    },
  };
  const worker = await Worker.create({
    connection,
    namespace: process.env.TEMPORAL_NAMESPACE ?? 'default',
    taskQueue,
    activities,
    maxConcurrentActivityTaskExecutions: Number(process.env.BENCH_SLOTS ?? 10),
    shutdownGraceTime: '1s',
  });
  const running = worker.run();
  say({ event: 'baseline worker started', taskQueue });
  const stop = () => worker.shutdown();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  await running;
  await connection.close();
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
