import type Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { rowToPreset, rowToPresetVersion } from './rows';
import { StoreConflictError, type NewPresetVersion, type PresetVersionRecord, type PresetWithVersion } from './types';

type Row = Record<string, unknown>;

const WITH_VERSION = `SELECT p.*, v.id AS v_id, v.preset_id AS v_preset_id, v.version AS v_version, v.config AS v_config,
  v.system_prompt AS v_system_prompt, v.system_blocks AS v_system_blocks, v.creator_id AS v_creator_id, v.created_at AS v_created_at, v.updated_at AS v_updated_at
  FROM presets p JOIN preset_versions v ON v.id = p.designated_version_id`;

/** A joined row (preset columns, designated version columns prefixed `v_`) as records. */
export function joinedPreset(r: Row): PresetWithVersion {
  const v: Row = {};
  for (const [k, val] of Object.entries(r)) if (k.startsWith('v_')) v[k.slice(2)] = val;
  return { preset: rowToPreset(r), version: rowToPresetVersion(v) };
}

/** The `system_blocks` column of a new version: JSON text, or null. */
export const blocksText = (input: NewPresetVersion): string | null => (input.systemBlocks ? JSON.stringify(input.systemBlocks) : null);

export const PRESET_QUERIES = {
  find: `${WITH_VERSION} WHERE p.workspace_id = $1 AND p.slug = $2`,
  list: `${WITH_VERSION} WHERE p.workspace_id = $1 ORDER BY p.slug`,
  // SQLite orders text by its bytes; PostgreSQL by the database's collation (en_US puts `a_b` before `a-b`
  // and `a` before `B`) unless told "C", its byte order: so both engines list alike.
  listPg: `${WITH_VERSION} WHERE p.workspace_id = $1 ORDER BY p.slug COLLATE "C"`,
  versions: 'SELECT * FROM preset_versions WHERE preset_id = $1 ORDER BY version DESC',
};

/**
 * Presets on SQLite. A version is written in an IMMEDIATE transaction (the write lock first), so writers
 * in this and other processes on the same file queue up instead of racing: every write gets its own
 * version number. The unique constraints still back that up.
 */
export function sqlitePresets(db: Database.Database) {
  const bind = (...values: unknown[]) => Object.fromEntries(values.map((v, i) => [i + 1, v]));
  const s = {
    find: db.prepare(PRESET_QUERIES.find),
    list: db.prepare(PRESET_QUERIES.list),
    versions: db.prepare(PRESET_QUERIES.versions),
    bySlug: db.prepare('SELECT id FROM presets WHERE workspace_id = ? AND slug = ?').pluck(),
    nextVersion: db.prepare('SELECT COALESCE(MAX(version), 0) + 1 FROM preset_versions WHERE preset_id = ?').pluck(),
    insertPreset: db.prepare(
      `INSERT INTO presets (id, workspace_id, slug, name, description, status, status_updated_at, creator_user_id,
         designated_version_id, created_at, updated_at) VALUES (?, ?, ?, ?, NULL, 'active', ?, ?, ?, ?, ?)`,
    ),
    insertVersion: db.prepare(
      `INSERT INTO preset_versions (id, preset_id, version, config, system_prompt, system_blocks, creator_id, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ),
    designate: db.prepare('UPDATE presets SET designated_version_id = ?, updated_at = ? WHERE id = ?'),
  };
  const save = db.transaction((input: NewPresetVersion): PresetWithVersion => {
    const now = Date.now();
    const versionId = randomUUID();
    let presetId = s.bySlug.get(input.workspaceId, input.slug) as string | undefined;
    if (!presetId) {
      presetId = randomUUID();
      s.insertPreset.run(presetId, input.workspaceId, input.slug, input.slug, now, input.creatorUserId, versionId, now, now);
    }
    const version = Number(s.nextVersion.get(presetId));
    s.insertVersion.run(versionId, presetId, version, JSON.stringify(input.config), input.systemPrompt, blocksText(input), input.creatorUserId, now, now);
    s.designate.run(versionId, now, presetId);
    // Read before the commit: after it, another process writing the same slug could come in between.
    return joinedPreset(s.find.get(bind(input.workspaceId, input.slug)) as Row);
  });
  return {
    save(input: NewPresetVersion): PresetWithVersion {
      try {
        return save.immediate(input);
      } catch (err) {
        if ((err as { code?: string }).code?.startsWith('SQLITE_CONSTRAINT')) throw new StoreConflictError(`preset ${input.slug} was written concurrently`);
        throw err;
      }
    },
    find(workspaceId: string, slug: string): PresetWithVersion | null {
      const row = s.find.get(bind(workspaceId, slug)) as Row | undefined;
      return row ? joinedPreset(row) : null;
    },
    list(workspaceId: string): PresetWithVersion[] {
      return (s.list.all(bind(workspaceId)) as Row[]).map(joinedPreset);
    },
    versions(presetId: string): PresetVersionRecord[] {
      return (s.versions.all(bind(presetId)) as Row[]).map(rowToPresetVersion);
    },
  };
}
