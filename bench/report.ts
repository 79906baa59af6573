import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** One line of the benchmark table. */
export interface Row {
  scenario: string;
  target: string;
  rps: number;
  rpsRatioToDirect: number;
  loadedP50Ms: number;
  loadedP99Ms: number;
  /** CPU time of this target's own process per request under load (the fake's for direct). */
  cpuUsPerRequest?: number;
  unloadedP50Us: number;
  unloadedP99Us: number;
  addedP50Us: number;
  ttfbP50Us?: number;
  addedTtfbP50Us?: number;
}

const cell = (v: number | undefined) => (v === undefined || Number.isNaN(v) ? '–' : String(v));

/** The results as a Markdown table with the run's facts underneath. */
export function renderMarkdown(rows: Row[], rss: Record<string, number | undefined>, meta: Record<string, unknown>): string {
  const head = '| scenario | target | req/s | × direct | p50 ms (load) | p99 ms (load) | CPU µs/req | p50 µs (unloaded) | p99 µs (unloaded) | added p50 µs | TTFB p50 µs | added TTFB p50 µs |';
  const sep = '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|';
  const lines = rows.map(
    (r) =>
      `| ${r.scenario} | ${r.target} | ${r.rps} | ${r.rpsRatioToDirect} | ${r.loadedP50Ms} | ${r.loadedP99Ms} | ${cell(r.cpuUsPerRequest)} | ${r.unloadedP50Us} | ${r.unloadedP99Us} | ${r.addedP50Us} | ${cell(r.ttfbP50Us)} | ${cell(r.addedTtfbP50Us)} |`,
  );
  const facts = Object.entries({ ...rss, ...meta }).map(([k, v]) => `- ${k}: ${v ?? '–'}`);
  return [head, sep, ...lines, '', ...facts, ''].join('\n');
}

/**
 * Writes a benchmark's outputs as `bench/results/<prefix><date>.<ext>` (the folder is git-ignored) and
 * returns that base name, e.g. `writeResults('soak-', { md, json })` → `soak-2026-11-22T18-58-30-915Z`.
 */
export function writeResults(prefix: string, files: Record<string, string | Buffer>, date = new Date().toISOString()): string {
  const dir = path.resolve(__dirname, '..', '..', 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const name = `${prefix}${date.replace(/[:.]/g, '-')}`;
  for (const [ext, content] of Object.entries(files)) writeFileSync(path.join(dir, `${name}.${ext}`), content);
  return name;
}
