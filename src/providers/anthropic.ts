import type { AnthropicProviderConfig } from '../config/types';
import { credentialsIn } from './credentials';
import { sendJson, timeoutsOf, upstreamTarget, withHeader } from './http';
import type { Dialect, Provider, UpstreamCall, UpstreamReply } from './types';

export const DIALECTS: ReadonlySet<Dialect> = new Set(['messages']);
/** Client headers the Anthropic API understands and that are safe to pass on. */
const FORWARDED = ['anthropic-beta'];

/**
 * The Anthropic Messages API: `x-api-key` and `anthropic-version` headers, `/messages` path.
 *
 * @example createAnthropicProvider({ id: 'anthropic', kind: 'anthropic', base_url: 'https://api.anthropic.com/v1', api_key, anthropic_version: '2023-06-01', region: 'global', timeout_ms: 600000 })
 */
export function createAnthropicProvider(config: AnthropicProviderConfig): Provider {
  const target = upstreamTarget(config.base_url, '/messages');
  // identity: see openai.ts (the gateway does not decompress provider answers).
  const headers: Record<string, string> = { 'content-type': 'application/json', 'accept-encoding': 'identity', ...config.headers, 'anthropic-version': config.anthropic_version };
  if (config.api_key) headers['x-api-key'] = config.api_key;
  const credentials = credentialsIn(headers);
  const timeouts = timeoutsOf(config);
  return {
    id: config.id,
    firstTokenTimeoutMs: timeouts.firstTokenMs,
    dataCollection: config.data_collection,
    kind: 'anthropic',
    region: config.region,
    dialects: DIALECTS,
    async send(call: UpstreamCall): Promise<UpstreamReply> {
      const h: Record<string, string> = call.apiKey ? withHeader(headers, 'x-api-key', call.apiKey) : { ...headers };
      for (const name of FORWARDED) {
        const v = call.forwardHeaders?.[name];
        if (v) h[name] = v;
      }
      // The forwarded headers carry no credentials: the provider's own are worked out once, above.
      return sendJson({ target, headers: h, credentials: call.apiKey ? undefined : credentials, call, timeouts, providerId: config.id });
    },
  };
}
