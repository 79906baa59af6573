import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import Ajv from 'ajv';
import { describe, it, expect } from 'vitest';
import { STAGES, registry } from '../../plugins/index';
import type { StageDefinition } from '../../src/pipeline/types';

const ROOT = path.resolve(__dirname, '../..');
const PLUGINS = path.join(ROOT, 'plugins');

/** Folders under plugins/ that hold a plugin (an index.ts). */
function pluginFolders(): string[] {
  return readdirSync(PLUGINS)
    .filter((name) => statSync(path.join(PLUGINS, name)).isDirectory())
    .filter((name) => existsSync(path.join(PLUGINS, name, 'index.ts')))
    .sort();
}

function readSchema(folder: string): Record<string, any> {
  return JSON.parse(readFileSync(path.join(PLUGINS, folder, 'schema.json'), 'utf8'));
}

/** The StageDefinition a plugin folder's index.ts exports. */
async function definitionOf(folder: string): Promise<StageDefinition> {
  const mod = (await import(path.join(PLUGINS, folder, 'index.ts'))) as Record<string, unknown>;
  const defs = Object.values(mod).filter(
    (v): v is StageDefinition => !!v && typeof v === 'object' && typeof (v as StageDefinition).create === 'function' && typeof (v as StageDefinition).id === 'string',
  );
  expect(defs, `plugins/${folder}/index.ts should export exactly one stage definition`).toHaveLength(1);
  return defs[0];
}

/** Module specifiers a TS file imports, re-exports, requires or dynamically imports. */
function importSpecifiers(source: string): string[] {
  const out: string[] = [];
  const re = /(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm;
  for (const m of source.matchAll(re)) out.push(m[1]);
  return out;
}

/** Relative imports of `file` that land in plugins/ or src/providers/. */
function forbiddenImports(file: string, source: string): string[] {
  return importSpecifiers(source).filter((spec) => {
    if (!spec.startsWith('.')) return /^(plugins|src\/providers)(\/|$)/.test(spec);
    const rel = path.relative(ROOT, path.resolve(path.dirname(file), spec)).split(path.sep).join('/');
    return /^(plugins|src\/providers)(\/|$)/.test(rel);
  });
}

function tsFilesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) out.push(...tsFilesUnder(full));
    else if (/\.(c|m)?tsx?$/.test(name)) out.push(full);
  }
  return out;
}

describe('plugin registry (plugins/index.ts)', () => {
  it('lists every plugin folder, and only those', () => {
    const folders = pluginFolders();
    expect(folders.length).toBeGreaterThan(0);
    expect(STAGES.map((s) => s.id).sort()).toEqual(folders);
  });

  it('each folder exports the definition that STAGES holds, with the folder name as id', async () => {
    for (const folder of pluginFolders()) {
      const def = await definitionOf(folder);
      expect(def.id).toBe(folder);
      expect(STAGES).toContain(def);
      expect(registry.get(folder)).toBe(def);
    }
  });

  it('has unique ids and a registry entry for each', () => {
    const ids = STAGES.map((s) => s.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(registry.size).toBe(STAGES.length);
    for (const s of STAGES) expect(registry.get(s.id)).toBe(s);
  });
});

describe('plugin config schemas', () => {
  for (const folder of pluginFolders()) {
    describe(folder, () => {
      it('has a schema.json that is the definition configSchema', async () => {
        const def = await definitionOf(folder);
        expect(def.configSchema).toEqual(readSchema(folder));
      });

      it('compiles with ajv (strict) and is a closed object schema', () => {
        const schema = readSchema(folder);
        const ajv = new Ajv({ strict: true, useDefaults: true, allErrors: true });
        expect(() => ajv.compile(schema)).not.toThrow();
        expect(schema.type).toBe('object');
        expect(schema.additionalProperties).toBe(false);
      });

      it('accepts {} and fills every declared default', () => {
        const schema = readSchema(folder);
        const validate = new Ajv({ strict: false, useDefaults: true }).compile(schema);
        const value: Record<string, unknown> = {};
        expect(validate(value), JSON.stringify(validate.errors)).toBe(true);
        const expected: Record<string, unknown> = {};
        for (const [key, prop] of Object.entries<Record<string, unknown>>(schema.properties ?? {})) {
          if ('default' in prop) expected[key] = prop.default;
        }
        expect(value).toEqual(expected);
      });

      it('rejects an unknown field', () => {
        const validate = new Ajv({ strict: false, useDefaults: true }).compile(readSchema(folder));
        expect(validate({ no_such_field_xyz: 1 })).toBe(false);
      });
    });
  }
});

describe('core does not import plugins or providers', () => {
  it('the import scanner sees real imports and flags a forbidden one', () => {
    const build = path.join(ROOT, 'src/pipeline/build.ts');
    expect(importSpecifiers(readFileSync(build, 'utf8'))).toEqual(expect.arrayContaining(['koa-compose', './types']));
    const fake = "import { auth } from '../../plugins/auth';\nimport {\n  x,\n} from '../providers/sse';\nconst y = require('../types');\n";
    expect(forbiddenImports(build, fake)).toEqual(['../../plugins/auth', '../providers/sse']);
  });

  it('src/pipeline/** imports nothing from plugins/ or src/providers/', () => {
    const files = tsFilesUnder(path.join(ROOT, 'src/pipeline'));
    expect(files.length).toBeGreaterThan(0);
    for (const file of files) {
      expect(forbiddenImports(file, readFileSync(file, 'utf8')), path.relative(ROOT, file)).toEqual([]);
    }
  });
});
