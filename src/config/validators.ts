import Ajv, { type ValidateFunction } from 'ajv';
import { readFileSync } from 'node:fs';
import { LRUCache } from 'lru-cache';
import { findPackageFile } from './package-root';
import type { GatewayConfig } from './types';

/** The compiled validators of gateway.yaml for one set of stage ids: the file's schema, and each stage's section. */
export interface ConfigValidators {
  config: ValidateFunction<GatewayConfig>;
  /** The validator of a stage's `configSchema` (compiled at its first use, then kept). */
  stage(schema: object): ValidateFunction;
}

// A process sees one registry, or a few in tests: the key is its stage ids, in order (the schema's `stageId` enum).
// Held weakly: the compiled code is ~1 MiB of heap that a serving gateway would otherwise keep for good (its
// start-up GC frees it, README Performance), while loads close together (a test suite's many gateways, a burst
// of reloads, a CLI command's one load) reuse it.
const made = new LRUCache<string, WeakRef<ConfigValidators>>({ max: 8 });

/**
 * The config validators for the stage ids `stageIds`, compiled once and reused while the heap keeps them.
 * Compiling the file's schema took ~150–300 ms of CPU on this project's machine (over a second on a loaded
 * one) at every load: every test gateway's start, and a burst of reloads (traffic waits for each). The
 * validators keep no state between calls but `errors`, read right after each call.
 *
 * @example configValidators([...registry.keys()]).config(raw)
 */
export function configValidators(stageIds: readonly string[]): ConfigValidators {
  const key = stageIds.join('\n');
  let v = made.get(key)?.deref();
  if (v) return v;
  const schema = JSON.parse(readFileSync(findPackageFile('schemas/gateway.schema.json'), 'utf8'));
  schema.definitions.stageId.enum = [...stageIds];
  // coerceTypes: `port: ${PORT:-8080}` interpolates to a string; the schema's type turns it back into a number.
  const ajv = new Ajv({ useDefaults: true, allErrors: true, strict: false, coerceTypes: true, discriminator: true, verbose: true });
  const stages = new WeakMap<object, ValidateFunction>();
  v = {
    config: ajv.compile<GatewayConfig>(schema),
    stage(stageSchema) {
      let check = stages.get(stageSchema);
      if (!check) stages.set(stageSchema, (check = ajv.compile(stageSchema)));
      return check;
    },
  };
  made.set(key, new WeakRef(v));
  return v;
}
