import type { SseEvent } from '../../pipeline/types';
import { messagesUsage, openingUsage } from '../messages';
import { isObj, mergeUsage, type Obj } from '../common';
import { argumentsOf, finishReasonOf, messagesErrorToChat, messagesUsageToChat, reasoningDetailsOf, refusalText, tierToChat } from './response';
import { DONE, parse, type StreamTranslator } from './stream-common';

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
    // system_fingerprint on every chunk, as OpenAI streams it (null: a messages provider reports none).
    const b: Obj = { id, object: 'chat.completion.chunk', created, model, system_fingerprint: null };
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
          } else if (d.type === 'signature_delta' && block?.kind === 'thinking' && typeof d.signature === 'string') {
            // The delta holds the block's whole signature, which the Anthropic SDK assigns: appended to one the
            // start already carried, the signature sent back on the next turn was refused as invalid.
            block.signature = d.signature;
          } else if (d.type === 'input_json_delta' && block?.kind === 'tool' && typeof d.partial_json === 'string' && d.partial_json) {
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
