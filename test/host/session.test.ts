/**
 * The host's session activities in an activity context without a server (MockActivityEnvironment):
 * who may open a session, and what a stop says. The server-side behaviour is in host-agent.test.ts
 * and identity.test.ts.
 */
import assert from 'node:assert/strict';
import { MockActivityEnvironment } from '@temporalio/testing';
import { generateHostCredential, publicKeys } from '../../host-worker/identity';
import { createHostSessionActivities } from '../../host-worker/session';
import { SignDomain, sessionStopBody, verifySignature } from '../../workflows/identity';
import { hostWorkflowId } from '../../workflows/ids';
import type { HostSessionEnd } from '../../workflows/types';

const cred = generateHostCredential('lab-7');

function activities() {
  let stop!: (how: 'announce' | 'silent') => void;
  const stopping = new Promise<'announce' | 'silent'>((r) => (stop = r));
  let snapshots = 0;
  const acts = createHostSessionActivities({
    credential: cred,
    bootId: 'boot-1',
    stopping,
    sendSnapshot: async () => {
      snapshots++;
    },
  });
  return { acts, stop, snapshots: () => snapshots };
}

const envFor = (workflowId: string) =>
  new MockActivityEnvironment({
    activityId: 'session-3',
    heartbeatTimeoutMs: 300,
    workflowExecution: { workflowId, runId: 'run-9' },
  });

describe('host session activities (no server)', () => {
  it("refuses a session or a snapshot request scheduled by anything but the host's own workflow", async () => {
    const { acts, snapshots } = activities();
    await assert.rejects(envFor('not-host/lab-7').run(acts.hostSession, { maxMs: 1_000 }), /not by host\/lab-7/);
    await assert.rejects(envFor('host/lab-70').run(acts.hostSnapshotNow), /not by host\/lab-7/);
    assert.equal(snapshots(), 0);
    await envFor(hostWorkflowId('lab-7')).run(acts.hostSnapshotNow);
    assert.equal(snapshots(), 1);
  });

  it('beats until its length, then ends; a stop ends it at once, signed for this session and process only', async () => {
    const { acts, stop } = activities();
    const env = envFor(hostWorkflowId('lab-7'));
    let beats = 0;
    env.on('heartbeat', () => beats++);
    assert.deepEqual(await env.run(acts.hostSession, { maxMs: 350 }), { stopping: false });
    assert.ok(beats >= 2, `${beats} beats in 350 ms at a 300 ms timeout`);
    const running = envFor(hostWorkflowId('lab-7')).run(acts.hostSession, { maxMs: 60_000 });
    stop('announce');
    const end = (await running) as HostSessionEnd;
    assert.equal(end.stopping, true);
    assert.equal(end.bootId, 'boot-1');
    const key = publicKeys(cred).signing;
    assert.ok(
      verifySignature(SignDomain.Session, sessionStopBody('lab-7', 'run-9', 'session-3', 'boot-1'), end.sig, key),
    );
    for (const other of [
      sessionStopBody('lab-7', 'run-8', 'session-3', 'boot-1'), // another run
      sessionStopBody('lab-7', 'run-9', 'session-4', 'boot-1'), // another session
      sessionStopBody('lab-7', 'run-9', 'session-3', 'boot-2'), // another process
    ]) {
      assert.equal(verifySignature(SignDomain.Session, other, end.sig, key), false);
    }
  });
});
