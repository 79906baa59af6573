import { inputTokens } from '../../src/spend/estimate';

/** What the auto-router reads from a request (either dialect). */
export interface RequestFeatures {
  tokens: number;
  code: boolean;
  tools: boolean;
  images: boolean;
  reasoning: boolean;
}

/**
 * How a line of code starts, in common languages: the keyword as the language writes it (case-sensitive:
 * with the i flag "Let me know", "Select…", "Public…", "Import…" were code) and then what must follow it in
 * code, so that lowercase prose ("let me know", "class starts at 9", "import duties") is not code either.
 */
const CODE_LINE_STARTS = [
  String.raw`def [A-Za-z_]\w*[ \t]*\(`, // def f(
  String.raw`class [A-Za-z_]\w*(?:[ \t]*[:({<]| extends | implements )`, // class A: / class A( / class A { / class A<T> / class A extends
  String.raw`import (?:[\w.]+;?[ \t]*$|[\w.]+ as \w|static |[{*'"]|[\w$]+(?:, *\{[^}\n]*\})? from ['"])`, // import os / import a.b; / import x as y / import { / import x from 'y'
  String.raw`from [\w.]+ import `,
  String.raw`function\*?[ \t]*[\w$]*[ \t]*\(`, // function f( / function (
  String.raw`(?:const|let|var) (?:(?:mut )?[\w$]+[ \t]*[:=;]|[{[])`, // const x = / let x: / let mut x = / var x; / const { a } =
  String.raw`#include[ \t]*[<"]`,
  String.raw`(?:public|private|protected)(?:[ \t]*:[ \t]*$|(?: static| final| abstract)* (?:class|interface|enum|void|[\w<>\[\],]+ [\w$]+(?:\(|[ \t]*[;=])))`, // public: / public static void / private int x;
  String.raw`package [\w.]+;?[ \t]*$`, // package main / package a.b;
  String.raw`fn [A-Za-z_]\w*[ \t]*[(<]`,
  String.raw`func (?:\([^)\n]*\) )?[A-Za-z_]\w*[ \t]*\(`, // func f( / func (s *S) f(
  'SELECT ',
  String.raw`<\?php`,
  String.raw`</?[a-z][a-z0-9-]*(?:[ \t][^<>\n]*)?>`, // <div> / <div class="x"> / </p>
];
/** A fenced block, or a line that starts like code in a common language (CODE_LINE_STARTS). */
// `[ \t]*`, not `\s*`: with the m flag `\s*` also ran over newlines, so every line start rescanned the rest of the
// text (60 000 newlines: 11 s of event loop).
const CODE = new RegExp(`\`\`\`|^[ \\t]*(?:${CODE_LINE_STARTS.join('|')})`, 'm');
const IMAGE_TYPES = new Set(['image', 'image_url', 'input_image']);

/** Every text the model reads as a user/system/tool turn (not the base64 of images). */
function texts(body: Record<string, unknown>, out: string[]): void {
  const walk = (v: unknown): void => {
    if (typeof v === 'string') out.push(v);
    else if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      if (typeof o.type === 'string' && IMAGE_TYPES.has(o.type)) return;
      if (typeof o.text === 'string') out.push(o.text);
      if (o.content !== undefined) walk(o.content);
    }
  };
  walk(body.system);
  walk(body.messages);
}

function hasImage(v: unknown): boolean {
  if (Array.isArray(v)) return v.some(hasImage);
  if (!v || typeof v !== 'object') return false;
  const o = v as Record<string, unknown>;
  if (typeof o.type === 'string' && IMAGE_TYPES.has(o.type)) return true;
  return hasImage(o.content);
}

/** Reasoning asked for: chat `reasoning` / `reasoning_effort` (not none), messages `thinking` (not disabled) or `output_config.effort`. */
function asksReasoning(body: Record<string, unknown>): boolean {
  // `reasoning: {enabled: false}` turns reasoning off whatever effort it or `reasoning_effort` names (it goes
  // upstream as effort none).
  if ((body.reasoning as { enabled?: unknown } | undefined)?.enabled === false) return false;
  const effort = body.reasoning_effort ?? (body.reasoning as { effort?: unknown } | undefined)?.effort;
  if (typeof effort === 'string' && effort !== 'none') return true;
  const reasoning = body.reasoning as { enabled?: unknown; max_tokens?: unknown } | undefined;
  if (reasoning && (reasoning.enabled === true || typeof reasoning.max_tokens === 'number')) return true;
  const thinking = body.thinking as { type?: unknown } | undefined;
  if (thinking && typeof thinking.type === 'string' && thinking.type !== 'disabled') return true;
  const outEffort = (body.output_config as { effort?: unknown } | undefined)?.effort;
  return typeof outEffort === 'string' && outEffort !== 'none';
}

/** @example requestFeatures({ messages: [{ role: 'user', content: '```js\nx()\n```' }] }).code === true */
export function requestFeatures(body: Record<string, unknown>): RequestFeatures {
  const all: string[] = [];
  texts(body, all);
  return {
    tokens: inputTokens(body),
    code: all.some((t) => CODE.test(t)),
    tools: Array.isArray(body.tools) && body.tools.length > 0,
    images: hasImage(body.messages),
    reasoning: asksReasoning(body),
  };
}
