import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { createKey, createSpendKey, gatewayYaml, scenarioBody, SPEND_SECTIONS, SPEND_STAGES, serveArgs } from './config';
import { connectInspector } from './inspector';
import { load } from './load';
import { Shares, type CallFrame } from './places';
import { pinTo, startNode, type Started } from './processes';
import { writeResults } from './report';

/**
 * `npm run bench:alloc [-- --scenario chat|chat-stream] [--seconds 6] [--no-export] [--survivors] [--extra '<yaml>'] [--body FILE] [--agent] [--spend]
 * [--node='<node flags>'] [--top 30]`
 *
 * Bytes the gateway allocates per request under load, and where: V8's sampling heap profiler (through the
 * inspector) records every sampled allocation, collected or not, while autocannon loads the bench gateway;
 * requests are counted from `/metrics`. Unlike CPU time, the figure does not depend on how fast the machine is
 * at the moment, so it shows whether a change allocates less. `--no-export` turns span export off
 * (`telemetry: { exporter: none }`); `--extra` adds top-level YAML. `--survivors` leaves out what a young-generation
 * GC collected: what is left was promoted to the old space (or is still live), the allocations that grow the heap
 * between full GCs.
 */
const ROOT = path.resolve(__dirname, '..', '..');
const MAIN = path.join(ROOT, 'dist', 'src', 'main.js');
const FAKE = path.join(ROOT, 'dist', 'bench', 'fake-upstream.js');
const { values } = parseArgs({
  options: {
    scenario: { type: 'string', default: 'chat' },
    seconds: { type: 'string', default: '6' },
    extra: { type: 'string', default: '' },
    'no-export': { type: 'boolean', default: false },
    survivors: { type: 'boolean', default: false },
    node: { type: 'string', default: '' },
    top: { type: 'string', default: '30' },
    body: { type: 'string', default: '' },
    agent: { type: 'boolean', default: false },
    spend: { type: 'boolean', default: false },
  },
});

interface SamplingNode {
  callFrame: CallFrame;
  selfSize: number;
  children: SamplingNode[];
}

async function requestsServed(origin: string): Promise<number> {
  const res = await request(`${origin}/metrics`);
  let n = 0;
  for (const line of (await res.body.text()).split('\n')) if (line.startsWith('gateway_requests_total{')) n += Number(line.split(' ').pop());
  return n;
}

async function main(): Promise<void> {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'gw-alloc-'));
  const procs: Started[] = [];
  try {
    const fake = await startNode([FAKE, '0'], { pin: pinTo(1), ready: /listening on (\d+)/, logFile: path.join(tmp, 'fake.log') });
    procs.push(fake);
    const config = path.join(tmp, 'gateway.yaml');
    const telemetry = values['no-export'] ? '{ exporter: none }' : undefined;
    const pipeline = values.spend ? { pipeline: SPEND_STAGES, extra: `${SPEND_SECTIONS}${values.extra}` } : { extra: values.extra };
    writeFileSync(config, gatewayYaml(`http://127.0.0.1:${fake.match[1]}`, tmp, { ...pipeline, telemetry }));
    const key = values.spend ? createSpendKey(MAIN, config, 'alloc') : createKey(MAIN, config, 'alloc');
    const gw = await startNode(serveArgs(MAIN, config, ['--inspect=127.0.0.1:0', ...values.node!.split(' ').filter(Boolean)]), {
      pin: pinTo(1),
      ready: /listening on http:\/\/[\d.]+:(\d+)/,
      logFile: path.join(tmp, 'gateway.log'),
    });
    procs.push(gw);
    const origin = `http://127.0.0.1:${gw.match[1]}`;
    const inspector = await connectInspector(/Debugger listening on (ws:\/\/\S+)/.exec(gw.output())![1]);
    const target = {
      origin,
      path: '/api/v1/chat/completions',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      // `--body FILE`: a request body of one's own (its model one of the bench's), e.g. an agent-sized conversation.
      body: values.body ? readFileSync(values.body, 'utf8') : scenarioBody(values.scenario!, 'bench/chat', values.agent),
    };
    const seconds = Number(values.seconds);
    await load(target, { connections: 50, seconds: 3, pin: pinTo(0) }); // warm-up: JIT, pools
    const loading = load(target, { connections: 50, seconds: seconds + 2, pin: pinTo(0) });
    await new Promise((r) => setTimeout(r, 1000)); // sample only while the load is steady
    const before = await requestsServed(origin);
    await inspector.call('HeapProfiler.enable');
    await inspector.call('HeapProfiler.startSampling', { samplingInterval: 8192, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: !values.survivors });
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const { profile } = (await inspector.call('HeapProfiler.stopSampling')) as { profile: { head: SamplingNode } };
    const served = (await requestsServed(origin)) - before;
    await loading;
    inspector.close();

    const shares = new Shares();
    const walk = (n: SamplingNode) => {
      shares.add(n.callFrame, n.selfSize);
      for (const c of n.children) walk(c);
    };
    walk(profile.head);
    const report = [
      `${values.scenario}${telemetry ? ' (no span export)' : ''}${values.extra ? ` (${values.extra})` : ''}: ${(shares.total / 1024 / Math.max(1, served)).toFixed(1)} KB ${values.survivors ? 'surviving a young GC' : 'allocated'} per request (${served} requests sampled)`,
      '',
      'allocated by place:',
      ...shares.top('place', 20),
      '',
      'allocated by function:',
      ...shares.top('function', Number(values.top)),
    ].join('\n');
    writeResults(`alloc-${values.scenario}-`, { txt: `${report}\n` });
    process.stdout.write(`${report}\n`);
  } finally {
    for (const p of procs.reverse()) await p.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err) => {
  process.stderr.write(`alloc failed: ${(err as Error).stack}\n`);
  process.exit(1);
});
