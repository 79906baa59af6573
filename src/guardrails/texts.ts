import { isUtf8 } from 'node:buffer';
import type { EndpointId } from '../pipeline/types';
import { redact, type Finding } from './detectors';
import { textRun, type TextPart } from './text-run';

/** One text the model will read, with a way to replace it in the request body (redaction). */
export interface TextSlot {
  text: string;
  /** Where it is, for logs and tests, e.g. `messages[2].content[0].text`. */
  path: string;
  /** Set by the operator's app rather than the conversation: the system prompt (prompt-injection skips it). */
  system: boolean;
  set(value: string): void;
  /** Replaces each finding (offsets in `text`) by its `[REDACTED:<name>]` marker in the request body. */
  redact(findings: readonly Finding[]): void;
  /**
   * A text of several parts read the other way a provider may show it: the parts with a line break between
   * (`text` joins them with nothing). `toJoined` maps an offset in it to the offset in `text`.
   */
  spaced?: { text: string; toJoined(offset: number): number };
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A slot for one place in the body: redaction writes the redacted text back through `set`. */
export function single(text: string, path: string, system: boolean, set: (v: string) => void): TextSlot {
  return { text, path, system, set, redact: (findings) => set(redact(text, findings)) };
}

function slot(holder: Obj, field: string, path: string, system: boolean, out: TextSlot[]): void {
  const text = holder[field];
  if (typeof text !== 'string' || text === '') return;
  out.push(single(text, path, system, (v) => (holder[field] = v)));
}

/**
 * Content blocks of either dialect: `text` blocks/parts, tool results (their string or block content), text
 * documents (`source.type: text` data, or `source.type: content` blocks) and search results. Images, audio
 * and binary files carry no text the guardrail can read and are left alone.
 *
 * The text parts of one list are one text, joined with nothing between (`text-run.ts`): the model reads
 * them together, so `"pipe"` + `" bomb"` is judged as `pipe bomb`. The other blocks between them (images,
 * files, documents, tool results) do not split that text; their own texts are judged apart.
 */
function blocks(list: unknown[], path: string, system: boolean, out: TextSlot[]): void {
  const parts: TextPart[] = [];
  let runAt = -1;
  const part = (p: TextPart) => {
    // The run takes the place of its first part among the slots (the order texts are judged and reported in).
    if (runAt < 0) runAt = out.push(null as unknown as TextSlot) - 1;
    parts.push(p);
  };
  list.forEach((b, i) => {
    const at = `${path}[${i}]`;
    if (typeof b === 'string') {
      if (b !== '') part({ index: i, text: b, path: at, set: (v) => (list[i] = v) });
      return;
    }
    if (!isObj(b)) return;
    switch (b.type) {
      case 'text':
      case 'input_text':
        if (typeof b.text === 'string' && b.text !== '') part({ index: i, text: b.text, path: `${at}.text`, block: b, set: (v) => (b.text = v) });
        break;
      case 'refusal':
        slot(b, 'refusal', `${at}.refusal`, system, out);
        break;
      case 'file':
        // A chat file part of plain text: the model reads its decoded text.
        if (isObj(b.file)) textDataUrl(b.file, 'file_data', `${at}.file.file_data`, system, out);
        break;
      case 'search_result':
      case 'tool_result':
      case 'mcp_tool_result':
        // The model reads a search result's title with its content (it cites it).
        if (b.type === 'search_result') slot(b, 'title', `${at}.title`, system, out);
        if (typeof b.content === 'string') slot(b, 'content', `${at}.content`, system, out);
        else if (Array.isArray(b.content)) blocks(b.content, `${at}.content`, system, out);
        break;
      case 'web_fetch_tool_result':
        // A page the server-side web fetch read: a document the model reads (it had passed unchecked).
        if (isObj(b.content) && isObj(b.content.content)) blocks([b.content.content], `${at}.content`, system, out);
        break;
      case 'document': {
        // A document's title and context go into the prompt with its text, whatever its source.
        slot(b, 'title', `${at}.title`, system, out);
        slot(b, 'context', `${at}.context`, system, out);
        const source = b.source;
        if (isObj(source) && source.type === 'text') slot(source, 'data', `${at}.source.data`, system, out);
        else if (isObj(source) && source.type === 'base64' && source.media_type === 'text/plain') base64Text(source, 'data', `${at}.source.data`, system, out);
        else if (isObj(source) && source.type === 'content') content(source, `${at}.source`, system, out);
        break;
      }
    }
  });
  if (runAt >= 0) out[runAt] = textRun(list, parts, system);
}

function content(holder: Obj, path: string, system: boolean, out: TextSlot[]): void {
  if (typeof holder.content === 'string') slot(holder, 'content', `${path}.content`, system, out);
  else if (Array.isArray(holder.content)) blocks(holder.content, `${path}.content`, system, out);
}

/**
 * The text of a plain-text file's bytes, and how a redaction is written back: UTF-8 when the bytes are
 * valid UTF-8, else Latin-1 (one character a byte, so every other byte goes back as it came; a Latin-1 `é`
 * decoded as UTF-8 had come back as U+FFFD). Redaction markers are ASCII, the same in both.
 */
function fileText(bytes: Buffer): { text: string; encoding: 'utf8' | 'latin1' } {
  const encoding = isUtf8(bytes) ? 'utf8' : 'latin1';
  return { text: bytes.toString(encoding), encoding };
}

/** Base64 text in `holder[field]`: checked decoded, written back encoded. */
function base64Text(holder: Obj, field: string, path: string, system: boolean, out: TextSlot[]): void {
  const data = holder[field];
  if (typeof data !== 'string' || data === '') return;
  const { text, encoding } = fileText(Buffer.from(data, 'base64'));
  out.push(single(text, path, system, (v) => (holder[field] = Buffer.from(v, encoding).toString('base64'))));
}

/** A `data:text/plain;base64,…` URL in `holder[field]`: its text, checked decoded, written back encoded. */
function textDataUrl(holder: Obj, field: string, path: string, system: boolean, out: TextSlot[]): void {
  const url = holder[field];
  const m = typeof url === 'string' ? /^data:text\/plain[^,]*;base64,/i.exec(url) : null;
  if (!m) return;
  const head = m[0];
  const { text, encoding } = fileText(Buffer.from((url as string).slice(head.length), 'base64'));
  out.push(single(text, path, system, (v) => (holder[field] = head + Buffer.from(v, encoding).toString('base64'))));
}

/** Every `description` and `title` in a JSON schema the model is given (the answer format): it reads them. */
function schemaTexts(schema: unknown, path: string, out: TextSlot[], depth = 0): void {
  if (depth > 32) return;
  if (Array.isArray(schema)) schema.forEach((v, i) => schemaTexts(v, `${path}[${i}]`, out, depth + 1));
  else if (isObj(schema)) {
    for (const [k, v] of Object.entries(schema)) {
      if ((k === 'description' || k === 'title') && typeof v === 'string') slot(schema, k, `${path}.${k}`, false, out);
      else schemaTexts(v, `${path}.${k}`, out, depth + 1);
    }
  }
}

/**
 * Every text of a request body the model will read, in order: the system prompt, then each message's text
 * content, tool results and text documents. Chat-completions `system`/`developer` messages count as system;
 * `tool` messages are tool results.
 *
 * @example for (const s of requestTexts(body, 'messages')) s.set(s.text.replace(/secret/g, '[REDACTED]'));
 */
export function requestTexts(body: Obj, endpoint: EndpointId): TextSlot[] {
  const out: TextSlot[] = [];
  if (endpoint === 'messages') {
    if (typeof body.system === 'string') slot(body, 'system', 'system', true, out);
    else if (Array.isArray(body.system)) blocks(body.system, 'system', true, out);
  }
  if (Array.isArray(body.messages)) {
    body.messages.forEach((m, i) => {
      if (!isObj(m)) return;
      const system = endpoint === 'chat_completions' && (m.role === 'system' || m.role === 'developer');
      content(m, `messages[${i}]`, system, out);
      // The other texts of a chat message the model reads: the speaker's name, an assistant turn's refusal and reasoning.
      for (const field of ['refusal', 'reasoning', 'reasoning_content']) slot(m, field, `messages[${i}].${field}`, system, out);
      // A redacted name is left out: `[REDACTED:email]` is no name OpenAI takes (letters, digits, `_`, `-`).
      if (typeof m.name === 'string' && m.name !== '') out.push(single(m.name, `messages[${i}].name`, system, () => delete m.name));
    });
  }
  // What else the model reads: a predicted output, and the answer format's schema.
  if (isObj(body.prediction)) content(body.prediction, 'prediction', false, out);
  const format = body.response_format;
  if (isObj(format) && isObj(format.json_schema)) schemaTexts(format.json_schema, 'response_format.json_schema', out);
  const output = body.output_config;
  if (isObj(output) && isObj(output.format)) schemaTexts(output.format, 'output_config.format', out);
  return out;
}
