import { describe, expect, it } from 'vitest';
import { inputTokens } from '../../src/spend/estimate';
import { post, testConfigYaml } from '../fixtures/gateway';
import { perTestGateways } from '../fixtures/per-test';

const t = perTestGateways();

const MODELS = `
  - { id: cc/gpt, context_length: 600, endpoints: [{ provider: fake-openai, upstream_model: up-cc-gpt }] }
  - { id: cc/claude, context_length: 600, endpoints: [{ provider: fake-anthropic, upstream_model: up-cc-claude }] }
  - { id: cc/mid, context_length: 1500, endpoints: [{ provider: fake-openai, upstream_model: up-cc-mid }] }
  - { id: cc/claude-out, context_length: 900, max_output_tokens: 300, endpoints: [{ provider: fake-anthropic, upstream_model: up-cc-claude }] }
  - { id: cc/gpt-out, context_length: 900, max_output_tokens: 300, endpoints: [{ provider: fake-openai, upstream_model: up-cc-gpt }] }
`;

function yaml(): string {
  return (
    testConfigYaml(t.upstream.url, '[auth, validate, context-compression, upstream]').replace('pipelines:', `${MODELS}pipelines:`) +
    `plugins:
  context-compression: { default_up_to_context_length: 1000, keep_latest: 2 }
`
  );
}

const MAX_TOKENS = 100;
const META = { 'x-gateway-metadata': 'enabled' };
const filler = (n: number) => `Turn ${n}: ` + Array.from({ length: 30 }, (_, i) => `fact${(i * 7 + n) % 97}`).join(' ');

type Msg = Record<string, any>;

/** system, the first user message, `turns` user/assistant pairs (every 4th a tool call + result), a final question. */
function chatConversation(turns: number): Msg[] {
  const out: Msg[] = [{ role: 'system', content: 'You are the system prompt.' }, { role: 'user', content: 'FIRST: the task.' }];
  for (let n = 0; n < turns; n++) {
    if (n % 4 === 2) {
      out.push({ role: 'assistant', content: null, tool_calls: [{ id: `call_${n}`, type: 'function', function: { name: 'lookup', arguments: JSON.stringify({ q: n }) } }] });
      out.push({ role: 'tool', tool_call_id: `call_${n}`, content: filler(n) });
    } else {
      out.push({ role: 'assistant', content: filler(n) });
      out.push({ role: 'user', content: filler(n + 1000) });
    }
  }
  out.push({ role: 'user', content: 'LATEST: the question.' });
  return out;
}

function messagesConversation(turns: number): Msg[] {
  const out: Msg[] = [{ role: 'user', content: 'FIRST: the task.' }];
  for (let n = 0; n < turns; n++) {
    if (n % 4 === 2) {
      out.push({ role: 'assistant', content: [{ type: 'text', text: 'Looking up.' }, { type: 'tool_use', id: `toolu_${n}`, name: 'lookup', input: { q: n } }] });
      out.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: `toolu_${n}`, content: filler(n) }] });
    } else {
      out.push({ role: 'assistant', content: filler(n) });
      out.push({ role: 'user', content: filler(n + 1000) });
    }
  }
  out.push({ role: 'user', content: 'LATEST: the question.' });
  return out;
}

/** Every tool call has its result right after it, and every result its call right before. */
function expectToolPairsIntact(messages: Msg[]): void {
  messages.forEach((m, i) => {
    const chatCalls: string[] = (m.tool_calls ?? []).map((c: Msg) => c.id);
    const useIds: string[] = Array.isArray(m.content) ? m.content.filter((b: Msg) => b.type === 'tool_use').map((b: Msg) => b.id) : [];
    for (const id of chatCalls) expect(messages[i + 1]).toMatchObject({ role: 'tool', tool_call_id: id });
    for (const id of useIds) expect(messages[i + 1].content).toContainEqual(expect.objectContaining({ type: 'tool_result', tool_use_id: id }));
    if (m.role === 'tool') expect(messages[i - 1].tool_calls.map((c: Msg) => c.id)).toContain(m.tool_call_id);
    const results = Array.isArray(m.content) ? m.content.filter((b: Msg) => b.type === 'tool_result') : [];
    for (const r of results) expect(messages[i - 1].content).toContainEqual(expect.objectContaining({ type: 'tool_use', id: r.tool_use_id }));
  });
}

describe('context-compression (middle-out)', () => {
  it('chat: a long conversation is compressed to fit, keeping system, first user, latest turns and tool pairs', async () => {
    const g = await t.start({ yaml: yaml() });
    const messages = chatConversation(16);
    expect(inputTokens({ messages }) + MAX_TOKENS).toBeGreaterThan(600);
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'cc/gpt', max_tokens: MAX_TOKENS, messages }, META);
    expect(res.status, res.text).toBe(200);
    const sent = t.upstream.received.at(-1)!.body;
    expect(inputTokens(sent) + MAX_TOKENS).toBeLessThanOrEqual(600);
    expect(sent.messages.length).toBeLessThan(messages.length);
    expect(sent.messages.slice(0, 2)).toEqual(messages.slice(0, 2));
    expect(sent.messages.slice(-2)).toEqual(messages.slice(-2));
    expectToolPairsIntact(sent.messages);
    const record = res.json.gateway_metadata.pipeline[0];
    expect(record).toMatchObject({ type: 'context-compression', name: 'context-compression', data: { transform: 'middle-out', model: 'cc/gpt', context_length: 600, fits: true } });
    expect(record.data.removed.length).toBe(messages.length - sent.messages.length);
    expect(record.data.removed.some((r: Msg) => r.role === 'tool')).toBe(true); // a removed call took its result along
    // Removed from the middle: the earliest and the latest middle turns survive longest.
    const removedIdx = record.data.removed.map((r: Msg) => r.index);
    expect(removedIdx).not.toContain(0);
    expect(removedIdx).not.toContain(1);
    expect(removedIdx).not.toContain(messages.length - 1);
  });

  it('messages: a long conversation is compressed to fit, system untouched, tool_use/tool_result pairs kept together', async () => {
    const g = await t.start({ yaml: yaml() });
    const messages = messagesConversation(16);
    const body = { model: 'cc/claude', max_tokens: MAX_TOKENS, system: 'You are the system prompt.', messages };
    expect(inputTokens(body) + MAX_TOKENS).toBeGreaterThan(600);
    const res = await post(`${g.url}/messages`, g.key, body, META);
    expect(res.status, res.text).toBe(200);
    const sent = t.upstream.received.at(-1)!.body;
    expect(t.upstream.received.at(-1)!.path).toContain('/messages');
    expect(inputTokens(sent) + MAX_TOKENS).toBeLessThanOrEqual(600);
    expect(sent.system).toBe('You are the system prompt.');
    expect(sent.messages[0]).toEqual(messages[0]);
    expect(sent.messages.slice(-2)).toEqual(messages.slice(-2));
    expect(sent.messages.length).toBeLessThan(messages.length);
    expectToolPairsIntact(sent.messages);
    expect(res.json.gateway_metadata.pipeline[0].data).toMatchObject({ model: 'cc/claude', fits: true });
  });

  it('a short conversation is untouched and nothing is recorded (both dialects)', async () => {
    const g = await t.start({ yaml: yaml() });
    const chat = chatConversation(2);
    const a = await post(`${g.url}/chat/completions`, g.key, { model: 'cc/gpt', max_tokens: MAX_TOKENS, messages: chat }, META);
    expect(a.status).toBe(200);
    expect(t.upstream.received.at(-1)!.body.messages).toEqual(chat);
    expect(a.json.gateway_metadata.pipeline).toBeUndefined();
    const msgs = messagesConversation(2);
    const b = await post(`${g.url}/messages`, g.key, { model: 'cc/claude', max_tokens: MAX_TOKENS, messages: msgs }, META);
    expect(b.status).toBe(200);
    expect(t.upstream.received.at(-1)!.body.messages).toEqual(msgs);
    expect(b.json.gateway_metadata.pipeline).toBeUndefined();
  });

  it('enabled: false refuses compression for the request', async () => {
    const g = await t.start({ yaml: yaml() });
    const messages = chatConversation(16);
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'cc/gpt', max_tokens: MAX_TOKENS, messages, plugins: [{ id: 'context-compression', enabled: false }] });
    expect(res.status).toBe(200);
    expect(t.upstream.received.at(-1)!.body.messages).toEqual(messages);
  });

  it('above the default threshold it runs only when the request asks for it', async () => {
    const g = await t.start({ yaml: yaml() });
    const messages = chatConversation(40);
    expect(inputTokens({ messages }) + MAX_TOKENS).toBeGreaterThan(1500);
    await post(`${g.url}/chat/completions`, g.key, { model: 'cc/mid', max_tokens: MAX_TOKENS, messages });
    expect(t.upstream.received.at(-1)!.body.messages).toEqual(messages);
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'cc/mid', max_tokens: MAX_TOKENS, messages, plugins: [{ id: 'context-compression' }] });
    expect(res.status).toBe(200);
    const sent = t.upstream.received.at(-1)!.body;
    expect(inputTokens(sent) + MAX_TOKENS).toBeLessThanOrEqual(1500);
    expect(sent.messages.some((m: Msg) => m.role === 'tool')).toBe(true); // some pairs survive, intact
    expectToolPairsIntact(sent.messages);
  });

  it('reserves the max_tokens the gateway sends a messages provider when the client set none (it reserved 0), and a limit lowered to max_output_tokens', async () => {
    const g = await t.start({ yaml: yaml() });
    const messages = messagesConversation(5);
    const tokens = inputTokens({ messages });
    expect(tokens).toBeLessThan(900); // fits the context alone ...
    expect(tokens + 300).toBeGreaterThan(900); // ... but not with the 300 tokens of answer the provider is asked for
    const res = await post(`${g.url}/messages`, g.key, { model: 'cc/claude-out', messages }, META);
    expect(res.status, res.text).toBe(200);
    let sent = t.upstream.received.at(-1)!.body;
    expect(sent.max_tokens).toBe(300);
    expect(inputTokens(sent) + 300).toBeLessThanOrEqual(900);
    expect(res.json.gateway_metadata.pipeline[0].data).toMatchObject({ model: 'cc/claude-out', max_tokens: 300, fits: true });

    // A chat client translated to the messages provider: the same default is sent.
    const chat = chatConversation(5);
    expect(inputTokens({ messages: chat }) + 300).toBeGreaterThan(900);
    await post(`${g.url}/chat/completions`, g.key, { model: 'cc/claude-out', messages: chat });
    sent = t.upstream.received.at(-1)!.body;
    expect(sent.max_tokens).toBe(300);
    expect(inputTokens(sent) + 300).toBeLessThanOrEqual(900);

    // A client limit above max_output_tokens is sent as max_output_tokens: that is what is reserved.
    const capped = await post(`${g.url}/messages`, g.key, { model: 'cc/claude-out', max_tokens: 5000, messages }, META);
    expect(capped.json.gateway_metadata.pipeline[0].data).toMatchObject({ max_tokens: 300, fits: true });
    expect(t.upstream.received.at(-1)!.body.messages.length).toBeGreaterThan(2);

    // A chat provider is sent no limit when the client sets none: nothing is reserved, nothing removed.
    const plain = await post(`${g.url}/chat/completions`, g.key, { model: 'cc/gpt-out', messages: chat }, META);
    expect(t.upstream.received.at(-1)!.body.messages).toEqual(chat);
    expect(t.upstream.received.at(-1)!.body.max_tokens).toBeUndefined();
    expect(plain.json.gateway_metadata.pipeline).toBeUndefined();
  });

  it('when removing the middle is not enough, the middle of a long kept message is truncated', async () => {
    const g = await t.start({ yaml: yaml() });
    const huge = Array.from({ length: 120 }, (_, i) => filler(i)).join('\n');
    const messages = [{ role: 'system', content: 'System.' }, { role: 'user', content: huge }, { role: 'assistant', content: 'Ok.' }, { role: 'user', content: 'LATEST: the question.' }];
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'cc/gpt', max_tokens: MAX_TOKENS, messages }, META);
    expect(res.status, res.text).toBe(200);
    const sent = t.upstream.received.at(-1)!.body;
    expect(inputTokens(sent) + MAX_TOKENS).toBeLessThanOrEqual(600);
    expect(sent.messages).toHaveLength(4);
    expect(sent.messages[1].content.startsWith(huge.slice(0, 50))).toBe(true);
    expect(sent.messages[1].content.endsWith(huge.slice(-50))).toBe(true);
    expect(sent.messages[1].content).toContain('removed by context-compression');
    expect(sent.messages[3]).toEqual(messages[3]);
    expect(res.json.gateway_metadata.pipeline[0].data.truncated).toEqual([expect.objectContaining({ index: 1 })]);
  });

  it('a prompt that cannot fit even cut goes upstream uncut, recorded fits: false (the middle had been removed for nothing)', async () => {
    const g = await t.start({ yaml: yaml() });
    const system = Array.from({ length: 30 }, (_, i) => filler(i)).join('\n');
    const messages = [{ role: 'system', content: system }, ...chatConversation(6).slice(1)];
    const res = await post(`${g.url}/chat/completions`, g.key, { model: 'cc/gpt', max_tokens: MAX_TOKENS, messages }, META);
    expect(res.status, res.text).toBe(200);
    expect(t.upstream.received.at(-1)!.body.messages).toEqual(messages);
    expect(res.json.gateway_metadata.pipeline[0].data).toMatchObject({ model: 'cc/gpt', fits: false, removed: [], truncated: [] });
  });
});
