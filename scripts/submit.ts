/**
 * `npm run submit -- --goal "..." [--driver-type android] [--tag camera]... [--task-id ID] [--wait]`
 * A minimal submitter on the typed client (the full `fleet` CLI is tracked separately).
 */
import { parseArgs } from 'node:util';
import { FleetClient } from '../control-plane/client';
import { loadControlPlaneConfig } from '../control-plane/config';
import { connectClient, temporalSettingsFromEnv } from '../control-plane/connection';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      goal: { type: 'string' },
      definition: { type: 'string' },
      'driver-type': { type: 'string' },
      tag: { type: 'string', multiple: true },
      'task-id': { type: 'string' },
      pool: { type: 'string' },
      priority: { type: 'string' },
      wait: { type: 'boolean' },
    },
  });
  const client = await connectClient(temporalSettingsFromEnv());
  const fleet = new FleetClient(client, loadControlPlaneConfig());
  const view = await fleet.submit({
    taskId: values['task-id'],
    pool: values.pool,
    goal: values.goal,
    definition: values.definition,
    priority: values.priority ? Number(values.priority) : undefined,
    constraints: { driverType: values['driver-type'], tags: values.tag ?? [] },
  });
  console.log(JSON.stringify({ taskId: view.taskId, status: view.status }));
  if (values.wait) {
    const end = await fleet.wait(view.taskId);
    console.log(JSON.stringify({ taskId: end.taskId, status: end.status, result: end.result, attempts: end.attempts.length }));
    process.exitCode = end.status === 'done' ? 0 : 1;
  }
  await client.connection.close();
}

main().catch((err) => {
  console.error(err instanceof Error ? `${err.name}: ${err.message}` : err);
  process.exit(2);
});
