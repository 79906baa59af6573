import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { BENCH_PROMPT, createKey, createSpendKey, gatewayYaml, scenarioRequest, SPEND_SECTIONS, SPEND_STAGES, serveArgs } from './config';
import { load } from './load';
import { portkeyHeaders, startPortkey } from './peer-portkey';
import type { ProbeTarget } from './probe';
import { pinTo, startNode, type Started } from './processes';

/**
 * `npm run bench:instructions [-- --scenario chat|chat-stream|messages|messages-stream] [--warm 2000]
 * [--requests 1000] [--rounds 2] [--a-root=DIR] [--b-root=DIR] [--peer portkey] [--keep DIR] [--spend]`
 *
 * Counts the instructions a request costs with valgrind's callgrind: the gateway runs under callgrind, is
 * warmed up with `--warm` requests, its counters are zeroed, `--requests` requests are sent (50
 * connections), and the counters are dumped. Counted per thread: the main thread (the event loop: the
 * request's own work) and all threads together (V8's helper threads add JIT compilation and GC work, which
 * move a lot between runs of one build). Instructions move far less than CPU time, which on a shared VM
 * moves ±15 % between runs; but the main thread's count of one build still differs by up to ~8 % between
 * runs when the JIT settles differently (736 k and 793 k, the eleventh session), so alternate builds over
 * rounds and compare the readings, not one pair. Two checkouts alternate
 * when `--a-root` is given (a built `git worktree` of another commit), `--rounds` times each. `--peer portkey`
 * adds the Portkey gateway (installed as `npm run bench -- --peer portkey` installs it) on chat completions,
 * counted the same way. `--keep DIR` copies each round's callgrind dumps there (`<target>-<round>/cg.out.1-01` is
 * the main thread), for `callgrind_annotate` by function: V8's runtime, builtins and Node's C++ have names;
 * JIT-compiled JavaScript shows as addresses. `--spend`: the gateways run `bench:spend`'s spend variant (the
 * `rate-limit` and `budget-check` stages, every check doing its work, memory state).
 *
 * Caveats: under valgrind the gateway serves only tens of requests a second, so work done per batch or per
 * time slice (ledger transactions every `ledger.flush_ms`, OTLP exports, journal segments) is spread over
 * fewer requests than under load; and nothing else should run on the machine meanwhile, for the same reason.
 * User-space instructions only: the kernel's work (socket writes) is not counted. The figure to compare is
 * the main thread's without JIT compiles (see jitInstructions): V8's compiles that fall inside the counted
 * requests were 39–46 % of the main thread's count, and how many did moved one build's readings by 50 %.
 */
const ROOT = path.resolve(__dirname, '..', '..');
const { values } = parseArgs({
  options: {
    scenario: { type: 'string', default: 'chat' },
    warm: { type: 'string', default: '2000' },
    requests: { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '1' },
    'a-root': { type: 'string', default: '' },
    'b-root': { type: 'string', default: '' },
    peer: { type: 'string', default: '' },
    keep: { type: 'string', default: '' },
    spend: { type: 'boolean', default: false },
  },
});

const CALLGRIND = ['valgrind', '--tool=callgrind', '--separate-threads=yes', '--smc-check=all-non-file'];
const PORTKEY_PORT = 18788;

interface Count {
  main: number;
  all: number;
  /** The main thread's count less V8's compiles on it (see jitInstructions): the request's own work. */
  code: number;
}

/**
 * Instructions the main thread spent in V8's compilers in a callgrind dump: the inclusive cost of the runtime
 * entries that compile (`Runtime_CompileOptimized` above all: TurboFan, which the start commands run on the main
 * thread; lazy bytecode and baseline compiles too). Under callgrind the warm-up leaves the JIT far from settled:
 * in the twenty-eighth session's counts optimizing compiles were 39–46 % of the main thread's instructions, and
 * how many fall inside the counted requests is what made one build's readings bimodal (1.5 M or 2.4 M).
 */
function jitInstructions(file: string): number {
  const out = execFileSync('callgrind_annotate', ['--inclusive=yes', '--threshold=100', file], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
  let sum = 0;
  for (const m of out.matchAll(/^\s*([\d,]+) \([^)]*\)\s+\S*Runtime_(?:Compile\w*|BytecodeBudgetInterrupt\w*|NotifyDeoptimized)\(/gm)) sum += Number(m[1].replace(/,/g, ''));
  return sum;
}

/** Instructions per thread in the dump files callgrind wrote for `part` (`<out>.<part>-<thread>`). */
function countsOf(dir: string, base: string, part: number): number[] {
  const prefix = `${base}.${part}-`;
  return readdirSync(dir)
    .filter((f) => f.startsWith(prefix))
    .sort()
    .map((f) => Number(/^summary: (\d+)$/m.exec(readFileSync(path.join(dir, f), 'utf8'))?.[1] ?? NaN));
}

interface Target {
  server: Started;
  request: ProbeTarget;
}

/** Starts this gateway's build in `root` under callgrind, with a key, and the request of the scenario. */
async function startGateway(root: string, fakeOrigin: string, dir: string): Promise<Target> {
  const config = path.join(dir, 'gateway.yaml');
  writeFileSync(config, gatewayYaml(fakeOrigin, dir, values.spend ? { pipeline: SPEND_STAGES, extra: SPEND_SECTIONS } : {}));
  const main = path.join(root, 'dist', 'src', 'main.js');
  const key = values.spend ? createSpendKey(main, config, 'ir') : createKey(main, config, 'ir');
  const server = await startNode(serveArgs(main, config), {
    pin: pinTo(1),
    wrapper: [...CALLGRIND, `--callgrind-out-file=${path.join(dir, 'cg.out')}`],
    ready: /listening on http:\/\/[\d.]+:(\d+)/,
    logFile: path.join(dir, 'gw.log'),
    timeoutMs: 300_000,
  });
  return { server, request: scenarioRequest(values.scenario!, `http://127.0.0.1:${server.match[1]}`, key) };
}

/** Starts Portkey under callgrind in front of the fake (chat completions only, as `npm run bench` does). */
async function startPeer(fakeOrigin: string, dir: string): Promise<Target> {
  const server = await startPortkey(path.join(os.tmpdir(), 'gw-bench-portkey'), PORTKEY_PORT, pinTo(1), [...CALLGRIND, `--callgrind-out-file=${path.join(dir, 'cg.out')}`]);
  const body = { model: 'bench-upstream', max_tokens: 64, stream: values.scenario === 'chat-stream', messages: [{ role: 'user', content: BENCH_PROMPT }] };
  const request = {
    origin: `http://127.0.0.1:${PORTKEY_PORT}`,
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json', ...portkeyHeaders(`${fakeOrigin}/v1`) },
    body: JSON.stringify(body),
  };
  return { server, request };
}

/** Warms the target up, zeroes its counters, sends the counted requests, dumps; instructions per request. */
async function count(target: Target, dir: string): Promise<Count> {
  try {
    const requests = Number(values.requests);
    // Under valgrind a request can take seconds (a JIT compilation or a ledger flush in between): long timeouts.
    await load(target.request, { connections: 50, amount: Number(values.warm), timeoutS: 120, pin: pinTo(0) });
    const pid = String(target.server.child.pid);
    execFileSync('callgrind_control', ['-z', pid], { stdio: 'ignore' });
    const res = await load(target.request, { connections: 50, amount: requests, timeoutS: 120, pin: pinTo(0) });
    if (res.non2xx > 0 || res.errors > 0) throw new Error(`${res.non2xx} non-2xx answers and ${res.errors} errors under callgrind`);
    execFileSync('callgrind_control', ['-d', pid], { stdio: 'ignore' });
    const threads = countsOf(dir, 'cg.out', 1);
    const jit = jitInstructions(path.join(dir, 'cg.out.1-01'));
    return { main: threads[0] / requests, all: threads.reduce((a, b) => a + b, 0) / requests, code: (threads[0] - jit) / requests };
  } finally {
    await target.server.stop();
  }
}

async function main(): Promise<void> {
  execFileSync('valgrind', ['--version'], { stdio: 'ignore' });
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'gw-ir-'));
  const procs: Started[] = [];
  try {
    const fake = await startNode([path.join(ROOT, 'dist/bench/fake-upstream.js'), '0'], { pin: pinTo(1), ready: /listening on (\d+)/, logFile: path.join(tmp, 'fake.log') });
    procs.push(fake);
    const origin = `http://127.0.0.1:${fake.match[1]}`;
    const b = values['b-root'] ? path.resolve(values['b-root']) : ROOT;
    const roots: Record<string, string> = values['a-root'] ? { a: path.resolve(values['a-root']), b } : { b };
    if (values.peer === 'portkey') {
      if (!values.scenario!.startsWith('chat')) throw new Error('Portkey is measured on chat completions only');
      roots.portkey = 'Portkey 1.15.2';
    } else if (values.peer) throw new Error(`unknown peer ${values.peer}`);
    const counts: Record<string, Count[]> = {};
    for (let r = 0; r < Number(values.rounds); r++) {
      for (const [id, root] of Object.entries(roots)) {
        const dir = path.join(tmp, `${id}-${r}`);
        mkdirSync(dir);
        const c = await count(id === 'portkey' ? await startPeer(origin, dir) : await startGateway(root, origin, dir), dir);
        (counts[id] ??= []).push(c);
        process.stdout.write(`${id} round ${r + 1}: main thread ${Math.round(c.main)} (${Math.round(c.code)} without JIT compiles), all threads ${Math.round(c.all)} instructions per ${values.scenario} request\n`);
      }
    }
    for (const [id, root] of Object.entries(roots)) {
      const cs = counts[id];
      const k = (xs: number[]) => xs.map((x) => `${(x / 1000).toFixed(0)} k`).join(', ');
      process.stdout.write(`${id} (${root}): main thread without JIT compiles ${k(cs.map((c) => c.code))}; main thread ${k(cs.map((c) => c.main))}; all threads ${k(cs.map((c) => c.all))}\n`);
    }
  } finally {
    for (const p of procs.reverse()) await p.stop();
    if (values.keep) cpSync(tmp, path.resolve(values.keep), { recursive: true });
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (require.main === module) {
  main().catch((err) => {
    process.stderr.write(`instructions failed: ${(err as Error).stack}\n`);
    process.exit(1);
  });
}
