import type { GatewayContext } from './types';

/**
 * The client headers a stage passes on to providers (its `forward_headers` config), those the request has.
 * Shared by every stage that calls `services.dispatch` (upstream, fusion, web-fetch's tool loop).
 *
 * @example const forward = forwardedHeaders(ctx, config.forward_headers); await services.dispatch(state, forward);
 */
export function forwardedHeaders(ctx: GatewayContext, names: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of names) {
    const v = ctx.get(name);
    if (v) out[name] = v;
  }
  return out;
}
