type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The Messages API's limit: a request with more blocks carrying `cache_control` is a 400 ("A maximum of 4 blocks…"). */
export const MAX_CACHE_BREAKPOINTS = 4;

/**
 * Keeps a /messages request through a preset within the upstream's 4 cache breakpoints. The client's own
 * are all kept (top-level `cache_control`, automatic caching, takes one; its tools, system and message
 * blocks, those nested in a tool result too); the preset's (on its tools, then its system blocks: the order
 * the prompt is read in) lose their `cache_control` from the earliest on until the total is 4 or the preset
 * has none left. A later breakpoint still caches the whole prefix before it. A client that alone sends more
 * than 4 gets what the upstream answers, as it would without the preset.
 *
 * Edits the preset's tools and system blocks of `merged` in place: they are the request's own copies.
 *
 * @example fitCacheBreakpoints(merged, { tools: true, system: true }); // the preset gave both
 */
export function fitCacheBreakpoints(merged: Obj, fromPreset: { tools: boolean; system: boolean }): void {
  const presets: Obj[] = [];
  if (fromPreset.tools) presets.push(...marked(merged.tools));
  if (fromPreset.system) presets.push(...marked(merged.system));
  if (presets.length === 0) return;
  let own = isObj(merged.cache_control) ? 1 : 0;
  if (!fromPreset.tools) own += marked(merged.tools).length;
  if (!fromPreset.system) own += marked(merged.system).length;
  if (Array.isArray(merged.messages)) for (const m of merged.messages) if (isObj(m)) own += markedWithin(m.content, 0);
  const excess = own + presets.length - MAX_CACHE_BREAKPOINTS;
  for (const b of presets.slice(0, Math.max(0, excess))) delete b.cache_control;
}

/** The entries of a list (tools, system blocks) that carry `cache_control`. */
function marked(list: unknown): Obj[] {
  return Array.isArray(list) ? list.filter((b): b is Obj => isObj(b) && isObj(b.cache_control)) : [];
}

/** Blocks with `cache_control` in a message's content, and in the content of its blocks (a tool result's). */
function markedWithin(content: unknown, depth: number): number {
  if (!Array.isArray(content) || depth > 2) return 0;
  let n = 0;
  for (const b of content) if (isObj(b)) n += (isObj(b.cache_control) ? 1 : 0) + markedWithin(b.content, depth + 1);
  return n;
}
