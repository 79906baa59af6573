import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv';
import { readFileSync } from 'node:fs';
import { findPackageFile } from '../config/package-root';
import { GatewayError } from '../errors/gateway-error';

/** A POST /videos body that passed validation. */
export interface VideoRequest {
  model: string;
  prompt: string;
  previousJobId: string | null;
  /** Everything else of the body (with `duration_seconds` filled in), passed on to the provider. */
  params: Record<string, unknown>;
}

/** Fields the gateway reads itself and never passes upstream. */
const OWN_FIELDS = new Set(['model', 'prompt', 'previous_job_id', 'trace']);

let compiled: ValidateFunction | undefined;

/** schemas/videos.schema.json, compiled once per process. */
function validator(): ValidateFunction {
  compiled ??= new Ajv({ allErrors: false, strict: false }).compile(JSON.parse(readFileSync(findPackageFile('schemas/videos.schema.json'), 'utf8')));
  return compiled;
}

/**
 * Validates a POST /videos body against its schema and the configured duration bounds; a violation is a 400
 * `invalid_request` naming the field in `metadata.field`.
 *
 * @example const req = parseVideoRequest(body, { default_duration_seconds: 5, max_duration_seconds: 60 });
 */
export function parseVideoRequest(body: unknown, limits: { default_duration_seconds: number; max_duration_seconds: number }): VideoRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalid('body', 'The request body must be a JSON object');
  const validate = validator();
  if (!validate(body)) throw explain(validate.errors ?? []);
  const b = body as Record<string, unknown>;
  const duration = b.duration_seconds === undefined ? limits.default_duration_seconds : Number(b.duration_seconds);
  if (duration > limits.max_duration_seconds) {
    throw invalid('duration_seconds', `\`duration_seconds\` must be at most ${limits.max_duration_seconds}`);
  }
  const params: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(b)) if (!OWN_FIELDS.has(k)) params[k] = v;
  params.duration_seconds = duration;
  // Every job is stored with its request and read again by each poll round until it ends: 330 jobs with a 9.5 MB
  // extra field each ran the process out of memory, at every restart (found by a security audit).
  if (JSON.stringify(params).length > MAX_PARAMS_CHARS) {
    throw invalid('body', `The fields other than \`model\`, \`prompt\` and \`previous_job_id\` may hold at most ${MAX_PARAMS_CHARS} characters of JSON in all`);
  }
  return { model: String(b.model), prompt: String(b.prompt), previousJobId: typeof b.previous_job_id === 'string' ? b.previous_job_id : null, params };
}

/** The most JSON the provider parameters of one job may take (resolution, seed, negative prompt, a provider's own fields). */
export const MAX_PARAMS_CHARS = 40_000;

function invalid(field: string, message: string): GatewayError {
  return new GatewayError('invalid_request', message, { metadata: { field } });
}

function explain(errors: ErrorObject[]): GatewayError {
  const e = errors[errors.length - 1];
  if (!e) return invalid('body', 'The request body is invalid');
  const field = e.keyword === 'required' ? String(e.params.missingProperty) : e.instancePath.slice(1).replace(/\//g, '.') || 'body';
  const name = `\`${field}\``;
  switch (e.keyword) {
    case 'required':
      return invalid(field, `${name} is required`);
    case 'type':
      return invalid(field, `${name} must be ${/^[aeiou]/.test(String(e.params.type)) ? 'an' : 'a'} ${String(e.params.type)}`);
    case 'minLength':
      return invalid(field, `${name} must not be empty`);
    case 'maxLength':
      return invalid(field, `${name} must be at most ${String(e.params.limit)} characters`);
    case 'exclusiveMinimum':
      return invalid(field, `${name} must be greater than ${String(e.params.limit)}`);
    default:
      return invalid(field, `${name} ${e.message ?? 'is invalid'}`);
  }
}
