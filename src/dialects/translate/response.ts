import { messagesErrorType } from '../../errors/envelope';
import { ERROR_STATUS, type ErrorType } from '../../errors/gateway-error';
import { upstreamErrorType } from '../../providers/upstream-errors';
import type { NormalizedUsage } from '../../pipeline/types';
import { chatUsage, chatUsageBody } from '../chat-completions';
import { isObj, NO_USAGE, type Obj } from '../common';
import { messagesUsage, messagesUsageBody } from '../messages';

/**
 * Non-streaming response translation between the two API styles, plus the small mappings (stop reason,
 * usage, errors) that the stream translators share. The gateway stamps id/model/provider/cost afterwards.
 */

/** Text shown as `message.refusal` when a messages-style refusal carries no explanation. */
export const DEFAULT_REFUSAL = 'The model declined to respond.';

// ---- stop reason ⇄ finish reason ----

const FINISH_OF_STOP: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  pause_turn: 'stop',
  max_tokens: 'length',
  model_context_window_exceeded: 'length',
  tool_use: 'tool_calls',
  refusal: 'content_filter',
};

const STOP_OF_FINISH: Record<string, string> = {
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
  function_call: 'tool_use',
  content_filter: 'refusal',
};

/** Messages `stop_reason` → chat `finish_reason` (unknown or missing reasons count as `stop`). */
export function finishReasonOf(stopReason: unknown): string {
  return (typeof stopReason === 'string' && FINISH_OF_STOP[stopReason]) || 'stop';
}

/**
 * The stop sequence that ended a chat answer, where the provider says which: vLLM names it in the choice's
 * `stop_reason`, SGLang in `matched_stop` (a number there is a stop token, not a sequence). Null for a `stop`
 * finish that names none: OpenAI's API does not say whether the model stopped or a sequence stopped it.
 *
 * @example matchedStop({ finish_reason: 'stop', stop_reason: '###' }) // '###'
 */
export function matchedStop(choice: Obj): string | null {
  if (choice.finish_reason !== 'stop') return null;
  const named = typeof choice.stop_reason === 'string' ? choice.stop_reason : choice.matched_stop;
  return typeof named === 'string' && named ? named : null;
}

/** Chat `finish_reason` → messages `stop_reason` (unknown reasons count as `end_turn`). */
export function stopReasonOf(finishReason: unknown, calledTools = false): string {
  const reason = (typeof finishReason === 'string' && STOP_OF_FINISH[finishReason]) || 'end_turn';
  // Some providers (Gemini's OpenAI-compatible API) finish a turn with tool calls as `stop`: the Messages API
  // says `tool_use` whenever the model called a tool, and agent loops run tools on that alone.
  return calledTools && reason === 'end_turn' ? 'tool_use' : reason;
}

// ---- usage ----


/** Messages usage → chat usage, through the one normalized form each dialect reads and writes. */
/**
 * Service tiers across the styles (each SDK types its own values): a chat provider's `priority` is the
 * Messages API's `priority`, every other (`default`, `auto`, `flex`, `scale`) its `standard`; a messages
 * provider's `standard` (or `batch`) is chat's `default`, `priority` is `priority`.
 */
export function tierToMessages(tier: string): string {
  return tier === 'priority' ? 'priority' : 'standard';
}

export function tierToChat(tier: string): string {
  return tier === 'priority' ? 'priority' : 'default';
}

export function messagesUsageToChat(u: unknown): Obj {
  return chatUsageBody(messagesUsage(u) ?? NO_USAGE);
}

/** Chat usage → messages usage (`input_tokens` there excludes cache reads and writes). */
export function chatUsageToMessages(u: unknown): Obj {
  return messagesUsageBody(chatUsage(u) ?? NO_USAGE);
}

// ---- errors ----

/**
 * The HTTP status a messages-style error type stands for, to classify an in-band error as the provider layer
 * classifies an HTTP error of that status (`upstreamErrorType`: its message decides context length, content
 * policy, the operator's account). Authentication, permission, billing and not-found errors upstream concern
 * the gateway's own credentials and configuration, not the caller's: they are not here (`provider_unavailable`).
 */
const STATUS_OF_MESSAGES_ERROR: Record<string, number> = {
  invalid_request_error: 400,
  request_too_large: 413,
  rate_limit_error: 429,
  overloaded_error: 529,
  timeout_error: 504,
};

const isErrorType = (v: unknown): v is ErrorType => typeof v === 'string' && Object.prototype.hasOwnProperty.call(ERROR_STATUS, v);

/** A messages-style `error` object (`{type, message, error_type?}`) → the chat error object `{code, message, metadata}`. */
export function messagesErrorToChat(e: unknown): Obj {
  const err = isObj(e) ? e : {};
  const message = typeof err.message === 'string' ? err.message : 'Provider error';
  const status = typeof err.type === 'string' && Object.hasOwn(STATUS_OF_MESSAGES_ERROR, err.type) ? STATUS_OF_MESSAGES_ERROR[err.type] : undefined;
  // Read as an HTTP error of its status is: a "prompt is too long" in a stream had been a plain invalid_request.
  const errorType: ErrorType = isErrorType(err.error_type) ? err.error_type : status !== undefined ? upstreamErrorType(status, String(err.type), message) : 'provider_unavailable';
  // `code` is the status this gateway gives the error type (a chat error carries one); the provider sent none,
  // so `provider_code` says so (it had been read back as the provider's: an overloaded Anthropic stream showed 503).
  return { code: ERROR_STATUS[errorType], message, metadata: { error_type: errorType, provider_code: null } };
}

/** A chat error object (`{code, message, metadata?}`) → the messages-style `error` object. */
export function chatErrorToMessages(e: unknown): Obj {
  const err = isObj(e) ? e : {};
  const meta = isObj(err.metadata) ? err.metadata : {};
  const message = typeof err.message === 'string' ? err.message : 'Provider error';
  let errorType: ErrorType;
  if (isErrorType(meta.error_type)) errorType = meta.error_type;
  // A status as the code: classified with its message as an HTTP error of that status is (7.4 rule 1: a content
  // filter is 403 whatever the status; a context-length 400 lets a larger model be tried).
  else if (typeof err.code === 'number') errorType = upstreamErrorType(err.code, typeof err.type === 'string' ? err.type : '', message);
  else if (isErrorType(err.code)) errorType = err.code;
  else errorType = 'provider_unavailable';
  return { type: messagesErrorType(errorType), message, error_type: errorType };
}

// ---- bodies ----

/** JSON text of a tool input for chat `arguments`. */
export function argumentsOf(input: unknown): string {
  return JSON.stringify(input ?? {});
}

/**
 * A chat `arguments` string → a messages tool `input` object (unparseable text is kept under `_raw`). Some
 * OpenAI-compatible servers (llama.cpp's llama-server) send the arguments as a JSON object rather than its
 * text: taken as it is (it had become `{}`, and the client ran the tool without the arguments the model gave).
 */
export function inputOf(args: unknown): Obj {
  if (isObj(args)) return args;
  if (typeof args !== 'string' || args.trim() === '') return {};
  try {
    const parsed = JSON.parse(args);
    return isObj(parsed) ? parsed : { _raw: args };
  } catch {
    return { _raw: args };
  }
}

/** An Anthropic-style message → a chat.completion object. */
export function messagesToChatResponse(body: Record<string, any>): Record<string, any> {
  if (body.type === 'error') return { id: body.request_id ?? body.id, error: messagesErrorToChat(body.error) };
  const texts: string[] = [];
  const thinking: string[] = [];
  const signed: ({ thinking: string; signature: string } | { data: string })[] = [];
  const toolCalls: Obj[] = [];
  for (const block of Array.isArray(body.content) ? body.content : []) {
    if (!isObj(block)) continue;
    if (block.type === 'text' && typeof block.text === 'string') texts.push(block.text);
    else if (block.type === 'thinking' && typeof block.thinking === 'string') {
      thinking.push(block.thinking);
      signed.push({ thinking: block.thinking, signature: typeof block.signature === 'string' ? block.signature : '' });
    } else if (block.type === 'redacted_thinking' && typeof block.data === 'string') signed.push({ data: block.data });
    else if (block.type === 'tool_use') {
      toolCalls.push({ id: block.id, type: 'function', function: { name: block.name, arguments: argumentsOf(block.input) } });
    }
    // Server tool blocks and citations have no chat equivalent and are dropped.
  }
  const refused = body.stop_reason === 'refusal';
  const message: Obj = {
    role: 'assistant',
    // As OpenAI answers: null beside tool calls or a refusal, else a string, empty when the model wrote no text
    // (its thinking took all of max_tokens, spec 7.5.5; an empty turn). It had been null then too.
    content: texts.length > 0 ? texts.join('') : toolCalls.length > 0 || refused ? null : '',
    refusal: refused ? refusalText(body.stop_details) : null,
  };
  if (thinking.length > 0) message.reasoning = thinking.join('');
  const details = reasoningDetailsOf(signed);
  if (details.length > 0) message.reasoning_details = details;
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  const out: Obj = {
    id: body.id,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: body.model,
    // Spec 4.2 lists it and OpenAI's answers carry it; a messages provider reports no backend fingerprint.
    system_fingerprint: null,
    choices: [{ index: 0, message, finish_reason: finishReasonOf(body.stop_reason), logprobs: null }],
    usage: messagesUsageToChat(body.usage),
  };
  const tier = body.usage?.service_tier ?? body.service_tier;
  if (typeof tier === 'string') out.service_tier = tierToChat(tier);
  return out;
}

/** The chat `refusal` text for a messages-style refusal's `stop_details`. */
export function refusalText(stopDetails: unknown): string {
  return isObj(stopDetails) && typeof stopDetails.explanation === 'string' && stopDetails.explanation ? stopDetails.explanation : DEFAULT_REFUSAL;
}

/** Chat message `content` (a string or, from some providers, an array of text parts) → its text. */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((p) => (isObj(p) && typeof p.text === 'string' && (p.type === undefined || p.type === 'text') ? p.text : '')).join('');
}

/**
 * A messages answer's signed thinking as chat `reasoning_details` (OpenRouter's shape): `reasoning.text` with its
 * signature, `reasoning.encrypted` for redacted thinking. A chat client that sends them back on the assistant
 * turn (the OpenAI SDK's tool loops send the message as it came) keeps thinking on across a tool loop: the
 * Messages API takes a tool loop's thinking only signed, and without them every loop went on with thinking off.
 * Unsigned thinking (no signature) is left out: it could not be sent back.
 */
export function reasoningDetailsOf(blocks: ({ thinking: string; signature: string } | { data: string })[]): Obj[] {
  const out: Obj[] = [];
  for (const b of blocks) {
    if ('data' in b) out.push({ type: 'reasoning.encrypted', data: b.data, format: 'anthropic-claude-v1', index: out.length });
    else if (b.signature) out.push({ type: 'reasoning.text', text: b.thinking, signature: b.signature, format: 'anthropic-claude-v1', index: out.length });
  }
  return out;
}

/**
 * Whether a chat `reasoning_details` entry is Claude's (OpenRouter names the format; an entry without one is
 * taken as Claude's, as the shape is). Another model's signature or encrypted reasoning (`openai-responses-v1`,
 * `google-gemini-v1`) is no thinking block: the Messages API refuses a signature it did not make.
 */
export function isClaudeDetail(d: unknown): d is Obj {
  return isObj(d) && (d.format === undefined || d.format === 'anthropic-claude-v1');
}

/**
 * A chat answer's signed reasoning (`reasoning_details`, OpenRouter's shape) as messages thinking blocks:
 * `reasoning.text` with a signature → `thinking` with it, `reasoning.encrypted` → `redacted_thinking`, in order.
 * Empty when there is none, or when some reasoning text is unsigned (the plain `reasoning` then gives one
 * unsigned block, as before: a part of the thinking cannot be signed alone).
 *
 * @example signedThinkingOf([{ type: 'reasoning.text', text: 't', signature: 's' }]) // [{ type: 'thinking', thinking: 't', signature: 's' }]
 */
export function signedThinkingOf(details: unknown): Obj[] {
  if (!Array.isArray(details)) return [];
  const out: Obj[] = [];
  for (const d of details) {
    if (!isClaudeDetail(d)) continue;
    if (d.type === 'reasoning.text' && typeof d.text === 'string') {
      if (typeof d.signature !== 'string' || !d.signature) return [];
      out.push({ type: 'thinking', thinking: d.text, signature: d.signature });
    } else if (d.type === 'reasoning.encrypted' && typeof d.data === 'string' && d.data) out.push({ type: 'redacted_thinking', data: d.data });
  }
  return out;
}

/**
 * LiteLLM's Claude thinking (`thinking_blocks`: `{type: "thinking", thinking, signature}` or
 * `{type: "redacted_thinking", data}`, in a message or, one piece at a time, in a stream's delta) as
 * `reasoning_details` entries, so that both shapes are read by one rule.
 *
 * @example detailsOfThinkingBlocks([{ type: 'redacted_thinking', data: 'E' }]) // [{ type: 'reasoning.encrypted', data: 'E' }]
 */
export function detailsOfThinkingBlocks(blocks: unknown): Obj[] {
  if (!Array.isArray(blocks)) return [];
  const out: Obj[] = [];
  for (const b of blocks) {
    if (!isObj(b)) continue;
    if (b.type === 'thinking') {
      out.push({ type: 'reasoning.text', text: typeof b.thinking === 'string' ? b.thinking : '', ...(typeof b.signature === 'string' ? { signature: b.signature } : {}) });
    } else if (b.type === 'redacted_thinking') out.push({ type: 'reasoning.encrypted', data: b.data });
  }
  return out;
}

/** The signed reasoning of a chat message or delta: `reasoning_details` (OpenRouter's), else `thinking_blocks` (LiteLLM's). */
export function claudeDetailsOf(m: Obj): unknown[] {
  if (Array.isArray(m.reasoning_details) && m.reasoning_details.length > 0) return m.reasoning_details;
  return detailsOfThinkingBlocks(m.thinking_blocks);
}

/**
 * Chat `reasoning` (or the `reasoning_content` some providers use) of a message or delta; else the text of its
 * `thinking_blocks` (LiteLLM sends `reasoning_content` beside them, a server copying its shape may not).
 */
export function reasoningOf(m: Obj): string {
  if (typeof m.reasoning === 'string') return m.reasoning;
  if (typeof m.reasoning_content === 'string') return m.reasoning_content;
  return detailsOfThinkingBlocks(m.thinking_blocks)
    .map((d) => (d.type === 'reasoning.text' ? d.text : ''))
    .join('');
}

/** A chat.completion object → an Anthropic-style message. */
export function chatToMessagesResponse(body: Record<string, any>): Record<string, any> {
  const choices: Obj[] = Array.isArray(body.choices) ? body.choices : [];
  const choice = choices.find((c) => isObj(c) && (c.index ?? 0) === 0) ?? choices[0];
  if (!isObj(choice) || choice.finish_reason === 'error') {
    // Spec 7.5.4: a 200 whose body holds only `error` (or a choice that ended in error).
    return { type: 'error', error: chatErrorToMessages(choice?.error ?? body.error), request_id: body.id ?? null };
  }
  const message: Obj = isObj(choice.message) ? choice.message : {};
  const content: Obj[] = [];
  const signed = signedThinkingOf(claudeDetailsOf(message));
  const reasoning = reasoningOf(message);
  // Reasoning text the details do not carry (only redacted thinking there) stays an unsigned block.
  if (reasoning && !signed.some((b) => b.type === 'thinking')) content.push({ type: 'thinking', thinking: reasoning, signature: '' });
  content.push(...signed);
  const text = contentText(message.content);
  if (text) content.push({ type: 'text', text });
  const calls: Obj[] = Array.isArray(message.tool_calls) ? [...message.tool_calls] : [];
  if (isObj(message.function_call)) calls.push({ function: message.function_call });
  for (const call of calls) {
    const fn = isObj(call?.function) ? call.function : {};
    // Gemini's OpenAI-compatible API and LM Studio send `id: ""`: a tool_use needs an id its result can name
    // (the Messages API refuses an empty one, and parallel calls would share it), as the stream translation gives.
    const id = typeof call.id === 'string' && call.id ? call.id : toolUseId();
    content.push({ type: 'tool_use', id, name: fn.name ?? '', input: inputOf(fn.arguments) });
  }
  const refusal = typeof message.refusal === 'string' && message.refusal ? message.refusal : null;
  const stopSequence = refusal || calls.length > 0 ? null : matchedStop(choice);
  const stopReason = refusal ? 'refusal' : stopSequence !== null ? 'stop_sequence' : stopReasonOf(choice.finish_reason, calls.length > 0);
  const usage = chatUsageToMessages(body.usage);
  // The Messages API always gives the field (spec 4.1: string|null): null when the provider named no tier.
  usage.service_tier = typeof body.service_tier === 'string' ? tierToMessages(body.service_tier) : null;
  return {
    id: body.id,
    type: 'message',
    role: 'assistant',
    model: body.model,
    content,
    stop_reason: stopReason,
    stop_sequence: stopSequence,
    stop_details: stopReason === 'refusal' ? refusalDetails(refusal) : null,
    // Spec 4.1 lists it among a message's fields (the Messages API's code-execution container): none here.
    container: null,
    usage,
  };
}

/** Messages `stop_details` for a refusal (chat's refusal text becomes its explanation). */
export function refusalDetails(explanation: string | null): Obj {
  return { type: 'refusal', category: null, explanation };
}

let toolCounter = 0;
/** An id for a tool call the provider sent without one. */
export function toolUseId(): string {
  toolCounter = (toolCounter + 1) % 1_000_000;
  return `toolu_gw${Date.now().toString(36)}${toolCounter.toString(36)}`;
}
