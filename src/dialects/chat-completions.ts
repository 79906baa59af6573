import { publicMessage } from '../errors/envelope';
import { GatewayError } from '../errors/gateway-error';
import type { NormalizedUsage, SseEvent } from '../pipeline/types';
import { DONE } from '../providers/sse';
import { cacheCreation, keyAt, NO_USAGE, num, stripGatewayFields } from './common';
import { endedBeforeOutput, endedIncomplete, eventData, providerStreamError } from './stream-error';
import type { DialectAdapter, FinishInfo, StreamRewriter } from './types';

/**
 * Chat-completions usage → normalized usage. The 1-hour share of the cache writes is read from
 * `prompt_tokens_details.cache_creation` (where chatUsageBody puts an Anthropic-style provider's split).
 */
export function chatUsage(u: unknown): NormalizedUsage | null {
  if (!u || typeof u !== 'object') return null;
  const usage = u as Record<string, any>;
  const details = usage.prompt_tokens_details;
  const written = num(details?.cache_write_tokens);
  const hour = Math.min(num(details?.cache_creation?.ephemeral_1h_input_tokens), written);
  return {
    inputTokens: num(usage.prompt_tokens),
    outputTokens: num(usage.completion_tokens),
    cachedTokens: num(details?.cached_tokens),
    cacheWriteTokens: written,
    ...(hour > 0 ? { cacheWrite1hTokens: hour } : {}),
    reasoningTokens: num(usage.completion_tokens_details?.reasoning_tokens),
  };
}

/**
 * Normalized usage → the chat-completions `usage` object (for translated answers). 1-hour cache writes are
 * shown split out in `prompt_tokens_details.cache_creation`, named as the Messages API names them.
 */
export function chatUsageBody(u: NormalizedUsage): Record<string, unknown> {
  const details: Record<string, unknown> = { cached_tokens: u.cachedTokens, cache_write_tokens: u.cacheWriteTokens };
  const hour = u.cacheWrite1hTokens ?? 0;
  if (hour > 0) details.cache_creation = cacheCreation(u.cacheWriteTokens, hour);
  return {
    prompt_tokens: u.inputTokens,
    completion_tokens: u.outputTokens,
    total_tokens: u.inputTokens + u.outputTokens,
    prompt_tokens_details: details,
    completion_tokens_details: { reasoning_tokens: u.reasoningTokens },
  };
}


/** The usage chunk of a stream whose provider sent none: `u` is what the request is billed (null: nothing). */
function usageChunk(info: FinishInfo, created: number, u: NormalizedUsage | null): SseEvent {
  const usage = { ...chatUsageBody(u ?? NO_USAGE), cost: u ? info.costOf(u) : 0, is_byok: info.isByok };
  return { data: JSON.stringify({ id: info.generationId, object: 'chat.completion.chunk', created, model: info.model, provider: info.provider, choices: [], usage }) };
}

function stampUsage(usage: Record<string, unknown>, cost: number, isByok: boolean): void {
  usage.cost = cost;
  usage.is_byok = isByok;
}

/**
 * Stamps the gateway's id, model and provider on an ordinary content chunk with string edits instead of a
 * JSON parse and re-serialisation: a chunk that starts `{"id":"…"` and has one plain `"model":"…"` gets
 * both values swapped and `"provider"` added (when it has none of its own). A `"usage":null` member is kept,
 * or cut out with `dropNullUsage`. Returns null for anything else (the caller parses it then): a real usage,
 * a null one not written the way providers write it (compact, after the model, beside other members).
 * Safe because inside JSON strings every `"` is escaped, so `"model":"` can only be a real key. Every search
 * runs on `data` as it came (a flat string), and the result is put together once: searching a string already
 * cut and joined makes V8 flatten it first, a copy per search.
 */
export function stampChunk(data: string, stamp: { id: string; model: string; provider: string }, dropNullUsage = false): string | null {
  if (!data.startsWith('{"id":"')) return null;
  const idEnd = data.indexOf('"', 7);
  const m = keyAt(data, 'model":"', idEnd);
  // A backslash before a closing quote may mean an escaped quote: leave such values to the parser.
  if (idEnd < 0 || m < 0 || data.charCodeAt(idEnd - 1) === 92) return null;
  const modelStart = m + 9;
  const modelEnd = data.indexOf('"', modelStart);
  if (modelEnd < 0 || data.charCodeAt(modelEnd - 1) === 92) return null;
  // A provider's own `provider` member (OpenRouter-style upstreams send one) is replaced by the parser path:
  // added here, the key would appear twice and JSON readers would take the provider's value.
  if (keyAt(data, 'provider":') >= 0) return null;
  let rest = data.length;
  let resume = data.length;
  const at = keyAt(data, 'usage":');
  if (at >= 0) {
    if (!data.startsWith(NULL_USAGE, at)) return null;
    if (dropNullUsage) {
      const end = at + NULL_USAGE.length;
      if (data.charCodeAt(at - 1) === 44 /* , */) [rest, resume] = [at - 1, end];
      else if (data.charCodeAt(end) === 44) [rest, resume] = [at, end + 1];
      else return null;
      if (rest < modelEnd) return null;
    }
  }
  return `{"id":${stamp.id},"provider":${stamp.provider}${data.slice(idEnd + 1, modelStart - 1)}${stamp.model}${data.slice(modelEnd + 1, rest)}${data.slice(resume)}`;
}

const NULL_USAGE = '"usage":null';

export const chatCompletions: DialectAdapter = {
  upstreamBody(body, { upstreamModel, hashUser }) {
    const out = stripGatewayFields(body, upstreamModel);
    // Spec 4.2: the end-user id goes upstream only as a salted hash.
    if (typeof out.user === 'string') out.user = hashUser(out.user);
    // OpenAI's successor to `user` names the same end user: it goes upstream hashed alike (it went as sent).
    if (typeof out.safety_identifier === 'string') out.safety_identifier = hashUser(out.safety_identifier);
    // Spec 4.2: `fast` is an alias of `priority`; `ultrafast` asks for the fastest tier there is.
    if (out.service_tier === 'fast' || out.service_tier === 'ultrafast') out.service_tier = 'priority';
    // Always ask for the usage chunk so the request can be billed; it is dropped again for clients that
    // did not ask for it.
    if (out.stream === true) out.stream_options = { ...(out.stream_options as object | undefined), include_usage: true };
    return out;
  },

  finishBody(body, info) {
    body.id = info.generationId;
    body.model = info.model;
    body.provider = info.provider;
    const usage = chatUsage(body.usage);
    if (!usage) return { usage: null, cost: null };
    const cost = info.costOf(usage);
    stampUsage(body.usage as Record<string, unknown>, cost, info.isByok);
    return { usage, cost };
  },

  streamRewriter(info: FinishInfo): StreamRewriter {
    let usage: NormalizedUsage | null = null;
    let cost: number | null = null;
    let done = false;
    let finished = false; // the answer is whole: its choice (every choice that began, with n > 1) reported its finish_reason
    let failed = false;
    // With n > 1 one choice's finish is not the answer's: a stream cut after choice 0 finished, while choice 1
    // was still streaming, ended as a clean `[DONE]` billed completed (the SDK then failed on "missing
    // finish_reason for choice 1"). Such streams take the parsing path, which tracks every choice.
    const many = (info.choices ?? 1) > 1;
    const allFinished = many ? choiceEnds() : undefined;
    let created = Math.floor(Date.now() / 1000);
    const stamp = { id: JSON.stringify(info.generationId), model: JSON.stringify(info.model), provider: JSON.stringify(info.provider) };
    let heldDone = false; // `[DONE]` waits for end(): see there
    const roled = new Set<number>(); // choices whose role was given (see mendDeltas)
    return {
      rewrite(ev: SseEvent): SseEvent | null {
        if (ev.data === '[DONE]') {
          // `[DONE]` before any finish_reason: the answer was cut, never a clean end (spec 7.5).
          if (!finished) throw endedIncomplete(info.provider);
          done = true;
          if (!info.clientWantsUsage || usage !== null) return DONE;
          heldDone = true;
          return null;
        }
        // A named event (`event: ping`) is not a chat chunk: chat clients read every data line as one.
        if (ev.event !== undefined && ev.event !== 'message') return null;
        // Content chunks (nearly all of a stream) take the string path; usage and error chunks are parsed.
        // The searches leave out the key's opening quote: JSON is full of quotes, and a search that starts
        // with one stops at each (three searches cost ~700 ns a chunk with it, ~190 without). A looser match
        // only sends a chunk down the parsing path, which is always right.
        // A content chunk may carry `"usage":null`: OpenAI puts it in every chunk once `include_usage` is
        // set, which the gateway always asks for. Such chunks stay on the string path too (parsing each cost
        // ~1.3 µs: a 20-chunk stream 36 µs instead of 8), with the member cut out of the text when the client
        // did not ask for usage.
        const text = ev.data;
        // Provider defects the OpenAI SDK's stream helper fails on are mended on the parsing path (mendDeltas):
        // the chunks before the role (normally the first alone) and a tool call's first piece (the one with its
        // name) go there. A content chunk pays one search, for a key that starts with a rare character.
        if (!many && roled.size === 0 && keyAt(text, 'role":"') >= 0) roled.add(0);
        const opensCall = text.includes('_calls":[') && text.includes('name":"');
        if (!many && roled.size > 0 && !opensCall && !text.includes('rror"')) {
          const fast = stampChunk(text, stamp, !info.clientWantsUsage);
          if (fast !== null) {
            if (!finished && keyAt(text, 'finish_reason":"') >= 0) finished = true;
            return { data: fast };
          }
        }
        let chunk: Record<string, any>;
        try {
          chunk = JSON.parse(ev.data);
        } catch {
          // A chunk that cannot be read may have carried content: the stream fails rather than skip it.
          throw new GatewayError('provider_unavailable', `Provider ${info.provider} sent a malformed stream chunk`, { metadata: { provider_name: info.provider } });
        }
        // Data that is no chunk (no choices, no usage, no error: a provider's keep-alive `{}`) is not passed on.
        if (!Array.isArray(chunk.choices) && chunk.usage == null && !chunk.error) return null;
        // The provider's error ends the stream as the gateway's own in-band error (one, with error_type): an
        // `error` member, or a choice finished "error" (which had been relayed as a finish, billed completed).
        const failure = streamFailure(chunk);
        if (failure) throw providerStreamError('chat_completions', failure, info.provider);
        if (Array.isArray(chunk.choices)) {
          mendDeltas(chunk.choices, roled);
          if (allFinished) finished = allFinished(chunk.choices);
          else if (chunk.choices.some((c: { finish_reason?: unknown }) => typeof c?.finish_reason === 'string')) finished = true;
        }
        chunk.id = info.generationId;
        chunk.model = info.model;
        chunk.provider = info.provider;
        if (typeof chunk.created === 'number') created = chunk.created;
        if (chunk.usage) {
          usage = chatUsage(chunk.usage);
          if (usage) {
            cost = info.costOf(usage);
            stampUsage(chunk.usage, cost, info.isByok);
          }
          const usageOnly = Array.isArray(chunk.choices) && chunk.choices.length === 0;
          if (usageOnly && !info.clientWantsUsage) return null;
        }
        // The gateway asked the provider for usage; a client that did not ask gets none (not even a null).
        if (!info.clientWantsUsage) delete chunk.usage;
        return { data: JSON.stringify(chunk) };
      },
      failure(err: GatewayError): SseEvent[] {
        failed = true;
        // Spec 7.5.3: an error chunk with finish_reason "error", then the stream ends.
        const metadata: Record<string, unknown> = { error_type: err.errorType };
        if (err.metadata?.provider_code !== undefined) metadata.provider_code = err.metadata.provider_code;
        const chunk = {
          id: info.generationId,
          object: 'chat.completion.chunk',
          created,
          model: info.model,
          provider: info.provider,
          error: { code: err.status, message: publicMessage(err), metadata },
          choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }],
        };
        done = true;
        return [{ data: JSON.stringify(chunk) }, DONE];
      },
      // Spec 7.5: a stream that stops before any finish_reason never looks like a successful end; one
      // that finished but left out `[DONE]` gets it.
      end(billed) {
        if (done && !heldDone) return [];
        if (!finished) return this.failure(endedIncomplete(info.provider));
        heldDone = false;
        // The client asked for the usage chunk and the provider sent none (the request is then billed from the
        // gateway's own count): it gets the billed usage's chunk before `[DONE]`, held back for it. OpenAI
        // clients read the usage from that last chunk; they had got none.
        return info.clientWantsUsage && usage === null && billed ? [usageChunk(info, created, billed()), DONE] : [DONE];
      },
      usage: () => usage,
      cost: () => cost,
      failed: () => failed,
      complete: () => done,
      answered: () => finished,
    };
  },

  opensOutput(ev: SseEvent, providerId: string): boolean {
    // `[DONE]` before any chunk with output (or a finish) is an empty answer, not a short one.
    if (ev.data === '[DONE]') throw endedBeforeOutput(providerId);
    if (opensWithText(ev.data)) return true;
    const chunk = eventData(ev, providerId) as Record<string, any> | null;
    if (!chunk || typeof chunk !== 'object') throw providerStreamError('chat_completions', {}, providerId);
    const failure = streamFailure(chunk);
    if (failure) throw providerStreamError('chat_completions', failure, providerId);
    const choices: unknown[] = Array.isArray(chunk.choices) ? chunk.choices : [];
    // A usage chunk comes after the finish; a chunk without choices otherwise carries no output.
    if (choices.length === 0) return chunk.usage != null;
    return choices.some((c) => {
      const choice = c as { finish_reason?: unknown; delta?: Record<string, unknown> } | null;
      return choice?.finish_reason != null || hasOutput(choice?.delta);
    });
  },
};

/**
 * Whether a chat chunk plainly opens the answer with text, read without parsing it (the parse was ~0.7 % of a
 * stream's CPU): an object with a `content` key whose string value is not empty (in a chunk, only a choice's
 * delta has one; inside JSON strings quotes are escaped, so the match is a real key), braces at both ends (a
 * chunk cut off by the end of the body is parsed, and fails the attempt as malformed; one cut just after a
 * closing brace never gets here: the SSE parser fails the attempt for an event the body ended in that is no JSON)
 * and nothing that may be an error (`error` anywhere, as a key or a finish_reason). False means "parse it",
 * never "no output".
 */
function opensWithText(data: string): boolean {
  if (data.charCodeAt(0) !== 123 /* { */ || data.charCodeAt(data.length - 1) !== 125 /* } */ || data.includes('rror"')) return false;
  const at = keyAt(data, 'content":"');
  return at >= 0 && data.charCodeAt(at + 11) !== 34;
}

/**
 * Mends two provider defects on which the OpenAI SDK's `chat.completions.stream()` fails at the end ("missing
 * role for choice 0", "missing choices[0].tool_calls[0].type"): a choice whose first delta has no `role` gets
 * `assistant`, and a tool call piece that opens a call (it has an `id` or a function name) without `type` gets
 * `function` (some OpenAI-compatible servers send neither). `roled` holds the choices whose role was given.
 */
function mendDeltas(choices: unknown[], roled: Set<number>): void {
  for (const c of choices) {
    const choice = c as { index?: unknown; delta?: Record<string, any> } | null;
    const delta = choice?.delta;
    if (!delta || typeof delta !== 'object') continue;
    const index = typeof choice.index === 'number' ? choice.index : 0;
    if (!roled.has(index)) {
      roled.add(index);
      delta.role ??= 'assistant';
    }
    if (!Array.isArray(delta.tool_calls)) continue;
    for (const tc of delta.tool_calls) {
      if (tc && typeof tc === 'object' && tc.type == null && (typeof tc.id === 'string' || typeof tc.function?.name === 'string')) tc.type = 'function';
    }
  }
}

/**
 * For a stream of several choices (`n` > 1): reads each chunk's choices and says whether the answer is whole,
 * every choice that began having its finish_reason (a finished choice's later chunks do not reopen it).
 */
function choiceEnds(): (choices: unknown[]) => boolean {
  const open = new Set<number>();
  const closed = new Set<number>();
  return (choices) => {
    for (const c of choices) {
      const choice = c as { index?: unknown; finish_reason?: unknown } | null;
      const index = typeof choice?.index === 'number' ? choice.index : 0;
      if (closed.has(index)) continue;
      if (typeof choice?.finish_reason === 'string') {
        open.delete(index);
        closed.add(index);
      } else open.add(index);
    }
    return closed.size > 0 && open.size === 0;
  };
}

/**
 * The failure a chat chunk reports, as `{error}` for providerStreamError, or undefined: its `error` member, or a
 * choice finished `"error"` (with the choice's own `error`, if any), as a 2xx JSON answer's failure is read
 * (providers/json-stream.ts). Such a choice is no finish: before output the next endpoint is tried.
 */
function streamFailure(chunk: Record<string, any>): { error?: unknown } | undefined {
  if (chunk.error) return chunk;
  const choice = Array.isArray(chunk.choices) ? chunk.choices.find((c: { finish_reason?: unknown } | null) => c?.finish_reason === 'error') : undefined;
  return choice ? { error: choice.error ?? {} } : undefined;
}

/** A delta that carries something beyond its role: text, a tool call, a refusal, reasoning… (empty values do not count). */
function hasOutput(delta: Record<string, unknown> | undefined): boolean {
  if (!delta || typeof delta !== 'object') return false;
  for (const [k, v] of Object.entries(delta)) {
    if (k === 'role' || v === null || v === undefined || v === '') continue;
    if (Array.isArray(v) && v.length === 0) continue;
    return true;
  }
  return false;
}
