import { messagesToChatRequest } from '../dialects/translate/request';
import type { Dialect } from '../providers/types';
import type { PresetWithVersion } from '../store/types';
import { fitCacheBreakpoints } from './cache-breakpoints';
import { NEUTRAL_FIELDS } from './config';

/** A request's use of a preset: its slug, and the model the request names itself (if any). */
export interface PresetReference {
  slug: string;
  model?: string;
}

const IN_MODEL = /^(.*)@preset\/(.+)$/;

/**
 * How a request names a preset (spec 1.2 / issue 6): `model: "@preset/<slug>"`, `model: "<model>@preset/<slug>"`
 * or `preset: "<slug>"`. Null when it names none. A `preset` field and a model reference naming two
 * different presets is a mistake (the caller cannot mean both): `conflict` is set.
 */
export function presetReference(body: Record<string, unknown>): (PresetReference & { conflict?: string }) | null {
  const m = typeof body.model === 'string' ? IN_MODEL.exec(body.model) : null;
  const field = typeof body.preset === 'string' && body.preset ? body.preset : undefined;
  if (!m && field === undefined) return null;
  if (m && field !== undefined && m[2] !== field) return { slug: m[2], conflict: field };
  if (m) return m[1] ? { slug: m[2], model: m[1] } : { slug: m[2] };
  return { slug: field! };
}

/**
 * The request with the preset's designated version under it: a shallow merge in which every field the
 * request sets wins. The version's config is messages-style; a chat request gets it translated (e.g.
 * `stop_sequences` → `stop`, Anthropic tools → function tools, `max_tokens` → `max_completion_tokens`).
 * `system_prompt` goes in the request's own way (messages: `system`, as the blocks it was saved in if it was;
 * chat: a leading system message) unless the request brings its own system prompt (chat: a system or
 * developer message anywhere in `messages`).
 */
export function applyPreset(body: Record<string, unknown>, dialect: Dialect, ref: PresetReference, found: PresetWithVersion): Record<string, unknown> {
  // A copy: the version is cached across requests, and stages edit the request's values in place (a guardrail
  // redacts the answer schema's descriptions where they are): shared, one request's redaction reached the next
  // request of any key through the cache.
  const config = jsonCopy(found.version.config);
  const base: Record<string, unknown> = dialect === 'messages' ? { ...config } : chatConfig(config);
  const request: Record<string, unknown> = { ...body };
  delete request.preset;
  if (ref.model !== undefined) request.model = ref.model;
  else if (typeof request.model === 'string' && IN_MODEL.test(request.model)) delete request.model;
  // A field the request sets wins over the preset's under any of its names: a chat request's `max_tokens`
  // over the preset's (translated) `max_completion_tokens`, its `reasoning` over `reasoning_effort`, …
  for (const names of dialect === 'messages' ? [] : CHAT_ALIASES) if (names.some((n) => request[n] !== undefined)) for (const n of names) delete base[n];
  // The models to try are one choice: a request that names its own (`model`, or a `models` list beside a
  // preset) replaces the preset's model, models and fallbacks (the preset's model had gone first, ahead of
  // the request's list). A request that only adds `fallbacks` keeps the preset's model ahead of them.
  if (request.model !== undefined || request.models !== undefined) {
    for (const n of MODEL_CHOICE) delete base[n];
    // `model` is required (messages): the list's first (routing tries it first all the same).
    if (request.model === undefined && Array.isArray(request.models) && typeof request.models[0] === 'string') request.model = request.models[0];
  }
  const merged: Record<string, unknown> = { ...base, ...request };
  const prompt = found.version.systemPrompt;
  const presetSystem = dialect === 'messages' && !!prompt && merged.system === undefined;
  if (prompt) {
    // Blocks as saved on /messages (their cache_control with them); chat gets the text, as messages → chat
    // translation gives a system of blocks (cache_control dropped: chat providers cache on their own). A copy,
    // as for the config: a guardrail's redaction edits the blocks in place.
    const blocks = found.version.systemBlocks;
    if (presetSystem) merged.system = blocks ? jsonCopy(blocks) : prompt;
    // Any system or developer message is the request's own system prompt, wherever it stands: chat allows one
    // after the first turn, and the preset's added ahead of it made two instructions the client never sent.
    if (dialect === 'chat_completions' && Array.isArray(merged.messages) && !merged.messages.some(isSystemMessage)) {
      merged.messages = [{ role: 'system', content: prompt }, ...merged.messages];
    }
  }
  // The preset's cache breakpoints and the client's together may pass the upstream's 4 (a 400 the client could
  // not foresee): the client's are kept, the preset's earliest dropped. Chat gets none of the preset's.
  if (dialect === 'messages') fitCacheBreakpoints(merged, { tools: request.tools === undefined && base.tools !== undefined, system: presetSystem });
  return merged;
}

const isSystemMessage = (m: unknown) => {
  const role = (m as { role?: unknown } | null)?.role;
  return role === 'system' || role === 'developer';
};

const MODEL_CHOICE = ['model', 'models', 'fallbacks'] as const;

/** Chat fields that set one thing under two names (a preset's translated config may use the other one). */
const CHAT_ALIASES: readonly (readonly string[])[] = [
  ['max_tokens', 'max_completion_tokens'],
  ['reasoning', 'reasoning_effort'],
  ['tools', 'functions'],
  ['tool_choice', 'function_call'],
];

function chatConfig(config: Record<string, unknown>): Record<string, unknown> {
  const out = messagesToChatRequest({ ...config, messages: [] });
  delete out.messages;
  for (const f of NEUTRAL_FIELDS) if (config[f] !== undefined) out[f] = config[f];
  return out;
}

/**
 * A deep copy of a JSON value (what a preset version holds): ~10× faster than structuredClone, which took
 * ~250 µs for a config of 30 tools. A `__proto__` key stays an own field, as JSON.parse made it.
 *
 * @example jsonCopy({ a: [{ b: 1 }] }) // a new { a: [{ b: 1 }] }
 */
function jsonCopy<T>(value: T): T {
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return value.map(jsonCopy) as T;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(value)) {
    const v = jsonCopy((value as Record<string, unknown>)[k]);
    if (k === '__proto__') Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    else out[k] = v;
  }
  return out as T;
}
