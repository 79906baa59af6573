import { hash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { ModelConfig, ModelEndpointConfig, Pricing } from '../config/types';
import { choiceCount, isObj } from '../dialects/common';
import { requestedModels } from '../routing/candidates';

/**
 * Up-front cost estimate of a request (spec 8.2.3): its input tokens plus the completion tokens `max_tokens`
 * allows (or `defaultCompletionTokens` when unset, capped by the model's `max_output_tokens`), times chat `n`, at the token
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
/**
 * A base64 PDF (or other non-text file) counts 1 token per this many bytes of the file, between FILE_MIN_TOKENS
 * and FILE_MAX_TOKENS: providers bill a PDF page as its text (Anthropic: 1 500-3 000 tokens) plus an image of it
 * (~1 600), and a page is a few KB (text) to 100 KB or more (scans). Its base64 read as text had counted ~1
 * token per 2.25 bytes: a 5 MB PDF 2.2 M tokens, refused by budgets and cut away by context-compression.
 */
const FILE_BYTES_PER_TOKEN = 10;
/** One page at the high end: ~3 000 text tokens plus its image. */
const FILE_MIN_TOKENS = 5_000;
/** The 100 pages OpenAI and Anthropic take in one PDF, at FILE_MIN_TOKENS each. */
const FILE_MAX_TOKENS = 500_000;
/**
 * Audio (`input_audio`) counts 1 token per this many bytes: providers bill ~10 (OpenAI) to 32 (Gemini) tokens a
 * second, and compressed speech at 16 kbit/s is 2 000 bytes a second (so at least 32 a second here).
 */
const AUDIO_BYTES_PER_TOKEN = 64;
/** Per-message framing (role markers) in chat formats. */
const MESSAGE_OVERHEAD = 4;

let encoder: ((text: string) => number) | undefined;

/** Pieces a text is counted in: BPE is quadratic in the length of a run without breaks (40 000 letters: 1.2 s). */
const PIECE_CHARS = 256;
/**
 * Above this, a text (or the rest of a request's texts, once this many characters were tokenized) is not
 * tokenized: 1 token per 3 characters (more than prose has; an estimate), so one request costs bounded time.
 */
const TOKENIZE_MAX_CHARS = 100_000;

/** Texts at least this long have their counts remembered (shorter ones cost a few microseconds to count). */
const CACHED_MIN_CHARS = 256;
/**
 * Counts of texts seen lately, by SHA-256 of the text. Requests resend the same long texts again and again (a
 * client's system prompt and tools, a conversation's earlier turns), and tokenizing costs ~100–200 ns a
 * character (a 20 KB system prompt ~2 ms of the event loop on every request); hashing it costs ~1 ns a
 * character. Only the digest and the count are kept, never the text. (The digest is of the UTF-8 bytes, so two
 * texts that differ only in unpaired surrogates share a count: an estimate, off by a token or two.)
 */
const counted = new LRUCache<string, number>({ max: 4096 });

/**
 * Counts BPE tokens of a text (loads the tables on first use), in pieces of at most PIECE_CHARS cut at a
 * space where one is near (prose counts the same: the tokenizer splits before spaces anyway), so that a long
 * run of letters or spaces costs linear time, not quadratic (a 100 KB run of one letter held the event loop
 * 7 s); a text over TOKENIZE_MAX_CHARS is estimated from its length. A long text's count is remembered
 * (`counted`): the same text again costs its hash, and counts the same.
 */
export function countTokens(text: string): number {
  if (!text) return 0;
  if (text.length > TOKENIZE_MAX_CHARS) return Math.ceil(text.length / 3);
  if (text.length < CACHED_MIN_CHARS) return tokenize(text);
  const digest = hash('sha256', text, 'base64');
  let tokens = counted.get(digest);
  if (tokens === undefined) {
    tokens = tokenize(text);
    counted.set(digest, tokens);
  }
  return tokens;
}

/** The BPE count of a text of at most TOKENIZE_MAX_CHARS, piece by piece (see countTokens). */
function tokenize(text: string): number {
  if (!encoder) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const mod = require('gpt-tokenizer/cjs/encoding/cl100k_base') as { countTokens(text: string): number };
    encoder = (t) => mod.countTokens(t);
  }
  if (text.length <= PIECE_CHARS) return encoder(text);
  let tokens = 0;
  for (let i = 0; i < text.length; ) {
    let end = Math.min(text.length, i + PIECE_CHARS);
    if (end < text.length) {
      const space = text.lastIndexOf(' ', end);
      if (space > i + PIECE_CHARS / 2) end = space;
      // Never between the two halves of a surrogate pair.
      const c = text.charCodeAt(end - 1);
      if (c >= 0xd800 && c <= 0xdbff) end--;
    }
    tokens += encoder(text.slice(i, end));
    i = end;
  }
  return tokens;
}

/**
 * A token counter that tokenizes at most TOKENIZE_MAX_CHARS characters in all (a text that would go past
 * them counts 1 token per 3 characters), so that the texts it is given cost bounded time together.
 *
 * @example const count = budgetedCount(); messages.map((m) => inputTokens({ messages: [m] }, count));
 */
export function budgetedCount(countText: (text: string) => number = countTokens): (text: string) => number {
  let left = TOKENIZE_MAX_CHARS;
  return (text) => {
    if (text.length > left) return Math.ceil(text.length / 3);
    left -= text.length;
    return countText(text);
  };
}

/**
 * Input tokens of a request body in either dialect: messages, system, tools (as JSON the model reads).
 * `count` counts one text (a caller estimating several bodies with the same messages passes a memo).
 */
export function inputTokens(body: Record<string, unknown>, countText: (text: string) => number = countTokens): number {
  let tokens = 0;
  const count = budgetedCount(countText);
  const walk = (v: unknown): void => {
    if (typeof v === 'string') tokens += count(v);
    else if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      if (o.type === 'image' || o.type === 'image_url' || o.type === 'input_image') {
        tokens += IMAGE_TOKENS; // never tokenize base64 image data
        return;
      }
      const attached = attachmentTokens(o);
      if (attached !== undefined) {
        tokens += attached; // nor a file's
        return;
      }
      for (const [k, val] of Object.entries(o)) if (k !== 'cache_control' && k !== 'type') walk(val);
    }
  };
  const messages = Array.isArray(body.messages) ? body.messages : [];
  tokens += messages.length * MESSAGE_OVERHEAD;
  walk(messages);
  walk(body.system);
  if (body.tools !== undefined) tokens += count(JSON.stringify(body.tools));
  return tokens;
}

/** Bytes `chars` characters of base64 decode to (padding aside). */
const base64Bytes = (chars: number) => Math.floor((chars * 3) / 4);

const fileTokens = (bytes: number) => Math.min(FILE_MAX_TOKENS, Math.max(FILE_MIN_TOKENS, Math.ceil(bytes / FILE_BYTES_PER_TOKEN)));

/**
 * Tokens of a content block carrying a file inline, by its size (see FILE_BYTES_PER_TOKEN), or undefined for
 * any other block (a file by URL or id is counted as text: its URL is short). Messages: `document` with a
 * base64 `source` (a PDF; a `text` source is counted as text). Chat: `file` with `file_data` (a data URL, or
 * raw base64, which is taken as a PDF; an image counts as one, a text/* file 1 token per 3 bytes) and
 * `input_audio`.
 */
function attachmentTokens(o: Record<string, unknown>): number | undefined {
  if (o.type === 'document' && isObj(o.source) && o.source.type === 'base64' && typeof o.source.data === 'string') return fileTokens(base64Bytes(o.source.data.length));
  if (o.type === 'input_audio' && isObj(o.input_audio) && typeof o.input_audio.data === 'string') return Math.ceil(base64Bytes(o.input_audio.data.length) / AUDIO_BYTES_PER_TOKEN);
  if (o.type !== 'file' || !isObj(o.file) || typeof o.file.file_data !== 'string') return undefined;
  const data = o.file.file_data;
  if (/^https?:\/\//i.test(data)) return undefined;
  const prefix = /^data:([^;,]*)[^,]*,/i.exec(data.slice(0, 200));
  const bytes = base64Bytes(data.length - (prefix?.[0].length ?? 0));
  const mediaType = prefix?.[1].toLowerCase() ?? 'application/pdf';
  if (mediaType.startsWith('image/')) return IMAGE_TOKENS;
  if (mediaType.startsWith('text/')) return Math.ceil(bytes / 3);
  return fileTokens(bytes);
}

/**
 * The completion limit a request sets. A chat request may set both names (providers differ in which they
 * honour, and the translation and simulated provider take `max_completion_tokens`): the larger one is held,
 * so that setting a small `max_tokens` beside a large `max_completion_tokens` does not shrink the hold.
 */
export function requestedMaxTokens(body: Record<string, unknown>): number | undefined {
  let max: number | undefined;
  for (const f of ['max_tokens', 'max_completion_tokens']) {
    const v = body[f];
    if (typeof v === 'number' && Number.isFinite(v) && v >= 0) max = Math.max(max ?? 0, Math.floor(v));
  }
  return max;
}

const hasPrice = (p: Pricing) => p.prompt > 0 || p.completion > 0 || p.request > 0 || (p.cached_read ?? 0) > 0 || (p.cache_write ?? 0) > 0 || (p.cache_write_1h ?? 0) > 0;

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
  return pricedModels(requestedModels(body).flatMap((id) => models.get(id) ?? []));
}

function pricedModels(known: ModelConfig[]): Priced {
  const all = known.flatMap((m) => m.endpoints.flatMap(pricings));
  return { models: known, paid: all.some(hasPrice), tokenPriced: all.some((p) => p.prompt > 0 || p.completion > 0) };
}

/**
 * One call's completion tokens and cost at the dearest endpoint of `models`: `asked` completion tokens (or
 * `defaultCompletionTokens`), capped per model by its `max_output_tokens`, for each of `choices` answers (chat
 * `n`: every choice may use all of `max_tokens`, and the provider bills them all; held at one answer, `n: 128`
 * had been billed ~20 times its hold, past a key's limit and a prepaid balance's in-flight budget).
 */
function callEstimate(models: ModelConfig[], input: number, asked: number | undefined, defaultCompletionTokens: number, choices = 1): { completion: number; usd: number } {
  let usd = 0;
  let completion = 0;
  for (const m of models) {
    const out = choices * Math.min(asked ?? defaultCompletionTokens, m.max_output_tokens ?? Number.POSITIVE_INFINITY);
    completion = Math.max(completion, out);
    // Input at the dearest of the prompt and cache-write prices: a prompt written to the cache is billed at the
    // latter (Anthropic's 1.25×, 2× for a 1-hour write), which the hold had left out.
    for (const pr of m.endpoints.flatMap(pricings)) usd = Math.max(usd, (input * Math.max(pr.prompt, pr.cache_write ?? 0, pr.cache_write_1h ?? 0) + out * pr.completion) / 1_000_000);
  }
  return { completion, usd };
}

/** The token-priced estimate of `p` (tokenizes the request: call only when a hold or budget needs it). */
export function estimateOf(body: Record<string, unknown>, p: Priced, defaultCompletionTokens: number): Estimate {
  if (!p.tokenPriced) return unpriced(p);
  const input = inputTokens(body);
  const { completion, usd } = callEstimate(p.models, input, requestedMaxTokens(body), defaultCompletionTokens, choiceCount(body));
  return { paid: p.paid, models: p.models, inputTokens: input, completionTokens: completion, usd };
}


/** The estimate of a request nothing will hold: no tokens counted. */
export function unpriced(p: Priced): Estimate {
  return { paid: p.paid, models: p.models, inputTokens: 0, completionTokens: 0, usd: 0 };
}

/**
 * One upstream call a stage will make for a request (fusion's candidates and judge, a tool loop's next turn):
 * its body, naming its model, and whether it also reads the answers of the calls before it (fusion's judge
 * gets the candidates' answers in its prompt, so their completion tokens are its input too).
 */
export interface PlannedCall {
  body: Record<string, unknown>;
  readsEarlier?: boolean;
}

/** What the models of several calls cost, as `priced` for one body: the union of their models. */
export function pricedCalls(calls: readonly PlannedCall[], models: ReadonlyMap<string, ModelConfig>): Priced {
  const known = new Set<ModelConfig>();
  for (const c of calls) for (const id of requestedModels(c.body)) {
    const m = models.get(id);
    if (m) known.add(m);
  }
  return pricedModels([...known]);
}

/**
 * The estimate of several calls: the sum of each call's estimate (as `estimateOf`), a call that reads the
 * earlier ones counting their completion tokens as input. Texts the calls share (the same conversation
 * sent to each fusion model) are tokenized once.
 */
export function estimateCalls(calls: readonly PlannedCall[], models: ReadonlyMap<string, ModelConfig>, defaultCompletionTokens: number): Estimate {
  const p = pricedCalls(calls, models);
  if (!p.tokenPriced) return unpriced(p);
  const counted = new Map<string, number>();
  const count = (text: string) => {
    let n = counted.get(text);
    if (n === undefined) counted.set(text, (n = countTokens(text)));
    return n;
  };
  const total = { paid: p.paid, models: p.models, inputTokens: 0, completionTokens: 0, usd: 0 };
  for (const call of calls) {
    const input = inputTokens(call.body, count) + (call.readsEarlier ? total.completionTokens : 0);
    const known = requestedModels(call.body).flatMap((id) => models.get(id) ?? []);
    const c = callEstimate(known, input, requestedMaxTokens(call.body), defaultCompletionTokens, choiceCount(call.body));
    total.inputTokens += input;
    total.completionTokens += c.completion;
    total.usd += c.usd;
  }
  return total;
}

/**
 * The per-request fee a call to one of `models` may be billed: the dearest endpoint's (`pricing.request`).
 * Not part of an estimate (spec 8.2.3: the in-flight budget counts token prices only), but a budget's hold
 * adds it, so that a limit is overrun by at most one request's cost however many run at once.
 */
export function requestFee(models: readonly ModelConfig[]): number {
  let fee = 0;
  for (const m of models) for (const pr of m.endpoints.flatMap(pricings)) fee = Math.max(fee, pr.request);
  return fee;
}

/** The per-request fees of several calls: each call's, as `requestFee` of its models, summed. */
export function requestFees(calls: readonly PlannedCall[], models: ReadonlyMap<string, ModelConfig>): number {
  let fees = 0;
  for (const call of calls) fees += requestFee(requestedModels(call.body).flatMap((id) => models.get(id) ?? []));
  return fees;
}

export function estimate(body: Record<string, unknown>, models: ReadonlyMap<string, ModelConfig>, defaultCompletionTokens: number): Estimate {
  return estimateOf(body, priced(body, models), defaultCompletionTokens);
}
