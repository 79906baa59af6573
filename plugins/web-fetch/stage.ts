import { GatewayError } from '../../src/errors/gateway-error';
import { requestPlugin } from '../../src/pipeline/request-plugins';
import type { GatewayState, PipelineRecord, StageDefinition } from '../../src/pipeline/types';
import { documentText, FetchRefused, safeFetch, type Resolver } from '../../src/net/safe-fetch';
import type { Services } from '../../src/services';
import schema from './schema.json';

/** Operator config (`plugins.web-fetch` in gateway.yaml), defaults filled by the schema. */
export interface WebFetchConfig {
  max_urls: number;
  max_bytes: number;
  timeout_ms: number;
  max_redirects: number;
  max_chars: number;
  allowed_content_types: string[];
  from_messages: boolean;
  on_error: 'allow' | 'deny';
}

/**
 * What only code can set, never gateway.yaml (the schema is closed): tests reach their local servers with
 * `testOnlyLoopbackPorts` and fake DNS with `resolve`.
 */
export interface WebFetchFetcherOverrides {
  testOnlyLoopbackPorts?: readonly number[];
  resolve?: Resolver;
}

type Fetched = { url: string; text: string; truncated: boolean; record: PipelineRecord };
type Failed = { url: string; error: FetchRefused; record: PipelineRecord };

/**
 * Builds the `web-fetch` stage definition. `plugins/web-fetch/index.ts` exports the one built without
 * overrides; tests build their own with a loopback allowance and put it in a registry.
 *
 * @example const def = webFetchDefinition({ testOnlyLoopbackPorts: [server.port] });
 */
export function webFetchDefinition(overrides: WebFetchFetcherOverrides = {}): StageDefinition<WebFetchConfig, Services> {
  return {
    id: 'web-fetch',
    configSchema: schema,
    create(config) {
      return async (ctx, next) => {
        const state = ctx.state.gateway;
        if (state.endpoint !== 'messages' && state.endpoint !== 'chat_completions') return next();
        const asked = requestPlugin(state.body, 'web-fetch');
        if (asked?.enabled === false) return next();
        const urls = urlsOf(state, asked?.urls, config);
        if (urls.length === 0) return next();

        const chosen = urls.slice(0, config.max_urls);
        const results = await Promise.all(chosen.map((url) => fetchOne(url, config, overrides, state.signal)));
        const fetched = results.filter((r): r is Fetched => 'text' in r);
        for (const r of results) state.pipeline.push(r.record);
        for (const url of urls.slice(config.max_urls)) {
          state.pipeline.push(record(url, 'skipped', `Skipped ${url}: more than max_urls (${config.max_urls}) URLs`));
        }
        state.span.setAttribute('gateway.web_fetch.urls', chosen.length);
        state.span.setAttribute('gateway.web_fetch.fetched', fetched.length);

        const failed = results.find((r): r is Failed => 'error' in r);
        if (failed && config.on_error === 'deny') {
          const type = failed.error.code === 'timeout' ? 'timeout' : 'invalid_request';
          throw new GatewayError(type, `web-fetch could not fetch ${failed.url}: ${failed.error.message}`, {
            metadata: { plugin: 'web-fetch', url: failed.url, reason: failed.error.code },
          });
        }
        if (fetched.length > 0) injectInto(state, fetched.map(blockText));
        await next();
      };
    },
  };
}

function record(url: string, outcome: string, summary: string, data: Record<string, unknown> = {}): PipelineRecord {
  return { type: 'web-fetch', name: 'web-fetch', summary, data: { url, outcome, ...data } };
}

async function fetchOne(url: string, config: WebFetchConfig, overrides: WebFetchFetcherOverrides, signal: AbortSignal): Promise<Fetched | Failed> {
  try {
    const doc = await safeFetch(url, {
      maxBytes: config.max_bytes,
      timeoutMs: config.timeout_ms,
      maxRedirects: config.max_redirects,
      allowedContentTypes: config.allowed_content_types,
      signal,
      resolve: overrides.resolve,
      testOnlyLoopbackPorts: overrides.testOnlyLoopbackPorts,
    });
    const full = documentText(doc);
    const truncated = full.length > config.max_chars;
    const text = truncated ? full.slice(0, config.max_chars) : full;
    const data = { final_url: doc.finalUrl, redirects: doc.redirects.length, content_type: doc.mediaType, bytes: doc.body.length, chars: text.length, truncated };
    return { url, text, truncated, record: record(url, 'fetched', `Fetched ${url}`, data) };
  } catch (err) {
    const error = err instanceof FetchRefused ? err : new FetchRefused('network', (err as Error).message, url);
    const outcome = error.code === 'blocked_address' || error.code === 'bad_scheme' || error.code === 'bad_url' ? 'refused' : 'failed';
    return { url, error, record: record(url, outcome, `${outcome === 'refused' ? 'Refused' : 'Failed'} ${url}: ${error.message}`, { reason: error.code }) };
  }
}

function blockText(f: Fetched): string {
  return `Content of ${f.url}:\n${f.text}${f.truncated ? '\n[truncated]' : ''}`;
}

/** The request's `urls` (strings, deduplicated) plus, when the operator allows it, URLs in the last user message. */
function urlsOf(state: GatewayState, asked: unknown, config: WebFetchConfig): string[] {
  const out: string[] = [];
  if (asked !== undefined) {
    if (!Array.isArray(asked) || asked.some((u) => typeof u !== 'string')) {
      throw new GatewayError('invalid_request', '`urls` of the web-fetch plugin must be an array of strings', { metadata: { field: 'plugins.web-fetch.urls' } });
    }
    out.push(...(asked as string[]));
  }
  if (config.from_messages) {
    const last = lastUserMessage(state);
    if (last) out.push(...urlsInText(textOf(last.content)));
  }
  return [...new Set(out)];
}

/** http(s) URLs in free text, without the punctuation that usually follows one in a sentence. */
export function urlsInText(text: string): string[] {
  return [...text.matchAll(/\bhttps?:\/\/[^\s<>"'`]+/gi)].map((m) => m[0].replace(/[.,;:!?)\]}]+$/, ''));
}

type Message = { role?: unknown; content?: unknown };

function lastUserMessage(state: GatewayState): Message | undefined {
  const messages = state.body?.messages;
  if (!Array.isArray(messages)) return undefined;
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as Message;
    if (m && typeof m === 'object' && m.role === 'user') return m;
  }
  return undefined;
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .filter((p): p is { type: string; text: string } => !!p && p.type === 'text' && typeof p.text === 'string')
    .map((p) => p.text)
    .join('\n');
}

/**
 * Puts the fetched text into the last user message, before the user's own text, as text blocks (chat:
 * text parts, or the string extended). A user block rather than a system one: the page is untrusted data and
 * must not gain the authority of the operator's system prompt. Both dialects use the same `{type: 'text',
 * text}` block shape.
 */
function injectInto(state: GatewayState, blocks: string[]): void {
  const last = lastUserMessage(state);
  if (!last) {
    const messages = state.body?.messages;
    if (Array.isArray(messages)) messages.push({ role: 'user', content: blocks.map((text) => ({ type: 'text', text })) });
    return;
  }
  if (typeof last.content === 'string' && state.endpoint === 'chat_completions') {
    last.content = [...blocks, last.content].join('\n\n');
  } else if (typeof last.content === 'string') {
    last.content = [...blocks.map((text) => ({ type: 'text', text })), { type: 'text', text: last.content }];
  } else if (Array.isArray(last.content)) {
    last.content = [...blocks.map((text) => ({ type: 'text', text })), ...last.content];
  } else {
    last.content = blocks.map((text) => ({ type: 'text', text }));
  }
}
