import { GatewayError } from '../../src/errors/gateway-error';

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

/** The `tools[]` entry a request adds to let the model fetch pages itself: `{type: "gateway:web_fetch", …}`. */
export const SERVER_TOOL_TYPE = 'gateway:web_fetch';
/** The function the model sees in place of the server tool entry. */
export const TOOL_NAME = 'web_fetch';

const DESCRIPTION =
  'Fetch a web page or text document by its http(s) URL and return its text. Use it when the answer needs ' +
  'the content of a specific page (one the user named, or one found in an earlier result).';
const PARAMETERS = {
  type: 'object',
  properties: { url: { type: 'string', description: 'The absolute http or https URL to fetch' } },
  required: ['url'],
};

/** What the request's server tool entry asks for. */
export interface ServerToolOptions {
  /** At most this many fetches for the request (null: the operator's limit only). */
  maxUses: number | null;
  allowedDomains: string[] | null;
  blockedDomains: string[] | null;
}

/** A stop condition of `stop_server_tools_when` (spec 4.1/4.2). */
export type StopCondition =
  | { type: 'step_count_is'; step_count: number }
  | { type: 'max_cost'; max_cost_in_dollars: number }
  | { type: 'has_tool_call'; tool_name: string };

/**
 * The request's `gateway:web_fetch` tool entry, checked, and its index in `tools`; null when it has none.
 *
 * @example serverToolOf({tools: [{type: 'gateway:web_fetch', max_uses: 2}]}) // {index: 0, options: {maxUses: 2, …}}
 */
export function serverToolOf(body: Obj): { index: number; options: ServerToolOptions } | null {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  const index = tools.findIndex((t: unknown) => isObj(t) && t.type === SERVER_TOOL_TYPE);
  if (index < 0) return null;
  const tool = tools[index] as Obj;
  const field = `tools[${index}]`;
  // One entry: a second would reach the provider raw (only one is turned into the model's function).
  const again = tools.findIndex((t: unknown, i: number) => i > index && isObj(t) && t.type === SERVER_TOOL_TYPE);
  if (again >= 0) throw new GatewayError('invalid_request', `The ${SERVER_TOOL_TYPE} tool may be listed once`, { metadata: { field: `tools[${again}]` } });
  const bad = (name: string, what: string) => new GatewayError('invalid_request', `\`${name}\` of the ${SERVER_TOOL_TYPE} tool ${what}`, { metadata: { field: `${field}.${name}` } });
  for (const k of Object.keys(tool)) {
    if (!['type', 'max_uses', 'allowed_domains', 'blocked_domains', 'cache_control'].includes(k)) throw bad(k, 'is not a known field (max_uses, allowed_domains, blocked_domains)');
  }
  const maxUses = tool.max_uses ?? null;
  if (maxUses !== null && (!Number.isInteger(maxUses) || maxUses < 1)) throw bad('max_uses', 'must be a positive integer');
  const domains = (name: 'allowed_domains' | 'blocked_domains'): string[] | null => {
    const v = tool[name] ?? null;
    if (v === null) return null;
    if (!Array.isArray(v) || v.some((d) => typeof d !== 'string' || d.trim() === '')) throw bad(name, 'must be an array of domain names');
    return v.map((d: string) => d.trim().toLowerCase().replace(/^\*?\./, ''));
  };
  const allowedDomains = domains('allowed_domains');
  const blockedDomains = domains('blocked_domains');
  if (allowedDomains && blockedDomains) throw bad('blocked_domains', 'cannot be combined with allowed_domains');
  const clash = tools.some((t: unknown, i: number) => i !== index && isObj(t) && (t.name === TOOL_NAME || (isObj(t.function) && t.function.name === TOOL_NAME)));
  if (clash) throw new GatewayError('invalid_request', `A tool named \`${TOOL_NAME}\` cannot be combined with the ${SERVER_TOOL_TYPE} server tool`, { metadata: { field: 'tools' } });
  return { index, options: { maxUses, allowedDomains, blockedDomains } };
}

/** The request's `stop_server_tools_when`, checked (the schema checks only the shapes it knows). */
export function stopConditionsOf(body: Obj): StopCondition[] | null {
  const list = body.stop_server_tools_when;
  if (list === undefined || list === null) return null;
  return (list as Obj[]).map((c, i) => {
    const field = `stop_server_tools_when[${i}]`;
    const bad = (what: string) => new GatewayError('invalid_request', `${field}: ${what}`, { metadata: { field } });
    if (c.type === 'step_count_is') {
      if (!Number.isInteger(c.step_count) || c.step_count < 1) throw bad('step_count must be a positive integer');
      return { type: 'step_count_is', step_count: c.step_count };
    }
    if (c.type === 'max_cost') {
      if (typeof c.max_cost_in_dollars !== 'number' || !(c.max_cost_in_dollars >= 0)) throw bad('max_cost_in_dollars must be a number ≥ 0');
      return { type: 'max_cost', max_cost_in_dollars: c.max_cost_in_dollars };
    }
    if (c.type === 'has_tool_call') {
      if (typeof c.tool_name !== 'string') throw bad('tool_name must be a string');
      return { type: 'has_tool_call', tool_name: c.tool_name };
    }
    throw bad(`condition type \`${String(c.type)}\` is not supported (step_count_is, max_cost, has_tool_call)`);
  });
}

/** The body's tools with the server tool entry replaced by the `web_fetch` function, in the dialect's shape. */
export function toolsForModel(dialect: 'chat_completions' | 'messages', tools: unknown[], index: number): unknown[] {
  const fn =
    dialect === 'chat_completions'
      ? { type: 'function', function: { name: TOOL_NAME, description: DESCRIPTION, parameters: PARAMETERS } }
      : { name: TOOL_NAME, description: DESCRIPTION, input_schema: PARAMETERS };
  return tools.map((t, i) => (i === index ? fn : t));
}

/** Whether `url`'s host is allowed by the tool's domain lists (a domain covers its subdomains). */
export function domainAllowed(url: string, options: ServerToolOptions): boolean {
  let host: string;
  try {
    host = new URL(url).hostname.toLowerCase().replace(/\.$/, '');
  } catch {
    return true; // a malformed URL is refused by the fetcher, with its own reason
  }
  const covers = (d: string) => host === d || host.endsWith(`.${d}`);
  if (options.allowedDomains) return options.allowedDomains.some(covers);
  if (options.blockedDomains) return !options.blockedDomains.some(covers);
  return true;
}
