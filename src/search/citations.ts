import type { SseEvent } from '../pipeline/types';
import type { SearchResult } from './backends';
import { textHead } from '../text-cut';

type Obj = Record<string, unknown>;
type Dialect = 'chat_completions' | 'messages';
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

/** Longest `cited_text` of a messages citation (Anthropic's own web search citations stay around this size). */
const CITED_TEXT_CHARS = 150;

/**
 * The text put into the system prompt: the operator's (or request's) `search_prompt` with `{date}` replaced
 * by today's UTC date, then the results numbered from 1 (title, URL, snippet).
 *
 * @example searchPromptText('Searched on {date}.', [{url: 'https://a.example/x', title: 'A', snippet: 's'}], new Date())
 */
export function searchPromptText(template: string, results: SearchResult[], now: Date): string {
  const head = template.replaceAll('{date}', now.toISOString().slice(0, 10));
  const sources = results.map((r, i) => `[${i + 1}] ${r.title}\nURL: ${r.url}${r.snippet ? `\n${r.snippet}` : ''}`);
  return `${head}\n\n${sources.join('\n\n')}`;
}

/**
 * Puts `text` first in the request's system prompt, in its dialect: chat prepends it to a leading
 * system/developer message (string or text parts) or inserts a system message at the start; messages
 * prepends it to `system` (string or blocks) or sets it.
 */
export function injectSystemText(dialect: Dialect, body: Obj, text: string): void {
  if (dialect === 'messages') {
    const system = body.system;
    if (typeof system === 'string' && system.length > 0) body.system = `${text}\n\n${system}`;
    else if (Array.isArray(system)) body.system = [{ type: 'text', text }, ...system];
    else body.system = text;
    return;
  }
  const messages = Array.isArray(body.messages) ? body.messages : (body.messages = []);
  const first = messages[0] as Obj | undefined;
  if (isObj(first) && (first.role === 'system' || first.role === 'developer')) {
    if (typeof first.content === 'string') first.content = `${text}\n\n${first.content}`;
    else if (Array.isArray(first.content)) first.content = [{ type: 'text', text }, ...first.content];
    else first.content = text;
    return;
  }
  messages.unshift({ role: 'system', content: text });
}

/** Where the answer links a result: a markdown link `[…](url)`, else the bare URL; null when it does not. */
export function linkSpan(text: string, url: string): { start: number; end: number } | null {
  const variants = url.endsWith('/') ? [url, url.slice(0, -1)] : [url, `${url}/`];
  for (const u of variants) {
    const at = text.indexOf(`](${u})`);
    if (at < 0) continue;
    const open = text.lastIndexOf('[', at);
    if (open >= 0) return { start: open, end: at + u.length + 3 };
  }
  for (const u of variants) {
    const at = text.indexOf(u);
    if (at >= 0 && !/[\w/]/.test(text[at + u.length] ?? '')) return { start: at, end: at + u.length };
  }
  return null;
}

/**
 * Chat `message.annotations` for an answer: one `url_citation` per result, in result order. A result the
 * answer links gets the span of its (first) link; one it does not link gets the empty span 0..0 (the answer
 * was still grounded on it).
 */
export function chatAnnotations(text: string, results: SearchResult[]): Obj[] {
  return results.map((r) => {
    const span = linkSpan(text, r.url) ?? { start: 0, end: 0 };
    const citation: Obj = { url: r.url, title: r.title, start_index: span.start, end_index: span.end };
    if (r.snippet) citation.content = r.snippet;
    return { type: 'url_citation', url_citation: citation };
  });
}

/** A messages `web_search_result_location` citation; `encrypted_index` is the result's number, not encrypted. */
export function messagesCitation(r: SearchResult, index: number): Obj {
  return { type: 'web_search_result_location', url: r.url, title: r.title, encrypted_index: String(index + 1), cited_text: textHead(r.snippet, CITED_TEXT_CHARS) };
}

/**
 * Adds citations to a non-streaming answer body (in place). Chat: `choices[0].message.annotations`
 * (appended to any the provider sent). Messages: `citations` on text blocks: a result goes on the text block
 * that links it, else on the first text block. Nothing is added to an answer without assistant text.
 */
export function addCitations(dialect: Dialect, body: unknown, results: SearchResult[]): number {
  if (!isObj(body) || results.length === 0) return 0;
  if (dialect === 'chat_completions') {
    const choice = Array.isArray(body.choices) ? body.choices[0] : undefined;
    const message = isObj(choice) ? choice.message : undefined;
    // No text, no citations: a tool-call-only answer may carry `content: ""` (several OpenAI-compatible
    // providers send it so) as well as null, and its stream gets none either.
    if (!isObj(message) || typeof message.content !== 'string' || message.content === '') return 0;
    const existing = Array.isArray(message.annotations) ? message.annotations : [];
    message.annotations = [...existing, ...chatAnnotations(message.content, results)];
    return results.length;
  }
  if (!Array.isArray(body.content)) return 0;
  const blocks = body.content.filter((b): b is Obj & { text: string } => isObj(b) && b.type === 'text' && typeof b.text === 'string');
  if (blocks.length === 0) return 0;
  results.forEach((r, i) => {
    const block = blocks.find((b) => linkSpan(b.text, r.url)) ?? blocks[0];
    block.citations = [...(Array.isArray(block.citations) ? block.citations : []), messagesCitation(r, i)];
  });
  return results.length;
}

/**
 * Wraps a chat stream so it carries `delta.annotations` in one extra chunk, sent just before the chunk that
 * holds `finish_reason` (or before `[DONE]` when none came). Spans are computed on the streamed text. A stream
 * that ends in an error chunk gets none.
 */
export async function* chatStreamWithAnnotations(events: AsyncIterable<SseEvent>, results: SearchResult[]): AsyncIterable<SseEvent> {
  let text = '';
  let sent = false;
  let last: Obj | null = null;
  const annotationChunk = (like: Obj | null): SseEvent => {
    // Every chat chunk carries `provider` (spec 6.1.3): taken from the provider's chunk before it, as id and model are.
    const base = like ? { id: like.id, object: like.object, created: like.created, model: like.model, provider: like.provider } : { object: 'chat.completion.chunk' };
    return { data: JSON.stringify({ ...base, choices: [{ index: 0, delta: { annotations: chatAnnotations(text, results) }, finish_reason: null }] }) };
  };
  for await (const ev of events) {
    if (!sent && ev.data === '[DONE]') {
      sent = true;
      if (text) yield annotationChunk(last); // a tool-call-only answer gets none, as a JSON one
    } else if (!sent) {
      const chunk = parse(ev.data);
      const choice = chunk && Array.isArray(chunk.choices) ? (chunk.choices as Obj[]).find((c) => isObj(c) && (c.index ?? 0) === 0) : undefined;
      // A failed stream (the error chunk, finish_reason "error") gets none: its answer is not one to cite.
      if (chunk?.error || (isObj(choice) && choice.finish_reason === 'error')) {
        sent = true;
        yield ev;
        continue;
      }
      if (chunk) last = chunk;
      const delta = isObj(choice) && isObj(choice.delta) ? choice.delta : undefined;
      if (delta && typeof delta.content === 'string') text += delta.content;
      if (isObj(choice) && choice.finish_reason != null) {
        // A finish chunk that also carries text goes first, so the spans include that text.
        if (typeof delta?.content === 'string' && delta.content.length > 0) {
          yield ev;
          sent = true;
          if (text) yield annotationChunk(last); // a tool-call-only answer gets none, as a JSON one
          continue;
        }
        sent = true;
        if (text) yield annotationChunk(last); // a tool-call-only answer gets none, as a JSON one
      }
    }
    yield ev;
  }
}

/**
 * Wraps a messages stream so the first text block gets every result as a `citations_delta`, sent just before
 * that block's `content_block_stop`.
 */
export async function* messagesStreamWithCitations(events: AsyncIterable<SseEvent>, results: SearchResult[]): AsyncIterable<SseEvent> {
  let textIndex: number | null = null;
  let done = false;
  for await (const ev of events) {
    if (!done) {
      const data = parse(ev.data);
      if (data?.type === 'content_block_start' && textIndex === null && isObj(data.content_block) && data.content_block.type === 'text') {
        textIndex = data.index as number;
      } else if (data?.type === 'content_block_stop' && data.index === textIndex) {
        done = true;
        for (const [i, r] of results.entries()) {
          const delta = { type: 'content_block_delta', index: textIndex, delta: { type: 'citations_delta', citation: messagesCitation(r, i) } };
          yield { event: 'content_block_delta', data: JSON.stringify(delta) };
        }
      }
    }
    yield ev;
  }
}

function parse(data: string): Obj | null {
  try {
    const v = JSON.parse(data);
    return isObj(v) ? v : null;
  } catch {
    return null;
  }
}
