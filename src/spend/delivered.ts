import { chatUsageBody } from '../dialects/chat-completions';
import { keyAt } from '../dialects/common';
import { messagesUsageBody } from '../dialects/messages';
import type { FinishInfo, StreamRewriter } from '../dialects/types';
import type { NormalizedUsage, SseEvent } from '../pipeline/types';
import { inputTokens } from './estimate';

/** Characters per token assumed for relayed output text (cl100k on English prose averages about 4). */
const CHARS_PER_TOKEN = 4;
/** Relayed events held before their output is counted (see billedByDelivery). */
const UNCOUNTED_MAX = 64;

/** JSON keys whose string values are model output, per client dialect: one regex each, one pass per event. */
const OUTPUT_KEYS = {
  chat_completions: /"(?:content|reasoning|reasoning_content|arguments|refusal)":"/g,
  messages: /"(?:text|thinking|partial_json)":"/g,
} as const;

export type StreamDialect = keyof typeof OUTPUT_KEYS;

/**
 * Characters of model output one client-dialect event carries, found with one regex pass and string searches
 * (no JSON parse: this runs for every event of every stream; a single alternation is ~5× cheaper than one
 * `indexOf` pass per key). Escapes count as written (`\n` is 2), close enough for an estimate. Inside a JSON
 * string every quote is escaped, so a key pattern can only match a real key.
 *
 * @example outputChars('chat_completions', { data: '{"choices":[{"delta":{"content":"Hello"}}]}' }) // 5
 */
export function outputChars(dialect: StreamDialect, ev: SseEvent): number {
  if (dialect === 'messages' && ev.event !== 'content_block_delta') return 0;
  const data = ev.data;
  const keys = OUTPUT_KEYS[dialect];
  keys.lastIndex = 0;
  let chars = 0;
  // `test` moves `lastIndex` past the key like `exec` does, without allocating a match array per key.
  while (keys.test(data)) {
    const start = keys.lastIndex;
    let end = data.indexOf('"', start);
    // A quote preceded by an odd number of backslashes is escaped: part of the value.
    while (end > 0 && escaped(data, end)) end = data.indexOf('"', end + 1);
    if (end < 0) break;
    chars += end - start;
    keys.lastIndex = end + 1;
  }
  return chars;
}

function escaped(data: string, quote: number): boolean {
  let n = 0;
  for (let i = quote - 1; i >= 0 && data.charCodeAt(i) === 92; i--) n++;
  return n % 2 === 1;
}

/**
 * Wraps a stream rewriter so that a stream cut short (client gone, provider died, gateway shutting down) is
 * billed for what was delivered: the output tokens are at least those of the text relayed so far (at 4
 * characters per token), and when the provider never reported usage at all, the input tokens are counted
 * from the request body with the tokenizer of the spend estimates. A stream that ended normally with usage
 * keeps the provider's figures, but for an input count of none (missing, 0, negative or no number): a request
 * has input, which is then counted from the request as well (it had been billed as free).
 *
 * @example const rewriter = billedByDelivery(DIALECTS[d].streamRewriter(info), { dialect: d, info, body });
 */
export function billedByDelivery(
  inner: StreamRewriter,
  o: { dialect: StreamDialect; info: FinishInfo; body: Record<string, unknown> | null; reported?: () => NormalizedUsage | null; bounds?: UsageBounds },
): StreamRewriter {
  let chars = 0;
  // Relayed events not counted yet. Why not count each at once: a stream that ends with the provider's usage
  // (nearly all) never needs the count, and counting was ~2 % of a 20-event stream's CPU. At most
  // UNCOUNTED_MAX are held, so a long stream keeps no more of its text alive than that.
  let uncounted: SseEvent[] = [];
  const countUncounted = () => {
    for (const ev of uncounted) chars += outputChars(o.dialect, ev);
    uncounted = [];
  };
  let ended = false;
  let estimated: NormalizedUsage | null | undefined;
  // The request's input count, for a provider that reported none: counted once (the tokenizer is not cheap).
  let requestInput: number | undefined;
  const countInput = (body: Record<string, unknown>) => (requestInput ??= inputTokens(body));
  const withInput = (u: NormalizedUsage): NormalizedUsage => withRequestInput(u, o.body, o.bounds, countInput);
  const usage = (): NormalizedUsage | null => {
    if (estimated !== undefined) return estimated;
    const provided = inner.usage();
    const reported = provided ? withInput(o.bounds ? boundedUsage(provided, o.bounds) : provided) : null;
    // A whole stream keeps the provider's figures (within bounds), unless it says no output for relayed text.
    if (ended && reported && reported.outputTokens > 0) return reported;
    countUncounted();
    const output = Math.ceil(chars / CHARS_PER_TOKEN);
    if (reported) return reported.outputTokens >= output ? reported : { ...reported, outputTokens: o.bounds ? Math.min(output, o.bounds.maxOutputTokens) : output };
    // Nothing relayed: a stream cut before any output is billed nothing; a whole answer without text (a
    // finish only) had been too, though the provider read the whole input: it is billed the input.
    if (chars === 0 && !inner.complete() && !inner.answered()) return null;
    // The provider reported usage the client's stream could not carry yet (a translated message_start's input
    // count): its figures, not the tokenizer's.
    const partial = o.reported?.();
    if (partial) {
      const whole = partial.outputTokens >= output ? partial : { ...partial, outputTokens: output };
      // Within bounds as the provider's final usage is: a message_start claiming 1e300 input tokens had been billed so.
      estimated = withInput(o.bounds ? boundedUsage(whole, o.bounds) : whole);
      return estimated;
    }
    // Computed once: the tokenizer is not cheap, and usage() and cost() are both asked.
    estimated = { inputTokens: o.body ? countInput(o.body) : 0, outputTokens: output, cachedTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 };
    return estimated;
  };
  /**
   * The event that carries the provider's final usage (chat: the usage chunk; messages: message_delta), with
   * the usage and `cost` the request is billed when those differ from the provider's figures (output above
   * the limit the provider was given, no output for relayed text): the stream's answer says what the ledger
   * says, as a JSON answer does. The provider's figures had been shown: 5 000 output tokens and $0.076 for a
   * request billed 100 and $0.0025.
   */
  const billedEvent = (out: SseEvent): SseEvent => {
    // The rewriter's usage first: before the provider's usage arrives (every content event) no search is made.
    const provided = inner.usage();
    if (!provided) {
      // A messages stream whose provider reported no usage at all (a chat provider that sent no usage chunk, seen
      // through translation): its message_delta, the answer's last word on usage, says what is billed. It had
      // said the translation's zeros, without a cost, while the ledger held the estimate.
      const billed = o.dialect === 'messages' && out.event === 'message_delta' ? usage() : null;
      return billed ? withBilled(out, billed) : out;
    }
    if (!carriesUsage(o.dialect, out)) return out;
    let billed = withInput(o.bounds ? boundedUsage(provided, o.bounds) : provided);
    if (billed.outputTokens === 0) {
      countUncounted();
      const output = Math.ceil(chars / CHARS_PER_TOKEN);
      if (output > 0) billed = { ...billed, outputTokens: o.bounds ? Math.min(output, o.bounds.maxOutputTokens) : output };
    }
    if (billed === provided) return out;
    return withBilled(out, billed);
  };
  /** `out` (a chat usage chunk or a messages message_delta) with the usage `billed` and its cost. */
  const withBilled = (out: SseEvent, billed: NormalizedUsage): SseEvent => {
    const data = JSON.parse(out.data) as { usage?: Record<string, unknown> };
    const { cost: _cost, is_byok: _byok, ...rest } = data.usage ?? {};
    const shaped = o.dialect === 'chat_completions' ? chatUsageBody(billed) : messagesUsageBody(billed);
    data.usage = { ...rest, ...shaped, cost: o.info.costOf(billed), is_byok: o.info.isByok };
    return { ...out, data: JSON.stringify(data) };
  };
  return {
    rewrite(ev) {
      const out = inner.rewrite(ev);
      if (out && uncounted.push(out) >= UNCOUNTED_MAX) countUncounted();
      return out ? billedEvent(out) : out;
    },
    failure: (err) => inner.failure(err),
    end() {
      const events = inner.end(usage);
      // An end without the provider's own ending (inner.end() then emits the failure) is a cut-short stream.
      ended = !inner.failed();
      return events;
    },
    usage,
    cost() {
      const u = usage();
      if (u === inner.usage()) return inner.cost();
      return u ? o.info.costOf(u) : null;
    },
    failed: () => inner.failed(),
    complete: () => inner.complete(),
    answered: () => inner.answered(),
  };
}

/**
 * Whether a client-dialect event relays the provider's usage as the dialect rewriter stamped it (with `cost`):
 * a chat chunk with a usage object, a messages `message_delta`. A string search: this runs for every event.
 */
function carriesUsage(dialect: StreamDialect, ev: SseEvent): boolean {
  if (dialect === 'messages') return ev.event === 'message_delta' && keyAt(ev.data, 'cost":') >= 0;
  return keyAt(ev.data, 'usage":{') >= 0;
}

/**
 * Usage for a non-streaming answer whose provider reported none (or only zeros, as a translated answer
 * carries): input tokens counted from the request with the tokenizer of the spend estimates, output tokens at
 * 4 characters per token of the answer's text, reasoning and tool-call arguments. As for a stream billed by
 * delivery: an answer served is never billed as free because its provider left the usage out.
 */
export function estimatedAnswerUsage(dialect: StreamDialect, answer: Record<string, unknown>, request: Record<string, unknown> | null): NormalizedUsage {
  let chars = 0;
  const add = (v: unknown) => {
    if (typeof v === 'string') chars += v.length;
    else if (v && typeof v === 'object') chars += JSON.stringify(v).length;
  };
  if (dialect === 'chat_completions') {
    for (const choice of Array.isArray(answer.choices) ? answer.choices : []) {
      const m = (choice as { message?: Record<string, unknown> } | null)?.message;
      if (!m) continue;
      add(m.content);
      add(m.reasoning ?? m.reasoning_content);
      add(m.refusal);
      for (const call of Array.isArray(m.tool_calls) ? m.tool_calls : []) add((call as { function?: { arguments?: unknown } })?.function?.arguments);
    }
  } else {
    for (const block of Array.isArray(answer.content) ? answer.content : []) {
      const b = block as Record<string, unknown> | null;
      if (!b) continue;
      add(b.type === 'tool_use' ? b.input : (b.text ?? b.thinking));
    }
  }
  return { inputTokens: request ? inputTokens(request) : 0, outputTokens: Math.ceil(chars / CHARS_PER_TOKEN), cachedTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 };
}

/**
 * `u` with the request's input tokens (the estimate's tokenizer) when the provider reported none (missing, 0,
 * negative or no number): every request has input, and a JSON answer whose usage said `prompt_tokens: -1000`
 * or left it out had its whole prompt billed as free. Returns `u` itself otherwise. `count`: the tokenizer's
 * count of the request (a stream's rewriter passes one that counts once).
 */
export function withRequestInput(u: NormalizedUsage, request: Record<string, unknown> | null, b?: UsageBounds, count = inputTokens): NormalizedUsage {
  if (u.inputTokens > 0 || !request) return u;
  const input = Math.min(count(request), b?.maxInputTokens ?? Infinity);
  return input > 0 ? { ...u, inputTokens: input } : u;
}

/** The most a provider can have used for one request: output by the limit it was given, input by the model's context. */
export interface UsageBounds {
  maxOutputTokens: number;
  maxInputTokens: number;
  /** The most model calls the provider may make for the request (serverLoopCalls); 1 when absent. */
  maxCalls?: number;
}

/** The most model calls a server-side loop is billed for (Anthropic pauses a long loop with `pause_turn` well before). */
export const MAX_SERVER_LOOP_CALLS = 64;

/**
 * The most model calls a provider may make for one request: several (a server-side tool loop, or a compaction
 * call before the answer) when the request lets it, with a server tool (a `tools` entry typed other than
 * `custom`/`function`), `mcp_servers` or `context_management`; else 1. So a provider claiming many calls for a
 * plain request is still bounded as one call.
 *
 * @example serverLoopCalls({ tools: [{ type: 'web_search_20250305', name: 'web_search' }] }) // 64
 */
export function serverLoopCalls(body: Record<string, unknown>): number {
  const tools = Array.isArray(body.tools) ? (body.tools as { type?: unknown }[]) : [];
  const serverTool = tools.some((t) => typeof t?.type === 'string' && t.type !== 'custom' && t.type !== 'function');
  const mcp = Array.isArray(body.mcp_servers) && body.mcp_servers.length > 0;
  return serverTool || mcp || (body.context_management !== undefined && body.context_management !== null) ? MAX_SERVER_LOOP_CALLS : 1;
}

/** The ceiling when the request and the model say nothing (no model has a context or an output of 100 M tokens). */
export const ABSURD_TOKENS = 100_000_000;

/**
 * `u` within what the request allowed: output at most the output limit the provider was given (times chat `n`),
 * input at most the model's context, the parts (cached, cache writes and their 1-hour share, reasoning) at most their whole. A
 * provider that reports more (a bug, or a hostile upstream: 10^15 output tokens were billed as $3·10^10 and
 * took any balance with them) is billed the bound. Usage summed over several model calls (`u.calls`, up to the
 * request's `maxCalls`) is bounded per call: an Anthropic server-tool loop's input is every call's context
 * (it had been cut to one context). Returns `u` itself when it is within.
 */
export function boundedUsage(u: NormalizedUsage, b: UsageBounds): NormalizedUsage {
  const calls = Math.max(1, Math.min(Math.floor(u.calls ?? 1), b.maxCalls ?? 1));
  const maxInput = b.maxInputTokens * calls;
  const maxOutput = b.maxOutputTokens * calls;
  const hour = u.cacheWrite1hTokens ?? 0;
  if (u.outputTokens <= maxOutput && u.inputTokens <= maxInput && u.reasoningTokens <= u.outputTokens && u.cachedTokens + u.cacheWriteTokens <= u.inputTokens && hour <= u.cacheWriteTokens) return u;
  const inputTokens = Math.min(u.inputTokens, maxInput);
  const outputTokens = Math.min(u.outputTokens, maxOutput);
  const cachedTokens = Math.min(u.cachedTokens, inputTokens);
  const cacheWriteTokens = Math.min(u.cacheWriteTokens, inputTokens - cachedTokens);
  const cacheWrite1hTokens = Math.min(hour, cacheWriteTokens);
  return {
    inputTokens,
    outputTokens,
    cachedTokens,
    cacheWriteTokens,
    ...(cacheWrite1hTokens > 0 ? { cacheWrite1hTokens } : {}),
    reasoningTokens: Math.min(u.reasoningTokens, outputTokens),
  };
}
