/**
 * The Web UI filters the README's operator guide recommends, run as the very same visibility queries
 * (client.workflow.list) against real tasks, devices and hosts: each returns exactly what it says.
 */
import assert from 'node:assert/strict';
import type { Client } from '@temporalio/client';
import { deviceWorkflowId, hostWorkflowId, schedulerWorkflowId, taskWorkflowId } from '../workflows/ids';
import { eventually, startFleet, type Fleet } from './helpers/fleet';

/** The README's filters, with the pool / host an operator would type in. */
export const OPERATOR_FILTERS = {
  runningOnHost: (host: string) => `FleetKind = 'task' AND FleetStatus = 'running' AND FleetHostId = '${host}'`,
  failedInPool: (pool: string) => `FleetKind = 'task' AND FleetStatus = 'failed' AND FleetPool = '${pool}'`,
  retried: (pool: string) => `FleetKind = 'task' AND FleetAttempt > 1 AND FleetPool = '${pool}'`,
  waitingInPool: (pool: string) => `FleetKind = 'task' AND FleetStatus = 'queued' AND FleetPool = '${pool}'`,
  everyTaskOnDevice: (host: string, device: string) =>
    `FleetKind = 'task' AND FleetHostId = '${host}' AND FleetDeviceId = '${device}'`,
  devicesOfHost: (host: string) => `FleetKind = 'device' AND FleetHostId = '${host}'`,
  hostsInPool: (pool: string) => `FleetKind = 'host' AND FleetPool = '${pool}'`,
  scheduler: (pool: string) => `FleetKind = 'scheduler' AND FleetPool = '${pool}'`,
};

async function workflowIds(client: Client, query: string): Promise<string[]> {
  const ids: string[] = [];
  for await (const wf of client.workflow.list({ query })) ids.push(wf.workflowId);
  return ids.sort();
}

/** Polls until the query returns exactly `expected` (visibility lags the workflows). */
async function expectExactly(client: Client, query: string, expected: string[]): Promise<void> {
  const want = [...expected].sort();
  let last: string[] = [];
  try {
    await eventually(
      async () => {
        last = await workflowIds(client, query);
        return JSON.stringify(last) === JSON.stringify(want) ? true : undefined;
      },
      query,
      30_000,
      250,
    );
  } catch {
    assert.deepEqual(last, want, `filter: ${query}`);
  }
}

describe('operator guide: Web UI filters over the registered search attributes', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  it('each recommended filter returns exactly the matching workflows', async () => {
    f = await startFleet('operator');
    const h1 = f.hostId('h1');
    const h2 = f.hostId('h2');
    await f.addHost('h1', [
      { deviceId: 'a1', driverType: 'android' },
      { deviceId: 'a2', driverType: 'android' },
    ]);
    await f.addHost('h2', [{ deviceId: 'b1', driverType: 'android' }]);

    const hang = await f.fleet.submit({
      goal: 'soak test [sim outcome=hang]',
      constraints: { driverType: 'android', hostId: h1, deviceId: 'a1' },
    });
    const fail = await f.fleet.submit({
      goal: 'broken build [sim outcome=fail]',
      constraints: { driverType: 'android', hostId: h2 },
    });
    const flaky = await f.fleet.submit({
      goal: 'flaky [sim outcome=fail-retryable duration=50]',
      constraints: { driverType: 'android', hostId: h2 },
    });
    const done = await f.fleet.submit({
      goal: 'quick [sim duration=50]',
      constraints: { driverType: 'android', hostId: h1, deviceId: 'a2' },
    });
    const waiting = await f.fleet.submit({ goal: 'needs an iPhone', constraints: { driverType: 'ios' } });

    await f.waitForStatus(hang.taskId, 'running');
    await f.waitForStatus(fail.taskId, 'failed');
    const flakyEnd = await f.waitForStatus(flaky.taskId, 'failed', 30_000);
    assert.equal(flakyEnd.attempts.length, 3, 'the flaky task used every attempt');
    await f.waitForStatus(done.taskId, 'done');

    const task = (t: { taskId: string }) => taskWorkflowId(t.taskId);
    await expectExactly(f.client, OPERATOR_FILTERS.runningOnHost(h1), [task(hang)]);
    await expectExactly(f.client, OPERATOR_FILTERS.runningOnHost(h2), []);
    await expectExactly(f.client, OPERATOR_FILTERS.failedInPool(f.pool), [task(fail), task(flaky)]);
    await expectExactly(f.client, OPERATOR_FILTERS.retried(f.pool), [task(flaky)]);
    await expectExactly(f.client, OPERATOR_FILTERS.waitingInPool(f.pool), [task(waiting)]);
    await expectExactly(f.client, OPERATOR_FILTERS.everyTaskOnDevice(h1, 'a2'), [task(done)]);
    await expectExactly(f.client, OPERATOR_FILTERS.devicesOfHost(h1), [
      deviceWorkflowId(h1, 'a1'),
      deviceWorkflowId(h1, 'a2'),
    ]);
    await expectExactly(f.client, OPERATOR_FILTERS.hostsInPool(f.pool), [hostWorkflowId(h1), hostWorkflowId(h2)]);
    await expectExactly(f.client, OPERATOR_FILTERS.scheduler(f.pool), [schedulerWorkflowId(f.pool)]);

    // The running task's filter follows it: once cancelled it leaves "running on h1".
    await f.fleet.cancel(hang.taskId);
    await f.waitForStatus(hang.taskId, 'cancelled');
    await expectExactly(f.client, OPERATOR_FILTERS.runningOnHost(h1), []);
  });
});
