/**
 * Self-fencing's clock (host-worker/contact.ts) without a server: when the host probes, and when a
 * run counts its lease as lost. The host cut off from a real server is in host-agent.test.ts.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { ServerContact } from '../../host-worker/contact';

function probed(answer: () => boolean) {
  const deadlines: number[] = [];
  const calledAt: number[] = [];
  const contact = new ServerContact({
    minPeriodMs: 10,
    probe: async (deadline) => {
      deadlines.push(deadline);
      calledAt.push(Date.now());
      if (!answer()) throw new Error('unreachable');
    },
  });
  return { contact, deadlines, calledAt };
}

async function until(pred: () => boolean, what: string, ms = 2_000): Promise<void> {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

describe('server contact (self-fencing clock)', () => {
  it('probes only while a run holds a lease, every quarter of the shortest lease', async () => {
    const { contact, deadlines, calledAt } = probed(() => true);
    await sleep(50);
    assert.equal(deadlines.length, 0, 'nothing runs: no probe');
    const release = contact.hold(200);
    await until(() => deadlines.length >= 3, 'three probes');
    // Each probe may take half the lease to answer; the next follows a quarter lease after it.
    deadlines.forEach((d, i) => assert.ok(Math.abs(d - calledAt[i] - 100) <= 2, `deadline ${d - calledAt[i]} ms`));
    for (let i = 1; i < calledAt.length; i++)
      assert.ok(calledAt[i] - calledAt[i - 1] >= 45, `probes ${calledAt[i] - calledAt[i - 1]} ms apart`);
    release();
    const n = deadlines.length;
    await sleep(150);
    assert.ok(deadlines.length <= n + 1, 'no probes once the run ended');
  });

  it('a run keeps its lease while the server answers, and loses it after a whole lease without an answer', async () => {
    let up = true;
    const { contact } = probed(() => up);
    const since = Date.now();
    const release = contact.hold(150);
    try {
      await sleep(250);
      assert.equal(contact.lost(since, 150), undefined, 'the server answers: the lease holds');
      up = false;
      const lastAtCut = contact.lastContactAt();
      await until(() => contact.lost(since, 150) !== undefined, 'the lease to count as lost');
      // Failed probes are no contact: the lease counts as lost a whole lease after the last answer.
      assert.equal(contact.lastContactAt(), lastAtCut, 'no contact since the cut');
      assert.ok(Date.now() - lastAtCut >= 150, `lost ${Date.now() - lastAtCut} ms after the last answer`);
      assert.ok(contact.lost(since, 150)! >= 150);
      up = true;
      await until(() => contact.lost(since, 150) === undefined, 'contact again');
    } finally {
      release();
    }
  });

  it('a run that just started has contact (its task came from the server), whatever came before', async () => {
    const { contact } = probed(() => false);
    const release = contact.hold(100);
    await sleep(200);
    assert.notEqual(contact.lost(Date.now() - 300, 100), undefined, 'an older run lost it');
    assert.equal(contact.lost(Date.now(), 100), undefined, 'a run that starts now has not');
    contact.noteContact();
    assert.equal(contact.lost(Date.now() - 300, 100), undefined, 'a report answered counts as contact');
    release();
  });
});
