/** The benchmark report: a plain-text table on stdout and JSON in bench/results/. */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Row, ScenarioResult } from './scenarios/types';

export interface Report {
  startedAt: string;
  finishedAt: string;
  command: string;
  options: unknown;
  machine: Record<string, unknown>;
  results: ScenarioResult[];
}

const cell = (v: unknown): string => (v === undefined || v === null ? '' : typeof v === 'number' && Number.isNaN(v) ? 'n/a' : String(v));

function verdict(r: Row): string {
  if (r.met === undefined) return '';
  return r.met ? 'met' : 'MISSED';
}

export function formatTable(results: ScenarioResult[]): string {
  const header = ['', 'metric', 'fleet', 'baseline', 'ratio', 'target', ''];
  const rows: string[][] = [];
  for (const s of results) {
    rows.push([s.id, s.title + (s.error ? `  [ERROR: ${s.error}]` : ''), '', '', '', '', '']);
    for (const r of s.rows) rows.push(['', r.metric, cell(r.fleet), cell(r.baseline), cell(r.ratio), cell(r.target), verdict(r)]);
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.filter((r) => r[2] !== '' || i !== 1).map((r) => r[i].length)));
  const line = (cols: string[]) => cols.map((c, i) => (i >= 2 && i <= 4 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join('  ').trimEnd();
  const out = [line(header), widths.map((w) => '-'.repeat(w)).join('  ')];
  for (const r of rows) out.push(r[2] === '' && r[1] && r[0] ? `${r[0].padEnd(widths[0])}  ${r[1]}` : line(r));
  return out.join('\n');
}

/** The same table as Markdown (for BENCHMARKS.md). */
export function formatMarkdown(results: ScenarioResult[]): string {
  const out = ['| | metric | fleet | baseline | ratio | target | |', '|---|---|---:|---:|---:|---|---|'];
  for (const s of results) {
    out.push(`| **${s.id}** | **${s.title}**${s.error ? ` (error: ${s.error})` : ''} | | | | | |`);
    for (const r of s.rows) {
      out.push(`| | ${r.metric.trim()} | ${cell(r.fleet)} | ${cell(r.baseline)} | ${cell(r.ratio)} | ${cell(r.target)} | ${verdict(r)} |`);
    }
  }
  return out.join('\n');
}

export function writeReport(path: string, report: Report): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, JSON.stringify(report, null, 2) + '\n');
}
