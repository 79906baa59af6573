import { isHttpUrl } from '../net/http-url';
import { Agent, request } from '../net/undici-parts';
import { credentialsIn, scrubbed, withoutCredentials } from '../providers/credentials';

/** One search result, the same shape whatever the backend. */
export interface SearchResult {
  url: string;
  title: string;
  snippet: string;
}

/** Operator config of the search backend (`plugins.web.backend`). */
export interface SearchBackendConfig {
  kind: 'searxng' | 'http';
  base_url: string;
  timeout_ms: number;
  api_key?: string;
}

/** Why a search failed; `code` goes into the pipeline record and the error metadata. */
export class SearchFailed extends Error {
  constructor(
    readonly code: 'timeout' | 'network' | 'http_status' | 'bad_response' | 'cancelled',
    message: string,
  ) {
    super(message);
    this.name = 'SearchFailed';
  }
}

export type SearchFn = (query: string, maxResults: number, signal: AbortSignal) => Promise<SearchResult[]>;

/** Largest backend answer read; a search answer is a few kilobytes, more is a misconfigured backend. */
const MAX_BODY_BYTES = 2_000_000;

/**
 * The search function for an operator-configured backend, over one pooled keep-alive undici Agent.
 * The backend is the operator's (gateway.yaml), not a URL a request names, so it does not go through the
 * SSRF-safe fetcher: a self-hosted SearXNG on the operator's own network is the common case.
 *
 * - `searxng`: `GET {base_url}/search?q=…&format=json` → `{results: [{url, title, content}]}` (SearXNG's
 *   JSON API; `format: json` must be enabled in its settings.yml).
 * - `http`: `POST {base_url}` `{query, max_results}` → `{results: [{url, title, snippet}]}`.
 * `api_key`, when set, is sent as `Authorization: Bearer <api_key>` to either.
 *
 * @example const search = createSearch({kind: 'searxng', base_url: 'http://searx:8080', timeout_ms: 5000});
 *          const results = await search('otters', 5, AbortSignal.timeout(10_000));
 */
export function createSearch(config: SearchBackendConfig): SearchFn {
  const agent = new Agent({ connectTimeout: config.timeout_ms, keepAliveTimeout: 30_000 });
  const auth: Record<string, string> = config.api_key ? { authorization: `Bearer ${config.api_key}` } : {};
  // A backend that echoes its key (in a result URL or snippet) must not hand it to the model or the client.
  const secrets = credentialsIn(auth);
  const base = config.base_url.replace(/\/+$/, '');
  return async (query, maxResults, signal) => {
    const options: Call =
      config.kind === 'searxng'
        ? { method: 'GET', headers: { accept: 'application/json', ...auth } }
        : { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json', ...auth }, body: JSON.stringify({ query, max_results: maxResults }) };
    const url = config.kind === 'searxng' ? `${base}/search?${new URLSearchParams({ q: query, format: 'json' })}` : base;
    const json = await fetchJson(url, options, { agent, timeoutMs: config.timeout_ms, signal, secrets });
    return resultsOf(json, config.kind).slice(0, maxResults);
  };
}

type Call = { method: 'GET' | 'POST'; headers: Record<string, string>; body?: string };

async function fetchJson(url: string, options: Call, io: { agent: Agent; timeoutMs: number; signal: AbortSignal; secrets: readonly string[] }): Promise<unknown> {
  const timeout = AbortSignal.timeout(io.timeoutMs);
  const signal = AbortSignal.any([timeout, io.signal]);
  try {
    const { method, headers, body } = options;
    const res = await request(url, { method, headers, body, dispatcher: io.agent, signal, headersTimeout: io.timeoutMs, bodyTimeout: io.timeoutMs });
    if (res.statusCode < 200 || res.statusCode > 299) {
      res.body.resume();
      throw new SearchFailed('http_status', `search backend answered ${res.statusCode}`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length;
      if (size > MAX_BODY_BYTES) {
        res.body.destroy();
        throw new SearchFailed('bad_response', `search backend answer is larger than ${MAX_BODY_BYTES} bytes`);
      }
      chunks.push(chunk as Buffer);
    }
    try {
      // Scrubbed again once parsed: a key written with JSON escapes (`\u0073k-…`) is only seen then.
      return scrubbed(JSON.parse(withoutCredentials(Buffer.concat(chunks).toString('utf8'), io.secrets)), io.secrets);
    } catch {
      throw new SearchFailed('bad_response', 'search backend answer is not JSON');
    }
  } catch (err) {
    if (err instanceof SearchFailed) throw err;
    if (timeout.aborted) throw new SearchFailed('timeout', `search backend did not answer within ${io.timeoutMs} ms`);
    if (io.signal.aborted) throw new SearchFailed('cancelled', 'the client went away');
    const code = (err as { code?: string }).code;
    if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT') {
      throw new SearchFailed('timeout', `search backend did not answer within ${io.timeoutMs} ms`);
    }
    // The code alone: the error's message names the backend's address and port (`connect ECONNREFUSED
    // 10.0.3.7:8080`), the operator's own network, and it reached any client (the 502's message, the record).
    throw new SearchFailed('network', `search backend unreachable${code ? ` (${code})` : ''}`);
  }
}

/** Results with an http(s) `url` (isHttpUrl); others are dropped. SearXNG calls the snippet `content`. */
function resultsOf(json: unknown, kind: SearchBackendConfig['kind']): SearchResult[] {
  const list = (json as { results?: unknown })?.results;
  if (!Array.isArray(list)) throw new SearchFailed('bad_response', 'search backend answer has no `results` array');
  const out: SearchResult[] = [];
  const seen = new Set<string>();
  for (const r of list) {
    if (!r || typeof r !== 'object') continue;
    const { url, title } = r as Record<string, unknown>;
    const snippet = (r as Record<string, unknown>)[kind === 'searxng' ? 'content' : 'snippet'];
    if (!isHttpUrl(url) || seen.has(url)) continue;
    seen.add(url);
    // A blank title is as missing as an absent one (SearXNG sends "" for some engines' results).
    out.push({ url, title: typeof title === 'string' && title.trim() ? title : url, snippet: typeof snippet === 'string' ? snippet : '' });
  }
  return out;
}
