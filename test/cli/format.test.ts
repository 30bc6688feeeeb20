/** The CLI's human output of a task (pure formatting; no Temporal). */
import assert from 'node:assert/strict';
import { taskDetails } from '../../control-plane/cli/format';
import type { TaskResource } from '../../control-plane/rest/tasks/schemas';

describe('fleet CLI: task details', () => {
  it('lists every ended attempt with where it ran and why it ended, and the next attempt time', () => {
    const t = {
      taskId: 't1',
      status: 'queued',
      cancelRequested: false,
      pool: 'default',
      owner: 'ops',
      work: { kind: 'goal', goal: 'open settings' },
      constraints: { driverType: 'android', tags: [] },
      priority: 0,
      policy: { maxAttempts: 3 },
      submittedAt: '2026-12-02T00:00:00.000Z',
      attempts: [
        {
          attempt: 1,
          hostId: 'lab-2',
          deviceId: 'pixel-7',
          assignedAt: '2026-12-02T00:00:01.000Z',
          ackDeadline: '2026-12-02T00:00:31.000Z',
          endedAt: '2026-12-02T00:00:21.000Z',
          outcome: 'lease_expired',
          reason: 'lease_expired',
        },
        {
          attempt: 2,
          hostId: 'lab-1',
          deviceId: 'pixel-8',
          assignedAt: '2026-12-02T00:00:22.000Z',
          ackDeadline: '2026-12-02T00:00:52.000Z',
          endedAt: '2026-12-02T00:00:23.000Z',
          outcome: 'retryable_failure',
          reason: 'exit_code_75',
          message: 'adb: device offline\nsecond line of the output',
        },
        {
          attempt: 3,
          hostId: 'lab-1',
          deviceId: 'pixel-8',
          assignedAt: '2026-12-02T00:00:26.000Z',
          ackDeadline: '2026-12-02T00:00:56.000Z',
          endedAt: '2026-12-02T00:00:27.000Z',
          outcome: 'done',
          message: 'the whole output\nof the run',
        },
      ],
      nextAttemptAt: '2026-12-02T00:00:25.000Z',
      consecutiveDispatchFailures: 0,
    } as unknown as TaskResource;
    const out = taskDetails(t);
    assert.match(out, /^attempts +3 of 3$/m);
    assert.match(out, /^attempt 1 +lab-2\/pixel-7 lease_expired at 2026-12-02 00:00:21Z$/m);
    assert.match(
      out,
      /^attempt 2 +lab-1\/pixel-8 retryable_failure \(exit_code_75\) - adb: device offline at 2026-12-02 00:00:23Z$/m,
    );
    assert.match(out, /^next attempt +2026-12-02 00:00:25Z$/m);
    assert.match(out, /^attempt 3 +lab-1\/pixel-8 done at 2026-12-02 00:00:27Z$/m, 'a done attempt without its output');
    assert.ok(!out.includes('second line'), 'only the first line of a failure');
  });
});
