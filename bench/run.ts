import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createKey, gatewayYaml, scenarioBody, serveArgs } from './config';
import { load, median, round, type LoadResult } from './load';
import { portkeyHeaders, startPortkey } from './peer-portkey';
import { probeAlternating, type ProbeResult, type ProbeTarget } from './probe';
import { cpuUs, pinTo, rssMiB, rssSampler, startNode, type Started } from './processes';
import { renderMarkdown, writeResults, type Row } from './report';

/**
 * `npm run bench [-- --peer portkey] [--seconds 15] [--warmup 15] [--runs 3] [--connections 50] [--probe 2000] [--agent]`
 *
 * Starts the fake upstream and the gateway (production build, SQLite, the default pipeline, OTLP telemetry
 * exporting to the fake), pins the load generator to core 0 and the servers to core 1 where taskset exists,
 * warms up, then alternates load runs of the fake called directly and through the gateway (and the peer),
 * and writes a Markdown table and JSON under bench/results/. `--agent`: every request is an agent-sized
 * conversation (~61 KB, bench/config.ts) instead of one sentence.
 */
const ROOT = path.resolve(__dirname, '..', '..');
const MAIN = path.join(ROOT, 'dist', 'src', 'main.js');
const FAKE = path.join(ROOT, 'dist', 'bench', 'fake-upstream.js');

const { values } = parseArgs({
  options: {
    peer: { type: 'string' },
    seconds: { type: 'string', default: '15' },
    warmup: { type: 'string', default: '15' },
    runs: { type: 'string', default: '3' },
    connections: { type: 'string', default: '50' },
    probe: { type: 'string', default: '2000' },
    scenarios: { type: 'string', default: 'chat,chat-stream,messages,messages-stream' },
    'gateway-node-options': { type: 'string', default: '' },
    agent: { type: 'boolean', default: false },
  },
});

interface Scenario {
  id: string;
  dialect: 'chat' | 'messages';
  stream: boolean;
}

const SCENARIOS: Scenario[] = (values.scenarios ?? '').split(',').map((id) => ({
  id,
  dialect: id.startsWith('messages') ? 'messages' : 'chat',
  stream: id.endsWith('-stream'),
}));

function body(s: Scenario, model: string): string {
  return scenarioBody(s.id, model, values.agent);
}

/** The gateway's environment: ours, plus `--gateway-node-options` (V8 flags to compare) as NODE_OPTIONS. */
function gatewayEnv(): NodeJS.ProcessEnv {
  const extra = values['gateway-node-options'];
  return extra ? { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} ${extra}`.trim() } : process.env;
}

type TargetName = 'direct' | 'gateway' | 'portkey';

async function main(): Promise<void> {
  const seconds = Number(values.seconds);
  const runs = Number(values.runs);
  const connections = Number(values.connections);
  const probeN = Number(values.probe);
  const loadPin = pinTo(0);
  const serverPin = pinTo(1);
  // The driver runs the latency probes itself: keep it on the load generator's core, off the servers'.
  if (loadPin.length) execFileSync('taskset', ['-pc', '0', String(process.pid)], { stdio: 'ignore' });
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'gw-bench-'));
  const procs: Started[] = [];
  try {
    const fake = await startNode([FAKE, '0'], { pin: serverPin, ready: /listening on (\d+)/, logFile: path.join(tmp, 'fake.log') });
    procs.push(fake);
    const fakeOrigin = `http://127.0.0.1:${fake.match[1]}`;
    const config = path.join(tmp, 'gateway.yaml');
    writeFileSync(config, gatewayYaml(fakeOrigin, tmp));
    const key = createKey(MAIN, config, 'bench');
    const gw = await startNode(serveArgs(MAIN, config), { pin: serverPin, ready: /listening on http:\/\/[\d.]+:(\d+)/, logFile: path.join(tmp, 'gateway.log'), env: gatewayEnv() });
    procs.push(gw);
    const gwOrigin = `http://127.0.0.1:${gw.match[1]}`;
    const rssStart = rssMiB(gw.child.pid);

    let portkey: Started | undefined;
    let portkeyStart: number | undefined;
    if (values.peer === 'portkey') {
      portkey = await startPortkey(path.join(os.tmpdir(), 'gw-bench-portkey'), 18787, serverPin);
      procs.push(portkey);
      portkeyStart = rssMiB(portkey.child.pid);
    } else if (values.peer) throw new Error(`unknown peer ${values.peer} (known: portkey)`);

    const targets = (s: Scenario): Partial<Record<TargetName, ProbeTarget>> => {
      const json = { 'content-type': 'application/json' };
      const upstreamPath = s.dialect === 'chat' ? '/v1/chat/completions' : '/v1/messages';
      const out: Partial<Record<TargetName, ProbeTarget>> = {
        direct: { origin: fakeOrigin, path: upstreamPath, headers: json, body: body(s, 'bench-upstream') },
        gateway: {
          origin: gwOrigin,
          path: s.dialect === 'chat' ? '/api/v1/chat/completions' : '/api/v1/messages',
          headers: { ...json, authorization: `Bearer ${key}` },
          body: body(s, s.dialect === 'chat' ? 'bench/chat' : 'bench/messages'),
        },
      };
      // Portkey is measured where it mirrors our path: chat completions to an OpenAI-compatible upstream.
      if (portkey && s.dialect === 'chat') {
        out.portkey = { origin: 'http://127.0.0.1:18787', path: '/v1/chat/completions', headers: { ...json, ...portkeyHeaders(`${fakeOrigin}/v1`) }, body: body(s, 'bench-upstream') };
      }
      return out;
    };
    const pidOf: Record<TargetName, number | undefined> = { direct: fake.child.pid, gateway: gw.child.pid, portkey: portkey?.child.pid };
    /** One load run of `name`'s target, with the CPU its process spent per request; its peak RSS is kept in `peaks`. */
    const watchedLoad = async (name: TargetName, t: ProbeTarget, secs: number, peaks: Partial<Record<TargetName, number>>): Promise<LoadResult> => {
      const sampler = rssSampler(pidOf[name]);
      const cpuBefore = cpuUs(pidOf[name]);
      const res = await load(t, { connections, seconds: secs, pin: loadPin });
      res.cpuUsPerRequest = Math.round((cpuUs(pidOf[name]) - cpuBefore) / Math.max(1, res.total));
      peaks[name] = Math.max(peaks[name] ?? 0, sampler.stop());
      return res;
    };

    // 1. Warm-up under load (JIT, pools, caches), so no measurement sees a cold process. Its RSS is sampled
    // too: a process's first loads after its start are where its heap grew most (README, Performance).
    const firstLoadPeaks: Partial<Record<TargetName, number>> = {};
    for (const s of SCENARIOS) {
      for (const [name, t] of Object.entries(targets(s)) as [TargetName, ProbeTarget][]) await watchedLoad(name, t, Number(values.warmup), firstLoadPeaks);
    }
    // 2. Unloaded latency, sequential probes (microseconds), each scenario's targets in alternating slices:
    // probed one after the other, the first probe of a run read slow whatever it measured (the fake alone
    // 190 µs against ~104 for the other scenarios' direct probes, even after an untimed probe first), which
    // flattered that scenario's "added" figure; alternating puts such stretches on every target alike.
    const probes = new Map<string, ProbeResult>();
    for (const s of SCENARIOS) {
      const results = await probeAlternating(targets(s) as Record<string, ProbeTarget>, probeN);
      for (const [name, r] of Object.entries(results)) {
        probes.set(`${s.id}/${name}`, r);
        log(`probe ${s.id} ${name}: p50 ${r.p50Us} µs`);
      }
    }
    // 3. Alternating load runs.
    const loads = new Map<string, LoadResult[]>();
    const peaks: Partial<Record<TargetName, number>> = {};
    for (let r = 0; r < runs; r++) {
      for (const s of SCENARIOS) {
        for (const [name, t] of Object.entries(targets(s)) as [TargetName, ProbeTarget][]) {
          const res = await watchedLoad(name, t, seconds, peaks);
          if (res.non2xx || res.errors) log(`warning: ${s.id} ${name} had ${res.non2xx} non-2xx and ${res.errors} errors`);
          (loads.get(`${s.id}/${name}`) ?? loads.set(`${s.id}/${name}`, []).get(`${s.id}/${name}`)!).push(res);
          log(`run ${r + 1}/${runs} ${s.id} ${name}: ${Math.round(res.rps)} req/s`);
        }
      }
    }
    const rows: Row[] = [];
    for (const s of SCENARIOS) {
      const direct = median(loads.get(`${s.id}/direct`)!);
      for (const name of Object.keys(targets(s)) as TargetName[]) {
        const l = median(loads.get(`${s.id}/${name}`)!);
        const p = probes.get(`${s.id}/${name}`)!;
        const d = probes.get(`${s.id}/direct`)!;
        rows.push({
          scenario: s.id,
          target: name,
          rps: Math.round(l.rps),
          rpsRatioToDirect: round(l.rps / direct.rps, 3),
          loadedP50Ms: l.p50Ms,
          loadedP99Ms: l.p99Ms,
          cpuUsPerRequest: l.cpuUsPerRequest,
          unloadedP50Us: p.p50Us,
          unloadedP99Us: p.p99Us,
          addedP50Us: name === 'direct' ? 0 : p.p50Us - d.p50Us,
          ttfbP50Us: s.stream ? p.ttfbP50Us : undefined,
          addedTtfbP50Us: s.stream && name !== 'direct' ? p.ttfbP50Us - d.ttfbP50Us : undefined,
        });
      }
    }
    const rss = {
      gatewayStartMiB: rssStart,
      gatewayWarmupPeakMiB: firstLoadPeaks.gateway,
      gatewayPeakMiB: peaks.gateway,
      gatewayEndMiB: rssMiB(gw.child.pid),
      portkeyStartMiB: portkeyStart,
      portkeyWarmupPeakMiB: firstLoadPeaks.portkey,
      portkeyPeakMiB: peaks.portkey,
    };
    const meta = {
      date: new Date().toISOString(),
      node: process.version,
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model,
      pinned: loadPin.length > 0,
      seconds,
      warmup: Number(values.warmup),
      runs,
      connections,
      probe: probeN,
      peer: values.peer ?? null,
    };
    const md = renderMarkdown(rows, rss, meta);
    const stamp = writeResults('', { md, json: JSON.stringify({ meta, rss, rows }, null, 2) }, meta.date);
    process.stdout.write(`\n${md}\nwritten to bench/results/${stamp}.{md,json}\n`);
  } finally {
    for (const p of procs.reverse()) await p.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

const log = (s: string) => process.stderr.write(`${s}\n`);

main().catch((err) => {
  process.stderr.write(`bench failed: ${(err as Error).stack}\n`);
  process.exit(1);
});
