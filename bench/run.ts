/**
 * `npm run bench`: starts its own Temporal dev server and workers, runs each scenario against the
 * fleet and against the raw-Temporal baseline on the same server, prints a table and writes
 * bench/results/latest.json (and latest.md). Not part of `npm test`; it measures, never asserts.
 *
 *   npm run bench -- --quick                      # small N, for development
 *   npm run bench -- --scenario P1,P2 --tasks 5000
 *   flags: --scenario P1,P2,P3,P4,P5,MEM  --tasks N  --hosts H  --devices D  --pollers N|default  --fill-budget-s S
 *          --concurrency C  --samples N  --p3-tasks N  --queue N  --cycles N
 *          --lease-ms MS  --mem-tasks N  --snapshot-ms MS  --host-timeout-ms MS  --server-tuning on|off
 *          --control-plane in-process|process  --p5-cache N  --server per-scenario|shared
 *          --process per-scenario|shared  --out PATH
 *
 * Each scenario gets a fresh dev server (--server per-scenario, the default): its fleet and its
 * baselines share that server, and nothing a scenario before it left (open workflows, a larger
 * database) weighs on it. --server shared runs every scenario on one server, terminating each
 * scenario's fleet before the next.
 *
 * Each scenario also runs in a bench process of its own (--process per-scenario, the default
 * with per-scenario servers): this process starts one child per scenario and merges their
 * reports, so no scenario inherits another's heap, connections, timers or JIT state.
 * --process shared runs them all in this process, one after the other (as --server shared must).
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { devServerTuningArgs } from '../control-plane/temporal-cli';
import { startBenchEnv, type BenchEnv } from './lib/env';
import { forgetFleets, longLivedWorkflows, retireFleets, setHostPollers } from './lib/fleet';
import { log, round, sleep } from './lib/util';
import { formatMarkdown, formatTable, writeReport, type Report } from './report';
import { HistoryTally } from './scenarios/history-check';
import { memory } from './scenarios/memory';
import { p1Throughput } from './scenarios/p1-throughput';
import { p2Latency } from './scenarios/p2-latency';
import { p3Cost } from './scenarios/p3-cost';
import { p4Recovery } from './scenarios/p4-recovery';
import { p5Scale } from './scenarios/p5-scale';
import type { BenchOptions, Row, Scenario, ScenarioResult } from './scenarios/types';

const SCENARIOS: Record<string, Scenario> = { P1: p1Throughput, P2: p2Latency, P3: p3Cost, P4: p4Recovery, P5: p5Scale, MEM: memory };

type ServerMode = 'per-scenario' | 'shared';

interface Invocation {
  opts: BenchOptions;
  scenarios: string[];
  out: string;
  server: ServerMode;
  /** One bench process per scenario, or all in this one. */
  process: ServerMode;
}

function options(): Invocation {
  const { values } = parseArgs({
    options: {
      scenario: { type: 'string' },
      quick: { type: 'boolean', default: false },
      tasks: { type: 'string' },
      hosts: { type: 'string' },
      devices: { type: 'string' },
      pollers: { type: 'string' },
      concurrency: { type: 'string' },
      samples: { type: 'string' },
      'p3-tasks': { type: 'string' },
      queue: { type: 'string' },
      'p5-cache': { type: 'string' },
      cycles: { type: 'string' },
      'fill-budget-s': { type: 'string' },
      'lease-ms': { type: 'string' },
      'mem-tasks': { type: 'string' },
      'snapshot-ms': { type: 'string' },
      'host-timeout-ms': { type: 'string' },
      'server-tuning': { type: 'string' },
      'control-plane': { type: 'string' },
      server: { type: 'string' },
      process: { type: 'string' },
      out: { type: 'string' },
    },
  });
  const q = values.quick!;
  const num = (v: string | undefined, full: number, quick: number): number => {
    const n = v === undefined ? (q ? quick : full) : Number(v);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`bad numeric flag value "${v}"`);
    return n;
  };
  const leaseMs = num(values['lease-ms'], 20_000, 4_000);
  // Timings of P4 keep the product defaults' proportions (lease 20 s, host timeout 30 s, snapshot 60 s, ack 30 s).
  const opts: BenchOptions = {
    quick: q,
    tasks: num(values.tasks, 1_000, 300),
    hosts: num(values.hosts, 100, 100),
    devices: num(values.devices, 10, 10),
    pollers: values.pollers === 'default' ? undefined : num(values.pollers, 2, 2),
    concurrency: num(values.concurrency, 32, 32),
    latencySamples: num(values.samples, 150, 60),
    p3Tasks: num(values['p3-tasks'], 300, 100),
    p5Queue: num(values.queue, 10_000, 1_000),
    p5Cache: values['p5-cache'] === undefined ? undefined : num(values['p5-cache'], 0, 0),
    p5Cycles: num(values.cycles, 30, 15),
    // 10,000 admissions at the ~15/s this machine manages take about 11 minutes.
    p5FillBudgetMs: num(values['fill-budget-s'], 900, 240) * 1000,
    p4: {
      leaseMs,
      hostTimeoutMs: Math.round(leaseMs * 1.5),
      snapshotIntervalMs: Math.round(leaseMs * 3),
      ackTimeoutMs: Math.round(leaseMs * 1.5),
      backoffMs: 1_000,
      tasks: 4,
    },
    memTasks: num(values['mem-tasks'], 300, 150),
    snapshotMs: num(values['snapshot-ms'], 60_000, 60_000),
    hostTimeoutMs: num(values['host-timeout-ms'], 30_000, 30_000),
    controlPlane: controlPlaneMode(values['control-plane']),
  };
  // The dev server's dynamic config (control-plane/temporal-cli.ts): the project's tuning, or the
  // server's own defaults for comparison. Read by startBenchEnv through the environment.
  const tuning = values['server-tuning'] ?? 'on';
  if (tuning !== 'on' && tuning !== 'off') throw new Error(`--server-tuning takes on or off, not "${tuning}"`);
  process.env.FLEET_DEV_SERVER_TUNING = tuning;
  const scenarios = (values.scenario ?? Object.keys(SCENARIOS).join(','))
    .split(',')
    .map((s) => s.trim().toUpperCase())
    .filter(Boolean);
  for (const s of scenarios) if (!SCENARIOS[s]) throw new Error(`unknown scenario ${s}; known: ${Object.keys(SCENARIOS).join(', ')}`);
  const server = values.server ?? 'per-scenario';
  if (server !== 'per-scenario' && server !== 'shared') throw new Error(`--server takes per-scenario or shared, not "${server}"`);
  const proc = values.process ?? server;
  if (proc !== 'per-scenario' && proc !== 'shared') throw new Error(`--process takes per-scenario or shared, not "${proc}"`);
  if (proc === 'per-scenario' && server === 'shared') throw new Error('--server shared needs --process shared (one server, one process)');
  return { opts, scenarios, out: values.out ?? join(__dirname, 'results', 'latest.json'), server, process: proc };
}

function controlPlaneMode(v: string | undefined): BenchOptions['controlPlane'] {
  const mode = v ?? 'in-process';
  if (mode !== 'in-process' && mode !== 'process') throw new Error(`--control-plane takes in-process or process, not "${mode}"`);
  return mode;
}

function busiestProcesses(): string[] {
  try {
    return execFileSync('ps', ['-eo', 'pcpu,rss,args', '--sort=-pcpu'], { encoding: 'utf8' })
      .split('\n')
      .slice(1, 9)
      .map((l) => l.trim().slice(0, 160))
      .filter(Boolean);
  } catch {
    return [];
  }
}

/**
 * What this process (the harness: in-process workers, hosts, clients) carries into a scenario:
 * its CPU over a few idle seconds, its memory and its live handles. Scenarios share this process,
 * so whatever one leaves behind (a timer, a connection, a large heap) would weigh on the next.
 */
interface HarnessState {
  idleCores: number;
  rssMiB: number;
  heapUsedMiB: number;
  activeResources: Record<string, number>;
}

async function harnessState(idleMs = 5_000): Promise<HarnessState> {
  const u0 = process.cpuUsage();
  const t0 = performance.now();
  await sleep(idleMs);
  const u = process.cpuUsage(u0);
  const mem = process.memoryUsage();
  const activeResources: Record<string, number> = {};
  for (const r of process.getActiveResourcesInfo()) activeResources[r] = (activeResources[r] ?? 0) + 1;
  return {
    idleCores: round((u.user + u.system) / 1e3 / (performance.now() - t0), 3),
    rssMiB: round(mem.rss / 2 ** 20, 1),
    heapUsedMiB: round(mem.heapUsed / 2 ** 20, 1),
    activeResources,
  };
}

function harnessRow(h: HarnessState): Row {
  const handles = Object.entries(h.activeResources)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  return {
    metric: 'the bench process before this scenario: CPU cores over 5 idle s / RSS / V8 heap used (MiB) / live handles',
    fleet: `${h.idleCores} / ${h.rssMiB} / ${h.heapUsedMiB} / ${handles || 'none'}`,
  };
}

function machine(be: BenchEnv | undefined): Record<string, unknown> {
  const cpus = os.cpus();
  return {
    cpuModel: cpus[0]?.model,
    cpus: cpus.length,
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    os: `${os.type()} ${os.release()}`,
    node: process.version,
    temporal: be?.temporalVersion,
    // What the dev server was started with beyond its defaults (empty: --server-tuning off).
    serverDynamicConfig: devServerTuningArgs().filter((a) => a !== '--dynamic-config-value'),
    loadAverage: os.loadavg().map((v) => Math.round(v * 100) / 100),
  };
}

/** What a report records of the options, whichever way its scenarios ran. */
function reportOptions(inv: Invocation): Record<string, unknown> {
  const { opts, scenarios, server, process: proc } = inv;
  return { ...opts, hostPollers: opts.pollers ?? 'SDK default (min(10, devices))', scenarios, server, process: proc };
}

/** The JSON report, and its table as Markdown beside it. */
function save(out: string, report: Report): void {
  writeReport(out, report);
  writeFileSync(out.replace(/\.json$/, '.md'), formatMarkdown(report.results) + '\n');
}

/** The command line minus the flags (and their values) named in `drop`. */
function argsWithout(args: string[], drop: string[]): string[] {
  const kept: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const name = args[i].replace(/=.*$/, '');
    if (!drop.includes(name)) kept.push(args[i]);
    else if (!args[i].includes('=')) i++; // its value is the next argument
  }
  return kept;
}

/**
 * --process per-scenario: one child bench process per scenario (this same script with
 * `--scenario <one> --process shared`), their reports merged into one. The children's own tables
 * and logs pass through; the merged table comes last.
 */
async function runEachInItsOwnProcess(inv: Invocation, command: string): Promise<void> {
  const { scenarios, out } = inv;
  const startedAt = new Date().toISOString();
  const before = { machine: machine(undefined), busiest: busiestProcesses() };
  const dir = mkdtempSync(join(os.tmpdir(), 'fleet-bench-'));
  const common = argsWithout(process.argv.slice(2), ['--scenario', '--process', '--out']);
  const results: ScenarioResult[] = [];
  const histories = new HistoryTally();
  const all = () => (histories.empty ? results : [...results, histories.result()]);
  let temporal: unknown;
  let interrupted: string | undefined;
  let child: ReturnType<typeof spawn> | undefined;
  const write = (finishedAt?: string) => {
    const report: Report = {
      startedAt,
      finishedAt: finishedAt ?? '(running)',
      command,
      options: reportOptions(inv),
      machine: { ...machine(undefined), temporal, atStart: before, atEnd: finishedAt ? busiestProcesses() : undefined },
      results: all(),
    };
    save(out, report);
  };
  // A terminal's Ctrl-C reaches the child too (same process group); a SIGTERM is passed on. The
  // child writes what it measured; this process then writes the merged report and stops.
  const onSignal = (signal: NodeJS.Signals) => {
    interrupted = signal;
    log(`${signal}: stopping once the running scenario's bench process has written its report`);
    if (signal === 'SIGTERM') child?.kill('SIGTERM');
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    for (const id of scenarios) {
      if (interrupted) break;
      const childOut = join(dir, `${id}.json`);
      const args = [...process.execArgv, __filename, ...common, '--scenario', id, '--process', 'shared', '--out', childOut];
      log(`=== ${id} === in a bench process of its own`);
      const t0 = Date.now();
      const exit = await new Promise<string>((resolve) => {
        child = spawn(process.execPath, args, { stdio: 'inherit' });
        child.once('error', (err) => resolve(String(err)));
        child.once('exit', (code, signal) => resolve(signal ? `signal ${signal}` : `code ${code}`));
      });
      child = undefined;
      let report: Report | undefined;
      try {
        report = JSON.parse(readFileSync(childOut, 'utf8')) as Report;
      } catch {
        report = undefined;
      }
      if (!report) {
        const error = `its bench process ended (${exit}) without a report`;
        results.push({ id, title: 'failed', rows: [], notes: [], details: {}, error, durationMs: Date.now() - t0 });
      } else {
        temporal ??= report.machine.temporal;
        for (const r of report.results) {
          if (r.id === 'P5h') histories.merge(r.details);
          else results.push(r);
        }
        if (exit !== 'code 0') log(`${id}'s bench process ended with ${exit}`);
      }
      write();
    }
  } finally {
    write(new Date().toISOString() + (interrupted ? ` (interrupted by ${interrupted})` : ''));
    rmSync(dir, { recursive: true, force: true });
    console.log(formatTable(all()));
    console.log(`\n${command}\nreport: ${out}`);
  }
  if (interrupted) process.exit(130);
}

async function main(): Promise<void> {
  const inv = options();
  const { opts, scenarios, out, server } = inv;
  const command = `npm run bench --${process.argv.slice(2).length ? ' ' + process.argv.slice(2).join(' ') : ''}`;
  if (inv.process === 'per-scenario' && scenarios.length > 1) return runEachInItsOwnProcess(inv, command);
  const startedAt = new Date().toISOString();
  const before = { machine: machine(undefined), busiest: busiestProcesses() };
  setHostPollers(opts.pollers);
  log(`options ${JSON.stringify(opts)}; scenarios ${scenarios.join(',')}`);
  let be = await startBenchEnv();
  const results: ScenarioResult[] = [];
  const onSignal = (signal: string) => {
    log(`${signal}: writing what was measured so far and stopping the dev server`);
    write(`${new Date().toISOString()} (interrupted by ${signal})`);
    console.log(formatTable(results));
    const timer = setTimeout(() => process.exit(130), 10_000);
    void be.env.teardown().finally(() => {
      clearTimeout(timer);
      process.exit(130);
    });
  };
  process.once('SIGINT', () => onSignal('SIGINT'));
  process.once('SIGTERM', () => onSignal('SIGTERM'));
  const write = (finishedAt?: string) => {
    const report: Report = {
      startedAt,
      finishedAt: finishedAt ?? '(running)',
      command,
      options: reportOptions(inv),
      machine: { ...machine(be), atStart: before, atEnd: finishedAt ? busiestProcesses() : undefined },
      results,
    };
    save(out, report);
  };
  const histories = new HistoryTally();
  /** Set when the server was torn down and no new one came up. */
  let serverGone = false;
  try {
    for (const [i, id] of scenarios.entries()) {
      if (i > 0 && server === 'per-scenario') {
        forgetFleets();
        await be.env.teardown().catch((err) => log(`dev server teardown failed: ${String(err)}`));
        try {
          be = await startBenchEnv(be);
        } catch (err) {
          // No server: the scenarios left cannot run. Say so in the report for each of them.
          log(`a fresh dev server for ${id} failed to start: ${(err as Error)?.stack ?? String(err)}`);
          for (const rest of scenarios.slice(i)) {
            results.push({ id: rest, title: 'not run: no dev server', rows: [], notes: [], details: {}, error: String(err) });
          }
          serverGone = true;
          break;
        }
      }
      const harness = await harnessState();
      log(`=== ${id} === (this process before it: ${JSON.stringify(harness)})`);
      const t0 = Date.now();
      try {
        const r = await SCENARIOS[id](be, opts);
        r.durationMs = Date.now() - t0;
        r.rows.push(harnessRow(harness));
        r.details.harnessBefore = harness;
        results.push(r);
      } catch (err) {
        log(`${id} failed: ${(err as Error)?.stack ?? String(err)}`);
        results.push({ id, title: 'failed', rows: [], notes: [], details: {}, error: String(err), durationMs: Date.now() - t0 });
      }
      // The scenario's long-lived histories, read before its server goes or its fleet is retired.
      try {
        await histories.measure(be, longLivedWorkflows);
      } catch (err) {
        log(`history check after ${id} failed: ${String(err)}`);
        histories.fail(`after ${id}: ${String(err)}`);
      }
      if (server === 'shared' && i < scenarios.length - 1) {
        const t1 = Date.now();
        const terminated = await retireFleets(be.env.client).catch((err) => {
          log(`retiring ${id}'s fleet failed: ${String(err)}`);
          return 0;
        });
        log(`${id}: terminated the ${terminated} workflows its fleet left running, in ${Date.now() - t1} ms`);
      }
      write();
    }
  } finally {
    if (!histories.empty) results.push(histories.result());
    write(new Date().toISOString());
    console.log(formatTable(results));
    console.log(`\n${command}\nreport: ${out}`);
    if (!serverGone) await be.env.teardown();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
