import { Pool } from 'undici';

export interface ProbeTarget {
  origin: string; // http://127.0.0.1:port
  path: string;
  headers: Record<string, string>;
  body: string;
}

export interface ProbeResult {
  /** Whole-response latency, microseconds. */
  p50Us: number;
  p99Us: number;
  /** Time to the first body byte, microseconds. */
  ttfbP50Us: number;
  ttfbP99Us: number;
  samples: number;
}

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

/**
 * Unloaded latency at microsecond resolution: `n` sequential requests on one keep-alive connection,
 * each timed with the monotonic clock, after `warmup` untimed ones.
 */
export async function probe(target: ProbeTarget, n: number, warmup = Math.ceil(n / 10)): Promise<ProbeResult> {
  const pool = new Pool(target.origin, { connections: 1, pipelining: 1 });
  const totals: number[] = [];
  const firsts: number[] = [];
  try {
    for (let i = 0; i < warmup + n; i++) {
      const t0 = process.hrtime.bigint();
      const res = await pool.request({ method: 'POST', path: target.path, headers: target.headers, body: target.body });
      let first = 0n;
      for await (const _chunk of res.body) if (first === 0n) first = process.hrtime.bigint();
      const t1 = process.hrtime.bigint();
      if (res.statusCode !== 200) throw new Error(`probe ${target.origin}${target.path} answered ${res.statusCode}`);
      if (i >= warmup) {
        totals.push(Number(t1 - t0) / 1000);
        firsts.push(Number((first || t1) - t0) / 1000);
      }
    }
  } finally {
    await pool.close();
  }
  totals.sort((a, b) => a - b);
  firsts.sort((a, b) => a - b);
  const r = (x: number) => Math.round(x);
  return { p50Us: r(quantile(totals, 0.5)), p99Us: r(quantile(totals, 0.99)), ttfbP50Us: r(quantile(firsts, 0.5)), ttfbP99Us: r(quantile(firsts, 0.99)), samples: n };
}
