/** Unit tests of the watch's restart pacing (control-plane/restart-backoff.ts): pure, no server. */
import assert from 'node:assert/strict';
import { RestartBackoff, restartBackoffFor } from '../control-plane/restart-backoff';

const S = 1_000;
/** A run that started at `start` and closed `lived` ms later (times in ms). */
const run = (runId: string, start: number, lived: number) => ({
  runId,
  startTime: new Date(start),
  closeTime: new Date(start + lived),
});

describe('restart backoff: how soon the watch starts again a workflow that stopped', () => {
  const opts = { quickMs: 60 * S, firstDelayMs: 60 * S, maxDelayMs: 600 * S };

  it('A run that lived a while is started again at once, every time', () => {
    const b = new RestartBackoff(opts);
    for (let i = 0; i < 5; i++) {
      const r = run(`r${i}`, i * 1_000 * S, 120 * S);
      const d = b.consider('w', r, r.closeTime.getTime() + 1);
      assert.deepEqual(d, { due: true, streak: 0, delayMs: 0, fresh: true });
    }
  });

  it('Runs that stop at once: the first is started again at once, then each waits twice as long after it closed, up to the maximum', () => {
    const b = new RestartBackoff(opts);
    let t = 0;
    const delays: number[] = [];
    for (let i = 0; i < 8; i++) {
      const r = run(`r${i}`, t, 1 * S);
      const closed = r.closeTime.getTime();
      const first = b.consider('w', r, closed);
      assert.equal(first.fresh, true);
      assert.equal(first.streak, i + 1);
      delays.push(first.delayMs);
      if (first.delayMs > 0) {
        assert.equal(first.due, false, 'held back when it has just closed');
        const before = b.consider('w', r, closed + first.delayMs - 1);
        assert.deepEqual(before, { due: false, streak: i + 1, delayMs: first.delayMs, fresh: false });
      }
      assert.equal(b.consider('w', r, closed + first.delayMs).due, true);
      t = closed + first.delayMs;
    }
    assert.deepEqual(delays, [0, 60, 120, 240, 480, 600, 600, 600].map((x) => x * S));
  });

  it('A run that lived a while ends the streak; keys are paced apart', () => {
    const b = new RestartBackoff(opts);
    b.consider('w', run('a', 0, S), S);
    assert.equal(b.consider('w', run('b', 2 * S, S), 3 * S).delayMs, 60 * S);
    assert.equal(b.consider('other', run('x', 2 * S, S), 3 * S).delayMs, 0, 'another key has its own streak');
    assert.deepEqual(b.consider('w', run('c', 100 * S, 70 * S), 170 * S), { due: true, streak: 0, delayMs: 0, fresh: true });
    assert.equal(b.consider('w', run('d', 200 * S, S), 201 * S).delayMs, 0, 'a quick run after it starts a new streak');
  });

  it('The defaults follow the check interval: a run quicker than two checks (and a minute) is quick', () => {
    assert.deepEqual(restartBackoffFor(30 * S), { quickMs: 60 * S, firstDelayMs: 60 * S, maxDelayMs: 600 * S });
    assert.deepEqual(restartBackoffFor(500), { quickMs: 60 * S, firstDelayMs: 1 * S, maxDelayMs: 600 * S });
    assert.deepEqual(restartBackoffFor(600 * S), { quickMs: 1200 * S, firstDelayMs: 1200 * S, maxDelayMs: 1200 * S });
  });
});
