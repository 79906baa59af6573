import type { GatewayState } from '../pipeline/types';
import type { Store } from '../store/types';

/**
 * Writes the ledger row of a request that reached a provider (completed, failed mid-stream or cancelled
 * by the client; what was delivered is billed). Idempotent by generation id in the store.
 */
export async function recordLedger(store: Store, state: GatewayState): Promise<void> {
  const { key, route, requestId } = state;
  if (!key || !route || !requestId) return;
  const u = state.usage;
  await store.insertLedger({
    generationId: requestId,
    keyId: key.id,
    workspaceId: key.workspaceId,
    accountId: key.accountId,
    endpoint: state.endpoint === 'messages' ? 'messages' : 'chat_completions',
    model: route.model,
    provider: route.provider,
    upstreamModel: route.upstreamModel,
    promptTokens: u?.inputTokens ?? 0,
    completionTokens: u?.outputTokens ?? 0,
    cachedTokens: u?.cachedTokens ?? 0,
    cacheWriteTokens: u?.cacheWriteTokens ?? 0,
    reasoningTokens: u?.reasoningTokens ?? 0,
    costUsd: state.costUsd ?? 0,
    isByok: route.isByok,
    status: state.outcome,
    createdAt: new Date().toISOString(),
  });
}
