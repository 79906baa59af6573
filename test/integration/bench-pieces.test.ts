import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBenchUpstream } from '../../bench/fake-upstream';
import { startSoakUpstream } from '../../bench/soak-upstream';
import { load } from '../../bench/load';
import { probe, probeAlternating } from '../../bench/probe';
import { connectInspector } from '../../bench/inspector';
import { cpuUs, pinTo, rssMiB } from '../../bench/processes';
import { renderMarkdown } from '../../bench/report';
import { parseSse } from '../../src/providers/sse';

/** The benchmark's pieces work; no timing is asserted (speed is measured by `npm run bench`, not here). */
let fake: Awaited<ReturnType<typeof startBenchUpstream>>;
beforeAll(async () => {
  fake = await startBenchUpstream(0);
});
afterAll(() => new Promise<void>((r) => fake.server.close(() => r())));

async function call(path: string, body: object) {
  const res = await fetch(`${fake.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, type: res.headers.get('content-type'), text: await res.text() };
}

async function events(text: string) {
  const out = [];
  for await (const ev of parseSse((async function* () {
    yield text;
  })())) out.push(ev);
  return out;
}

describe('bench fake upstream', () => {
  it('answers chat completions with a ~300-byte JSON body', async () => {
    const res = await call('/chat/completions', { model: 'x', messages: [] });
    expect(res.status).toBe(200);
    const body = JSON.parse(res.text);
    expect(body.object).toBe('chat.completion');
    expect(res.text.length).toBeGreaterThan(250);
    expect(res.text.length).toBeLessThan(450);
  });

  it('streams 20 chat chunks, a usage chunk when asked (and, as OpenAI does, "usage":null in the others), then [DONE]', async () => {
    const plain = await events((await call('/chat/completions', { stream: true })).text);
    expect(plain).toHaveLength(21);
    expect(plain.at(-1)!.data).toBe('[DONE]');
    expect(plain.slice(0, 20).every((e) => !('usage' in JSON.parse(e.data)))).toBe(true);
    const withUsage = await events((await call('/chat/completions', { stream: true, stream_options: { include_usage: true } })).text);
    expect(withUsage).toHaveLength(22);
    expect(withUsage.slice(0, 20).every((e) => JSON.parse(e.data).usage === null)).toBe(true);
    expect(JSON.parse(withUsage.at(-2)!.data).usage.completion_tokens).toBe(20);
  });

  it('answers messages, non-streaming and as a 20-event stream', async () => {
    const res = await call('/messages', { model: 'x', messages: [] });
    expect(JSON.parse(res.text)).toMatchObject({ type: 'message', usage: { output_tokens: 20 } });
    const evs = await events((await call('/messages', { stream: true })).text);
    expect(evs).toHaveLength(20);
    expect(evs[0].event).toBe('message_start');
    expect(evs.at(-1)!.event).toBe('message_stop');
  });

  it('accepts OTLP trace exports with the empty protobuf answer a collector gives', async () => {
    const res = await fetch(`${fake.url}/traces`, { method: 'POST', body: 'x' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/x-protobuf');
    expect((await res.arrayBuffer()).byteLength).toBe(0);
  });
});

describe('bench driver pieces', () => {
  const target = () => ({ origin: `http://127.0.0.1:${fake.port}`, path: '/v1/chat/completions', headers: { 'content-type': 'application/json' }, body: '{"stream":true}' });

  it('the sequential probe measures whole responses and first bytes in microseconds', async () => {
    const r = await probe(target(), 20, 2);
    expect(r.samples).toBe(20);
    expect(r.p50Us).toBeGreaterThan(0);
    expect(r.ttfbP50Us).toBeLessThanOrEqual(r.p50Us);
    expect(r.p99Us).toBeGreaterThanOrEqual(r.p50Us);
  });

  it('alternating probes take each target in turn, a slice at a time, and count every timed request', async () => {
    const seen: string[] = [];
    const server = createServer((req, res) => {
      seen.push(req.url!);
      req.resume().on('end', () => res.end('{}'));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const at = (path: string) => ({ origin, path, headers: { 'content-type': 'application/json' }, body: '{}' });
    try {
      const r = await probeAlternating({ a: at('/a'), b: at('/b') }, 8, 2);
      expect(r.a.samples).toBe(8);
      expect(r.b.samples).toBe(8);
      expect(r.b.p50Us).toBeGreaterThan(0);
      // Two rounds of 4 timed requests each, after one untimed one: a, b, a, b.
      const runs = seen.join(' ').replace(/(\/\w)( \1)*/g, (m, p: string) => `${p}x${m.split(' ').length}`);
      expect(runs).toBe('/ax5 /bx5 /ax5 /bx5');
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
  });

  it('the load generator (autocannon in its own process) runs and reports', async () => {
    const r = await load(target(), { connections: 2, seconds: 1, pin: pinTo(0) });
    expect(r.rps).toBeGreaterThan(0);
    expect(r.total).toBeGreaterThan(0);
    expect(r.non2xx).toBe(0);
  });

  it('reads a process CPU time from /proc (the CPU µs/req column)', () => {
    const before = cpuUs(process.pid);
    expect(before).toBeGreaterThan(0);
    // Spin until this process has used 100 ms more CPU by its own account, however busy the machine is.
    const start = process.cpuUsage();
    let x = 0;
    while (process.cpuUsage(start).user + process.cpuUsage(start).system < 100_000) x += Math.sqrt(x + 1);
    expect(x).toBeGreaterThan(0);
    // /proc counts in 10 ms ticks: at least 80 of the 100 ms show.
    expect(cpuUs(process.pid) - before).toBeGreaterThanOrEqual(80_000);
    expect(Number.isNaN(cpuUs(undefined))).toBe(true);
  });

  it('drives a process through the inspector: forced GC and heap sampling (bench:soak, bench:alloc)', async () => {
    const child = spawn(process.execPath, ['--inspect=127.0.0.1:0', '-e', 'setInterval(() => { globalThis.x = { t: Date.now() }; }, 5)'], { stdio: ['ignore', 'ignore', 'pipe'] });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let err = '';
        child.stderr.on('data', (d) => {
          err += d;
          const m = /Debugger listening on (ws:\/\/\S+)/.exec(err);
          if (m) resolve(m[1]);
        });
        child.on('exit', (code) => reject(new Error(`exited ${code}: ${err}`)));
      });
      const inspector = await connectInspector(url);
      expect(await inspector.liveHeapBytes()).toBeGreaterThan(100_000);
      await inspector.call('HeapProfiler.enable');
      await inspector.call('HeapProfiler.startSampling', { samplingInterval: 1024, includeObjectsCollectedByMinorGC: true, includeObjectsCollectedByMajorGC: true });
      await new Promise((r) => setTimeout(r, 100));
      const { profile } = (await inspector.call('HeapProfiler.stopSampling')) as { profile: { head: { children: unknown[] } } };
      expect(Array.isArray(profile.head.children)).toBe(true);
      inspector.close();
    } finally {
      child.kill();
    }
  });

  it('reads RSS and renders the table', () => {
    expect(rssMiB(process.pid)).toBeGreaterThan(1);
    const md = renderMarkdown(
      [{ scenario: 'chat', target: 'gateway', rps: 10, rpsRatioToDirect: 0.5, loadedP50Ms: 1, loadedP99Ms: 2, cpuUsPerRequest: 250, unloadedP50Us: 300, unloadedP99Us: 400, addedP50Us: 100 }],
      { gatewayPeakMiB: 90 },
      { node: 'v20' },
    );
    expect(md).toMatch(/^\| scenario \| target \| req\/s/);
    expect(md).toContain('| chat | gateway | 10 | 0.5 | 1 | 2 | 250 | 300 |');
    expect(md).toContain('- gatewayPeakMiB: 90');
  });
});

describe('soak upstream (npm run bench:soak)', () => {
  let soak: Awaited<ReturnType<typeof startSoakUpstream>>;
  beforeAll(async () => {
    soak = await startSoakUpstream(0);
  });
  afterAll(() => new Promise<void>((r) => soak.server.close(() => r())));
  const send = (path: string, model: string) =>
    fetch(`http://127.0.0.1:${soak.port}/v1${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, stream: true }) });

  it('streams a full chat and messages answer for `ok`', async () => {
    const chat = await events(await (await send('/chat/completions', 'ok')).text());
    expect(chat.at(-1)!.data).toBe('[DONE]');
    expect(chat).toHaveLength(22); // 20 chunks, usage, [DONE]
    expect(JSON.parse(chat[19].data).choices[0].finish_reason).toBe('stop');
    const messages = await events(await (await send('/messages', 'ok')).text());
    expect(messages.map((e) => e.event).at(-1)).toBe('message_stop');
  });

  it('fails `fail` with 500 and cuts `die` after five events', async () => {
    expect((await send('/chat/completions', 'fail')).status).toBe(500);
    // The socket is destroyed mid-answer: the client fails reading the headers or the body, never completes.
    await expect(send('/chat/completions', 'die').then((r) => r.text())).rejects.toThrow();
  });
});
