import http from 'node:http';
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
const CONTENT = 'x'.repeat(6 * 1024 * 1024);

beforeAll(async () => {
  provider = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const text = JSON.stringify({
        id: 'chatcmpl-big', object: 'chat.completion', created: 1, model: 'gpt-upstream',
        choices: [{ index: 0, message: { role: 'assistant', content: CONTENT }, finish_reason: 'stop' }],
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
    });
  });
  await new Promise<void>((r) => provider.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(provider.address() as AddressInfo).port}/v1`;
  gw = await startTestGateway({ yaml: testConfigYaml(url) });
});

afterAll(async () => {
  await gw?.close();
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
