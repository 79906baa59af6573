import type { ModerationEngineConfig } from '../config/types';
import { keywordRegExp } from '../guardrails/detectors';
import { normalisedView, normaliseText } from '../guardrails/normalised';
import { cappedResponseText, ResponseTooLarge } from '../net/capped-response';
import { operatorRegExp } from '../operator-regexp';

/** The largest moderation answer read (decoded): about a kilobyte per text judged, more is not a moderation answer. */
const MAX_ANSWER_BYTES = 16 * 1024 * 1024;

/** What an engine found in a request's texts. */
export interface ModerationVerdict {
  /** Why it was flagged (category or rule names), unique, sorted; empty when nothing was flagged. */
  reasons: string[];
  /** Index (in the texts given) of the first flagged text, or -1. */
  flaggedIndex: number;
}

/** A moderation engine compiled once per loaded config. */
export interface ModerationEngine {
  id: string;
  kind: 'openai' | 'rules';
  onError: 'allow' | 'deny';
  /** `provider_name` of a block: the engine id. */
  providerName: string;
  /** `model_slug` of a block: the moderation model, or `rules`. */
  modelSlug: string;
  /** `moderate_output`: the answer is judged too, streams every `checkChars` new characters; null when off. */
  output: { checkChars: number } | null;
  /** Judges the texts; throws (engine failure) when it cannot. */
  check(texts: readonly string[], signal?: AbortSignal): Promise<ModerationVerdict>;
}

/** Compiles an engine (call after `moderationConfigProblem` said the config is fine). */
export function compileEngine(e: ModerationEngineConfig): ModerationEngine {
  const output = e.moderate_output ? { checkChars: e.output_check_chars ?? 500 } : null;
  const base = { id: e.id, kind: e.kind, onError: e.on_error, providerName: e.id, output };
  if (e.kind === 'rules') return { ...base, modelSlug: 'rules', check: rulesCheck(e) };
  return { ...base, modelSlug: e.model, check: openaiCheck(e) };
}

/**
 * Local rules: a regex (flags as configured) or keywords (case-insensitive, whole words, as guardrails).
 * Each text is judged as written and in its normalised view (src/guardrails/normalised.ts: NFKC, format
 * characters removed), as the guardrails judge it: `ｂａｄ` and `b\u200bad` had passed a keyword `bad`.
 * Both, not the view alone: a regex may look for what normalising takes away (a zero-width character).
 */
function rulesCheck(e: ModerationEngineConfig): ModerationEngine['check'] {
  // Keywords normalised as the view is (`ｂａｄ` as a keyword matches `bad`); the view is judged too, so `bad` matches `ｂａｄ`.
  const rules = e.rules.map((r) => ({ name: r.name, re: r.regex !== undefined ? operatorRegExp(r.regex, r.flags ?? '') : keywordRegExp((r.keywords ?? []).map(normaliseText))! }));
  const matches = (re: RegExp, text: string) => {
    re.lastIndex = 0;
    return re.test(text);
  };
  return async (texts) => {
    const reasons = new Set<string>();
    let flaggedIndex = -1;
    texts.forEach((text, i) => {
      const view = normalisedView(text)?.text;
      for (const r of rules) {
        if (matches(r.re, text) || (view !== undefined && matches(r.re, view))) {
          reasons.add(r.name);
          if (flaggedIndex < 0) flaggedIndex = i;
        }
      }
    });
    return { reasons: [...reasons].sort(), flaggedIndex };
  };
}

interface ModerationResult {
  flagged?: unknown;
  categories?: Record<string, unknown>;
  category_scores?: Record<string, unknown>;
}

/**
 * An OpenAI-compatible endpoint: POST `{base_url}/moderations` with `{model, input: [texts]}`, one result per
 * text. A category counts when its boolean is true (or, with `threshold`, its score reaches it), restricted
 * to `categories` when given; a result flagged without any category counting is reported as `flagged`
 * only when no `categories`/`threshold` narrows the judgement.
 */
function openaiCheck(e: ModerationEngineConfig): ModerationEngine['check'] {
  const url = `${e.base_url!.replace(/\/+$/, '')}/moderations`;
  const only = e.categories ? new Set(e.categories) : null;
  return async (texts, signal) => {
    const timeout = AbortSignal.timeout(e.timeout_ms);
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(e.api_key ? { authorization: `Bearer ${e.api_key}` } : {}) },
        body: JSON.stringify({ model: e.model, input: texts }),
        signal: signal ? AbortSignal.any([timeout, signal]) : timeout,
      });
    } catch (err) {
      throw new Error(timeout.aborted ? `no answer within ${e.timeout_ms} ms` : `request failed: ${(err as Error).message}`);
    }
    let text: string;
    try {
      text = await cappedResponseText(res, MAX_ANSWER_BYTES);
    } catch (err) {
      if (!res.ok) throw new Error(`answered ${res.status}`);
      if (err instanceof ResponseTooLarge) throw err;
      // The headers came in time, the body did not: a timeout all the same (it had read as "answer is not JSON").
      throw new Error(timeout.aborted ? `no answer within ${e.timeout_ms} ms` : `request failed: ${(err as Error).message}`);
    }
    if (!res.ok) throw new Error(`answered ${res.status}`);
    let results: unknown;
    try {
      results = (JSON.parse(text) as { results?: unknown }).results;
    } catch {
      throw new Error('answer is not JSON');
    }
    if (!Array.isArray(results) || results.length !== texts.length) throw new Error(`answer has no results list of ${texts.length} entries`);
    const reasons = new Set<string>();
    let flaggedIndex = -1;
    (results as ModerationResult[]).forEach((r, i) => {
      const found: string[] = [];
      const source = e.threshold !== undefined ? r?.category_scores : r?.categories;
      for (const [name, value] of Object.entries(source ?? {})) {
        if (only && !only.has(name)) continue;
        if (e.threshold !== undefined ? typeof value === 'number' && value >= e.threshold : value === true) found.push(name);
      }
      if (found.length === 0 && !only && e.threshold === undefined && r?.flagged === true) found.push('flagged');
      if (found.length > 0 && flaggedIndex < 0) flaggedIndex = i;
      for (const f of found) reasons.add(f);
    });
    return { reasons: [...reasons].sort(), flaggedIndex };
  };
}
