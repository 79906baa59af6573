import { webFetchDefinition } from './stage';

/**
 * `web-fetch`: fetches the URLs a request names (`plugins: [{id: 'web-fetch', urls: [...]}]`, and with
 * `from_messages` the http(s) URLs of the last user message) through the SSRF-safe fetcher
 * (src/net/safe-fetch.ts) and puts their text into the prompt. See stage.ts and the README's "Web fetch".
 */
export const webFetch = webFetchDefinition();
