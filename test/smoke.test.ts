import assert from 'node:assert/strict';
import { startFleet, type Fleet } from './helpers/fleet';

describe('smoke', () => {
  let f: Fleet;
  afterEach(async () => f?.stop());
  it('runs one goal task to done', async () => {
    f = await startFleet('smoke');
    await f.addHost('h1', [{ deviceId: 'd1', driverType: 'android' }]);
    const t = await f.fleet.submit({ goal: 'hello [sim duration=50]' });
    const done = await f.waitForStatus(t.taskId, 'done');
    assert.equal(done.attempts.length, 1);
    assert.equal(done.attempts[0].deviceId, 'd1');
  });
});
