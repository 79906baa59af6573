/**
 * Whether a parsed JSON value nests more than `limit` arrays/objects deep (`{}` is depth 1). Iterative (an
 * explicit stack), so the check itself cannot overflow, and it stops at the first path that is too deep.
 * The request path checks the raw text instead, before parsing (routes/json-checks.ts); this is the same
 * rule stated on values, for code that holds a parsed value, and the reference the text scan is tested against.
 *
 * @example jsonDepthExceeds(JSON.parse('{"a":[1]}'), 1) // true
 */
export function jsonDepthExceeds(value: unknown, limit: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    if (depth > limit) return true;
    for (const child of Array.isArray(node) ? node : Object.values(node)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
  return false;
}
