import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '../fixtures/fake-upstream';
import { ledgerRowSoon, startTestGateway, testConfigYaml, type TestGateway } from '../fixtures/gateway';

/** Clients of one API style served by providers of the other, through the official SDKs. */
let upstream: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
const weatherOpenAI: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};
const weatherAnthropic: Anthropic.Tool = {
  name: 'get_weather',
  description: 'Weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

beforeAll(async () => {
  upstream = await startFakeUpstream();
  gw = await startTestGateway({ yaml: testConfigYaml(upstream.url) });
  openai = new OpenAI({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: gw.url.replace(/\/v1$/, ''), apiKey: gw.key, maxRetries: 0 });
});
afterAll(async () => {
  await gw.close();
  await upstream.close();
});

describe('OpenAI client → Anthropic-style provider', () => {
  it('completes, with the system prompt and an image translated for the provider', async () => {
    const res = await openai.chat.completions.create({
      model: 'fake/claude',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } }, { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] },
      ],
    });
    expect(res.choices[0].message.content).toBe('Hello from the fake upstream.');
    expect(res.choices[0].finish_reason).toBe('stop');
    expect(res.model).toBe('fake/claude');
    expect(res.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 5 });
    expect((res.usage as any).cost).toBeCloseTo((6 * 3 + 4 * 0.3 + 5 * 15) / 1e6, 12);
    const sent = upstream.received.at(-1)!;
    expect(sent.path).toBe('/v1/messages');
    expect(sent.body.model).toBe('claude-upstream');
    expect(sent.body.max_tokens).toBeGreaterThan(0);
    expect(JSON.stringify(sent.body.system)).toContain('Be brief.');
    const blocks = sent.body.messages[0].content;
    expect(blocks).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } }),
        expect.objectContaining({ type: 'image', source: { type: 'url', url: 'https://example.com/cat.png' } }),
      ]),
    );
  });

  it('streams text with a usage chunk', async () => {
    const stream = await openai.chat.completions.create({ model: 'fake/claude', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hi' }] });
    let text = '';
    let usage: any;
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe('Hello from the fake upstream.');
    expect(finish).toBe('stop');
    expect(usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 5 });
    expect(usage.cost).toBeGreaterThan(0);
  });

  it('gets tool calls back, non-streaming and streaming, and sends tool results on', async () => {
    const res = await openai.chat.completions.create({ model: 'fake/claude', tools: [weatherOpenAI], messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    const call = res.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(res.choices[0].finish_reason).toBe('tool_calls');
    expect(call.function.name).toBe('get_weather');
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'Paris' });
    expect(upstream.received.at(-1)!.body.tools[0]).toMatchObject({ name: 'get_weather', input_schema: { type: 'object' } });

    const runner = openai.chat.completions.stream({ model: 'fake/claude', tools: [weatherOpenAI], messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    const final = await runner.finalChatCompletion();
    const streamed = final.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(JSON.parse(streamed.function.arguments)).toEqual({ city: 'Paris' });

    const follow = await openai.chat.completions.create({
      model: 'fake/claude',
      tools: [weatherOpenAI],
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [call] },
        { role: 'tool', tool_call_id: call.id, content: 'Sunny, 21°C' },
      ],
    });
    expect(follow.choices[0].message.content).toBe('Hello from the fake upstream.');
    const sent = upstream.received.at(-1)!.body;
    expect(sent.messages[1].content[0]).toMatchObject({ type: 'tool_use', id: call.id, name: 'get_weather', input: { city: 'Paris' } });
    expect(sent.messages[2].content[0]).toMatchObject({ type: 'tool_result', tool_use_id: call.id });
  });
});

describe('Anthropic client → OpenAI-compatible provider', () => {
  it('creates a message, with system and an image translated for the provider', async () => {
    const msg = await anthropic.messages.create({
      model: 'fake/gpt',
      max_tokens: 100,
      system: 'Be brief.',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } }] }],
    });
    expect(msg.content[0]).toMatchObject({ type: 'text', text: 'Hello from the fake upstream.' });
    expect(msg.stop_reason).toBe('end_turn');
    expect(msg.model).toBe('fake/gpt');
    expect(msg.usage.output_tokens).toBe(5);
    const sent = upstream.received.at(-1)!;
    expect(sent.path).toBe('/v1/chat/completions');
    expect(sent.body.model).toBe('gpt-upstream');
    expect(sent.body.messages[0]).toMatchObject({ role: 'system' });
    expect(JSON.stringify(sent.body.messages[0].content)).toContain('Be brief.');
    const parts = sent.body.messages[1].content;
    expect(parts).toEqual(expect.arrayContaining([expect.objectContaining({ type: 'image_url', image_url: expect.objectContaining({ url: `data:image/png;base64,${PNG}` }) })]));
    expect(sent.body.max_completion_tokens ?? sent.body.max_tokens).toBe(100);
  });

  it('streams a message', async () => {
    const stream = anthropic.messages.stream({ model: 'fake/gpt', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
    let text = '';
    stream.on('text', (t) => (text += t));
    const final = await stream.finalMessage();
    expect(text).toBe('Hello from the fake upstream.');
    expect(final.stop_reason).toBe('end_turn');
    expect(final.usage.output_tokens).toBe(5);
  });

  it('gets tool_use blocks back, non-streaming and streaming', async () => {
    const msg = await anthropic.messages.create({ model: 'fake/gpt', max_tokens: 64, tools: [weatherAnthropic], messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    expect(msg.stop_reason).toBe('tool_use');
    const use = msg.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock;
    expect(use).toMatchObject({ name: 'get_weather', input: { city: 'Paris' } });
    expect(upstream.received.at(-1)!.body.tools[0]).toMatchObject({ type: 'function', function: { name: 'get_weather' } });

    const final = await anthropic.messages.stream({ model: 'fake/gpt', max_tokens: 64, tools: [weatherAnthropic], messages: [{ role: 'user', content: 'Weather in Paris?' }] }).finalMessage();
    expect(final.stop_reason).toBe('tool_use');
    expect(final.content.find((b) => b.type === 'tool_use')).toMatchObject({ name: 'get_weather', input: { city: 'Paris' } });
  });

  it('streamed tool calls sent whole, with neither index nor id (some OpenAI-compatible servers), are separate tool_use blocks', async () => {
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-x', object: 'chat.completion.chunk', created: 1, model: 'gpt-upstream', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const call = (city: string) => chunk({ tool_calls: [{ type: 'function', function: { name: 'get_weather', arguments: JSON.stringify({ city }) } }] });
    upstream.faults.push({ kind: 'raw-stream', text: chunk({ role: 'assistant' }) + call('Paris') + call('Rome') + chunk({}, 'tool_calls') + 'data: [DONE]\n\n' });
    const final = await anthropic.messages.stream({ model: 'fake/gpt', max_tokens: 64, tools: [weatherAnthropic], messages: [{ role: 'user', content: 'Weather in Paris and Rome?' }] }).finalMessage();
    const uses = final.content.filter((b) => b.type === 'tool_use');
    expect(uses.map((u) => u.input)).toEqual([{ city: 'Paris' }, { city: 'Rome' }]);
    expect(uses[0].id).not.toBe(uses[1].id);
    expect(final.stop_reason).toBe('tool_use');
  });

  it('streamed parallel tool calls that all say index 0, each with its own id (Ollama), are separate tool_use blocks', async () => {
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-x', object: 'chat.completion.chunk', created: 1, model: 'gpt-upstream', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const call = (id: string, city: string) => chunk({ tool_calls: [{ index: 0, id, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify({ city }) } }] });
    upstream.faults.push({ kind: 'raw-stream', text: chunk({ role: 'assistant' }) + call('call_a', 'Paris') + call('call_b', 'Rome') + chunk({}, 'tool_calls') + 'data: [DONE]\n\n' });
    const final = await anthropic.messages.stream({ model: 'fake/gpt', max_tokens: 64, tools: [weatherAnthropic], messages: [{ role: 'user', content: 'Weather in Paris and Rome?' }] }).finalMessage();
    const uses = final.content.filter((b) => b.type === 'tool_use');
    // They had been one block: the second call's arguments appended to the first's, its id and name lost.
    expect(uses.map((u) => [u.id, u.input])).toEqual([['call_a', { city: 'Paris' }], ['call_b', { city: 'Rome' }]]);
    expect(final.stop_reason).toBe('tool_use');
  });

  it('a provider that reported no usage: message_delta says the usage and cost billed, as the ledger row does', async () => {
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-x', object: 'chat.completion.chunk', created: 1, model: 'gpt-upstream', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    upstream.faults.push({ kind: 'raw-stream', text: chunk({ role: 'assistant', content: '' }) + chunk({ content: 'Sixteen chars!!!' }) + chunk({}, 'stop') + 'data: [DONE]\n\n' });
    const stream = anthropic.messages.stream({ model: 'fake/gpt', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
    let delta: any;
    stream.on('streamEvent', (e) => {
      if (e.type === 'message_delta') delta = e;
    });
    const final = await stream.finalMessage();
    const row = await ledgerRowSoon(gw, final.id);
    expect(row).toMatchObject({ status: 'completed', completionTokens: 4 }); // 16 characters at 4 per token
    expect(row!.promptTokens).toBeGreaterThan(0); // the request, counted with the tokenizer
    // It had said zeros and no cost while the ledger billed the estimate (a JSON answer and a chat stream's usage chunk say it).
    expect([final.usage.input_tokens, final.usage.output_tokens]).toEqual([row!.promptTokens, row!.completionTokens]);
    expect(delta.usage.cost).toBeCloseTo(row!.costUsd, 12);
    expect(delta.usage.is_byok).toBe(false);
  });

  it("a chat provider's service tier reaches finalMessage().usage as a JSON answer's usage has it", async () => {
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-x', object: 'chat.completion.chunk', created: 1, model: 'gpt-upstream', service_tier: 'priority', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    upstream.faults.push({ kind: 'raw-stream', text: chunk({ role: 'assistant', content: '' }) + chunk({ content: 'Hi.' }) + chunk({}, 'stop') + 'data: [DONE]\n\n' });
    const final = await anthropic.messages.stream({ model: 'fake/gpt', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }).finalMessage();
    // The SDK takes the tier from message_start only: given in message_delta alone, it was missing.
    expect(final.usage.service_tier).toBe('priority');
    expect(final.content).toEqual([{ type: 'text', text: 'Hi.' }]);
  });

  it('bills the translated usage', async () => {
    const msg = await anthropic.messages.create({ model: 'fake/gpt', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
    const row = await gw.ledgerRow(msg.id);
    expect(row).toMatchObject({ promptTokens: 10, completionTokens: 5, cachedTokens: 4, provider: 'fake-openai', status: 'completed' });
    expect(row!.costUsd).toBeCloseTo((6 * 1 + 4 * 0.5 + 5 * 2) / 1e6, 12);
  });
});
