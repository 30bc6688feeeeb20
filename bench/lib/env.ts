/**
 * The benchmark's own Temporal dev server (the real `temporal` CLI, SQLite in memory, the fleet's
 * search attributes, Prometheus metrics on a loopback port) and the two workflow bundles: the
 * fleet's workflows and the baseline workflow, bundled separately.
 */
import { randomBytes } from 'node:crypto';
import { WORKFLOW_PAYLOAD_CONVERTER, WORKFLOW_PRELOAD_MODULES } from '../../control-plane/worker';
import { execFileSync } from 'node:child_process';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, DefaultLogger, Runtime, type WorkflowBundle } from '@temporalio/worker';
import { devServerTuningArgs, temporalCliPath } from '../../control-plane/temporal-cli';
import { ALL_SEARCH_ATTRIBUTES } from '../../workflows/search-attributes';
import { CpuMeter, findServerPid } from './cpu';
import { startServerProfile } from './server-profile';
import { freePort, log } from './util';

export interface BenchEnv {
  env: TestWorkflowEnvironment;
  fleetBundle: WorkflowBundle;
  baselineBundle: WorkflowBundle;
  metricsUrl: string;
  temporalVersion: string;
  namespace: string;
  /** CPU of this process, the dev server and the machine. */
  cpu: CpuMeter;
}

let runtimeInstalled = false;

/**
 * A fresh dev server and its connections. `reuse` passes on the bundles of an earlier environment
 * (bench/run.ts starts one server per scenario, so no scenario runs on another's leftovers).
 */
export async function startBenchEnv(reuse?: Pick<BenchEnv, 'fleetBundle' | 'baselineBundle'>): Promise<BenchEnv> {
  if (!runtimeInstalled) {
    // The fleet runs as deployed: its signals tagged (control-plane/signal-auth.ts), one key a run.
    // BENCH_SIGNAL_AUTH=off runs it without keys (nothing tagged or checked), to measure the cost.
    if (process.env.BENCH_SIGNAL_AUTH === 'off') delete process.env.FLEET_SIGNAL_KEYS;
    else process.env.FLEET_SIGNAL_KEYS ||= randomBytes(32).toString('hex');
    Runtime.install({ logger: new DefaultLogger(process.env.BENCH_LOG === '1' ? 'INFO' : 'ERROR') });
    runtimeInstalled = true;
  }
  const path = temporalCliPath();
  const temporalVersion = execFileSync(path, ['--version'], { encoding: 'utf8' }).trim();
  const metricsPort = await freePort();
  const started = Date.now();
  const [env, fleetBundle, baselineBundle] = await Promise.all([
    TestWorkflowEnvironment.createLocal({
      server: {
        executable: { type: 'existing-path', path },
        ip: '127.0.0.1',
        searchAttributes: ALL_SEARCH_ATTRIBUTES,
        extraArgs: ['--log-level', 'error', '--metrics-port', String(metricsPort), ...devServerTuningArgs()],
      },
    }),
    reuse?.fleetBundle ??
      bundleWorkflowCode({
        workflowsPath: require.resolve('../../workflows'),
        preloadModules: WORKFLOW_PRELOAD_MODULES,
        payloadConverterPath: WORKFLOW_PAYLOAD_CONVERTER,
        logger: new DefaultLogger('ERROR'),
      }),
    reuse?.baselineBundle ??
      bundleWorkflowCode({
        workflowsPath: require.resolve('../baseline-workflows'),
        logger: new DefaultLogger('ERROR'),
      }),
  ]);
  const serverPid = findServerPid(Number(env.address.split(':').pop()));
  log(
    `dev server ${env.address} (pid ${serverPid}) up${reuse ? '' : ' and bundles built'} in ${Date.now() - started} ms (${temporalVersion})`,
  );
  await startServerProfile(serverPid);
  return {
    cpu: new CpuMeter(serverPid),
    env,
    fleetBundle,
    baselineBundle,
    metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
    temporalVersion,
    namespace: env.namespace ?? 'default',
  };
}

/**
 * Frontend request counters from the server's Prometheus endpoint, by operation (summed over
 * every other label). Heartbeats never reach history, so this is where they are counted.
 */
export async function frontendRequests(metricsUrl: string): Promise<Map<string, number>> {
  const res = await fetch(metricsUrl);
  const text = await res.text();
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith('service_requests{')) continue;
    const labels = line.slice(line.indexOf('{') + 1, line.lastIndexOf('}'));
    if (!/service_name="frontend"/.test(labels)) continue;
    const op = /operation="([^"]+)"/.exec(labels)?.[1];
    const value = Number(line.slice(line.lastIndexOf('}') + 1).trim());
    if (op && Number.isFinite(value)) out.set(op, (out.get(op) ?? 0) + value);
  }
  return out;
}

export function diffCounts(after: Map<string, number>, before: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of after) {
    const d = v - (before.get(k) ?? 0);
    if (d > 0) out[k] = d;
  }
  return out;
}

/** One server histogram series: calls and seconds spent, summed over every label but these. */
export interface OpTime {
  count: number;
  sec: number;
}

/**
 * The server's own latency histograms (`persistence_latency`, `service_latency`,
 * `task_latency_processing`), by `<metric> <service>/<operation>`, from its Prometheus endpoint.
 * Diff two readings to see where the server spent its time in between.
 */
export async function serverOpTimes(metricsUrl: string): Promise<Map<string, OpTime>> {
  const text = await (await fetch(metricsUrl)).text();
  const out = new Map<string, OpTime>();
  for (const line of text.split('\n')) {
    const m = /^(persistence_latency|service_latency|task_latency_processing)_(sum|count)\{([^}]*)\}\s+(\S+)$/.exec(
      line,
    );
    if (!m) continue;
    const op = /operation="([^"]+)"/.exec(m[3])?.[1] ?? '?';
    const svc = /service_name="([^"]+)"/.exec(m[3])?.[1] ?? '?';
    const key = `${m[1]} ${svc}/${op}`;
    const v = Number(m[4]);
    if (!Number.isFinite(v)) continue;
    const cur = out.get(key) ?? { count: 0, sec: 0 };
    if (m[2] === 'sum') cur.sec += v;
    else cur.count += v;
    out.set(key, cur);
  }
  return out;
}

export function diffOpTimes(after: Map<string, OpTime>, before: Map<string, OpTime>): Map<string, OpTime> {
  const out = new Map<string, OpTime>();
  for (const [k, v] of after) {
    const b = before.get(k) ?? { count: 0, sec: 0 };
    if (v.count - b.count > 0) out.set(k, { count: v.count - b.count, sec: v.sec - b.sec });
  }
  return out;
}
