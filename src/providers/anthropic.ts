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
      let h: Record<string, string> = call.apiKey ? withHeader(headers, 'x-api-key', call.apiKey) : { ...headers };
      for (const name of FORWARDED) {
        const v = call.forwardHeaders?.[name];
        if (v) h = withHeader(h, name, joinedList(headerIn(h, name), v));
      }
      // The forwarded headers carry no credentials: the provider's own are worked out once, above.
      return sendJson({ target, headers: h, credentials: call.apiKey ? undefined : credentials, call, timeouts, providerId: config.id });
    },
  };
}

function headerIn(headers: Record<string, string>, name: string): string | undefined {
  for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() === name) return v;
  return undefined;
}

/**
 * The operator's value of a comma-separated header (`anthropic-beta` in the provider's `headers:`) and the
 * client's, joined without repeats: the client's had replaced the operator's, so a beta the operator turned
 * on for every call was off for every client that named one of its own (the Anthropic SDK does for any beta call).
 */
function joinedList(operator: string | undefined, client: string): string {
  const items = [operator ?? '', client].flatMap((v) => v.split(',')).map((v) => v.trim()).filter(Boolean);
  return [...new Set(items)].join(',');
}
