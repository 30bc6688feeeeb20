import assert from 'node:assert/strict';
import { findOverlaps, findRunOverlaps, type ReservationInterval } from './helpers/invariants';

const iv = (
  leaseId: string,
  begin: number,
  end?: number,
  extra: Partial<ReservationInterval> = {},
): ReservationInterval => ({
  leaseId,
  taskId: `task-${leaseId}`,
  attempt: 1,
  begin,
  end,
  runId: 'run-1',
  ...extra,
});

const leases = (pairs: Array<[ReservationInterval, ReservationInterval]>): string[][] =>
  pairs.map(([a, b]) => [a.leaseId, b.leaseId]);

describe('invariants (pure)', () => {
  describe('findOverlaps', () => {
    it('accepts a sequence of back-to-back reservations, including a still-held last one', () => {
      assert.deepEqual(findOverlaps([iv('L1', 100, 200), iv('L2', 200, 300), iv('L3', 350)]), []);
    });

    it('detects two reservations overlapping in time', () => {
      assert.deepEqual(leases(findOverlaps([iv('L1', 100, 300), iv('L2', 200, 400), iv('L3', 500, 600)])), [
        ['L1', 'L2'],
      ]);
    });

    it('detects a begin while an earlier reservation is still open', () => {
      assert.deepEqual(leases(findOverlaps([iv('L1', 100), iv('L2', 500, 600)])), [['L1', 'L2']]);
    });

    it('uses event order when timestamps tie', () => {
      // Same millisecond: release of L1 then begin of L2 in event order is fine ...
      const ok = [iv('L1', 100, 200, { beginSeq: 5, endSeq: 9 }), iv('L2', 200, 300, { beginSeq: 10, endSeq: 14 })];
      assert.deepEqual(findOverlaps(ok), []);
      // ... but L2 beginning before L1's release (same timestamps) is a double reservation.
      const bad = [iv('L1', 100, 200, { beginSeq: 5, endSeq: 11 }), iv('L2', 200, 300, { beginSeq: 10, endSeq: 14 })];
      assert.deepEqual(leases(findOverlaps(bad)), [['L1', 'L2']]);
    });

    it('only compares reservations of the same device', () => {
      const a = iv('L1', 100, 300, { deviceKey: 'h1/d1' });
      const b = iv('L2', 200, 400, { deviceKey: 'h1/d2' });
      assert.deepEqual(findOverlaps([a, b]), []);
    });
  });

  describe('findRunOverlaps', () => {
    const run = (taskId: string, deviceKey: string, startedAt?: number, closedAt?: number) => ({
      taskId,
      deviceKey,
      startedAt,
      closedAt,
    });

    it('accepts sequential executions on one device and parallel ones on different devices', () => {
      const runs = [run('t1', 'h/d1', 100, 200), run('t2', 'h/d1', 200, 300), run('t3', 'h/d2', 150, 250)];
      assert.deepEqual(findRunOverlaps(runs), []);
    });

    it('detects overlapping executions on one device', () => {
      const runs = [run('t1', 'h/d1', 100, 250), run('t2', 'h/d1', 200, 300)];
      assert.deepEqual(
        findRunOverlaps(runs).map(([a, b]) => [a.taskId, b.taskId]),
        [['t1', 't2']],
      );
    });

    it('treats a still-running execution as open and ignores executions that never started', () => {
      const runs = [run('t1', 'h/d1', 100), run('t2', 'h/d1', 500, 600), run('t3', 'h/d1', undefined, 700)];
      assert.deepEqual(
        findRunOverlaps(runs).map(([a, b]) => [a.taskId, b.taskId]),
        [['t1', 't2']],
      );
    });
  });
});
