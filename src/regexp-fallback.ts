import v8 from 'node:v8';

let on = false;

/**
 * Turns on V8's linear-time regular expression engine as the fallback for a match that backtracks
 * excessively (`--enable-experimental-regexp-engine-on-excessive-backtracks`), once per process. Client text
 * meets regular expressions the gateway does not write itself (a guardrail's `patterns`, a response schema's
 * `pattern`) and some it does: with the fallback, `^(a+)+$` against 30 a's and a `!` takes milliseconds, not
 * seconds (the time doubled with each character). It covers expressions without the `u` or `v` flag (the
 * linear engine has no Unicode mode); a match that does not backtrack is unchanged. Set at run time, it
 * applies to expressions made before too.
 *
 * @example linearRegExpFallback(); // at start, before any client text is matched
 */
export function linearRegExpFallback(): void {
  if (on) return;
  on = true;
  v8.setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');
}
