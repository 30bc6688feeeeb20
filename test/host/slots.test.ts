/** The host's activity slots follow its device count (pure logic; the worker side is in host-agent.test.ts). */
import assert from 'node:assert/strict';
import { deviceSlots } from '../../host-worker/slots';

const ctx = { slotType: 'activity', taskQueue: 'q', workerIdentity: 'w', workerBuildId: '', isSticky: false } as never;

describe('host activity slots (pure)', () => {
  it('grants up to the limit, then waits; a release or a larger limit grants the next, in order', async () => {
    let limit = 2;
    const s = deviceSlots(() => limit);
    const never = new AbortController().signal;
    await s.supplier.reserveSlot(ctx, never);
    await s.supplier.reserveSlot(ctx, never);
    assert.equal(s.held, 2);
    assert.equal(s.supplier.tryReserveSlot(ctx), null, 'no slot beyond the limit');
    const order: number[] = [];
    const third = s.supplier.reserveSlot(ctx, never).then(() => order.push(3));
    const fourth = s.supplier.reserveSlot(ctx, never).then(() => order.push(4));
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(order, [], 'both wait');
    s.supplier.releaseSlot({} as never);
    await third;
    assert.deepEqual(order, [3]);
    limit = 3; // a device was discovered
    s.changed();
    await fourth;
    assert.deepEqual(order, [3, 4]);
    assert.equal(s.held, 3);
  });

  it('an aborted reservation rejects with AbortError and holds nothing', async () => {
    const s = deviceSlots(() => 1);
    await s.supplier.reserveSlot(ctx, new AbortController().signal);
    const ac = new AbortController();
    const waiting = s.supplier.reserveSlot(ctx, ac.signal);
    ac.abort();
    await assert.rejects(waiting, (err: Error) => err.name === 'AbortError');
    s.supplier.releaseSlot({} as never);
    assert.equal(s.held, 0, 'the aborted reservation was not granted the released slot');
    await assert.rejects(s.supplier.reserveSlot(ctx, ac.signal), (err: Error) => err.name === 'AbortError');
    assert.equal(s.held, 0);
  });
});
