import Ajv, { type ValidateFunction } from 'ajv';
import Ajv2020 from 'ajv/dist/2020';
import { LRUCache } from 'lru-cache';

/** One schema violation, as recorded in the pipeline metadata (`path` is a JSON pointer into the answer). */
export interface SchemaViolation {
  path: string;
  message: string;
}

export type SchemaVerdict =
  | { valid: true }
  | { valid: false; errors: SchemaViolation[] }
  /** The request's schema itself could not be compiled: nothing was checked. */
  | { valid: null; schemaError: string };

const MAX_ERRORS = 10;

/**
 * Validates answers against the JSON Schemas clients send, compiling each distinct schema once (keyed by its
 * JSON text) and keeping at most `size` compiled validators. Schemas naming draft 2020-12 get the 2020 dialect;
 * the rest draft-07. `strict: false` because client schemas carry keywords ajv does not know (`strict`,
 * `name`, vendor extensions) and those must not make the check fail.
 *
 * @example const check = createSchemaCheck(100); check({type: 'object', required: ['a']}, {}) // {valid: false, errors: […]}
 */
export function createSchemaCheck(size: number): (schema: Record<string, unknown>, value: unknown) => SchemaVerdict {
  const options = { strict: false, allErrors: true, validateFormats: false } as const;
  const draft7 = new Ajv(options);
  const draft2020 = new Ajv2020(options);
  const cache = new LRUCache<string, ValidateFunction | { error: string }>({ max: size });
  return (schema, value) => {
    const key = JSON.stringify(schema);
    let compiled = cache.get(key);
    if (!compiled) {
      compiled = compile(schema, String(schema.$schema ?? '').includes('2020-12') ? draft2020 : draft7);
      cache.set(key, compiled);
    }
    if ('error' in compiled) return { valid: null, schemaError: compiled.error };
    if (compiled(value)) return { valid: true };
    const errors = (compiled.errors ?? []).slice(0, MAX_ERRORS).map((e) => ({ path: e.instancePath || '/', message: e.message ?? e.keyword }));
    return { valid: false, errors };
  };
}

function compile(schema: Record<string, unknown>, ajv: Ajv | Ajv2020): ValidateFunction | { error: string } {
  // Why: ajv keeps every schema with an `$id` in its registry and refuses a second one with the same id;
  // client schemas are anonymous to us, so the top-level id and meta-schema pointer are dropped.
  const { $id: _id, $schema: _meta, ...anonymous } = schema;
  try {
    return ajv.compile(anonymous);
  } catch (err) {
    return { error: (err as Error).message };
  }
}
