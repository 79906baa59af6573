/**
 * Where PDFs sit in a request body, in both dialects:
 * - messages: `{type: 'document', source: {type: 'base64', media_type: 'application/pdf', data}}` or
 *   `source: {type: 'url', url}`, in a message's content or inside a `tool_result`'s content;
 * - chat: `{type: 'file', file: {filename, file_data: 'data:application/pdf;base64,…'}}` or `file_data:
 *   'https://…'` (a URL PDF, as OpenRouter takes it); other file_data without a `data:` prefix is taken as
 *   base64 PDF, as src/dialects/translate/content.ts does.
 * Each found block comes with a `replace` that puts a text block in its place.
 */
export type PdfSource = { kind: 'base64'; data: string } | { kind: 'url'; url: string };

export interface PdfBlock {
  /** What the text block names the file by: the title/filename, else the URL, else `document.pdf`. */
  name: string;
  source: PdfSource;
  replace(text: string): void;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

/** The PDF blocks of a messages or chat-completions body, in order. */
export function pdfBlocks(body: Obj, dialect: 'messages' | 'chat'): PdfBlock[] {
  const out: PdfBlock[] = [];
  const messages = body.messages;
  if (!Array.isArray(messages)) return out;
  for (const m of messages) {
    if (isObj(m) && Array.isArray(m.content)) walk(m.content, dialect, out);
  }
  return out;
}

function walk(content: unknown[], dialect: 'messages' | 'chat', out: PdfBlock[]): void {
  content.forEach((block, i) => {
    if (!isObj(block)) return;
    const found = dialect === 'messages' ? messagesPdf(block) : chatPdf(block);
    if (found) {
      out.push({
        ...found,
        // cache_control stays on the block that replaces the document, so prompt caching still applies.
        replace: (text) => {
          content[i] = { type: 'text', text, ...(block.cache_control !== undefined ? { cache_control: block.cache_control } : {}) };
        },
      });
    } else if (dialect === 'messages' && block.type === 'tool_result' && Array.isArray(block.content)) {
      walk(block.content, dialect, out);
    }
  });
}

function messagesPdf(block: Obj): Omit<PdfBlock, 'replace'> | undefined {
  if (block.type !== 'document' || !isObj(block.source)) return undefined;
  const src = block.source;
  const title = typeof block.title === 'string' && block.title ? block.title : undefined;
  if (src.type === 'base64' && src.media_type === 'application/pdf' && typeof src.data === 'string') {
    return { name: title ?? 'document.pdf', source: { kind: 'base64', data: src.data } };
  }
  if (src.type === 'url' && typeof src.url === 'string') {
    return { name: title ?? src.url, source: { kind: 'url', url: src.url } };
  }
  return undefined;
}

function chatPdf(block: Obj): Omit<PdfBlock, 'replace'> | undefined {
  if (block.type !== 'file' || !isObj(block.file) || typeof block.file.file_data !== 'string') return undefined;
  const fileData = block.file.file_data;
  const filename = typeof block.file.filename === 'string' && block.file.filename ? block.file.filename : undefined;
  // OpenRouter's chat form of a PDF on the web: `file_data` is its URL. Read as base64 it had been a 400
  // "Not a PDF" for a document the client had sent the documented way.
  if (/^https?:\/\//i.test(fileData)) return { name: filename ?? fileData, source: { kind: 'url', url: fileData } };
  const name = filename ?? 'document.pdf';
  const m = /^data:([^;,]+)(?:;[^,]*)?,/i.exec(fileData);
  if (!m) return { name, source: { kind: 'base64', data: fileData } };
  if (m[1].toLowerCase() !== 'application/pdf' || !/;base64,/i.test(fileData.slice(0, m[0].length))) return undefined;
  return { name, source: { kind: 'base64', data: fileData.slice(m[0].length) } };
}
