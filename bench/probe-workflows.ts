/**
 * Workflows for bench/probe-dispatch.ts: the smallest shapes of the fleet's dispatch path, with
 * nothing of the fleet in them, to measure what one pass through the server costs on this machine.
 */
import { condition, defineSignal, getExternalWorkflowHandle, proxyActivities, setHandler } from '@temporalio/workflow';

const { touch } = proxyActivities<{ touch(): Promise<void> }>({
  taskQueue: 'probe-host',
  startToCloseTimeout: '10s',
  retry: { maximumAttempts: 1 },
});

/** Start -> one activity on another task queue: the baseline's shape. */
export async function probeBare(): Promise<void> {
  await touch();
}

export const probeGo = defineSignal<[boolean]>('go');

/** On each signal: pass it to `next`, or run the activity when last in the chain. `true` stops it. */
export async function probeRelay(next: string | null): Promise<void> {
  let got = 0;
  let seen = 0;
  let stop = false;
  setHandler(probeGo, (s) => {
    got++;
    if (s) stop = true;
  });
  for (;;) {
    await condition(() => got > seen);
    seen = got;
    if (stop) {
      if (next) await getExternalWorkflowHandle(next).signal(probeGo, true);
      return;
    }
    if (next) await getExternalWorkflowHandle(next).signal(probeGo, false);
    else await touch();
  }
}

/** Waits for one `go` signal, then completes: one workflow task after the signal, nothing else. */
export async function probeWait(): Promise<void> {
  let got = false;
  setHandler(probeGo, () => {
    got = true;
  });
  await condition(() => got);
}
