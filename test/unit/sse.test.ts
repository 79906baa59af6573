import { describe, it, expect } from 'vitest';
import { batched, batchesOf, DONE, formatSse, parseSse, parseSseBatches } from '../../src/providers/sse';
import type { SseEvent } from '../../src/pipeline/types';

const encoder = new TextEncoder();

async function* fromChunks<T>(chunks: readonly T[]): AsyncGenerator<T> {
  for (const c of chunks) yield c;
}

async function parseAll(chunks: readonly (Uint8Array | string)[]): Promise<SseEvent[]> {
  const out: SseEvent[] = [];
  for await (const ev of parseSse(fromChunks(chunks))) out.push(ev);
  return out;
}

/** Deterministic PRNG (mulberry32) so a failing chunking can be reproduced from its seed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function byteByByte(text: string): Uint8Array[] {
  const bytes = encoder.encode(text);
  return Array.from(bytes, (_b, i) => bytes.subarray(i, i + 1));
}

function randomChunks(text: string, seed: number, maxLen = 7): Uint8Array[] {
  const bytes = encoder.encode(text);
  const rand = prng(seed);
  const out: Uint8Array[] = [];
  let i = 0;
  while (i < bytes.length) {
    const len = 1 + Math.floor(rand() * maxLen);
    out.push(bytes.slice(i, i + len));
    i += len;
  }
  return out;
}

/** Every split of `text` into two byte chunks. */
function allTwoWaySplits(text: string): Uint8Array[][] {
  const bytes = encoder.encode(text);
  const out: Uint8Array[][] = [];
  for (let i = 0; i <= bytes.length; i++) out.push([bytes.slice(0, i), bytes.slice(i)]);
  return out;
}

/** Parses `text` whole, byte by byte, at every two-way split and in 50 random chunkings; all must agree. */
async function parseEveryWay(text: string): Promise<SseEvent[]> {
  const whole = await parseAll([encoder.encode(text)]);
  expect(await parseAll(byteByByte(text))).toEqual(whole);
  for (const split of allTwoWaySplits(text)) expect(await parseAll(split)).toEqual(whole);
  for (let seed = 1; seed <= 50; seed++) expect(await parseAll(randomChunks(text, seed))).toEqual(whole);
  return whole;
}

// A stream mixing everything: event names, a comment, multi-line data, \n / \r\n / \r line ends,
// multi-byte characters (2-, 3- and 4-byte UTF-8), ignored fields and [DONE].
const MIXED =
  ': keep-alive comment\n\n' +
  'event: message_start\n' +
  'data: {"type":"message_start"}\n\n' +
  'event: content_block_delta\r\n' +
  'data: {"text":"héllo 日本 🎉"}\r\n\r\n' +
  'data: line one\r' +
  'data: line two\r' +
  ': a comment between data lines\r' +
  'data: line three\r\r' +
  'id: 7\nretry: 100\ndata:no-space\n\n' +
  'data: [DONE]\n\n';

const MIXED_EVENTS: SseEvent[] = [
  { event: 'message_start', data: '{"type":"message_start"}' },
  { event: 'content_block_delta', data: '{"text":"héllo 日本 🎉"}' },
  { data: 'line one\nline two\nline three' },
  { data: 'no-space' },
  { data: '[DONE]' },
];

describe('parseSse', () => {
  it('parses a mixed stream fed whole', async () => {
    expect(await parseAll([encoder.encode(MIXED)])).toEqual(MIXED_EVENTS);
  });

  it('gives the same events byte by byte, at every split point and in random chunkings', async () => {
    expect(await parseEveryWay(MIXED)).toEqual(MIXED_EVENTS);
  });

  it('accepts string chunks and a mix of strings and bytes', async () => {
    expect(await parseAll([MIXED])).toEqual(MIXED_EVENTS);
    const half = Math.floor(MIXED.length / 2);
    expect(await parseAll([MIXED.slice(0, half), encoder.encode(MIXED.slice(half))])).toEqual(MIXED_EVENTS);
  });

  it('treats \\n, \\r\\n and \\r line ends alike', async () => {
    const expected: SseEvent[] = [
      { event: 'a', data: '1\n2' },
      { data: '3' },
    ];
    for (const eol of ['\n', '\r\n', '\r']) {
      const text = `event: a${eol}data: 1${eol}data: 2${eol}${eol}data: 3${eol}${eol}`;
      expect(await parseEveryWay(text), JSON.stringify(eol)).toEqual(expected);
    }
  });

  it('does not see an extra blank line when \\r\\n is split between two chunks', async () => {
    // If the '\r' at the end of a chunk were taken as a full line end, the '\n' opening the next chunk
    // would be an empty line and dispatch "a" early, splitting it from "b".
    const events = await parseAll(['data: a\r', '\ndata: b\r\n', '\r\n']);
    expect(events).toEqual([{ data: 'a\nb' }]);
  });

  it('a chunk ending in \\r ends its line and event at once (CR-only providers are not held a read late)', async () => {
    const batches: SseEvent[][] = [];
    async function* chunks() {
      yield 'data: one\r\r';
      // The first event is out before the next chunk is even asked for.
      expect(batches).toEqual([[{ data: 'one' }]]);
      yield '\ndata: two\r\n\r\n';
    }
    for await (const b of parseSseBatches(chunks())) batches.push(b);
    // The '\\n' that began the second chunk was the second half of a '\\r\\n', not a blank line of its own.
    expect(batches).toEqual([[{ data: 'one' }], [{ data: 'two' }]]);
  });

  it('skips a byte order mark before the first field', async () => {
    expect(await parseAll([new Uint8Array([0xef, 0xbb, 0xbf]), encoder.encode('data: first\n\ndata: second\n\n')])).toEqual([{ data: 'first' }, { data: 'second' }]);
    expect(await parseAll(['\ufeffevent: message_start\ndata: {}\n\n'])).toEqual([{ event: 'message_start', data: '{}' }]);
  });

  it('handles \\r\\r (a \\r line end followed by a blank line) split between chunks', async () => {
    expect(await parseAll(['data: a\r', '\r', 'data: b\r\r'])).toEqual([{ data: 'a' }, { data: 'b' }]);
  });

  it('joins multi-line data with \\n and keeps empty data lines', async () => {
    expect(await parseEveryWay('data: {\ndata:   "a": 1\ndata\ndata: }\n\n')).toEqual([{ data: '{\n  "a": 1\n\n}' }]);
  });

  it('strips exactly one space after the colon', async () => {
    expect(await parseAll(['data:x\n\ndata: x\n\ndata:  x\n\n'])).toEqual([{ data: 'x' }, { data: 'x' }, { data: ' x' }]);
  });

  it('ignores comment lines and comment-only blocks', async () => {
    expect(await parseEveryWay(': ping\n\n:\n\n: data: not data\ndata: real\n\n')).toEqual([{ data: 'real' }]);
  });

  it('applies the event name to its own block only', async () => {
    expect(await parseAll(['event: first\ndata: 1\n\ndata: 2\n\nevent: third\ndata: 3\n\n'])).toEqual([
      { event: 'first', data: '1' },
      { data: '2' },
      { event: 'third', data: '3' },
    ]);
  });

  it('does not yield a block without data (event name only)', async () => {
    expect(await parseAll(['event: lonely\n\ndata: x\n\n'])).toEqual([{ data: 'x' }]);
  });

  it('yields the last event when the stream has no trailing blank line', async () => {
    const cases: Record<string, SseEvent[]> = {
      'data: a\n\nevent: end\ndata: [DONE]': [{ data: 'a' }, { event: 'end', data: '[DONE]' }],
      'data: a\n\nevent: end\ndata: [DONE]\n': [{ data: 'a' }, { event: 'end', data: '[DONE]' }],
      'data: a\r\n\r\ndata: [DONE]\r\n': [{ data: 'a' }, { data: '[DONE]' }],
      'data: a\n\ndata: x\ndata: y': [{ data: 'a' }, { data: 'x\ny' }],
    };
    for (const [text, expected] of Object.entries(cases)) {
      expect(await parseEveryWay(text), JSON.stringify(text)).toEqual(expected);
    }
  });

  // Regression: a leftover buffer ending in '\r' used to be dropped at end of stream, so a last `data:`
  // line ended by a lone '\r' was lost while the same stream with '\n' or '\r\n' yielded the event.
  it('yields the last event when the stream ends with a lone \\r line end and no blank line', async () => {
    expect(await parseAll(['data: a\r\rdata: [DONE]\r'])).toEqual([{ data: 'a' }, { data: '[DONE]' }]);
  });

  it('gives the same last event with or without the final blank line', async () => {
    for (const text of ['data: a\ndata:', 'event: e\ndata: x', 'data: x\n: trailing comment', 'data: a\rdata: b']) {
      expect(await parseAll([text]), JSON.stringify(text)).toEqual(await parseAll([`${text}\n\n`]));
    }
  });

  // Regression: src/providers/sse.ts:40-43 — the end-of-stream flush re-parses the last line with its own rules
  // (`startsWith('data:')`), so a final bare `data` line (a field with an empty value, which adds an empty
  // line mid-stream) is ignored: 'data: a\ndata' at end of stream gives 'a', with '\n\n' after it 'a\n'.
  it('treats a bare `data` line at end of stream like mid-stream', async () => {
    expect(await parseAll(['data: a\ndata'])).toEqual([{ data: 'a\n' }]);
  });

  it('decodes multi-byte UTF-8 characters split across chunks', async () => {
    const text = 'data: {"t":"é日🎉ß"}\n\n';
    const bytes = encoder.encode(text);
    const start = bytes.indexOf(0xf0); // first byte of the 4-byte emoji
    // Split inside the emoji after 1, 2 and 3 of its bytes.
    for (const cut of [start + 1, start + 2, start + 3]) {
      const events = await parseAll([bytes.slice(0, cut), bytes.slice(cut)]);
      expect(events).toEqual([{ data: '{"t":"é日🎉ß"}' }]);
    }
    expect(await parseAll(byteByByte(text))).toEqual([{ data: '{"t":"é日🎉ß"}' }]);
  });

  it('turns invalid UTF-8 into U+FFFD, also a truncated character at the very end', async () => {
    const bad = new Uint8Array([...encoder.encode('data: a'), 0xff, ...encoder.encode('b\n\n')]);
    expect(await parseAll([bad])).toEqual([{ data: 'a\uFFFDb' }]);
    const cut = encoder.encode('data: x🎉').slice(0, -2); // the emoji's last two bytes never come
    expect(await parseAll([cut])).toEqual([{ data: 'x\uFFFD' }]);
  });

  it('passes [DONE] through as plain data', async () => {
    const events = await parseAll(['data: {"a":1}\n\ndata: [DONE]\n\n']);
    expect(events.at(-1)).toEqual({ data: '[DONE]' });
    expect(events.at(-1)).toEqual(DONE);
  });

  it('a provider stream (jsonData) whose body ends inside an event fails after the events before it; a whole last event without its blank line is delivered', async () => {
    const read = async (chunks: string[]) => {
      const out: SseEvent[] = [];
      try {
        for await (const batch of parseSseBatches(fromChunks(chunks), [], true)) out.push(...batch);
      } catch (err) {
        return { out, err: (err as Error).message };
      }
      return { out, err: null };
    };
    const whole = '{"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}';
    // Cut just after a `}`: braces at both ends, but no JSON.
    const cut = '{"id":"c","choices":[{"index":0,"delta":{"content":"there"}';
    expect(await read([`data: ${whole}\n\ndata: ${cut}`])).toEqual({ out: [{ data: whole }], err: expect.stringContaining('inside an event') });
    expect(await read([`data: ${whole}\n\n`, `data: ${cut}\n`])).toEqual({ out: [{ data: whole }], err: expect.stringContaining('inside an event') });
    expect(await read([`data: ${whole}\n\ndata: ${whole}`])).toEqual({ out: [{ data: whole }, { data: whole }], err: null });
    expect(await read([`data: ${whole}\n\ndata: [DONE]`])).toEqual({ out: [{ data: whole }, { data: '[DONE]' }], err: null });
    expect(await read(['event: message_stop\ndata: {"type":"message_stop"}\n'])).toEqual({ out: [{ event: 'message_stop', data: '{"type":"message_stop"}' }], err: null });
    // Without jsonData (any SSE), the last event is delivered as it came.
    expect(await parseAll([`data: ${cut}`])).toEqual([{ data: cut }]);
  });

  it('yields nothing for an empty stream or a stream of blank lines', async () => {
    expect(await parseAll([])).toEqual([]);
    expect(await parseAll(['\n\n\r\n\r'])).toEqual([]);
  });
});

describe('formatSse', () => {
  it('writes data-only and named events with a terminating blank line', () => {
    expect(formatSse({ data: '{"a":1}' })).toBe('data: {"a":1}\n\n');
    expect(formatSse({ event: 'ping', data: '{}' })).toBe('event: ping\ndata: {}\n\n');
    expect(formatSse(DONE)).toBe('data: [DONE]\n\n');
  });

  it('round-trips formatSse → parseSse in any chunking', async () => {
    const events: SseEvent[] = [
      { event: 'message_start', data: JSON.stringify({ type: 'message_start', message: { id: 'gen-1' } }) },
      { event: 'content_block_delta', data: JSON.stringify({ delta: { text: 'ünïcødé 🎉\nnew line in JSON' } }) },
      { data: JSON.stringify({ choices: [{ delta: { content: ': not a comment' } }] }) },
      { data: ' leading space' },
      { data: '' },
      DONE,
    ];
    const wire = events.map(formatSse).join('');
    expect(await parseEveryWay(wire)).toEqual(events);
  });

  // Regression: formatSse once wrote multi-line data after a single `data: ` prefix, so the client got
  // only the first line (parseSse produces such data from a multi-line block, and the messages dialect
  // relays events like content_block_delta unchanged).
  it('round-trips multi-line data', async () => {
    const ev: SseEvent = { event: 'content_block_delta', data: '{\n  "type": "content_block_delta"\n}' };
    expect(await parseAll([formatSse(ev)])).toEqual([ev]);
  });
});

describe('parseSseBatches and batched streams', () => {
  async function* chunks(...parts: string[]) {
    for (const p of parts) yield Buffer.from(p);
  }

  it('gives the events completed by one chunk together, and never an empty batch', async () => {
    const out: string[][] = [];
    for await (const batch of parseSseBatches(chunks('data: a\n\ndata: b\n\nda', 'ta: c\n', '\n', ': only a comment\n\n', 'data: d'))) out.push(batch.map((e) => e.data));
    expect(out).toEqual([['a', 'b'], ['c'], ['d']]);
  });

  it('reads the same events one by one or a batch at a time, and a plain stream as batches of one', async () => {
    const events = () => batched(() => parseSseBatches(chunks('data: 1\n\ndata: 2\n\n', 'data: 3\n\n')));
    const one: string[] = [];
    for await (const ev of events()) one.push(ev.data);
    const batches: string[][] = [];
    const it = batchesOf(events());
    for (let r = await it.next(); !r.done; r = await it.next()) batches.push(r.value.map((e) => e.data));
    expect(one).toEqual(['1', '2', '3']);
    expect(batches).toEqual([['1', '2'], ['3']]);
    const plain = batchesOf(parseSse(chunks('data: x\n\ndata: y\n\n')));
    expect((await plain.next()).value).toEqual([{ data: 'x' }]);
    expect((await plain.next()).value).toEqual([{ data: 'y' }]);
  });

  it('closes the source when a per-event reader stops early', async () => {
    let closed = false;
    async function* source() {
      try {
        yield [{ data: 'a' }, { data: 'b' }];
        yield [{ data: 'c' }];
      } finally {
        closed = true;
      }
    }
    for await (const ev of batched(source)) if (ev.data === 'a') break;
    expect(closed).toBe(true);
  });
});

describe('parseSse bounds', () => {
  it('a 10 M-character line in 64 KB pieces is one event (each piece is searched once, the pieces joined once)', async () => {
    const value = 'y'.repeat(10 * 1024 * 1024);
    const text = `data: ${value}\n\n`;
    const pieces: string[] = [];
    for (let i = 0; i < text.length; i += 65536) pieces.push(text.slice(i, i + 65536));
    const events = await parseAll(pieces);
    expect(events).toHaveLength(1);
    expect(events[0].data.length).toBe(value.length);
    expect(events[0].data === value).toBe(true);
  });

  it('a line or an event over 16 M characters fails the stream as the provider\'s (it was held whole, without bound)', async () => {
    const line = 'z'.repeat(17 * 1024 * 1024);
    await expect(parseAll([`data: ${line.slice(0, 9_000_000)}`, line.slice(9_000_000)])).rejects.toMatchObject({ errorType: 'provider_unavailable' });
    // Data lines without the blank line that ends their event, 1 M characters each.
    const lines = Array.from({ length: 17 }, () => `data: ${'w'.repeat(1024 * 1024)}\n`);
    await expect(parseAll(lines)).rejects.toMatchObject({ errorType: 'provider_unavailable' });
  });

  it('lines across pieces keep their line ends: \\r\\n split between pieces, a BOM, a data line split anywhere', async () => {
    const events = await parseAll(['\ufeffda', 'ta: {"a"', ':1}\r', '\n\r\nevent: x\rda', 'ta: 2\r\n', '\r\n']);
    expect(events).toEqual([{ data: '{"a":1}' }, { event: 'x', data: '2' }]);
  });
});

describe('parseSse redaction of the call\'s credentials', () => {
  async function events(chunks: string[], redact: string[]): Promise<SseEvent[]> {
    const out: SseEvent[] = [];
    for await (const ev of parseSse((async function* () { yield* chunks.map((c) => Buffer.from(c)); })(), redact)) out.push(ev);
    return out;
  }

  it('a key written back with \\u escapes (the same text for any JSON reader) is caught as the literal one is', async () => {
    const key = 'sk-operator-0123456789abcdef';
    const escaped = `\\u0073\\u006b${key.slice(2)}`; // "sk-…" as JSON reads it
    const got = await events([`data: {"error":{"message":"Incorrect API key provided: ${escaped.slice(0, 9)}`, `${escaped.slice(9)}","type":"invalid_request_error"}}\n\n`, 'data: {"a":"caf\\u00e9 \\u003c\\u0026"}\n\n'], [key]);
    expect(JSON.parse(got[0].data)).toEqual({ error: { message: 'Incorrect API key provided: [redacted]', type: 'invalid_request_error' } });
    expect(JSON.stringify(JSON.parse(got[0].data))).not.toContain(key);
    // Escapes that cannot spell a key (non-ASCII, Go's HTML-safe `<` and `&`) leave the event as it came.
    expect(got[1].data).toBe('{"a":"caf\\u00e9 \\u003c\\u0026"}');
  });
});
