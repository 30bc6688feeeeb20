/** Unit tests of pure scheduling logic: strategies, constraint matching, backoff, validation, classification. */
import assert from 'node:assert/strict';
import { ActivityFailure, ApplicationFailure, TimeoutFailure } from '@temporalio/common';
import { parseControlPlaneConfig } from '../control-plane/config';
import { mergePolicy } from '../control-plane/rest/tasks/service';
import {
  backoffDelayMs,
  DEFAULT_POLICY,
  reservationHoldMs,
  retryDelayMs,
  validateTaskInput,
} from '../workflows/policy';
import {
  constraintInterner,
  getStrategy,
  hasStrategy,
  matches,
  packQueue,
  registerStrategy,
  unpackQueue,
  type QueuedTask,
} from '../workflows/strategies';
import { classifyActivityError } from '../workflows/task';
import type { PoolDevice, TaskInput } from '../workflows/types';

const dev = (deviceId: string, over: Partial<PoolDevice> = {}): PoolDevice => ({
  hostId: 'h1',
  deviceId,
  driverType: 'android',
  tags: [],
  state: 'idle',
  health: 'good',
  hostOnline: true,
  hostDrained: false,
  deviceDrained: false,
  ...over,
});
const task = (taskId: string, submittedAt: number, over: Partial<QueuedTask> = {}): QueuedTask => ({
  taskId,
  constraints: { tags: [] },
  priority: 0,
  submittedAt,
  enqueuedAt: submittedAt,
  attempt: 1,
  holdMs: 1000,
  ...over,
});

describe('assignment strategies (pure)', () => {
  it('fifo_match: oldest matching task first, first matching device', () => {
    const pairs = getStrategy('fifo_match').assign([task('A', 1), task('B', 2)], [dev('d1')], { now: 10, agingMs: 1 });
    assert.deepEqual(
      pairs.map((p) => [p.task.taskId, p.device.deviceId]),
      [['A', 'd1']],
    );
  });

  it('fifo_match skips a head task that matches nothing and serves the next', () => {
    const q = [task('ios', 1, { constraints: { driverType: 'ios', tags: [] } }), task('droid', 2)];
    const pairs = getStrategy('fifo_match').assign(q, [dev('d1'), dev('d2')], { now: 10, agingMs: 1 });
    assert.deepEqual(
      pairs.map((p) => p.task.taskId),
      ['droid'],
    );
  });

  it('matches driverType, every required tag, and host/device pins', () => {
    const d = dev('px', { tags: ['camera', 'api34'] });
    assert.ok(matches({ driverType: 'android', tags: ['camera'] }, d));
    assert.ok(!matches({ tags: ['camera', 'nfc'] }, d));
    assert.ok(!matches({ driverType: 'ios', tags: [] }, d));
    assert.ok(matches({ tags: [], hostId: 'h1', deviceId: 'px' }, d));
    assert.ok(!matches({ tags: [], deviceId: 'other' }, d));
    assert.ok(!matches({ tags: [], hostId: 'h2' }, d));
  });

  it('priority_aging: higher priority first, and waiting raises priority so nothing starves', () => {
    const s = getStrategy('priority_aging');
    const old = task('old-low', 0, { priority: 0 });
    const fresh = task('new-high', 9_000, { priority: 5 });
    assert.equal(s.assign([old, fresh], [dev('d1')], { now: 10_000, agingMs: 60_000 })[0].task.taskId, 'new-high');
    // Ten minutes on, with agingMs=60s the old task's effective priority is 10: it beats a priority-5 task that just arrived.
    const arriving = task('arriving-high', 590_000, { priority: 5 });
    assert.equal(s.assign([old, arriving], [dev('d1')], { now: 600_000, agingMs: 60_000 })[0].task.taskId, 'old-low');
  });

  it('both strategies give exactly what a plain walk over every free device gives, shared constraints or not', () => {
    // The strategies skip a task whose constraints object already matched no free device in the
    // round; this checks that shortcut against the plain walk on random queues and fleets.
    let seed = 7; // mulberry32: a fixed seed, so a failure repeats
    const rnd = (n: number) => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) % n;
    };
    const kinds = ['adb', 'sim', 'ios'];
    const tagSets = [[], ['gpu'], ['gpu', 'camera'], ['camera']];
    const plain = (ordered: QueuedTask[], free: PoolDevice[]) => {
      const left = [...free];
      const out: Array<[string, string]> = [];
      for (const t of ordered) {
        const i = left.findIndex((d) => matches(t.constraints, d));
        if (i >= 0) out.push([t.taskId, left.splice(i, 1)[0].deviceId]);
      }
      return out;
    };
    const effective = (t: QueuedTask, now: number, agingMs: number) =>
      t.priority + Math.max(0, now - t.submittedAt) / agingMs;
    for (let round = 0; round < 300; round++) {
      const shared = Array.from({ length: 6 }, () => ({
        driverType: rnd(4) === 0 ? undefined : kinds[rnd(3)],
        tags: tagSets[rnd(4)],
        ...(rnd(8) === 0 ? { hostId: `h${rnd(2)}` } : {}),
      }));
      const queue = Array.from({ length: rnd(60) }, (_, i) => {
        const c = shared[rnd(shared.length)];
        // Half the entries share their constraints object, half carry an equal copy of it.
        return task(`t${String(i).padStart(3, '0')}`, i * 10, {
          constraints: rnd(2) ? c : { ...c, tags: [...c.tags] },
          priority: rnd(3),
        });
      });
      const free = Array.from({ length: rnd(12) }, (_, i) =>
        dev(`d${i}`, { hostId: `h${rnd(2)}`, driverType: kinds[rnd(3)], tags: tagSets[rnd(4)] }),
      );
      const ctx = { now: 400, agingMs: 100 };
      const got = (name: string) =>
        getStrategy(name)
          .assign(queue, free, ctx)
          .map((p) => [p.task.taskId, p.device.deviceId]);
      assert.deepEqual(got('fifo_match'), plain(queue, free), `fifo_match, round ${round}`);
      const byEffective = [...queue].sort(
        (a, b) =>
          effective(b, ctx.now, ctx.agingMs) - effective(a, ctx.now, ctx.agingMs) || a.submittedAt - b.submittedAt,
      );
      assert.deepEqual(got('priority_aging'), plain(byEffective, free), `priority_aging, round ${round}`);
    }
  });

  it('a retry avoids the devices it failed on: another free one first, the avoided one only if no other could serve it', () => {
    for (const name of ['fifo_match', 'priority_aging']) {
      const assign = (q: QueuedTask[], free: PoolDevice[], elsewhere?: boolean) =>
        getStrategy(name)
          .assign(q, free, {
            now: 10,
            agingMs: 1_000_000,
            ...(elsewhere === undefined ? {} : { servableElsewhere: () => elsewhere }),
          })
          .map((p) => [p.task.taskId, p.device.deviceId]);
      const retry = task('R', 1, { attempt: 2, avoid: ['h1/d1'] });
      // Another free device matches: that one, whatever the order of the free list.
      assert.deepEqual(assign([retry], [dev('d1'), dev('d2')], true), [['R', 'd2']], name);
      // Only the avoided one is free and another device could serve it later: it waits...
      assert.deepEqual(assign([retry], [dev('d1')], true), [], name);
      // ...and the free device goes to the next task, which has nothing to avoid.
      assert.deepEqual(assign([retry, task('B', 2)], [dev('d1')], true), [['B', 'd1']], name);
      // No other device of the pool could serve it: the avoided one after all.
      assert.deepEqual(assign([retry], [dev('d1')], false), [['R', 'd1']], name);
      // A strategy call without the pool's answer ignores avoid (as before the change).
      assert.deepEqual(assign([retry], [dev('d1')]), [['R', 'd1']], name);
      // A waiting retry does not mark its constraints unmatched for tasks without an avoid list.
      const shared = { tags: [] };
      assert.deepEqual(
        assign(
          [task('R2', 1, { attempt: 2, avoid: ['h1/d1'], constraints: shared }), task('C', 2, { constraints: shared })],
          [dev('d1')],
          true,
        ),
        [['C', 'd1']],
        name,
      );
    }
  });

  it('the avoid list survives packing for continue-as-new; entries without one stay without', () => {
    const q = [task('A', 1), task('R', 2, { attempt: 3, avoid: ['h1/d1', 'h2/d9'] })];
    const back = unpackQueue(JSON.parse(JSON.stringify(packQueue(q))));
    assert.deepEqual(back, q);
    assert.equal('avoid' in back[0], false);
  });

  it('the interner shares one object per set of string constraints, and never merges a null with a missing field', () => {
    const intern = constraintInterner();
    const a = intern({ driverType: 'adb', tags: ['gpu'] });
    assert.equal(intern({ driverType: 'adb', tags: ['gpu'] }), a);
    assert.notEqual(intern({ driverType: 'adb', tags: [] }), a);
    const open = intern({ tags: [] });
    // A null driverType (a task started around the client's validation) matches no device; a
    // missing one matches every device: sharing one object would make the round treat them alike.
    const nullType = { driverType: null, tags: [] } as unknown as QueuedTask['constraints'];
    assert.equal(intern(nullType), nullType);
    assert.equal(intern({ tags: [] }), open);
    assert.ok(matches(open, dev('d1')));
    assert.ok(!matches(nullType, dev('d1')));
  });

  it('a new strategy registered by name is usable by configuration alone', () => {
    registerStrategy({
      name: 'newest_first',
      description: 'test strategy: newest task first',
      assign: (queue, free) =>
        free.length && queue.length ? [{ task: queue[queue.length - 1], device: free[0] }] : [],
    });
    assert.ok(hasStrategy('newest_first'));
    const config = parseControlPlaneConfig({ pools: { lab: { strategy: 'newest_first' } } });
    assert.equal(config.pools.lab.strategy, 'newest_first');
    const pairs = getStrategy(config.pools.lab.strategy).assign([task('A', 1), task('B', 2)], [dev('d1')], {
      now: 3,
      agingMs: 1,
    });
    assert.equal(pairs[0].task.taskId, 'B');
  });
});

describe('policy and classification (pure)', () => {
  it('backoff doubles per attempt and is capped', () => {
    const p = { ...DEFAULT_POLICY, backoff: { initialMs: 1_000, multiplier: 2, maxMs: 5_000 } };
    assert.deepEqual(
      [1, 2, 3, 4, 5].map((n) => backoffDelayMs(p, n)),
      [1_000, 2_000, 4_000, 5_000, 5_000],
    );
  });

  it('the retry wait counts the silence a lost lease or a missed ack deadline already waited', () => {
    const p = {
      ...DEFAULT_POLICY,
      leaseTimeoutMs: 20_000,
      ackTimeoutMs: 30_000,
      backoff: { initialMs: 1_000, multiplier: 4, maxMs: 60_000 },
    };
    // A task failure waits the whole backoff; a lost host was already silent for a lease.
    assert.equal(retryDelayMs(p, 1, { outcome: 'retryable_failure', reason: 'runner_failed' }), 1_000);
    assert.equal(retryDelayMs(p, 1, { outcome: 'lease_expired', reason: 'lease_expired' }), 0);
    assert.equal(retryDelayMs(p, 4, { outcome: 'lease_expired', reason: 'lease_expired' }), 40_000); // 60 s cap - 20 s
    assert.equal(retryDelayMs(p, 1, { outcome: 'dispatch_failed', reason: 'ack_timeout' }), 0);
    assert.equal(retryDelayMs(p, 4, { outcome: 'dispatch_failed', reason: 'ack_timeout' }), 30_000);
    // Other dispatch failures (device unavailable) answered at once: the full backoff.
    assert.equal(retryDelayMs(p, 2, { outcome: 'dispatch_failed', reason: 'device_unavailable' }), 4_000);
  });

  it('validation names every bad field', () => {
    const bad = {
      taskId: 'has space',
      pool: '',
      work: { kind: 'goal', goal: ' ' },
      constraints: { tags: [''] },
      priority: Number.NaN,
      policy: { ...DEFAULT_POLICY, maxAttempts: 0 },
    } as unknown as TaskInput;
    const problems = validateTaskInput(bad);
    for (const field of ['taskId', 'pool', 'work.goal', 'constraints.tags', 'priority', 'policy.maxAttempts']) {
      assert.ok(
        problems.some((p) => p.startsWith(`${field}:`)),
        `${field} reported in ${problems.join(' | ')}`,
      );
    }
    // Started around the clients (straight through Temporal), an attempt limit past the bound is refused too.
    const good = {
      ...bad,
      taskId: 't1',
      pool: 'p',
      work: { kind: 'goal', goal: 'g' },
      constraints: { tags: [] },
      priority: 0,
    };
    assert.deepEqual(validateTaskInput({ ...good, policy: { ...DEFAULT_POLICY, maxAttempts: 100 } } as TaskInput), []);
    assert.deepEqual(validateTaskInput({ ...good, policy: { ...DEFAULT_POLICY, maxAttempts: 101 } } as TaskInput), [
      'policy.maxAttempts: at most 100',
    ]);
    assert.deepEqual(validateTaskInput({ ...good, policy: { ...DEFAULT_POLICY, maxQueueWaitMs: 0 } } as TaskInput), [
      'policy.maxQueueWaitMs: must be a positive integer when given',
    ]);
    assert.deepEqual(
      validateTaskInput({ ...good, policy: { ...DEFAULT_POLICY, maxQueueWaitMs: 5_000 } } as TaskInput),
      [],
    );
    // REST fills it from the request, else from taskDefaults, else leaves it out.
    const defaults = parseControlPlaneConfig({}).taskDefaults;
    assert.equal('maxQueueWaitMs' in mergePolicy(defaults, {}), false);
    assert.equal(mergePolicy(defaults, { maxQueueWaitMs: 7 }).maxQueueWaitMs, 7);
    assert.equal(mergePolicy({ ...defaults, maxQueueWaitMs: 9 }, {}).maxQueueWaitMs, 9);
  });

  it('reservationGraceMs: the hold is ack + execution + the grace (60 s unless set, at least 10 s), from the request or taskDefaults', () => {
    const good = {
      taskId: 't1',
      pool: 'p',
      work: { kind: 'goal', goal: 'g' },
      constraints: { tags: [] },
      priority: 0,
    };
    const p = { ...DEFAULT_POLICY, ackTimeoutMs: 1_000, executionTimeoutMs: 3_000 };
    assert.equal(reservationHoldMs(p), 64_000);
    assert.equal(reservationHoldMs({ ...p, reservationGraceMs: 10_000 }), 14_000);
    // A task a control plane from before the setting started replays with the default grace.
    assert.equal(reservationHoldMs({ ...p, reservationGraceMs: 10_000 }, false), 64_000);
    for (const bad of [0, 9_999, 10_000.5, -1]) {
      assert.deepEqual(
        validateTaskInput({ ...good, policy: { ...DEFAULT_POLICY, reservationGraceMs: bad } } as TaskInput),
        ['policy.reservationGraceMs: must be an integer of at least 10000 when given'],
        String(bad),
      );
    }
    assert.deepEqual(
      validateTaskInput({ ...good, policy: { ...DEFAULT_POLICY, reservationGraceMs: 10_000 } } as TaskInput),
      [],
    );
    const defaults = parseControlPlaneConfig({}).taskDefaults;
    assert.equal('reservationGraceMs' in mergePolicy(defaults, {}), false);
    assert.equal(mergePolicy(defaults, { reservationGraceMs: 20_000 }).reservationGraceMs, 20_000);
    assert.equal(
      mergePolicy(parseControlPlaneConfig({ taskDefaults: { reservationGraceMs: 15_000 } }).taskDefaults, {})
        .reservationGraceMs,
      15_000,
    );
    assert.throws(
      () => parseControlPlaneConfig({ taskDefaults: { reservationGraceMs: 5_000 } }),
      /reservationGraceMs/,
    );
  });

  it('classifies activity failures into retryable/terminal and dispatch/lease classes', () => {
    const wrap = (cause: Error) =>
      new ActivityFailure('failed', 'runAssignment', '1', 'NON_RETRYABLE_FAILURE', undefined, cause);
    const ack = classifyActivityError(wrap(new TimeoutFailure('t', undefined, 'SCHEDULE_TO_START')));
    assert.deepEqual(
      [ack.outcome, ack.reason, ack.retryable, ack.dispatchFailure],
      ['dispatch_failed', 'ack_timeout', true, true],
    );
    const lease = classifyActivityError(wrap(new TimeoutFailure('t', undefined, 'HEARTBEAT')));
    assert.deepEqual([lease.outcome, lease.reason, lease.retryable], ['lease_expired', 'lease_expired', true]);
    // A thrown failure is unsigned (anyone polling the queue could send it): never terminal, never a dispatch failure.
    const forged = classifyActivityError(wrap(ApplicationFailure.nonRetryable('no such', 'UnknownDefinition')));
    assert.deepEqual([forged.outcome, forged.retryable, forged.dispatchFailure], ['retryable_failure', true, false]);
    const crash = classifyActivityError(wrap(ApplicationFailure.retryable('boom', 'RunnerFailed')));
    assert.deepEqual([crash.outcome, crash.retryable, crash.dispatchFailure], ['retryable_failure', true, false]);
  });
  it('packs a full queue for continue-as-new losslessly and well under the 2 MiB payload limit', () => {
    const shapes = [
      { tags: [] },
      { driverType: 'adb', tags: ['android-14', 'pixel'] },
      { driverType: 'sim', tags: ['gpu'], hostId: 'lab-1' },
    ];
    const queue = Array.from({ length: 10_000 }, (_, i) => ({
      taskId: `0b3e2c1a-6f7d-4e8b-9a0c-${String(i).padStart(12, '0')}`,
      constraints: { ...shapes[i % shapes.length], tags: [...shapes[i % shapes.length].tags] },
      priority: i % 7,
      submittedAt: 1_795_950_000_000 + i,
      enqueuedAt: 1_795_950_000_500 + i,
      attempt: 1 + (i % 3),
      holdMs: 125_000,
    }));
    const packed = packQueue(queue);
    assert.deepEqual(unpackQueue(JSON.parse(JSON.stringify(packed))), queue);
    assert.equal(packed.constraints.length, 3);
    const bytes = JSON.stringify(packed).length;
    assert.ok(bytes < 1_000_000, `packed 10,000 tasks: ${bytes} bytes`);
    assert.ok(bytes < JSON.stringify(queue).length / 2, 'at least halves the carried size');
  });
});
