import type { ProviderConfig } from '../config/types';
import { createAnthropicProvider, DIALECTS as ANTHROPIC_DIALECTS } from './anthropic';
import { createOpenAIProvider, DIALECTS as OPENAI_DIALECTS } from './openai';
import { createSimulatedProvider, DIALECTS as SIMULATED_DIALECTS } from './simulated';
import type { Dialect, Provider } from './types';

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

/**
 * The API styles a chat provider of `kind` speaks (its adapter's `dialects`), without building it: for a stage
 * that must know how a model's endpoint will be called. Empty for a kind that is no chat provider.
 *
 * @example providerDialects('anthropic') // Set { 'messages' }
 */
export function providerDialects(kind: string): ReadonlySet<Dialect> {
  if (kind === 'openai') return OPENAI_DIALECTS;
  if (kind === 'anthropic') return ANTHROPIC_DIALECTS;
  if (kind === 'simulated') return SIMULATED_DIALECTS;
  return new Set();
}
