import type { BenchEnv } from '../lib/env';

export interface BenchOptions {
  quick: boolean;
  /** P1 tasks. */
  tasks: number;
  hosts: number;
  devices: number;
  /** Activity pollers per in-process host worker (undefined: SDK default). */
  pollers?: number;
  /** Concurrent submit calls in a burst. */
  concurrency: number;
  latencySamples: number;
  p3Tasks: number;
  /** P5: the large queue (the small one is 100). */
  p5Queue: number;
  /** P5: the control plane's maxCachedTasks (undefined: its default, 1,000). */
  p5Cache?: number;
  p5Cycles: number;
  /** P5: how long filling one pool's queue may take before the scenario goes on with what it has. */
  p5FillBudgetMs: number;
  /** P4 timings (ms). */
  p4: { leaseMs: number; hostTimeoutMs: number; snapshotIntervalMs: number; ackTimeoutMs: number; backoffMs: number; tasks: number };
  memTasks: number;
  /** P1-P3: host snapshot interval (product default 60 s); the snapshot timeout is 3x it. */
  snapshotMs: number;
  /** P1-P3: the host liveness lease, the session's heartbeat timeout (product default 30 s). */
  hostTimeoutMs: number;
  /** P1-P3: who serves the control queue (bench/lib/fleet.ts). */
  controlPlane: 'in-process' | 'process';
}

export interface Row {
  metric: string;
  fleet: number | string;
  baseline?: number | string;
  /** fleet / baseline (or as stated in `metric`). */
  ratio?: number | string;
  target?: string;
  met?: boolean;
}

export interface ScenarioResult {
  id: string;
  title: string;
  rows: Row[];
  notes: string[];
  details: Record<string, unknown>;
  durationMs?: number;
  error?: string;
}

export type Scenario = (be: BenchEnv, opts: BenchOptions) => Promise<ScenarioResult>;
