import { ConfigError } from '../../src/config/load';
import { GatewayError } from '../../src/errors/gateway-error';
import { askedText } from '../../src/pipeline/asked-text';
import { requestPlugin } from '../../src/pipeline/request-plugins';
import type { GatewayState, StageDefinition } from '../../src/pipeline/types';
import { createSearch, SearchFailed, type SearchBackendConfig, type SearchResult } from '../../src/search/backends';
import { addCitations, chatStreamWithAnnotations, injectSystemText, messagesStreamWithCitations, searchPromptText } from '../../src/search/citations';
import schema from './schema.json';
import { textHead } from '../../src/text-cut';
import { withoutOnline } from '../../src/routing/online-suffix';

/** Operator config (`plugins.web` in gateway.yaml), defaults filled by the schema. */
export interface WebConfig {
  backend?: SearchBackendConfig;
  enabled_by_default: boolean;
  max_results: number;
  max_results_limit: number;
  search_prompt: string;
  allow_request_prompt: boolean;
  max_query_chars: number;
  max_snippet_chars: number;
  on_error: 'allow' | 'deny';
}

/**
 * `web`: searches the operator's backend (src/search/backends.ts: SearXNG's JSON API or the documented HTTP
 * contract) with the last user message's text, puts the numbered results first in the system prompt, and
 * after the answer adds citations (chat `message.annotations` of type `url_citation`; messages `citations`
 * on text blocks; streams get them in one extra chunk/event). Runs for requests naming `{id: 'web'}` or a
 * model ending in `:online` (the suffix is removed before routing), or for every request with
 * `enabled_by_default`. See the README's "Web search".
 */
export const web: StageDefinition<WebConfig> = {
  id: 'web',
  configSchema: schema,
  beforeUpstream: true,
  create(config) {
    // Why here: the loader fills defaults for a stage named in a pipeline without config but does not
    // reject it, and a search stage without a backend can only be a configuration mistake.
    if (!config.backend) throw new ConfigError('plugins.web.backend is required when the web stage is in a pipeline');
    const search = createSearch(config.backend);
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      if ((state.endpoint !== 'messages' && state.endpoint !== 'chat_completions') || !state.body) return next();
      const online = stripOnline(state.body);
      const asked = requestPlugin(state.body, 'web');
      if (asked?.enabled === false || (!asked && !online && !config.enabled_by_default)) return next();

      // What the user asked: not the pages or documents a stage before added to the message.
      const query = textHead(askedText(state).trim(), config.max_query_chars);
      if (!query) {
        state.pipeline.push({ type: 'web', name: 'web', summary: 'No user text to search for; no search made', data: { outcome: 'skipped', reason: 'no_query' } });
        return next();
      }
      const maxResults = maxResultsOf(asked?.max_results, config);
      const template = promptOf(asked?.search_prompt, config);
      const results = await searchOrRecord({ state, query, maxResults, config, search });
      if (results.length > 0) injectSystemText(state.endpoint, state.body, searchPromptText(template, results, new Date()));

      await next();

      const response = state.response;
      if (results.length === 0 || !response || response.status !== 200) return;
      if (response.kind === 'json') addCitations(state.endpoint, response.body, results);
      else if (state.endpoint === 'chat_completions') response.events = chatStreamWithAnnotations(response.events, results);
      else response.events = messagesStreamWithCitations(response.events, results);
    };
  },
};

async function searchOrRecord(input: {
  state: GatewayState;
  query: string;
  maxResults: number;
  config: WebConfig;
  search: ReturnType<typeof createSearch>;
}): Promise<SearchResult[]> {
  const { state, query, maxResults, config } = input;
  const engine = config.backend!.kind;
  try {
    const results = (await input.search(query, maxResults, state.signal)).map((r) => boundedResult(r, config.max_snippet_chars));
    state.pipeline.push({
      type: 'web',
      name: 'web',
      summary: `Searched the web (${engine}): ${results.length} result(s)`,
      data: { outcome: 'searched', engine, query, max_results: maxResults, results: results.length, urls: results.map((r) => r.url) },
    });
    state.span.setAttribute('gateway.web.results', results.length);
    return results;
  } catch (err) {
    const failure = err instanceof SearchFailed ? err : new SearchFailed('network', (err as Error).message);
    state.pipeline.push({ type: 'web', name: 'web', summary: `Web search failed: ${failure.message}`, data: { outcome: 'failed', engine, query, reason: failure.code } });
    state.span.setAttribute('gateway.web.error', failure.code);
    if (config.on_error === 'deny') {
      throw new GatewayError(failure.code === 'timeout' ? 'timeout' : 'provider_unavailable', `web search failed: ${failure.message}`, {
        metadata: { plugin: 'web', reason: failure.code },
      });
    }
    return [];
  }
}

/** Longest title put in the prompt and the citations; a page title is rarely a tenth of it. */
const MAX_TITLE_CHARS = 300;

/**
 * A result cut to what belongs in every prompt: a backend that sends page text as its snippet (or a title of
 * megabytes) had it all put into the system prompt, up to the 2 MB answer cap, and the request then billed
 * for it or refused by the provider for its length. Cut on whole characters, and marked with `…`.
 */
function boundedResult(r: SearchResult, maxSnippetChars: number): SearchResult {
  const cut = (text: string, max: number) => (text.length > max ? `${textHead(text, max)}…` : text);
  return { url: r.url, title: cut(r.title, MAX_TITLE_CHARS), snippet: cut(r.snippet, maxSnippetChars) };
}

/** `model: "x:online"` asks for search (OpenRouter's shortcut); the suffix goes so routing sees `x`. */
function stripOnline(body: Record<string, unknown>): boolean {
  const model = typeof body.model === 'string' ? withoutOnline(body.model) : undefined;
  if (model === undefined) return false;
  body.model = model;
  return true;
}

function maxResultsOf(asked: unknown, config: WebConfig): number {
  if (asked === undefined) return Math.min(config.max_results, config.max_results_limit);
  if (typeof asked !== 'number' || !Number.isInteger(asked) || asked < 1) {
    throw new GatewayError('invalid_request', '`max_results` of the web plugin must be a positive integer', { metadata: { field: 'plugins.web.max_results' } });
  }
  return Math.min(asked, config.max_results_limit);
}

function promptOf(asked: unknown, config: WebConfig): string {
  if (asked === undefined || !config.allow_request_prompt) return config.search_prompt;
  if (typeof asked !== 'string') {
    throw new GatewayError('invalid_request', '`search_prompt` of the web plugin must be a string', { metadata: { field: 'plugins.web.search_prompt' } });
  }
  return asked;
}

