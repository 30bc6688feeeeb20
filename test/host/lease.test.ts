/**
 * Self-fencing's clock (host-worker/lease.ts) without a server: when a run counts its lease as lost.
 * The host cut off from a real server is in seed-000-003-leases.test.ts.
 */
import assert from 'node:assert/strict';
import { leaseTimings, ProvenLease, type Instant } from '../../host-worker/lease';

/** Both clocks at `ms` (they agree unless a test moves one). */
const at = (ms: number, wall = ms): Instant => ({ mono: ms, wall });

describe('host lease clock (self-fencing)', () => {
  for (const leaseMs of [1_000, 2_000, 20_000, 300_000]) {
    it(`lease ${leaseMs} ms: the run stops before the server's timer, with heartbeats left to renew it`, () => {
      const t = leaseTimings(leaseMs);
      // The latest a run notices it lost the lease is still before the server can time it out
      // (its timer runs a lease from the arrival of the last answered heartbeat, after its sending).
      assert.ok(t.fenceAfterMs + t.checkEveryMs < leaseMs, JSON.stringify(t));
      // After one answered heartbeat, at least two more go out (and may be answered) before the stop.
      assert.ok(Math.floor((t.fenceAfterMs - t.beatDeadlineMs) / t.beatEveryMs) >= 2, JSON.stringify(t));
      // A run stopped at the latest check still has a grace before it is killed, and is killed before the server's timer.
      assert.ok(t.fenceAfterMs + t.checkEveryMs < t.killAfterMs && t.killAfterMs < leaseMs, JSON.stringify(t));
    });
  }

  it('counts from the activity reaching the host until a heartbeat is answered, then from its sending', () => {
    const lease = new ProvenLease(2_000, at(10_000));
    assert.equal(lease.lost(at(11_500)), undefined);
    assert.equal(lease.lost(at(11_600)), 1_600); // 0.8 lease without an answered heartbeat
    lease.answered(at(11_000));
    assert.deepEqual(lease.provenAt(), at(11_000));
    assert.equal(lease.lost(at(12_500)), undefined);
    assert.equal(lease.lost(at(12_600)), 1_600);
  });

  it('a run stopped for its lease has until 0.9 lease after the last answered sending to be gone', () => {
    const lease = new ProvenLease(2_000, at(10_000));
    assert.equal(lease.stopWithin(at(11_600)), 200); // stopped at 0.8 lease: 0.1 lease left
    lease.answered(at(11_000));
    assert.equal(lease.stopWithin(at(12_650)), 150);
    assert.equal(lease.stopWithin(at(13_000)), 0); // late: kill at once
  });

  it('a span is the longer of the two clocks: a wall clock stepped back changes nothing, a suspend (the monotonic clock stopped) counts', () => {
    const lease = new ProvenLease(2_000, at(10_000));
    // The wall clock stepped back an hour: the monotonic clock still sees 1.6 s.
    assert.equal(lease.lost(at(11_600, 10_000 - 3_600_000 + 1_600)), 1_600);
    // The machine slept 30 s: the monotonic clock saw 100 ms, the wall clock (and the server) 30 s.
    assert.equal(lease.lost(at(10_100, 40_100)), 30_100);
    assert.equal(lease.stopWithin(at(10_100, 40_100)), 0);
  });

  it('an answer that arrives late for an older heartbeat does not move the lease back', () => {
    const lease = new ProvenLease(2_000, at(0));
    lease.answered(at(1_000));
    lease.answered(at(500));
    assert.deepEqual(lease.provenAt(), at(1_000));
    assert.equal(lease.lost(at(2_599)), undefined);
  });
});
