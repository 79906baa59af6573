import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import { Agent, request } from 'undici';
import { gatewayYaml, serveArgs } from './config';
import { connectInspector } from './inspector';
import { round } from './load';
import { pinTo, rssMiB, startNode, type Started } from './processes';
import { writeResults } from './report';

/**
 * `npm run bench:soak [-- --requests 6000 --warmup 1000 --rounds 6 --concurrency 50 --pace 3]`
 *
 * Thousands of streaming requests through one gateway process (production build, SQLite, the shipped
 * spend stages, OTLP export on) with a fixed mix of faults: 60 % normal streams (chat and messages), 10 %
 * an upstream that dies mid-stream, 10 % a first endpoint that fails and a fallback that serves, 20 % a
 * client that disconnects after the first chunk. After a warm-up, and after each round, with the gateway
 * idle: its RSS, live V8 heap (after a full GC forced through the inspector), active handles (from
 * /metrics), open file descriptors, and open connections
 * to the upstream (the pool). Reports the slope of each over the rounds (growth per 1,000 requests) and,
 * after a graceful stop, whether the ledger has exactly one row per request.
 */
const ROOT = path.resolve(__dirname, '..', '..');
const MAIN = path.join(ROOT, 'dist', 'src', 'main.js');
const UPSTREAM = path.join(ROOT, 'dist', 'bench', 'soak-upstream.js');

const { values } = parseArgs({
  options: {
    requests: { type: 'string', default: '6000' },
    warmup: { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '6' },
    concurrency: { type: 'string', default: '50' },
    pace: { type: 'string', default: '3' },
  },
});

type Kind = 'chat' | 'messages' | 'dies' | 'failover' | 'leave-chat' | 'leave-messages';
const MIX: Kind[] = ['chat', 'messages', 'chat', 'messages', 'chat', 'messages', 'dies', 'failover', 'leave-chat', 'leave-messages'];

interface Sample {
  afterRequests: number;
  rssMiB: number;
  /** The live heap: V8's used heap right after a forced full GC (through the inspector). */
  heapUsedMiB: number | null;
  activeHandles: number | null;
  openFds: number;
  upstreamSockets: number;
}

async function main(): Promise<void> {
  const total = Number(values.requests);
  const warmup = Number(values.warmup);
  const rounds = Number(values.rounds);
  const concurrency = Number(values.concurrency);
  const loadPin = pinTo(0);
  const serverPin = pinTo(1);
  if (loadPin.length) execFileSync('taskset', ['-pc', '0', String(process.pid)], { stdio: 'ignore' });
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'gw-soak-'));
  const procs: Started[] = [];
  try {
    const upstream = await startNode([UPSTREAM, values.pace!, '0'], { pin: serverPin, ready: /listening on (\d+)/, logFile: path.join(tmp, 'upstream.log') });
    procs.push(upstream);
    const upstreamPort = Number(upstream.match[1]);
    const config = path.join(tmp, 'gateway.yaml');
    writeFileSync(config, gatewayYaml(`http://127.0.0.1:${upstreamPort}`, tmp, { pipeline: '[auth, validate, rate-limit, budget-check, upstream]', models: SOAK_MODELS, logLevel: 'warn' }));
    const cli = (...args: string[]) => execFileSync(process.execPath, [MAIN, ...args, '--config', config], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const key = cli('keys', 'create', '--name', 'soak', '--limit', '100000', '--limit-reset', 'monthly');
    cli('credits', 'add', '--account', 'default', '--usd', '100000');
    // The inspector (loopback only) lets the soak force a full GC before reading the live heap.
    const gw = await startNode(serveArgs(MAIN, config, ['--inspect=127.0.0.1:0']), { pin: serverPin, ready: /listening on http:\/\/[\d.]+:(\d+)/, logFile: path.join(tmp, 'gateway.log') });
    procs.push(gw);
    const inspector = await connectInspector(/Debugger listening on (ws:\/\/\S+)/.exec(gw.output())![1]);
    const origin = `http://127.0.0.1:${gw.match[1]}`;
    const agent = new Agent({ connections: concurrency, keepAliveTimeout: 30_000 });
    const tally = new Map<string, number>();
    let sent = 0;
    const run = async (n: number) => {
      let next = 0;
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < n) {
            const kind = MIX[(sent + next++) % MIX.length];
            const outcome = await one(origin, key, kind, agent);
            const k = `${kind}: ${outcome}`;
            tally.set(k, (tally.get(k) ?? 0) + 1);
          }
        }),
      );
      sent += n;
    };
    const sample = async (): Promise<Sample> => {
      await new Promise((r) => setTimeout(r, 1500)); // idle: pooled sockets settle, timers fire
      const metrics = await readMetrics(origin);
      const live = await inspector.liveHeapBytes();
      return {
        afterRequests: sent,
        rssMiB: rssMiB(gw.child.pid),
        heapUsedMiB: round(live / 2 ** 20, 1),
        activeHandles: metrics.nodejs_active_handles_total ?? null,
        openFds: openFds(gw.child.pid),
        upstreamSockets: establishedTo(upstreamPort),
      };
    };
    const before = await sample();
    log(`start: ${JSON.stringify(before)}`);
    await run(warmup);
    const samples = [await sample()];
    log(`after warm-up (${warmup}): ${JSON.stringify(samples[0])}`);
    const perRound = Math.ceil(total / rounds);
    for (let r = 0; r < rounds; r++) {
      await run(perRound);
      samples.push(await sample());
      log(`round ${r + 1}: ${JSON.stringify(samples.at(-1))}`);
    }
    await agent.close();
    inspector.close();
    await gw.stop(); // SIGTERM: the gateway drains and flushes its ledger
    const rows = ledgerRows(path.join(tmp, 'gateway.db'));
    const report = render({ before, samples, tally, rows, sent, concurrency, warmup });
    const stamp = writeResults('soak-', {
      md: report.md,
      json: JSON.stringify({ before, samples, tally: Object.fromEntries(tally), rows, slopes: report.slopes }, null, 2),
    });
    process.stdout.write(`\n${report.md}\nwritten to bench/results/${stamp}.{md,json}\n`);
    if (!report.ok) process.exitCode = 1;
  } finally {
    for (const p of procs.reverse()) await p.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** One streaming request of `kind`; returns how it ended as the client saw it. */
async function one(origin: string, key: string, kind: Kind, agent: Agent): Promise<string> {
  const messages = kind === 'messages' || kind === 'leave-messages';
  const model = kind === 'dies' ? 'soak/dies' : kind === 'failover' ? 'soak/failover' : messages ? 'soak/messages' : 'soak/chat';
  const body = messages
    ? { model, max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'Tell me about foxes.' }] }
    : { model, stream: true, messages: [{ role: 'user', content: 'Tell me about foxes.' }] };
  const abort = new AbortController();
  try {
    const res = await request(`${origin}/api/v1/${messages ? 'messages' : 'chat/completions'}`, {
      method: 'POST',
      dispatcher: agent,
      signal: abort.signal,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify(body),
    });
    if (res.statusCode !== 200) {
      await res.body.text();
      return `http ${res.statusCode}`;
    }
    let text = '';
    for await (const chunk of res.body) {
      text += chunk.toString();
      if (kind.startsWith('leave-')) {
        abort.abort();
        return 'left after the first chunk';
      }
    }
    if (/"error"/.test(text)) return 'in-band error';
    return text.includes('[DONE]') ? 'complete' : 'ended without [DONE]';
  } catch (err) {
    return abort.signal.aborted ? 'left after the first chunk' : `client error ${(err as Error).message}`;
  }
}

/** The soak's models over the bench config's providers (`bench/config.ts`): the upstream model picks the behaviour. */
const SOAK_MODELS = `  - { id: soak/chat, endpoints: [{ provider: bench-openai, upstream_model: ok, pricing: { prompt: 1, completion: 2 } }] }
  - { id: soak/messages, endpoints: [{ provider: bench-anthropic, upstream_model: ok, pricing: { prompt: 3, completion: 15 } }] }
  - { id: soak/dies, endpoints: [{ provider: bench-openai, upstream_model: die, pricing: { prompt: 1, completion: 2 } }] }
  - id: soak/failover
    endpoints:
      - { provider: bench-openai, upstream_model: fail, pricing: { prompt: 1, completion: 2 } }
      - { provider: bench-anthropic, upstream_model: ok, pricing: { prompt: 3, completion: 15 } }`;

/** The gauges of a Prometheus text page (name → value of the unlabelled series). */
async function readMetrics(origin: string): Promise<Record<string, number>> {
  try {
    const res = await request(`${origin}/metrics`);
    const text = await res.body.text();
    if (res.statusCode !== 200) return {};
    const out: Record<string, number> = {};
    for (const line of text.split('\n')) {
      const m = /^([a-z_]+) ([0-9.e+-]+)$/.exec(line);
      if (m) out[m[1]] = Number(m[2]);
    }
    return out;
  } catch {
    return {};
  }
}

function openFds(pid: number | undefined): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return Number.NaN;
  }
}

/** Established TCP connections whose remote end is `port` on this machine: the gateway's pool to the upstream. */
function establishedTo(port: number): number {
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  let n = 0;
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    try {
      for (const line of readFileSync(file, 'utf8').split('\n').slice(1)) {
        const cols = line.trim().split(/\s+/);
        if (cols.length > 3 && cols[2].endsWith(`:${hex}`) && cols[3] === '01') n++;
      }
    } catch {
      // no procfs: reported as 0
    }
  }
  return n;
}

function ledgerRows(file: string): { total: number; distinct: number; byStatus: Record<string, number> } {
  const db = new Database(file, { readonly: true });
  try {
    const total = (db.prepare('SELECT COUNT(*) AS n FROM ledger').get() as { n: number }).n;
    const distinct = (db.prepare('SELECT COUNT(DISTINCT generation_id) AS n FROM ledger').get() as { n: number }).n;
    const byStatus = Object.fromEntries((db.prepare('SELECT status, COUNT(*) AS n FROM ledger GROUP BY status').all() as { status: string; n: number }[]).map((r) => [r.status, r.n]));
    return { total, distinct, byStatus };
  } finally {
    db.close();
  }
}

/** Least-squares slope of y over x, per 1,000 of x. */
function slopePer1000(points: [number, number][]): number {
  const n = points.length;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  const num = points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0);
  const den = points.reduce((s, [x]) => s + (x - mx) ** 2, 0);
  return den === 0 ? 0 : (num / den) * 1000;
}

function render(input: { before: Sample; samples: Sample[]; tally: Map<string, number>; rows: ReturnType<typeof ledgerRows>; sent: number; concurrency: number; warmup: number }) {
  const { before, samples, tally, rows, sent } = input;
  const series = (f: (s: Sample) => number | null) => samples.filter((s) => f(s) !== null).map((s) => [s.afterRequests, f(s)!] as [number, number]);
  const slopes = {
    rssMiB: round(slopePer1000(series((s) => s.rssMiB)), 3),
    heapUsedMiB: round(slopePer1000(series((s) => s.heapUsedMiB)), 3),
    activeHandles: samples[0].activeHandles === null ? null : round(slopePer1000(series((s) => s.activeHandles)), 3),
    openFds: round(slopePer1000(series((s) => s.openFds)), 3),
  };
  const first = samples[0];
  const last = samples.at(-1)!;
  // "No growth" after warm-up: the live heap (after a forced full GC) grows less than 0.5 MiB per 1,000 requests,
  // handles and descriptors end where they were after warm-up (±5), and the upstream pool stays within the
  // number of concurrent requests.
  const heapOk = slopes.heapUsedMiB < 0.5;
  // Descriptors other than the upstream pool's sockets (which may still grow towards the pool size).
  const others = (s: Sample) => s.openFds - s.upstreamSockets;
  const handlesOk =
    Math.abs(others(last) - others(first)) <= 5 &&
    last.upstreamSockets <= input.concurrency + 5 &&
    (last.activeHandles === null || first.activeHandles === null || Math.abs(last.activeHandles - first.activeHandles) <= 5);
  const ledgerOk = rows.total === sent && rows.distinct === sent;
  const ok = heapOk && handlesOk && ledgerOk;
  const cell = (v: number | null) => (v === null ? 'n/a' : String(v));
  const md = [
    `# Soak: ${sent} streaming requests, ${input.concurrency} concurrent (${new Date().toISOString()}, Node ${process.version}, ${os.cpus().length} cores)`,
    '',
    '| after requests | RSS MiB | live heap MiB (after full GC) | active handles | open fds | upstream sockets |',
    '|---:|---:|---:|---:|---:|---:|',
    `| 0 (start) | ${before.rssMiB} | ${cell(before.heapUsedMiB)} | ${cell(before.activeHandles)} | ${before.openFds} | ${before.upstreamSockets} |`,
    ...samples.map((s, i) => `| ${s.afterRequests}${i === 0 ? ' (warm-up)' : ''} | ${s.rssMiB} | ${cell(s.heapUsedMiB)} | ${cell(s.activeHandles)} | ${s.openFds} | ${s.upstreamSockets} |`),
    '',
    `Slopes after warm-up, per 1,000 requests: RSS ${slopes.rssMiB} MiB, heap ${cell(slopes.heapUsedMiB)} MiB, handles ${cell(slopes.activeHandles)}, fds ${slopes.openFds}.`,
    '',
    '| client saw | requests |',
    '|---|---:|',
    ...[...tally.entries()].sort().map(([k, v]) => `| ${k} | ${v} |`),
    '',
    `Ledger after a graceful stop: ${rows.total} rows (${rows.distinct} distinct generation ids) for ${sent} requests; by status ${JSON.stringify(rows.byStatus)}.`,
    '',
    `Verdict: memory ${heapOk ? 'flat' : 'GROWING'}, handles ${handlesOk ? 'flat' : 'GROWING'}, ledger ${ledgerOk ? 'exact' : 'NOT EXACT'}.`,
    '',
  ].join('\n');
  return { md, slopes, ok };
}

function log(s: string): void {
  process.stdout.write(`${s}\n`);
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(1);
});
