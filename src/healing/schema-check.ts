import Ajv, { type ValidateFunction } from 'ajv';
import Ajv2020 from 'ajv/dist/2020';
import { LRUCache } from 'lru-cache';
import { linearRegExpFallback } from '../regexp-fallback';
import { linearUniqueItems, withJsonIds } from './unique-items';

/** One schema violation, as recorded in the pipeline metadata (`path` is a JSON pointer into the answer). */
export interface SchemaViolation {
  path: string;
  message: string;
}

export type SchemaVerdict =
  | { valid: true }
  | { valid: false; errors: SchemaViolation[] }
  /** The request's schema itself could not be compiled: nothing was checked. */
  | { valid: null; schemaError: string }
  /** The answer could not be checked (nested deeper than the validator's recursion reaches). */
  | { valid: 'not_checked'; reason: string };

const MAX_ERRORS = 10;

/**
 * The largest schema (its JSON text) an answer is checked against: compiling costs ~0.5 ms per property on the
 * event loop (a 478 KB schema of 10 000 properties took 5.4 s), and the schema is the client's.
 */
export const MAX_SCHEMA_CHARS = 32 * 1024;

/**
 * ajv's `pattern` engine: a client's pattern compiled without the `u` flag where it can be, so V8's linear
 * engine takes over if it backtracks too long (`linearRegExpFallback`: `^(a+)+$` on 30 characters took
 * 4.6 s). A pattern that needs Unicode mode (`\p{…}`) cannot have that fallback and is not enforced.
 */
function patternEngine(pattern: string, flags: string): { test(s: string): boolean } {
  // Without Unicode mode `\p{L}` would be read as the letters "p{L}", and astral characters as two halves.
  if (/\\[pPu]\{|[\uD800-\uDFFF]/.test(pattern)) return NOT_ENFORCED;
  try {
    return new RegExp(pattern, flags.replace('u', ''));
  } catch {
    return NOT_ENFORCED;
  }
}

// ajv's engine type names its code for standalone validators, which the gateway does not generate.
patternEngine.code = 'patternEngine';

const NOT_ENFORCED = { test: () => true };

/**
 * Validates answers against the JSON Schemas clients send, compiling each distinct schema once (keyed by its
 * JSON text) and keeping at most `size` compiled validators. Schemas naming draft 2020-12 get the 2020 dialect;
 * the rest draft-07. `uniqueItems` is checked in linear time (`linearUniqueItems`). `strict: false` because client schemas carry keywords ajv does not know (`strict`,
 * `name`, vendor extensions) and those must not make the check fail.
 *
 * @example const check = createSchemaCheck(100); check({type: 'object', required: ['a']}, {}) // {valid: false, errors: […]}
 */
export function createSchemaCheck(size: number): (schema: Record<string, unknown>, value: unknown) => SchemaVerdict {
  linearRegExpFallback();
  const options = { strict: false, allErrors: true, validateFormats: false, code: { regExp: patternEngine } } as const;
  const draft7 = ajvPool(() => linearUniqueItems(new Ajv(options)), size);
  const draft2020 = ajvPool(() => linearUniqueItems(new Ajv2020(options)), size);
  const cache = new LRUCache<string, Compiled>({ max: size });
  return (schema, value) => {
    const key = JSON.stringify(schema);
    if (key.length > MAX_SCHEMA_CHARS) return { valid: 'not_checked', reason: `the schema is over ${MAX_SCHEMA_CHARS / 1024} KB` };
    let compiled = cache.get(key);
    if (!compiled) {
      compiled = compile(schema, (String(schema.$schema ?? '').includes('2020-12') ? draft2020 : draft7)());
      cache.set(key, compiled);
    }
    const validate = compiled.validate;
    if (!validate) return { valid: null, schemaError: compiled.error! };
    try {
      if (withJsonIds(() => validate(value))) return { valid: true };
    } catch (err) {
      // A recursive schema ({"items": {"$ref": "#"}}) walks the answer as deep as it goes: an answer nested
      // thousands deep overflows the stack. That answer is left unchecked, never a failed request.
      if (err instanceof RangeError) return { valid: 'not_checked', reason: 'the answer is nested too deeply to check against the schema' };
      throw err;
    }
    const errors = (validate.errors ?? []).slice(0, MAX_ERRORS).map((e) => ({ path: e.instancePath || '/', message: e.message ?? e.keyword }));
    return { valid: false, errors };
  };
}

/** A compiled schema, or why it did not compile. */
interface Compiled {
  validate?: ValidateFunction;
  error?: string;
}

/**
 * The Ajv instance to compile the next schema with. An Ajv instance keeps the code of every schema it ever
 * compiled (its scope's values; `removeSchema` does not free them), so one instance would hold every distinct
 * schema clients ever sent: ~4 KB each, without bound. Each instance compiles at most `max(size, 64)` schemas,
 * then a fresh one takes over; a retired instance is garbage once the LRU has evicted its validators, so at most
 * about `size + 2 × that` compiled schemas are alive at once.
 */
export function ajvPool<T extends Ajv>(make: () => T, size: number): () => T {
  const limit = Math.max(size, 64);
  let current = make();
  let compiled = 0;
  return () => {
    if (compiled++ >= limit) {
      current = make();
      compiled = 1;
    }
    return current;
  };
}

function compile(schema: Record<string, unknown>, ajv: Ajv | Ajv2020): Compiled {
  // Why: ajv keeps every schema with an `$id` in its registry and refuses a second one with the same id;
  // client schemas are anonymous to us, so the top-level id and meta-schema pointer are dropped.
  const { $id: _id, $schema: _meta, ...anonymous } = schema;
  try {
    return { validate: ajv.compile(anonymous) };
  } catch (err) {
    return { error: (err as Error).message };
  }
}
