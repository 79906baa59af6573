import { lookup as dnsLookup } from 'node:dns/promises';
import type { LookupAddress } from 'node:dns';
import { Agent, request } from './undici-parts';
import { addressVerdict, ipLiteralOf, isLoopback } from './address-policy';
import { htmlToText } from './html-text';
import { discard, readCappedBody } from './capped-response';

/** Resolves a hostname to every address it has (node:dns `lookup` with `all: true` by default). */
export type Resolver = (hostname: string) => Promise<readonly LookupAddress[]>;

export const systemResolver: Resolver = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

/**
 * Name lookups of caller-named hosts running at once, in the whole process. `dns.lookup` is getaddrinfo on
 * one of libuv's 4 threads, which every other lookup of the gateway shares (a provider's new connection too),
 * and it cannot be cancelled: a name whose DNS never answers holds its thread until the system resolver gives
 * up, seconds later. Without a limit, a few such URLs in requests held all 4, and every lookup of the process
 * waited behind them.
 */
const LOOKUP_SLOTS = 2;
let lookupsRunning = 0;
const lookupQueue: (() => void)[] = [];

/** Waits for a lookup slot (in arrival order); a wait that `signal` ends leaves the queue without a slot. */
function lookupSlot(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  if (lookupsRunning < LOOKUP_SLOTS) {
    lookupsRunning++;
    return Promise.resolve();
  }
  return new Promise<void>((resolve, reject) => {
    const go = () => {
      signal.removeEventListener('abort', gone);
      resolve();
    };
    const gone = () => {
      lookupQueue.splice(lookupQueue.indexOf(go), 1);
      reject(signal.reason);
    };
    lookupQueue.push(go);
    signal.addEventListener('abort', gone, { once: true });
  });
}

/** Gives a lookup slot to the next in the queue, or back. */
function freeLookupSlot(): void {
  const next = lookupQueue.shift();
  if (next) next();
  else lookupsRunning--;
}

/** `resolve` run within a lookup slot; the slot is held until the lookup itself ends, whoever still waits for it. */
function slotted(resolve: Resolver, signal: AbortSignal): Resolver {
  return async (hostname) => {
    await lookupSlot(signal);
    try {
      return await resolve(hostname);
    } finally {
      freeLookupSlot();
    }
  };
}

export interface SafeFetchOptions {
  /** Largest body accepted, in bytes; a larger declared or streamed body is refused (`too_large`). */
  maxBytes: number;
  /** Whole fetch, every hop and the body included. */
  timeoutMs: number;
  /** Redirects followed (each hop checked like the first); one more is `too_many_redirects`. */
  maxRedirects: number;
  /** Media types accepted (`text/html`, or a family `text/*`); anything else is `content_type`. */
  allowedContentTypes: readonly string[];
  /** Cancels the fetch (e.g. the client went away). */
  signal?: AbortSignal;
  /** Replaces DNS (tests: a name that resolves to a private address). */
  resolve?: Resolver;
  /**
   * TESTS ONLY: loopback (127/8, ::1) is allowed on exactly these ports, nothing else is loosened. No
   * operator config maps to it (web-fetch's schema is closed); only code that builds the fetcher can set it.
   * A port list rather than a boolean so a test can allow its first hop yet still see a redirect to
   * another loopback port refused.
   */
  testOnlyLoopbackPorts?: readonly number[];
  userAgent?: string;
  /**
   * The caller's own rule for which URLs may be requested (e.g. a request's allowed or blocked domains),
   * checked on every hop before it is resolved or connected to: a redirect to a URL it refuses is
   * `blocked_domain`, and that URL is never requested.
   */
  urlAllowed?: (url: URL) => boolean;
  /**
   * Where the operator reads why a host name was refused (its lookup failed, or what kind of address it gave):
   * the caller only gets one message for both.
   */
  logger?: { info(obj: object, msg: string): void };
}

export type FetchRefusalCode =
  | 'bad_url'
  | 'bad_scheme'
  | 'blocked_address'
  | 'blocked_domain'
  | 'too_many_redirects'
  | 'http_status'
  | 'content_type'
  | 'too_large'
  | 'timeout'
  | 'network';

/** Why a URL was not fetched. `code` is stable (tests and pipeline records use it); the message is for people. */
export class FetchRefused extends Error {
  constructor(
    readonly code: FetchRefusalCode,
    message: string,
    readonly url: string,
  ) {
    super(message);
    this.name = 'FetchRefused';
  }
}

export interface FetchedDocument {
  /** The URL asked for, and the one finally answered (after redirects). */
  url: string;
  finalUrl: string;
  redirects: string[];
  status: number;
  /** Lower-case media type without parameters, e.g. `text/html`. */
  mediaType: string;
  charset: string | undefined;
  body: Buffer;
  /** The address the last hop connected to (the checked one). */
  address: string;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/**
 * GET a caller-supplied URL without letting it reach the gateway's own network (SSRF). Per hop: only
 * http/https, no credentials in the URL, the host resolved first and every address checked
 * (address-policy.ts), then the connection pinned to the checked address through a one-hop undici Agent
 * whose `lookup` answers with that address, so a second DNS answer (rebinding) can never be used.
 * Redirects are followed by hand, each target checked the same way. Body and time are capped.
 *
 * @example const doc = await safeFetch('https://example.com/', { maxBytes: 1e6, timeoutMs: 5000, maxRedirects: 3, allowedContentTypes: ['text/html'] });
 */
export async function safeFetch(url: string, options: SafeFetchOptions): Promise<FetchedDocument> {
  const timeout = AbortSignal.timeout(options.timeoutMs);
  const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
  const redirects: string[] = [];
  let current = url;
  try {
    for (;;) {
      const target = parseTarget(current, url);
      if (options.urlAllowed && !options.urlAllowed(target)) throw new FetchRefused('blocked_domain', `${target.hostname} is not allowed for this request`, url);
      const resolve = slotted(options.resolve ?? systemResolver, signal);
      const pinned = await abortable(checkedAddress(target, url, { resolve, testOnlyLoopbackPorts: options.testOnlyLoopbackPorts, logger: options.logger }), signal);
      const agent = pinnedAgent(pinned, options.timeoutMs);
      try {
        const res = await request(target.href, {
          method: 'GET',
          dispatcher: agent,
          signal,
          headers: { 'user-agent': options.userAgent ?? 'model-gateway-web-fetch/1', accept: acceptHeader(options.allowedContentTypes) },
          headersTimeout: options.timeoutMs,
          bodyTimeout: options.timeoutMs,
        });
        if (REDIRECTS.has(res.statusCode)) {
          res.body.resume();
          const location = res.headers.location;
          if (typeof location !== 'string' || location === '') throw new FetchRefused('http_status', `Redirect ${res.statusCode} without a Location`, url);
          if (redirects.length >= options.maxRedirects) throw new FetchRefused('too_many_redirects', `More than ${options.maxRedirects} redirects`, url);
          current = new URL(location, target).href;
          redirects.push(current);
          continue;
        }
        if (res.statusCode < 200 || res.statusCode > 299) {
          res.body.resume();
          throw new FetchRefused('http_status', `HTTP ${res.statusCode}`, url);
        }
        const { mediaType, charset } = contentTypeOf(res.headers['content-type']);
        if (!mediaTypeAllowed(mediaType, options.allowedContentTypes)) {
          discard(res.body);
          throw new FetchRefused('content_type', `Content type ${mediaType || '(none)'} is not allowed`, url);
        }
        const declared = Number(res.headers['content-length']);
        if (Number.isFinite(declared) && declared > options.maxBytes) {
          discard(res.body);
          throw new FetchRefused('too_large', `Body of ${declared} bytes exceeds ${options.maxBytes}`, url);
        }
        const body = await readCappedBody(res.body, options.maxBytes, () => new FetchRefused('too_large', `Body exceeds ${options.maxBytes} bytes`, url));
        return { url, finalUrl: target.href, redirects, status: res.statusCode, mediaType, charset, body, address: pinned.address };
      } finally {
        agent.destroy().catch(() => undefined);
      }
    }
  } catch (err) {
    if (err instanceof FetchRefused) throw err;
    if (timeout.aborted) throw new FetchRefused('timeout', `No complete answer within ${options.timeoutMs} ms`, url);
    if (options.signal?.aborted) throw new FetchRefused('network', 'Fetch cancelled', url);
    const code = (err as { code?: string }).code;
    throw new FetchRefused('network', `Fetch failed${code ? ` (${code})` : ''}: ${(err as Error).message}`, url);
  }
}

/** `work`, or a rejection as soon as `signal` aborts (DNS lookups take no signal). */
function abortable<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

function parseTarget(current: string, original: string): URL {
  let target: URL;
  try {
    target = new URL(current);
  } catch {
    throw new FetchRefused('bad_url', `Not a valid URL: ${current}`, original);
  }
  if (target.protocol !== 'http:' && target.protocol !== 'https:') {
    throw new FetchRefused('bad_scheme', `Only http and https URLs are fetched, not ${target.protocol}`, original);
  }
  // Why refuse credentials: they would be sent to whatever host a redirect chain ends at.
  if (target.username || target.password) throw new FetchRefused('bad_url', 'URLs with credentials are not fetched', original);
  return target;
}

function portOf(target: URL): number {
  return target.port ? Number(target.port) : target.protocol === 'https:' ? 443 : 80;
}

/**
 * The address to connect to: the host's IP literal, or its DNS answers, every one of which must pass (a
 * name with one private answer among public ones is refused: which answer a client uses is not ours to
 * choose safely). A name that does not resolve and one that resolves to a refused address get the same
 * `blocked_address` refusal and message: they had differed (`dns`, "Could not resolve …" against "resolves to
 * an address that is private"), so any key could ask which internal names exist. The difference goes to
 * `logger`.
 */
export async function checkedAddress(
  target: URL,
  original: string,
  options: Pick<SafeFetchOptions, 'resolve' | 'testOnlyLoopbackPorts' | 'logger'>,
): Promise<LookupAddress> {
  const literal = ipLiteralOf(target.hostname);
  if (literal === 'invalid') throw new FetchRefused('bad_url', `Malformed numeric host ${target.hostname}`, original);
  const port = portOf(target);
  if (literal) {
    const verdict = addressVerdict(literal.address);
    if (!verdict.allowed && !(options.testOnlyLoopbackPorts?.includes(port) && isLoopback(literal.address))) {
      throw new FetchRefused('blocked_address', `Address ${literal.address} is ${verdict.reason}`, original);
    }
    return literal;
  }
  const hidden = (cause: string) => {
    options.logger?.info({ host: target.hostname, cause }, 'fetch refused a host name (the caller is told only that it has no public address)');
    return new FetchRefused('blocked_address', `${target.hostname} does not resolve to a public address`, original);
  };
  let addresses: readonly LookupAddress[];
  try {
    addresses = await (options.resolve ?? systemResolver)(target.hostname);
  } catch (err) {
    throw hidden(`lookup failed (${(err as { code?: string }).code ?? 'error'})`);
  }
  if (addresses.length === 0) throw hidden('no address');
  for (const a of addresses) {
    if (options.testOnlyLoopbackPorts?.includes(port) && isLoopback(a.address)) continue;
    const verdict = addressVerdict(a.address);
    if (!verdict.allowed) throw hidden(`an answer is ${verdict.reason}`);
  }
  return addresses[0];
}

/**
 * An Agent for one hop whose sockets connect only to `pinned`: the `lookup` that net.connect calls answers
 * with the checked address whatever name it is asked, so no second resolution happens. TLS still verifies
 * the certificate against the URL's hostname (undici sets `servername` from it).
 */
function pinnedAgent(pinned: LookupAddress, timeoutMs: number): Agent {
  const lookup = (_host: string, opts: { all?: boolean }, cb: (...args: unknown[]) => void) => {
    if (opts?.all) cb(null, [{ address: pinned.address, family: pinned.family }]);
    else cb(null, pinned.address, pinned.family);
  };
  return new Agent({ connections: 1, pipelining: 0, connect: { lookup: lookup as never, timeout: timeoutMs } });
}

function contentTypeOf(header: string | string[] | undefined): { mediaType: string; charset: string | undefined } {
  const value = Array.isArray(header) ? header[0] : header;
  if (!value) return { mediaType: '', charset: undefined };
  const [type, ...params] = value.split(';');
  const charset = params.map((p) => /^\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(p)?.[1]).find(Boolean);
  return { mediaType: type.trim().toLowerCase(), charset: charset?.toLowerCase() };
}

/** `text/*` matches any text type; otherwise exact, case-insensitive. */
export function mediaTypeAllowed(mediaType: string, allowed: readonly string[]): boolean {
  if (!mediaType) return false;
  return allowed.some((a) => {
    const rule = a.toLowerCase();
    return rule.endsWith('/*') ? mediaType.startsWith(rule.slice(0, -1)) : rule === mediaType;
  });
}

function acceptHeader(allowed: readonly string[]): string {
  return allowed.length ? allowed.join(', ') : '*/*';
}


/**
 * A fetched body as text: decoded with its declared charset (UTF-8 when absent or unknown) and, for HTML,
 * reduced to text.
 */
export function documentText(doc: FetchedDocument): string {
  let text: string;
  try {
    text = new TextDecoder(doc.charset ?? 'utf-8').decode(doc.body);
  } catch {
    text = new TextDecoder('utf-8').decode(doc.body);
  }
  return doc.mediaType === 'text/html' || doc.mediaType === 'application/xhtml+xml' ? htmlToText(text) : text;
}
