import { StringDecoder } from 'node:string_decoder';
import type { SseEvent } from '../pipeline/types';
import { GatewayError } from '../errors/gateway-error';
import { withoutCredentials, withoutEscapedCredentials } from './credentials';

/**
 * The one SSE module: parses an upstream byte stream into events and formats events for the client.
 * Handles `\n`, `\r\n` and `\r` line ends, multi-line `data:`, comments (`:`) and chunk boundaries anywhere.
 * `redact`: credentials the call was sent with, replaced in each event's data (a provider may echo its key
 * in an in-band error; the check runs on whole events, so a key split across chunks is caught too).
 *
 * @example for await (const ev of parseSse(response.body)) console.log(ev.event, ev.data);
 */
export async function* parseSse(body: AsyncIterable<Uint8Array | string>, redact: readonly string[] = []): AsyncGenerator<SseEvent> {
  for await (const batch of parseSseBatches(body, redact)) yield* batch;
}

/**
 * `parseSse` a batch at a time: the events completed by one chunk of the body come out together (never an
 * empty batch). A provider often sends many events per TCP read; passing them on together saves an
 * async-iteration step per event on the gateway's stream path (see `BatchedEvents`). `jsonData`: the events'
 * data is JSON or `[DONE]` (a provider's stream), so an event the body ended in whose data does not parse is a
 * cut, thrown as a GatewayError after the events before it.
 */
export async function* parseSseBatches(body: AsyncIterable<Uint8Array | string>, redact: readonly string[] = [], jsonData = false): AsyncGenerator<SseEvent[]> {
  // Node's StringDecoder: like a streaming TextDecoder (a character split between chunks is kept for the
  // next one, invalid bytes become U+FFFD) at about a quarter of its cost per chunk.
  const decoder = new StringDecoder('utf8');
  // The unfinished line, in the pieces it came in: it holds no line end, so each chunk is searched from its
  // own start and the pieces are joined once, when the line ends (one long line searched and re-joined whole
  // at every chunk was quadratic: 50 MB took 90 s of the event loop).
  let pending: string[] = [];
  let pendingChars = 0;
  let event: string | undefined;
  /** The event's data lines so far, joined with '\n' (null: no data line yet). */
  let data: string | null = null;
  const addData = (value: string) => {
    data = data === null ? value : `${data}\n${value}`;
    if (data.length > MAX_EVENT_CHARS) throw tooLong();
  };
  /** Applies one line; returns the finished event on a blank line. */
  const line = (text: string): SseEvent | undefined => {
    if (text === '') {
      let done: SseEvent | undefined;
      if (data !== null) {
        const joined = redact.length > 0 ? withoutEscapedCredentials(withoutCredentials(data, redact), redact) : data;
        done = event === undefined ? { data: joined } : { event, data: joined };
      }
      event = undefined;
      data = null;
      return done;
    }
    if (text.charCodeAt(0) === 58 /* : comment */) return undefined;
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? '' : text.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === 'data') addData(value);
    else if (field === 'event') event = value;
    return undefined;
  };
  /** The last chunk ended with '\r': a '\n' starting the next one is the second half of that line end. */
  let crAtEnd = false;
  let first = true;
  for await (const chunk of body) {
    const text = typeof chunk === 'string' ? chunk : decoder.write(chunk);
    if (text === '') continue;
    let start = 0;
    if (first) {
      first = false;
      if (text.charCodeAt(0) === 0xfeff) start = 1; // a byte order mark is not part of the first field
    }
    if (crAtEnd && text.length > start) {
      crAtEnd = false;
      if (text.charCodeAt(start) === 10) start++;
    }
    const hasCr = text.includes('\r');
    let batch: SseEvent[] | undefined;
    for (;;) {
      const nl = nextLineEnd(text, start, hasCr);
      if (nl < 0) break;
      // The line is text[start, nl), or, when it began in an earlier chunk, its pieces joined.
      let src = text;
      let from = start;
      let to = nl;
      if (pending.length > 0) {
        pending.push(text.slice(start, nl));
        src = pending.join('');
        [from, to] = [0, src.length];
        pending = [];
        pendingChars = 0;
      }
      let ev: SseEvent | undefined;
      // The common lines, `data: <json>` and the blank line after it, are read without field and value slices.
      if (to === from) ev = line('');
      else if (src.startsWith('data: ', from) && to > from + 6) addData(src.slice(from + 6, to));
      else ev = line(src.slice(from, to));
      if (!hasCr) start = nl + 1;
      else {
        const cr = text.charCodeAt(nl) === 13;
        start = nl + (cr && text.charCodeAt(nl + 1) === 10 ? 2 : 1);
        if (start === text.length && cr) crAtEnd = true;
      }
      if (ev) (batch ??= []).push(ev);
    }
    // What is left is a partial line.
    if (start < text.length) {
      pending.push(start === 0 ? text : text.slice(start));
      pendingChars += text.length - start;
      if (pendingChars > MAX_EVENT_CHARS) throw tooLong();
    }
    if (batch) yield batch;
  }
  // End of stream: the unfinished line still counts, and an event without its blank line is delivered. With
  // `jsonData` (a provider's stream: every event's data is JSON or `[DONE]`) only when it is whole: a provider may
  // leave out the last blank line, but data that does not parse was cut by the end of the body, wherever it fell. Relayed, such a cut (just after a `}` it looks whole to the string
  // paths) reached the client as a broken chunk, and before any output it stopped failover; it fails the
  // attempt instead, as a connection lost mid-answer does.
  const rest: SseEvent[] = [];
  for (const text of (pending.join('') + decoder.end()).split(/\r\n|\r|\n/)) {
    const ev = line(text);
    if (ev) rest.push(ev);
  }
  const last = line('');
  if (last) rest.push(last);
  // (Every event completed here lacked its blank line: the unfinished line holds no line end.)
  const cut = jsonData ? rest.findIndex((ev) => !wholeData(ev.data)) : -1;
  if (cut >= 0) {
    if (cut > 0) yield rest.slice(0, cut);
    throw new GatewayError('provider_unavailable', 'The provider ended its stream inside an event (its data is cut short)');
  }
  if (rest.length > 0) yield rest;
}

/** Whether an event's data is whole: `[DONE]`, or JSON that parses (read only for an event the body ended in). */
function wholeData(data: string): boolean {
  if (data === '[DONE]') return true;
  try {
    JSON.parse(data);
    return true;
  } catch {
    return false;
  }
}

/** The longest line or event a stream may send (characters): past it the stream fails rather than hold it all. */
export const MAX_EVENT_CHARS = 16 * 1024 * 1024;

function tooLong(): GatewayError {
  return new GatewayError('provider_unavailable', `The provider sent a stream event or line over ${MAX_EVENT_CHARS / 1024 / 1024} M characters`);
}

/**
 * A stream of events that can also be read a batch at a time (the events that arrived together). Stages
 * that wrap a response's `events` see a plain `AsyncIterable<SseEvent>`; the gateway's own stream path
 * (routing's relay, the SSE writer) reads `batches()` and takes one async step per batch, not per event.
 * Like any stream, it is read once, one way or the other.
 */
export interface BatchedEvents extends AsyncIterable<SseEvent> {
  batches(): AsyncIterator<SseEvent[]>;
}

/** @example const events = batched(() => parseSseBatches(body)); */
export function batched(source: () => AsyncIterator<SseEvent[]>): BatchedEvents {
  return {
    batches: source,
    async *[Symbol.asyncIterator]() {
      const it = source();
      try {
        for (let r = await it.next(); !r.done; r = await it.next()) yield* r.value;
      } finally {
        await it.return?.();
      }
    },
  };
}

/** `events` a batch at a time: its own batches when it has them, else one event per batch. */
export function batchesOf(events: AsyncIterable<SseEvent>): AsyncIterator<SseEvent[]> {
  const own = (events as Partial<BatchedEvents>).batches;
  if (typeof own === 'function') return own.call(events);
  return (async function* () {
    for await (const ev of events) yield [ev];
  })();
}

function nextLineEnd(s: string, from: number, hasCr: boolean): number {
  const nl = s.indexOf('\n', from);
  if (!hasCr) return nl; // the common case: '\n' line ends only, found natively
  const cr = s.indexOf('\r', from);
  if (cr < 0 || (nl >= 0 && nl < cr)) return nl;
  // A '\r' at the very end ends its line now (a provider using '\r' alone must not wait for its next
  // write); a '\n' starting the next chunk is then skipped as that '\r\n's second half.
  return cr;
}

/** One event in wire form. */
export function formatSse(ev: SseEvent): string {
  // JSON text has no raw line breaks, so the common case is one `data:` line; other text is split.
  const data = ev.data.includes('\n') ? ev.data.split('\n').join('\ndata: ') : ev.data;
  return ev.event === undefined ? `data: ${data}\n\n` : `event: ${ev.event}\ndata: ${data}\n\n`;
}

export const DONE: SseEvent = { data: '[DONE]' };
