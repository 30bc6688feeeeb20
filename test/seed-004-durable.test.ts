/**
 * Seed 004 (durable leases): idempotent submission and terminal results, exponential backoff,
 * durable cancel intent, monotonic progress.
 */
import assert from 'node:assert/strict';
import type { Client, WorkflowExecutionDescription } from '@temporalio/client';
import { FleetClient } from '../control-plane/client';
import { deviceWorkflowId, taskWorkflowId } from '../workflows/ids';
import { deviceStateQuery, reportAttemptUpdate } from '../workflows/messages';
import { eventually, signReport, startFleet, uid, type Fleet } from './helpers/fleet';
import { assertNoOverlappingReservations } from './helpers/invariants';
import { recordingRunners } from './helpers/runners';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A client whose describe of `workflowId` answers what it answered earlier: a caller that looked, then stalled. */
function lookedEarlier(client: Client, workflowId: string, look: WorkflowExecutionDescription): Client {
  const bound = <T extends object>(t: T, p: string | symbol) => {
    const v = Reflect.get(t, p, t);
    return typeof v === 'function' ? v.bind(t) : v;
  };
  const workflow = new Proxy(client.workflow, {
    get: (t, p) =>
      p === 'getHandle'
        ? (id: string, ...rest: []) => {
            const h = t.getHandle(id, ...rest);
            return id === workflowId ? Object.assign(Object.create(h), { describe: async () => look }) : h;
          }
        : bound(t, p),
  });
  return new Proxy(client, { get: (t, p) => (p === 'workflow' ? workflow : bound(t, p)) });
}

describe('seed 004: idempotency, backoff, cancel, progress', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  const runsOf = async (taskId: string) => {
    let n = 0;
    for await (const _ of f!.client.workflow.list({ query: `WorkflowId = "${taskWorkflowId(taskId)}"` })) n++;
    return n;
  };

  it('Same task id submitted twice, and 20 times concurrently: one task, one run; after it ended, a resubmit returns the recorded result and runs nothing', async () => {
    f = await startFleet('idem');
    const { runners, calls } = recordingRunners();
    await f.addHost('h1', [{ deviceId: 'd1' }, { deviceId: 'd2' }], { runners });
    const twice = uid('twice');
    const first = await f.fleet.submit({ taskId: twice, goal: 'once [sim duration=300]' });
    const second = await f.fleet.submit({ taskId: twice, goal: 'once [sim duration=300]' });
    assert.equal(first.taskId, twice);
    assert.equal(second.taskId, twice);
    const many = uid('many');
    const views = await Promise.all(
      Array.from({ length: 20 }, () => f!.fleet.submit({ taskId: many, goal: 'many [sim duration=300]' })),
    );
    assert.ok(views.every((v) => v.taskId === many));
    const [a, b] = await Promise.all([f.fleet.wait(twice), f.fleet.wait(many)]);
    assert.equal(a.status, 'done');
    assert.equal(b.status, 'done');
    assert.equal(calls.filter((c) => c.taskId === twice).length, 1);
    assert.equal(calls.filter((c) => c.taskId === many).length, 1);
    const again = await f.fleet.submit({ taskId: twice, goal: 'once [sim duration=300]' });
    assert.equal(again.status, 'done');
    assert.deepEqual(again.result, a.result);
    await sleep(500);
    assert.equal(calls.filter((c) => c.taskId === twice).length, 1, 'the resubmission ran nothing');
    assert.equal(await eventually(async () => ((await runsOf(twice)) === 1 ? 1 : undefined), 'visibility'), 1);
    assert.equal(await runsOf(many), 1);
  });

  it('A rejected id submitted again runs once; a caller that saw it rejected and starts after that run ended done attaches to its result', async () => {
    f = await startFleet('resubmit', { maxQueueDepth: 1 });
    const filler = await f.fleet.submit({ goal: 'filler' }); // no device yet: stays queued, the queue is full
    const taskId = uid('dup');
    await assert.rejects(f.fleet.submit({ taskId, goal: 'once [sim duration=50]' }), /queue is full/);
    assert.equal((await f.fleet.get(taskId)).status, 'rejected');
    const rejectedLook = await f.client.workflow.getHandle(taskWorkflowId(taskId)).describe();
    await f.fleet.cancel(filler.taskId);
    await f.waitForStatus(filler.taskId, 'cancelled');
    const { runners, calls } = recordingRunners();
    await f.addHost('h1', [{ deviceId: 'd1' }], { runners });
    const a = await f.fleet.submit({ taskId, goal: 'once [sim duration=50]' });
    assert.equal(a.taskId, taskId);
    assert.equal((await f.fleet.wait(taskId, { timeoutMs: 30_000 })).status, 'done');
    // Caller B looked while the id was still rejected and starts only now (a stall between its look
    // and its start): the server refuses the start, and B gets the recorded result.
    const viewB = await new FleetClient(lookedEarlier(f.client, taskWorkflowId(taskId), rejectedLook), f.config).submit(
      {
        taskId,
        goal: 'once [sim duration=50]',
      },
    );
    assert.equal(viewB.status, 'done');
    await sleep(300);
    assert.equal(calls.filter((c) => c.taskId === taskId).length, 1, 'it ran once');
    assert.equal(await eventually(async () => ((await runsOf(taskId)) === 2 ? 2 : undefined), 'visibility'), 2);
  });

  it('Exponential backoff between attempts, per task, with config defaults', async () => {
    const backoff = { initialMs: 1_000, multiplier: 2, maxMs: 10_000 };
    f = await startFleet('backoff', {
      taskDefaults: {
        maxAttempts: 3,
        maxDispatchFailures: 3,
        backoff,
        ackTimeoutMs: 10_000,
        leaseTimeoutMs: 2_000,
        executionTimeoutMs: 60_000,
      },
    });
    await f.addHost('h1', [{ deviceId: 'd1' }]);
    const { taskId, policy } = await f.fleet.submit({ goal: 'flaky [sim duration=50 outcome=fail-retryable]' });
    assert.deepEqual(policy.backoff, backoff, 'defaults come from configuration');
    const waiting = await f.waitFor(taskId, (t) => t.nextAttemptAt !== undefined, 'a visible next-attempt time');
    assert.equal(waiting.status, 'queued');
    assert.equal(waiting.attempts.length, 1);
    const t = await f.waitForStatus(taskId, 'failed', 30_000);
    assert.equal(t.attempts.length, 3);
    assert.ok(t.attempts.every((a) => a.outcome === 'retryable_failure'));
    const gap1 = t.attempts[1].assignedAt - t.attempts[0].endedAt!;
    const gap2 = t.attempts[2].assignedAt - t.attempts[1].endedAt!;
    assert.ok(gap1 >= 1_000, `first backoff ${gap1} ms >= 1000`);
    assert.ok(gap2 >= 2_000, `second backoff ${gap2} ms >= 2000 (doubled)`);
  });

  it('Cancel before assignment: cancelled, no device touched', async () => {
    f = await startFleet('cancel-early');
    const { taskId } = await f.fleet.submit({ goal: 'never runs' });
    await f.fleet.cancel(taskId);
    const t = await f.waitForStatus(taskId, 'cancelled');
    assert.equal(t.attempts.length, 0);
    assert.equal(t.result?.status, 'cancelled');
    await eventually(async () => ((await f!.scheduler()).queue.length === 0 ? true : undefined), 'queue empty');
    const { runners, calls } = recordingRunners();
    await f.addHost('h1', [{ deviceId: 'd1' }], { runners });
    await eventually(async () => ((await f!.scheduler()).devices.length === 1 ? true : undefined), 'device known');
    await sleep(1_000);
    assert.equal(calls.length, 0);
    const d = await f.client.workflow.getHandle(deviceWorkflowId(f.hostId('h1'), 'd1')).query(deviceStateQuery);
    assert.equal(d.reservations, 0);
  });

  it('Cancel while running: the host runner is stopped, cancelled, no retry consumed, reservation released', async () => {
    f = await startFleet('cancel-run');
    const { runners, calls } = recordingRunners();
    await f.addHost('h1', [{ deviceId: 'd1' }], { runners });
    const { taskId } = await f.fleet.submit({ goal: 'forever [sim outcome=hang duration=200]' });
    await f.waitForStatus(taskId, 'running');
    await f.fleet.cancel(taskId);
    const t = await f.waitForStatus(taskId, 'cancelled');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].aborted, true, 'the runner saw the abort');
    assert.equal(t.attempts.length, 1);
    assert.equal(t.attempts[0].outcome, 'cancelled');
    const d = await f.client.workflow.getHandle(deviceWorkflowId(f.hostId('h1'), 'd1')).query(deviceStateQuery);
    assert.equal(d.current, undefined);
    assert.equal(d.recent.at(-1)?.releaseReason, 'cancelled');
    await sleep(1_000);
    assert.equal(calls.length, 1, 'no new attempt after cancel');
    await assertNoOverlappingReservations(f.client, [{ hostId: f.hostId('h1'), deviceId: 'd1' }]);
  });

  it('Cancel while the host is dead: cancelled once the lease runs out, no retry, reservation released', async () => {
    f = await startFleet('cancel-dead');
    const host = await f.spawnHost('h1', ['d1']);
    try {
      const { taskId } = await f.fleet.submit({
        goal: 'forever [sim outcome=hang]',
        policy: { leaseTimeoutMs: 2_000 },
      });
      await f.waitForStatus(taskId, 'running');
      host.kill('SIGKILL');
      await f.fleet.cancel(taskId);
      // The cancel shows at once, while the run waits for its lease to run out.
      const pending = await f.waitFor(taskId, (v) => v.cancelRequested, 'cancel requested shown');
      assert.equal(pending.status, 'running');
      const t = await f.waitForStatus(taskId, 'cancelled', 30_000);
      assert.equal(t.cancelRequested, true);
      assert.equal(t.attempts.length, 1, 'the lost lease did not start a retry');
      assert.equal(t.attempts[0].outcome, 'cancelled');
      const d = await eventually(async () => {
        const v = await f!.client.workflow.getHandle(deviceWorkflowId(f!.hostId('h1'), 'd1')).query(deviceStateQuery);
        return v.current === undefined ? v : undefined;
      }, 'device released');
      assert.equal(d.recent.at(-1)?.releaseReason, 'cancelled');
      // The pool still learns that the host went silent: its devices get no work until it proves alive.
      const inPool = (await f.scheduler()).devices.find((x) => x.deviceId === 'd1');
      assert.ok(inPool?.hostSuspectSince !== undefined, 'the silent host is presumed lost');
    } finally {
      host.kill('SIGKILL');
    }
  });

  it('Progress carries a monotonic sequence; an older report never overwrites a newer one', async () => {
    f = await startFleet('progress');
    await f.addHost('h1', [{ deviceId: 'd1' }]);
    const { taskId } = await f.fleet.submit({ goal: 'ticks [sim outcome=hang duration=150]' });
    const running = await f.waitFor(taskId, (t) => (t.progress?.seq ?? 0) >= 2, 'host progress');
    const seqs: number[] = [];
    for (let i = 0; i < 5; i++) {
      seqs.push((await f.fleet.get(taskId)).progress!.seq);
      await sleep(200);
    }
    assert.ok(
      seqs.every((s, i) => i === 0 || s >= seqs[i - 1]),
      `host progress is monotonic: ${seqs}`,
    );
    const cur = running.current!;
    const cred = await f.enroll('h1');
    const handle = f.client.workflow.getHandle(taskWorkflowId(taskId));
    const report = (seq: number, message: string) =>
      handle.executeUpdate(reportAttemptUpdate, {
        args: [
          signReport(cred, {
            taskId,
            attempt: cur.attempt,
            leaseId: cur.leaseId,
            hostId: cur.hostId,
            kind: 'progress',
            seq,
            message,
            at: Date.now(),
          }),
        ],
      });
    await report(1_000_000, 'newest');
    await report(3, 'older');
    await sleep(800); // the host keeps reporting lower sequence numbers meanwhile
    const t = await f.fleet.get(taskId);
    assert.equal(t.progress?.seq, 1_000_000);
    assert.equal(t.progress?.message, 'newest');
    await f.fleet.cancel(taskId);
  });
});
