import type { ModelConfig, ModelEndpointConfig, Pricing } from '../config/types';
import { requestedModels } from '../routing/candidates';

/**
 * Up-front cost estimate of a request (spec 8.2.3): its input tokens plus the completion tokens `max_tokens`
 * allows (or `defaultCompletionTokens` when unset, capped by the model's `max_output_tokens`), at the token
 * prices of the most expensive endpoint it may be routed to. Per-request fees do not count, so a request
 * without a token price is not held.
 *
 * Tokens are counted with the cl100k_base BPE of gpt-tokenizer. Other providers tokenize differently
 * (usually within ~10-20 %); an estimate only sizes a hold, and the ledger bills real usage. cl100k is chosen
 * over o200k because its tables cost ~40 MiB instead of ~70 MiB; they load on first use.
 */
export interface Estimate {
  /** Some endpoint of the requested models has a price (token or per request). */
  paid: boolean;
  /** The models the request names, known to this gateway. */
  models: ModelConfig[];
  inputTokens: number;
  completionTokens: number;
  usd: number;
}

/** Tokens assumed for an image part: providers bill images as input tokens, typically 85-1600 each. */
const IMAGE_TOKENS = 1000;
/** Per-message framing (role markers) in chat formats. */
const MESSAGE_OVERHEAD = 4;

let encoder: ((text: string) => number) | undefined;

/** Counts BPE tokens of a text (loads the tables on first use). */
export function countTokens(text: string): number {
  if (!encoder) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const mod = require('gpt-tokenizer/cjs/encoding/cl100k_base') as { countTokens(text: string): number };
    encoder = (t) => mod.countTokens(t);
  }
  return text ? encoder(text) : 0;
}

/** Input tokens of a request body in either dialect: messages, system, tools (as JSON the model reads). */
export function inputTokens(body: Record<string, unknown>): number {
  let tokens = 0;
  const walk = (v: unknown): void => {
    if (typeof v === 'string') tokens += countTokens(v);
    else if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      if (o.type === 'image' || o.type === 'image_url' || o.type === 'input_image') {
        tokens += IMAGE_TOKENS; // never tokenize base64 image data
        return;
      }
      for (const [k, val] of Object.entries(o)) if (k !== 'cache_control' && k !== 'type') walk(val);
    }
  };
  const messages = Array.isArray(body.messages) ? body.messages : [];
  tokens += messages.length * MESSAGE_OVERHEAD;
  walk(messages);
  walk(body.system);
  if (body.tools !== undefined) tokens += countTokens(JSON.stringify(body.tools));
  return tokens;
}

function requestedMaxTokens(body: Record<string, unknown>): number | undefined {
  for (const f of ['max_tokens', 'max_completion_tokens']) {
    const v = body[f];
    if (typeof v === 'number' && Number.isFinite(v) && v >= 0) return Math.floor(v);
  }
  return undefined;
}

const hasPrice = (p: Pricing) => p.prompt > 0 || p.completion > 0 || p.request > 0 || (p.cached_read ?? 0) > 0 || (p.cache_write ?? 0) > 0;

/** Every pricing an endpoint may bill at (its own, and its fast configuration's). */
function pricings(e: ModelEndpointConfig): Pricing[] {
  return e.fast ? [e.pricing, e.fast.pricing] : [e.pricing];
}

/** What a request's models cost, without counting tokens: enough to know whether anything must be checked. */
export interface Priced {
  /** The models the request names, known to this gateway. */
  models: ModelConfig[];
  /** Some endpoint has a price (token or per request). */
  paid: boolean;
  /** Some endpoint has a token price, so an estimate can be non-zero. */
  tokenPriced: boolean;
}

export function priced(body: Record<string, unknown>, models: ReadonlyMap<string, ModelConfig>): Priced {
  const known = requestedModels(body).flatMap((id) => models.get(id) ?? []);
  const all = known.flatMap((m) => m.endpoints.flatMap(pricings));
  return { models: known, paid: all.some(hasPrice), tokenPriced: all.some((p) => p.prompt > 0 || p.completion > 0) };
}

/** The token-priced estimate of `p` (tokenizes the request: call only when a hold or budget needs it). */
export function estimateOf(body: Record<string, unknown>, p: Priced, defaultCompletionTokens: number): Estimate {
  if (!p.tokenPriced) return { paid: p.paid, models: p.models, inputTokens: 0, completionTokens: 0, usd: 0 };
  const input = inputTokens(body);
  const asked = requestedMaxTokens(body);
  let usd = 0;
  let completion = 0;
  for (const m of p.models) {
    const out = Math.min(asked ?? defaultCompletionTokens, m.max_output_tokens ?? Number.POSITIVE_INFINITY);
    completion = Math.max(completion, out);
    for (const pr of m.endpoints.flatMap(pricings)) usd = Math.max(usd, (input * pr.prompt + out * pr.completion) / 1_000_000);
  }
  return { paid: p.paid, models: p.models, inputTokens: input, completionTokens: completion, usd };
}

export function estimate(body: Record<string, unknown>, models: ReadonlyMap<string, ModelConfig>, defaultCompletionTokens: number): Estimate {
  return estimateOf(body, priced(body, models), defaultCompletionTokens);
}
