import { answerParts, requestedJson, type AnswerPart, type RequestedJson } from '../../src/healing/answer';
import { healJson, type HealResult } from '../../src/healing/repair';
import { createSchemaCheck, type SchemaVerdict } from '../../src/healing/schema-check';
import { requestPlugin } from '../../src/pipeline/request-plugins';
import type { GatewayState, PipelineRecord, StageDefinition } from '../../src/pipeline/types';
import schema from './schema.json';

export interface ResponseHealingConfig {
  enabled_by_default: boolean;
  max_bytes: number;
  validate_schema: boolean;
  schema_cache_size: number;
}

/**
 * `response-healing`: a post-stage (put it after `upstream`). For a non-streaming answer to a request that
 * asked for JSON (chat `response_format` json_object / json_schema, messages `output_config.format`
 * json_schema) it repairs the assistant text when it is not valid JSON (src/healing/repair.ts), writes the
 * repaired text back (every choice of a chat answer with `n` > 1), validates it against the requested schema, and records all of it in
 * `gateway_metadata.pipeline` and the request span. Streams pass untouched. A request opts out with
 * `plugins: [{id: 'response-healing', enabled: false}]`.
 */
export const responseHealing: StageDefinition<ResponseHealingConfig> = {
  id: 'response-healing',
  configSchema: schema,
  create(config) {
    const check = createSchemaCheck(config.schema_cache_size);
    return async (ctx, next) => {
      await next();
      const state = ctx.state.gateway;
      const response = state.response;
      if (response?.kind !== 'json' || response.status !== 200) return;
      if (state.endpoint !== 'chat_completions' && state.endpoint !== 'messages') return;
      const asked = requestPlugin(state.body, 'response-healing');
      if (asked?.enabled === false || (!asked && !config.enabled_by_default)) return;
      const requested = requestedJson(state.endpoint, state.body);
      if (!requested) return;
      // A text that goes with a tool call is the model's remark before the call, not the JSON answer: it is left as it is.
      const parts = answerParts(state.endpoint, response.body).filter((p) => !p.callsTools);
      // With chat `n` > 1 every choice is healed alike; each record names its choice so they can be told apart.
      const choices = (response.body as { choices?: unknown } | null)?.choices;
      const several = Array.isArray(choices) && choices.length > 1;
      parts.forEach((part, i) => {
        const where = several ? { choice: part.choice } : {};
        const entry = healPart({ part, requested, config, check });
        record(state, { summary: entry.summary, data: { ...where, ...entry.data } }, i === 0);
      });
    };
  },
};

/** Heals one assistant text in place (when repaired) and says what it did. */
function healPart(input: {
  part: AnswerPart;
  requested: RequestedJson;
  config: ResponseHealingConfig;
  check: ReturnType<typeof createSchemaCheck>;
}): { summary: string; data: Record<string, unknown> } {
  const { part, requested, config, check } = input;
  if (Buffer.byteLength(part.text, 'utf8') > config.max_bytes) {
    return { summary: `answer longer than max_bytes (${config.max_bytes}); not examined`, data: { status: 'skipped', format: requested.format, repairs: [], schema_valid: null, reason: 'max_bytes' } };
  }
  const healed = healJson(part.text, { expect: expected(requested) });
  if (healed.status === 'unrepairable') {
    return {
      summary: `answer is not valid JSON and could not be repaired (${healed.reason}); left as it was`,
      // Not JSON at all, so no schema could be checked: `schema_valid` is null, as for every record not checked.
      data: { status: 'unrepairable', format: requested.format, repairs: healed.repairs, schema_valid: null, reason: healed.reason },
    };
  }
  if (healed.status === 'repaired') part.write(healed.text);
  const verdict = verdictOf(requested, healed, config.validate_schema, check);
  return { summary: summaryOf(healed, verdict), data: { status: healed.status, format: requested.format, repairs: healed.repairs, ...verdictData(verdict) } };
}

/** json_object promises an object, and a schema whose top level is an object or array says which opener to look for. */
function expected(requested: RequestedJson): 'object' | 'array' | 'any' {
  if (requested.format === 'json_object') return 'object';
  const type = requested.schema?.type;
  return type === 'object' || type === 'array' ? type : 'any';
}

type Verdict = SchemaVerdict;

function verdictOf(
  requested: RequestedJson,
  healed: Exclude<HealResult, { status: 'unrepairable' }>,
  enabled: boolean,
  check: ReturnType<typeof createSchemaCheck>,
): Verdict {
  if (requested.format === 'json_object') {
    const isObject = !!healed.value && typeof healed.value === 'object' && !Array.isArray(healed.value);
    return isObject ? { valid: true } : { valid: false, errors: [{ path: '/', message: 'json_object asks for a JSON object' }] };
  }
  if (!requested.schema) return { valid: 'not_checked', reason: 'the request named no schema' };
  if (!enabled) return { valid: 'not_checked', reason: 'validate_schema is off' };
  return check(requested.schema, healed.value);
}

function verdictData(v: Verdict): Record<string, unknown> {
  if (v.valid === true) return { schema_valid: true };
  if (v.valid === false) return { schema_valid: false, validation_errors: v.errors };
  if (v.valid === null) return { schema_valid: null, schema_error: v.schemaError };
  return { schema_valid: null, reason: v.reason };
}

function summaryOf(healed: Exclude<HealResult, { status: 'unrepairable' }>, v: Verdict): string {
  const what = healed.status === 'valid' ? 'answer was valid JSON' : `repaired the JSON answer (${healed.repairs.join(', ')})`;
  const schemaPart =
    v.valid === true ? 'it matches the requested format'
    : v.valid === false ? `it does not match the requested schema (${v.errors.length} error(s))`
    : v.valid === null ? 'the requested schema could not be compiled, so it was not checked'
    : 'no schema check';
  return `${what}; ${schemaPart}`;
}

/** Adds the record; the span's attributes are the first choice's (one set per request span). */
function record(state: GatewayState, r: { summary: string; data: Record<string, unknown> }, onSpan: boolean): void {
  const entry: PipelineRecord = { type: 'response-healing', name: 'response-healing', summary: r.summary, data: r.data };
  state.pipeline.push(entry);
  if (!onSpan) return;
  const data = r.data;
  state.span.setAttribute('gateway.healing.status', String(data.status));
  if (Array.isArray(data.repairs)) state.span.setAttribute('gateway.healing.repairs', (data.repairs as string[]).join(','));
  if (typeof data.schema_valid === 'boolean') state.span.setAttribute('gateway.healing.schema_valid', data.schema_valid);
}
