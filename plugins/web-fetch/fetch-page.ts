import { documentText, FetchRefused, safeFetch } from '../../src/net/safe-fetch';
import type { PipelineRecord } from '../../src/pipeline/types';
import type { WebFetchConfig, WebFetchFetcherOverrides } from './stage';
import { textHead } from '../../src/text-cut';

/** One URL fetched, as prompt text, with its pipeline record. */
export type Fetched = { url: string; text: string; truncated: boolean; record: PipelineRecord };
/** One URL that could not be fetched (refused by the address policy or failed), with its pipeline record. */
export type Failed = { url: string; error: FetchRefused; record: PipelineRecord };

/** A web-fetch pipeline record (`gateway_metadata.pipeline`) for one URL. */
export function record(url: string, outcome: string, summary: string, data: Record<string, unknown> = {}): PipelineRecord {
  return { type: 'web-fetch', name: 'web-fetch', summary, data: { url, outcome, ...data } };
}

/**
 * Fetches one URL through the SSRF-safe fetcher within the operator's caps, as prompt text cut to
 * `max_chars`; never throws (a refusal or failure is a result with its record).
 *
 * @example const r = await fetchOne('https://example.com/', config, {}, state.signal); if ('text' in r) use(r.text);
 */
export async function fetchOne(
  url: string,
  config: WebFetchConfig,
  overrides: WebFetchFetcherOverrides,
  signal: AbortSignal,
  urlAllowed?: (url: URL) => boolean,
): Promise<Fetched | Failed> {
  try {
    const doc = await safeFetch(url, {
      maxBytes: config.max_bytes,
      timeoutMs: config.timeout_ms,
      maxRedirects: config.max_redirects,
      allowedContentTypes: config.allowed_content_types,
      signal,
      resolve: overrides.resolve,
      testOnlyLoopbackPorts: overrides.testOnlyLoopbackPorts,
      logger: overrides.logger,
      urlAllowed,
    });
    const full = documentText(doc);
    const truncated = full.length > config.max_chars;
    const text = textHead(full, config.max_chars);
    const data = { final_url: doc.finalUrl, redirects: doc.redirects.length, content_type: doc.mediaType, bytes: doc.body.length, chars: text.length, truncated };
    return { url, text, truncated, record: record(url, 'fetched', `Fetched ${url}`, data) };
  } catch (err) {
    const error = err instanceof FetchRefused ? err : new FetchRefused('network', (err as Error).message, url);
    const outcome = error.code === 'blocked_address' || error.code === 'blocked_domain' || error.code === 'bad_scheme' || error.code === 'bad_url' ? 'refused' : 'failed';
    return { url, error, record: record(url, outcome, `${outcome === 'refused' ? 'Refused' : 'Failed'} ${url}: ${error.message}`, { reason: error.code }) };
  }
}

/** The text the model reads for a fetched page: `Content of <url>:` then the page text. */
export function blockText(f: Fetched): string {
  return `Content of ${f.url}:\n${f.text}${f.truncated ? '\n[truncated]' : ''}`;
}
