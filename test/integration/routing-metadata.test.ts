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
    // Only the attempt that answered is billed.
    expect((await gw.ledgerRow(res.json.id))?.provider).toBe('fake-openai');
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
