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

describe("a preset's cache breakpoints and the client's: at most 4 (the Messages API's limit)", () => {
  const cc = { type: 'ephemeral' };
  const tool = (name: string, cached: boolean) => ({ name, input_schema: { type: 'object' }, ...(cached ? { cache_control: cc } : {}) });
  const text = (t: string, cached: boolean) => ({ type: 'text', text: t, ...(cached ? { cache_control: cc } : {}) });
  // Three breakpoints: the first tool, then both system blocks (the order the prompt is read in: tools, system).
  const PRESET = { model: 'fake/claude', max_tokens: 9, tools: [tool('a', true), tool('b', false)], system: [text('Rules.', true), text('Context.', true)], messages: [] };
  /** Where the upstream body has `cache_control`: `tools[0]`, `system[1]`, `messages[0].content[2]`, `top`. */
  const breakpoints = (b: any) => [
    ...(b.cache_control ? ['top'] : []),
    ...(b.tools ?? []).flatMap((t: any, i: number) => (t.cache_control ? [`tools[${i}]`] : [])),
    ...(Array.isArray(b.system) ? b.system : []).flatMap((s: any, i: number) => (s.cache_control ? [`system[${i}]`] : [])),
    ...b.messages.flatMap((m: any, i: number) => (Array.isArray(m.content) ? m.content : []).flatMap((c: any, j: number) => (c.cache_control ? [`messages[${i}].content[${j}]`] : []))),
  ];
  const ask = (g: TestGateway, over: Record<string, unknown>) => post(`${g.url}/messages`, g.key, { model: '@preset/cached', messages: [{ role: 'user', content: 'hi' }], ...over });
  const own = (n: number) => [{ role: 'user', content: Array.from({ length: n }, (_, i) => text(`part ${i}`, true)) }];

  it("the client's are kept; the preset's earliest are dropped until the total is 4; the next request gets the preset whole", async () => {
    const { g } = await start();
    expect((await save(g, 'cached', PRESET)).status).toBe(200);
    expect((await ask(g, { messages: own(2) })).status).toBe(200);
    expect(breakpoints(sent())).toEqual(['system[0]', 'system[1]', 'messages[0].content[0]', 'messages[0].content[1]']);
    expect(sent().tools).toEqual([tool('a', false), tool('b', false)]);
    // Top-level `cache_control` (automatic caching) takes a breakpoint too.
    expect((await ask(g, { messages: own(2), cache_control: cc })).status).toBe(200);
    expect(breakpoints(sent())).toEqual(['top', 'system[1]', 'messages[0].content[0]', 'messages[0].content[1]']);
    // The client's own tools (or system) replace the preset's, breakpoints with them.
    expect((await ask(g, { messages: own(1), tools: [tool('mine', true)] })).status).toBe(200);
    expect(breakpoints(sent())).toEqual(['tools[0]', 'system[0]', 'system[1]', 'messages[0].content[0]']);
    // Four of its own: none of the preset's; a tool result's blocks count.
    const result = [{ role: 'user', content: [text('q', true), { type: 'tool_result', tool_use_id: 'x', content: [text('r', true)] }] }];
    expect((await ask(g, { messages: [...own(2), { role: 'assistant', content: [{ type: 'tool_use', id: 'x', name: 'a', input: {} }] }, ...result] })).status).toBe(200);
    expect(breakpoints(sent())).toEqual(['messages[0].content[0]', 'messages[0].content[1]', 'messages[2].content[0]']);
    expect(sent().messages[2].content[1].content[0].cache_control).toEqual(cc);
    // The dropping edited the request's copies only: a request without breakpoints of its own gets all three.
    expect((await ask(g, {})).status).toBe(200);
    expect(breakpoints(sent())).toEqual(['tools[0]', 'system[0]', 'system[1]']);
  });

  it('a client that alone sends more than 4 is not changed (the upstream answers it, as without a preset); the preset adds none', async () => {
    const { g } = await start();
    expect((await save(g, 'cached', PRESET)).status).toBe(200);
    const five = ['messages[0].content[0]', 'messages[0].content[1]', 'messages[0].content[2]', 'messages[0].content[3]', 'messages[0].content[4]'];
    expect((await ask(g, { messages: own(5) })).status).toBe(200);
    expect(breakpoints(sent())).toEqual(five);
    expect((await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 9, messages: own(5) })).status).toBe(200);
    expect(breakpoints(sent())).toEqual(five);
  });
});
