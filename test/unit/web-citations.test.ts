import { describe, expect, it } from 'vitest';
import { addCitations, chatAnnotations, chatStreamWithAnnotations, injectSystemText, linkSpan, searchPromptText } from '../../src/search/citations';

const R = [
  { url: 'https://otters.example/facts', title: 'Otter facts', snippet: 'Otters hold hands.' },
  { url: 'https://news.example/', title: 'News', snippet: '' },
];

describe('web search citations', () => {
  it('finds a markdown link, else a bare URL, else nothing', () => {
    const text = 'See [otters.example](https://otters.example/facts) and https://news.example today.';
    expect(linkSpan(text, R[0].url)).toEqual({ start: 4, end: 50 });
    expect(text.slice(4, 50)).toBe('[otters.example](https://otters.example/facts)');
    const bare = linkSpan(text, R[1].url)!;
    expect(text.slice(bare.start, bare.end)).toBe('https://news.example');
    expect(linkSpan('https://otters.example/factsheet', R[0].url)).toBeNull();
    expect(linkSpan('nothing here', R[0].url)).toBeNull();
  });

  it('chat annotations carry the link span, or 0..0 for a source the answer does not link', () => {
    const text = 'Yes ([otters.example](https://otters.example/facts)).';
    expect(chatAnnotations(text, R)).toEqual([
      { type: 'url_citation', url_citation: { url: R[0].url, title: 'Otter facts', content: 'Otters hold hands.', start_index: 5, end_index: 51 } },
      { type: 'url_citation', url_citation: { url: R[1].url, title: 'News', start_index: 0, end_index: 0 } },
    ]);
  });

  it('messages citations go on the block that links the source, else the first text block', () => {
    const body = { content: [{ type: 'text', text: 'Intro.' }, { type: 'tool_use', id: 't', name: 'x', input: {} }, { type: 'text', text: 'Per [otters.example](https://otters.example/facts).' }] };
    expect(addCitations('messages', body, R)).toBe(2);
    expect((body.content[0] as any).citations.map((c: any) => c.url)).toEqual([R[1].url]);
    expect((body.content[2] as any).citations).toEqual([{ type: 'web_search_result_location', url: R[0].url, title: 'Otter facts', encrypted_index: '1', cited_text: 'Otters hold hands.' }]);
  });

  it('prompt text numbers the sources and fills {date}; injection keeps system blocks', () => {
    expect(searchPromptText('On {date}:', R, new Date('2025-01-23T10:00:00Z'))).toBe(
      'On 2025-01-23:\n\n[1] Otter facts\nURL: https://otters.example/facts\nOtters hold hands.\n\n[2] News\nURL: https://news.example/',
    );
    const body: Record<string, unknown> = { system: [{ type: 'text', text: 'Operator.', cache_control: { type: 'ephemeral' } }] };
    injectSystemText('messages', body, 'S');
    expect(body.system).toEqual([{ type: 'text', text: 'S' }, { type: 'text', text: 'Operator.', cache_control: { type: 'ephemeral' } }]);
    const chat: Record<string, unknown> = { messages: [{ role: 'developer', content: [{ type: 'text', text: 'D' }] }] };
    injectSystemText('chat_completions', chat, 'S');
    expect(chat.messages).toEqual([{ role: 'developer', content: [{ type: 'text', text: 'S' }, { type: 'text', text: 'D' }] }]);
  });

  it('a streamed chat answer gets the annotations chunk only when it carries text (tool calls only: none, as JSON)', async () => {
    const chunk = (delta: object, finish: string | null = null) => ({ data: JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] }) });
    async function* events(list: { data: string }[]) {
      yield* list;
    }
    const collect = async (list: { data: string }[]) => {
      const out: string[] = [];
      for await (const ev of chatStreamWithAnnotations(events(list), R)) out.push(ev.data);
      return out;
    };
    const tools = await collect([chunk({ role: 'assistant', tool_calls: [{ index: 0, id: 'x', type: 'function', function: { name: 'f', arguments: '{}' } }] }), chunk({}, 'tool_calls'), { data: '[DONE]' }]);
    expect(tools.some((d) => d.includes('annotations'))).toBe(false);
    const text = await collect([chunk({ role: 'assistant', content: 'Hi' }), chunk({}, 'stop'), { data: '[DONE]' }]);
    expect(text.filter((d) => d.includes('annotations'))).toHaveLength(1);
    // A stream that failed after its text: the error chunk (finish_reason "error") and no annotations.
    const error = { data: JSON.stringify({ id: 'c', object: 'chat.completion.chunk', error: { code: 502, message: 'cut' }, choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }] }) };
    const failed = await collect([chunk({ role: 'assistant', content: 'Hi' }), error, { data: '[DONE]' }]);
    expect(failed).toEqual([chunk({ role: 'assistant', content: 'Hi' }).data, error.data, '[DONE]']);
  });

  it('a JSON chat answer with tool calls and `content: ""` gets no annotations, as its stream would not', () => {
    const calls = [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }];
    const empty = { choices: [{ index: 0, message: { role: 'assistant', content: '', tool_calls: calls }, finish_reason: 'tool_calls' }] };
    expect(addCitations('chat_completions', empty, R)).toBe(0);
    expect(empty.choices[0].message).not.toHaveProperty('annotations');
    const withText = { choices: [{ index: 0, message: { role: 'assistant', content: 'Checking.', tool_calls: calls }, finish_reason: 'tool_calls' }] };
    expect(addCitations('chat_completions', withText, R)).toBe(2);
    expect((withText.choices[0].message as any).annotations).toHaveLength(2);
  });
});
