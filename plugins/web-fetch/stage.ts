import { GatewayError } from '../../src/errors/gateway-error';
import { forwardedHeaders } from '../../src/pipeline/forward-headers';
import { askedText, keepAskedText } from '../../src/pipeline/asked-text';
import { requestPlugin } from '../../src/pipeline/request-plugins';
import type { GatewayState, StageDefinition } from '../../src/pipeline/types';
import type { Resolver, SafeFetchOptions } from '../../src/net/safe-fetch';
import type { Services } from '../../src/services';
import { blockText, fetchOne, record, type Failed, type Fetched } from './fetch-page';
import schema from './schema.json';
import { serverToolOf, stopConditionsOf } from './server-tool';
import { runToolLoop } from './tool-loop';

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
  /** The `gateway:web_fetch` server tool: fetches per request when it gives no stop conditions. */
  max_tool_calls: number;
  /** The `gateway:web_fetch` server tool: model turns per request, whatever the request asks. */
  max_steps: number;
  /** Client headers passed on to the provider by the tool loop's upstream calls (as `upstream` does). */
  forward_headers: string[];
}

/**
 * What only code can set, never gateway.yaml (the schema is closed): tests reach their local servers with
 * `testOnlyLoopbackPorts` and fake DNS with `resolve`.
 */
export interface WebFetchFetcherOverrides {
  testOnlyLoopbackPorts?: readonly number[];
  resolve?: Resolver;
  /** Set by `create` to the gateway's logger: the operator's side of a refused host name. */
  logger?: SafeFetchOptions['logger'];
}

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
    beforeUpstream: true,
    create(config, services) {
      const fetcher: WebFetchFetcherOverrides = { ...overrides, logger: services.logger };
      return async (ctx, next) => {
        const state = ctx.state.gateway;
        if (state.endpoint !== 'messages' && state.endpoint !== 'chat_completions') return next();
        const asked = requestPlugin(state.body, 'web-fetch');
        if (asked?.enabled !== false) await fetchNamedUrls(state, asked, config, fetcher);
        // The server tool is the client's explicit ask (a tools[] entry): it runs even when `plugins` says otherwise.
        const tool = serverToolOf(state.body!);
        if (tool) {
          const stopWhen = stopConditionsOf(state.body!);
          const forward = forwardedHeaders(ctx, config.forward_headers);
          // The loop calls the model, so it runs where `upstream` stands: after the routers (the model they
          // choose), rate-limit and budget-check (a refused request sends nothing upstream and bills nothing).
          state.answerer = () => runToolLoop({ state, services, config, overrides: fetcher, tool, stopWhen, forward });
        }
        await next();
      };
    },
  };
}

/** The URLs the request names (and, by config, those in the last user message), fetched into the prompt. */
async function fetchNamedUrls(state: GatewayState, asked: Record<string, unknown> | undefined, config: WebFetchConfig, overrides: WebFetchFetcherOverrides): Promise<void> {
  const urls = urlsOf(state, asked?.urls, config);
  if (urls.length === 0) return;
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
  if (fetched.length > 0) {
    keepAskedText(state);
    injectInto(state, fetched.map(blockText));
  }
}

/** The request's `urls` (strings, deduplicated) plus, when the operator allows it, URLs in the last user message. */
function urlsOf(state: GatewayState, asked: unknown, config: WebFetchConfig): string[] {
  let out: string[] = [];
  if (asked !== undefined) {
    if (!Array.isArray(asked) || asked.some((u) => typeof u !== 'string')) {
      throw new GatewayError('invalid_request', '`urls` of the web-fetch plugin must be an array of strings', { metadata: { field: 'plugins.web-fetch.urls' } });
    }
    out = out.concat(asked as string[]);
  }
  // What the client wrote there, not what an earlier stage added (file-parser's documents): a third party's PDF
  // had chosen URLs for the gateway to fetch and put into the prompt. Concatenated: a text of ~125 000 URLs
  // overflowed the stack as push(...) arguments.
  if (config.from_messages) out = out.concat(urlsInText(askedText(state)));
  return [...new Set(out)];
}

/** http(s) URLs in free text, without the punctuation that usually follows one in a sentence. */
export function urlsInText(text: string): string[] {
  return [...text.matchAll(/\bhttps?:\/\/[^\s<>"'`]+/gi)].map((m) => withoutTrailingPunctuation(m[0]));
}

const TRAILING = new Set('.,;:!?)]}');

/** The URL without the sentence's punctuation after it; a loop from the end (a `[.,…]+$` regex rescanned a long run of dots from every position). */
function withoutTrailingPunctuation(url: string): string {
  let end = url.length;
  while (end > 0 && TRAILING.has(url[end - 1])) end--;
  return url.slice(0, end);
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

/**
 * Puts the fetched text into the last user message, before the user's own text, as text blocks (chat:
 * text parts, or the string extended). A user block rather than a system one: the page is untrusted data and
 * must not gain the authority of the operator's system prompt. Both dialects use the same `{type: 'text',
 * text}` block shape.
 *
 * Tool results stay first: in a messages user turn that carries `tool_result` blocks the pages go after the
 * last of them (the Messages API wants a turn's tool results before anything else: 400 "Did not find 1
 * tool_result block(s) at the beginning of this message"). A chat conversation that ends with `tool`
 * messages gets the pages as a new user message after them: nothing may come between an assistant's
 * `tool_calls` and its tool messages, and that is the chat form of the same turn (the translator maps it to
 * one messages user turn, tool results first).
 */
function injectInto(state: GatewayState, blocks: string[]): void {
  const messages = state.body?.messages;
  if (!Array.isArray(messages)) return;
  const textBlocks = () => blocks.map((text) => ({ type: 'text', text }));
  const end = messages[messages.length - 1] as Message | undefined;
  const last = lastUserMessage(state);
  if (!last || (state.endpoint === 'chat_completions' && (end?.role === 'tool' || end?.role === 'function'))) {
    messages.push({ role: 'user', content: textBlocks() });
    return;
  }
  if (typeof last.content === 'string' && state.endpoint === 'chat_completions') {
    last.content = [...blocks, last.content].join('\n\n');
  } else if (typeof last.content === 'string') {
    last.content = [...textBlocks(), { type: 'text', text: last.content }];
  } else if (Array.isArray(last.content)) {
    const after = afterToolResults(last.content);
    last.content = [...last.content.slice(0, after), ...textBlocks(), ...last.content.slice(after)];
  } else {
    last.content = textBlocks();
  }
}

/** The index just after a messages user turn's last `tool_result` block (0 when it has none). */
function afterToolResults(content: unknown[]): number {
  for (let i = content.length - 1; i >= 0; i--) {
    const b = content[i] as { type?: unknown } | null;
    if (b && typeof b === 'object' && b.type === 'tool_result') return i + 1;
  }
  return 0;
}
