/** The queue explanation of GET /v1/tasks/:id, on scheduler views built by hand (every branch). */
import assert from 'node:assert/strict';
import { explainWait, servingOrder } from '../../control-plane/rest/tasks/queue';
import type { SchedulerView } from '../../workflows/messages';
import type { TaskConstraints, TaskView } from '../../workflows/types';

const NOW = 1_700_000_000_000;

function task(taskId: string, constraints: Partial<TaskConstraints> = {}, extra: Partial<TaskView> = {}): TaskView {
  return {
    taskId,
    pool: 'lab',
    status: 'queued',
    work: { kind: 'goal', goal: 'g' },
    constraints: { tags: [], ...constraints },
    priority: 0,
    policy: {
      maxAttempts: 3,
      maxDispatchFailures: 3,
      backoff: { initialMs: 1000, multiplier: 2, maxMs: 10_000 },
      ackTimeoutMs: 1000,
      leaseTimeoutMs: 1000,
      executionTimeoutMs: 1000,
    },
    submittedAt: NOW - 1000,
    attempts: [],
    consecutiveDispatchFailures: 0,
    progressReports: 0,
    cancelRequested: false,
    ...extra,
  };
}

type Dev = SchedulerView['devices'][number];
const device = (deviceId: string, extra: Partial<Dev> = {}): Dev => ({
  hostId: 'h1',
  deviceId,
  driverType: 'android',
  tags: ['camera'],
  state: 'idle',
  health: 'good',
  hostOnline: true,
  hostDrained: false,
  deviceDrained: false,
  ...extra,
});

function scheduler(queue: TaskView[], devices: Dev[], strategy = 'fifo_match'): SchedulerView {
  return {
    pool: 'lab',
    config: { strategy, maxQueueDepth: 100, agingMs: 60_000 },
    queue: queue.map((t) => ({
      taskId: t.taskId,
      priority: t.priority,
      submittedAt: t.submittedAt,
      enqueuedAt: t.submittedAt,
      attempt: 1,
      constraints: t.constraints,
    })),
    devices,
    counters: { admitted: 0, rejected: 0, assignments: 0, refusals: 0, releases: 0 },
    runsSinceStart: 1,
  };
}

describe('REST: queue position and why a task waits', () => {
  it('no idle device matches: names the constraints and what the matching devices are doing', () => {
    const a = task('a', { driverType: 'android', tags: ['camera'] });
    const s = scheduler(
      [a],
      [
        device('d1', { reservedBy: { taskId: 'x', leaseId: 'L', attempt: 1 } }),
        device('d2', { deviceDrained: true }),
        device('d3', { driverType: 'ios' }),
      ],
    );
    const q = explainWait(a, s, NOW);
    assert.equal(q.waitingFor, 'device');
    assert.equal(q.position, 1);
    assert.equal(q.ahead, 0);
    assert.deepEqual(q.matchingDevices, { total: 2, idle: 0 });
    assert.equal(
      q.reason,
      'no idle device matches driverType=android tags=[camera] (2 matching devices: 1 reserved, 1 drained)',
    );
    const none = explainWait(
      task('a', { driverType: 'tv' }),
      scheduler([task('a', { driverType: 'tv' })], [device('d1')]),
      NOW,
    );
    assert.equal(none.reason, 'no idle device matches driverType=tv tags=[] (no device in pool lab matches at all)');
  });

  it('waiting behind N older tasks that can use the same devices (others do not count)', () => {
    const older1 = task('o1', { driverType: 'android' }, { submittedAt: NOW - 5000 });
    const otherKind = task('o2', { driverType: 'ios' }, { submittedAt: NOW - 4000 });
    const older2 = task('o3', {}, { submittedAt: NOW - 3000 });
    const me = task('me', { tags: ['camera'] });
    const s = scheduler([older1, otherKind, older2, me], [device('d1')]);
    const q = explainWait(me, s, NOW);
    assert.equal(q.waitingFor, 'older_tasks');
    assert.equal(q.position, 4);
    assert.equal(q.length, 4);
    assert.equal(q.ahead, 2);
    assert.equal(q.reason, 'waiting behind 2 older tasks');
    // Busy devices and older tasks: both said.
    const busy = scheduler([older1, me], [device('d1', { hostOnline: false })]);
    assert.equal(
      explainWait(me, busy, NOW).reason,
      'no idle device matches driverType=any tags=[camera] (1 matching device: 1 host offline); waiting behind 1 older task',
    );
  });

  it('priority_aging serves by effective priority, not age; an idle match with nobody ahead is being assigned', () => {
    const old = task('old', {}, { submittedAt: NOW - 1000, priority: 0 });
    const urgent = task('urgent', {}, { submittedAt: NOW - 10, priority: 50 });
    const s = scheduler([old, urgent], [device('d1')], 'priority_aging');
    assert.deepEqual(
      servingOrder(s, NOW).map((q) => q.taskId),
      ['urgent', 'old'],
    );
    const q = explainWait(old, s, NOW);
    assert.equal(q.position, 2);
    assert.equal(q.reason, 'waiting behind 1 higher-ranked task');
    const first = explainWait(urgent, s, NOW);
    assert.equal(first.waitingFor, 'assignment');
    assert.equal(first.position, 1);
  });

  it('a retry waiting for another device than the one it failed on says so; none other: the usual answer', () => {
    const me = task('me', { tags: ['camera'] });
    const s = scheduler([me], [device('d1'), device('d2', { reservedBy: { taskId: 'x', leaseId: 'L', attempt: 1 } })]);
    s.queue[0].avoid = ['h1/d1'];
    const q = explainWait(me, s, NOW);
    assert.equal(q.waitingFor, 'device');
    assert.deepEqual(q.matchingDevices, { total: 2, idle: 1 });
    assert.equal(
      q.reason,
      'waiting for a matching device other than the 1 device its earlier attempts failed on (h1/d1): 1 other matching device, all reserved',
    );
    // Only the avoided device could serve it: the scheduler gives it that one.
    const alone = scheduler([me], [device('d1')]);
    alone.queue[0].avoid = ['h1/d1'];
    assert.equal(explainWait(me, alone, NOW).waitingFor, 'assignment');
  });

  it('between attempts: the next attempt time and why the last one ended', () => {
    const next = NOW + 30_000;
    const t = task(
      'r',
      {},
      {
        nextAttemptAt: next,
        attempts: [
          {
            attempt: 1,
            leaseId: 'L1',
            hostId: 'h1',
            deviceId: 'd1',
            assignedAt: NOW - 100,
            ackDeadline: NOW,
            leaseTimeoutMs: 1000,
            outcome: 'lease_expired',
            reason: 'lease_expired',
          },
        ],
      },
    );
    const q = explainWait(t, scheduler([], [device('d1')]), NOW);
    assert.equal(q.waitingFor, 'backoff');
    assert.equal(q.nextAttemptAt, new Date(next).toISOString());
    assert.equal(
      q.reason,
      `next attempt at ${new Date(next).toISOString()} (attempt 2 of 3; the last one ended: lease_expired)`,
    );
    assert.equal(explainWait(task('z'), undefined, NOW).waitingFor, 'unknown');
  });

  it('not in the queue: waiting for admission only until the pool admitted it; then a device is being reserved', () => {
    const s = scheduler([], [device('d1')]);
    assert.equal(explainWait(task('new', {}, { admitted: false }), s, NOW).waitingFor, 'admission');
    assert.equal(explainWait(task('in', {}, { admitted: true }), s, NOW).waitingFor, 'assignment');
    // A task from before `admitted` existed: as before, admission while nothing else is queued.
    assert.equal(explainWait(task('old'), s, NOW).waitingFor, 'admission');
  });
});
