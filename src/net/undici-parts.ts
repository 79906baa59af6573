import type { Agent as UndiciAgent, errors as undiciErrors, request as undiciRequest } from 'undici';

/* eslint-disable @typescript-eslint/no-require-imports -- undici's parts loaded from their own files, below */

/**
 * The parts of undici the gateway's hot path uses, loaded from their own files. undici's index also loads
 * its fetch, WebSocket, mock, cache, proxy and interceptor code: ~3 MiB of heap in every gateway for code
 * the proxy path never runs (README, Performance). undici is pinned in package.json, so these paths are
 * fixed; `test/integration/undici-parts.test.ts` checks that each is the very object the package's index exports,
 * so an upgrade that moves one fails there. Types come from the package itself.
 */
export const Agent = require('undici/lib/dispatcher/agent') as typeof UndiciAgent;
export type Agent = UndiciAgent;
export const errors = require('undici/lib/core/errors') as typeof undiciErrors;

// What undici's index does to every dispatcher: its promise API (`request`, `stream`, `pipeline`, `upgrade`,
// `connect`) as methods (the video adapter calls `agent.request`). The same functions, if the index loads later.
Object.assign((require('undici/lib/dispatcher/dispatcher') as { prototype: object }).prototype, require('undici/lib/api'));

/**
 * undici's `request`, from its index, loaded on the first call (web fetch and web search use it; the
 * upstream path does not).
 */
export function request(...args: Parameters<typeof undiciRequest>): ReturnType<typeof undiciRequest> {
  return (require('undici') as { request: typeof undiciRequest }).request(...args);
}
