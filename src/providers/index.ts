import type { ProviderConfig } from '../config/types';
import { createAnthropicProvider } from './anthropic';
import { createOpenAIProvider } from './openai';
import { createSimulatedProvider } from './simulated';
import type { Provider } from './types';

export type { Provider, Dialect, UpstreamCall, UpstreamReply } from './types';

/** Builds the chat provider adapters declared in gateway.yaml, by id; video providers are built by video-providers.ts. */
export function buildProviders(configs: ProviderConfig[]): Map<string, Provider> {
  const out = new Map<string, Provider>();
  for (const c of configs) {
    if (c.kind === 'openai') out.set(c.id, createOpenAIProvider(c));
    else if (c.kind === 'anthropic') out.set(c.id, createAnthropicProvider(c));
    else if (c.kind === 'simulated') out.set(c.id, createSimulatedProvider(c));
  }
  return out;
}
