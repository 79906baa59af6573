import { requireManagementKey } from '../auth/key-cache';
import { GatewayError, quoted } from '../errors/gateway-error';
import type { ParameterizedContext } from 'koa';
import type { GatewayContext, HeaderKeyState, Stage } from '../pipeline/types';
import { presetReference } from '../presets/apply';
import { presetConfigOf, presetView, SLUG, versionView } from '../presets/config';
import type { Services } from '../services';
import { StoreConflictError } from '../store/types';
import { checkRequestPlugins } from '../pipeline/request-plugins';
import { requestedModels } from '../routing/candidates';
import { requestValidators } from '../validation/request-validators';

function slugOf(ctx: GatewayContext): string {
  const slug = (ctx as unknown as { params: Record<string, string> }).params.slug ?? '';
  if (!SLUG.test(slug)) {
    throw new GatewayError('invalid_request', 'The preset slug must be 1-64 characters of lowercase letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit', {
      metadata: { field: 'slug' },
    });
  }
  return slug;
}

/**
 * POST /presets/{slug}/messages (spec 4.3): a management key saves a messages request body as the preset's
 * next version (version 1 for a new slug), which becomes the designated one. Only preset fields persist.
 */
export function presetWriteStage(services: Services): Stage {
  const write: Stage = async (ctx) => {
    requireManagementKey(ctx.state.gateway.key);
    const slug = slugOf(ctx);
    const state = ctx.state.gateway;
    const body = state.body!;
    // `messages` is not persisted (spec 4.3), so the empty list clients send with a preset is fine here.
    const object = typeof body === 'object' && body !== null && !Array.isArray(body);
    const checked = object && Array.isArray(body.messages) && body.messages.length === 0 ? { ...body, messages: [{ role: 'user', content: '' }] } : body;
    const problem = requestValidators().messages(checked);
    if (problem) throw new GatewayError('invalid_request', problem.message, { metadata: { field: problem.field } });
    if (presetReference(body)) throw new GatewayError('invalid_request', 'A preset cannot name another preset', { metadata: { field: 'model' } });
    // What every use of the preset would be refused for is refused now: a plugin the pipeline does not run, a model (fallbacks too) this gateway does not have.
    checkRequestPlugins({ ...state, endpoint: 'messages' }, services.config);
    for (const model of requestedModels(body)) {
      if (!services.models.has(model)) {
        // Cut as the inference endpoints cut it: a 10 MB body's model name was echoed whole, twice.
        const name = quoted(model);
        throw new GatewayError('not_found', `Model \`${name}\` is not available on this gateway (see GET /models)`, { metadata: { model: name } });
      }
    }
    const { config, systemPrompt, systemBlocks } = presetConfigOf(body);
    // The system prompt is stored as text, which PostgreSQL cannot hold a NUL in (it refused the write: a 500);
    // refused on SQLite too, so a preset saves or not the same on both engines. The config is JSON text: kept.
    if (systemPrompt?.includes('\u0000')) throw new GatewayError('invalid_request', 'A preset\'s `system` cannot hold a NUL character (U+0000)', { metadata: { field: 'system' } });
    try {
      const saved = await services.store.savePresetVersion({ workspaceId: state.key!.workspaceId, slug, creatorUserId: state.key!.creatorUserId, config, systemPrompt, systemBlocks });
      services.presets.remember(saved);
      state.response = { kind: 'json', status: 200, body: { data: presetView(saved) } };
    } catch (err) {
      if (err instanceof StoreConflictError) throw new GatewayError('conflict', `Preset \`${slug}\` was changed by another request at the same time; retry later`);
      throw err;
    }
  };
  // A regular key is refused from the headers (spec 4.3: 403), before its body is read or parsed (a bad body
  // had been its 400, up to 10 MB of it read first).
  return Object.assign(write, { beforeBody: async (ctx: ParameterizedContext) => requireManagementKey((ctx.state as HeaderKeyState).headerKey ?? null) });
}

/** GET /presets: the workspace's presets with their designated versions (this gateway's addition). */
export function presetListStage(services: Services): Stage {
  return async (ctx) => {
    requireManagementKey(ctx.state.gateway.key);
    const list = await services.store.listPresets(ctx.state.gateway.key!.workspaceId);
    ctx.state.gateway.response = { kind: 'json', status: 200, body: { data: list.map(presetView) } };
  };
}

/** GET /presets/{slug} and GET /presets/{slug}/versions (this gateway's additions). */
export function presetReadStage(services: Services, what: 'preset' | 'versions'): Stage {
  return async (ctx) => {
    requireManagementKey(ctx.state.gateway.key);
    const slug = slugOf(ctx);
    const found = await services.store.findPreset(ctx.state.gateway.key!.workspaceId, slug);
    if (!found) throw new GatewayError('not_found', `Preset \`${slug}\` not found`, { metadata: { preset: slug } });
    const body = what === 'preset' ? { data: presetView(found) } : { data: (await services.store.listPresetVersions(found.preset.id)).map(versionView) };
    ctx.state.gateway.response = { kind: 'json', status: 200, body };
  };
}
