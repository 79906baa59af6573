import { describe, expect, it } from 'vitest';
import { post, testConfigYaml, type TestGateway } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

/**
 * A preset's designated version is cached across requests (src/presets/lookup.ts): what one request's stages
 * do to the values it got from the preset must not reach the next request through that cache.
 */

const t = perTestGateways();

/** A `redacting` key (by name) has a guardrail that redacts `secret`; the gateway's own key has none. */
async function start(): Promise<{ g: TestGateway; redacting: string }> {
  const guardrails = 'guardrails:\n  - { id: r, action: redact, keywords: [secret] }\n';
  const assign = 'workspaces:\n  - name: default\n    keys: [{ key: redacting, guardrail: r }]\n';
  const g = await t.start({ yaml: `${testConfigYaml(t.upstream.url, '[auth, validate, guardrail, upstream]')}${guardrails}${assign}` });
  return { g, redacting: (await g.createKey({ name: 'redacting' })).secret };
}

const save = (g: TestGateway, slug: string, body: unknown) => post(`${g.url}/presets/${slug}/messages`, g.managementKey, body);
const sent = () => t.upstream.received.at(-1)!.body;

describe('the cached preset version', () => {
  const format = { type: 'json_schema', schema: { type: 'object', description: 'the secret plan', properties: {} } };

  it("a guardrail's redaction in one request's answer schema does not reach the next request through the preset (messages)", async () => {
    const { g, redacting } = await start();
    expect((await save(g, 'shaped', { model: 'fake/claude', max_tokens: 9, output_config: { format }, messages: [] })).status).toBe(200);
    const body = { model: '@preset/shaped', messages: [{ role: 'user', content: 'hi' }] };
    expect((await post(`${g.url}/messages`, redacting, body)).status).toBe(200);
    expect(sent().output_config.format.schema.description).toBe('the [REDACTED:keyword] plan');
    // Another key, without the guardrail: the preset as saved.
    expect((await post(`${g.url}/messages`, g.key, body)).status).toBe(200);
    expect(sent().output_config.format.schema.description).toBe('the secret plan');
  });

  it('… nor on /chat/completions, where the preset arrives translated (its schema under response_format)', async () => {
    const { g, redacting } = await start();
    expect((await save(g, 'shaped', { model: 'fake/gpt', max_tokens: 9, output_config: { format }, messages: [] })).status).toBe(200);
    const body = { model: '@preset/shaped', messages: [{ role: 'user', content: 'hi' }] };
    expect((await post(`${g.url}/chat/completions`, redacting, body)).status).toBe(200);
    expect(sent().response_format.json_schema.schema.description).toBe('the [REDACTED:keyword] plan');
    expect((await post(`${g.url}/chat/completions`, g.key, body)).status).toBe(200);
    expect(sent().response_format.json_schema.schema.description).toBe('the secret plan');
  });
});
