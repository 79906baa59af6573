import { spawn } from 'node:child_process';
import path from 'node:path';
import type { ProbeTarget } from './probe';

export interface LoadResult {
  rps: number;
  p50Ms: number;
  p99Ms: number;
  non2xx: number;
  errors: number;
  /** Responses completed in the run (autocannon's `requests.total`). */
  total: number;
  /** CPU time (user + system) the measured server process spent during the run, per completed request. */
  cpuUsPerRequest?: number;
}

/** Runs autocannon in its own process for `seconds` or `amount` requests (pinned with `pin`, e.g. ['taskset', '-c', '0']) and reads its JSON. */
export function load(target: ProbeTarget, options: { connections: number; seconds?: number; amount?: number; timeoutS?: number; pin: string[] }): Promise<LoadResult> {
  const bin = path.join(path.dirname(require.resolve('autocannon/package.json')), 'autocannon.js');
  // A number of requests (`amount`) or a duration.
  const howMuch = options.amount !== undefined ? ['-a', String(options.amount)] : ['-d', String(options.seconds ?? 10)];
  if (options.timeoutS !== undefined) howMuch.push('-t', String(options.timeoutS));
  const args = [
    bin, '--json', '-c', String(options.connections), ...howMuch, '-m', 'POST', '-b', target.body,
    ...Object.entries(target.headers).flatMap(([k, v]) => ['-H', `${k}=${v}`]),
    `${target.origin}${target.path}`,
  ];
  const [cmd, ...pre] = options.pin.length ? [...options.pin, process.execPath] : [process.execPath];
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, [...pre, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`autocannon exited ${code}: ${err.slice(-500)}`));
      const j = JSON.parse(out);
      resolve({ rps: j.requests.average, p50Ms: j.latency.p50, p99Ms: j.latency.p99, non2xx: j.non2xx ?? 0, errors: j.errors ?? 0, total: j.requests.total });
    });
  });
}

/** The run with the median throughput. */
export function median(xs: LoadResult[]): LoadResult {
  return [...xs].sort((a, b) => a.rps - b.rps)[Math.floor(xs.length / 2)];
}

export const round = (x: number, d: number): number => Math.round(x * 10 ** d) / 10 ** d;
