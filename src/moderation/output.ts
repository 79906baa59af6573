import { inBandError, type StreamStamp } from '../dialects/in-band-error';
import { contentText } from '../dialects/translate/response';
import { GatewayError } from '../errors/gateway-error';
import { normaliseText } from '../guardrails/normalised';
import { answerParts } from '../healing/answer';
import type { GatewayState, SseEvent } from '../pipeline/types';
import type { ModerationEngine, ModerationVerdict } from './engines';

type Endpoint = 'chat_completions' | 'messages';
interface Logger {
  warn(obj: object, msg: string): void;
}

/** What one event of a stream (already in the client's dialect) adds to the answer. */
export interface EventText {
  /** Assistant text it carries, by choice: chat every `choices[i].delta.content` (a chunk may carry several
   * choices, with `n` > 1), messages `text_delta` and a text block's opening text (choice 0); empty when none. */
  deltas: { choice: number; text: string }[];
  /** True for the events that close the answer: chat a `finish_reason` chunk, an error chunk or `[DONE]`;
   * messages `message_delta`, `message_stop`, `error` or `[DONE]`. Pending text is judged before each. */
  ending: boolean;
  /** Choices whose text so far is whole here: chat those with a `finish_reason` or that move on to a tool call
   * (`delta.tool_calls`, `function_call`), messages choice 0 when a block other than text opens; absent when none. */
  moves?: number[];
  /** Chat: the chunk's own `id`, `created`, `model` and `provider` (those it has), for an in-band error that reads as part of the stream. */
  stamp?: StreamStamp;
}

/**
 * The answer text (by choice) and end marker of one client-dialect event.
 *
 * @example eventText('messages', {event: 'content_block_delta', data: '{"delta":{"type":"text_delta","text":"Hi"}}'}) // {deltas: [{choice: 0, text: 'Hi'}], ending: false}
 */
export function eventText(endpoint: Endpoint, ev: SseEvent): EventText {
  if (ev.data === '[DONE]') return { deltas: [], ending: true };
  if (endpoint === 'messages') {
    if (ev.event === 'message_delta' || ev.event === 'message_stop' || ev.event === 'error') return { deltas: [], ending: true };
    // A text block may open with text of its own (`content_block_start` with `content_block.text`): the
    // Messages format allows it and some providers send it; it had reached the client unjudged.
    const opening = ev.event === 'content_block_start';
    if (!opening && ev.event !== 'content_block_delta') return { deltas: [], ending: false };
    const data = parse(ev.data);
    const part = (opening ? data?.content_block : data?.delta) as Record<string, unknown> | undefined;
    const text = part?.type === (opening ? 'text' : 'text_delta') && typeof part.text === 'string' ? part.text : '';
    const moves = opening && part !== undefined && part.type !== 'text' ? { moves: [0] } : {};
    return { deltas: text ? [{ choice: 0, text }] : [], ending: false, ...moves };
  }
  const chunk = parse(ev.data);
  const choices = Array.isArray(chunk?.choices) ? (chunk!.choices as Record<string, unknown>[]) : [];
  const deltas: EventText['deltas'] = [];
  const moves: number[] = [];
  choices.forEach((c, i) => {
    // A string, or (from some providers) an array of text parts, as the translation to messages reads it.
    const delta = c?.delta as Record<string, unknown> | undefined;
    // A refusal is answer text the client shows too (`delta.refusal`); it had passed unjudged.
    const content = contentText(delta?.content) + (typeof delta?.refusal === 'string' ? delta.refusal : '');
    const choice = Number.isInteger(c.index) ? (c.index as number) : i;
    if (content !== '') deltas.push({ choice, text: content });
    const calls = (Array.isArray(delta?.tool_calls) && delta.tool_calls.length > 0) || (delta?.function_call && typeof delta.function_call === 'object');
    if (calls || typeof c?.finish_reason === 'string') moves.push(choice);
  });
  const ending = chunk?.error !== undefined || choices.some((c) => typeof c?.finish_reason === 'string');
  const stamp: StreamStamp = {};
  if (typeof chunk?.id === 'string') stamp.id = chunk.id;
  if (typeof chunk?.created === 'number') stamp.created = chunk.created;
  if (typeof chunk?.model === 'string') stamp.model = chunk.model;
  if (typeof chunk?.provider === 'string') stamp.provider = chunk.provider;
  return { deltas, ending, ...(moves.length > 0 ? { moves } : {}), ...(Object.keys(stamp).length > 0 ? { stamp } : {}) };
}

function parse(data: string): Record<string, unknown> | null {
  try {
    const v = JSON.parse(data);
    return v && typeof v === 'object' ? v : null;
  } catch {
    return null;
  }
}

/** A text that begins, or ends, with a letter, digit or combining mark: a word may go on across it (tested on two code units, a surrogate pair at most). */
const WORD_START = /^[\p{L}\p{N}\p{M}_]/u;
const WORD_END = /[\p{L}\p{N}\p{M}_]$/u;
const LEADING_FORMAT = /^\p{Cf}+/u;
const TRAILING_FORMAT = /\p{Cf}+$/u;

/**
 * Whether a word may go on after `text`, as written or as the rules' normalised view reads it (format
 * characters dropped, NFKC: `attac` + `ⓚ` reads `attack`, and a check there had read the cut as the word's
 * end, so `attacⓚers` was blocked by a whole-word `attack`). Looks at a few characters only.
 */
function endsInWord(text: string): boolean {
  if (WORD_END.test(text.slice(-2))) return true;
  const tail = text.slice(-8).replace(TRAILING_FORMAT, '').slice(-2);
  return tail !== '' && WORD_END.test(normaliseText(tail));
}

/** Whether `text` goes on a word, as written or in the normalised view (the counterpart of `endsInWord`). */
function beginsInWord(text: string): boolean {
  if (WORD_START.test(text.slice(0, 2))) return true;
  const head = text.slice(0, 8).replace(LEADING_FORMAT, '').slice(0, 2);
  return head !== '' && WORD_START.test(normaliseText(head));
}

/** One run of the engine over the answer so far: flagged, failed (and what on_error made of it), or clean. */
interface OutputCheck {
  verdict: ModerationVerdict;
  error: string | null;
  /** The answer must stop: flagged, or the engine failed and it denies on error. */
  block: boolean;
  /** The client left (or a shutdown cut the request) during the check: no verdict, and no failure of the engine's. */
  cancelled?: boolean;
}

/** Judges the answer's texts (one per choice) in one call. */
async function judge(engine: ModerationEngine, texts: readonly string[], signal: AbortSignal, logger: Logger): Promise<OutputCheck> {
  try {
    const verdict = await engine.check(texts, signal);
    return { verdict, error: null, block: verdict.flaggedIndex >= 0 };
  } catch (err) {
    // The call was aborted with the request: the answer ends as any whose client left, not as a blocked one
    // (with `on_error: deny` it had been billed `failed` and logged as an engine failure).
    if (signal.aborted) return { verdict: { reasons: [], flaggedIndex: -1 }, error: null, block: false, cancelled: true };
    const error = `moderation engine "${engine.id}" failed: ${(err as Error).message}`;
    logger.warn({ moderation_engine: engine.id, on_error: engine.onError, reason: error, target: 'output' }, 'moderation engine failed');
    return { verdict: { reasons: [], flaggedIndex: -1 }, error, block: engine.onError === 'deny' };
  }
}

/** Why the answer is stopped: `content_policy_violation` when flagged, `permission_denied` when the engine failed closed. */
function blockError(engine: ModerationEngine, check: OutputCheck): GatewayError {
  const metadata = { reasons: check.verdict.reasons, provider_name: engine.providerName, model_slug: engine.modelSlug };
  if (check.verdict.flaggedIndex >= 0) {
    return new GatewayError('content_policy_violation', `Answer blocked by moderation (engine "${engine.id}"): flagged for ${check.verdict.reasons.join(', ')}`, { metadata });
  }
  return new GatewayError('permission_denied', `Answer blocked: ${check.error} and it is set to deny on error`, { metadata });
}

/** Adds the one `moderation` record (target `output`) of an answer to the pipeline and the span. */
function record(engine: ModerationEngine, state: GatewayState, r: { last: OutputCheck | null; checks: number; chars: number; error: string | null }): void {
  const flagged = !!r.last && r.last.verdict.flaggedIndex >= 0;
  const blocked = !!r.last?.block;
  const reasons = r.last?.verdict.reasons ?? [];
  const summary = flagged
    ? `answer blocked: ${reasons.join(', ')}`
    : blocked
      ? 'answer blocked: the check failed and the engine fails closed'
      : r.error
        ? 'answer allowed: the check failed and the engine fails open'
        : 'answer not flagged';
  const action = blocked ? 'block' : 'allow';
  state.pipeline.push({
    type: 'moderation',
    name: engine.id,
    summary,
    data: { target: 'output', action, flagged, reasons, checks: r.checks, checked_chars: r.chars, provider_name: engine.providerName, model_slug: engine.modelSlug, ...(r.error ? { error: r.error } : {}) },
  });
  state.span.addEvent('moderation', {
    'gateway.moderation.engine': engine.id,
    'gateway.moderation.target': 'output',
    'gateway.moderation.action': action,
    'gateway.moderation.reasons': reasons,
    ...(r.error ? { 'gateway.moderation.error': r.error } : {}),
  });
}

/**
 * A streamed answer, judged as it flows (README "Moderation" → "Output"). Events are held back while
 * unjudged text is pending; once `checkChars` new characters have gathered (and before an event that
 * ends a choice or the answer, or moves a choice's answer on from text to a tool call) the engine judges the whole answer so far (each choice's text, when `n` > 1) and the
 * held events are released. A flagged
 * answer (or a failed check when the engine denies on error) ends with the dialect's own mid-stream error
 * events (the ones `relay` in routing/stream-relay.ts sends when a provider fails): nothing held or still to
 * come from upstream reaches the client, the upstream stream is closed, and the request is billed as
 * `failed` with the usage seen so far.
 *
 * @example response.events = moderatedStream({ engine, state, logger, events: response.events });
 */
export async function* moderatedStream(input: { engine: ModerationEngine; state: GatewayState; logger: Logger; events: AsyncIterable<SseEvent> }): AsyncGenerator<SseEvent> {
  const { engine, state, logger } = input;
  const endpoint = state.endpoint as Endpoint;
  const checkChars = engine.output?.checkChars ?? 500;
  const iterator = input.events[Symbol.asyncIterator]();
  // The answer so far of each choice (chat `n` > 1 streams several, interleaved).
  const answers = new Map<number, string>();
  let chars = 0;
  let unchecked = 0;
  // Choices with text since the last check, and whether a check by size waits for a word's end (below).
  const grown = new Set<number>();
  let waiting = false;
  let held: SseEvent[] = [];
  let checks = 0;
  let last: OutputCheck | null = null;
  let error: string | null = null;
  let finished = false;
  // The stream's own id, created, model (chat): the in-band error carries them, not the gateway's own.
  let stamp: StreamStamp = {};
  const run = async (): Promise<OutputCheck> => {
    const texts = [...answers.entries()].sort((a, b) => a[0] - b[0]).map(([, t]) => t);
    const check = await judge(engine, texts, state.signal, logger);
    if (check.cancelled) return check;
    checks += 1;
    last = check;
    if (check.error) error = check.error;
    unchecked = 0;
    grown.clear();
    waiting = false;
    return check;
  };
  /** Ends the answer with the dialect's in-band error; the relay is closed first (its own bookkeeping sets the outcome, which this overrides). */
  const stop = async function* (check: OutputCheck): AsyncGenerator<SseEvent> {
    finished = true;
    await iterator.return?.().catch(() => undefined);
    state.outcome = 'failed';
    if (!state.signal.aborted) yield* inBandError(state, blockError(engine, check), stamp);
  };
  try {
    for (;;) {
      const r = await iterator.next();
      if (r.done) break;
      const ev = r.value;
      const seen = eventText(endpoint, ev);
      if (seen.stamp) stamp = { ...stamp, ...seen.stamp };
      // A check by size waits while the answer ends inside a word: its end would read as the word's end, and
      // `attack` + `ers` had been blocked by a whole-word `attack`. An event whose text begins outside a word
      // shows the word was whole: the answer so far is judged without it.
      if (waiting && seen.deltas.length > 0 && seen.deltas.every((d) => !beginsInWord(d.text))) {
        const check = await run();
        if (check.cancelled) return;
        if (check.block) return yield* stop(check);
        yield* held;
        held = [];
      }
      for (const d of seen.deltas) {
        answers.set(d.choice, (answers.get(d.choice) ?? '') + d.text);
        chars += d.text.length;
        unchecked += d.text.length;
        grown.add(d.choice);
      }
      // (Up to twice the size: a text without word breaks is judged all the same.)
      waiting = unchecked >= checkChars && unchecked < 2 * checkChars && [...grown].some((c) => endsInWord(answers.get(c)!));
      // A choice's text that finishes or moves on to a tool call is whole: judged now, so the events after it
      // are not held until the next check by size or the answer's end; unless another choice's pending text
      // ends inside a word (with `n` > 1, a check at choice 0's finish had read choice 1's `attack|ers` as `attack`).
      const whole = seen.moves !== undefined && [...grown].every((c) => seen.moves!.includes(c) || !endsInWord(answers.get(c)!));
      // The other events that end the answer (`[DONE]`, an error, messages' ends) are due whatever the words.
      const due = unchecked > 0 && (whole || (seen.ending && seen.moves === undefined) || (unchecked >= checkChars && !waiting));
      if (!due) {
        if (unchecked > 0) held.push(ev);
        else {
          yield* held;
          held = [];
          yield ev;
        }
        continue;
      }
      const check = await run();
      if (check.cancelled) return; // closing the relay (below) ends the request `cancelled`
      if (check.block) return yield* stop(check);
      yield* held;
      held = [];
      yield ev;
    }
    const check = unchecked > 0 ? await run() : null;
    if (check?.cancelled) return;
    if (check?.block) return yield* stop(check);
    yield* held;
    finished = true;
  } finally {
    if (!finished) await iterator.return?.().catch(() => undefined);
    if (checks > 0) record(engine, state, { last, checks, chars, error });
  }
}

/**
 * Judges a non-streaming answer's texts, every choice's (when it has any). Flagged, or failed with `on_error: deny`: throws
 * the 403 (`content_policy_violation` / `permission_denied`) the error middleware answers with, and marks
 * the request `failed` so the ledger still bills the generated answer.
 */
export async function moderateAnswer(input: { engine: ModerationEngine; state: GatewayState; logger: Logger; body: unknown }): Promise<void> {
  const { engine, state, logger } = input;
  // Chat: every choice's `message.content` (`n` > 1 has several; a string or, from some providers, an array of
  // text parts, which had passed unjudged); messages: its text blocks joined. An empty one has nothing to judge.
  const texts = (state.endpoint === 'chat_completions' ? chatAnswerTexts(input.body) : answerParts('messages', input.body).map((p) => p.text)).filter((t) => t !== '');
  if (texts.length === 0) return;
  const check = await judge(engine, texts, state.signal, logger);
  if (check.cancelled) return; // the endpoint ends a request whose client left
  record(engine, state, { last: check, checks: 1, chars: texts.reduce((n, t) => n + t.length, 0), error: check.error });
  if (!check.block) return;
  state.outcome = 'failed';
  throw blockError(engine, check);
}

/** Every choice's `message.content` text of a chat answer, with its `message.refusal` (which had passed unjudged), in choice order. */
function chatAnswerTexts(body: unknown): string[] {
  const choices = body && typeof body === 'object' ? (body as { choices?: unknown }).choices : undefined;
  if (!Array.isArray(choices)) return [];
  return choices.map((c) => {
    const message = (c as { message?: { content?: unknown; refusal?: unknown } } | null)?.message;
    return contentText(message?.content) + (typeof message?.refusal === 'string' ? message.refusal : '');
  });
}
