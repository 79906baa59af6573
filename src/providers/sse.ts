import type { SseEvent } from '../pipeline/types';

/**
 * The one SSE module: parses an upstream byte stream into events and formats events for the client.
 * Handles `\n`, `\r\n` and `\r` line ends, multi-line `data:`, comments (`:`) and chunk boundaries anywhere.
 *
 * @example for await (const ev of parseSse(response.body)) console.log(ev.event, ev.data);
 */
export async function* parseSse(body: AsyncIterable<Uint8Array | string>): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buffer = '';
  let event: string | undefined;
  let data: string[] = [];
  for await (const chunk of body) {
    buffer += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
    let start = 0;
    for (;;) {
      const nl = nextLineEnd(buffer, start);
      if (nl < 0) break;
      const line = buffer.slice(start, nl);
      start = nl + (buffer[nl] === '\r' && buffer[nl + 1] === '\n' ? 2 : 1);
      if (line === '') {
        if (data.length > 0) yield event === undefined ? { data: data.join('\n') } : { event, data: data.join('\n') };
        event = undefined;
        data = [];
        continue;
      }
      if (line.charCodeAt(0) === 58 /* : */) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.charCodeAt(0) === 32) value = value.slice(1);
      if (field === 'data') data.push(value);
      else if (field === 'event') event = value;
    }
    buffer = buffer.slice(start);
    // A lone '\r' at the end may be the first half of '\r\n': keep it for the next chunk.
  }
  buffer += decoder.decode();
  if (buffer.length > 0 && !buffer.endsWith('\r')) {
    for (const line of buffer.split(/\r\n|\r|\n/)) {
      if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      else if (line.startsWith('event:')) event = line.slice(6).replace(/^ /, '');
    }
  }
  if (data.length > 0) yield event === undefined ? { data: data.join('\n') } : { event, data: data.join('\n') };
}

function nextLineEnd(s: string, from: number): number {
  for (let i = from; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 10) return i;
    if (c === 13) return i + 1 < s.length ? i : -1; // wait to see whether '\n' follows
  }
  return -1;
}

/** One event in wire form. */
export function formatSse(ev: SseEvent): string {
  return ev.event === undefined ? `data: ${ev.data}\n\n` : `event: ${ev.event}\ndata: ${ev.data}\n\n`;
}

export const DONE: SseEvent = { data: '[DONE]' };
