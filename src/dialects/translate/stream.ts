import { GatewayError } from '../../errors/gateway-error';
import type { NormalizedUsage, SseEvent } from '../../pipeline/types';
import { messagesUsage, openingUsage } from '../messages';
import { isObj, mergeUsage, type Obj } from '../common';
import {
  argumentsOf,
  chatErrorToMessages,
  chatUsageToMessages,
  contentText,
  finishReasonOf,
  messagesErrorToChat,
  messagesUsageToChat,
  reasoningDetailsOf,
  reasoningOf,
  refusalDetails,
  refusalText,
  stopReasonOf,
  tierToChat,
  tierToMessages,
  toolUseId,
} from './response';

/** Translates one provider stream incrementally: each input event gives zero or more output events; end() flushes. */
export interface StreamTranslator {
  push(ev: SseEvent): SseEvent[];
  end(): SseEvent[];
  /**
   * True once the input's terminal event was seen (messages: `message_stop` or `error`; chat: `[DONE]`
   * after a `finish_reason`, or an error chunk). A stream that ends while this is false was cut: the
   * translator has emitted no successful ending, and the caller must end the client's stream with an error.
   */
  readonly complete: boolean;
  /**
   * The usage the provider has reported so far, before the translated stream could carry it (messages →
   * chat: `message_start`'s input count, which a chat stream only carries at its end); null when none.
   */
  reported?(): NormalizedUsage | null;
}

const DONE: SseEvent = { data: '[DONE]' };

function parse(ev: SseEvent): Obj {
  let data: unknown;
  try {
    data = JSON.parse(ev.data);
  } catch {
    data = undefined;
  }
  if (!isObj(data)) throw new GatewayError('provider_unavailable', 'Provider sent a malformed stream event');
  return data;
}


// ---------------------------------------------------------------------------------------------------
// Messages-style events → chat.completion.chunk events
// ---------------------------------------------------------------------------------------------------

interface InBlock {
  kind: 'text' | 'thinking' | 'tool' | 'other';
  /** For tool blocks: the chat tool_calls index, and whether any argument text was sent yet. */
  tool?: number;
  hasArgs?: boolean;
  /** For thinking blocks: their text and signature, for the chat answer's `reasoning_details`. */
  thinking?: string;
  signature?: string;
}

/** Anthropic-style events in → chat.completion.chunk events out, ending with a usage chunk and `[DONE]`. */
export function messagesToChatStream(): StreamTranslator {
  let id = '';
  let model = '';
  const created = Math.floor(Date.now() / 1000);
  let tier: string | undefined;
  let started = false;
  let complete = false;
  let tools = 0;
  const blocks = new Map<number, InBlock>();
  /** Thinking and redacted-thinking blocks, in order (a redacted one keeps its data in `signature`). */
  const details: InBlock[] = [];
  const usage: Obj = {};
  let stopReason: unknown = null;
  let stopDetails: unknown = null;

  const base = (): Obj => {
    const b: Obj = { id, object: 'chat.completion.chunk', created, model };
    if (tier !== undefined) b.service_tier = tier;
    return b;
  };
  const chunk = (delta: Obj, finish: string | null = null): SseEvent => ({
    data: JSON.stringify({ ...base(), choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] }),
  });
  /** The first chunk carries the role, as chat clients expect. */
  const start = (out: SseEvent[]): void => {
    if (started) return;
    started = true;
    out.push(chunk({ role: 'assistant', content: '' }));
  };
  /** The finish chunk (after the signed thinking, whole), the usage chunk and `[DONE]`. */
  const finishAnswer = (out: SseEvent[]): void => {
    start(out);
    // The signed thinking, whole, in one chunk (SDKs assign a delta's unknown fields rather than append them).
    const reasoningDetails = reasoningDetailsOf(details.map((b) => (b.kind === 'thinking' ? { thinking: b.thinking ?? '', signature: b.signature ?? '' } : { data: b.signature ?? '' })));
    if (reasoningDetails.length > 0) out.push(chunk({ reasoning_details: reasoningDetails }));
    const delta = stopReason === 'refusal' ? { refusal: refusalText(stopDetails) } : {};
    out.push(chunk(delta, finishReasonOf(stopReason)));
    out.push({ data: JSON.stringify({ ...base(), choices: [], usage: messagesUsageToChat(usage) }) });
    out.push(DONE);
    complete = true;
  };
  const toolArgs = (block: InBlock, args: string): SseEvent => {
    block.hasArgs = true;
    return chunk({ tool_calls: [{ index: block.tool, function: { arguments: args } }] });
  };

  return {
    get complete() {
      return complete;
    },
    reported() {
      const u = messagesUsage(usage);
      return u && (u.inputTokens > 0 || u.outputTokens > 0) ? u : null;
    },
    push(ev: SseEvent): SseEvent[] {
      // Messages streams end with a `[DONE]` sentinel after message_stop (spec 4.1); ours comes from message_stop.
      if (complete || ev.data === '[DONE]') return [];
      const data = parse(ev);
      const out: SseEvent[] = [];
      switch (data.type ?? ev.event) {
        case 'message_start': {
          const m = isObj(data.message) ? data.message : {};
          if (typeof m.id === 'string') id = m.id;
          if (typeof m.model === 'string') model = m.model;
          mergeUsage(usage, openingUsage(m.usage));
          if (typeof m.usage?.service_tier === 'string') tier = tierToChat(m.usage.service_tier);
          start(out);
          break;
        }
        case 'content_block_start': {
          start(out);
          const cb = isObj(data.content_block) ? data.content_block : {};
          const index = Number(data.index);
          if (cb.type === 'text') {
            blocks.set(index, { kind: 'text' });
            if (typeof cb.text === 'string' && cb.text) out.push(chunk({ content: cb.text }));
          } else if (cb.type === 'thinking') {
            const block: InBlock = { kind: 'thinking', thinking: typeof cb.thinking === 'string' ? cb.thinking : '', signature: typeof cb.signature === 'string' ? cb.signature : '' };
            blocks.set(index, block);
            details.push(block);
            if (block.thinking) out.push(chunk({ reasoning: block.thinking }));
          } else if (cb.type === 'redacted_thinking' && typeof cb.data === 'string') {
            blocks.set(index, { kind: 'other' });
            details.push({ kind: 'other', signature: cb.data });
          } else if (cb.type === 'tool_use') {
            const block: InBlock = { kind: 'tool', tool: tools++, hasArgs: false };
            blocks.set(index, block);
            // A start that already holds the whole input (no deltas follow) sends it as the arguments.
            const args = isObj(cb.input) && Object.keys(cb.input).length > 0 ? argumentsOf(cb.input) : '';
            block.hasArgs = args !== '';
            out.push(chunk({ tool_calls: [{ index: block.tool, id: cb.id, type: 'function', function: { name: cb.name, arguments: args } }] }));
          } else {
            // redacted_thinking, server tool blocks and other types have no chat equivalent.
            blocks.set(index, { kind: 'other' });
          }
          break;
        }
        case 'content_block_delta': {
          start(out);
          const block = blocks.get(Number(data.index));
          const d = isObj(data.delta) ? data.delta : {};
          if (d.type === 'text_delta' && typeof d.text === 'string' && d.text) out.push(chunk({ content: d.text }));
          else if (d.type === 'thinking_delta' && typeof d.thinking === 'string' && d.thinking) {
            if (block?.kind === 'thinking') block.thinking += d.thinking;
            out.push(chunk({ reasoning: d.thinking }));
          } else if (d.type === 'signature_delta' && block?.kind === 'thinking' && typeof d.signature === 'string') block.signature += d.signature;
          else if (d.type === 'input_json_delta' && block?.kind === 'tool' && typeof d.partial_json === 'string' && d.partial_json) {
            out.push(toolArgs(block, d.partial_json));
          }
          // citations_delta has no chat equivalent.
          break;
        }
        case 'content_block_stop': {
          const block = blocks.get(Number(data.index));
          // A tool called without arguments still gets valid JSON arguments.
          if (block?.kind === 'tool' && !block.hasArgs) out.push(toolArgs(block, '{}'));
          break;
        }
        case 'message_delta': {
          const d = isObj(data.delta) ? data.delta : {};
          if (d.stop_reason != null) {
            stopReason = d.stop_reason;
            stopDetails = d.stop_details ?? null;
          }
          mergeUsage(usage, data.usage);
          break;
        }
        case 'message_stop':
          finishAnswer(out);
          break;
        case 'error': {
          // Spec 7.5.3: the error chunk with finish_reason "error", then the stream ends.
          const error = messagesErrorToChat(data.error);
          out.push({ data: JSON.stringify({ ...base(), error, choices: [{ index: 0, delta: { content: '' }, finish_reason: 'error' }] }) });
          out.push(DONE);
          complete = true;
          break;
        }
        default:
          // ping and event types this translation does not know are dropped.
          break;
      }
      return out;
    },
    // A provider whose message_delta gave the stop reason (and the final usage) but that closed or stalled
    // before message_stop gave a whole answer: for a chat client a finish_reason is the end of the answer,
    // as a chat provider's finish without `[DONE]` is. Without a stop reason it was cut short.
    end: () => {
      const out: SseEvent[] = [];
      if (!complete && stopReason !== null) finishAnswer(out);
      return out;
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// chat.completion.chunk events → messages-style events
// ---------------------------------------------------------------------------------------------------

interface ToolState {
  id?: string;
  name?: string;
  /** The content block index once opened; -1 while the name is still unknown. */
  block: number;
  /** Argument text that arrived before the block could be opened. */
  pending: string;
  /** Where the arguments' JSON value ends: once it has, a call waiting behind this one may open. */
  end: JsonEnd;
}

/**
 * Watches a JSON text arrive in fragments and says when its top-level object or array has closed (brackets
 * outside strings balance again). A chat stream does not say when one tool call's arguments are done, and an
 * Anthropic-style stream cannot go back to a block it has stopped, so this is how the translator knows it
 * may open the next call's block.
 */
class JsonEnd {
  private depth = 0;
  private inString = false;
  private escaped = false;
  done = false;

  /** Feeds a fragment; true once the value has closed (and from then on). */
  feed(text: string): boolean {
    for (let i = 0; i < text.length && !this.done; i++) {
      const c = text.charCodeAt(i);
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === 92) this.escaped = true; // a backslash
        else if (c === 34) this.inString = false; // a quote
      } else if (c === 34) this.inString = true;
      else if (c === 123 || c === 91) this.depth++; // { [
      else if ((c === 125 || c === 93) && --this.depth === 0) this.done = true; // } ]
    }
    return this.done;
  }
}

/** chat.completion.chunk events in → Anthropic-style events out (the messages rewriter adds the final `[DONE]`). */
export function chatToMessagesStream(): StreamTranslator {
  let started = false;
  let complete = false;
  let nextIndex = 0;
  let open: { index: number; kind: 'text' | 'thinking' | 'tool' } | null = null;
  const tools = new Map<number, ToolState>();
  let finish: string | null = null;
  let refusal = '';
  let usage: Obj | null = null;
  let tier: string | undefined;

  const ev = (type: string, data: Obj): SseEvent => ({ event: type, data: JSON.stringify({ type, ...data }) });
  const close = (out: SseEvent[]): void => {
    if (!open) return;
    out.push(ev('content_block_stop', { index: open.index }));
    open = null;
  };
  const openBlock = (out: SseEvent[], kind: 'text' | 'thinking' | 'tool', block: Obj): number => {
    close(out);
    const index = nextIndex++;
    open = { index, kind };
    out.push(ev('content_block_start', { index, content_block: block }));
    return index;
  };
  const delta = (index: number, d: Obj): SseEvent => ev('content_block_delta', { index, delta: d });
  /** The tool call whose block is open, if the open block is a tool call's. */
  let openCall: ToolState | null = null;
  const openTool = (out: SseEvent[], t: ToolState): void => {
    t.block = openBlock(out, 'tool', { type: 'tool_use', id: t.id ?? toolUseId(), name: t.name ?? '', input: {} });
    openCall = t;
    if (t.pending) out.push(delta(t.block, { type: 'input_json_delta', partial_json: t.pending }));
    t.pending = '';
  };
  /** A named call waiting for its block may open once no tool block is open or the open one's arguments are whole. */
  const mayOpen = (): boolean => openCall === null || open?.kind !== 'tool' || openCall.end.done;
  const emitReasoning = (out: SseEvent[], text: string): void => {
    const index = open?.kind === 'thinking' ? open.index : openBlock(out, 'thinking', { type: 'thinking', thinking: '', signature: '' });
    out.push(delta(index, { type: 'thinking_delta', thinking: text }));
  };
  const emitText = (out: SseEvent[], text: string): void => {
    const index = open?.kind === 'text' ? open.index : openBlock(out, 'text', { type: 'text', text: '' });
    out.push(delta(index, { type: 'text_delta', text }));
  };
  /**
   * Text and reasoning that arrive while a tool call's arguments are still coming: held until they are whole.
   * Opening a text block closed the call's, and its later fragments went to a stopped block (the Anthropic
   * SDK's eager tool runner then ran the tool with `{}`; found by a translation audit).
   */
  let held: { thinking: boolean; text: string }[] = [];
  const holding = (): boolean => !mayOpen();
  const flushHeld = (out: SseEvent[]): void => {
    if (held.length === 0 || holding()) return;
    const pieces = held;
    held = [];
    for (const p of pieces) (p.thinking ? emitReasoning : emitText)(out, p.text);
  };
  /** Opens waiting calls, in the order they began, while the open call's arguments are whole. */
  const openWaiting = (out: SseEvent[]): void => {
    for (const t of tools.values()) {
      if (!mayOpen()) return;
      if (t.block < 0 && t.name) openTool(out, t);
    }
  };
  const start = (out: SseEvent[], chunk: Obj): void => {
    if (started) return;
    started = true;
    const message = {
      id: chunk.id ?? '',
      type: 'message',
      role: 'assistant',
      model: chunk.model ?? '',
      content: [],
      stop_reason: null,
      stop_sequence: null,
      stop_details: null,
      container: null,
      usage: { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    };
    out.push(ev('message_start', { message }));
  };
  /** message_delta (stop reason, usage: zeros when the provider reported none) and message_stop. */
  const finishMessage = (out: SseEvent[]): void => {
    const stopReason = refusal ? 'refusal' : stopReasonOf(finish, tools.size > 0);
    const u = chatUsageToMessages(usage);
    if (tier !== undefined) u.service_tier = tier;
    out.push(
      ev('message_delta', {
        delta: { stop_reason: stopReason, stop_sequence: null, stop_details: stopReason === 'refusal' ? refusalDetails(refusal || null) : null },
        usage: u,
      }),
    );
    out.push(ev('message_stop', {}));
    complete = true;
  };
  const fail = (out: SseEvent[], error: unknown): void => {
    out.push(ev('error', { error: chatErrorToMessages(error) }));
    complete = true;
  };
  /** The key of the call a fragment without `index` belongs to (see keyOf). */
  let lastKey: number | undefined;
  const byId = new Map<string, number>();
  let keysMade = 0;
  const newKey = (): number => -1 - keysMade++; // negative: never an index a provider sends
  /**
   * Which call a tool_calls entry continues: its `index`; without one (Gemini's OpenAI-compatible API sends
   * each call whole, with an id and no index), a new call for an id not seen before, else the call of that id.
   * An entry with neither: a new call when it names a function and the last call is named already, under
   * another name or with its arguments whole (some OpenAI-compatible servers send each call whole, without
   * index or id: parallel calls had been merged into one block); else the last call (its next fragment, or a
   * server that repeats the name in every fragment), or the entry's position when there is none.
   */
  const keyOf = (tc: Obj, position: number): number => {
    if (typeof tc.index === 'number') return tc.index;
    if (typeof tc.id === 'string' && tc.id) {
      let key = byId.get(tc.id);
      if (key === undefined) {
        key = newKey();
        byId.set(tc.id, key);
      }
      return key;
    }
    if (lastKey === undefined) return position;
    const name = isObj(tc.function) ? tc.function.name : undefined;
    const last = tools.get(lastKey);
    if (typeof name === 'string' && name && last?.name && (last.name !== name || last.end.done)) return newKey();
    return lastKey;
  };
  const toolCall = (out: SseEvent[], tc: Obj, position: number): void => {
    const key = keyOf(tc, position);
    lastKey = key;
    const fn = isObj(tc.function) ? tc.function : {};
    let t = tools.get(key);
    if (!t) {
      t = { block: -1, pending: '', end: new JsonEnd() };
      tools.set(key, t);
    }
    if (t.block < 0) {
      if (typeof tc.id === 'string' && tc.id) t.id = tc.id;
      if (typeof fn.name === 'string' && fn.name) t.name = fn.name;
    }
    // Arguments sent as a JSON object (see inputOf) are its text, whole.
    const args = typeof fn.arguments === 'string' ? fn.arguments : isObj(fn.arguments) ? JSON.stringify(fn.arguments) : '';
    if (args) t.end.feed(args);
    if (t.block >= 0) {
      // A fragment of a call whose block was closed early (text came between) still names its own block.
      if (args) out.push(delta(t.block, { type: 'input_json_delta', partial_json: args }));
      if (t === openCall && args && t.end.done) {
        flushHeld(out);
        openWaiting(out);
      }
      return;
    }
    t.pending += args;
    // The block opens once the name is known (some providers send the id first) and no other call's block
    // is still taking arguments: a provider that interleaves parallel calls' fragments has the later calls
    // held here until the earlier one's arguments are whole, so every block is started, filled and stopped
    // in turn, as an Anthropic-style stream must be.
    if (t.name && mayOpen()) {
      openTool(out, t);
      if (t.end.done) openWaiting(out);
    }
  };

  return {
    get complete() {
      return complete;
    },
    push(input: SseEvent): SseEvent[] {
      if (complete) return [];
      const out: SseEvent[] = [];
      if (input.data === '[DONE]') {
        // Without a finish_reason the answer was cut: no successful ending is made up.
        if (finish === null) return out;
        finishMessage(out);
        return out;
      }
      const chunk = parse(input);
      if (chunk.error) {
        fail(out, chunk.error);
        return out;
      }
      start(out, chunk);
      if (isObj(chunk.usage)) usage = chunk.usage;
      if (typeof chunk.service_tier === 'string') tier = tierToMessages(chunk.service_tier);
      const choices: unknown[] = Array.isArray(chunk.choices) ? chunk.choices : [];
      const choice = choices.find((c) => isObj(c) && (c.index ?? 0) === 0);
      if (!isObj(choice) || finish !== null) return out;
      const d: Obj = isObj(choice.delta) ? choice.delta : {};
      const reasoning = reasoningOf(d);
      if (reasoning) {
        if (holding()) held.push({ thinking: true, text: reasoning });
        else emitReasoning(out, reasoning);
      }
      const text = contentText(d.content);
      if (text) {
        if (holding()) held.push({ thinking: false, text });
        else emitText(out, text);
      }
      if (typeof d.refusal === 'string') refusal += d.refusal;
      if (Array.isArray(d.tool_calls)) d.tool_calls.forEach((tc: unknown, i: number) => isObj(tc) && toolCall(out, tc, i));
      else if (isObj(d.function_call)) toolCall(out, { index: 0, function: d.function_call }, 0);
      if (choice.finish_reason === 'error') {
        fail(out, choice.error ?? chunk.error);
      } else if (typeof choice.finish_reason === 'string' && choice.finish_reason) {
        // Calls whose name never arrived still get their block, so their arguments are not lost.
        for (const t of tools.values()) if (t.block < 0) openTool(out, t);
        openCall = null;
        flushHeld(out);
        close(out);
        finish = choice.finish_reason;
      }
      return out;
    },
    // A provider that sent its finish (and usage) but closed without `[DONE]` gave a whole answer: it ends as
    // one that sent `[DONE]` (a chat client gets the `[DONE]` added, too). Without a finish it was cut short.
    end: () => {
      const out: SseEvent[] = [];
      if (!complete && finish !== null) finishMessage(out);
      return out;
    },
  };
}
