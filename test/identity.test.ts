/**
 * Host identity (seed 002, architecture "Host identity"): a host acts only for itself. Snapshots,
 * reports and results are signed with the enrolled key; task payloads are sealed to the host.
 */
import assert from 'node:assert/strict';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { Worker, type WorkerOptions } from '@temporalio/worker';
import { enrollHost, HostKeysConflictError, sendHostChange } from '../control-plane/hosts';
import { createHostCodec, SEALED_ENCODING } from '../control-plane/sealing';
import { generateHostCredential, publicKeys, sign } from '../host-worker/identity';
import { SignDomain } from '../workflows/identity';
import { deviceWorkflowId, hostTaskQueue, hostWorkflowId, schedulerWorkflowId, taskWorkflowId } from '../workflows/ids';
import { assertNoOverlappingReservations, deviceReservationIntervals } from '../control-plane/audit';
import {
  assignmentSignal,
  dequeueTaskSignal,
  deviceStateQuery,
  hostDevicesSignal,
  releaseDeviceSignal,
  hostSnapshotUpdate,
  hostStateQuery,
  registerHostKeysSignal,
  reportAttemptUpdate,
  retireHostSignal,
} from '../workflows/messages';
import type { HostSnapshot } from '../workflows/types';
import { eventually, sessionRunning, signReport, startFleet, type Fleet } from './helpers/fleet';
import { testEnv } from './setup';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const causeMatches = (re: RegExp) => (err: unknown) =>
  err instanceof WorkflowUpdateFailedError && re.test(String(err.cause?.message));

/** A worker polling another host's queue (`hostId`'s), as anything with namespace access could. */
const rogueWorker = (hostId: string, opts: Pick<WorkerOptions, 'activities' | 'dataConverter'>) => {
  const env = testEnv();
  return Worker.create({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue: hostTaskQueue(hostId),
    ...opts,
  });
};

describe('host identity', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  const snapshotOf = (hostId: string, pool: string, over: Partial<HostSnapshot> = {}): HostSnapshot => ({
    hostId,
    pool,
    devices: [{ deviceId: 'evil', driverType: 'sim', tags: [], state: 'idle', health: 'good' }],
    sentAt: Date.now(),
    seq: 1,
    bootId: 'forged',
    ...over,
  });
  const historyLength = async (workflowId: string) =>
    (await f!.client.workflow.getHandle(workflowId).describe()).historyLength;

  it('Impersonation: a snapshot for host A signed with host B credentials is rejected; A is unchanged', async () => {
    f = await startFleet('impersonate');
    await f.addHost('A', [{ deviceId: 'a1' }]);
    const credB = await f.enroll('B');
    const handleA = f.client.workflow.getHandle(hostWorkflowId(f.hostId('A')));
    const before = await handleA.query(hostStateQuery);
    const lengthBefore = await historyLength(hostWorkflowId(f.hostId('A')));
    const forged = snapshotOf(f.hostId('A'), f.pool);
    await assert.rejects(
      handleA.executeUpdate(hostSnapshotUpdate, {
        args: [{ snapshot: forged, sig: sign(credB, SignDomain.Snapshot, forged) }],
      }),
      (err: unknown) => err instanceof WorkflowUpdateFailedError && /does not verify/.test(String(err.cause?.message)),
    );
    // B signing a snapshot that claims to be B, sent to A's workflow: refused as well.
    const asB = snapshotOf(f.hostId('B'), f.pool);
    await assert.rejects(
      handleA.executeUpdate(hostSnapshotUpdate, {
        args: [{ snapshot: asB, sig: sign(credB, SignDomain.Snapshot, asB) }],
      }),
      (err: unknown) => err instanceof WorkflowUpdateFailedError && /sent to host/.test(String(err.cause?.message)),
    );
    const after = await handleA.query(hostStateQuery);
    assert.deepEqual(after.devices, before.devices);
    assert.ok(!after.devices.some((d) => d.deviceId === 'evil'));
    // Rejected in the validator: nothing about it reached A's history (its own snapshots may have).
    const { events } = await handleA.fetchHistory();
    assert.ok(!JSON.stringify(events).includes('"forged"'), 'no forged snapshot in history');
    assert.ok((await historyLength(hostWorkflowId(f.hostId('A')))) >= lengthBefore);
  });

  it('Replayed snapshot: the same correctly signed snapshot is accepted once', async () => {
    f = await startFleet('replay');
    const cred = await f.enroll('A');
    const handle = f.client.workflow.getHandle(hostWorkflowId(f.hostId('A')));
    const s = snapshotOf(f.hostId('A'), f.pool, { bootId: 'boot-1', seq: 7 });
    const signed = { snapshot: s, sig: sign(cred, SignDomain.Snapshot, s) };
    await handle.executeUpdate(hostSnapshotUpdate, { args: [signed] });
    await assert.rejects(handle.executeUpdate(hostSnapshotUpdate, { args: [signed] }), causeMatches(/not newer/));
    // A key that was never enrolled (a fresh credential for the same id) is refused.
    const stranger = generateHostCredential(f.hostId('A'));
    const s2 = snapshotOf(f.hostId('A'), f.pool, { bootId: 'boot-1', seq: 8 });
    await assert.rejects(
      handle.executeUpdate(hostSnapshotUpdate, {
        args: [{ snapshot: s2, sig: sign(stranger, SignDomain.Snapshot, s2) }],
      }),
      causeMatches(/does not verify/),
    );
  });

  it('Forged and replayed reports: signed by another host, tampered, or for a superseded lease: rejected', async () => {
    f = await startFleet('forged-report');
    await f.addHost('A', [{ deviceId: 'a1' }]);
    const credA = await f.enroll('A');
    const credB = await f.enroll('B');
    const { taskId } = await f.fleet.submit({ goal: 'long [sim outcome=hang duration=200]' });
    const t = await f.waitForStatus(taskId, 'running');
    const cur = t.current!;
    const handle = f.client.workflow.getHandle(taskWorkflowId(taskId));
    const base = {
      taskId,
      attempt: cur.attempt,
      leaseId: cur.leaseId,
      hostId: cur.hostId,
      kind: 'progress' as const,
      at: Date.now(),
    };
    const rejectedAs = (type: string) => (err: unknown) =>
      err instanceof WorkflowUpdateFailedError &&
      err.cause?.name === 'ApplicationFailure' &&
      (err.cause as { type?: string }).type === type;
    await assert.rejects(
      handle.executeUpdate(reportAttemptUpdate, { args: [signReport(credB, { ...base, seq: 900, message: 'by B' })] }),
      rejectedAs('BadSignature'),
    );
    const tampered = { ...signReport(credA, { ...base, seq: 901, message: 'genuine' }), message: 'tampered' };
    await assert.rejects(handle.executeUpdate(reportAttemptUpdate, { args: [tampered] }), rejectedAs('BadSignature'));
    await assert.rejects(
      handle.executeUpdate(reportAttemptUpdate, {
        args: [signReport(credA, { ...base, leaseId: 'older-lease', seq: 902, message: 'stale' })],
      }),
      rejectedAs('StaleLease'),
    );
    const now = await f.fleet.get(taskId);
    assert.ok(!['by B', 'tampered', 'stale'].includes(now.progress?.message ?? ''));
    await f.fleet.cancel(taskId);
  });

  it("B's worker on A's queue cannot read or complete A's task; the task retries and completes through A", async () => {
    f = await startFleet('rogue');
    const a = await f.spawnHost('A', ['a1'], { hostTimeoutMs: 60_000 });
    await eventually(async () => ((await f!.scheduler()).devices.length === 1 ? true : undefined), 'A online');
    const credB = await f.enroll('B');
    // A is gone (SIGKILL closes its connections, so no poll of A's stays open on the server; a
    // SIGSTOPped A could still be handed the task): only the rogue worker can take the attempt.
    a.kill('SIGKILL');
    await a.exited;
    let rogueRan = 0;
    const rogue = await rogueWorker(f.hostId('A'), {
      dataConverter: { payloadCodecs: [createHostCodec(credB.hostId, credB.boxKey)] },
      activities: {
        async runAssignment() {
          rogueRan++;
          return {
            outcome: { status: 'done', retryable: false, claimedAt: 0, finishedAt: 0, lastProgressSeq: 0 },
            sig: '00',
          };
        },
      },
    });
    const { taskId } = await f.fleet.submit({ goal: 'secret goal text 7f3a [sim duration=100]' });
    const afterRogue = await rogue.runUntil(() =>
      f!.waitFor(
        taskId,
        (t) => t.attempts.length >= 1 && t.attempts[0].outcome !== undefined,
        'attempt 1 taken by the rogue',
      ),
    );
    assert.equal(rogueRan, 0, 'the rogue could not even decode the sealed assignment');
    assert.equal(afterRogue.attempts[0].outcome, 'retryable_failure');
    await f.spawnHost('A', ['a1'], { restart: true, hostTimeoutMs: 60_000 });
    const done = await f.waitForStatus(taskId, 'done', 30_000);
    assert.equal(done.attempts.at(-1)?.hostId, f.hostId('A'));
    assert.match(done.result?.output ?? '', /simulated run on a1/);
    // The task's payload is sealed in history: the goal text is nowhere in clear.
    const { events } = await f.client.workflow.getHandle(taskWorkflowId(taskId)).fetchHistory();
    const scheduled = events!.filter((e) => e.activityTaskScheduledEventAttributes);
    assert.ok(scheduled.length >= 2);
    for (const e of scheduled) {
      const p = e.activityTaskScheduledEventAttributes!.input!.payloads![0];
      assert.equal(Buffer.from(p.metadata!.encoding!).toString(), SEALED_ENCODING);
      assert.ok(!Buffer.from(p.data!).toString('latin1').includes('secret goal text 7f3a'));
    }
  });

  it("A rogue worker holding A's liveness session cannot take A offline with a forged 'stopping'", async () => {
    f = await startFleet('rogue-session');
    const cred = await f.enroll('A', { hostTimeoutMs: 2_000 });
    const handle = f.client.workflow.getHandle(hostWorkflowId(f.hostId('A')));
    // A says it is alive (signed) but runs no worker: the session waits on A's queue for a poller.
    const s = snapshotOf(f.hostId('A'), f.pool, { devices: [], bootId: 'boot-1', seq: 1 });
    await handle.executeUpdate(hostSnapshotUpdate, {
      args: [{ snapshot: s, sig: sign(cred, SignDomain.Snapshot, s) }],
    });
    assert.equal((await handle.query(hostStateQuery)).online, true);
    const credB = await f.enroll('B');
    let ended = 0;
    const rogue = await rogueWorker(f.hostId('A'), {
      activities: {
        async hostSession() {
          ended++;
          // Signed, but by B, and a well-formed signature of garbage: neither verifies with A's key.
          const body = { hostId: f!.hostId('A'), runId: 'x', activityId: 'session-1', stopping: true };
          return ended === 1
            ? { stopping: true, sig: sign(credB, SignDomain.Session, body) }
            : { stopping: true, sig: 'ab'.repeat(64) };
        },
      },
    });
    const t0 = Date.now();
    await rogue.runUntil(async () => {
      await eventually(async () => (ended >= 2 ? true : undefined), 'two sessions ended by the rogue');
      await sleep(4_000);
    });
    const ranMs = Date.now() - t0;
    // Both forged ends reached A's history, and A is still online: only A's key can say it stops.
    const { events } = await handle.fetchHistory();
    assert.ok(events!.filter((e) => e.activityTaskCompletedEventAttributes).length >= 2);
    assert.equal((await handle.query(hostStateQuery)).online, true);
    // Sessions that end at once do not become a loop: at most one per lease (2 s here).
    assert.ok(ended <= Math.ceil(ranMs / 2_000) + 1, `${ended} sessions in ${ranMs} ms`);
  });

  it('A look-alike host workflow for A (another id, its own keys) can publish nothing for A', async () => {
    f = await startFleet('look-alike');
    const host = await f.addHost('A', [{ deviceId: 'a1' }], { hostTimeoutMs: 60_000, snapshotIntervalMs: 60_000 });
    const realA = f.client.workflow.getHandle(hostWorkflowId(f.hostId('A')));
    await eventually(() => sessionRunning(realA), "A's own session running");
    // Someone who may start workflows on the control queue starts a host workflow for A under
    // another id, with keys of their own, and reports an empty device list for A through it.
    const mallory = generateHostCredential(f.hostId('A'));
    const lookAlike = await f.client.workflow.start('hostWorkflow', {
      workflowId: `not-host/${f.hostId('A')}`,
      taskQueue: f.config.controlTaskQueue,
      args: [{ hostId: f.hostId('A'), pool: f.pool, hostTimeoutMs: 60_000, keys: publicKeys(mallory) }],
    });
    const s = snapshotOf(f.hostId('A'), f.pool, { devices: [], bootId: 'mallory', seq: 1 });
    await lookAlike.executeUpdate(hostSnapshotUpdate, {
      args: [{ snapshot: s, sig: sign(mallory, SignDomain.Snapshot, s) }],
    });
    // Its publication is refused (syncHost speaks only for host/<hostId>) and it fails; whatever
    // else it scheduled on A's queue, A's agent refuses too (test/host/session.test.ts).
    await assert.rejects(lookAlike.result(), (err: Error) =>
      /not by host\//.test(String((err as { cause?: { cause?: Error } }).cause?.cause?.message)),
    );
    const { events } = await lookAlike.fetchHistory();
    for (const e of events!.filter((x) => x.activityTaskFailedEventAttributes)) {
      assert.match(e.activityTaskFailedEventAttributes!.failure!.message ?? '', /not by host\//);
    }
    // A's devices, session and work are untouched.
    const pool = await f.scheduler();
    assert.deepEqual(
      pool.devices.map((d) => `${d.hostId}/${d.deviceId}`),
      [`${f.hostId('A')}/a1`],
    );
    assert.equal(await sessionRunning(realA), true);
    const t = await f.fleet.submit({ goal: 'x [sim duration=50]' });
    assert.equal((await f.fleet.wait(t.taskId)).status, 'done');
    await host.stop();
  });
});

describe('host identity: forged signals', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });
  // testEnv().client has no signal key: what a host (or anything else with namespace access) holds.
  const stranger = () => testEnv().client;
  const markers = async (workflowId: string) => {
    let n = 0;
    for (const e of (await f!.client.workflow.getHandle(workflowId).fetchHistory()).events ?? []) {
      if (e.markerRecordedEventAttributes?.markerName === 'core_patch') n++;
    }
    return n;
  };

  it("A signal without the control plane's tag changes nothing: another host's device list, a task's assignment, a forged tag, a tagged payload sent again under another name", async () => {
    f = await startFleet('forged-signals');
    await f.addHost('A', [{ deviceId: 'a1' }]);
    await eventually(async () => ((await f!.scheduler()).devices.length === 1 ? true : undefined), 'A known');
    const credB = await f.enroll('B');
    const scheduler = stranger().workflow.getHandle(schedulerWorkflowId(f.pool));
    // 1. Host B's credential tells the pool that A's device is gone and that B has one.
    const devices = (await f.scheduler()).devices.map((d) => `${d.hostId}/${d.deviceId}`);
    await scheduler.signal(hostDevicesSignal, {
      hostId: f.hostId('A'),
      online: true,
      drained: false,
      drainedDevices: [],
      devices: [],
      version: 1e9,
      keys: publicKeys(credB),
    });
    await scheduler.signal(hostDevicesSignal, {
      hostId: credB.hostId,
      online: true,
      drained: false,
      drainedDevices: [],
      devices: [{ deviceId: 'evil', driverType: 'sim', tags: [], state: 'idle', health: 'good' }],
      version: 1,
      keys: publicKeys(credB),
    });
    // A query waits for the workflow task that took the signals.
    assert.deepEqual(
      (await f.scheduler()).devices.map((d) => `${d.hostId}/${d.deviceId}`),
      devices,
    );
    // 2. A queued task (no device matches) is told it has B's device.
    const view = await f.fleet.submit({
      goal: 'secret goal [sim duration=50]',
      constraints: { driverType: 'nowhere' },
    });
    const task = stranger().workflow.getHandle(taskWorkflowId(view.taskId));
    await task.signal(assignmentSignal, {
      taskId: view.taskId,
      attempt: 1,
      leaseId: 'forged-lease',
      hostId: credB.hostId,
      deviceId: 'evil',
      reservedAt: Date.now(),
      hostKeys: publicKeys(credB),
    });
    // 3. The same through the raw API, with the codec's own marks set by hand.
    const payload = (value: unknown) => ({
      metadata: {
        encoding: Buffer.from('json/plain'),
        'fleet-auth': Buffer.from('1'),
        'fleet-mac': Buffer.alloc(32, 7),
      },
      data: Buffer.from(JSON.stringify(value)),
    });
    await stranger().workflowService.signalWorkflowExecution({
      namespace: testEnv().namespace ?? 'default',
      workflowExecution: { workflowId: taskWorkflowId(view.taskId) },
      signalName: assignmentSignal.name,
      input: {
        payloads: [
          payload({
            taskId: view.taskId,
            attempt: 1,
            leaseId: 'forged-lease-2',
            hostId: credB.hostId,
            deviceId: 'evil',
            reservedAt: Date.now(),
            hostKeys: publicKeys(credB),
          }),
        ],
      },
    });
    const after = await f.fleet.get(view.taskId);
    assert.equal(after.status, 'queued');
    assert.deepEqual(after.attempts, []);
    // Refusing wrote the patch marker once per run (runs that meet no forgery carry none).
    assert.equal(await markers(taskWorkflowId(view.taskId)), 1);
    // The same signals from the control plane's own client are taken.
    await f.client.workflow.getHandle(schedulerWorkflowId(f.pool)).signal(dequeueTaskSignal, { taskId: view.taskId });
    assert.equal((await f.scheduler()).queue.length, 0);
    await f.fleet.cancel(view.taskId);
    // An ordinary task through the same fleet: nothing refused, no marker.
    const ok = await f.fleet.submit({ goal: 'fine [sim duration=50]' });
    assert.equal((await f.fleet.wait(ok.taskId)).status, 'done');
    assert.equal(await markers(taskWorkflowId(ok.taskId)), 0);
    // 4. A device told by a stranger that its holder is done keeps it, and the audit of its history
    // (what the invariant checks read) does not count the forged release either.
    const held = await f.fleet.submit({ goal: 'hold [sim outcome=hang]' });
    await f.waitForStatus(held.taskId, 'running');
    const { leaseId } = (await f.fleet.get(held.taskId)).attempts[0];
    const device = deviceWorkflowId(f.hostId('A'), 'a1');
    await stranger().workflow.getHandle(device).signal(releaseDeviceSignal, { leaseId, reason: 'done' });
    assert.equal((await f.client.workflow.getHandle(device).query(deviceStateQuery)).current?.leaseId, leaseId);
    const intervals = await deviceReservationIntervals(f.client, f.hostId('A'), 'a1');
    const open = intervals.find((iv) => iv.leaseId === leaseId);
    assert.ok(open && open.end === undefined, 'the forged release ended nothing in the audit');
    // 5. What the control plane did tag, sent back: the device's own reservation (a valid tag for
    // `reserveDevice`) under another signal's name, and its workflow input (no tag) as a signal.
    const events = (await f.client.workflow.getHandle(device).fetchHistory()).events ?? [];
    const reserved = events.find((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'reserveDevice');
    const started = events.find((e) => e.workflowExecutionStartedEventAttributes);
    assert.ok(reserved?.workflowExecutionSignaledEventAttributes?.input?.payloads?.[0]?.metadata?.['fleet-mac']);
    for (const [signalName, input] of [
      ['retireDevice', reserved!.workflowExecutionSignaledEventAttributes!.input],
      ['releaseDevice', reserved!.workflowExecutionSignaledEventAttributes!.input],
      ['retireDevice', started!.workflowExecutionStartedEventAttributes!.input],
    ] as const) {
      await stranger().workflowService.signalWorkflowExecution({
        namespace: testEnv().namespace ?? 'default',
        workflowExecution: { workflowId: device },
        signalName,
        input,
      });
    }
    const still = await f.client.workflow.getHandle(device).query(deviceStateQuery);
    assert.equal(still.retiring, undefined, 'not retired by a payload sent again under another name');
    assert.equal(still.current?.leaseId, leaseId);
    await f.fleet.cancel(held.taskId);
  });
  it('A removal sent again changes nothing: neither a host enrolled anew nor its devices are retired by the old one', async () => {
    f = await startFleet('removal-again');
    const first = await f.addHost('R', [{ deviceId: 'r1' }]);
    await first.stop();
    const hostR = f.client.workflow.getHandle(hostWorkflowId(f.hostId('R')));
    const device = f.client.workflow.getHandle(deviceWorkflowId(f.hostId('R'), 'r1'));
    await eventually(async () => (!(await hostR.query(hostStateQuery)).online ? true : undefined), 'R offline');
    await sendHostChange(f.client, f.hostId('R'), retireHostSignal, { reason: 'test' });
    for (const h of [hostR, device]) {
      await eventually(async () => ((await h.describe()).status.name === 'COMPLETED' ? true : undefined), 'ended');
    }
    const signalled = async (h: typeof hostR, name: string) =>
      ((await h.fetchHistory()).events ?? []).find(
        (e) => e.workflowExecutionSignaledEventAttributes?.signalName === name,
      )!.workflowExecutionSignaledEventAttributes!.input;
    const oldRemoval = await signalled(hostR, 'retireHost');
    const oldRetirement = await signalled(device, 'retireDevice');
    // Enrolled anew: a new host workflow and a new device workflow under the same ids.
    await f.addHost('R', [{ deviceId: 'r1' }]);
    await eventually(async () => ((await f!.scheduler()).devices.length === 1 ? true : undefined), 'R back');
    for (const [workflowId, signalName, input] of [
      [hostWorkflowId(f.hostId('R')), 'retireHost', oldRemoval],
      [deviceWorkflowId(f.hostId('R'), 'r1'), 'retireDevice', oldRetirement],
    ] as const) {
      await stranger().workflowService.signalWorkflowExecution({
        namespace: testEnv().namespace ?? 'default',
        workflowExecution: { workflowId },
        signalName,
        input,
      });
    }
    const host = await hostR.query(hostStateQuery);
    assert.deepEqual([host.retired, host.online], [undefined, true]);
    assert.equal((await device.query(deviceStateQuery)).retiring, undefined);
    const { taskId } = await f.fleet.submit({ goal: 'after [sim duration=50]' });
    assert.equal((await f.fleet.wait(taskId)).status, 'done');
  });
  it('A host removed while its device is held and enrolled again: the device serves the new enrolment once the old lease ends, never both at once', async function () {
    this.timeout(120_000);
    f = await startFleet('removal-held');
    const hostId = f.hostId('R');
    const first = await f.addHost('R', [{ deviceId: 'r1' }]);
    const holder = await f.fleet.submit({ goal: 'holder [sim outcome=hang]' });
    const lease = (await f.waitForStatus(holder.taskId, 'running')).current!.leaseId;
    // Terminated: nothing releases the device before its hold deadline (an hour by default).
    await f.client.workflow.getHandle(taskWorkflowId(holder.taskId)).terminate('test: gone without a release');
    await first.stop();
    const hostR = f.client.workflow.getHandle(hostWorkflowId(hostId));
    const device = f.client.workflow.getHandle(deviceWorkflowId(hostId, 'r1'));
    await eventually(async () => (!(await hostR.query(hostStateQuery)).online ? true : undefined), 'R offline');
    await sendHostChange(f.client, hostId, retireHostSignal, { reason: 'test' });
    await eventually(async () => ((await hostR.describe()).status.name === 'COMPLETED' ? true : undefined), 'ended');
    // The host workflow is gone; its device workflow still runs, retiring, held by the old lease.
    const retiring = await device.query(deviceStateQuery);
    assert.deepEqual([retiring.retiring, retiring.current?.leaseId], [true, lease]);
    const oldRetirement = ((await device.fetchHistory()).events ?? []).find(
      (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'retireDevice',
    )!.workflowExecutionSignaledEventAttributes!.input;
    // Enrolled anew: the new host workflow's first publish finds that device workflow still running.
    await f.addHost('R', [{ deviceId: 'r1' }]);
    await eventually(async () => ((await f!.scheduler()).devices.length === 1 ? true : undefined), 'R back');
    const pinned = await f.fleet.submit({ goal: 'after [sim duration=50]', constraints: { hostId, deviceId: 'r1' } });
    // The pool has it queued, and r1 is held (by the old lease) in its view or refused it: it waits.
    await eventually(async () => {
      const v = await f!.scheduler();
      const queued = v.queue.some((q) => q.taskId === pinned.taskId);
      const r1 = v.devices.find((d) => d.hostId === hostId && d.deviceId === 'r1');
      return queued && r1 !== undefined ? true : undefined;
    }, 'the pinned task queued in the pool, with r1 known');
    await sleep(1_000);
    assert.equal((await f.fleet.get(pinned.taskId)).status, 'queued', 'the old lease is honoured');
    assert.equal((await device.query(deviceStateQuery)).current?.leaseId, lease);
    // Its holder lets go (or the pool's sweep expires it at its deadline): the device serves R again.
    await device.signal(releaseDeviceSignal, { leaseId: lease, reason: 'done' });
    const done = await f.fleet.wait(pinned.taskId, { timeoutMs: 30_000 });
    assert.equal(done.status, 'done');
    assert.equal(done.attempts[0].deviceId, 'r1');
    assert.equal((await device.describe()).status.name, 'RUNNING');
    const after = await device.query(deviceStateQuery);
    assert.deepEqual([after.retiring, after.current], [undefined, undefined]);
    await assertNoOverlappingReservations(f.client, [{ hostId, deviceId: 'r1' }]);
    // The old removal's retirement, sent again, does not retire the adopted device.
    await stranger().workflowService.signalWorkflowExecution({
      namespace: testEnv().namespace ?? 'default',
      workflowExecution: { workflowId: deviceWorkflowId(hostId, 'r1') },
      signalName: 'retireDevice',
      input: oldRetirement,
    });
    // Handled: a workflow task completed after the signal arrived.
    await eventually(async () => {
      const events = (await device.fetchHistory()).events ?? [];
      const at = events.map((e) => e.workflowExecutionSignaledEventAttributes?.signalName).lastIndexOf('retireDevice');
      return events.slice(at + 1).some((e) => e.workflowTaskCompletedEventAttributes) ? true : undefined;
    }, 'the old retirement handled');
    assert.equal((await device.query(deviceStateQuery)).retiring, undefined);
    const again = await f.fleet.submit({ goal: 'again [sim duration=50]', constraints: { hostId, deviceId: 'r1' } });
    assert.equal((await f.fleet.wait(again.taskId, { timeoutMs: 30_000 })).status, 'done');
  });
});

describe('host identity: forged results', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.stop();
    f = undefined;
  });

  it('Rotated keys cut the running host off: offline, no assignments, until it restarts with the new credential', async () => {
    f = await startFleet('rotate');
    const old = await f.addHost('A', [{ deviceId: 'a1' }], { snapshotIntervalMs: 300, discoveryIntervalMs: 300 });
    const hostA = f.client.workflow.getHandle(hostWorkflowId(f.hostId('A')));
    await eventually(async () => ((await hostA.query(hostStateQuery)).online ? true : undefined), 'online');
    const enrolledBefore = (await hostA.query(hostStateQuery)).keys;
    const fresh = generateHostCredential(f.hostId('A'));
    await assert.rejects(
      enrollHost(f.client, f.config, { hostId: f.hostId('A'), pool: f.pool, keys: publicKeys(fresh) }),
      HostKeysConflictError,
    );
    assert.equal((await hostA.query(hostStateQuery)).online, true, 'a refused rotation changes nothing');
    // Sent straight to the workflow (as when enrolment could not ask it first): ignored without rotate.
    await hostA.signal(registerHostKeysSignal, { keys: publicKeys(fresh) });
    await sleep(500);
    const still = await hostA.query(hostStateQuery);
    assert.deepEqual([still.online, still.keys], [true, enrolledBefore]);
    const r = await enrollHost(f.client, f.config, {
      hostId: f.hostId('A'),
      pool: f.pool,
      keys: publicKeys(fresh),
      rotate: true,
    });
    assert.deepEqual(r, { created: false, rotated: true });
    await eventually(async () => (!(await hostA.query(hostStateQuery)).online ? true : undefined), 'offline');
    // The old process goes on snapshotting (every 300 ms) with keys no longer enrolled: refused,
    // so the host stays offline and its queued task waits instead of failing on sealed payloads.
    const { taskId } = await f.fleet.submit({ goal: 'after rotation [sim duration=50]' });
    await sleep(1_500);
    assert.equal((await hostA.query(hostStateQuery)).online, false);
    assert.equal((await f.fleet.get(taskId)).status, 'queued');
    await old.stop();
    await f.addHost('A', [{ deviceId: 'a1' }], { credential: fresh });
    const done = await f.fleet.wait(taskId, { timeoutMs: 30_000 });
    assert.equal(done.status, 'done');
    assert.equal(done.attempts.length, 1, 'no attempt was lost to the old process');
    // The rotation, tagged by the control plane, sent again after a later rotation: it would put
    // back the keys replaced since, and changes nothing (it names a version the host has passed).
    const rotations = ((await hostA.fetchHistory()).events ?? []).filter(
      (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'registerHostKeys',
    );
    const later = generateHostCredential(f.hostId('A'));
    await enrollHost(f.client, f.config, {
      hostId: f.hostId('A'),
      pool: f.pool,
      keys: publicKeys(later),
      rotate: true,
    });
    for (const e of rotations) {
      await testEnv().client.workflowService.signalWorkflowExecution({
        namespace: testEnv().namespace ?? 'default',
        workflowExecution: { workflowId: hostWorkflowId(f.hostId('A')) },
        signalName: 'registerHostKeys',
        input: e.workflowExecutionSignaledEventAttributes!.input,
      });
    }
    assert.deepEqual((await hostA.query(hostStateQuery)).keys, publicKeys(later));
  });

  it('A forged result (another host key) is rejected and the task retries through A; a replayed result changes nothing', async () => {
    f = await startFleet('forged-result');
    const a = await f.spawnHost('A', ['a1'], { hostTimeoutMs: 60_000 });
    await eventually(async () => ((await f!.scheduler()).devices.length === 1 ? true : undefined), 'A online');
    const credB = await f.enroll('B');
    a.pause(); // the attempt waits for A; meanwhile B completes A's activity through Temporal by its id
    const { taskId } = await f.fleet.submit({ goal: 'real work [sim duration=100]' });
    const assigned = await f.waitForStatus(taskId, 'assigned');
    const cur = assigned.current!;
    const { events } = await f.client.workflow.getHandle(taskWorkflowId(taskId)).fetchHistory();
    const activityId = events!.find((e) => e.activityTaskScheduledEventAttributes)!
      .activityTaskScheduledEventAttributes!.activityId!;
    const outcome = {
      status: 'done' as const,
      retryable: false,
      output: 'forged by B',
      claimedAt: Date.now(),
      finishedAt: Date.now(),
      lastProgressSeq: 0,
    };
    const body = { taskId, attempt: cur.attempt, leaseId: cur.leaseId, hostId: cur.hostId, outcome };
    await f.client.activity.complete(
      { workflowId: taskWorkflowId(taskId), activityId },
      { outcome, sig: sign(credB, SignDomain.Result, body) },
    );
    const rejected = await f.waitFor(taskId, (t) => t.attempts[0]?.outcome !== undefined, 'attempt 1 judged');
    assert.equal(rejected.attempts[0].outcome, 'retryable_failure');
    assert.equal(rejected.attempts[0].reason, 'forged_result');
    assert.notEqual(rejected.status, 'done');
    a.resume();
    const done = await f.waitForStatus(taskId, 'done', 30_000);
    assert.match(done.result?.output ?? '', /simulated run on a1/);
    assert.ok(!JSON.stringify(done).includes('forged by B'));
    // Replayed: a correctly signed result (A's own key) for the closed attempt 1 is refused by Temporal.
    const credA = await f.enroll('A');
    await assert.rejects(
      f.client.activity.complete(
        { workflowId: taskWorkflowId(taskId), activityId },
        { outcome, sig: sign(credA, SignDomain.Result, body) },
      ),
    );
    assert.deepEqual(await f.fleet.get(taskId), done, 'the replayed result changed nothing');
  });
});
