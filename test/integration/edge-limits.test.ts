import { request, type IncomingHttpHeaders } from 'node:http';
import { connect, type Socket } from 'node:net';
import { describe, expect, it, vi } from 'vitest';
import { post, sseEvents, testConfigYaml } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';
import type { GatewayConfig } from '../../src/config/types';
import { openStore } from '../../src/store';

const t = perTestGateways();

/** The test config with other `server:` limits (and optionally a slow simulated provider). */
function yaml(server: string, opts: { chunkDelayMs?: number } = {}): string {
  let y = testConfigYaml(t.upstream.url).replace(
    'server: { port: 0, max_body_bytes: 65536, watch_config: false }',
    `server: { port: 0, watch_config: false, ${server} }`,
  );
  if (opts.chunkDelayMs) y = y.replace('{ id: local, kind: simulated }', `{ id: local, kind: simulated, chunk_delay_ms: ${opts.chunkDelayMs} }`);
  return y;
}

const CHAT = { model: 'sim/chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 };
const MESSAGES = { model: 'sim/chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 };

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  json: any;
}

/** One request with a body of raw bytes written in `chunks` (chunked encoding when no content-length). */
function send(url: string, opts: { headers: Record<string, string>; chunks: Buffer[] }): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: opts.headers }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        let json: any;
        try {
          json = JSON.parse(text);
        } catch {
          json = text;
        }
        resolve({ status: res.statusCode!, headers: res.headers, json });
      });
    });
    req.on('error', reject);
    for (const c of opts.chunks) req.write(c);
    req.end();
  });
}

/** A raw TCP exchange: writes `parts` with `gapMs` between them; resolves with all bytes read once the server closes. */
function raw(port: number, parts: string[], gapMs: number): Promise<{ text: string; closedByServer: boolean }> {
  return new Promise((resolve) => {
    const sock: Socket = connect(port, '127.0.0.1');
    let text = '';
    let i = 0;
    const timer = setInterval(() => {
      if (i < parts.length && !sock.destroyed) sock.write(parts[i++]);
    }, gapMs);
    sock.on('data', (d) => (text += d.toString('utf8')));
    sock.on('error', () => {});
    sock.on('close', () => {
      clearInterval(timer);
      // All parts written means the client did not give up: the server closed the connection.
      resolve({ text, closedByServer: true });
    });
    // A safety net well above the configured timeouts: a server that never closes fails the test.
    setTimeout(() => {
      clearInterval(timer);
      if (!sock.destroyed) {
        sock.destroy();
        resolve({ text, closedByServer: false });
      }
    }, 8000);
  });
}

function bodyOf(httpText: string): any {
  return JSON.parse(httpText.slice(httpText.indexOf('\r\n\r\n') + 4));
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

const TEN_MB = 10 * 1024 * 1024;

/**
 * Sends requests one after another on one keep-alive TCP connection and parses the answers (each with a
 * Content-Length): proves the connection stays usable after a refused body.
 */
function sameConnection(port: number, requests: Buffer[][]): Promise<{ status: number; json: any }[]> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    const answers: { status: number; json: any }[] = [];
    const writeNext = () => {
      for (const part of requests[answers.length]) sock.write(part);
    };
    sock.on('connect', writeNext);
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const headEnd = buf.indexOf('\r\n\r\n');
        if (headEnd === -1) return;
        const head = buf.subarray(0, headEnd).toString('latin1');
        const length = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? NaN);
        if (!(length >= 0)) return reject(new Error(`no content-length in ${head}`));
        if (buf.length < headEnd + 4 + length) return;
        answers.push({ status: Number(head.split(' ')[1]), json: JSON.parse(buf.subarray(headEnd + 4, headEnd + 4 + length).toString('utf8')) });
        buf = buf.subarray(headEnd + 4 + length);
        if (answers.length === requests.length) {
          sock.destroy();
          return resolve(answers);
        }
        writeNext();
      }
    });
    sock.on('error', reject);
    sock.on('close', () => reject(new Error(`connection closed after ${answers.length} answers`)));
  });
}

function httpRequest(path: string, headers: Record<string, string>, chunked: boolean, body: Buffer[]): Buffer[] {
  const head = [`POST ${path} HTTP/1.1`, 'Host: x', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
  const size = body.reduce((n, b) => n + b.length, 0);
  head.push(chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${size}`);
  const start = Buffer.from(`${head.join('\r\n')}\r\n\r\n`);
  if (!chunked) return [start, ...body];
  return [start, ...body.flatMap((b) => [Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from('\r\n')]), Buffer.from('0\r\n\r\n')];
}

describe('body size limit', () => {
  for (const chunked of [false, true]) {
    const how = chunked ? 'chunked, without Content-Length' : 'with Content-Length';
    it(`refuses a 10 MB + 1 body ${how}: 413 in each endpoint's envelope, and the connection serves the next request`, async () => {
      const gw = await t.start({ yaml: yaml(`max_body_bytes: ${TEN_MB}`) });
      expect(gw.config.server.max_body_bytes).toBe(TEN_MB);
      const port = Number(new URL(gw.url).port);
      const auth = { authorization: `Bearer ${gw.key}`, 'content-type': 'application/json' };
      const piece = Buffer.alloc(64 * 1024, 0x20);
      const big = [...Array.from({ length: TEN_MB / piece.length }, () => piece), Buffer.from(' ')];
      const [msgs, chat, ok] = await sameConnection(port, [
        httpRequest('/api/v1/messages', auth, chunked, big),
        httpRequest('/api/v1/chat/completions', auth, chunked, big),
        httpRequest('/api/v1/chat/completions', auth, chunked, [Buffer.from(JSON.stringify(CHAT))]),
      ]);
      expect(msgs.status).toBe(413);
      expect(msgs.json).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', error_type: 'payload_too_large' }, request_id: null });
      expect(chat.status).toBe(413);
      expect(chat.json.error).toMatchObject({ code: 413, metadata: { error_type: 'payload_too_large', limit_bytes: TEN_MB } });
      expect(ok.status).toBe(200);
      expect(ok.json.choices[0].message.content).toEqual(expect.any(String));
    });
  }
});

describe('requests Node refuses before any route', () => {
  it('headers over 16 KiB: 431 (RFC 6585) in the standard envelope, and the connection is closed', async () => {
    const gw = await t.start({ yaml: yaml('max_body_bytes: 65536') });
    const sock: Socket = connect(Number(new URL(gw.url).port), '127.0.0.1');
    let text = '';
    sock.on('data', (d) => (text += d.toString('latin1')));
    sock.on('error', () => {});
    const closed = new Promise<void>((r) => sock.on('close', () => r()));
    sock.write(`POST /api/v1/messages HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\nContent-Length: 2\r\n\r\n{}`);
    await closed;
    expect(text).toMatch(/^HTTP\/1\.1 431 Request Header Fields Too Large\r\n/);
    expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))).toMatchObject({
      error: { code: 431, message: 'Request headers are too large', metadata: { error_type: 'invalid_request' } },
    });
  });
});

describe('a client that asks to close its connection still gets its 413', () => {
  it('Connection: close and a declared body within twice the limit: the body is read and dropped first, then the 413, then a clean close (no reset)', async () => {
    const LIMIT = 4096;
    const gw = await t.start({ yaml: yaml(`max_body_bytes: ${LIMIT}`) });
    const body = Buffer.alloc(LIMIT + 2000, 0x20);
    const sock: Socket = connect(Number(new URL(gw.url).port), '127.0.0.1');
    let text = '';
    let answeredBeforeBody = false;
    let bodySent = false;
    const closed = new Promise<{ error?: string }>((resolve) => {
      sock.on('data', (d) => {
        if (!bodySent) answeredBeforeBody = true;
        text += d.toString('latin1');
      });
      sock.on('error', (err: NodeJS.ErrnoException) => resolve({ error: err.code }));
      sock.on('close', () => resolve({}));
    });
    await new Promise<void>((r) => sock.on('connect', () => r()));
    sock.write(
      `POST /api/v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${gw.key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
    );
    // The body comes later. Node closes a Connection: close socket as soon as its answer is written: answered
    // at the headers, a client still sending got a reset, and a Node client lost the 413 to EPIPE.
    await new Promise((r) => setTimeout(r, 200));
    bodySent = true;
    sock.write(body);
    const end = await closed;
    expect(answeredBeforeBody).toBe(false);
    expect(text).toMatch(/^HTTP\/1\.1 413 /);
    expect(text).toContain('"error_type":"payload_too_large"');
    expect(end.error).toBeUndefined();
  });
});

/**
 * Writes `head`, then body bytes as fast as the connection takes them, up to `total`; resolves with what
 * came back, how much was written, and whether the server closed the connection before all of it was.
 */
function flood(port: number, head: string, piece: Buffer, total: number): Promise<{ text: string; sent: number; closedByServer: boolean }> {
  return new Promise((resolve) => {
    const sock: Socket = connect(port, '127.0.0.1');
    let text = '';
    let sent = 0;
    let finished = false;
    const end = (closedByServer: boolean) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ text, sent, closedByServer });
    };
    const pump = () => {
      while (!sock.destroyed && sent < total) {
        sent += piece.length;
        if (!sock.write(piece)) return void sock.once('drain', pump);
      }
      // Everything was written: a server still reading would have drained it all (give it a moment to answer).
      if (sent >= total) setTimeout(() => end(false), 300);
    };
    sock.on('connect', () => {
      sock.write(head);
      pump();
    });
    sock.on('data', (d) => (text += d.toString('latin1')));
    sock.on('error', () => {});
    sock.on('close', () => end(sent < total));
    const timer = setTimeout(() => end(false), 8000);
  });
}

describe('a refused body is drained only so far', () => {
  const LIMIT = 4096;
  const TOTAL = 64 * 1024 * 1024;
  const piece = Buffer.alloc(64 * 1024, 0x20);
  const head = (gwKey: string, framing: string) =>
    `POST /api/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${gwKey}\r\nContent-Type: application/json\r\n${framing}\r\n\r\n`;

  it('a declared Content-Length far over the limit: 413 with Connection: close, and the connection is closed without reading it all', async () => {
    const gw = await t.start({ yaml: yaml(`max_body_bytes: ${LIMIT}`) });
    const r = await flood(Number(new URL(gw.url).port), head(gw.key, `Content-Length: ${TOTAL}`), piece, TOTAL);
    expect(r.text).toMatch(/^HTTP\/1\.1 413 /);
    expect(r.text).toMatch(/\r\nconnection: close\r\n/i);
    expect(r.closedByServer).toBe(true);
    expect(r.sent).toBeLessThan(TOTAL);
  });

  it('a chunked body that goes on past the limit: 413, then the connection is closed once as much again was dropped', async () => {
    const gw = await t.start({ yaml: yaml(`max_body_bytes: ${LIMIT}`) });
    // One never-ending chunk: the body's framing stays valid while the client sends.
    const r = await flood(Number(new URL(gw.url).port), `${head(gw.key, 'Transfer-Encoding: chunked')}${TOTAL.toString(16)}\r\n`, piece, TOTAL);
    expect(r.text).toMatch(/^HTTP\/1\.1 413 /);
    expect(r.closedByServer).toBe(true);
    expect(r.sent).toBeLessThan(TOTAL);
  });
});

describe('Expect: 100-continue', () => {
  /** Sends only the head of a request and returns what the server writes within `ms` (and whether it closed). */
  function headOnly(port: number, head: string, ms: number): Promise<{ text: string; closed: boolean }> {
    return new Promise((resolve) => {
      const sock = connect(port, '127.0.0.1', () => sock.write(head));
      let text = '';
      let closed = false;
      sock.on('data', (d) => (text += d.toString('latin1')));
      sock.on('error', () => {});
      sock.on('close', () => (closed = true));
      setTimeout(() => {
        sock.destroy();
        resolve({ text, closed });
      }, ms);
    });
  }

  it('a declared body over the limit gets its 413 at once, without 100 Continue, and the connection ends; one within it is continued', async () => {
    const gw = await t.start({ yaml: yaml('max_body_bytes: 4096') });
    const port = Number(new URL(gw.url).port);
    const head = (length: number) =>
      `POST /api/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${gw.key}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;
    const big = await headOnly(port, head(5000), 500);
    expect(big.text).toMatch(/^HTTP\/1\.1 413 /);
    expect(big.text).not.toContain('100 Continue');
    expect(big.text).toMatch(/\r\nconnection: close\r\n/i);
    expect(big.closed).toBe(true);
    const small = await headOnly(port, head(100), 300);
    expect(small.text).toBe('HTTP/1.1 100 Continue\r\n\r\n');
  });

  it('any other expectation is a 417 in the standard envelope, and the connection is closed', async () => {
    const gw = await t.start({});
    const port = Number(new URL(gw.url).port);
    const other = await headOnly(port, `GET /api/v1/key HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${gw.key}\r\nExpect: something-else\r\n\r\n`, 500);
    expect(other.text).toMatch(/^HTTP\/1\.1 417 /);
    expect(other.text).toMatch(/\r\nconnection: close\r\n/i);
    expect(bodyOf(other.text).error).toMatchObject({ code: 417, metadata: { error_type: 'invalid_request' } });
    expect(other.closed).toBe(true);
  });
});

describe('the key is checked before the body is read', () => {
  /** Writes `text` on a new connection and resolves with the first whole answer (head and Content-Length body), or '' after 8 s. */
  function firstAnswer(port: number, text: string): Promise<{ text: string; closed: Promise<boolean> }> {
    return new Promise((resolve) => {
      const sock = connect(port, '127.0.0.1', () => sock.write(text));
      let got = '';
      const closed = new Promise<boolean>((r) => {
        sock.on('close', () => r(true));
        setTimeout(() => r(false), 3000);
      });
      sock.on('error', () => {});
      sock.on('data', (d) => {
        got += d.toString('latin1');
        const end = got.indexOf('\r\n\r\n');
        const length = Number(/content-length: *(\d+)/i.exec(got)?.[1] ?? NaN);
        if (end !== -1 && got.length >= end + 4 + length) resolve({ text: got, closed });
      });
      setTimeout(() => {
        resolve({ text: got, closed });
        sock.destroy();
      }, 8000);
    });
  }
  const head = (path: string, headers: string, length: number) =>
    `POST /api/v1${path} HTTP/1.1\r\nHost: x\r\n${headers}Content-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;

  it('a request without a usable key gets its 401 at once, its body unfinished, and holds no max_in_flight slot', async () => {
    const gw = await t.start({ yaml: yaml('max_in_flight: 2, body_timeout_ms: 30000') });
    const port = Number(new URL(gw.url).port);
    // Three bodies that never finish (a slot each until body_timeout_ms, 30 s, if the body were read first).
    const answers = await Promise.all([
      firstAnswer(port, head('/chat/completions', '', 1000) + '{"model":'),
      firstAnswer(port, head('/chat/completions', 'Authorization: Bearer sk-gw-v1-nope\r\n', 1000) + '{"model":'),
      firstAnswer(port, head('/messages', 'x-api-key: sk-gw-v1-nope\r\n', 1000) + '{"model":'),
    ]);
    expect(answers.map((a) => a.text.split(' ')[1])).toEqual(['401', '401', '401']);
    expect(bodyOf(answers[0].text).error).toMatchObject({ code: 401, metadata: { error_type: 'authentication' } });
    expect(bodyOf(answers[0].text).error.message).toBe('Missing Authentication header');
    expect(bodyOf(answers[2].text)).toMatchObject({ type: 'error', error: { type: 'authentication_error' }, request_id: null });
    // The slots are free: a request with a key is served, not refused with max_in_flight's 503.
    expect((await post(`${gw.url}/chat/completions`, gw.key, CHAT)).status).toBe(200);
    expect(gw.gateway.inFlight()).toBe(0);
  });

  it('a body without a key is never parsed (401, not 400), and is drained so the connection serves the next request', async () => {
    const gw = await t.start({ yaml: yaml('max_body_bytes: 65536') });
    const port = Number(new URL(gw.url).port);
    const answers = await sameConnection(port, [
      httpRequest('/api/v1/chat/completions', { 'Content-Type': 'application/json' }, false, [Buffer.from('{not json'.repeat(1000))]),
      httpRequest('/api/v1/chat/completions', { 'Content-Type': 'application/json' }, true, [Buffer.from('['.repeat(5000))]),
      httpRequest('/api/v1/chat/completions', { 'Content-Type': 'application/json', Authorization: `Bearer ${gw.key}` }, false, [Buffer.from(JSON.stringify(CHAT))]),
    ]);
    expect(answers.map((a) => a.status)).toEqual([401, 401, 200]);
  });

  it('a declared body over the limit without a key: 401 with Connection: close; with Expect: 100-continue the body is never asked for', async () => {
    const gw = await t.start({ yaml: yaml('max_body_bytes: 4096') });
    const port = Number(new URL(gw.url).port);
    const big = await firstAnswer(port, head('/chat/completions', '', 9000));
    expect(big.text).toMatch(/^HTTP\/1\.1 401 /);
    expect(big.text).toMatch(/\r\nconnection: close\r\n/i);
    const expecting = await firstAnswer(port, head('/chat/completions', 'Authorization: Bearer sk-gw-v1-nope\r\nExpect: 100-continue\r\n', 100));
    expect(expecting.text).toMatch(/^HTTP\/1\.1 401 /);
    expect(expecting.text).not.toContain('100 Continue');
    expect(expecting.text).toMatch(/\r\nconnection: close\r\n/i);
    expect(await expecting.closed).toBe(true);
    // With a usable key the client is told to go on, and its body is served.
    const json = JSON.stringify(CHAT);
    const sock = connect(port, '127.0.0.1');
    let got = '';
    sock.on('data', (d) => {
      got += d.toString('latin1');
      if (got === 'HTTP/1.1 100 Continue\r\n\r\n') sock.write(json);
    });
    sock.write(head('/chat/completions', `Authorization: Bearer ${gw.key}\r\nExpect: 100-continue\r\n`, Buffer.byteLength(json)));
    await until(() => /\r\n\r\n\{/.test(got.slice(25)), 'the answer after 100 Continue');
    sock.destroy();
    expect(got).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
  });

  it('plugins.auth.max_body_reads_per_key: one more unfinished body of that key is a 429 before its body; other keys pass; a finished or abandoned body frees its count', async () => {
    const gw = await t.start({ yaml: yaml('body_timeout_ms: 30000') + 'plugins:\n  auth: { max_body_reads_per_key: 2 }\n' });
    const port = Number(new URL(gw.url).port);
    const json = JSON.stringify(CHAT);
    const auth = `Authorization: Bearer ${gw.key}\r\n`;
    // Two bodies of the key that are still arriving (half sent).
    const open = [0, 1].map(() => {
      const sock = connect(port, '127.0.0.1');
      let got = '';
      sock.on('data', (d) => (got += d));
      sock.on('error', () => {});
      sock.write(head('/chat/completions', auth, Buffer.byteLength(json)) + json.slice(0, 10));
      return { sock, got: () => got };
    });
    await until(() => gw.gateway.inFlight() === 2, 'both requests reading their body');
    // The third of that key, on either endpoint, is refused at once, before its body.
    const third = await firstAnswer(port, head('/chat/completions', auth, 1000) + '{"x":');
    expect(third.text).toMatch(/^HTTP\/1\.1 429 /);
    expect(third.text).toMatch(/\r\nretry-after: 1\r\n/i);
    expect(bodyOf(third.text).error).toMatchObject({ code: 429, metadata: { error_type: 'rate_limit_exceeded', reason: 'key_body_reads', max_body_reads_per_key: 2 } });
    const msgs = await post(`${gw.url}/messages`, gw.key, MESSAGES);
    expect(msgs.status).toBe(429);
    expect(msgs.json.error).toMatchObject({ type: 'rate_limit_error', error_type: 'rate_limit_exceeded' });
    // Another key is not held back.
    const other = (await gw.createKey()).secret;
    expect((await post(`${gw.url}/chat/completions`, other, CHAT)).status).toBe(200);
    // One body finishes (answered), the other's client leaves: both counts come back.
    open[0].sock.write(json.slice(10));
    await until(() => open[0].got().includes('"chat.completion"'), 'the finished body answered');
    open[1].sock.destroy();
    let after = await post(`${gw.url}/chat/completions`, gw.key, CHAT);
    for (let i = 0; i < 50 && after.status === 429; i++) {
      await new Promise((r) => setTimeout(r, 20));
      after = await post(`${gw.url}/chat/completions`, gw.key, CHAT);
    }
    expect(after.status).toBe(200);
    const both = await Promise.all([post(`${gw.url}/chat/completions`, gw.key, CHAT), post(`${gw.url}/messages`, gw.key, MESSAGES)]);
    expect(both.map((r) => r.status)).toEqual([200, 200]);
    open[0].sock.destroy();
  });

  it('plugins.auth.max_requests_per_key: one more request of a key being served is a 429, on every endpoint; other keys pass; every kind of ending frees its count', async () => {
    const gw = await t.start({ yaml: yaml('max_in_flight: 10') + 'plugins:\n  auth: { max_requests_per_key: 2 }\n' });
    const chatReq = (key: string, over: Record<string, unknown> = {}) => post(`${gw.url}/chat/completions`, key, { ...CHAT, model: 'fake/gpt', ...over });
    // Two requests of the key held at the upstream (bodies read: not counted as body reads).
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const before = t.upstream.received.length;
    t.upstream.faults.push({ kind: 'hold', until: gate }, { kind: 'hold', until: gate });
    const held = [chatReq(gw.key), chatReq(gw.key, { stream: true })];
    await until(() => t.upstream.received.length === before + 2, 'two held requests at the upstream');
    // A third of that key is refused on both endpoints and GET /key, before reaching the upstream.
    const third = await chatReq(gw.key);
    expect(third.status).toBe(429);
    expect(third.headers.get('retry-after')).toBe('1');
    expect(third.json.error).toMatchObject({ code: 429, metadata: { error_type: 'rate_limit_exceeded', reason: 'key_requests', max_requests_per_key: 2 } });
    const msgs = await post(`${gw.url}/messages`, gw.key, MESSAGES);
    expect(msgs.status).toBe(429);
    expect(msgs.json.error).toMatchObject({ type: 'rate_limit_error', error_type: 'rate_limit_exceeded' });
    expect((await fetch(`${gw.url}/key`, { headers: { authorization: `Bearer ${gw.key}` } })).status).toBe(429);
    expect(t.upstream.received.length).toBe(before + 2);
    // Another key is not held back.
    const other = (await gw.createKey()).secret;
    expect((await chatReq(other)).status).toBe(200);
    // Answered (JSON and a whole stream): both counts come back.
    release();
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([200, 200]);
    await until(() => gw.gateway.inFlight() === 0, 'both requests finished');
    expect((await Promise.all([chatReq(gw.key), post(`${gw.url}/messages`, gw.key, MESSAGES)])).map((r) => r.status)).toEqual([200, 200]);
    // A stream the client abandons and a refused request (400) give theirs back too.
    const abort = new AbortController();
    t.upstream.faults.push({ kind: 'stall' });
    const stalled = fetch(`${gw.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.key}` },
      body: JSON.stringify({ ...CHAT, model: 'fake/gpt', stream: true }),
      signal: abort.signal,
    }).catch(() => null);
    await until(() => gw.gateway.inFlight() === 1, 'the stalled stream in flight');
    expect((await chatReq(gw.key, { temperature: 'hot' })).status).toBe(400);
    abort.abort();
    await stalled;
    await until(() => gw.gateway.inFlight() === 0, 'the abandoned stream gone');
    expect((await Promise.all([chatReq(gw.key), chatReq(gw.key)])).map((r) => r.status)).toEqual([200, 200]);
  });

  it('a client that leaves while its key is looked up frees its max_in_flight slot at once (not at body_timeout_ms), and holds none of its key\'s counts (POST with a body, GET /key)', async () => {
    const store = await openStore({ driver: 'sqlite', path: ':memory:' } as GatewayConfig['storage']);
    // A key lookup held until the client has gone (a PostgreSQL round trip, or a key's first use after the cache's 5 s).
    let gate: Promise<void> | null = null;
    let asked = false;
    const find = store.findKeyByHash.bind(store);
    store.findKeyByHash = async (hash: string) => {
      asked = true;
      if (gate) await gate;
      return find(hash);
    };
    // One of each per key: a count the leaving client kept would refuse the key's every later request.
    const gw = await t.start({ yaml: yaml('max_in_flight: 1, body_timeout_ms: 30000') + 'plugins:\n  auth: { max_requests_per_key: 1, max_body_reads_per_key: 1 }\n', store });
    try {
      const port = Number(new URL(gw.url).port);
      // A fresh key each time: a key the cache holds is not looked up.
      const requests = [
        (key: string) => head('/chat/completions', `Authorization: Bearer ${key}\r\n`, 1000) + '{"model":',
        (key: string) => `GET /api/v1/key HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`,
      ];
      for (const request of requests) {
        const key = (await gw.createKey()).secret;
        let open!: () => void;
        gate = new Promise<void>((r) => (open = r));
        asked = false;
        const sock = connect(port, '127.0.0.1');
        sock.on('error', () => {});
        const closed = new Promise((r) => sock.once('close', r));
        sock.write(request(key));
        await until(() => asked, 'the key lookup');
        sock.destroy();
        await closed;
        await new Promise((r) => setTimeout(r, 200)); // the server sees the close before the lookup ends
        gate = null;
        open();
        await until(() => gw.gateway.inFlight() === 0, 'the slot freed');
        expect((await post(`${gw.url}/chat/completions`, key, CHAT)).status).toBe(200);
        expect((await fetch(`${gw.url}/key`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
      }
    } finally {
      await store.close();
    }
  });

  it('a key that expires while its body is arriving is refused once the body is in', async () => {
    const gw = await t.start({ yaml: yaml('body_timeout_ms: 30000') });
    const port = Number(new URL(gw.url).port);
    const { secret } = await gw.createKey({ expiresAt: new Date(Date.now() + 1000).toISOString() });
    const json = JSON.stringify(CHAT);
    const sock = connect(port, '127.0.0.1');
    let got = '';
    sock.on('data', (d) => (got += d));
    sock.on('error', () => {});
    sock.write(head('/chat/completions', `Authorization: Bearer ${secret}\r\n`, Buffer.byteLength(json)));
    await new Promise((r) => setTimeout(r, 1500)); // past the key's expiry, and past the stage's recheck age
    sock.write(json);
    await until(() => /\r\n\r\n\{/.test(got), 'the answer');
    sock.destroy();
    expect(got).toMatch(/^HTTP\/1\.1 401 /);
  });

  it('the preset and video endpoints check the key first too', async () => {
    const gw = await t.start({ yaml: yaml('body_timeout_ms: 30000') });
    const port = Number(new URL(gw.url).port);
    const answers = await Promise.all([
      firstAnswer(port, head('/presets/p1/messages', '', 1000) + '{"x":'),
      firstAnswer(port, head('/videos', '', 1000) + '{"x":'),
    ]);
    expect(answers.map((a) => a.text.split(' ')[1])).toEqual(['401', '401']);
  });
});

describe('JSON depth, UTF-8 and surrogates', () => {
  it('a 100k-deep body is a fast 400 invalid_request on both endpoints, with no upstream call', async () => {
    const gw = await t.start({ yaml: yaml('max_body_bytes: 1048576') });
    const deep = '['.repeat(100_000) + ']'.repeat(100_000);
    const chat = await post(`${gw.url}/chat/completions`, gw.key, `{"model":"fake/gpt","messages":${deep}}`);
    expect(chat.status).toBe(400);
    expect(chat.json.error.metadata).toMatchObject({ error_type: 'invalid_request', max_depth: 100 });
    const msgs = await post(`${gw.url}/messages`, gw.key, `{"model":"fake/claude","metadata":${'{"a":'.repeat(50_000)}1${'}'.repeat(50_000)}}`);
    expect(msgs.status).toBe(400);
    expect(msgs.json).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', error_type: 'invalid_request' } });
    expect(t.upstream.received).toHaveLength(0);
  });

  it('max_json_depth is configurable: a body at the limit passes, one level more does not', async () => {
    const gw = await t.start({ yaml: yaml('max_json_depth: 4') });
    // body {} → messages [] → message {} → content [] → block {} = 5 levels
    const blocks = { ...CHAT, messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }] };
    const tooDeep = await post(`${gw.url}/chat/completions`, gw.key, blocks);
    expect(tooDeep.status).toBe(400);
    expect(tooDeep.json.error.metadata).toMatchObject({ error_type: 'invalid_request', max_depth: 4 });
    const ok = await post(`${gw.url}/chat/completions`, gw.key, CHAT);
    expect(ok.status).toBe(200);
  });

  it('max_json_values: a body at the limit passes, one value more is a 400 on both endpoints, before JSON.parse', async () => {
    const gw = await t.start({ yaml: yaml('max_json_values: 12') });
    // {model, messages:[{role, content}], max_tokens}: 2 commas + 1 object = 3 at the top, + 1 array,
    // + 1 object and 1 comma in the message: 6 in all; 6 more elements of logit_bias-like padding are fine.
    const at = { ...CHAT, metadata: { a: '1', b: '2', c: '3', d: '4', e: '5' } };
    expect((await post(`${gw.url}/chat/completions`, gw.key, at)).status).toBe(200);
    const over = { ...at, metadata: { ...at.metadata, f: '6' } };
    const chat = await post(`${gw.url}/chat/completions`, gw.key, over);
    expect(chat.status).toBe(400);
    expect(chat.json.error.metadata).toMatchObject({ error_type: 'invalid_request', max_values: 12 });
    const msgs = await post(`${gw.url}/messages`, gw.key, { ...MESSAGES, metadata: { user_id: 'u' }, stop_sequences: ['a', 'b', 'c', 'd', 'e', 'f'] });
    expect(msgs.status).toBe(400);
    expect(msgs.json.error).toMatchObject({ type: 'invalid_request_error', error_type: 'invalid_request' });
  });

  it('the default max_json_values refuses a 10 MB body of tiny values without parsing it', async () => {
    const gw = await t.start({ yaml: yaml('max_body_bytes: 10485760') });
    const before = t.upstream.received.length;
    for (const unit of ['0,', '{},']) {
      const body = `{"model":"fake/gpt","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"x":[${unit.repeat(3_000_000)}0]}`;
      const res = await post(`${gw.url}/chat/completions`, gw.key, body);
      expect(res.status).toBe(400);
      expect(res.json.error.metadata).toMatchObject({ error_type: 'invalid_request', max_values: 200000 });
    }
    expect(t.upstream.received.length).toBe(before);
  });

  it('invalid UTF-8 bytes are a 400 invalid_request, also an encoded surrogate (ED A0 80)', async () => {
    const gw = await t.start({});
    const withBytes = (bytes: number[]) =>
      Buffer.concat([Buffer.from('{"model":"sim/chat","messages":[{"role":"user","content":"a'), Buffer.from(bytes), Buffer.from('"}]}')]);
    for (const bytes of [[0xff, 0xfe], [0xc3], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80]]) {
      const a = await send(`${gw.url}/chat/completions`, {
        headers: { authorization: `Bearer ${gw.key}`, 'content-type': 'application/json' },
        chunks: [withBytes(bytes)],
      });
      expect(a.status, String(bytes)).toBe(400);
      expect(a.json.error.metadata.error_type).toBe('invalid_request');
      expect(a.json.error.message).toMatch(/UTF-8/);
    }
    const m = await send(`${gw.url}/messages`, { headers: { 'x-api-key': gw.key, 'content-type': 'application/json' }, chunks: [withBytes([0xff])] });
    expect(m.status).toBe(400);
    expect(m.json).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', error_type: 'invalid_request' } });
    // Multi-byte UTF-8 that is valid passes.
    const ok = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, messages: [{ role: 'user', content: 'héllo 日本 😀' }] });
    expect(ok.status).toBe(200);
  });

  it('a lone surrogate escape is a 400 invalid_request; a proper pair passes', async () => {
    const gw = await t.start({});
    const lone = await post(`${gw.url}/chat/completions`, gw.key, '{"model":"sim/chat","messages":[{"role":"user","content":"x\\ud800y"}]}');
    expect(lone.status).toBe(400);
    expect(lone.json.error.metadata.error_type).toBe('invalid_request');
    expect(lone.json.error.message).toMatch(/surrogate/);
    const loneKey = await post(`${gw.url}/messages`, gw.key, '{"model":"sim/chat","max_tokens":5,"metadata":{"\\udc00":"1"},"messages":[{"role":"user","content":"x"}]}');
    expect(loneKey.status).toBe(400);
    expect(loneKey.json.error).toMatchObject({ type: 'invalid_request_error', error_type: 'invalid_request' });
    const pair = await post(`${gw.url}/chat/completions`, gw.key, '{"model":"sim/chat","messages":[{"role":"user","content":"x\\ud83d\\ude00y"}]}');
    expect(pair.status).toBe(200);
  });
});

describe('slow clients', () => {
  it('headers trickled slower than headers_timeout_ms: a 408 timeout in the standard envelope, and the server closes the socket', async () => {
    const gw = await t.start({ yaml: yaml('headers_timeout_ms: 300, body_timeout_ms: 300') });
    const port = Number(new URL(gw.url).port);
    const lines = ['POST /api/v1/chat/completions HTTP/1.1\r\n', 'Host: x\r\n', ...Array.from({ length: 40 }, (_, i) => `X-Slow-${i}: 1\r\n`)];
    const r = await raw(port, lines, 100);
    expect(r.closedByServer).toBe(true);
    expect(r.text).toMatch(/^HTTP\/1\.1 408 /);
    expect(bodyOf(r.text)).toMatchObject({ error: { code: 408, metadata: { error_type: 'timeout' } } });
  });

  it('a body trickled slower than body_timeout_ms: a 408 in the endpoint envelope, connection closed, nothing reaches the upstream', async () => {
    const gw = await t.start({ yaml: yaml('headers_timeout_ms: 300, body_timeout_ms: 300') });
    const port = Number(new URL(gw.url).port);
    const json = JSON.stringify({ ...MESSAGES, model: 'fake/claude' });
    const head = (path: string) =>
      `POST /api/v1${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-api-key: ${gw.key}\r\nContent-Length: ${json.length}\r\n\r\n`;
    const msgs = await raw(port, [head('/messages'), ...json.split('')], 50);
    expect(msgs.closedByServer).toBe(true);
    expect(msgs.text).toMatch(/^HTTP\/1\.1 408 /);
    expect(bodyOf(msgs.text)).toMatchObject({ type: 'error', error: { type: 'timeout_error', error_type: 'timeout' } });

    const chat = await raw(port, [head('/chat/completions'), ...json.split('')], 50);
    expect(chat.closedByServer).toBe(true);
    expect(bodyOf(chat.text)).toMatchObject({ error: { code: 408, metadata: { error_type: 'timeout' } } });
    expect(t.upstream.received).toHaveLength(0);
    // The gateway still serves.
    expect((await post(`${gw.url}/chat/completions`, gw.key, CHAT)).status).toBe(200);
  });

  it('the request timeouts never cut a streamed answer that lasts longer than them', async () => {
    const gw = await t.start({ yaml: yaml('headers_timeout_ms: 100, body_timeout_ms: 100', { chunkDelayMs: 60 }) });
    const started = performance.now();
    const r = await post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, max_tokens: 30, stream: true });
    expect(r.status).toBe(200);
    // Node checks its timeouts every 25 ms here; the stream ran several times past headers + body timeouts.
    expect(performance.now() - started).toBeGreaterThan(600);
    const events = sseEvents(r.text);
    expect(events.at(-1)!.data).toBe('[DONE]');
    expect(events.some((e) => e.data.includes('"finish_reason":"length"') || e.data.includes('"finish_reason":"stop"'))).toBe(true);
  });
});

describe('a client that resets its connection during a stream', () => {
  it('is logged by the gateway logger at debug, not printed to stderr by Koa', async () => {
    const gw = await t.start({ yaml: yaml('max_in_flight: 8', { chunkDelayMs: 50 }).replace('logging: { level: info }', 'logging: { level: debug }') });
    const printed = vi.spyOn(console, 'error');
    try {
      const port = Number(new URL(gw.url).port);
      const body = JSON.stringify({ ...CHAT, stream: true, max_tokens: 200, messages: [{ role: 'user', content: 'hi '.repeat(50) }] });
      const sock = connect(port, '127.0.0.1', () =>
        sock.write(`POST /api/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${gw.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`),
      );
      sock.on('error', () => {});
      await new Promise<void>((r) => sock.once('data', () => r()));
      sock.resetAndDestroy();
      await until(() => gw.logs.some((l) => l.includes('"msg":"client connection closed"')), 'the debug line');
      expect(gw.logs.find((l) => l.includes('"msg":"client connection closed"'))).toContain('"code":"ECONNRESET"');
      expect(printed).not.toHaveBeenCalled();
    } finally {
      printed.mockRestore();
    }
  });
});

describe('max_in_flight and max_connections', () => {
  it('over max_in_flight: 503 provider_overloaded (529 on /messages) with Retry-After; the count comes back down after every kind of ending', async () => {
    const gw = await t.start({ yaml: yaml('max_in_flight: 2') });
    const chatReq = (over: Record<string, unknown> = {}) => post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, model: 'fake/gpt', ...over });

    /** Fills both slots with requests the upstream holds; returns a release and their answers. */
    const fill = async () => {
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const before = t.upstream.received.length;
      t.upstream.faults.push({ kind: 'hold', until: gate }, { kind: 'hold', until: gate });
      const held = [chatReq(), chatReq({ stream: true })];
      await until(() => t.upstream.received.length === before + 2, 'two held requests at the upstream');
      return { release, held };
    };
    const expectOverloaded = async () => {
      const chat = await chatReq();
      expect(chat.status).toBe(503);
      expect(chat.headers.get('retry-after')).toBe('1');
      expect(chat.json.error).toMatchObject({ code: 503, metadata: { error_type: 'provider_overloaded', reason: 'gateway_max_in_flight', max_in_flight: 2 } });
      const msgs = await post(`${gw.url}/messages`, gw.key, MESSAGES);
      expect(msgs.status).toBe(529);
      expect(msgs.headers.get('retry-after')).toBe('1');
      expect(msgs.json).toMatchObject({ type: 'error', error: { type: 'overloaded_error', error_type: 'provider_overloaded' } });
    };

    // 1. Full: refused at once, without reaching the upstream; health checks still answer.
    let round = await fill();
    const seen = t.upstream.received.length;
    const logged = gw.logs.length;
    await expectOverloaded();
    expect(t.upstream.received.length).toBe(seen);
    // Each refusal has its access line (there had been none: the log showed no sign of the overload).
    const lines = gw.logs.slice(logged).map((l) => JSON.parse(l)).filter((l) => l.msg === 'request');
    expect(lines.map((l) => [l.endpoint, l.status, l.error_type, l.reason])).toEqual([
      ['chat_completions', 503, 'provider_overloaded', 'gateway_max_in_flight'],
      ['messages', 529, 'provider_overloaded', 'gateway_max_in_flight'],
    ]);
    expect((await fetch(`${gw.url.replace('/api/v1', '')}/healthz`)).status).toBe(200);
    round.release();
    const [json, stream] = await Promise.all(round.held);
    expect(json.status).toBe(200);
    expect(stream.status).toBe(200);
    expect(sseEvents(stream.text).at(-1)!.data).toBe('[DONE]');

    await until(() => gw.gateway.inFlight() === 0, 'both slots free after normal endings');

    // 2. A stream the client abandons mid-way and a stream whose upstream dies free their slots too.
    const abort = new AbortController();
    t.upstream.faults.push({ kind: 'stall' }, { kind: 'midstream' });
    const stalled = await fetch(`${gw.url}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${gw.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...CHAT, model: 'fake/gpt', stream: true }),
      signal: abort.signal,
    });
    await stalled.body!.getReader().read(); // output has started
    expect(gw.gateway.inFlight()).toBe(1);
    const died = await chatReq({ stream: true });
    expect(died.status).toBe(200);
    expect(sseEvents(died.text).some((e) => e.data.includes('"finish_reason":"error"'))).toBe(true);
    expect(gw.gateway.inFlight()).toBe(1);
    abort.abort();
    await until(() => gw.gateway.inFlight() === 0, 'the abandoned stream to free its slot');

    // 3. Exactly once: after all of that both slots are free, and a third request is refused again.
    round = await fill();
    expect(gw.gateway.inFlight()).toBe(2);
    await expectOverloaded();
    round.release();
    expect((await Promise.all(round.held)).map((a) => a.status)).toEqual([200, 200]);
    await until(() => gw.gateway.inFlight() === 0, 'both slots free');
    expect((await chatReq()).status).toBe(200);
    expect(gw.gateway.inFlight()).toBe(0);
  });

  it('max_connections: a connection beyond it is closed at once, the open ones keep working', async () => {
    const gw = await t.start({ yaml: yaml('max_connections: 2') });
    const port = Number(new URL(gw.url).port);
    const open = (): Promise<Socket> =>
      new Promise((resolve) => {
        const s = connect(port, '127.0.0.1', () => resolve(s));
        s.on('error', () => {});
      });
    const a = await open();
    const b = await open();
    try {
      const c = await open();
      const closed = await new Promise<string>((resolve) => {
        let text = '';
        c.on('data', (d) => (text += d));
        c.on('close', () => resolve(text));
        c.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
      });
      expect(closed).toBe('');
      const answer = await new Promise<string>((resolve) => {
        let text = '';
        a.on('data', (d) => {
          text += d;
          if (text.includes('"ok"')) resolve(text);
        });
        a.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
      });
      expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    } finally {
      a.destroy();
      b.destroy();
    }
  });
  it('max_connections: a connection serving a pipelined request is not idle, though an earlier answer on it is finished', async () => {
    const gw = await t.start({ yaml: yaml('max_connections: 1') });
    const port = Number(new URL(gw.url).port);
    let release!: () => void;
    t.upstream.faults.push({ kind: 'hold', until: new Promise<void>((r) => (release = r)) });
    const before = t.upstream.received.length;
    const json = JSON.stringify({ ...CHAT, model: 'fake/gpt' });
    const a = connect(port, '127.0.0.1');
    let aText = '';
    let aClosed = false;
    a.on('data', (d) => (aText += d));
    a.on('error', () => {});
    a.on('close', () => (aClosed = true));
    const chat = httpRequest('/api/v1/chat/completions', { 'Content-Type': 'application/json', Authorization: `Bearer ${gw.key}` }, false, [Buffer.from(json)]);
    a.write(Buffer.concat([Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'), ...chat]));
    await until(() => t.upstream.received.length === before + 1, 'the held request at the upstream');
    expect(aText).toMatch(/^HTTP\/1\.1 200 /);
    const c = connect(port, '127.0.0.1');
    c.on('error', () => {});
    const cClosed = new Promise((r) => c.once('close', r));
    c.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    await cClosed; // the new connection is the one refused
    expect(aClosed).toBe(false);
    release();
    await until(() => (aText.match(/HTTP\/1\.1 200 /g) ?? []).length === 2 && aText.includes('"chat.completion"'), 'the held answer on a');
    a.destroy();
  });

  it('max_connections: idle keep-alive connections give way to a new one, the longest idle first; busy ones never do', async () => {
    const gw = await t.start({ yaml: yaml('max_connections: 3') });
    const port = Number(new URL(gw.url).port);
    const conn = () => {
      const s = connect(port, '127.0.0.1');
      let text = '';
      let closed = false;
      s.on('data', (d) => (text += d));
      s.on('error', () => {});
      s.on('close', () => (closed = true));
      const get = async () => {
        const before = text.length;
        s.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
        await until(() => text.slice(before).includes('"ok"') || closed, 'an answer');
        return text.slice(before);
      };
      return { s, get, closed: () => closed };
    };
    // Two connections that answered a request and now sit idle (keep-alive), the first the longest.
    const a = conn();
    expect(await a.get()).toMatch(/^HTTP\/1\.1 200 /);
    const b = conn();
    expect(await b.get()).toMatch(/^HTTP\/1\.1 200 /);
    // One busy with a request its upstream holds.
    let release!: () => void;
    t.upstream.faults.push({ kind: 'hold', until: new Promise<void>((r) => (release = r)) });
    const before = t.upstream.received.length;
    const held = post(`${gw.url}/chat/completions`, gw.key, { ...CHAT, model: 'fake/gpt' });
    await until(() => t.upstream.received.length === before + 1, 'the held request at the upstream');
    try {
      // At the limit (3): a new connection closes the longest idle one (a), and is served.
      const c = conn();
      expect(await c.get()).toMatch(/^HTTP\/1\.1 200 /);
      await until(() => a.closed(), 'the longest idle connection closed');
      expect(b.closed()).toBe(false);
      // Then b; then, with the held request's connection busy and c and d idle, c.
      const d = conn();
      expect(await d.get()).toMatch(/^HTTP\/1\.1 200 /);
      await until(() => b.closed(), 'the next idle connection closed');
      const e = conn();
      expect(await e.get()).toMatch(/^HTTP\/1\.1 200 /);
      await until(() => c.closed(), 'c closed');
      expect(d.closed()).toBe(false);
      for (const x of [c, d, e]) x.s.destroy();
    } finally {
      release();
    }
    expect((await held).status).toBe(200);
  });
});
