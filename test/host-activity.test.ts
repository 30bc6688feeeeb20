/** Unit tests of the host's activity with MockActivityEnvironment (Temporal mocked: pure host logic). */
import assert from 'node:assert/strict';
import type { Client } from '@temporalio/client';
import { ActivityCancellationDetails, ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createHostActivities, type HostActivityDeps } from '../host-worker/activities';
import { DeviceClaims } from '../host-worker/claims';
import { generateHostCredential, publicKeys } from '../host-worker/identity';
import { SignDomain, verifySignature } from '../workflows/identity';
import { createSimRunners, simDevices } from '../host-worker/sim';
import type { RunContext, RunResult } from '../host-worker/runners';
import type { AttemptReport, HostAssignment, Sealed, SignedRunOutcome } from '../workflows/types';

const cred = generateHostCredential('h1');
const keys = publicKeys(cred);

function fakeClient(reports: AttemptReport[]): Client {
  const handle = { executeUpdate: async (_u: unknown, o: { args: [AttemptReport] }) => void reports.push(o.args[0]) };
  return { workflow: { getHandle: () => handle } } as unknown as Client;
}

function deps(over: Partial<HostActivityDeps> = {}, reports: AttemptReport[] = []): HostActivityDeps {
  const devices = new Map(
    simDevices([{ deviceId: 'd1' }, { deviceId: 'sick', health: 'unhealthy' }]).map((d) => [d.deviceId, d]),
  );
  return {
    credential: cred,
    client: fakeClient(reports),
    runners: createSimRunners({ defaultDurationMs: 20 }),
    devices: () => devices,
    progressIntervalMs: 10,
    claims: new DeviceClaims(),
    takeoverWaitMs: 1_000,
    ...over,
  };
}

const assignment = (over: Partial<HostAssignment> = {}): Sealed<HostAssignment> => ({
  sealedFor: { hostId: 'h1', box: keys.box },
  body: {
    taskId: 't1',
    attempt: 1,
    leaseId: 'lease-1',
    hostId: 'h1',
    deviceId: 'd1',
    work: { kind: 'goal', goal: 'go' },
    leaseTimeoutMs: 3_000,
    ...over,
  },
});

/** The outcome, after checking the host's signature the way the task workflow does. */
function verified(s: unknown, a = assignment()) {
  const { outcome, sig } = s as SignedRunOutcome;
  const { taskId, attempt, leaseId, hostId } = a.body;
  assert.ok(
    verifySignature(SignDomain.Result, { taskId, attempt, leaseId, hostId, outcome }, sig, keys.signing),
    'signed by the host',
  );
  return outcome;
}

describe('host activity (unit)', () => {
  const env = () => new MockActivityEnvironment({ workflowExecution: { workflowId: 'task/t1', runId: 'r' } });

  it('a run that ends within the report delay sends no report: its signed result carries the times', async () => {
    const reports: AttemptReport[] = [];
    const { runAssignment } = createHostActivities(deps({}, reports)); // default delay 1 s, run 20 ms
    const out = verified(await env().run(runAssignment, assignment()));
    assert.equal(out.status, 'done');
    assert.deepEqual(reports, [], 'no update for a short run');
    assert.ok(out.claimedAt <= out.startedAt! && out.startedAt! <= out.finishedAt);
    assert.ok(out.lastProgressSeq > 0, 'progress is counted in the result');
  });

  it('a longer run reports started (the claim riding on it) and progress in order, all signed', async () => {
    const reports: AttemptReport[] = [];
    const d = deps({ runners: createSimRunners({ defaultDurationMs: 400 }) }, reports);
    const { runAssignment } = createHostActivities({ ...d, reportDelayMs: 50 });
    const out = verified(await env().run(runAssignment, assignment()));
    assert.equal(out.status, 'done');
    assert.equal(reports[0].kind, 'started');
    assert.ok(reports[0].claimedAt! <= reports[0].at);
    assert.ok(!reports.some((r) => r.kind === 'claimed'));
    const seqs = reports.filter((r) => r.kind === 'progress').map((r) => r.seq!);
    assert.ok(seqs.length > 0 && seqs.every((s, i) => i === 0 || s > seqs[i - 1]));
    for (const { sig, ...body } of reports) {
      assert.equal(body.leaseId, 'lease-1');
      assert.ok(verifySignature(SignDomain.Report, body, sig, keys.signing));
    }
  });

  it('reports the claim on its own when the runner is slow to start', async () => {
    const reports: AttemptReport[] = [];
    const slowStart = createSimRunners({ defaultDurationMs: 20 });
    const runners = {
      ...slowStart,
      goal: {
        runGoal: async (goal: string, ctx: Parameters<typeof slowStart.goal.runGoal>[1]) => {
          await new Promise((r) => setTimeout(r, 300));
          return slowStart.goal.runGoal(goal, ctx);
        },
      },
    };
    const { runAssignment } = createHostActivities({ ...deps({ runners }, reports), reportDelayMs: 50 });
    verified(await env().run(runAssignment, assignment()));
    assert.deepEqual(
      reports.slice(0, 2).map((r) => r.kind),
      ['claimed', 'started'],
    );
  });

  it('a signature does not survive tampering with the outcome', async () => {
    const { runAssignment } = createHostActivities(deps());
    const s = (await env().run(runAssignment, assignment())) as SignedRunOutcome;
    const tampered = { ...s, outcome: { ...s.outcome, status: 'failed' as const } };
    assert.throws(() => verified(tampered), /signed by the host/);
  });

  it('refuses an assignment for another host as a signed dispatch failure', async () => {
    const { runAssignment } = createHostActivities(deps());
    // Signed as what it is (h1), so the task, which expects h2's signature, would not accept it either.
    const out = verified(await env().run(runAssignment, assignment({ hostId: 'h2' })), assignment());
    assert.deepEqual([out.status, out.dispatchFailure, out.retryable], ['failed', true, true]);
  });

  it('refuses an unhealthy or unknown device as a dispatch failure', async () => {
    const { runAssignment } = createHostActivities(deps());
    for (const deviceId of ['sick', 'nope']) {
      const a = assignment({ deviceId });
      const out = verified(await env().run(runAssignment, a), a);
      assert.deepEqual([out.status, out.dispatchFailure, out.reason], ['failed', true, 'device_unavailable']);
    }
  });

  it('a newer assignment for a device still held stops the runner there first, and never runs beside it', async () => {
    const order: string[] = [];
    const sim = createSimRunners({ defaultDurationMs: 5_000 });
    const runners = createSimRunners({});
    runners.goal = {
      async runGoal(goal, ctx) {
        order.push(`start ${ctx.taskId}`);
        try {
          return await sim.goal.runGoal(goal, ctx);
        } finally {
          order.push(`end ${ctx.taskId}`);
        }
      },
    };
    const { runAssignment } = createHostActivities(deps({ runners }));
    const first = env()
      .run(runAssignment, assignment())
      .catch((err: Error) => err);
    await new Promise((r) => setTimeout(r, 50));
    const second = assignment({
      taskId: 't2',
      leaseId: 'lease-2',
      work: { kind: 'goal', goal: 'go [sim duration=50]' },
    });
    const t0 = Date.now();
    const out = verified(await env().run(runAssignment, second), second);
    assert.equal(out.status, 'done');
    // The earlier runner was stopped (its attempt had ended on the server) before the second began.
    assert.match(String(await first), /lease superseded/);
    assert.deepEqual(order, ['start t1', 'end t1', 'start t2', 'end t2']);
    // The first run lasts 5 s from before t0: waiting it out would take at least 4.9 s.
    const elapsed = Date.now() - t0;
    assert.ok(elapsed < 4_500, `it did not wait out the first run (${elapsed} ms)`);
  });

  it('an earlier runner that does not stop within takeoverWaitMs keeps the device: the newer one is refused', async () => {
    const order: string[] = [];
    const runners = createSimRunners({});
    runners.goal = {
      async runGoal(goal, ctx) {
        ctx.started();
        order.push(`start ${ctx.taskId}`);
        await new Promise((r) => setTimeout(r, goal === 'stubborn' ? 600 : 10)); // ignores ctx.signal
        order.push(`end ${ctx.taskId}`);
        return { status: 'done' };
      },
    };
    const { runAssignment } = createHostActivities(deps({ runners, takeoverWaitMs: 200 }));
    const first = env()
      .run(runAssignment, assignment({ work: { kind: 'goal', goal: 'stubborn' } }))
      .catch((err: Error) => err);
    await new Promise((r) => setTimeout(r, 50));
    const second = assignment({ taskId: 't2', leaseId: 'lease-2' });
    const refused = verified(await env().run(runAssignment, second), second);
    assert.deepEqual([refused.status, refused.dispatchFailure, refused.reason], ['failed', true, 'device_unavailable']);
    assert.match(refused.message ?? '', /still busy/);
    assert.match(String(await first), /lease superseded/); // asked to stop: its result is not offered
    const third = assignment({ taskId: 't3', leaseId: 'lease-3' });
    assert.equal(verified(await env().run(runAssignment, third), third).status, 'done');
    assert.deepEqual(order, ['start t1', 'end t1', 'start t3', 'end t3'], 'never two runs at once');
  });

  it('a device that went bad while the newer assignment waited for it is refused, not run on', async () => {
    const devices = new Map(simDevices([{ deviceId: 'd1' }]).map((d) => [d.deviceId, d]));
    const runners = createSimRunners({});
    runners.goal = {
      async runGoal(_goal, ctx) {
        ctx.started();
        await new Promise((r) => setTimeout(r, 300)); // slow to stop once asked
        return { status: 'done' };
      },
    };
    const { runAssignment } = createHostActivities(deps({ runners, devices: () => devices }));
    const first = env()
      .run(runAssignment, assignment())
      .catch((err: Error) => err);
    await new Promise((r) => setTimeout(r, 50));
    const second = assignment({ taskId: 't2', leaseId: 'lease-2' });
    const out = env().run(runAssignment, second);
    await new Promise((r) => setTimeout(r, 50));
    devices.set('d1', { ...devices.get('d1')!, health: 'unhealthy' }); // unplugged meanwhile
    const refused = verified(await out, second);
    assert.deepEqual([refused.status, refused.dispatchFailure, refused.reason], ['failed', true, 'device_unavailable']);
    assert.match(refused.message ?? '', /unhealthy/);
    assert.match(String(await first), /lease superseded/);
  });

  it('device claims: the newest of two waiting claimants gets the device, the older one gives up', async () => {
    const claims = new DeviceClaims();
    const stops: string[] = [];
    const holder = (name: string) => ({ stop: () => void stops.push(name) });
    const [a, b, c] = [holder('a'), holder('b'), holder('c')];
    const never = new AbortController().signal;
    assert.equal(await claims.claim('d1', a, 1_000, never), true);
    const bWaits = claims.claim('d1', b, 5_000, never);
    const cWaits = claims.claim('d1', c, 5_000, never);
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(stops, ['a', 'a'], 'both asked the holder to stop');
    claims.release('d1', b); // not b's to give back: nothing happens
    assert.ok(claims.has('d1'));
    claims.release('d1', a);
    assert.deepEqual([await bWaits, await cWaits], [false, true]);
    claims.release('d1', c);
    assert.equal(claims.has('d1'), false);
  });

  it('an unknown workflow definition is a signed terminal failure', async () => {
    const { runAssignment } = createHostActivities(deps());
    const a = assignment({ work: { kind: 'workflow', definition: 'nope' } });
    const out = verified(await env().run(runAssignment, a), a);
    assert.deepEqual([out.status, out.retryable, out.reason], ['failed', false, 'unknown_definition']);
  });

  it('a short run that crashes still tells the task when it started and its last progress line', async () => {
    const reports: AttemptReport[] = [];
    const sim = createSimRunners();
    const runners = {
      ...sim,
      goal: {
        runGoal: async (_goal: string, ctx: Parameters<typeof sim.goal.runGoal>[1]) => {
          ctx.started();
          ctx.progress('flashing');
          throw new Error('adb went away');
        },
      },
    };
    const { runAssignment } = createHostActivities(deps({ runners }, reports));
    const out = verified(await env().run(runAssignment, assignment()));
    assert.deepEqual([out.status, out.retryable, out.reason], ['failed', true, 'runner_failed']);
    assert.deepEqual(reports, [], 'no report within the delay');
    assert.ok(out.startedAt! >= out.claimedAt);
    assert.deepEqual([out.lastProgressSeq, out.lastProgress], [1, 'flashing']);
  });

  it('a cancel saying the server no longer has the attempt (not found, timed out) also kills the runner at once; a requested cancel leaves it its grace', async () => {
    for (const [reason, details, killed] of [
      ['NOT_FOUND', { notFound: true }, true],
      ['TIMED_OUT', { timedOut: true }, true],
      ['CANCELLED', { cancelRequested: true }, false],
    ] as const) {
      let kill: AbortSignal | undefined;
      const runners = createSimRunners();
      const runGoal = (_goal: string, ctx: RunContext) =>
        new Promise<RunResult>((resolve) => {
          kill = ctx.kill;
          ctx.started();
          // Winds down slowly after the stop, unless killed.
          ctx.signal.addEventListener('abort', () => setTimeout(() => resolve({ status: 'done' }), 300));
        });
      const { runAssignment } = createHostActivities(deps({ runners: { ...runners, goal: { runGoal } } }));
      const e = env();
      const run = e.run(runAssignment, assignment());
      await new Promise((r) => setTimeout(r, 100));
      e.cancel(reason, new ActivityCancellationDetails(details));
      await assert.rejects(run, (err: unknown) => err instanceof CancelledFailure || err instanceof ApplicationFailure);
      assert.equal(kill?.aborted, killed, reason);
    }
  });

  it('cancellation (task cancelled or lease lost) aborts the runner and ends as cancelled', async () => {
    const { runAssignment } = createHostActivities(deps());
    const e = env();
    const run = e.run(runAssignment, assignment({ work: { kind: 'goal', goal: 'x [sim outcome=hang duration=20]' } }));
    await new Promise((r) => setTimeout(r, 100));
    e.cancel();
    await assert.rejects(run, (err: unknown) => err instanceof CancelledFailure);
  });
});
