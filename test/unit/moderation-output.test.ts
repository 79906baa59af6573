import { describe, expect, it } from 'vitest';
import { compileEngine } from '../../src/moderation/engines';
import { eventText, moderatedStream } from '../../src/moderation/output';
import type { GatewayState, SseEvent } from '../../src/pipeline/types';

describe('eventText', () => {
  it('chat: delta content is text; a finish_reason, an error chunk and [DONE] end the answer', () => {
    expect(eventText('chat_completions', { data: '{"choices":[{"index":0,"delta":{"content":"Hi "}}]}' })).toEqual({ deltas: [{ choice: 0, text: 'Hi ' }], ending: false });
    expect(eventText('chat_completions', { data: '{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}' })).toEqual({ deltas: [{ choice: 0, text: 'x' }], ending: true, moves: [0] });
    expect(eventText('chat_completions', { data: '{"choices":[],"usage":{"prompt_tokens":1}}' })).toEqual({ deltas: [], ending: false });
    expect(eventText('chat_completions', { data: '{"error":{"code":502},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}' }).ending).toBe(true);
    expect(eventText('chat_completions', { data: '[DONE]' })).toEqual({ deltas: [], ending: true });
    expect(eventText('chat_completions', { data: '{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}]}}]}' }).deltas).toEqual([{ choice: 0, text: 'Hi there' }]);
  });

  it('chat: a delta refusal is answer text (it had passed unjudged)', () => {
    expect(eventText('chat_completions', { data: '{"choices":[{"index":0,"delta":{"refusal":"I can\'t"}}]}' }).deltas).toEqual([{ choice: 0, text: "I can't" }]);
  });

  it('chat with n > 1: every choice of a chunk carries its own text, by its index', () => {
    const two = '{"choices":[{"index":0,"delta":{"content":"calm"}},{"index":1,"delta":{"content":"attack"}}]}';
    expect(eventText('chat_completions', { data: two })).toEqual({
      deltas: [
        { choice: 0, text: 'calm' },
        { choice: 1, text: 'attack' },
      ],
      ending: false,
    });
    expect(eventText('chat_completions', { data: '{"choices":[{"index":3,"delta":{"content":"x"}}]}' }).deltas).toEqual([{ choice: 3, text: 'x' }]);
  });

  it('messages: only text_delta and a text block\'s opening text carry text; message_delta, message_stop and error end the answer', () => {
    expect(eventText('messages', { event: 'content_block_delta', data: '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}' })).toEqual({ deltas: [{ choice: 0, text: 'Hi' }], ending: false });
    expect(eventText('messages', { event: 'content_block_delta', data: '{"delta":{"type":"input_json_delta","partial_json":"{}"}}' })).toEqual({ deltas: [], ending: false });
    expect(eventText('messages', { event: 'message_start', data: '{}' })).toEqual({ deltas: [], ending: false });
    expect(eventText('messages', { event: 'content_block_start', data: '{"index":0,"content_block":{"type":"text","text":"Hi"}}' }).deltas).toEqual([{ choice: 0, text: 'Hi' }]);
    expect(eventText('messages', { event: 'content_block_start', data: '{"index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}' }).deltas).toEqual([]);
    for (const event of ['message_delta', 'message_stop', 'error']) expect(eventText('messages', { event, data: '{}' }).ending).toBe(true);
  });
});

/** A rules engine judging the answer every `checkChars` characters, flagging the whole word `attack`. */
const engine = (checkChars = 10) =>
  compileEngine({ id: 'local', kind: 'rules', model: 'unused', timeout_ms: 1000, on_error: 'deny', moderate_output: true, output_check_chars: checkChars, rules: [{ name: 'violence', keywords: ['attack'] }] });

/** The little of a request's state a moderated stream reads. */
function streamState(endpoint: 'chat_completions' | 'messages'): GatewayState {
  return { endpoint, signal: new AbortController().signal, pipeline: [], span: { addEvent() {} }, route: { model: 'gw/model', provider: 'prov', isByok: false }, requestId: 'gen-gateway' } as unknown as GatewayState;
}

const chunk = (content: string, finish?: string): SseEvent => ({
  data: JSON.stringify({ id: 'gen-1', object: 'chat.completion.chunk', created: 1700000000, model: 'up/model', choices: [{ index: 0, delta: { content }, ...(finish ? { finish_reason: finish } : {}) }] }),
});

/** Runs events through output moderation; returns what the client got. */
async function moderated(events: SseEvent[], endpoint: 'chat_completions' | 'messages' = 'chat_completions', checkChars = 10): Promise<SseEvent[]> {
  const logger = { warn() {} };
  const source = (async function* () {
    yield* events;
  })();
  const out: SseEvent[] = [];
  for await (const ev of moderatedStream({ engine: engine(checkChars), state: streamState(endpoint), logger, events: source })) out.push(ev);
  return out;
}

const blocked = (out: SseEvent[]) => out.some((e) => e.data !== '[DONE]' && JSON.parse(e.data).error !== undefined);

describe('moderatedStream: the normalised view', () => {
  it('a zero-width character or full-width letters inside a streamed word do not hide it', async () => {
    expect(blocked(await moderated([chunk('Plan the at\u200btack'), chunk(' at dawn', 'stop'), { data: '[DONE]' }]))).toBe(true);
    expect(blocked(await moderated([chunk('Plan the ａｔｔａ'), chunk('ｃｋ at dawn', 'stop'), { data: '[DONE]' }]))).toBe(true);
  });

  it('a check that falls after a character the view reads as a letter waits for the word\'s end: attacⓚ + ers is not the word attack', async () => {
    const events = [chunk('Three of the attacⓚ'), chunk('ers ran off'), chunk('.', 'stop'), { data: '[DONE]' }];
    expect(await moderated(events)).toEqual(events);
    const hidden = [chunk('Three of the attack\u200b'), chunk('\u200bers ran off'), chunk('.', 'stop'), { data: '[DONE]' }];
    expect(blocked(await moderated(hidden))).toBe(true); // the text as written reads `attack` then a break: judged so before too
  });
});

describe('moderatedStream: the in-band error of a block', () => {
  it('carries the stream\'s own id, created, model and provider (it had carried the gateway\'s, created at the time of the error)', async () => {
    const out = await moderated([chunk('A calm start,'), chunk(' then the attack', 'stop'), { data: '[DONE]' }]);
    expect(out.at(-1)!.data).toBe('[DONE]');
    const error = JSON.parse(out.at(-2)!.data);
    expect(error).toMatchObject({ id: 'gen-1', created: 1700000000, model: 'up/model', error: { code: 403, metadata: { error_type: 'content_policy_violation' } } });
    expect(Object.keys(error).slice(0, 4)).toEqual(['id', 'object', 'created', 'model']);
  });

  it('falls back to the gateway\'s own when the chunks before it carried none', async () => {
    const bare = (content: string, finish?: string): SseEvent => ({ data: JSON.stringify({ choices: [{ index: 0, delta: { content }, ...(finish ? { finish_reason: finish } : {}) }] }) });
    const out = await moderated([bare('A calm start,'), bare(' then the attack', 'stop')]);
    const error = JSON.parse(out.at(-2)!.data);
    expect(error).toMatchObject({ id: 'gen-gateway', model: 'gw/model', provider: 'prov' });
    expect(typeof error.created).toBe('number');
  });
});

/** What the client had got when the provider sent its `at`-th event (a pull stream: all that could go out had). */
async function gotBefore(events: SseEvent[], at: number, endpoint: 'chat_completions' | 'messages'): Promise<{ before: SseEvent[]; all: SseEvent[] }> {
  const all: SseEvent[] = [];
  let before: SseEvent[] = [];
  const source = (async function* () {
    for (const [i, ev] of events.entries()) {
      if (i === at) before = [...all];
      yield ev;
    }
  })();
  for await (const ev of moderatedStream({ engine: engine(500), state: streamState(endpoint), logger: { warn() {} }, events: source })) all.push(ev);
  return { before, all };
}

describe('moderatedStream: events after text', () => {
  it('chat: a tool call after text is not held until the finish: the text is judged when the call begins', async () => {
    const call = (fn: Record<string, unknown>): SseEvent => ({ data: JSON.stringify({ id: 'gen-1', created: 1, model: 'm', choices: [{ index: 0, delta: { tool_calls: [{ index: 0, ...fn }] } }] }) });
    const events = [chunk('Let me look that up.'), call({ id: 'c1', type: 'function', function: { name: 'search', arguments: '' } }), call({ function: { arguments: '{"q":"x"}' } }), chunk('', 'tool_calls'), { data: '[DONE]' }];
    const { before, all } = await gotBefore(events, 3, 'chat_completions');
    expect(before).toEqual(events.slice(0, 3));
    expect(all).toEqual(events);
    expect(eventText('chat_completions', events[1]).moves).toEqual([0]);
  });

  it('messages: a tool_use block after text is not held until message_delta', async () => {
    const ev = (event: string, data: object): SseEvent => ({ event, data: JSON.stringify({ type: event, ...data }) });
    const events = [
      ev('message_start', { message: {} }),
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Let me look that up.' } }),
      ev('content_block_stop', { index: 0 }),
      ev('content_block_start', { index: 1, content_block: { type: 'tool_use', id: 't1', name: 'search', input: {} } }),
      ev('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: '{"q":"x"}' } }),
      ev('content_block_stop', { index: 1 }),
      ev('message_delta', { delta: { stop_reason: 'tool_use' } }),
      ev('message_stop', {}),
    ];
    const { before, all } = await gotBefore(events, 7, 'messages');
    expect(before).toEqual(events.slice(0, 7));
    expect(all).toEqual(events);
  });

  it('a tool call does not release text still flagged: the check at the call blocks it', async () => {
    const call: SseEvent = { data: JSON.stringify({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'c1', type: 'function', function: { name: 'f', arguments: '' } }] } }] }) };
    const all = await moderated([chunk('Plan the attack.'), call, chunk('', 'tool_calls'), { data: '[DONE]' }], 'chat_completions', 500);
    expect(all).toHaveLength(2);
    expect(blocked(all)).toBe(true);
    expect(JSON.stringify(all)).not.toContain('tool_calls');
  });

  it('with n > 1, the last choice\'s finish is not held until the stream ends', async () => {
    const two = (choice: number, content: string, finish?: string): SseEvent => ({ data: JSON.stringify({ choices: [{ index: choice, delta: { content }, ...(finish ? { finish_reason: finish } : {}) }] }) });
    const events = [two(0, 'Calm.'), two(1, 'Quiet.'), two(0, '', 'stop'), two(1, ' Still quiet.'), two(1, '', 'stop'), { data: '{"choices":[],"usage":{"prompt_tokens":1}}' }, { data: '[DONE]' }];
    const { before, all } = await gotBefore(events, 5, 'chat_completions');
    expect(before).toEqual(events.slice(0, 5));
    expect(all).toEqual(events);
  });
});

describe('moderatedStream: n > 1', () => {
  it('a check at one choice\'s finish waits while another choice ends inside a word: attack + ers is not the word attack', async () => {
    const two = (choice: number, content: string, finish?: string): SseEvent => ({ data: JSON.stringify({ choices: [{ index: choice, delta: { content }, ...(finish ? { finish_reason: finish } : {}) }] }) });
    const events = [two(0, 'Calm.'), two(1, 'Plan for the attack'), two(0, '', 'stop'), two(1, 'ers, who ran.'), two(1, '', 'stop'), { data: '[DONE]' }];
    expect(await moderated(events, 'chat_completions', 500)).toEqual(events);
    expect(blocked(await moderated([two(0, 'Calm.'), two(1, 'Plan the attack'), two(0, '', 'stop'), two(1, ' now.', 'stop')], 'chat_completions', 500))).toBe(true);
  });
});
