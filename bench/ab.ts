import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { gatewayYaml } from './config';
import { probe } from './probe';
import { pinTo, startNode, type Started } from './processes';

/**
 * `npm run bench:ab -- --a '<yaml>' --b '<yaml>' [--probe 2000] [--rounds 3]`
 *
 * Unloaded latency of two gateway variants side by side (extra top-level YAML each, e.g. `ledger: { journal:
 * false }`), same fake upstream, alternating probe rounds: p50 of the whole answer (chat) and of the first
 * byte (chat stream), in microseconds. For deciding whether one change moves the added-latency figures.
 */
const ROOT = path.resolve(__dirname, '..', '..');
const MAIN = path.join(ROOT, 'dist', 'src', 'main.js');
const FAKE = path.join(ROOT, 'dist', 'bench', 'fake-upstream.js');
const { values } = parseArgs({ options: { a: { type: 'string', default: '' }, b: { type: 'string', default: '' }, probe: { type: 'string', default: '2000' }, rounds: { type: 'string', default: '3' } } });

async function main(): Promise<void> {
  const pin = pinTo(1);
  if (pinTo(0).length) execFileSync('taskset', ['-pc', '0', String(process.pid)], { stdio: 'ignore' });
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'gw-ab-'));
  const procs: Started[] = [];
  try {
    const fake = await startNode([FAKE, '0'], { pin, ready: /listening on (\d+)/, logFile: path.join(tmp, 'fake.log') });
    procs.push(fake);
    const fakeOrigin = `http://127.0.0.1:${fake.match[1]}`;
    const targets: Record<string, { origin: string; key: string }> = {};
    for (const [id, extra] of [['a', values.a!], ['b', values.b!]] as const) {
      const dir = path.join(tmp, id);
      mkdirSync(dir);
      const config = path.join(dir, 'gateway.yaml');
      writeFileSync(config, gatewayYaml(fakeOrigin, dir, { extra }));
      const key = execFileSync(process.execPath, [MAIN, 'keys', 'create', '--name', 'ab', '--config', config], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
      const gw = await startNode([MAIN, 'serve', '--config', config], { pin, ready: /listening on http:\/\/[\d.]+:(\d+)/, logFile: path.join(dir, 'gw.log') });
      procs.push(gw);
      targets[id] = { origin: `http://127.0.0.1:${gw.match[1]}`, key };
    }
    const body = (stream: boolean) => JSON.stringify({ model: 'bench/chat', max_tokens: 64, stream, messages: [{ role: 'user', content: 'Write one short sentence about foxes.' }] });
    const results: Record<string, { chat: number[]; ttfb: number[] }> = { a: { chat: [], ttfb: [] }, b: { chat: [], ttfb: [] } };
    for (let r = 0; r < Number(values.rounds); r++) {
      for (const id of ['a', 'b']) {
        const t = targets[id];
        const target = (stream: boolean) => ({ origin: t.origin, path: '/api/v1/chat/completions', headers: { 'content-type': 'application/json', authorization: `Bearer ${t.key}` }, body: body(stream) });
        results[id].chat.push((await probe(target(false), Number(values.probe))).p50Us);
        results[id].ttfb.push((await probe(target(true), Number(values.probe))).ttfbP50Us);
      }
    }
    const med = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
    for (const id of ['a', 'b']) {
      process.stdout.write(`${id} (${id === 'a' ? values.a || 'as shipped' : values.b || 'as shipped'}): chat p50 ${med(results[id].chat)} µs [${results[id].chat.join(', ')}], stream TTFB p50 ${med(results[id].ttfb)} µs [${results[id].ttfb.join(', ')}]\n`);
    }
  } finally {
    for (const p of procs.reverse()) await p.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(1);
});
