import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, TEXT, type FakeUpstream, type Received } from '../fixtures/fake-upstream';
import { post, sseEvents, startTestGateway, type TestGateway } from '../fixtures/gateway';
import { startTelemetry, type Telemetry } from '../../src/telemetry/otel';

/**
 * An endpoint's `supported_parameters` (README "Routing"): what it does not list is not sent to it, named in
 * its own API style; `provider.require_parameters` compares a request of the other style through the names
 * translation gives. One fake upstream serves an OpenAI-style provider (po) and an Anthropic-style one (pa).
 */
function yaml(url: string): string {
  return `
server: { port: 0, watch_config: false }
storage: { driver: sqlite, path: ':memory:' }
providers:
  - { id: po, kind: openai, base_url: '${url}' }
  - { id: pa, kind: anthropic, base_url: '${url}' }
models:
  - id: p/strict
    endpoints:
      - { provider: po, upstream_model: up-strict, pricing: { prompt: 1, completion: 1 }, supported_parameters: [temperature, top_p, stop, max_completion_tokens, tools, tool_choice, response_format] }
  - id: p/open
    endpoints: [{ provider: po, upstream_model: up-open, pricing: { prompt: 1, completion: 1 } }]
  - id: p/legacy
    endpoints: [{ provider: po, upstream_model: up-legacy, pricing: { prompt: 1, completion: 1 }, supported_parameters: [max_tokens, temperature] }]
  - id: p/claude-strict
    endpoints: [{ provider: pa, upstream_model: cl-strict, pricing: { prompt: 1, completion: 1 }, supported_parameters: [temperature, stop_sequences] }]
  - id: p/fallback
    endpoints:
      - { provider: po, upstream_model: up-fb-strict, pricing: { prompt: 1, completion: 1 }, supported_parameters: [temperature] }
      - { provider: po, upstream_model: up-fb-open, pricing: { prompt: 2, completion: 2 } }
  - id: p/require
    endpoints:
      - { provider: po, upstream_model: up-req-none, pricing: { prompt: 1, completion: 1 }, supported_parameters: [temperature, max_completion_tokens] }
      - { provider: po, upstream_model: up-req-stop, pricing: { prompt: 2, completion: 2 }, supported_parameters: [stop, max_completion_tokens] }
  - id: p/require-none
    endpoints: [{ provider: po, upstream_model: up-req-only, pricing: { prompt: 1, completion: 1 }, supported_parameters: [temperature, max_completion_tokens] }]
  - id: p/effort
    endpoints: [{ provider: po, upstream_model: up-effort, pricing: { prompt: 1, completion: 1 }, supported_parameters: [reasoning_effort, max_completion_tokens] }]
  - id: p/reasoning
    endpoints: [{ provider: po, upstream_model: up-reasoning, pricing: { prompt: 1, completion: 1 }, supported_parameters: [reasoning] }]
pipelines:
  default: [auth, validate, upstream]
`;
}

const exporter = new InMemorySpanExporter();
let telemetry: Telemetry;
let upstream: FakeUpstream;
let gw: TestGateway;
beforeAll(async () => {
  telemetry = startTelemetry({ exporter: 'none', service_name: 't', max_queue: 4096 }, [new SimpleSpanProcessor(exporter)]);
  upstream = await startFakeUpstream();
  gw = await startTestGateway({ yaml: yaml(upstream.url), tracer: telemetry.tracer });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
  await telemetry?.shutdown();
});
afterEach(() => {
  upstream.scripts.clear();
});

const chat = (body: object, headers: Record<string, string> = {}) => post(`${gw.url}/chat/completions`, gw.key, body, headers);
const messages = (body: object, headers: Record<string, string> = {}) => post(`${gw.url}/messages`, gw.key, body, headers);
/** What the fake received since `from`. */
const since = (from: number): Received[] => upstream.received.slice(from);

/** The attempt spans (`gateway.upstream <provider>`) that called `upstreamModel`, once exported. */
async function attemptSpans(upstreamModel: string, count = 1): Promise<ReadableSpan[]> {
  for (let i = 0; i < 250; i++) {
    const found = exporter.getFinishedSpans().filter((s) => s.attributes['gateway.upstream_model'] === upstreamModel);
    if (found.length >= count) return found;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`no attempt span for ${upstreamModel}`);
}

/** A chat request with OpenRouter-style sampling parameters the official OpenAI API refuses. */
const OPENROUTER_STYLE = {
  messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hi' }],
  temperature: 0.4,
  top_k: 40,
  repetition_penalty: 1.1,
  min_p: 0.05,
  top_a: 0.2,
  stop: ['END'],
  max_completion_tokens: 64,
};

describe('an endpoint is sent only the parameters it lists', () => {
  it('leaves a chat client\'s top_k (and min_p, top_a, repetition_penalty) out of a same-style call; everything else as sent', async () => {
    const n = upstream.received.length;
    const res = await chat({ model: 'p/strict', ...OPENROUTER_STYLE });
    expect(res.status).toBe(200);
    const [got] = since(n);
    expect(got.body).not.toHaveProperty('top_k');
    const { top_k: _k, repetition_penalty: _r, min_p: _m, top_a: _a, ...kept } = OPENROUTER_STYLE;
    // The rest goes as the client sent it, in its order (`model` rewritten in place).
    expect(got.raw).toBe(JSON.stringify({ model: 'up-strict', ...kept }));
    // Seen by the operator on the attempt's span.
    const [span] = await attemptSpans('up-strict');
    expect(span.attributes['gateway.dropped_parameters']).toEqual(['top_k', 'repetition_penalty', 'min_p', 'top_a']);
  });

  it('sends everything, byte for byte, to an endpoint that lists nothing', async () => {
    const n = upstream.received.length;
    const res = await chat({ model: 'p/open', ...OPENROUTER_STYLE });
    expect(res.status).toBe(200);
    expect(since(n)[0].raw).toBe(JSON.stringify({ model: 'up-open', ...OPENROUTER_STYLE }));
    const [span] = await attemptSpans('up-open');
    expect(span.attributes).not.toHaveProperty('gateway.dropped_parameters');
  });

  it('leaves a messages client\'s top_k out of a translated call to a chat endpoint listing `stop`, and keeps its stop sequences there', async () => {
    const n = upstream.received.length;
    const res = await messages({ model: 'p/strict', max_tokens: 50, temperature: 0.3, top_k: 5, stop_sequences: ['END'], messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    expect(res.json.content[0].text).toBe(TEXT.join(''));
    const [got] = since(n);
    expect(got.path).toBe('/v1/chat/completions');
    expect(got.body).not.toHaveProperty('top_k');
    expect(got.body).toMatchObject({ model: 'up-strict', stop: ['END'], temperature: 0.3, max_completion_tokens: 50 });
  });

  it('leaves a chat client\'s top_k out of a translated call to a messages endpoint, which always gets max_tokens', async () => {
    const n = upstream.received.length;
    const res = await chat({ model: 'p/claude-strict', max_tokens: 30, temperature: 0.3, top_k: 5, stop: ['END'], messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    const [got] = since(n);
    expect(got.path).toBe('/v1/messages');
    expect(got.body).not.toHaveProperty('top_k');
    expect(got.body).toMatchObject({ model: 'cl-strict', max_tokens: 30, temperature: 0.3, stop_sequences: ['END'] });
  });

  it('keeps the tools a chat history calls, declared for a messages endpoint that does not list `tools` (its history is refused without them), with tool_choice none', async () => {
    const call = { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } };
    const history = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: 'call_1', content: '18 C' },
      { role: 'user', content: 'Thanks; answer in words.' },
    ];
    exporter.reset();
    const n = upstream.received.length;
    const res = await chat({ model: 'p/claude-strict', max_tokens: 30, temperature: 0.3, top_k: 5, messages: history });
    expect(res.status).toBe(200);
    const [got] = since(n);
    expect(got.path).toBe('/v1/messages');
    expect(got.body.tools).toEqual([{ name: 'get_weather', input_schema: { type: 'object' } }]);
    expect(got.body.tool_choice).toEqual({ type: 'none' });
    expect(got.body).not.toHaveProperty('top_k');
    // Not named dropped: only top_k was.
    const [span] = await attemptSpans('cl-strict');
    expect(span.attributes['gateway.dropped_parameters']).toEqual(['top_k']);
    // A request that offers tools the model may call still has them left out there (they would shape the answer).
    const m = upstream.received.length;
    const offered = await chat({ model: 'p/claude-strict', max_tokens: 30, tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }], messages: [{ role: 'user', content: 'hi' }] });
    expect(offered.status).toBe(200);
    expect(since(m)[0].body).not.toHaveProperty('tools');
  });

  it('streams: the stream goes upstream (with its usage request) without top_k, and answers in full', async () => {
    const n = upstream.received.length;
    const res = await chat({ model: 'p/strict', stream: true, top_k: 3, temperature: 0.2, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    const events = sseEvents(res.text);
    expect(events.at(-1)!.data).toBe('[DONE]');
    const text = events.slice(0, -1).map((e) => JSON.parse(e.data).choices?.[0]?.delta?.content ?? '').join('');
    expect(text).toBe(TEXT.join(''));
    const [got] = since(n);
    expect(got.body).not.toHaveProperty('top_k');
    expect(got.body).toMatchObject({ stream: true, stream_options: { include_usage: true }, temperature: 0.2 });
  });

  it('a messages stream translated for a chat endpoint goes without top_k too', async () => {
    const n = upstream.received.length;
    const res = await messages({ model: 'p/strict', stream: true, max_tokens: 20, top_k: 3, stop_sequences: ['END'], messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(200);
    expect(sseEvents(res.text).some((e) => e.event === 'message_stop')).toBe(true);
    const [got] = since(n);
    expect(got.body).not.toHaveProperty('top_k');
    expect(got.body).toMatchObject({ stream: true, stop: ['END'], max_completion_tokens: 20 });
  });

  it('sends the output limit under the one spelling a chat endpoint lists', async () => {
    let n = upstream.received.length;
    expect((await chat({ model: 'p/legacy', max_completion_tokens: 77, messages: [{ role: 'user', content: 'hi' }] })).status).toBe(200);
    let [got] = since(n);
    expect(got.body.max_tokens).toBe(77);
    expect(got.body).not.toHaveProperty('max_completion_tokens');
    // A messages client's limit, which translation sends as max_completion_tokens, too.
    n = upstream.received.length;
    expect((await messages({ model: 'p/legacy', max_tokens: 55, messages: [{ role: 'user', content: 'hi' }] })).status).toBe(200);
    [got] = since(n);
    expect(got.body.max_tokens).toBe(55);
    expect(got.body).not.toHaveProperty('max_completion_tokens');
  });
});

describe('each attempt gets its own body', () => {
  it('after the endpoint that lists no top_k fails (500, retried once), the next one, which lists nothing, gets top_k', async () => {
    upstream.scripts.set('up-fb-strict', [{ kind: 'status', status: 500 }, { kind: 'status', status: 500 }]);
    const n = upstream.received.length;
    const res = await chat({ model: 'p/fallback', temperature: 0.1, top_k: 7, messages: [{ role: 'user', content: 'hi' }] }, { 'x-gateway-metadata': 'enabled' });
    expect(res.status).toBe(200);
    expect(res.json.provider).toBe('po');
    const got = since(n);
    expect(got.map((r) => r.body.model)).toEqual(['up-fb-strict', 'up-fb-strict', 'up-fb-open']);
    expect(got.map((r) => r.body.top_k)).toEqual([undefined, undefined, 7]);
    expect(got.every((r) => r.body.temperature === 0.1)).toBe(true);
    // The routing metadata the caller opted into names what each attempt went without.
    const attempts = res.json.gateway_metadata.attempts;
    expect(attempts.map((a: any) => a.dropped_parameters)).toEqual([['top_k'], ['top_k'], undefined]);
  });
});

describe('provider.require_parameters compares names across the API styles', () => {
  it('keeps a chat endpoint listing `stop` for a messages request with stop_sequences, and drops one that lists neither', async () => {
    const n = upstream.received.length;
    const body = { max_tokens: 40, stop_sequences: ['END'], provider: { require_parameters: true }, messages: [{ role: 'user', content: 'hi' }] };
    const res = await messages({ model: 'p/require', ...body });
    expect(res.status).toBe(200);
    // The cheaper endpoint lists no `stop`: only the dearer one was called.
    expect(since(n).map((r) => r.body.model)).toEqual(['up-req-stop']);
    expect(since(n)[0].body.stop).toEqual(['END']);
    const none = await messages({ model: 'p/require-none', ...body });
    expect(none.status).toBe(503);
    expect(none.json.error).toMatchObject({ error_type: 'provider_unavailable' });
    expect(JSON.stringify(none.json)).toMatch(/require_parameters/);
    // Without require_parameters the same endpoint serves it, without the stop sequences it cannot take.
    const m = upstream.received.length;
    const { provider: _p, ...loose } = body;
    expect((await messages({ model: 'p/require-none', ...loose })).status).toBe(200);
    expect(since(m)[0].body).not.toHaveProperty('stop');
  });

  it('keeps a messages endpoint listing `stop_sequences` for a chat request with stop (its max_tokens always taken), and drops it for top_k', async () => {
    const ok = await chat({ model: 'p/claude-strict', max_tokens: 20, stop: ['END'], provider: { require_parameters: true }, messages: [{ role: 'user', content: 'hi' }] });
    expect(ok.status).toBe(200);
    const refused = await chat({ model: 'p/claude-strict', top_k: 5, provider: { require_parameters: true }, messages: [{ role: 'user', content: 'hi' }] });
    expect(refused.status).toBe(503);
    expect(refused.json.error.metadata).toMatchObject({ error_type: 'provider_unavailable', reason: 'require_parameters' });
  });
});

describe('a chat `reasoning` object to a chat endpoint that lists `reasoning_effort`, not `reasoning`', () => {
  const hi = [{ role: 'user', content: 'hi' }];

  it('goes as `reasoning_effort` (OpenAI\'s argument; it refuses `reasoning`), every effort of the spec as is', async () => {
    for (const effort of ['max', 'xhigh', 'high', 'medium', 'low', 'minimal', 'none']) {
      const n = upstream.received.length;
      expect((await chat({ model: 'p/effort', messages: hi, reasoning: { effort, summary: 'auto' } })).status).toBe(200);
      const [got] = since(n);
      expect(got.body).toMatchObject({ model: 'up-effort', reasoning_effort: effort });
      expect(got.body).not.toHaveProperty('reasoning');
    }
    const spans = await attemptSpans('up-effort', 7);
    expect(spans.map((s) => s.attributes['gateway.dropped_parameters'])).toEqual(Array(7).fill(undefined));
  });

  it('the client\'s own reasoning_effort stands; a reasoning without an effort is left out, and said so', async () => {
    const n = upstream.received.length;
    await chat({ model: 'p/effort', messages: hi, reasoning_effort: 'low', reasoning: { effort: 'low', exclude: true } });
    await chat({ model: 'p/effort', messages: hi, reasoning: { max_tokens: 2000 } });
    const [both, bare] = since(n);
    expect(both.body).not.toHaveProperty('reasoning');
    expect(both.body.reasoning_effort).toBe('low');
    expect(bare.body).not.toHaveProperty('reasoning');
    expect(bare.body).not.toHaveProperty('reasoning_effort');
    const spans = await attemptSpans('up-effort', 9);
    expect(spans.at(-1)!.attributes['gateway.dropped_parameters']).toEqual(['reasoning']);
  });

  it('reasoning turned off (`enabled: false`, whatever effort it names) goes as reasoning_effort none; it had been left out, so the model reasoned at its default', async () => {
    const n = upstream.received.length;
    expect((await chat({ model: 'p/effort', messages: hi, reasoning: { enabled: false } })).status).toBe(200);
    await chat({ model: 'p/effort', messages: hi, reasoning: { enabled: false, effort: 'high' } });
    const [off, offHigh] = since(n);
    for (const got of [off, offHigh]) {
      expect(got.body).toMatchObject({ model: 'up-effort', reasoning_effort: 'none' });
      expect(got.body).not.toHaveProperty('reasoning');
    }
  });

  it('an endpoint listing `reasoning` gets it as is; one listing `reasoning_effort` takes it under require_parameters', async () => {
    const n = upstream.received.length;
    expect((await chat({ model: 'p/reasoning', messages: hi, reasoning: { effort: 'medium' } })).status).toBe(200);
    const [got] = since(n);
    expect(got.body).toMatchObject({ model: 'up-reasoning', reasoning: { effort: 'medium' } });
    expect(got.body).not.toHaveProperty('reasoning_effort');
    const res = await chat({ model: 'p/effort', messages: hi, reasoning: { effort: 'low' }, provider: { require_parameters: true } });
    expect(res.status).toBe(200);
  });
});

describe('a messages client\'s thinking to a chat endpoint', () => {
  const hi = [{ role: 'user', content: 'hi' }];
  const off = { max_tokens: 50, messages: hi, thinking: { type: 'disabled' } };

  it('disabled goes as the reasoning-off control a chat `reasoning: {enabled: false}` gets there: as is, as reasoning_effort none, or not at all; it had sent nothing, so the model reasoned at its default', async () => {
    const n = upstream.received.length;
    for (const model of ['p/reasoning', 'p/effort', 'p/strict', 'p/open']) expect((await messages({ model, ...off })).status).toBe(200);
    const [listsReasoning, listsEffort, listsNeither, listsNothing] = since(n);
    expect(listsReasoning.body.reasoning).toEqual({ enabled: false });
    expect(listsReasoning.body).not.toHaveProperty('reasoning_effort');
    expect(listsEffort.body.reasoning_effort).toBe('none');
    expect(listsEffort.body).not.toHaveProperty('reasoning');
    expect(listsNeither.body).not.toHaveProperty('reasoning');
    expect(listsNeither.body).not.toHaveProperty('reasoning_effort');
    // An endpoint that lists nothing gets it as a chat client's `reasoning` goes there.
    expect(listsNothing.body.reasoning).toEqual({ enabled: false });
    // Over an output_config effort, as a chat `enabled: false` wins over an effort beside it.
    const m = upstream.received.length;
    await messages({ model: 'p/effort', ...off, output_config: { effort: 'high' } });
    expect(since(m)[0].body.reasoning_effort).toBe('none');
    // require_parameters keeps both endpoints that take it (without max_tokens: p/reasoning lists no limit).
    for (const model of ['p/reasoning', 'p/effort']) expect((await messages({ model, messages: hi, thinking: { type: 'disabled' }, provider: { require_parameters: true } })).status).toBe(200);
  });

  it('enabled goes as reasoning_effort by its budget; output_config.effort as is; adaptive alone as nothing (the provider\'s default)', async () => {
    const n = upstream.received.length;
    await messages({ model: 'p/effort', max_tokens: 9000, messages: hi, thinking: { type: 'enabled', budget_tokens: 5000 } });
    await messages({ model: 'p/effort', max_tokens: 50, messages: hi, thinking: { type: 'adaptive' }, output_config: { effort: 'low' } });
    await messages({ model: 'p/effort', max_tokens: 50, messages: hi, thinking: { type: 'adaptive' } });
    const [enabled, effort, adaptive] = since(n);
    expect(enabled.body.reasoning_effort).toBe('medium');
    expect(effort.body.reasoning_effort).toBe('low');
    expect(adaptive.body).not.toHaveProperty('reasoning_effort');
    expect(adaptive.body).not.toHaveProperty('reasoning');
  });
});

describe('a request that offers tools and has a tool history, to a messages endpoint that does not list `tools`', () => {
  const weather = { name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } };
  const clock = { name: 'get_time', input_schema: { type: 'object', properties: {} } };
  const history = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '18 C' }] },
  ];

  it('a messages request keeps its tools, with tool_choice none (the Messages API refuses the history without tools; the model may call none)', async () => {
    exporter.reset();
    const n = upstream.received.length;
    const res = await messages({ model: 'p/claude-strict', max_tokens: 30, tools: [weather, clock], tool_choice: { type: 'auto' }, messages: history });
    expect(res.status).toBe(200);
    const [got] = since(n);
    expect(got.path).toBe('/v1/messages');
    expect(got.body.tools).toEqual([weather, clock]);
    expect(got.body.tool_choice).toEqual({ type: 'none' });
    expect(got.body.messages).toEqual(history);
    // The tools the client offered for calling are named dropped: the model can call none of them.
    const [span] = await attemptSpans('cl-strict');
    expect(span.attributes['gateway.dropped_parameters']).toEqual(['tools', 'tool_choice']);
    // Without a tool_choice (or with one that forces a call) the same.
    const m = upstream.received.length;
    await messages({ model: 'p/claude-strict', max_tokens: 30, tools: [weather], messages: history });
    await messages({ model: 'p/claude-strict', max_tokens: 30, tools: [weather], tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true }, messages: history });
    for (const r of since(m)) {
      expect(r.body.tools).toEqual([weather]);
      expect(r.body.tool_choice).toEqual({ type: 'none' });
    }
  });

  it('a chat request translated there the same', async () => {
    const fn = { type: 'function', function: { name: 'get_weather', parameters: weather.input_schema } };
    const chatHistory = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '18 C' },
    ];
    const n = upstream.received.length;
    const res = await chat({ model: 'p/claude-strict', max_tokens: 30, tools: [fn], tool_choice: 'required', parallel_tool_calls: false, messages: chatHistory });
    expect(res.status).toBe(200);
    const [got] = since(n);
    expect(got.path).toBe('/v1/messages');
    expect(got.body.tools).toEqual([{ name: 'get_weather', input_schema: weather.input_schema }]);
    expect(got.body.tool_choice).toEqual({ type: 'none' });
    expect(got.body.messages[1].content[0]).toMatchObject({ type: 'tool_use', name: 'get_weather' });
  });
});

describe('a reasoning_effort to a chat endpoint that lists `reasoning`, not `reasoning_effort`', () => {
  const hi = [{ role: 'user', content: 'hi' }];

  it('goes as reasoning.effort (the spec\'s shorthand for it); a messages client\'s enabled thinking so too, which had reached such an endpoint as nothing', async () => {
    const n = upstream.received.length;
    await chat({ model: 'p/reasoning', messages: hi, reasoning_effort: 'high' });
    await chat({ model: 'p/reasoning', messages: hi, reasoning_effort: 'low', reasoning: { exclude: true } });
    await messages({ model: 'p/reasoning', max_tokens: 9000, messages: hi, thinking: { type: 'enabled', budget_tokens: 5000 } });
    await messages({ model: 'p/reasoning', messages: hi, thinking: { type: 'adaptive' }, output_config: { effort: 'max' } });
    const [shorthand, merged, thinking, effort] = since(n);
    expect(shorthand.body.reasoning).toEqual({ effort: 'high' });
    expect(merged.body.reasoning).toEqual({ exclude: true, effort: 'low' });
    expect(thinking.body.reasoning).toEqual({ effort: 'medium' });
    expect(effort.body.reasoning).toEqual({ effort: 'max' });
    for (const got of [shorthand, merged, thinking, effort]) expect(got.body).not.toHaveProperty('reasoning_effort');
    const spans = await attemptSpans('up-reasoning', 4);
    expect(spans.slice(-4).map((s) => s.attributes['gateway.dropped_parameters'])).toEqual([undefined, undefined, ['max_completion_tokens'], undefined]);
  });

  it('the request\'s own reasoning object stands over it: its effort, its budget (the effort then left out), or reasoning off', async () => {
    const n = upstream.received.length;
    await chat({ model: 'p/reasoning', messages: hi, reasoning_effort: 'low', reasoning: { effort: 'low' } });
    await chat({ model: 'p/reasoning', messages: hi, reasoning_effort: 'high', reasoning: { max_tokens: 2000 } });
    await chat({ model: 'p/reasoning', messages: hi, reasoning_effort: 'high', reasoning: { enabled: false } });
    const [same, budget, off] = since(n);
    expect(same.body.reasoning).toEqual({ effort: 'low' });
    expect(budget.body.reasoning).toEqual({ max_tokens: 2000 });
    expect(off.body.reasoning).toEqual({ enabled: false });
    for (const got of [same, budget, off]) expect(got.body).not.toHaveProperty('reasoning_effort');
    // require_parameters counts such an endpoint as taking reasoning_effort (and so a messages client's thinking).
    expect((await chat({ model: 'p/reasoning', messages: hi, reasoning_effort: 'low', provider: { require_parameters: true } })).status).toBe(200);
  });
});
