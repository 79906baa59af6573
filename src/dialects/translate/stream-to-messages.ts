import type { SseEvent } from '../../pipeline/types';
import { isObj, type Obj } from '../common';
import { chatErrorToMessages, chatUsageToMessages, claudeDetailsOf, contentText, isClaudeDetail, matchedStop, reasoningOf, refusalDetails, stopReasonOf, tierToMessages, toolUseId } from './response';
import { parse, type StreamTranslator } from './stream-common';

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

type Kind = 'text' | 'thinking' | 'redacted' | 'tool';

/** chat.completion.chunk events in → Anthropic-style events out (the messages rewriter adds the final `[DONE]`). */
export function chatToMessagesStream(): StreamTranslator {
  let started = false;
  let complete = false;
  let nextIndex = 0;
  let open: { index: number; kind: Kind } | null = null;
  const tools = new Map<number, ToolState>();
  let finish: string | null = null;
  /** The stop sequence the finish chunk names (vLLM, SGLang: see matchedStop). */
  let stopSequence: string | null = null;
  let refusal = '';
  let usage: Obj | null = null;
  let tier: string | undefined;

  const ev = (type: string, data: Obj): SseEvent => ({ event: type, data: JSON.stringify({ type, ...data }) });
  const close = (out: SseEvent[]): void => {
    if (!open) return;
    out.push(ev('content_block_stop', { index: open.index }));
    open = null;
  };
  const openBlock = (out: SseEvent[], kind: Kind, block: Obj): number => {
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
  /**
   * Claude's signed reasoning in `reasoning_details` (OpenRouter's stream: the text comes in `reasoning` as well,
   * the signature in a later entry of the same block; LiteLLM's `thinking_blocks` alike): a signature goes to the open thinking block as its
   * `signature_delta`, encrypted reasoning is a `redacted_thinking` block. A signature with no thinking block
   * open (its text was followed by other output already) is left out, as all had been: a block cannot be
   * reopened. The entries' text is not read; `reasoning` carries it.
   */
  const emitSigned = (out: SseEvent[], d: Obj): void => {
    if (d.type === 'reasoning.text' && typeof d.signature === 'string' && d.signature && open?.kind === 'thinking') {
      out.push(delta(open.index, { type: 'signature_delta', signature: d.signature }));
    } else if (d.type === 'reasoning.encrypted' && typeof d.data === 'string' && d.data) {
      openBlock(out, 'redacted', { type: 'redacted_thinking', data: d.data });
      close(out);
    }
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
  let held: ({ thinking: boolean; text: string } | { detail: Obj })[] = [];
  const holding = (): boolean => !mayOpen();
  const flushHeld = (out: SseEvent[]): void => {
    if (held.length === 0 || holding()) return;
    const pieces = held;
    held = [];
    for (const p of pieces) {
      if ('detail' in p) emitSigned(out, p.detail);
      else (p.thinking ? emitReasoning : emitText)(out, p.text);
    }
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
      usage: { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 } as Obj,
    };
    // The tier goes where the Messages API gives it, message_start's usage: the Anthropic SDK's accumulator
    // takes the counts from message_delta but not the tier, so `finalMessage().usage` had none. Null when the
    // provider named none, as the JSON translation gives it (spec 4.1: string|null).
    message.usage.service_tier = tier ?? null;
    out.push(ev('message_start', { message }));
  };
  /** message_delta (stop reason, usage: zeros when the provider reported none) and message_stop. */
  const finishMessage = (out: SseEvent[]): void => {
    const sequence = refusal || tools.size > 0 ? null : stopSequence;
    const stopReason = refusal ? 'refusal' : sequence !== null ? 'stop_sequence' : stopReasonOf(finish, tools.size > 0);
    const u = chatUsageToMessages(usage);
    if (tier !== undefined) u.service_tier = tier;
    out.push(
      ev('message_delta', {
        delta: { stop_reason: stopReason, stop_sequence: sequence, stop_details: stopReason === 'refusal' ? refusalDetails(refusal || null) : null },
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
  /** A provider index reused by a later call (see keyOf): the key of the latest call given that index. */
  const byIndex = new Map<number, number>();
  let keysMade = 0;
  const newKey = (): number => -1 - keysMade++; // negative: never an index a provider sends
  /**
   * Which call a tool_calls entry continues: its `index` (a new call when it brings another id and a name
   * after the arguments of the call there are whole); without one (Gemini's OpenAI-compatible API sends each call whole, with an id and no index), a new
   * call for an id not seen before, else the call of that id.
   * An entry with neither: a new call when it names a function and the last call is named already, under
   * another name or with its arguments whole (some OpenAI-compatible servers send each call whole, without
   * index or id: parallel calls had been merged into one block); else the last call (its next fragment, or a
   * server that repeats the name in every fragment), or the entry's position when there is none.
   */
  const keyOf = (tc: Obj, position: number): number => {
    if (typeof tc.index === 'number') {
      const key = byIndex.get(tc.index) ?? tc.index;
      const known = tools.get(key);
      // Ollama gives every parallel call `index: 0`, each whole with its own id: at a known index, an entry with
      // another id that names a function after that call's arguments are whole is a new call (its arguments had
      // been appended to the first call's, and the Anthropic SDK failed on the joined JSON). Another id alone is
      // not: Poolside's API sends a call's later fragments under a second id, at the same index.
      const name = isObj(tc.function) ? tc.function.name : undefined;
      const another = typeof tc.id === 'string' && tc.id && known?.id && known.id !== tc.id;
      if (!another || typeof name !== 'string' || !name || !known.end.done) return key;
      const fresh = newKey();
      byIndex.set(tc.index, fresh);
      return fresh;
    }
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
      if (typeof chunk.service_tier === 'string') tier = tierToMessages(chunk.service_tier);
      start(out, chunk);
      if (isObj(chunk.usage)) usage = chunk.usage;
      const choices: unknown[] = Array.isArray(chunk.choices) ? chunk.choices : [];
      const choice = choices.find((c) => isObj(c) && (c.index ?? 0) === 0);
      if (!isObj(choice) || finish !== null) return out;
      const d: Obj = isObj(choice.delta) ? choice.delta : {};
      const reasoning = reasoningOf(d);
      if (reasoning) {
        if (holding()) held.push({ thinking: true, text: reasoning });
        else emitReasoning(out, reasoning);
      }
      for (const detail of claudeDetailsOf(d)) {
        if (!isClaudeDetail(detail)) continue;
        if (holding()) held.push({ detail });
        else emitSigned(out, detail);
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
        stopSequence = matchedStop(choice);
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
