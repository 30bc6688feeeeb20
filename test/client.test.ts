/** The typed client's list and validation, through the registered search attributes (what the Web UI filters on). */
import assert from 'node:assert/strict';
import {
  TaskEndedError,
  TaskNotFoundError,
  TaskRejectedError,
  TaskWaitTimeoutError,
  ValidationError,
} from '../control-plane/client';
import { WorkflowFailedError, WorkflowNotFoundError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { taskWorkflowQueue } from '../control-plane/config';
import { ErrorType } from '../workflows/errors';
import { schedulerWorkflowId, taskWorkflowId } from '../workflows/ids';
import { eventually, startFleet, uid, type Fleet } from './helpers/fleet';

describe('fleet client', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  it('rejects bad input with every field named, and starts nothing', async () => {
    f = await startFleet('client-bad');
    await assert.rejects(f.fleet.submit({ taskId: 'bad id!', goal: '', priority: 5000 } as never), (err: unknown) => {
      assert.ok(err instanceof ValidationError);
      const paths = err.issues.map((i) => i.path);
      assert.ok(paths.includes('taskId') && paths.includes('goal') && paths.includes('priority'), paths.join(','));
      return true;
    });
    await assert.rejects(f.fleet.submit({ goal: 'x', definition: 'y' }), /exactly one of "goal" or "definition"/);
    // Misspelt fields are errors, not silently dropped: at the top, in constraints, definition and steps.
    const misspelt = {
      goal: 'x',
      constraints: { driverType: 'android', tag: ['camera'] },
      polciy: { maxAttempts: 1 },
    };
    await assert.rejects(f.fleet.submit(misspelt as never), (err: unknown) => {
      assert.ok(err instanceof ValidationError);
      assert.deepEqual(err.issues.map((i) => i.path).sort(), ['constraints.tag', 'polciy']);
      return true;
    });
    const badDefinition = {
      definition: { name: 'd', stpes: [], steps: [{ name: 's', command: ['true'], timeout: 5 }] },
    };
    assert.throws(
      () => f!.fleet.buildInput(badDefinition as never),
      (err: unknown) => {
        assert.ok(err instanceof ValidationError);
        assert.deepEqual(err.issues.map((i) => i.path).sort(), ['definition.steps.0.timeout', 'definition.stpes']);
        return true;
      },
    );
    assert.equal((await f.scheduler()).queue.length, 0);
  });

  it('refuses durations past what a timer holds, a lease under 1 s and a backoff capped below its start (defaults filled in) before anything starts; a task started around the client with them is rejected', async () => {
    f = await startFleet('client-bounds');
    const cases: Array<[policy: Record<string, unknown>, paths: string[]]> = [
      [{ executionTimeoutMs: 9e15 }, ['policy.executionTimeoutMs']],
      [{ ackTimeoutMs: 2 ** 31, maxQueueWaitMs: 2 ** 31 }, ['policy.ackTimeoutMs', 'policy.maxQueueWaitMs']],
      [{ backoff: { initialMs: 9e15, maxMs: 9e15 } }, ['policy.backoff.initialMs', 'policy.backoff.maxMs']],
      [{ leaseTimeoutMs: 500 }, ['policy.leaseTimeoutMs']],
      // maxMs is the default 60 s: the merged policy is what the task would refuse.
      [{ backoff: { initialMs: 120_000 } }, ['policy.backoff']],
    ];
    for (const [policy, paths] of cases) {
      const taskId = uid('bounds');
      await assert.rejects(f.fleet.submit({ taskId, goal: 'x', policy } as never), (err: unknown) => {
        assert.ok(err instanceof ValidationError, String(err));
        assert.deepEqual(err.issues.map((i) => i.path).sort(), paths, JSON.stringify(err.issues));
        return true;
      });
      await assert.rejects(
        f.client.workflow.getHandle(taskWorkflowId(taskId)).describe(),
        WorkflowNotFoundError,
        `nothing started for ${JSON.stringify(policy)}`,
      );
    }
    // Around the client (a workflow start of its own): the task refuses it, and no device is held.
    const input = f.fleet.buildInput({ goal: 'x' });
    input.policy.reservationGraceMs = 9e15;
    const handle = await f.client.workflow.start('taskWorkflow', {
      workflowId: taskWorkflowId(input.taskId),
      taskQueue: taskWorkflowQueue(f.config),
      args: [input],
    });
    await assert.rejects(handle.result(), (err: unknown) => {
      assert.ok(err instanceof WorkflowFailedError && err.cause instanceof ApplicationFailure, String(err));
      assert.equal(err.cause.type, ErrorType.InvalidTask);
      assert.match(err.cause.message, /policy\.reservationGraceMs: at most 2147483647 ms/);
      return true;
    });
    assert.equal((await f.scheduler()).queue.length, 0);
  });

  it('lists tasks by status, pool, host and device through search attributes', async () => {
    f = await startFleet('client-list');
    await f.addHost('h1', [{ deviceId: 'd1', driverType: 'android' }]);
    const done = await f.fleet.submit({ goal: 'quick [sim duration=50]', constraints: { driverType: 'android' } });
    await f.fleet.wait(done.taskId);
    const waiting = await f.fleet.submit({ goal: 'needs ios', constraints: { driverType: 'ios' } });
    const byStatus = await eventually(async () => {
      const l = await f!.fleet.list({ pool: f!.pool, status: 'done' });
      return l.length === 1 ? l : undefined;
    }, 'visibility of the done task');
    assert.equal(byStatus[0].taskId, done.taskId);
    assert.equal(byStatus[0].hostId, f.hostId('h1'));
    assert.equal(byStatus[0].deviceId, 'd1');
    assert.equal(byStatus[0].attempt, 1);
    const queued = await f.fleet.list({ pool: f.pool, status: 'queued' });
    assert.deepEqual(
      queued.map((t) => t.taskId),
      [waiting.taskId],
    );
    const onHost = await f.fleet.list({ hostId: f.hostId('h1') });
    assert.deepEqual(
      onHost.map((t) => t.taskId),
      [done.taskId],
    );
  });

  it("a pool that is neither configured nor served by a host is refused, nothing started; a host's own pool is taken", async () => {
    f = await startFleet('client-pools');
    const typo = `${f.pool}-typo`;
    await assert.rejects(f.fleet.submit({ taskId: 'to-a-typo', goal: 'x', pool: typo }), (err: unknown) => {
      assert.ok(err instanceof TaskRejectedError, String(err));
      assert.equal(err.reason, 'UnknownPool');
      assert.match(err.message, new RegExp(`unknown pool "${typo}": not configured`));
      return true;
    });
    await assert.rejects(f.fleet.get('to-a-typo'), TaskNotFoundError);
    await assert.rejects(f.client.workflow.getHandle(schedulerWorkflowId(typo)).describe(), /not found/i);
    // A pool only a host names (not in the configuration): its scheduler started with the host.
    const lab = `${f.pool}-lab`;
    await f.addHost('h1', [{ deviceId: 'd1', pool: lab }]);
    const t = await eventually(
      () => f!.fleet.submit({ goal: 'in the host pool [sim duration=50]', pool: lab }).catch(() => undefined),
      'the host pool to exist',
    );
    assert.equal((await f.fleet.wait(t.taskId, { timeoutMs: 30_000 })).status, 'done');
  });

  it('wait gives up after its timeout and leaves the task alone; an unknown task is named', async () => {
    f = await startFleet('client-wait');
    await f.addHost('h1', [{ deviceId: 'd1', driverType: 'android' }]);
    const waiting = await f.fleet.submit({ goal: 'needs ios', constraints: { driverType: 'ios' } });
    await assert.rejects(f.fleet.wait(waiting.taskId, { timeoutMs: 300 }), (err: unknown) => {
      assert.ok(err instanceof TaskWaitTimeoutError, String(err));
      assert.equal(err.taskId, waiting.taskId);
      return true;
    });
    assert.equal((await f.fleet.get(waiting.taskId)).status, 'queued');
    await assert.rejects(f.fleet.wait('no-such-task', { timeoutMs: 5_000 }), TaskNotFoundError);
    await assert.rejects(f.fleet.wait('no-such-task'), TaskNotFoundError);
    await assert.rejects(f.fleet.wait(waiting.taskId, { timeoutMs: -1 }), RangeError);
    // A task that ends within the time allowed is returned as recorded.
    const quick = await f.fleet.submit({ goal: 'quick [sim duration=50]', constraints: { driverType: 'android' } });
    assert.equal((await f.fleet.wait(quick.taskId, { timeoutMs: 60_000 })).status, 'done');
  });

  it('cancel of an ended task throws TaskEndedError with its status and changes nothing; an unknown id is named', async () => {
    f = await startFleet('client-cancel');
    await f.addHost('h1', [{ deviceId: 'd1', driverType: 'android' }]);
    const quick = await f.fleet.submit({ goal: 'quick [sim duration=50]', constraints: { driverType: 'android' } });
    assert.equal((await f.fleet.wait(quick.taskId, { timeoutMs: 60_000 })).status, 'done');
    await assert.rejects(f.fleet.cancel(quick.taskId), (err: unknown) => {
      assert.ok(err instanceof TaskEndedError, String(err));
      assert.equal(err.taskId, quick.taskId);
      assert.equal(err.status, 'done');
      return true;
    });
    assert.equal((await f.fleet.get(quick.taskId)).status, 'done');
    await assert.rejects(f.fleet.cancel('no-such-task'), TaskNotFoundError);
    // A queued one is cancelled, and a second cancel finds it ended.
    const waiting = await f.fleet.submit({ goal: 'needs ios', constraints: { driverType: 'ios' } });
    await f.fleet.cancel(waiting.taskId);
    assert.equal((await f.fleet.wait(waiting.taskId, { timeoutMs: 30_000 })).status, 'cancelled');
    await assert.rejects(
      f.fleet.cancel(waiting.taskId),
      (err: unknown) => err instanceof TaskEndedError && err.status === 'cancelled',
    );
  });

  it('submit reads the pool answer from the task history: no update (a billed action) is sent', async () => {
    f = await startFleet('client-admit');
    await f.addHost('h1', [{ deviceId: 'd1', driverType: 'android' }]);
    // A device is free: the device's assignment stands for the admission.
    const atOnce = await f.fleet.submit({ goal: 'quick [sim duration=50]', constraints: { driverType: 'android' } });
    assert.equal(atOnce.status, 'queued');
    // Nothing matches: the scheduler's admission signal is the answer, and the task waits in the queue.
    const waiting = await f.fleet.submit({ goal: 'needs ios', constraints: { driverType: 'ios' } });
    assert.equal(waiting.status, 'queued');
    assert.deepEqual(
      (await f.scheduler()).queue.map((q) => q.taskId),
      [waiting.taskId],
    );
    assert.equal((await f.fleet.wait(atOnce.taskId)).status, 'done');
    // A repeat attaches to the same run and returns its recorded state.
    const again = await f.fleet.submit({
      taskId: waiting.taskId,
      goal: 'needs ios',
      constraints: { driverType: 'ios' },
    });
    assert.equal(again.taskId, waiting.taskId);
    assert.equal(again.submittedAt, waiting.submittedAt);
    assert.equal((await f.fleet.get(waiting.taskId)).submittedAt, waiting.submittedAt);

    const signals = async (taskId: string) => {
      const { events } = await f!.client.workflow.getHandle(taskWorkflowId(taskId)).fetchHistory();
      const updates = events!.filter(
        (e) => e.workflowExecutionUpdateAcceptedEventAttributes || e.workflowExecutionUpdateAdmittedEventAttributes,
      );
      assert.equal(updates.length, 0, `task ${taskId} got an update`);
      return events!.map((e) => e.workflowExecutionSignaledEventAttributes?.signalName).filter(Boolean);
    };
    assert.ok((await signals(atOnce.taskId)).includes('assignment'));
    const waitingSignals = await signals(waiting.taskId);
    assert.ok(waitingSignals.includes('admission'), waitingSignals.join(','));
    assert.ok(!waitingSignals.includes('assignment'), waitingSignals.join(','));
  });

  it('a submit that attaches to a run another caller started returns that run, not its own request', async () => {
    f = await startFleet('client-race');
    const taskId = `race-${Date.now()}`;
    // No device: both calls wait for the scheduler's answer, so the second attaches before it comes.
    const [a, b] = await Promise.all([
      f.fleet.submit({ taskId, goal: 'goal A', constraints: { driverType: 'ios' } }),
      f.fleet.submit({ taskId, goal: 'goal B', constraints: { driverType: 'ios' } }),
    ]);
    const recorded = await f.fleet.get(taskId);
    assert.deepEqual(a.work, recorded.work);
    assert.deepEqual(b.work, recorded.work);
    assert.equal(a.submittedAt, b.submittedAt);
    assert.deepEqual(
      (await f.scheduler()).queue.map((q) => q.taskId),
      [taskId],
    );
  });
});
