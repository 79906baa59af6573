import type { PiiKind } from '../config/types';

/** One match of a guardrail engine in one text: `[start, end)` offsets, and the name callers may see. */
export interface Finding {
  /** What matched: a pattern rule's name, `keyword`, a PII kind, or `prompt_injection`. Never the text. */
  name: string;
  engine: Engine;
  start: number;
  end: number;
}

export type Engine = 'patterns' | 'keywords' | 'pii' | 'prompt_injection';

/**
 * Every match of a global regex. An empty match counts (`start === end`): a lookahead-only pattern such as
 * `(?=.*confidential)` matches only so, and skipping it had let the text through. It is a detection with no
 * span to redact (`redact` leaves it out; the guardrail blocks instead, README "Guardrails").
 */
export function matchAll(re: RegExp, text: string, name: string, engine: Engine, accept?: (m: string) => boolean): Finding[] {
  const out: Finding[] = [];
  re.lastIndex = 0;
  for (const m of text.matchAll(re)) {
    if (accept && !accept(m[0])) continue;
    out.push({ name, engine, start: m.index!, end: m.index! + m[0].length });
  }
  return out;
}

/** The Luhn checksum of a digit string (payment cards). */
export function luhnValid(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return digits.length > 0 && sum % 10 === 0;
}

const digitsOf = (s: string) => s.replace(/\D/g, '');

interface PiiDetector {
  re: RegExp;
  accept?: (m: string) => boolean;
}

/**
 * The PII detectors. Their order matters: when two overlap (a 15-digit card number also looks like a
 * phone number), the earlier detector's match is kept (see `resolveOverlaps`).
 */
export const PII_DETECTORS: Readonly<Record<PiiKind, PiiDetector>> = {
  // 13-19 digits, optionally grouped by single spaces or dashes, that pass the Luhn check.
  payment_card: {
    re: /(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])/g,
    accept: (m) => luhnValid(digitsOf(m)),
  },
  // US Social Security numbers in the written form AAA-GG-SSSS (or with spaces), excluding the never-issued
  // areas 000, 666, 9xx, group 00 and serial 0000; and UK National Insurance numbers (AB123456C, optionally
  // spaced AB 12 34 56 C), excluding the prefixes HMRC never allocates.
  national_id: {
    re: /(?<![\w-])(?!000|666|9\d\d)\d{3}([- ])(?!00)\d{2}\1(?!0000)\d{4}(?![\w-])|\b(?!BG|GB|KN|NK|NT|TN|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b/g,
  },
  // Secrets by their well-known shapes: OpenAI/Anthropic-style `sk-…`, AWS access key ids, GitHub, GitLab,
  // Slack, Google API keys, Stripe keys, JWTs and PEM private keys. A JWT starts where a run of its characters
  // does (not after `\b`): `eyJ-eyJ-…` offered a start every 4 characters, each scanning the rest of the run
  // for its dot (quadratic: 80 KB took 2.2 s).
  api_key: {
    re: /\bsk-[A-Za-z0-9_-]{20,}|\bAKIA[0-9A-Z]{16}\b|\bgh[pousr]_[A-Za-z0-9]{36,}\b|\bgithub_pat_[A-Za-z0-9_]{22,}|\bglpat-[A-Za-z0-9_-]{20,}|\bxox[abpors]-[A-Za-z0-9-]{10,}|\bAIza[0-9A-Za-z_-]{35}|\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}|(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}|-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----[\s\S]*?(?:-----END (?:[A-Z]+ )?PRIVATE KEY-----|$)/g,
  },
  email: {
    re: /(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b/g,
  },
  // International numbers with a leading + (8-15 digits), or numbers written in groups (a parenthesised area
  // code, or three or more groups) of 10-15 digits in all. Between groups one separator throughout (space,
  // dot or dash; none at all after a +): `2024-01-15 12`, `12.50 13.75 99.99` and `40.7128 74.0060 12`
  // mixed them and had been taken for phones (found by a security audit). Not after or before a digit joined
  // by `.`, `,` or `:` (a time, a longer dotted run), not an IPv4 address, not thousands (every group after
  // the first of three digits). A bare run of digits without + is not taken for a phone number (it is more
  // often an id or an amount). Each group is a maximal run of digits, so a failed match gives up at once.
  phone: {
    re: /(?<![\w+]|\d[.,:])(?:\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,12}(?:([ .-])\d{1,8}(?:\1\d{1,8}){0,4})?|\(\d{2,4}\)[ .-]?\d{2,8}(?:([ .-])\d{2,8}(?:\2\d{2,8}){0,3})?|\d{2,5}([ .-])\d{2,8}(?:\3\d{2,8}){1,4})(?![\w-]|[.,:]\d)/g,
    accept: (m) => {
      const n = digitsOf(m).length;
      if (m.startsWith('+')) return n >= 8 && n <= 15;
      return n >= 10 && n <= 15 && !/^\d{1,3}(?:\.\d{1,3}){3}$/.test(m) && !/^\d{1,3}(?:[ .,]\d{3})+$/.test(m);
    },
  },
};

/** The order PII kinds are checked in, whatever order the config lists them. */
export const PII_ORDER: readonly PiiKind[] = ['payment_card', 'national_id', 'api_key', 'email', 'phone'];

export function detectPii(text: string, kinds: ReadonlySet<PiiKind>): Finding[] {
  let out: Finding[] = [];
  for (const kind of PII_ORDER) {
    if (!kinds.has(kind)) continue;
    const d = PII_DETECTORS[kind];
    out = out.concat(matchAll(d.re, text, kind, 'pii', d.accept)); // not push(...): see spanFindings
  }
  return out;
}

/** One prompt-injection heuristic: a phrase shape and how much it says about the text. */
export interface InjectionHeuristic {
  id: string;
  re: RegExp;
  weight: number;
}

/**
 * The documented prompt-injection heuristics (README "Guardrails"). A text's score is
 * `1 - Π(1 - weight)` over the heuristics it matches (each counted once), so one strong sign (0.6) reaches
 * the default threshold of 0.5 alone, and weaker signs (0.3, 0.4) only together.
 */
export const INJECTION_HEURISTICS: readonly InjectionHeuristic[] = [
  {
    id: 'ignore_instructions',
    re: /\b(?:ignore|disregard|forget|override|bypass|skip)\b[^.\n]{0,40}?\b(?:previous|prior|above|earlier|preceding|all|any|your|system|original)\b[^.\n]{0,30}?\b(?:instructions?|prompts?|rules|directions|guidelines|directives)\b/gi,
    weight: 0.6,
  },
  {
    id: 'reveal_system_prompt',
    re: /\b(?:reveal|show|print|repeat|output|leak|display|dump|tell me)\b[^.\n]{0,30}?\b(?:system prompt|hidden (?:instructions|prompt)|initial (?:instructions|prompt)|your (?:instructions|prompt))\b/gi,
    weight: 0.6,
  },
  {
    id: 'jailbreak_persona',
    re: /\b(?:do anything now|developer mode (?:enabled|on)|jailbr(?:eak|oken)|you are (?:now )?(?:DAN|an? (?:unrestricted|unfiltered|uncensored) (?:AI|model|assistant)))\b/gi,
    weight: 0.5,
  },
  {
    id: 'no_restrictions',
    re: /\b(?:without|no|free (?:of|from)|ignore (?:any|all|your))\b[^.\n]{0,20}?\b(?:restrictions|filters|safety (?:rules|guidelines)|guardrails|limitations|content polic(?:y|ies))\b/gi,
    weight: 0.4,
  },
  {
    id: 'chat_template_tokens',
    // One way to match a line's leading blanks (`#{0,3}` between two `[ \t]*` split a run of spaces every
    // way: 80 000 spaces took 3.3 s); `## system:` and `system:` still match.
    re: /<\|im_start\|>|<\|im_end\|>|<\|system\|>|<\|endoftext\|>|\[\/?INST\]|<<\/?SYS>>|^[ \t]*(?:#{1,3}[ \t]*)?(?:system|assistant)[ \t]*:/gim,
    weight: 0.4,
  },
  {
    id: 'new_instructions',
    re: /\b(?:new|updated|real|actual) (?:system )?instructions?\s*:/gi,
    weight: 0.3,
  },
];

/** The heuristics' score of a text (0..1) and the spans that matched (for redaction). */
export function injectionHeuristics(text: string): { score: number; findings: Finding[] } {
  let keep = 1;
  let findings: Finding[] = [];
  for (const h of INJECTION_HEURISTICS) {
    const hits = matchAll(h.re, text, 'prompt_injection', 'prompt_injection');
    if (hits.length === 0) continue;
    keep *= 1 - h.weight;
    findings = findings.concat(hits);
  }
  return { score: 1 - keep, findings };
}

/** Escapes a literal for use inside a RegExp. */
export function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * Why a keyword list cannot be compiled, with the path of the bad keyword, or null: an empty or
 * white-space-only keyword would be an empty alternative, matching (empty) beside any non-word character.
 *
 * @example keywordsProblem(['bomb', '  '], 'guardrails[0].keywords') // 'guardrails[0].keywords[1]: empty or white space only'
 */
export function keywordsProblem(words: readonly string[], at: string): string | null {
  // Format characters too (a zero-width space alone): guardrails match keywords with them removed.
  const j = words.findIndex((w) => w.replace(/\p{Cf}/gu, '').trim() === '');
  return j < 0 ? null : `${at}[${j}]: empty or white space only`;
}

/**
 * One regex for a keyword list (call after `keywordsProblem` said it is fine): case-insensitive, whole words (Unicode letters and digits count); the words of
 * a phrase may be apart by any run of white space (two spaces, a no-break space and a line break had let
 * `codename blue` through; found by a security audit).
 */
export function keywordRegExp(words: readonly string[]): RegExp | null {
  if (words.length === 0) return null;
  const phrase = (w: string) => w.trim().split(/\s+/).map(escapeRegExp).join('\\s+');
  const alts = [...words].sort((a, b) => b.length - a.length).map(phrase).join('|');
  return new RegExp(`(?<![\\p{L}\\p{N}_])(?:${alts})(?![\\p{L}\\p{N}_])`, 'giu');
}

/**
 * Sorted, non-overlapping findings: when two overlap, the one that starts first wins (on a tie, the longer;
 * then the one found first, i.e. the earlier detector).
 */
export function resolveOverlaps(findings: readonly Finding[]): Finding[] {
  const sorted = findings.map((f, i) => ({ f, i })).sort((a, b) => a.f.start - b.f.start || b.f.end - a.f.end || a.i - b.i);
  const out: Finding[] = [];
  let end = -1;
  for (const { f } of sorted) {
    if (f.start < end) continue;
    out.push(f);
    end = f.end;
  }
  return out;
}

/** `text` with each finding replaced by `[REDACTED:<name>]` (an empty match has nothing to replace). */
export function redact(text: string, findings: readonly Finding[]): string {
  let out = '';
  let at = 0;
  for (const f of resolveOverlaps(findings.filter((f) => f.end > f.start))) {
    out += text.slice(at, f.start) + `[REDACTED:${f.name}]`;
    at = f.end;
  }
  return out + text.slice(at);
}
