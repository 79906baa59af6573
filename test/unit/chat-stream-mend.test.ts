import { describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { chatCompletions } from '../../src/dialects/chat-completions';
import type { SseEvent } from '../../src/pipeline/types';
import { formatSse } from '../../src/providers/sse';

type Obj = Record<string, any>;

const info = (choices = 1) => ({ generationId: 'gen-1-abc', model: 'gw/model', provider: 'prov', isByok: false, costOf: () => 0, clientWantsUsage: false, choices });

const chunk = (delta: Obj, finish: string | null = null, index = 0): SseEvent => ({
  data: JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'up', choices: [{ index, delta, finish_reason: finish }] }),
});

/** The same-dialect stream as the client gets it, `[DONE]` included. */
function relay(events: SseEvent[], choices = 1): SseEvent[] {
  const rw = chatCompletions.streamRewriter(info(choices));
  const out = events.map((e) => rw.rewrite(e)).filter((e): e is SseEvent => e !== null);
  return [...out, ...rw.end(() => null)];
}

async function finalOf(events: SseEvent[]) {
  const body = events.map(formatSse).join('');
  const fetch = (async () => new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream' } })) as typeof globalThis.fetch;
  const client = new OpenAI({ apiKey: 'k', baseURL: 'http://gateway.test/v1', fetch, maxRetries: 0 });
  return client.chat.completions.stream({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }).finalChatCompletion();
}

/** A provider that gives no role and tool calls without `type` (some OpenAI-compatible servers do). */
const DEFECTIVE = [
  chunk({ content: 'Checking.' }),
  chunk({ tool_calls: [{ index: 0, id: 'call_a', function: { name: 'weather', arguments: '' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":"Oslo"}' } }] }),
  chunk({ tool_calls: [{ index: 1, id: 'call_b', function: { name: 'time', arguments: '{}' } }] }),
  chunk({}, 'tool_calls'),
  { data: '[DONE]' },
];

describe('same-dialect chat streams: provider defects the OpenAI SDK fails on are mended', () => {
  it("a stream without delta.role and tool calls without type is read by the OpenAI SDK's stream helper", async () => {
    const final = await finalOf(relay(DEFECTIVE));
    const m = final.choices[0].message;
    expect(m.role).toBe('assistant');
    expect(m.content).toBe('Checking.');
    expect(m.tool_calls).toEqual([
      { id: 'call_a', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } },
      { id: 'call_b', type: 'function', function: { name: 'time', arguments: '{}' } },
    ]);
  });

  it('adds the role to the first delta only, type to the opening piece of a call only; argument pieces stay as sent', () => {
    const out = relay(DEFECTIVE).slice(0, 5).map((e) => JSON.parse(e.data).choices[0].delta);
    expect(out.map((d) => d.role)).toEqual(['assistant', undefined, undefined, undefined, undefined]);
    expect(out[1].tool_calls[0].type).toBe('function');
    expect(out[2].tool_calls[0]).toEqual({ index: 0, function: { arguments: '{"city":"Oslo"}' } });
    expect(out[3].tool_calls[0].type).toBe('function');
  });

  it("a provider's own role and type are kept, and a stream that gives them is unchanged but for the stamp", () => {
    const good = [chunk({ role: 'assistant', content: '' }), chunk({ content: 'Hi' }), chunk({}, 'stop'), { data: '[DONE]' }];
    const out = relay(good);
    expect(out.map((e) => e.data)).toEqual(good.map((e) => (e.data === '[DONE]' ? e.data : e.data.replace('{"id":"c",', '{"id":"gen-1-abc","provider":"prov",').replace('"model":"up"', '"model":"gw/model"'))));
  });

  it('with n > 1 every choice gets its role on its first delta', () => {
    const events = [chunk({ content: 'a' }, null, 0), chunk({ content: 'b' }, null, 1), chunk({ content: 'c' }, null, 0), chunk({}, 'stop', 0), chunk({}, 'stop', 1), { data: '[DONE]' }];
    const deltas = relay(events, 2).slice(0, 3).map((e) => JSON.parse(e.data).choices[0].delta);
    expect(deltas).toEqual([{ role: 'assistant', content: 'a' }, { role: 'assistant', content: 'b' }, { content: 'c' }]);
  });
});
