import type { Pricing } from '../config/types';
import type { NormalizedUsage } from '../pipeline/types';

/**
 * Cost in USD of one request from its real usage and the endpoint's pricing (USD per 1M tokens).
 * Cached reads and cache writes fall back to the prompt price when the endpoint declares none; 1-hour cache
 * writes are billed at `cache_write_1h`, else as the other writes.
 *
 * @example costOf({ inputTokens: 1000, outputTokens: 200, cachedTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 }, { prompt: 0.15, completion: 0.6, request: 0 }) // 0.00027
 */
export function costOf(usage: NormalizedUsage, pricing: Pricing): number {
  const cached = Math.min(usage.cachedTokens, usage.inputTokens);
  const written = Math.min(usage.cacheWriteTokens, usage.inputTokens - cached);
  const writtenHour = Math.min(usage.cacheWrite1hTokens ?? 0, written);
  const plain = usage.inputTokens - cached - written;
  const writePrice = pricing.cache_write ?? pricing.prompt;
  const tokens =
    plain * pricing.prompt +
    cached * (pricing.cached_read ?? pricing.prompt) +
    (written - writtenHour) * writePrice +
    writtenHour * (pricing.cache_write_1h ?? writePrice) +
    usage.outputTokens * pricing.completion;
  return roundUsd(tokens / 1_000_000 + pricing.request);
}

/** Rounds to 1e-12 USD so sums do not show binary noise (0.30000000000000004). */
export function roundUsd(n: number): number {
  return Math.round(n * 1e12) / 1e12;
}
