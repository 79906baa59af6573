import type { GatewayConfig, GuardrailConfig, PiiKind } from '../config/types';
import { cappedResponseText, ResponseTooLarge } from '../net/capped-response';
import { operatorPatternProblem, operatorRegExp } from '../operator-regexp';
import { pipelineOf } from '../pipeline/request-plugins';
import { detectPii, injectionHeuristics, keywordRegExp, keywordsProblem, matchAll, type Engine, type Finding } from './detectors';
import { normalisedView, normaliseText } from './normalised';
import type { TextSlot } from './texts';

/** A guardrail's content rules compiled once per loaded config. */
export interface CompiledGuardrail {
  id: string;
  action: 'block' | 'redact' | 'flag';
  onError: 'allow' | 'deny';
  /** The engines this guardrail runs, in the order they run. */
  engines: Engine[];
  patterns: { name: string; re: RegExp }[];
  keywords: RegExp | null;
  pii: ReadonlySet<PiiKind>;
  injection: { threshold: number; classifierUrl?: string; timeoutMs: number } | null;
}

/**
 * Why a guardrail's content rules cannot be compiled, with the field path (a config error at load), or null.
 * A pattern that is not a valid JavaScript regex, or that matches the empty string (it would match
 * everywhere and redact nothing), is refused, as is an empty or white-space-only keyword.
 */
export function guardrailConfigProblem(g: GuardrailConfig, index: number): string | null {
  for (const [j, p] of (g.patterns ?? []).entries()) {
    const problem = operatorPatternProblem(p.regex, `${p.flags ?? ''}g`, `guardrails[${index}].patterns[${j}]`);
    if (problem) return problem;
  }
  return keywordsProblem(g.keywords ?? [], `guardrails[${index}].keywords`);
}

/**
 * Content rules nobody enforces would be a silent hole in the operator's policy: when a guardrail has
 * content rules, the pipelines of both inference endpoints must run the `guardrail` stage.
 */
export function guardrailStageProblem(config: GatewayConfig): string | null {
  const i = config.guardrails.findIndex((g) => compileGuardrail(g).engines.length > 0);
  if (i < 0) return null;
  for (const endpoint of ['chat_completions', 'messages'] as const) {
    if (!pipelineOf(config, endpoint).includes('guardrail')) {
      const name = endpoint === 'messages' ? config.pipelines.messages : config.pipelines.chat_completions;
      return `guardrails[${i}]: has content rules, but pipelines.${name ? endpoint : 'default'} does not run the "guardrail" stage`;
    }
  }
  return null;
}

/** Compiles a guardrail's content rules (call after `guardrailConfigProblem` said it is fine). */
export function compileGuardrail(g: GuardrailConfig): CompiledGuardrail {
  const patterns = (g.patterns ?? []).map((p) => ({ name: p.name, re: operatorRegExp(p.regex, `${p.flags ?? ''}g`) }));
  // Normalised as the texts' view is (`ｂａｄ` as a keyword matches `bad`); the view is judged too, so `bad` matches `ｂａｄ`.
  const keywords = keywordRegExp((g.keywords ?? []).map(normaliseText));
  const pii = new Set(g.pii ?? []);
  const pi = g.prompt_injection;
  const injection = pi?.enabled ? { threshold: pi.threshold ?? 0.5, classifierUrl: pi.classifier_url, timeoutMs: pi.timeout_ms ?? 2000 } : null;
  const engines: Engine[] = [];
  if (patterns.length > 0) engines.push('patterns');
  if (keywords) engines.push('keywords');
  if (pii.size > 0) engines.push('pii');
  if (injection) engines.push('prompt_injection');
  return { id: g.id, action: g.action ?? 'block', onError: g.on_error ?? 'deny', engines, patterns, keywords, pii, injection };
}

/** What one guardrail found in a request. */
export interface GuardrailOutcome {
  /** Names of what matched (pattern names, `keyword`, PII kinds, `prompt_injection`), unique, sorted. */
  patterns: string[];
  /** An engine failed (the classifier): its reason, for the record and the log. */
  error: string | null;
  /** Redacts the request's texts in place (only meaningful for `action: redact`). */
  redactAll(): void;
  /** Detected by a classifier, or by an empty match (a lookahead-only pattern): nothing to redact, so `redact` cannot make the request safe. */
  unredactable: boolean;
}

/**
 * Calls a classifier endpoint: POST `{input, guardrail_id}` → 2xx `{score: number in 0..1}`, given up after
 * `timeoutMs` or when `signal` (the request's: the client left) aborts.
 */
export type Classify = (url: string, body: { input: string; guardrail_id: string }, limits: { timeoutMs: number; signal?: AbortSignal }) => Promise<number>;

/** The largest classifier answer read (decoded; `fetch` inflates compressed ones): the answer is `{score}`. */
const MAX_CLASSIFIER_ANSWER_BYTES = 1024 * 1024;

/**
 * The classifier URL without its credentials, and those as HTTP Basic authorization. `fetch` refuses a URL
 * with credentials, and its error quotes the URL, password and all: that message was the 403 the client got
 * (`on_error: deny`), the warn log line and the span's `gateway.guardrail.error`.
 *
 * @example classifierTarget('http://u:p@c/score') // { target: 'http://c/score', authorization: 'Basic dTpw' }
 */
export function classifierTarget(url: string): { target: string; authorization?: string } {
  const u = new URL(url);
  if (!u.username && !u.password) return { target: url };
  const user = `${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`;
  u.username = '';
  u.password = '';
  return { target: u.href, authorization: `Basic ${Buffer.from(user).toString('base64')}` };
}

/** The documented classifier contract over HTTP; any other answer, or no answer in time, is a failure. */
export const httpClassify: Classify = async (url, body, { timeoutMs, signal }) => {
  const { target, authorization } = classifierTarget(url);
  const res = await fetch(target, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) },
    body: JSON.stringify(body),
    signal: signal ? AbortSignal.any([AbortSignal.timeout(timeoutMs), signal]) : AbortSignal.timeout(timeoutMs),
  });
  let text: string;
  try {
    text = await cappedResponseText(res, MAX_CLASSIFIER_ANSWER_BYTES);
  } catch (err) {
    if (!res.ok) throw new Error(`classifier answered ${res.status}`);
    if (err instanceof ResponseTooLarge) throw new Error(`classifier ${err.message}`);
    throw err;
  }
  if (!res.ok) throw new Error(`classifier answered ${res.status}`);
  let score: unknown;
  try {
    score = (JSON.parse(text) as { score?: unknown }).score;
  } catch {
    throw new Error('classifier answer is not JSON');
  }
  if (typeof score !== 'number' || !(score >= 0 && score <= 1)) throw new Error('classifier answer has no score between 0 and 1');
  return score;
};

/** The span engines' findings in one text (offsets in it). */
function spanFindings(g: CompiledGuardrail, text: string, system: boolean): Finding[] {
  // Concatenated, not pushed as spread arguments: a text with ~125 000 matches (a 5 MB list of emails) had
  // overflowed the stack with push(...matches), a 500.
  let found: Finding[] = [];
  for (const p of g.patterns) found = found.concat(matchAll(p.re, text, p.name, 'patterns'));
  if (g.keywords) found = found.concat(matchAll(g.keywords, text, 'keyword', 'keywords'));
  if (g.pii.size > 0) found = found.concat(detectPii(text, g.pii));
  if (g.injection && !system) {
    const h = injectionHeuristics(text);
    if (h.score >= g.injection.threshold) found = found.concat(h.findings);
  }
  return found;
}

/**
 * The span engines' findings in a text as written and in its normalised view (`normalised.ts`: full-width
 * letters, a zero-width space inside a word), the latter at their place in the text as written. Both, not
 * the view alone: a pattern may look for what normalising takes away (a zero-width character).
 */
function textFindings(g: CompiledGuardrail, text: string, system: boolean): Finding[] {
  const found = spanFindings(g, text, system);
  const view = normalisedView(text);
  if (!view) return found;
  addMapped(found, spanFindings(g, view.text, system), (f) => view.toOriginal(f.start, f.end));
  return found;
}

/**
 * Adds to `found` the findings of another reading of its text (`other`), each at its place in that text
 * (`place`; null leaves it out), unless `found` already has the same match there.
 */
function addMapped(found: Finding[], other: Finding[], place: (f: Finding) => { start: number; end: number } | null): void {
  const key = (f: { name: string; start: number; end: number }) => `${f.name}\0${f.start}\0${f.end}`;
  const seen = new Set(found.map(key));
  for (const f of other) {
    const at = place(f);
    if (at === null) continue;
    const m = { ...f, ...at };
    if (!seen.has(key(m))) found.push(m);
  }
}

/**
 * Runs one guardrail's engines over the request's texts. Span engines (patterns, keywords, PII, the
 * injection heuristics) find matches per text; the injection classifier, when configured, scores the
 * non-system texts joined together.
 */
export async function checkGuardrail(g: CompiledGuardrail, slots: readonly TextSlot[], classify: Classify): Promise<GuardrailOutcome> {
  const perSlot: Finding[][] = [];
  const names = new Set<string>();
  let unredactable = false;
  for (const s of slots) {
    const found = textFindings(g, s.text, s.system);
    // A text of several parts is judged in both readings a provider may give it (parts joined with nothing,
    // and with a line break: `pipe` + `bomb`); a match of the second counts at its place in the first. One
    // of line breaks alone (nothing of the parts' own text) is no match of the text.
    if (s.spaced) {
      const { toJoined } = s.spaced;
      addMapped(found, textFindings(g, s.spaced.text, s.system), (f) => {
        const at = { start: toJoined(f.start), end: toJoined(f.end) };
        return at.start === at.end && f.start !== f.end ? null : at;
      });
    }
    for (const f of found) {
      names.add(f.name);
      if (f.start === f.end) unredactable = true;
    }
    perSlot.push(found);
  }
  let error: string | null = null;
  if (g.injection?.classifierUrl && !names.has('prompt_injection')) {
    const input = slots.filter((s) => !s.system).map((s) => s.text).join('\n\n');
    if (input !== '') {
      try {
        const score = await classify(g.injection.classifierUrl, { input, guardrail_id: g.id }, { timeoutMs: g.injection.timeoutMs });
        if (score >= g.injection.threshold) {
          names.add('prompt_injection');
          unredactable = true;
        }
      } catch (err) {
        error = `prompt_injection classifier failed: ${(err as Error).name === 'TimeoutError' ? `no answer within ${g.injection.timeoutMs} ms` : (err as Error).message}`;
      }
    }
  }
  return {
    patterns: [...names].sort(),
    error,
    unredactable,
    redactAll() {
      slots.forEach((s, i) => {
        if (perSlot[i].length > 0) s.redact(perSlot[i]);
      });
    },
  };
}
