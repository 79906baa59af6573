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

/** Raw timings of one target, microseconds: whole answers and first bytes, in the order taken. */
interface Samples {
  totals: number[];
  firsts: number[];
}

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

/** `n` sequential requests on one keep-alive connection after `warmup` untimed ones, added to `into`. */
async function sample(target: ProbeTarget, n: number, warmup: number, into: Samples): Promise<void> {
  const pool = new Pool(target.origin, { connections: 1, pipelining: 1 });
  try {
    for (let i = 0; i < warmup + n; i++) {
      const t0 = process.hrtime.bigint();
      const res = await pool.request({ method: 'POST', path: target.path, headers: target.headers, body: target.body });
      let first = 0n;
      for await (const _chunk of res.body) if (first === 0n) first = process.hrtime.bigint();
      const t1 = process.hrtime.bigint();
      if (res.statusCode !== 200) throw new Error(`probe ${target.origin}${target.path} answered ${res.statusCode}`);
      if (i >= warmup) {
        into.totals.push(Number(t1 - t0) / 1000);
        into.firsts.push(Number((first || t1) - t0) / 1000);
      }
    }
  } finally {
    await pool.close();
  }
}

function summary({ totals, firsts }: Samples): ProbeResult {
  const t = [...totals].sort((a, b) => a - b);
  const f = [...firsts].sort((a, b) => a - b);
  const r = (x: number) => Math.round(x);
  return { p50Us: r(quantile(t, 0.5)), p99Us: r(quantile(t, 0.99)), ttfbP50Us: r(quantile(f, 0.5)), ttfbP99Us: r(quantile(f, 0.99)), samples: t.length };
}

/**
 * Unloaded latency at microsecond resolution: `n` sequential requests on one keep-alive connection,
 * each timed with the monotonic clock, after `warmup` untimed ones.
 */
export async function probe(target: ProbeTarget, n: number, warmup = Math.ceil(n / 10)): Promise<ProbeResult> {
  const s: Samples = { totals: [], firsts: [] };
  await sample(target, n, warmup, s);
  return summary(s);
}

/**
 * `probe` of several targets that are to be compared (e.g. the fake upstream direct and the gateway in
 * front of it), taken in `rounds` alternating slices of `n / rounds` requests each, so that whatever the
 * machine does meanwhile (a slower first stretch, another process's background work) falls on all of them
 * alike; each target's figures are over all of its slices (four unless `rounds` says).
 *
 * @example const r = await probeAlternating({ direct, gateway }, 2000); r.gateway.p50Us - r.direct.p50Us
 */
export async function probeAlternating<K extends string>(targets: Record<K, ProbeTarget>, n: number, rounds = 4): Promise<Record<K, ProbeResult>> {
  const names = Object.keys(targets) as K[];
  const samples = Object.fromEntries(names.map((k) => [k, { totals: [], firsts: [] } as Samples])) as Record<K, Samples>;
  const slice = Math.max(1, Math.ceil(n / rounds));
  for (let r = 0; r < rounds; r++) {
    for (const k of names) await sample(targets[k], slice, Math.ceil(slice / 10), samples[k]);
  }
  return Object.fromEntries(names.map((k) => [k, summary(samples[k])])) as Record<K, ProbeResult>;
}
