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

  it('A quick run started long after the one before was due starts a new streak (stops weeks apart are no streak)', () => {
    const b = new RestartBackoff(opts);
    b.consider('w', run('a', 0, S), S);
    assert.equal(b.consider('w', run('b', 30 * S, S), 31 * S).streak, 2, 'restarted at the next check: the streak goes on');
    // b was due 60 s after it closed (91 s); c starts a day later and stops at once.
    assert.deepEqual(b.consider('w', run('c', 86_400 * S, S), 86_401 * S), { due: true, streak: 1, delayMs: 0, fresh: true });
  });

  it('A run continued-as-new from another is no quick run, however young it was when it stopped', () => {
    const b = new RestartBackoff(opts);
    const rolled = (runId: string, start: number) => ({ ...run(runId, start, S), firstRunId: 'first' });
    for (let i = 0; i < 4; i++) {
      assert.deepEqual(b.consider('w', rolled(`r${i}`, i * 30 * S), i * 30 * S + S), { due: true, streak: 0, delayMs: 0, fresh: true });
    }
    // A run that is the first of its chain is judged by its life.
    assert.equal(b.consider('w', { ...run('x', 200 * S, S), firstRunId: 'x' }, 201 * S).streak, 1);
  });

  it("A run that needs no wait is due whatever the local clock says of the server's close time", () => {
    const b = new RestartBackoff(opts);
    const r = run('a', 1_000 * S, 120 * S);
    assert.equal(b.consider('w', r, 0).due, true, 'the local clock behind the server');
    const q = run('q', 2_000 * S, S);
    assert.equal(b.consider('v', q, 0).due, true, 'the first quick run waits for nothing either');
    assert.equal(b.consider('v', q, 0).due, true, 'looked at again');
  });

  it('The defaults follow the check interval: a run quicker than two checks (and a minute) is quick', () => {
    assert.deepEqual(restartBackoffFor(30 * S), { quickMs: 60 * S, firstDelayMs: 60 * S, maxDelayMs: 600 * S });
    assert.deepEqual(restartBackoffFor(500), { quickMs: 60 * S, firstDelayMs: 1 * S, maxDelayMs: 600 * S });
    assert.deepEqual(restartBackoffFor(600 * S), { quickMs: 1200 * S, firstDelayMs: 1200 * S, maxDelayMs: 1200 * S });
  });
});
