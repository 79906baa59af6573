import { answerEvents } from '../dialects/answer-stream';
import { providerStreamError } from '../dialects/stream-error';
import { GatewayError } from '../errors/gateway-error';
import type { SseEvent } from '../pipeline/types';
import type { Dialect } from './types';

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

/** A JSON content type (`application/json`, `application/problem+json`, with or without parameters). */
const JSON_TYPE = /^\s*application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;

/** Whether a 2xx answer to a streaming call is a JSON body instead of an event stream. */
export function isJsonBody(contentType: unknown): boolean {
  return typeof contentType === 'string' && JSON_TYPE.test(contentType);
}

/**
 * A provider's 2xx JSON body sent where its event stream was asked for (a server that ignores `stream: true`,
 * or one that reports a failure as a 2xx JSON error), read in the provider's own dialect:
 * - an error (`{error: …}`, Anthropic's `{type: "error", error: …}`) is thrown as the GatewayError it stands for
 *   (rate limits, overloads, … keep their type, so routing fails over or answers as for that error);
 * - a whole answer (chat `choices`, messages `content`) becomes the events of the same answer streamed, so the
 *   client still gets it (and it is billed from its usage);
 * - anything else is a failed attempt, naming the provider.
 *
 * @example const events = jsonAsEvents('chat_completions', '{"id":"x","choices":[…]}', 'openai');
 */
export function jsonAsEvents(dialect: Dialect, text: string, providerId: string): SseEvent[] {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw failed(providerId, 'a JSON content type with a body that is not JSON');
  }
  if (!isObj(body)) throw failed(providerId, 'JSON that is not an object');
  const failure = reportedFailure(dialect, body, providerId);
  if (failure) throw failure;
  if (dialect === 'chat_completions') {
    if (!Array.isArray(body.choices) || body.choices.length === 0) throw failed(providerId, 'JSON without choices');
    return answerEvents('chat_completions', body, { includeUsage: true });
  }
  if (!Array.isArray(body.content)) throw failed(providerId, 'JSON without content');
  // Anthropic's streams end at message_stop; they have no `[DONE]`.
  return answerEvents('messages', body, { includeUsage: true }).filter((ev) => ev.data !== '[DONE]');
}

/**
 * The failure a provider's 2xx JSON answer reports instead of an answer, or undefined: a top-level `error`
 * (OpenAI-compatible servers, OpenRouter's 7.5.4 shape; Anthropic's `{type: "error", error}`), or a chat choice
 * that ended with `finish_reason: "error"`. The GatewayError has the type the provider's own type or code gives.
 */
export function reportedFailure(dialect: Dialect, body: unknown, providerId: string): GatewayError | undefined {
  if (!isObj(body)) return undefined;
  if (body.error !== undefined && body.error !== null) return providerStreamError(dialect, body, providerId);
  if (dialect === 'messages') return body.type === 'error' ? providerStreamError(dialect, { error: {} }, providerId) : undefined;
  const failedChoice = Array.isArray(body.choices) ? body.choices.find((c) => isObj(c) && c.finish_reason === 'error') : undefined;
  if (isObj(failedChoice)) return providerStreamError(dialect, { error: failedChoice.error ?? {} }, providerId);
  return undefined;
}

/**
 * What makes a provider's 2xx JSON answer no answer of its style, or undefined: a body that is no object, no
 * `choices` list (chat) or `content` list (messages), an entry that is no object, a content block without a
 * type. Passed on, such a body reached the client as a 200 its SDK could not read (spec 7.2: an invalid
 * response is a 502, and the next endpoint is tried). An empty list is an answer (a filtered prompt).
 */
export function malformedAnswer(dialect: Dialect, body: unknown): string | undefined {
  if (!isObj(body)) return 'a body that is not a JSON object';
  const name = dialect === 'messages' ? 'content' : 'choices';
  const list: unknown = body[name];
  if (!Array.isArray(list)) return `no \`${name}\` list`;
  for (const entry of list) {
    if (!isObj(entry)) return `a \`${name}\` entry that is not an object`;
    if (dialect === 'messages' && typeof entry.type !== 'string') return 'a content block without a type';
  }
  return undefined;
}

function failed(providerId: string, what: string): GatewayError {
  return new GatewayError('provider_unavailable', `Provider ${providerId} answered a streaming request with ${what}`, {
    metadata: { provider_name: providerId },
  });
}
