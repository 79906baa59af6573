import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';

let upstream: FakeUpstream;
let gw: TestGateway;
beforeAll(async () => {
  upstream = await startFakeUpstream();
  gw = await startTestGateway({ yaml: testConfigYaml(upstream.url) });
});
afterAll(async () => {
  await gw.close();
  await upstream.close();
});

const ask = (body: object, headers: Record<string, string> = {}) =>
  post(`${gw.url}/chat/completions`, gw.key, { messages: [{ role: 'user', content: 'hi' }], ...body }, headers);

describe('X-Gateway-Metadata', () => {
  it('is absent unless asked for', async () => {
    const res = await ask({ model: 'fake/gpt' });
    expect(res.json).not.toHaveProperty('gateway_metadata');
  });

  it('shows the candidates, the attempt history and who answered after a failover', async () => {
    const res = await ask({ model: 'fake/failover' }, { 'x-gateway-metadata': 'enabled' });
    expect(res.status).toBe(200);
    const meta = res.json.gateway_metadata;
    expect(meta).toMatchObject({
      requested: 'fake/failover',
      strategy: 'ordered',
      region: 'global',
      attempt: 2,
      is_byok: false,
      endpoints: {
        total: 2,
        available: [
          { provider: 'dead-openai', model: 'fake/failover', selected: false },
          { provider: 'fake-openai', model: 'fake/failover', selected: true },
        ],
      },
    });
    expect(meta.attempts).toEqual([
      { attempt: 1, provider: 'dead-openai', model: 'fake/failover', outcome: 'error', error_type: 'provider_unavailable', status: 502 },
      { attempt: 2, provider: 'fake-openai', model: 'fake/failover', outcome: 'success' },
    ]);
    expect(meta.generation_time).toBeGreaterThanOrEqual(0);
    expect(typeof meta.summary).toBe('string');
    expect(meta.summary).toMatch(/^served by \S+ \(\S+\) on attempt \d+ \(\d+ candidate endpoint\(s\); an endpoint may be tried twice\)$/);
    // Only the attempt that answered is billed.
    expect((await gw.ledgerRow(res.json.id))?.provider).toBe('fake-openai');
  });

  it('rides in streams too: a chat chunk with no choices first, messages in message_start', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, { model: 'fake/failover', stream: true, messages: [{ role: 'user', content: 'hi' }] }, { 'x-gateway-metadata': 'enabled' });
    const first = JSON.parse(res.text.split('\n\n')[0].replace(/^data: /, ''));
    expect(first.choices).toEqual([]);
    expect(first.gateway_metadata).toMatchObject({ requested: 'fake/failover', attempt: 2 });
    const m = await post(`${gw.url}/messages`, gw.key, { model: 'fake/claude', max_tokens: 8, stream: true, messages: [{ role: 'user', content: 'x' }] }, { 'x-gateway-metadata': 'enabled' });
    const start = JSON.parse(m.text.split('\n\n')[0].split('\n')[1].replace(/^data: /, ''));
    expect(start.message.gateway_metadata).toMatchObject({ requested: 'fake/claude', endpoints: { total: 1 } });
    const plain = await post(`${gw.url}/chat/completions`, gw.key, { model: 'fake/gpt', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    expect(plain.text).not.toContain('gateway_metadata');
  });

  it('accepts the legacy header and adds the metadata to errors after routing', async () => {
    upstream.faults.push({ kind: 'status', status: 503 });
    const res = await post(`${gw.url}/messages`, gw.key, { model: 'fake/claude', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }, { 'x-gateway-experimental-metadata': 'enabled' });
    expect(res.status).toBe(529);
    expect(res.json.request_id).toMatch(/^gen-/);
    expect(res.json.gateway_metadata).toMatchObject({ requested: 'fake/claude', attempt: 1, endpoints: { total: 1 } });
    expect(res.json.gateway_metadata.attempts[0]).toMatchObject({ outcome: 'error', error_type: 'provider_overloaded' });
  });
});
