import type { OpenAIProviderConfig } from '../config/types';
import { postUpstream, upstreamBytes } from './http';
import { parseSse } from './sse';
import type { Dialect, Provider, UpstreamCall, UpstreamReply } from './types';

const DIALECTS: ReadonlySet<Dialect> = new Set(['chat_completions']);

/**
 * Any OpenAI-compatible chat-completions API: a config entry (`kind: openai`, `base_url`), not a new file.
 *
 * @example createOpenAIProvider({ id: 'openai', kind: 'openai', base_url: 'https://api.openai.com/v1', api_key, region: 'global', timeout_ms: 600000 })
 */
export function createOpenAIProvider(config: OpenAIProviderConfig): Provider {
  const url = `${config.base_url.replace(/\/+$/, '')}/chat/completions`;
  const headers: Record<string, string> = { ...config.headers };
  if (config.api_key) headers.authorization = `Bearer ${config.api_key}`;
  return {
    id: config.id,
    kind: 'openai',
    region: config.region,
    dialects: DIALECTS,
    async send(call: UpstreamCall): Promise<UpstreamReply> {
      const res = await postUpstream({
        url,
        headers: call.stream ? { ...headers, accept: 'text/event-stream' } : headers,
        body: JSON.stringify(call.body),
        signal: call.signal,
        timeoutMs: config.timeout_ms,
        providerId: config.id,
      });
      if (call.stream) return { stream: true, events: parseSse(upstreamBytes(res.body, config.id)) };
      return { stream: false, body: (await res.body.json()) as Record<string, unknown> };
    },
  };
}
