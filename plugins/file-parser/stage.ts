import { GatewayError, quoted } from '../../src/errors/gateway-error';
import { ParserSlots } from '../../src/files/parser-slots';
import { PdfBusy, pdfText, PdfTooLarge, PdfUnreadable } from '../../src/files/pdf-text';
import { FetchRefused, safeFetch, type Resolver, type SafeFetchOptions } from '../../src/net/safe-fetch';
import { keepAskedText } from '../../src/pipeline/asked-text';
import { inferenceBody, requestPlugin } from '../../src/pipeline/request-plugins';
import type { GatewayState, PipelineRecord, StageDefinition } from '../../src/pipeline/types';
import { requestedModels } from '../../src/routing/candidates';
import { withoutOnline } from '../../src/routing/online-suffix';
import type { Services } from '../../src/services';
import { base64Bytes, base64BytesAtMost } from './base64-size';
import { pdfBlocks, type PdfBlock } from './blocks';
import schema from './schema.json';
import { textHead } from '../../src/text-cut';

/** Operator config (`plugins.file-parser` in gateway.yaml), defaults filled by the schema. */
export interface FileParserConfig {
  mode: 'models_without_pdf' | 'always';
  max_files: number;
  max_bytes: number;
  max_pages: number;
  max_chars: number;
  timeout_ms: number;
  parse_timeout_ms: number;
  parse_memory_mb: number;
  parse_workers: number;
  max_redirects: number;
  on_error: 'deny' | 'allow';
}

/** What only code can set, never gateway.yaml (the schema is closed): tests reach their local servers. */
export interface FileParserFetcherOverrides {
  testOnlyLoopbackPorts?: readonly number[];
  resolve?: Resolver;
  /** Set by `create` to the gateway's logger: the operator's side of a refused host name. */
  logger?: SafeFetchOptions['logger'];
}

type FailReason = 'too_many_files' | 'too_large' | 'unreadable' | 'busy' | FetchRefused['code'];

/**
 * A PDF that could not be turned into text; `status`/`errorType` follow web-fetch (504 only for a fetch
 * timeout), and `busy` (no parser free in time: the gateway's load, not the PDF) is a retryable 503.
 */
class FileFailure extends Error {
  constructor(
    readonly reason: FailReason,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Builds the `file-parser` stage definition. `plugins/file-parser/index.ts` exports the one built without
 * overrides; tests build their own with a loopback allowance for their PDF server.
 *
 * @example const def = fileParserDefinition({ testOnlyLoopbackPorts: [server.port] });
 */
export function fileParserDefinition(overrides: FileParserFetcherOverrides = {}): StageDefinition<FileParserConfig, Services> {
  // One limit for every pipeline built from this definition (the registry holds one: the whole process).
  const slots = new ParserSlots(1);
  return {
    id: 'file-parser',
    configSchema: schema,
    beforeUpstream: true,
    create(config, services) {
      const fetcher: FileParserFetcherOverrides = { ...overrides, logger: services.logger };
      return async (ctx, next) => {
        const state = ctx.state.gateway;
        const body = inferenceBody(state);
        if (!body) return next();
        const asked = requestPlugin(body, 'file-parser');
        if (asked?.enabled === false) return next();
        // A request naming the plugin asks for parsing even for a PDF-capable model.
        if (!asked && config.mode === 'models_without_pdf' && allHavePdf(requestedModels(body), services.models)) return next();
        const blocks = pdfBlocks(body, state.endpoint === 'messages' ? 'messages' : 'chat');
        if (blocks.length === 0) return next();
        // The limit of the config serving this request, set when it is used rather than in `create`: a reload
        // that is refused (a later stage's config fails) has run `create` too, and must change nothing.
        if (slots.limit !== config.parse_workers) slots.limit = config.parse_workers;

        let parsed = 0;
        for (const [i, block] of blocks.entries()) {
          try {
            if (i >= config.max_files) throw new FileFailure('too_many_files', `More than max_files (${config.max_files}) PDFs in one request`);
            const { text, record } = await parseOne({ block, config, overrides: fetcher, slots, signal: state.signal });
            keepAskedText(state);
            block.replace(text);
            state.pipeline.push(record);
            parsed++;
          } catch (err) {
            // The client is gone (or a shutdown cut the request): nothing to record, the request ends here, as
            // routing ends an attempt cut the same way (the endpoint logs it as 499 cancelled, not a 500).
            if (state.abort.aborted) throw new GatewayError('timeout', 'The client closed the request', { cause: err });
            const failure = err instanceof FileFailure ? err : new FileFailure('unreadable', (err as Error).message);
            state.pipeline.push(record(block, 'failed', `Could not parse ${shownName(block)}: ${failure.message}`, { reason: failure.reason }));
            if (config.on_error === 'deny') throw failureError(failure, block);
          }
        }
        state.span.setAttribute('gateway.file_parser.files', blocks.length);
        state.span.setAttribute('gateway.file_parser.parsed', parsed);
        await next();
      };
    },
  };
}

/**
 * True when every requested model is known and declares `pdf` (an unknown model counts as without).
 * `x:online` is judged as `x`: the `web` stage removes the suffix, and this stage may run before it (the
 * unknown `x:online` had got a PDF-capable model's PDF parsed, and a PDF pdf.js cannot read refused).
 * A name a router resolves later (`auto`) stays unknown: parsing is what is right for any model.
 */
function allHavePdf(names: string[], models: Services['models']): boolean {
  const capable = (id: string) => (models.get(id) ?? models.get(withoutOnline(id) ?? ''))?.capabilities?.includes('pdf') === true;
  return names.length > 0 && names.every(capable);
}

function record(block: PdfBlock, outcome: 'parsed' | 'failed', summary: string, data: Record<string, unknown> = {}): PipelineRecord {
  return { type: 'file-parser', name: 'file-parser', summary, data: { file: shownName(block), source: block.source.kind, outcome, ...data } };
}

/**
 * The file's name as records and errors quote it, cut to 200 characters as other echoed client values are: a
 * name is the client's title or URL, and a messages `url` source holding a `data:` URL (refused, bad_scheme)
 * had been sent back whole, megabytes of base64, in the error body, the record and the log line.
 */
function shownName(block: PdfBlock): string {
  return quoted(block.name);
}

function failureError(failure: FileFailure, block: PdfBlock): GatewayError {
  const message = `file-parser could not read ${shownName(block)}: ${failure.message}`;
  const metadata = { plugin: 'file-parser', file: shownName(block), reason: failure.reason };
  if (failure.reason === 'busy') return new GatewayError('provider_overloaded', message, { metadata, headers: { 'retry-after': '1' } });
  return new GatewayError(failure.reason === 'timeout' ? 'timeout' : 'invalid_request', message, { metadata });
}

async function parseOne(input: {
  block: PdfBlock;
  config: FileParserConfig;
  overrides: FileParserFetcherOverrides;
  slots: ParserSlots;
  signal: AbortSignal;
}): Promise<{ text: string; record: PipelineRecord }> {
  const { block, config, overrides, slots, signal } = input;
  const bytes = await pdfBytes(block, config, overrides, signal);
  let doc;
  try {
    doc = await pdfText(bytes, {
      maxPages: config.max_pages,
      maxChars: config.max_chars,
      timeoutMs: config.parse_timeout_ms,
      maxMemoryMb: config.parse_memory_mb,
      slots,
      signal,
    });
  } catch (err) {
    if (err instanceof PdfTooLarge) throw new FileFailure('too_large', err.message);
    if (err instanceof PdfBusy) throw new FileFailure('busy', err.message);
    throw new FileFailure('unreadable', err instanceof PdfUnreadable ? `not a readable PDF (${err.message})` : (err as Error).message);
  }
  const pagesCut = doc.pagesRead < doc.pages;
  const charsCut = doc.text.length > config.max_chars;
  const kept = textHead(doc.text, config.max_chars);
  let text = `${block.name} (PDF, ${doc.pages} page${doc.pages === 1 ? '' : 's'}):\n${kept}`;
  if (charsCut) text += '\n[truncated]';
  if (pagesCut) text += `\n[only the first ${doc.pagesRead} of ${doc.pages} pages were read]`;
  const data = { bytes: bytes.length, pages: doc.pages, pages_read: doc.pagesRead, chars: kept.length, truncated: charsCut || pagesCut };
  return { text, record: record(block, 'parsed', `Parsed ${shownName(block)}`, data) };
}

async function pdfBytes(block: PdfBlock, config: FileParserConfig, overrides: FileParserFetcherOverrides, signal: AbortSignal): Promise<Uint8Array> {
  if (block.source.kind === 'base64') {
    const data = block.source.data;
    // `max_bytes` limits the decoded PDF, counted before decoding so an oversized one is never decoded. The
    // length alone says enough unless it is over the limit: line breaks (MIME base64) count there but decode to
    // nothing, and a PDF within the limit had been refused for them.
    if (base64BytesAtMost(data) > config.max_bytes && base64Bytes(data) > config.max_bytes) throw tooLarge(config);
    return Buffer.from(data, 'base64');
  }
  try {
    const doc = await safeFetch(block.source.url, {
      maxBytes: config.max_bytes,
      timeoutMs: config.timeout_ms,
      maxRedirects: config.max_redirects,
      allowedContentTypes: ['application/pdf'],
      signal,
      resolve: overrides.resolve,
      testOnlyLoopbackPorts: overrides.testOnlyLoopbackPorts,
      logger: overrides.logger,
      userAgent: 'model-gateway-file-parser/1',
    });
    return doc.body;
  } catch (err) {
    if (err instanceof FetchRefused) throw new FileFailure(err.code, err.message);
    throw new FileFailure('network', (err as Error).message);
  }
}

function tooLarge(config: FileParserConfig): FileFailure {
  return new FileFailure('too_large', `larger than max_bytes (${config.max_bytes} bytes)`);
}
