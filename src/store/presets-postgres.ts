import { randomUUID } from 'node:crypto';
import type { PoolClient } from 'pg';
import { rowToPresetVersion } from './rows';
import { blocksText, joinedPreset, PRESET_QUERIES } from './presets-sqlite';
import { StoreConflictError, type NewPresetVersion, type PresetVersionRecord, type PresetWithVersion } from './types';

/**
 * Presets on PostgreSQL. A version is written in one transaction that reads the next version number and
 * inserts it; two concurrent writers read the same number, and the unique (preset_id, version) index makes
 * the later one fail (it waits for the first to commit): that writer gets StoreConflictError (HTTP 409,
 * retry later), never a duplicate. The same holds for two writers creating a new slug.
 */
export async function savePresetVersionPg(
  transaction: <T>(fn: (client: PoolClient) => Promise<T>) => Promise<T>,
  input: NewPresetVersion,
): Promise<PresetWithVersion> {
  try {
    return await transaction(async (c) => {
      const now = Date.now();
      const versionId = randomUUID();
      let presetId = (await c.query('SELECT id FROM presets WHERE workspace_id = $1 AND slug = $2', [input.workspaceId, input.slug])).rows[0]?.id as string | undefined;
      if (!presetId) {
        presetId = randomUUID();
        await c.query(
          `INSERT INTO presets (id, workspace_id, slug, name, description, status, status_updated_at, creator_user_id,
             designated_version_id, created_at, updated_at) VALUES ($1, $2, $3, $3, NULL, 'active', $4, $5, $6, $4, $4)`,
          [presetId, input.workspaceId, input.slug, now, input.creatorUserId, versionId],
        );
      }
      const next = Number((await c.query('SELECT COALESCE(MAX(version), 0) + 1 AS n FROM preset_versions WHERE preset_id = $1', [presetId])).rows[0].n);
      await c.query(
        `INSERT INTO preset_versions (id, preset_id, version, config, system_prompt, system_blocks, creator_id, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)`,
        [versionId, presetId, next, JSON.stringify(input.config), input.systemPrompt, blocksText(input), input.creatorUserId, now],
      );
      await c.query('UPDATE presets SET designated_version_id = $1, updated_at = $2 WHERE id = $3', [versionId, now, presetId]);
      // Read inside the transaction: it holds the preset row's lock, so this is the version just written.
      // Read after the commit, a concurrent writer's newer version could be returned instead (two callers
      // were then told the same version number).
      return (await findPresetPg((sql, params) => c.query(sql, params), input.workspaceId, input.slug))!;
    });
  } catch (err) {
    if ((err as { code?: string }).code === '23505') throw new StoreConflictError(`preset ${input.slug} was written concurrently`);
    throw err;
  }
}

/** A query: pooled, or on a transaction's client. */
export type Query = (sql: string, params: unknown[]) => Promise<{ rows: Record<string, unknown>[] }>;

export async function findPresetPg(query: Query, workspaceId: string, slug: string): Promise<PresetWithVersion | null> {
  const row = (await query(PRESET_QUERIES.find, [workspaceId, slug])).rows[0];
  return row ? joinedPreset(row) : null;
}

export async function listPresetsPg(query: Query, workspaceId: string): Promise<PresetWithVersion[]> {
  return (await query(PRESET_QUERIES.listPg, [workspaceId])).rows.map(joinedPreset);
}

export async function listPresetVersionsPg(query: Query, presetId: string): Promise<PresetVersionRecord[]> {
  return (await query(PRESET_QUERIES.versions, [presetId])).rows.map(rowToPresetVersion);
}
