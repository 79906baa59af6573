import type { OpenAIProviderConfig } from '../config/types';
import { credentialsIn } from './credentials';
import { sendJson, timeoutsOf, upstreamTarget, withHeader } from './http';
import type { Dialect, Provider, UpstreamCall, UpstreamReply } from './types';

export const DIALECTS: ReadonlySet<Dialect> = new Set(['chat_completions']);

/**
 * Any OpenAI-compatible chat-completions API: a config entry (`kind: openai`, `base_url`), not a new file.
 *
 * @example createOpenAIProvider({ id: 'openai', kind: 'openai', base_url: 'https://api.openai.com/v1', api_key, region: 'global', timeout_ms: 600000 })
 */
export function createOpenAIProvider(config: OpenAIProviderConfig): Provider {
  const target = upstreamTarget(config.base_url, '/chat/completions');
  // identity: the gateway reads the bytes as they are (undici's dispatch does not decompress), so a server
  // free to pick an encoding when none is named must not gzip them.
  const headers: Record<string, string> = { 'content-type': 'application/json', 'accept-encoding': 'identity', ...config.headers };
  if (config.api_key) headers.authorization = `Bearer ${config.api_key}`;
  const credentials = credentialsIn(headers);
  const timeouts = timeoutsOf(config);
  return {
    id: config.id,
    firstTokenTimeoutMs: timeouts.firstTokenMs,
    dataCollection: config.data_collection,
    kind: 'openai',
    region: config.region,
    dialects: DIALECTS,
    send: (call: UpstreamCall): Promise<UpstreamReply> =>
      call.apiKey
        ? sendJson({ target, headers: withHeader(headers, 'authorization', `Bearer ${call.apiKey}`), call, timeouts, providerId: config.id })
        : sendJson({ target, headers, credentials, call, timeouts, providerId: config.id }),
  };
}
