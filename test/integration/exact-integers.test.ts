import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';

/**
 * Integers past 2^53 in a request body reach the provider with the client's digits (src/routes/exact-integers.ts):
 * JSON.parse holds them as the nearest double, and serializing that double again sent other digits.
 */
let upstream: FakeUpstream;
let gw: TestGateway;

beforeAll(async () => {
  upstream = await startFakeUpstream();
  gw = await startTestGateway({ yaml: testConfigYaml(upstream.url, '[auth, validate, rate-limit, upstream]') });
});
afterAll(async () => {
  await gw.close();
  await upstream.close();
});

const tool = { type: 'function', function: { name: 'pick', parameters: { type: 'object', properties: { id: { type: 'integer', maximum: '@MAX', enum: ['@ENUM', 7] } } } } };
/** JSON text with big integers put where the `@…` placeholders are (JSON.stringify cannot write them). */
const withBig = (value: unknown) => JSON.stringify(value).replace('"@SEED"', '9223372036854775807').replace('"@MAX"', '18446744073709551615').replace('"@ENUM"', '-12345678901234567891');

describe('integers beyond 2^53 keep their digits on the way upstream', () => {
  it('a small chat body: seed and a tool schema', async () => {
    const text = withBig({ model: 'fake/gpt', messages: [{ role: 'user', content: 'hi' }], seed: '@SEED', tools: [tool] });
    expect(text.length).toBeLessThan(512);
    const res = await post(`${gw.url}/chat/completions`, gw.key, text);
    expect(res.status).toBe(200);
    const raw = upstream.received.at(-1)!.raw;
    expect(raw).toContain('"seed":9223372036854775807');
    expect(raw).toContain('"maximum":18446744073709551615');
    expect(raw).toContain('"enum":[-12345678901234567891,7]');
  });

  it('a large chat body (its messages sent as the client bytes): the seed too', async () => {
    const text = withBig({ model: 'fake/gpt', messages: [{ role: 'user', content: 'lorem ipsum '.repeat(100) }], seed: '@SEED', tools: [tool] });
    const res = await post(`${gw.url}/chat/completions`, gw.key, text);
    expect(res.status).toBe(200);
    const raw = upstream.received.at(-1)!.raw;
    expect(raw).toContain('"seed":9223372036854775807');
    expect(raw).toContain('"maximum":18446744073709551615');
  });

  it('translated (chat client, messages provider): the tool schema keeps its digits', async () => {
    const text = withBig({ model: 'fake/claude', messages: [{ role: 'user', content: 'hi' }], tools: [tool] });
    const res = await post(`${gw.url}/chat/completions`, gw.key, text);
    expect(res.status).toBe(200);
    const got = upstream.received.at(-1)!;
    expect(got.path).toContain('/messages');
    expect(got.raw).toContain('"maximum":18446744073709551615');
    expect(got.raw).toContain('"enum":[-12345678901234567891,7]');
  });

  it('a messages body: a big integer in metadata', async () => {
    const text = JSON.stringify({ model: 'fake/claude', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], metadata: { user_id: 'u1', trace: '@SEED' } }).replace('"@SEED"', '9223372036854775807');
    const res = await post(`${gw.url}/messages`, gw.key, text);
    expect(res.status).toBe(200);
    expect(upstream.received.at(-1)!.raw).toContain('"trace":9223372036854775807');
  });

  it('a number the gateway rewrites is sent as rewritten; a long decimal fraction is left to JSON', async () => {
    const text = '{"model":"fake/gpt","messages":[{"role":"user","content":"9223372036854775807"}],"temperature":0.12345678901234567890}';
    const res = await post(`${gw.url}/chat/completions`, gw.key, text);
    expect(res.status).toBe(200);
    const got = upstream.received.at(-1)!;
    expect(got.body.messages[0].content).toBe('9223372036854775807');
    expect(got.body.temperature).toBe(0.12345678901234568);
  });
});
