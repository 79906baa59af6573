const ONLINE = ':online';

/**
 * The model a `model: "x:online"` names (OpenRouter's shortcut for web search): `x`; undefined for a name
 * without the suffix, or that is the suffix alone. The `web` stage removes the suffix before routing; a stage
 * placed before it reads the model through this, so it judges the model that will be called.
 *
 * @example withoutOnline('fake/claude:online') // 'fake/claude'
 */
export function withoutOnline(model: string): string | undefined {
  return model.endsWith(ONLINE) && model.length > ONLINE.length ? model.slice(0, -ONLINE.length) : undefined;
}
