/**
 * Content-part translation between the two request styles (used by request.ts):
 * chat-completions content parts ⇄ messages content blocks, one part or block at a time.
 *
 * chat → messages
 *   text                                   → text (an extension `cache_control` on the part is kept)
 *   image_url http(s)                      → image {source: {type: url}}            (`detail` dropped)
 *   image_url data:<mime>;base64,…         → image {source: {type: base64}}
 *   file file_data application/pdf         → document {source: {type: base64}}    (`filename` → `title`)
 *   file file_data text/plain              → document {source: {type: text}}      (decoded)
 *   file file_data image/*                 → image {source: {type: base64}}
 *   file file_data http(s) URL             → document {source: {type: url}}       (a PDF by URL, OpenRouter's form)
 *   file file_data without a data: prefix  → taken as base64 PDF (the only raw-base64 document messages takes)
 *   file file_id, input_audio, other types → 400: nothing in messages can carry them
 *
 * messages → chat
 *   text → text (text-only content as one string); image url/base64 → image_url (http URL / data URL); document base64 PDF → file with a data
 *   URL (`title` → `filename`, default `document.pdf`); document text → a text part (chat has no text
 *   document); document content → its text and image parts; search_result → its text parts;
 *   image/document with a `file` source or a PDF URL → 400 (a chat provider cannot fetch either);
 *   `cache_control` and `citations` are dropped.
 */
import { GatewayError } from '../../errors/gateway-error';
import { isObj, type Obj } from '../common';


const DATA_URL = /^data:([^;,]+)[^,]*?;base64,([\s\S]*)$/;

/** `data:<mime>[;params];base64,<data>` → its parts; null for anything else. */
export function parseDataUrl(url: string): { mediaType: string; data: string } | null {
  const m = DATA_URL.exec(url);
  return m ? { mediaType: m[1].toLowerCase(), data: m[2] } : null;
}

export function invalid(message: string, field: string): GatewayError {
  return new GatewayError('invalid_request', message, { metadata: { field } });
}

/** Copies `cache_control` from a chat part (an extension) onto a messages block. */
function withCache(block: Obj, part: Obj): Obj {
  if (isObj(part.cache_control)) block.cache_control = part.cache_control;
  return block;
}

/** A chat string or array of text parts → messages text blocks (empty texts skipped). */
export function chatTextBlocks(content: unknown, where: string): Obj[] {
  if (content == null) return [];
  if (typeof content === 'string') return content ? [{ type: 'text', text: content }] : [];
  if (!Array.isArray(content)) throw invalid(`${where}.content must be a string or an array of parts`, `${where}.content`);
  const out: Obj[] = [];
  content.forEach((p, j) => {
    if (!isObj(p) || p.type !== 'text' || typeof p.text !== 'string') {
      throw invalid(`${where}.content[${j}] must be a text part here`, `${where}.content[${j}]`);
    }
    if (p.text) out.push(withCache({ type: 'text', text: p.text }, p));
  });
  return out;
}

/** One chat user content part → one messages block. */
export function chatPartToBlock(part: unknown, where: string): Obj {
  if (!isObj(part)) throw invalid(`${where} must be an object`, where);
  switch (part.type) {
    case 'text':
      return withCache({ type: 'text', text: String(part.text ?? '') }, part);
    case 'image_url': {
      const url = isObj(part.image_url) ? part.image_url.url : part.image_url;
      return withCache({ type: 'image', source: imageSource(url, `${where}.image_url.url`) }, part);
    }
    case 'file':
      return withCache(fileToBlock(isObj(part.file) ? part.file : {}, `${where}.file`), part);
    case 'input_audio':
      throw invalid(`${where}: audio input is not supported by this model's provider`, where);
    default:
      throw invalid(`${where}: content part type ${JSON.stringify(part.type)} is not supported by this model's provider`, where);
  }
}

/** The image types a messages-style provider takes inline (the Messages API refuses others with a 400). */
const MESSAGES_IMAGE_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);

/** An inline image as a messages base64 source; another type is `unsupported_image_format` (spec 7.4), naming the field. */
function base64Image(mediaType: string, data: string, field: string): Obj {
  // `image/jpg` is a common misspelling of the registered `image/jpeg`, which is what the provider takes.
  const type = mediaType === 'image/jpg' ? 'image/jpeg' : mediaType;
  if (!MESSAGES_IMAGE_TYPES.has(type)) {
    throw new GatewayError('unsupported_image_format', `${field}: images of type ${mediaType} cannot be sent to this model's provider (JPEG, PNG, GIF and WebP can)`, { metadata: { field } });
  }
  return { type: 'base64', media_type: type, data };
}

function imageSource(url: unknown, field: string): Obj {
  if (typeof url !== 'string') throw new GatewayError('invalid_image', `${field} must be a string`, { metadata: { field } });
  if (/^https?:\/\//i.test(url)) return { type: 'url', url };
  const d = parseDataUrl(url);
  if (d) return base64Image(d.mediaType, d.data, field);
  throw new GatewayError('invalid_image', `${field} must be an http(s) URL or a data:<mime>;base64 URL`, { metadata: { field } });
}

function fileToBlock(file: Obj, where: string): Obj {
  if (typeof file.file_data !== 'string') {
    throw invalid(`${where}: only inline file_data can be sent to this model's provider (file_id is not portable)`, where);
  }
  const title = typeof file.filename === 'string' && file.filename ? { title: file.filename } : {};
  // OpenRouter's chat form of a PDF on the web; the Messages API fetches URL documents itself. Read as
  // base64, the URL had gone upstream as the document's data and come back as the provider's 400.
  if (/^https?:\/\//i.test(file.file_data)) return { type: 'document', source: { type: 'url', url: file.file_data }, ...title };
  const d = parseDataUrl(file.file_data) ?? { mediaType: 'application/pdf', data: file.file_data };
  if (d.mediaType === 'application/pdf') {
    return { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: d.data }, ...title };
  }
  if (d.mediaType === 'text/plain') {
    const text = Buffer.from(d.data, 'base64').toString('utf8');
    return { type: 'document', source: { type: 'text', media_type: 'text/plain', data: text }, ...title };
  }
  if (d.mediaType.startsWith('image/')) return { type: 'image', source: base64Image(d.mediaType, d.data, `${where}.file_data`) };
  throw invalid(`${where}: files of type ${d.mediaType} are not supported by this model's provider (PDF, plain text and images are)`, where);
}

const text = (t: string): Obj => ({ type: 'text', text: t });

/** One messages content block (not tool_use / tool_result) → chat content parts. */
export function blockToChatParts(block: unknown, where: string): Obj[] {
  if (typeof block === 'string') return [text(block)];
  if (!isObj(block)) throw invalid(`${where} must be an object`, where);
  const src = isObj(block.source) ? block.source : {};
  switch (block.type) {
    case 'text':
      return [text(String(block.text ?? ''))];
    case 'image':
      if (src.type === 'url' && typeof src.url === 'string') return [{ type: 'image_url', image_url: { url: src.url } }];
      if (src.type === 'base64' && typeof src.data === 'string') {
        return [{ type: 'image_url', image_url: { url: `data:${src.media_type};base64,${src.data}` } }];
      }
      throw invalid(`${where}: image source type ${JSON.stringify(src.type)} cannot be sent to this model's provider`, where);
    case 'document':
      if (src.type === 'base64' && typeof src.data === 'string') {
        const filename = typeof block.title === 'string' && block.title ? block.title : 'document.pdf';
        return [{ type: 'file', file: { filename, file_data: `data:${src.media_type ?? 'application/pdf'};base64,${src.data}` } }];
      }
      if (src.type === 'text' && typeof src.data === 'string') return [text(src.data)];
      if (src.type === 'content') {
        if (typeof src.content === 'string') return [text(src.content)];
        if (Array.isArray(src.content)) return src.content.flatMap((b: unknown, j: number) => blockToChatParts(b, `${where}.source.content[${j}]`));
      }
      throw invalid(
        `${where}: document source type ${JSON.stringify(src.type)} cannot be sent to this model's provider (send PDFs as base64)`,
        where,
      );
    case 'search_result':
      return Array.isArray(block.content) ? block.content.flatMap((b: unknown, j: number) => blockToChatParts(b, `${where}.content[${j}]`)) : [];
    default:
      throw invalid(`${where}: content block type ${JSON.stringify(block.type)} cannot be sent to this model's provider`, where);
  }
}

/**
 * Chat content from parts: text alone becomes one string (the texts joined with a line break, as vLLM joins
 * text parts), parts with an image or file stay a list. A list of text parts is valid chat, but DeepSeek's and
 * Moonshot's APIs refuse it (400 "invalid type: sequence, expected a string") and some servers drop a tool
 * message's list; several text blocks (Claude Code's system prompt, a system reminder before a prompt, a tool
 * result in blocks) are common in a messages request, and a string carries them to every chat provider.
 */
export function chatContent(parts: Obj[]): string | Obj[] {
  return parts.every((p) => p.type === 'text') ? parts.map((p) => p.text).join('\n') : parts;
}
