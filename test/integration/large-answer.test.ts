import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';

/**
 * An OpenAI-style provider whose JSON answers are large and written in many pieces, as a
 * long answer (n > 1, logprobs, a long tool output) arrives: the gateway read them whole, paused reading after
 * 64 chunks and never resumed, so the request hung for good (undici's body timeout does not run while paused).
 */
let provider: http.Server;
let gw: TestGateway;
/** The same provider behind a gateway with a long write timeout, for clients that read slowly but steadily. */
let patient: TestGateway;
const forever = { closed: 0 };
const CONTENT = 'x'.repeat(6 * 1024 * 1024);
/** Far more than the kernel buffers of a loopback connection whose client does not read (about 4 MB here). */
const HUGE = 'h'.repeat(16 * 1024 * 1024);

beforeAll(async () => {
  provider = http.createServer((req, res) => {
    if (req.url?.includes('/chat/completions') && req.headers.accept === 'text/event-stream') {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        if (body.includes('"upstream-tail"')) return void tailAnswer(res);
        if (!body.includes('"upstream-forever"')) return void bigAnswer(res);
        // A stream that never ends, 8 KB deltas, written as fast as the gateway takes them.
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const delta = `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'upstream-forever', choices: [{ index: 0, delta: { content: 'y'.repeat(8192) }, finish_reason: null }] })}\n\n`;
        const pump = () => {
          while (!res.destroyed && res.write(delta));
          if (!res.destroyed) res.once('drain', pump);
        };
        res.on('close', () => forever.closed++);
        pump();
      });
      return;
    }
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => bigAnswer(res, body.includes('"upstream-huge"') ? HUGE : CONTENT));
  });
  function bigAnswer(res: http.ServerResponse, content = CONTENT) {
    {
      const text = JSON.stringify({
        id: 'chatcmpl-big', object: 'chat.completion', created: 1, model: 'gpt-upstream',
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 },
      });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
      // 200 writes of ~30 KB, each its own chunk on the gateway's side.
      const piece = Math.ceil(text.length / 200);
      let at = 0;
      const next = () => {
        if (at >= text.length) return void res.end();
        const part = text.slice(at, (at += piece));
        if (res.write(part)) setImmediate(next);
        else res.once('drain', next);
      };
      next();
    }
  }
  // A whole answer at once whose last content event is 12 MB: the gateway has read all of it before a client
  // that stopped reading holds up any write.
  function tailAnswer(res: http.ServerResponse) {
    const chunk = (delta: object, finish: string | null) => `data: ${JSON.stringify({ id: 'c2', object: 'chat.completion.chunk', created: 1, model: 'upstream-tail', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(chunk({ role: 'assistant', content: '' }, null) + chunk({ content: 'z'.repeat(12 * 1024 * 1024) }, null) + chunk({}, 'stop') + 'data: [DONE]\n\n');
  }
  await new Promise<void>((r) => provider.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(provider.address() as AddressInfo).port}/v1`;
  const foreverModel = `  - id: fake/forever
    endpoints: [{ provider: fake-openai, upstream_model: upstream-forever, pricing: { prompt: 1, completion: 2 } }]
  - id: fake/tail
    endpoints: [{ provider: fake-openai, upstream_model: upstream-tail, pricing: { prompt: 1, completion: 2 } }]
  - id: fake/huge
    endpoints: [{ provider: fake-openai, upstream_model: upstream-huge, pricing: { prompt: 1, completion: 2 } }]
pipelines:`;
  gw = await startTestGateway({ yaml: testConfigYaml(url).replace('pipelines:', foreverModel).replace('watch_config: false', 'watch_config: false, write_timeout_ms: 300') });
  patient = await startTestGateway({ yaml: testConfigYaml(url).replace('pipelines:', foreverModel).replace('watch_config: false', 'watch_config: false, write_timeout_ms: 2000') });
});

afterAll(async () => {
  await gw?.close();
  await patient?.close();
  await new Promise((r) => provider?.close(r));
});

describe('a large JSON answer read in many chunks', () => {
  it('arrives whole (it hung once over 64 chunks)', async () => {
    const r = await post(`${gw.url}/chat/completions`, gw.key, { model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }] });
    expect(r.status).toBe(200);
    expect(r.json.choices[0].message.content).toBe(CONTENT);
    expect(r.json.usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 5 });
  }, 30_000);

  it('the same answer asked for as a stream is streamed whole', async () => {
    const r = await post(`${gw.url}/chat/completions`, gw.key, { model: 'fake/gpt', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    expect(r.status).toBe(200);
    expect(r.text).toContain('data: [DONE]');
    const content = r.text
      .split('\n')
      .filter((l) => l.startsWith('data: {'))
      .map((l) => JSON.parse(l.slice(6)).choices?.[0]?.delta?.content ?? '')
      .join('');
    expect(content).toBe(CONTENT);
  }, 30_000);
});

describe('a client that stops reading its stream', () => {
  it('is cut after server.write_timeout_ms: its request slot and the upstream connection are freed (they were held for good)', async () => {
    const body = JSON.stringify({ model: 'fake/forever', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const { port, pathname } = new URL(`${gw.url}/chat/completions`);
    const socket = net.connect(Number(port), '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    socket.write(`POST ${pathname} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${gw.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    socket.pause(); // reads nothing more: the gateway's writes back up
    // The gateway cuts the client and stops the provider's stream.
    await expect.poll(() => forever.closed, { timeout: 10_000 }).toBe(1);
    socket.destroy();
    // Nothing is left in flight.
    const metrics = await (await fetch(`${gw.url.replace(/\/api\/v1$/, '')}/metrics`)).text();
    expect(metrics).toMatch(/^gateway_requests_in_flight 0$/m);
  }, 20_000);

  for (const path of ['chat/completions', 'messages']) {
    it(`${path}: whose answer came whole from the provider is cut after write_timeout_ms too, billed cancelled (its last events sat in the process for good, billed completed)`, async () => {
      const body = JSON.stringify({ model: 'fake/tail', stream: true, max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] });
      const { port } = new URL(gw.url);
      const socket = net.connect(Number(port), '127.0.0.1');
      await new Promise((r) => socket.once('connect', r));
      const first = new Promise<string>((r) => socket.once('data', (d) => (socket.pause(), r(String(d)))));
      socket.write(`POST /api/v1/${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${gw.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      const id = /request-id: (gen-\S+)/i.exec(await first)![1];
      await expect.poll(async () => (await gw.ledgerRow(id))?.status, { timeout: 10_000 }).toBe('cancelled');
      // The connection was cut: what the client reads now ends without the stream's end.
      let rest = '';
      socket.on('data', (d) => (rest += d));
      socket.on('error', () => {});
      socket.resume();
      await new Promise((r) => socket.once('close', r));
      expect(rest).not.toContain('[DONE]');
      const metrics = await (await fetch(`${gw.url.replace(/\/api\/v1$/, '')}/metrics`)).text();
      expect(metrics).toMatch(/^gateway_requests_in_flight 0$/m);
    }, 20_000);
  }
});

describe('a client that stops reading its JSON answer', () => {
  it('is cut after write_timeout_ms and billed cancelled (the answer and its connection were held for good, billed completed)', async () => {
    const body = JSON.stringify({ model: 'fake/huge', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] });
    const socket = rawPost(gw, 'chat/completions', body);
    const first = new Promise<string>((r) => socket.once('data', (d) => (socket.pause(), r(String(d)))));
    const id = /request-id: (gen-\S+)/i.exec(await first)![1];
    await expect.poll(async () => (await gw.ledgerRow(id))?.status, { timeout: 10_000 }).toBe('cancelled');
    // The connection was cut: the client gets less than the answer's Content-Length.
    const rest = await readToClose(socket, 0);
    expect(rest.length).toBeLessThan(HUGE.length);
    const metrics = await (await fetch(`${gw.url.replace(/\/api\/v1$/, '')}/metrics`)).text();
    expect(metrics).toMatch(/^gateway_requests_in_flight 0$/m);
  }, 20_000);
});

/**
 * The write timeout is for a client that takes nothing: one that reads a large answer slowly but steadily (here
 * 32 KB, then a 20 ms pause, far under the gateway's 2 s) gets all of it, though taking the whole backlog lasts
 * longer than the timeout (it was cut once the backlog was not gone within it).
 */
describe('a client that reads a large answer slowly but steadily', () => {
  it('JSON: gets the whole answer, billed completed', async () => {
    const body = JSON.stringify({ model: 'fake/huge', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] });
    const text = await readToClose(rawPost(patient, 'chat/completions', body), 32 * 1024);
    const [head, answer] = text.split('\r\n\r\n');
    expect(JSON.parse(answer).choices[0].message.content).toBe(HUGE);
    const id = /request-id: (gen-\S+)/i.exec(head)![1];
    expect((await patient.ledgerRow(id))?.status).toBe('completed');
  }, 60_000);

  it('SSE: gets the whole stream (its last event is 12 MB), billed completed', async () => {
    const body = JSON.stringify({ model: 'fake/tail', stream: true, max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] });
    const text = await readToClose(rawPost(patient, 'chat/completions', body), 32 * 1024);
    expect(text).toContain('data: [DONE]');
    const id = /request-id: (gen-\S+)/i.exec(text)![1];
    await expect.poll(async () => (await patient.ledgerRow(id))?.status, { timeout: 5_000 }).toBe('completed');
  }, 60_000);
});

/** A POST on a raw socket (the gateway closes it after the answer), so the test decides when it is read. */
function rawPost(g: TestGateway, path: string, body: string): net.Socket {
  const { port } = new URL(g.url);
  const socket = net.connect(Number(port), '127.0.0.1');
  socket.on('error', () => {});
  socket.write(`POST /api/v1/${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${g.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  return socket;
}

/** Everything the socket gets until it closes; with `burst`, it pauses 20 ms after each `burst` bytes (0: reads straight on). */
function readToClose(socket: net.Socket, burst: number): Promise<string> {
  const parts: Buffer[] = [];
  let since = 0;
  socket.on('data', (d: Buffer) => {
    parts.push(d);
    since += d.length;
    if (burst > 0 && since >= burst) {
      since = 0;
      socket.pause();
      setTimeout(() => socket.resume(), 20);
    }
  });
  socket.resume();
  return new Promise((r) => socket.once('close', () => r(Buffer.concat(parts).toString())));
}
