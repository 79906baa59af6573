import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createKey, gatewayYaml, scenarioBody, serveArgs } from './config';
import { load } from './load';
import { probe, type ProbeTarget } from './probe';
import { cpuUs, pinTo, rssSampler, startNode, type Started } from './processes';

/**
 * `npm run bench:ab -- --a '<yaml>' --b '<yaml>' [--a-node='<node flags>'] [--b-node='<node flags>'] [--a-env='NAME=value …'] [--b-env=…] [--probe 2000]
 * [--rounds 3] [--load 0] [--stream] [--agent] [--a-root=DIR] [--b-root=DIR]`
 *
 * Two gateway variants side by side (extra top-level YAML each, e.g. `ledger: { journal: false }`, and/or
 * node flags each, e.g. `--max-semi-space-size=4`), same fake upstream, alternating rounds. Each round
 * probes unloaded latency: p50 of the whole answer (chat) and of the first byte (chat stream), in
 * microseconds. With `--load N`, each round also loads each variant for N seconds (chat, or chat streams
 * with `--stream`; 50 connections)
 * and reports req/s, the gateway's CPU time per request and its peak RSS. For deciding whether one change
 * moves the figures: the two variants share the machine's state of the moment, so their difference is
 * steadier than two runs of `npm run bench` far apart. `--a-root`/`--b-root` run a variant from another built checkout
 * (e.g. a `git worktree` of an earlier commit, after `npm run build` there): two versions of the code, same config.
 */
const ROOT = path.resolve(__dirname, '..', '..');
const MAIN = path.join(ROOT, 'dist', 'src', 'main.js');
const FAKE = path.join(ROOT, 'dist', 'bench', 'fake-upstream.js');
const { values } = parseArgs({
  options: {
    a: { type: 'string', default: '' },
    b: { type: 'string', default: '' },
    probe: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '3' },
    'a-node': { type: 'string', default: '' },
    'b-node': { type: 'string', default: '' },
    'a-env': { type: 'string', default: '' },
    'b-env': { type: 'string', default: '' },
    load: { type: 'string', default: '0' },
    'a-root': { type: 'string', default: '' },
    'b-root': { type: 'string', default: '' },
    stream: { type: 'boolean', default: false },
    agent: { type: 'boolean', default: false },
  },
});

async function main(): Promise<void> {
  const pin = pinTo(1);
  if (pinTo(0).length) execFileSync('taskset', ['-pc', '0', String(process.pid)], { stdio: 'ignore' });
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'gw-ab-'));
  const procs: Started[] = [];
  try {
    const fake = await startNode([FAKE, '0'], { pin, ready: /listening on (\d+)/, logFile: path.join(tmp, 'fake.log') });
    procs.push(fake);
    const fakeOrigin = `http://127.0.0.1:${fake.match[1]}`;
    // Each variant: extra YAML, node flags, and the checkout whose build it runs ('' = this one).
    const variants = {
      a: { extra: values.a!, node: values['a-node']!, env: values['a-env']!, root: values['a-root']! },
      b: { extra: values.b!, node: values['b-node']!, env: values['b-env']!, root: values['b-root']! },
    };
    // `--agent`: an agent-sized conversation (~61 KB, bench/config.ts) instead of the one-sentence prompt.
    const body = (stream: boolean) => scenarioBody(stream ? 'chat-stream' : 'chat', 'bench/chat', values.agent);
    const targets: Record<string, { pid?: number; chat(stream: boolean): ProbeTarget }> = {};
    for (const id of ['a', 'b'] as const) {
      const v = variants[id];
      const dir = path.join(tmp, id);
      mkdirSync(dir);
      const config = path.join(dir, 'gateway.yaml');
      writeFileSync(config, gatewayYaml(fakeOrigin, dir, { extra: v.extra }));
      const main = v.root ? path.join(path.resolve(v.root), 'dist', 'src', 'main.js') : MAIN;
      const key = createKey(main, config, 'ab');
      const flags = v.node.split(' ').filter(Boolean);
      const env = { ...process.env, ...envOf(v.env) };
      const gw = await startNode(serveArgs(main, config, flags), { pin, ready: /listening on http:\/\/[\d.]+:(\d+)/, logFile: path.join(dir, 'gw.log'), env });
      procs.push(gw);
      const origin = `http://127.0.0.1:${gw.match[1]}`;
      targets[id] = {
        pid: gw.child.pid,
        chat: (stream) => ({ origin, path: '/api/v1/chat/completions', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: body(stream) }),
      };
    }
    const loadSeconds = Number(values.load);
    const results: Record<string, Record<'chat' | 'ttfb' | 'rps' | 'cpu' | 'rss', number[]>> = {};
    for (const id of ['a', 'b']) results[id] = { chat: [], ttfb: [], rps: [], cpu: [], rss: [] };
    // Warm both up under load first (JIT, pools), so the first measured round is not a cold process.
    if (loadSeconds > 0) {
      for (const id of ['a', 'b']) await load(targets[id].chat(false), { connections: 50, seconds: 3, pin: pinTo(0) });
    }
    for (let r = 0; r < Number(values.rounds); r++) {
      for (const id of ['a', 'b']) {
        const t = targets[id];
        if (loadSeconds > 0) {
          const sampler = rssSampler(t.pid);
          const before = cpuUs(t.pid);
          const res = await load(t.chat(values.stream === true), { connections: 50, seconds: loadSeconds, pin: pinTo(0) });
          results[id].cpu.push(Math.round((cpuUs(t.pid) - before) / Math.max(1, res.total)));
          results[id].rps.push(Math.round(res.rps));
          results[id].rss.push(sampler.stop());
        }
        results[id].chat.push((await probe(t.chat(false), Number(values.probe))).p50Us);
        results[id].ttfb.push((await probe(t.chat(true), Number(values.probe))).ttfbP50Us);
      }
    }
    const med = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
    const show = (label: string, xs: number[], unit: string) => `${label} ${med(xs)}${unit} [${xs.join(', ')}]`;
    for (const id of ['a', 'b'] as const) {
      const v = variants[id];
      const what = [v.extra, v.node, v.env, v.root].filter(Boolean).join(' + ') || 'as shipped';
      const parts = [show('chat p50', results[id].chat, ' µs'), show('stream TTFB p50', results[id].ttfb, ' µs')];
      if (loadSeconds > 0) parts.push(show('loaded req/s', results[id].rps, ''), show('CPU/req', results[id].cpu, ' µs'), show('peak RSS', results[id].rss, ' MiB'));
      process.stdout.write(`${id} (${what}): ${parts.join(', ')}\n`);
    }
  } finally {
    for (const p of procs.reverse()) await p.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** `NAME=value NAME2=value` → an environment object (for `--a-env`/`--b-env`). */
function envOf(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of text.split(' ').filter(Boolean)) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new Error(`--a-env/--b-env take NAME=value pairs, got ${pair}`);
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(1);
});
