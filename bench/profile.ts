import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createKey, createSpendKey, gatewayYaml, scenarioRequest, SPEND_SECTIONS, SPEND_STAGES, serveArgs } from './config';
import { load } from './load';
import { Shares, type CallFrame } from './places';
import { pinTo, startNode, type Started } from './processes';
import { writeResults } from './report';

/**
 * `npm run bench:profile [-- --scenario chat|chat-stream|messages|messages-stream] [--seconds 10] [--connections 50] [--extra '<yaml>']`
 *
 * Runs the gateway under `node --cpu-prof` with load on one scenario, then prints the functions with the
 * most self time (and writes the .cpuprofile, loadable in Chrome DevTools, under bench/results/).
 * `--connections 1` sends one request at a time: where an unloaded request's time goes. `--extra` adds
 * top-level YAML (e.g. `telemetry: { exporter: none }`, which replaces the default section). `--spend`: the
 * pipeline and sections of `bench:spend`'s spend variant (the `rate-limit` and `budget-check` stages at work).
 * `--agent`: chat requests are an agent-sized conversation (~61 KB).
 */
const ROOT = path.resolve(__dirname, '..', '..');
const { values } = parseArgs({
  options: {
    scenario: { type: 'string', default: 'chat' },
    seconds: { type: 'string', default: '10' },
    top: { type: 'string', default: '35' },
    connections: { type: 'string', default: '50' },
    extra: { type: 'string', default: '' },
    spend: { type: 'boolean', default: false },
    agent: { type: 'boolean', default: false },
  },
});

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  hitCount?: number;
}

async function main(): Promise<void> {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'gw-prof-'));
  const procs: Started[] = [];
  try {
    const fake = await startNode([path.join(ROOT, 'dist/bench/fake-upstream.js'), '0'], { pin: pinTo(1), ready: /listening on (\d+)/, logFile: path.join(tmp, 'fake.log') });
    procs.push(fake);
    const origin = `http://127.0.0.1:${fake.match[1]}`;
    const config = path.join(tmp, 'gateway.yaml');
    const spend = values.spend ? { pipeline: SPEND_STAGES, extra: `${SPEND_SECTIONS}${values.extra}` } : { extra: values.extra };
    writeFileSync(config, gatewayYaml(origin, tmp, spend));
    const main = path.join(ROOT, 'dist/src/main.js');
    const key = values.spend ? createSpendKey(main, config, 'p') : createKey(main, config, 'p');
    const gw = await startNode(serveArgs(main, config, ['--cpu-prof', '--cpu-prof-interval=100', `--cpu-prof-dir=${tmp}`]), {
      pin: pinTo(1),
      ready: /listening on http:\/\/[\d.]+:(\d+)/,
      logFile: path.join(tmp, 'gw.log'),
    });
    const scenario = values.scenario!;
    // `--agent`: the agent-sized conversation (bench/config.ts) instead of one sentence.
    const res = await load(scenarioRequest(scenario, `http://127.0.0.1:${gw.match[1]}`, key, values.agent), {
      connections: Number(values.connections),
      seconds: Number(values.seconds),
      pin: pinTo(0),
    });
    process.stdout.write(`${scenario}: ${Math.round(res.rps)} req/s under the profiler\n`);
    await gw.stop();
    const file = readdirSync(tmp).find((f) => f.endsWith('.cpuprofile'));
    if (!file) throw new Error('no .cpuprofile written');
    const profile = JSON.parse(readFileSync(path.join(tmp, file), 'utf8')) as { nodes: ProfileNode[]; samples: number[] };
    // Self time by function, and by where the code lives: a package, a folder of ours, or node's internals.
    const shares = new Shares();
    for (const n of profile.nodes) shares.add(n.callFrame, n.hitCount ?? 0);
    const report = ['self time by place:', ...shares.top('place', 25), '', 'self time by function:', ...shares.top('function', Number(values.top))].join('\n');
    writeResults(`profile-${scenario}-`, { cpuprofile: readFileSync(path.join(tmp, file)), txt: `${report}\n` });
    process.stdout.write(`${report}\n`);
  } finally {
    for (const p of procs.reverse()) await p.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err) => {
  process.stderr.write(`profile failed: ${(err as Error).stack}\n`);
  process.exit(1);
});
