import { LRUCache } from 'lru-cache';
import { GatewayError, quoted } from '../errors/gateway-error';
import type { GatewayState } from '../pipeline/types';
import type { Dialect } from '../providers/types';
import type { PresetWithVersion, Store } from '../store/types';
import { applyPreset, presetReference } from './apply';
import { SLUG } from './config';

/**
 * Presets at request time: the designated version of a workspace's preset, cached for a few seconds (a
 * write in this process replaces it at once; other processes see it within `ttlMs`).
 *
 * @example await presets.applyTo(state); // state.body now has the preset under it
 */
export class Presets {
  /** Made on first use: lru-cache allocates its arrays for all entries up front, and most gateways use no preset. */
  private cached: LRUCache<string, PresetWithVersion> | undefined;
  /** Writes remembered so far: a store read that a write overtook must not put back what it replaced. */
  private writes = 0;

  constructor(
    private readonly store: Store,
    private readonly ttlMs = 5_000,
  ) {}

  private get cache(): LRUCache<string, PresetWithVersion> {
    return (this.cached ??= new LRUCache({ max: 10_000, ttl: this.ttlMs }));
  }

  async find(workspaceId: string, slug: string): Promise<PresetWithVersion | null> {
    const id = `${workspaceId}/${slug}`;
    const hit = this.cache.get(id);
    if (hit) return hit;
    const writesBefore = this.writes;
    const found = await this.store.findPreset(workspaceId, slug);
    if (this.writes === writesBefore) {
      if (found) this.cache.set(id, found);
      return found;
    }
    // A write in this process landed while the read was out (on PostgreSQL a read takes a round trip): the
    // read may predate it, and caching it put the replaced version back for `ttlMs` after the write's 200.
    return this.cache.get(id) ?? found;
  }

  /** After a write in this process: the new designated version serves at once. */
  remember(found: PresetWithVersion): void {
    this.writes++;
    this.cache.set(`${found.preset.workspaceId}/${found.preset.slug}`, found);
  }

  /** Applies the preset an inference request names (if any) to `state.body`; 404 for an unknown preset. */
  async applyTo(state: GatewayState): Promise<void> {
    const body = state.body;
    if (!body || !state.key) return;
    const ref = presetReference(body);
    if (!ref) return;
    if (ref.conflict !== undefined) {
      throw new GatewayError('invalid_request', `\`model\` names preset \`${quoted(ref.slug)}\` and \`preset\` names \`${quoted(ref.conflict)}\`; name one`, { metadata: { field: 'preset' } });
    }
    // Only a slug a write accepts can name a preset: another is unknown without a lookup (PostgreSQL refused one
    // holding a NUL, a 500), and is named cut at 200 characters (a 10 MB one was echoed whole, twice).
    const found = SLUG.test(ref.slug) ? await this.find(state.key.workspaceId, ref.slug) : null;
    if (!found) {
      const slug = quoted(ref.slug);
      throw new GatewayError('not_found', `Preset \`${slug}\` not found`, { metadata: { preset: slug } });
    }
    const applied = applyPreset(body, state.endpoint as Dialect, ref, found);
    // A preset's contents are for management keys (GET /presets is 403 to others): the debug echo of the
    // upstream body, which holds them, is not given to a regular key using one.
    const debug = applied.debug as { echo_upstream_body?: unknown } | undefined;
    if (debug?.echo_upstream_body === true && !state.key.isManagement) applied.debug = { ...debug, echo_upstream_body: false };
    state.body = applied;
    state.span.setAttribute('gateway.preset', ref.slug);
    state.span.setAttribute('gateway.preset_version', found.version.version);
  }
}
