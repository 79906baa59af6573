import type { PresetWithVersion } from '../store/types';

/**
 * The request fields a preset keeps (spec 4.3: "only fields that overlap the preset configuration"):
 * generation parameters, tools, reasoning and routing. Never the conversation or the transport: `messages`,
 * `stream`, `prompt`, `metadata`, `user`, `session_id`, … are dropped. `system` becomes `system_prompt`.
 */
export const PRESET_FIELDS: readonly string[] = [
  'model',
  'models',
  'fallbacks',
  'max_tokens',
  'temperature',
  'top_p',
  'top_k',
  'stop_sequences',
  'tools',
  'tool_choice',
  'thinking',
  'output_config',
  'service_tier',
  'speed',
  'provider',
  'plugins',
  'route',
  'transforms',
];

/** Routing fields that mean the same in both API styles (copied as they are into a chat request). */
export const NEUTRAL_FIELDS: readonly string[] = ['model', 'models', 'fallbacks', 'provider', 'plugins', 'route', 'transforms', 'speed'];

/** URL-safe slugs: lowercase letters, digits, `-`, `_`, `.`; 1–64 characters, starting and ending alphanumeric. */
export const SLUG = /^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$/;

/**
 * The preset configuration of a messages request body: its preset fields, `system` as text (the spec's
 * `system_prompt`) and, when `system` is blocks, those blocks as given: their `cache_control` is what the
 * upstream's prompt caching goes by, and the text alone loses it.
 */
export function presetConfigOf(body: Record<string, unknown>): { config: Record<string, unknown>; systemPrompt: string | null; systemBlocks: Record<string, unknown>[] | null } {
  const config: Record<string, unknown> = {};
  for (const f of PRESET_FIELDS) if (body[f] !== undefined) config[f] = body[f];
  const blocks = Array.isArray(body.system) ? textBlocks(body.system) : [];
  const systemPrompt = typeof body.system === 'string' ? body.system || null : blocks.map((b) => b.text).join('\n\n') || null;
  return { config, systemPrompt, systemBlocks: blocks.length > 0 ? blocks : null };
}

/** The text blocks of a `system` with text: empty ones carry no prompt (a system of only those is "only an empty one"). */
function textBlocks(system: unknown[]): (Record<string, unknown> & { text: string })[] {
  return system.filter((b): b is Record<string, unknown> & { text: string } => !!b && typeof b === 'object' && typeof (b as { text?: unknown }).text === 'string' && (b as { text: string }).text !== '');
}

/** The Preset object of spec 2.2, with its designated version. */
export function presetView({ preset, version }: PresetWithVersion): Record<string, unknown> {
  return {
    id: preset.id,
    name: preset.name,
    slug: preset.slug,
    description: preset.description,
    status: preset.status,
    status_updated_at: preset.statusUpdatedAt,
    created_at: preset.createdAt,
    updated_at: preset.updatedAt,
    creator_user_id: preset.creatorUserId,
    workspace_id: preset.workspaceId,
    designated_version_id: preset.designatedVersionId,
    designated_version: versionView(version),
  };
}

export function versionView(v: PresetWithVersion['version']): Record<string, unknown> {
  return {
    id: v.id,
    preset_id: v.presetId,
    version: v.version,
    config: v.config,
    system_prompt: v.systemPrompt,
    creator_id: v.creatorId,
    created_at: v.createdAt,
    updated_at: v.updatedAt,
  };
}
