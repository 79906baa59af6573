import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import Redis from 'ioredis';
import { BENCH_PROMPT, createSpendKey, gatewayYaml, SPEND_SECTIONS, SPEND_STAGES, serveArgs } from './config';
import { load, median, round, type LoadResult } from './load';
import { probeAlternating, type ProbeResult, type ProbeTarget } from './probe';
import { pinTo, startNode, type Started } from './processes';
import { writeResults } from './report';

/**
 * `npm run bench:spend [-- --seconds 8 --runs 3 --connections 50 --probe 1000 --redis redis://127.0.0.1:6379/0]`
 *
 * What the spend checks cost per request: the same gateway and pipeline without them (baseline), with the
 * `rate-limit` and `budget-check` stages on in-process state, and on Redis state. The key has a monthly
 * limit, the workspace a default guardrail budget and a workspace budget, the key a rate limit, and the
 * account a balance under the in-flight threshold, so every check does its work (four budget lines, a
 * hold, a settlement, two rate windows). Non-streaming chat completions; one gateway process per variant.
 */
const ROOT = path.resolve(__dirname, '..', '..');
const MAIN = path.join(ROOT, 'dist', 'src', 'main.js');
const FAKE = path.join(ROOT, 'dist', 'bench', 'fake-upstream.js');

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '8' },
    warmup: { type: 'string', default: '4' },
    runs: { type: 'string', default: '3' },
    connections: { type: 'string', default: '50' },
    probe: { type: 'string', default: '1000' },
    redis: { type: 'string', default: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379/0' },
  },
});

const prefix = `gwbench:${randomBytes(4).toString('hex')}:`;

const VARIANTS = [
  { id: 'baseline', pipeline: '[auth, validate, upstream]', extra: '' },
  { id: 'spend-memory', pipeline: SPEND_STAGES, extra: SPEND_SECTIONS },
  { id: 'spend-redis', pipeline: SPEND_STAGES, extra: `${SPEND_SECTIONS}state: { driver: redis, url: '${values.redis}', prefix: '${prefix}' }\n` },
] as const;

async function main(): Promise<void> {
  const seconds = Number(values.seconds);
  const connections = Number(values.connections);
  const loadPin = pinTo(0);
  const serverPin = pinTo(1);
  if (loadPin.length) execFileSync('taskset', ['-pc', '0', String(process.pid)], { stdio: 'ignore' });
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'gw-bench-spend-'));
  const procs: Started[] = [];
  try {
    const fake = await startNode([FAKE, '0'], { pin: serverPin, ready: /listening on (\d+)/, logFile: path.join(tmp, 'fake.log') });
    procs.push(fake);
    const fakeOrigin = `http://127.0.0.1:${fake.match[1]}`;
    const targets = new Map<string, ProbeTarget>();
    for (const v of VARIANTS) {
      const dir = path.join(tmp, v.id);
      mkdirSync(dir);
      const config = path.join(dir, 'gateway.yaml');
      writeFileSync(config, gatewayYaml(fakeOrigin, dir, v));
      const key = createSpendKey(MAIN, config, 'bench');
      const gw = await startNode(serveArgs(MAIN, config), { pin: serverPin, ready: /listening on http:\/\/[\d.]+:(\d+)/, logFile: path.join(dir, 'gateway.log') });
      procs.push(gw);
      targets.set(v.id, {
        origin: `http://127.0.0.1:${gw.match[1]}`,
        path: '/api/v1/chat/completions',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify({ model: 'bench/chat', max_tokens: 64, messages: [{ role: 'user', content: BENCH_PROMPT }] }),
      });
    }
    for (const t of targets.values()) await load(t, { connections, seconds: Number(values.warmup), pin: loadPin });
    // The variants' probes alternate in slices, so a slow stretch of the machine falls on all alike.
    const probes = new Map<string, ProbeResult>(Object.entries(await probeAlternating(Object.fromEntries(targets), Number(values.probe))));
    const loads = new Map<string, LoadResult[]>();
    for (let r = 0; r < Number(values.runs); r++) {
      for (const [id, t] of targets) {
        const res = await load(t, { connections, seconds, pin: loadPin });
        if (res.non2xx || res.errors) log(`warning: ${id} had ${res.non2xx} non-2xx and ${res.errors} errors`);
        (loads.get(id) ?? loads.set(id, []).get(id)!).push(res);
        log(`run ${r + 1} ${id}: ${Math.round(res.rps)} req/s`);
      }
    }
    const base = median(loads.get('baseline')!);
    const baseProbe = probes.get('baseline')!;
    const rows = VARIANTS.map(({ id }) => {
      const l = median(loads.get(id)!);
      const p = probes.get(id)!;
      return {
        variant: id,
        rps: Math.round(l.rps),
        rpsRatioToBaseline: round(l.rps / base.rps, 3),
        unloadedP50Us: p.p50Us,
        addedP50Us: p.p50Us - baseProbe.p50Us,
        loadedP50Ms: l.p50Ms,
        loadedP99Ms: l.p99Ms,
      };
    });
    const date = new Date().toISOString();
    const md = [
      `# Spend checks: cost per request (${date}, Node ${process.version}, ${os.cpus().length} cores, ${connections} connections, ${values.runs} × ${seconds} s)`,
      '',
      '| variant | req/s | ratio to baseline | unloaded p50 µs | added p50 µs | loaded p50 ms | loaded p99 ms |',
      '|---|---:|---:|---:|---:|---:|---:|',
      ...rows.map((r) => `| ${r.variant} | ${r.rps} | ${r.rpsRatioToBaseline} | ${r.unloadedP50Us} | ${r.addedP50Us} | ${r.loadedP50Ms} | ${r.loadedP99Ms} |`),
      '',
    ].join('\n');
    const stamp = writeResults('spend-', { md, json: JSON.stringify({ date, rows }, null, 2) }, date);
    process.stdout.write(`\n${md}\nwritten to bench/results/${stamp}.{md,json}\n`);
  } finally {
    for (const p of procs.reverse()) await p.stop();
    rmSync(tmp, { recursive: true, force: true });
    const redis = new Redis(values.redis!, { lazyConnect: true, maxRetriesPerRequest: 1 });
    try {
      await redis.connect();
      const keys = await redis.keys(`${prefix}*`);
      if (keys.length > 0) await redis.del(...keys);
    } catch {
      // Redis was not reachable: nothing was written there either.
    } finally {
      redis.disconnect();
    }
  }
}

const log = (s: string) => process.stderr.write(`${s}\n`);

main().catch((err) => {
  process.stderr.write(`bench failed: ${(err as Error).stack}\n`);
  process.exit(1);
});
