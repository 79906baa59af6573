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

/** The preset configuration of a messages request body: its preset fields, and `system` as text. */
export function presetConfigOf(body: Record<string, unknown>): { config: Record<string, unknown>; systemPrompt: string | null } {
  const config: Record<string, unknown> = {};
  for (const f of PRESET_FIELDS) if (body[f] !== undefined) config[f] = body[f];
  return { config, systemPrompt: systemText(body.system) };
}

/** `system` as one string: a string as is, text blocks joined by blank lines; null when absent or empty. */
function systemText(system: unknown): string | null {
  if (typeof system === 'string') return system || null;
  if (!Array.isArray(system)) return null;
  // Empty text blocks carry no prompt: a system of only those is "only an empty one" (null).
  const texts = system.flatMap((b) => (b && typeof b === 'object' && typeof (b as { text?: unknown }).text === 'string' && (b as { text: string }).text ? [(b as { text: string }).text] : []));
  return texts.length > 0 ? texts.join('\n\n') : null;
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
