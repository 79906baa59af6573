import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { post, sseEvents, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';

let upstream: FakeUpstream;
let gw: TestGateway;

beforeAll(async () => {
  upstream = await startFakeUpstream();
  // response-healing runs after upstream, so a request may name it (plugins are gateway-only fields).
  gw = await startTestGateway({ yaml: testConfigYaml(upstream.url, '[auth, validate, upstream, response-healing]') });
});
afterAll(async () => {
  await gw.close();
  await upstream.close();
});

describe('same-dialect pass-through: chat completions → OpenAI-compatible', () => {
  it('rewrites the model, strips gateway-only fields, keeps unknown fields, hashes user', async () => {
    const body = {
      model: 'fake/gpt',
      messages: [{ role: 'user', content: 'hi' }],
      temperature: 0.5,
      user: 'alice@example.com',
      safety_identifier: 'alice@example.com',
      session_id: 'sess-1',
      provider: { allow_fallbacks: true },
      plugins: [{ id: 'response-healing', enabled: false }],
      trace: { trace_name: 't' },
      some_future_field: { nested: [1, 2] },
    };
    const res = await post(`${gw.url}/chat/completions`, gw.key, body);
    expect(res.status).toBe(200);
    const got = upstream.received.at(-1)!;
    expect(got.path).toBe('/v1/chat/completions');
    expect(got.headers.authorization).toBe('Bearer sk-upstream-openai-secret');
    expect(got.body.model).toBe('gpt-upstream');
    expect(got.body.temperature).toBe(0.5);
    expect(got.body.some_future_field).toEqual({ nested: [1, 2] });
    for (const f of ['session_id', 'provider', 'plugins', 'trace']) expect(got.body).not.toHaveProperty(f);
    expect(got.body.user).toMatch(/^[0-9a-f]{64}$/);
    expect(got.body.user).not.toContain('alice');
    // salted: not the plain sha256 of the id
    expect(got.body.user).not.toBe(createHash('sha256').update('alice@example.com').digest('hex'));
    // OpenAI's successor to `user` names the same end user: hashed alike (it went as sent).
    expect(got.body.safety_identifier).toBe(got.body.user);
  });

  it('hashes the same user to the same value (stable per gateway)', async () => {
    const send = () => post(`${gw.url}/chat/completions`, gw.key, { model: 'fake/gpt', user: 'bob', messages: [{ role: 'user', content: 'x' }] });
    await send();
    const a = upstream.received.at(-1)!.body.user;
    await send();
    expect(upstream.received.at(-1)!.body.user).toBe(a);
  });

  it('answers with the gateway id, model, provider and cost from the model pricing', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, { model: 'fake/gpt', messages: [{ role: 'user', content: 'x' }] });
    expect(res.json).toMatchObject({ object: 'chat.completion', model: 'fake/gpt', provider: 'fake-openai', system_fingerprint: 'fp_fake' });
    // 10 prompt tokens of which 4 cached: 6 × $1 + 4 × $0.5 + 5 × $2 per 1M
    expect(res.json.usage.cost).toBeCloseTo((6 * 1 + 4 * 0.5 + 5 * 2) / 1e6, 12);
    expect(res.json.usage.is_byok).toBe(false);
    const row = await gw.ledgerRow(res.json.id);
    expect(row).toMatchObject({ model: 'fake/gpt', provider: 'fake-openai', upstreamModel: 'gpt-upstream', promptTokens: 10, completionTokens: 5, cachedTokens: 4, status: 'completed', keyId: gw.keyRecord.id });
    expect(row!.costUsd).toBeCloseTo(res.json.usage.cost, 12);
  });

  it('streams chunks stamped with the generation id, and bills the stream', async () => {
    const res = await post(`${gw.url}/chat/completions`, gw.key, { model: 'fake/gpt', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'x' }] });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = sseEvents(res.text);
    expect(events.at(-1)!.data).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data));
    const ids = new Set(chunks.map((c) => c.id));
    expect(ids.size).toBe(1);
    const id = [...ids][0];
    expect(id).toMatch(/^gen-/);
    expect(chunks.every((c) => c.model === 'fake/gpt' && c.provider === 'fake-openai')).toBe(true);
    const usage = chunks.at(-1).usage;
    expect(usage.cost).toBeGreaterThan(0);
    const row = await gw.ledgerRow(id);
    expect(row?.costUsd).toBeCloseTo(usage.cost, 12);
  });
});

describe('same-dialect pass-through: messages → Anthropic', () => {
  it("leaves out thinking blocks without a signature (another style's reasoning, as translated answers give it), which the Messages API refuses; a tool loop that lost its thinking is sent with thinking off", async () => {
    const signed = { type: 'thinking', thinking: 'signed thoughts', signature: 'EuYBCkQYAiJA' };
    const history = [
      { role: 'user', content: 'first' },
      // A turn a chat-style provider answered (translated: its reasoning with an empty signature).
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'from gpt', signature: '' }, { type: 'text', text: 'answer one' }] },
      { role: 'user', content: 'second' },
      { role: 'assistant', content: [signed, { type: 'redacted_thinking', data: 'abc' }, { type: 'text', text: 'answer two' }] },
      // A turn of thinking alone keeps it (its content may not be empty).
      { role: 'user', content: 'third' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'only this' }] },
      { role: 'user', content: 'fourth' },
    ];
    const body = { model: 'fake/claude', max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: history };
    expect((await post(`${gw.url}/messages`, gw.key, body)).status).toBe(200);
    const sent = upstream.received.at(-1)!.body;
    expect(sent.messages[1].content).toEqual([{ type: 'text', text: 'answer one' }]);
    expect(sent.messages[3].content).toEqual(history[3].content);
    expect(sent.messages[5].content).toEqual(history[5].content);
    expect(sent.messages.filter((_: unknown, i: number) => ![1].includes(i))).toEqual(history.filter((_, i) => i !== 1));
    expect(sent.thinking).toEqual({ type: 'enabled', budget_tokens: 1024 }); // not a tool loop
    // The last assistant turn calls a tool and its thinking was another style's: thinking goes off for the call.
    const loop = [
      { role: 'user', content: 'weather?' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'call it', signature: '' }, { type: 'tool_use', id: 'toolu_1', name: 'w', input: {} }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] },
    ];
    expect((await post(`${gw.url}/messages`, gw.key, { ...body, messages: loop, tools: [{ name: 'w', input_schema: { type: 'object' } }] })).status).toBe(200);
    const looped = upstream.received.at(-1)!.body;
    expect(looped.messages[1].content).toEqual([{ type: 'tool_use', id: 'toolu_1', name: 'w', input: {} }]);
    expect(looped.thinking).toEqual({ type: 'disabled' });
    // The loop's next round: the turn the provider answered with thinking off has none, so thinking stays off.
    const round2 = [
      ...loop,
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_2', name: 'w', input: { again: true } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_2', content: 'still sunny' }] },
    ];
    expect((await post(`${gw.url}/messages`, gw.key, { ...body, messages: round2, tools: [{ name: 'w', input_schema: { type: 'object' } }] })).status).toBe(200);
    expect(upstream.received.at(-1)!.body.thinking).toEqual({ type: 'disabled' });
  });

  it('sends x-api-key and anthropic-version, forwards anthropic-beta, hashes metadata.user_id, drops user', async () => {
    const body = {
      model: 'fake/claude',
      max_tokens: 32,
      messages: [{ role: 'user', content: 'hi' }],
      metadata: { user_id: 'carol' },
      user: 'carol',
      fallbacks: [{ model: 'sim/chat' }],
      thinking: { type: 'enabled', budget_tokens: 1024 },
      unknown_anthropic_field: true,
    };
    const res = await post(`${gw.url}/messages`, gw.key, body, { 'anthropic-beta': 'some-beta-2025' });
    expect(res.status).toBe(200);
    const got = upstream.received.at(-1)!;
    expect(got.path).toBe('/v1/messages');
    expect(got.headers['x-api-key']).toBe('sk-upstream-anthropic-secret');
    expect(got.headers['anthropic-version']).toBe('2023-06-01');
    expect(got.headers['anthropic-beta']).toBe('some-beta-2025');
    expect(got.headers.authorization).toBeUndefined();
    expect(got.body.model).toBe('claude-upstream');
    expect(got.body.thinking).toEqual({ type: 'enabled', budget_tokens: 1024 });
    expect(got.body.unknown_anthropic_field).toBe(true);
    expect(got.body).not.toHaveProperty('user');
    expect(got.body).not.toHaveProperty('fallbacks');
    expect(got.body.metadata.user_id).toMatch(/^[0-9a-f]{64}$/);
    expect(res.json).toMatchObject({ type: 'message', model: 'fake/claude', provider: 'fake-anthropic' });
    // input 6 + cache read 4 (at 0.3) + output 5 (at 15)
    expect(res.json.usage.cost).toBeCloseTo((6 * 3 + 4 * 0.3 + 5 * 15) / 1e6, 12);
  });

  it("joins the client's anthropic-beta to the one the operator's provider headers set, instead of replacing it", async () => {
    const yaml = testConfigYaml(upstream.url).replace('api_key: sk-upstream-anthropic-secret }', 'api_key: sk-upstream-anthropic-secret, headers: { anthropic-beta: context-1m-2025-08-07 } }');
    const g = await startTestGateway({ yaml });
    try {
      const ask = async (headers: Record<string, string>) => {
        expect((await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }, headers)).status).toBe(200);
        return upstream.received.at(-1)!.headers['anthropic-beta'];
      };
      expect(await ask({})).toBe('context-1m-2025-08-07');
      expect(await ask({ 'anthropic-beta': 'mcp-client-2025-04-04' })).toBe('context-1m-2025-08-07,mcp-client-2025-04-04');
      expect(await ask({ 'anthropic-beta': 'mcp-client-2025-04-04, context-1m-2025-08-07' })).toBe('context-1m-2025-08-07,mcp-client-2025-04-04');
    } finally {
      await g.close();
    }
  });

  it('a request without max_tokens (optional here, required by the Messages API) gets the model default, above a thinking budget; one that sets it keeps it', async () => {
    const ask = async (extra: Record<string, unknown>) => {
      const res = await post(`${gw.url}/messages`, gw.key, { model: 'fake/claude', messages: [{ role: 'user', content: 'hi' }], ...extra });
      expect(res.status).toBe(200);
      return upstream.received.at(-1)!.body;
    };
    expect((await ask({})).max_tokens).toBe(4096);
    expect((await ask({ stream: true })).max_tokens).toBe(4096);
    expect((await ask({ max_tokens: 77 })).max_tokens).toBe(77);
    const thinking = await ask({ thinking: { type: 'enabled', budget_tokens: 8000 } });
    expect(thinking.max_tokens).toBe(8000 + 4096);
    expect(thinking.thinking).toEqual({ type: 'enabled', budget_tokens: 8000 });
  });

  it('streams the Anthropic event sequence with cost in message_delta and [DONE] at the end', async () => {
    const res = await post(`${gw.url}/messages`, gw.key, { model: 'fake/claude', max_tokens: 32, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const events = sseEvents(res.text);
    expect(events.map((e) => e.event ?? e.data)).toEqual([
      'message_start', 'content_block_start', 'ping',
      'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_delta',
      'content_block_stop', 'message_delta', 'message_stop', '[DONE]',
    ]);
    const start = JSON.parse(events[0].data);
    expect(start.message.id).toMatch(/^gen-/);
    const delta = JSON.parse(events[9].data);
    expect(delta.usage.cost).toBeCloseTo((6 * 3 + 4 * 0.3 + 5 * 15) / 1e6, 12);
    const row = await gw.ledgerRow(start.message.id);
    expect(row).toMatchObject({ promptTokens: 10, completionTokens: 5, cachedTokens: 4, status: 'completed' });
  });

  it("keeps message_start's input count when message_delta sends a zero for it (sglang does; the counts are cumulative), for a messages and a chat client", async () => {
    const ev = (type: string, o: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...o })}\n\n`;
    const text = [
      ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'm', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 123, output_tokens: 0 } } }),
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hi.' } }),
      ev('content_block_stop', { index: 0 }),
      ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { input_tokens: 0, output_tokens: 45 } }),
      ev('message_stop', {}),
    ].join('');
    upstream.faults.push({ kind: 'raw-stream', text });
    const res = await post(`${gw.url}/messages`, gw.key, { model: 'fake/claude', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const events = sseEvents(res.text);
    const id = JSON.parse(events[0].data).message.id;
    const delta = JSON.parse(events.find((e) => e.event === 'message_delta')!.data);
    expect(delta.usage.cost).toBeCloseTo((123 * 3 + 45 * 15) / 1e6, 12);
    expect(await gw.ledgerRow(id)).toMatchObject({ promptTokens: 123, completionTokens: 45, status: 'completed' });
    upstream.faults.push({ kind: 'raw-stream', text });
    const chat = await post(`${gw.url}/chat/completions`, gw.key, { model: 'fake/claude', max_tokens: 100, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hi' }] });
    const usage = sseEvents(chat.text).map((e) => (e.data === '[DONE]' ? null : JSON.parse(e.data))).find((c) => c?.usage)!.usage;
    expect(usage).toMatchObject({ prompt_tokens: 123, completion_tokens: 45 });
  });

  it('bills the tokens of a compaction iteration, which the Messages API leaves out of the top-level usage, JSON and streamed', async () => {
    const usage = {
      input_tokens: 20, output_tokens: 10, cache_read_input_tokens: 0, cache_creation_input_tokens: 0,
      iterations: [
        { type: 'compaction', input_tokens: 300, output_tokens: 40, cache_read_input_tokens: 100, cache_creation_input_tokens: 0 },
        { type: 'message', input_tokens: 20, output_tokens: 10, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 },
      ],
    };
    const content = [{ type: 'compaction', content: 'Summary.' }, { type: 'text', text: 'Hi.' }];
    const cost = (320 * 3 + 100 * 0.3 + 50 * 15) / 1e6;
    const billed = { promptTokens: 420, cachedTokens: 100, completionTokens: 50, status: 'completed' };
    const body = { model: 'fake/claude', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }], context_management: { edits: [{ type: 'compact_20260112' }] } };
    upstream.faults.push({ kind: 'status', status: 200, body: { id: 'msg_1', type: 'message', role: 'assistant', model: 'm', content, stop_reason: 'end_turn', stop_sequence: null, usage } });
    const res = await post(`${gw.url}/messages`, gw.key, body);
    expect(res.json.usage).toMatchObject({ input_tokens: 20, output_tokens: 10 }); // the provider's figures, as sent
    expect(res.json.usage.cost).toBeCloseTo(cost, 12);
    expect(await gw.ledgerRow(res.json.id)).toMatchObject(billed);
    const ev = (type: string, o: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...o })}\n\n`;
    const { iterations: _, ...startUsage } = usage;
    upstream.faults.push({
      kind: 'raw-stream',
      text: [
        ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'm', content: [], stop_reason: null, stop_sequence: null, usage: { ...startUsage, output_tokens: 1 } } }),
        ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
        ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hi.' } }),
        ev('content_block_stop', { index: 0 }),
        ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage }),
        ev('message_stop', {}),
      ].join(''),
    });
    const streamed = await post(`${gw.url}/messages`, gw.key, { ...body, stream: true });
    const events = sseEvents(streamed.text);
    const delta = JSON.parse(events.find((e) => e.event === 'message_delta')!.data);
    expect(delta.usage.cost).toBeCloseTo(cost, 12);
    expect(await gw.ledgerRow(JSON.parse(events[0].data).message.id)).toMatchObject(billed);
  });

  it('bills what was delivered when the provider dies mid-stream (status failed)', async () => {
    upstream.faults.push({ kind: 'midstream' });
    const res = await post(`${gw.url}/messages`, gw.key, { model: 'fake/claude', max_tokens: 32, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const events = sseEvents(res.text);
    const start = JSON.parse(events[0].data);
    const error = events.find((e) => e.event === 'error')!;
    expect(JSON.parse(error.data)).toMatchObject({ type: 'error', error: { type: 'api_error', error_type: 'provider_unavailable' } });
    const row = await gw.ledgerRow(start.message.id);
    expect(row?.status).toBe('failed');
  });
});

describe('GET /key', () => {
  it('reports every field of spec 2.1 with usage summed from the ledger', async () => {
    const k = await gw.createKey({ limitUsd: 1, limitReset: 'monthly' });
    await post(`${gw.url}/chat/completions`, k.secret, { model: 'fake/gpt', messages: [{ role: 'user', content: 'x' }] });
    const res = await fetch(`${gw.url}/key`, { headers: { authorization: `Bearer ${k.secret}` } });
    const { data } = (await res.json()) as any;
    const cost = (6 * 1 + 4 * 0.5 + 5 * 2) / 1e6;
    for (const f of [
      'allowed_data_regions', 'budgets', 'byok_usage', 'byok_usage_daily', 'byok_usage_weekly', 'byok_usage_monthly', 'creator_user_id',
      'expires_at', 'free_model_daily_requests', 'include_byok_in_limit', 'is_free_tier', 'is_management_key', 'is_provisioning_key',
      'label', 'limit', 'limit_remaining', 'limit_reset', 'organization_id', 'workspace_id', 'rate_limit', 'usage', 'usage_daily',
      'usage_weekly', 'usage_monthly',
    ]) expect(data).toHaveProperty(f);
    expect(data.usage).toBeCloseTo(cost, 12);
    expect(data.usage_daily).toBeCloseTo(cost, 12);
    expect(data.limit).toBe(1);
    expect(data.limit_reset).toBe('monthly');
    expect(data.limit_remaining).toBeCloseTo(1 - cost, 12);
    expect(data.label).toBe(`${k.secret.slice(0, 9)}...${k.secret.slice(-4)}`);
    expect(JSON.stringify(data)).not.toContain(k.secret);
    expect(data.budgets).toHaveLength(1);
    expect(data.effective_budget).toMatchObject({ scope: 'key_limit', limit_usd: 1, budget_id: null, reset_interval: 'monthly' });
    expect(data.effective_budget.resets_at).toMatch(/^\d{4}-\d{2}-01T00:00:00.000Z$/);
    expect(data.is_management_key).toBe(false);
  });

  it('counts free-model requests of today', async () => {
    const yaml = testConfigYaml(upstream.url).replace('models:\n', 'models:\n  - { id: sim/free:free, endpoints: [{ provider: local, upstream_model: sim-free }] }\n');
    const g = await startTestGateway({ yaml });
    try {
      await post(`${g.url}/chat/completions`, g.key, { model: 'sim/free:free', messages: [{ role: 'user', content: 'x' }] });
      await post(`${g.url}/chat/completions`, g.key, { model: 'sim/chat', messages: [{ role: 'user', content: 'x' }] });
      const { data } = (await (await fetch(`${g.url}/key`, { headers: { authorization: `Bearer ${g.key}` } })).json()) as any;
      expect(data.free_model_daily_requests).toEqual({ limit: 50, remaining: 49, used: 1 });
      expect(data.budgets).toEqual([]);
      expect(data).not.toHaveProperty('effective_budget');
    } finally {
      await g.close();
    }
  });
});
