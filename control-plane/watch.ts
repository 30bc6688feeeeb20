/**
 * The control plane's watch: every `poolWatchMs` it starts again a pool scheduler that is not
 * running (terminated by an operator, or failed), even in a pool where nothing else happens; the
 * new run asks the pool's tasks and hosts again. Device workflows lost the same way are started
 * again by their hosts. A workflow whose runs keep stopping soon after they start is started again
 * less and less often (restart-backoff.ts), and said so once per run held back.
 */
import type { Client } from '@temporalio/client';
import type { ControlPlaneConfig } from './config';
import type { Log } from './log';
import { RestartBackoff, restartBackoffFor } from './restart-backoff';
import { restartStoppedSchedulers, restoreStoppedDevices, type Deferred } from './worker';

export interface FleetWatch {
  /** Ends the watch; resolves once a check under way has finished. */
  stop(): Promise<void>;
}

export function watchFleet(client: Client, config: ControlPlaneConfig, log: Log): FleetWatch {
  let stopping = false;
  let wake: (() => void) | undefined;
  const schedulers = new RestartBackoff(restartBackoffFor(config.poolWatchMs));
  const devices = new RestartBackoff(restartBackoffFor(config.poolWatchMs));
  const sayDeferred = (what: string, deferred: Deferred[]): void => {
    for (const d of deferred) {
      if (!d.fresh) continue;
      log.error(`${what} keeps stopping soon after it starts: started again only later`, {
        workflowId: d.workflowId,
        quickRunsInARow: d.streak,
        startedAgainMsAfterItClosed: d.delayMs,
      });
    }
  };
  const done = (async () => {
    // Each failure is said once per spell (the server may be down a while), not at every check.
    let failing = false;
    const failingPools = new Set<string>();
    const failingHosts = new Set<string>();
    let failingDeviceCheck = false;
    while (!stopping) {
      await new Promise<void>((r) => {
        wake = r;
        setTimeout(r, config.poolWatchMs).unref();
      });
      if (stopping) return;
      try {
        const { restarted, failed, deferred } = await restartStoppedSchedulers(client, config, { backoff: schedulers });
        for (const pool of restarted) {
          log.warn('the scheduler of a pool was not running (terminated or failed): started again', { pool });
        }
        for (const { pool, error } of failed) {
          if (!failingPools.has(pool)) log.error('could not start the scheduler of a pool again; trying again', { pool, error });
        }
        failingPools.clear();
        for (const { pool } of failed) failingPools.add(pool);
        sayDeferred('the scheduler of a pool', deferred);
        failing = false;
      } catch (err) {
        if (!failing) log.warn('could not check that every pool scheduler runs; trying again', { error: err });
        failing = true;
      }
      if (stopping) return;
      try {
        const found = await restoreStoppedDevices(client, config, { backoff: devices });
        for (const device of found.restored) {
          log.warn('a device workflow was not running (terminated or failed): its host starts it again', { device });
        }
        for (const { host, error } of found.failed) {
          if (!failingHosts.has(host)) log.error('could not ask a host to start its device workflows again; trying again', { host, error });
        }
        failingHosts.clear();
        for (const { host } of found.failed) failingHosts.add(host);
        sayDeferred('a device workflow', found.deferred);
        failingDeviceCheck = false;
      } catch (err) {
        if (!failingDeviceCheck) log.warn('could not check that every device workflow runs; trying again', { error: err });
        failingDeviceCheck = true;
      }
    }
  })();
  return {
    async stop() {
      stopping = true;
      wake?.();
      await done;
    },
  };
}
