import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv';
import { existsSync, readFileSync } from 'fs';
import { dirname, join } from 'path';
import { requestedModels } from '../routing/candidates';
import { textHead } from '../text-cut';

export type RequestKind = 'messages' | 'chat_completions';

/** field: the offending field as a path like `temperature`, `messages[0].role`, `fallbacks[1].max_tokens`. */
export interface ValidationProblem {
  field: string;
  message: string;
}

export interface RequestValidator {
  (body: unknown): ValidationProblem | null;
  /** The top-level fields for which null means "not given" (see `dropNullFields`). */
  readonly nullable: readonly string[];
}

type JsonObject = Record<string, unknown>;

const SCHEMA_FILES: Record<RequestKind, string> = {
  messages: 'messages.schema.json',
  chat_completions: 'chat-completions.schema.json',
};

const KINDS = Object.keys(SCHEMA_FILES) as RequestKind[];

/** Spec 8.1: `session_id` is at most 256 characters; the `x-session-id` header is the same key, so the same bound. */
const MAX_SESSION_ID = 256;

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

const TYPE_NAMES: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  integer: 'an integer',
  boolean: 'a boolean',
  object: 'an object',
  array: 'an array',
  null: 'null',
};

/**
 * Compiles the request-body schemas of spec 4.1 (`POST /messages`) and 4.2 (`POST /chat/completions`) once,
 * and returns one validator per endpoint kind. A validator returns `null` for a valid body, or the first
 * problem found, worded for an API client.
 *
 * @example
 * const validators = compileRequestValidators();
 * const problem = validators.chat_completions(body);
 * if (problem) throw new GatewayError({ status: 400, errorType: 'invalid_request', message: problem.message });
 */
export function compileRequestValidators(schemaDir: string = findSchemaDir(__dirname)): Record<RequestKind, RequestValidator> {
  // verbose: error objects then carry `data`, `schema` and `parentSchema`, which the messages below need.
  // It only changes the code that runs after a failure.
  const ajv = new Ajv({ allErrors: false, verbose: true, allowUnionTypes: true });
  const schemas = {} as Record<RequestKind, JsonObject>;
  // messages.schema.json takes shared definitions (`provider`, `plugins`) from chat-completions.schema.json by `$ref`:
  // both are added before either compiles.
  for (const kind of KINDS) {
    schemas[kind] = JSON.parse(readFileSync(join(schemaDir, SCHEMA_FILES[kind]), 'utf8')) as JsonObject;
    ajv.addSchema(schemas[kind], SCHEMA_FILES[kind]);
  }
  const conditions = new WeakMap<object, JsonObject>();
  for (const kind of KINDS) collectConditions(schemas[kind], conditions);
  const make = (kind: RequestKind, ...codeChecks: CodeCheck[]): RequestValidator =>
    makeValidator({ validate: ajv.getSchema(SCHEMA_FILES[kind])!, conditions, codeChecks, nullable: nullableFields(schemas[kind]) });
  return {
    messages: make('messages', checkModelNamed),
    chat_completions: make('chat_completions', checkModelNamed, checkReasoningEffort),
  };
}

/**
 * Deletes the top-level fields that are null where the endpoint's schema admits null: OpenAI's nullable chat
 * parameters (`"temperature": null` is "not given") and the `|null` fields of spec 4.1. Every later reader
 * (presets, routing, the spend estimate, the stream decision, the provider call) then sees the field absent,
 * so none of them has to treat null on its own. Other fields are left for the validator to judge.
 *
 * @example
 * dropNullFields(body, validators.chat_completions.nullable); // {temperature: null, top_p: 1} → {top_p: 1}
 */
export function dropNullFields(body: unknown, nullable: readonly string[]): void {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return;
  const fields = body as JsonObject;
  // The body's own few fields, not the list of nullable ones: this runs on every request.
  for (const name in fields) if (fields[name] === null && nullable.includes(name)) delete fields[name];
}

/** The `x-session-id` header is the sticky-routing key when the body has no `session_id`: the same bound (spec 8.1). */
export function checkSessionHeader(value: string): ValidationProblem | null {
  if (value.length <= MAX_SESSION_ID) return null;
  return { field: 'x-session-id', message: `\`x-session-id\` must NOT be longer than ${MAX_SESSION_ID} characters` };
}

/** Walks up from `start` to the folder holding `schemas/`: the same code runs from `plugins/` and `dist/plugins/`. */
function findSchemaDir(start: string): string {
  for (let dir = start; ; dir = dirname(dir)) {
    const candidate = join(dir, 'schemas');
    if (existsSync(join(candidate, SCHEMA_FILES.messages))) return candidate;
    if (dirname(dir) === dir) throw new Error(`no schemas/${SCHEMA_FILES.messages} found above ${start}`);
  }
}

type CodeCheck = (body: JsonObject) => ValidationProblem | null;

interface ValidatorParts {
  validate: ValidateFunction;
  conditions: WeakMap<object, JsonObject>;
  /** Run in order after the schema passed; the first problem wins. */
  codeChecks: CodeCheck[];
  nullable: string[];
}

function makeValidator({ validate, conditions, codeChecks, nullable }: ValidatorParts): RequestValidator {
  const validator = (body: unknown): ValidationProblem | null => {
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      return { field: 'body', message: `the request body must be a JSON object (got ${describeValue(body)})` };
    }
    if (!validate(body)) return explain(validate.errors ?? [], body, conditions);
    for (const check of codeChecks) {
      const problem = check(body as JsonObject);
      if (problem) return problem;
    }
    return null;
  };
  return Object.assign(validator, { nullable });
}

/** The top-level properties whose schema (or the local definition it refers to) admits null. */
function nullableFields(schema: JsonObject): string[] {
  const properties = (schema.properties ?? {}) as Record<string, JsonObject>;
  const definitions = (schema.definitions ?? {}) as Record<string, JsonObject>;
  const LOCAL = '#/definitions/';
  const resolve = (s: JsonObject): JsonObject =>
    typeof s.$ref === 'string' && s.$ref.startsWith(LOCAL) ? (definitions[s.$ref.slice(LOCAL.length)] ?? {}) : s;
  return Object.keys(properties).filter((name) => {
    const s = resolve(properties[name]);
    return s.type === 'null' || (Array.isArray(s.type) && s.type.includes('null')) || (Array.isArray(s.enum) && s.enum.includes(null));
  });
}

/**
 * The request must name a model to route to (as routing reads `model`, `models` and `fallbacks`): an empty
 * `model` and an empty `models` name none, which routing would report as a 404 for the model "".
 */
function checkModelNamed(body: JsonObject): ValidationProblem | null {
  if (requestedModels(body).length > 0) return null;
  if (body.model !== undefined) return { field: 'model', message: '`model` must name a model (got an empty string)' };
  return { field: 'models', message: '`models` must name at least one model' };
}

/** Spec 4.2: the reasoning effort shorthand equals `reasoning.effort` and must not conflict with it. null counts as not given. */
function checkReasoningEffort(body: JsonObject): ValidationProblem | null {
  const shorthand = body.reasoning_effort;
  const effort = (body.reasoning as JsonObject | undefined)?.effort;
  if (shorthand == null || effort == null || shorthand === effort) return null;
  return {
    field: 'reasoning_effort',
    message: `\`reasoning_effort\` conflicts with \`reasoning.effort\` (${formatValue(shorthand)} vs ${formatValue(effort)}); give one of them, or the same value`,
  };
}

/**
 * Maps every `then` subschema to the `if` beside it, so a failure inside a branch can say which
 * discriminator value selected it ("... is required when thinking.type is enabled"). Ajv keeps the original
 * schema objects in `parentSchema`, so identity lookups work.
 */
function collectConditions(schema: unknown, found = new WeakMap<object, JsonObject>()): WeakMap<object, JsonObject> {
  if (typeof schema !== 'object' || schema === null) return found;
  const node = schema as JsonObject;
  if (node.if && typeof node.then === 'object' && node.then !== null) found.set(node.then, node.if as JsonObject);
  for (const child of Object.values(node)) collectConditions(child, found);
  return found;
}

/**
 * With allErrors false ajv stops at the first failure; the last error is the failing keyword. Errors before it
 * belong to subschemas of an anyOf/oneOf/propertyNames that failed as a whole.
 */
function explain(errors: ErrorObject[], body: unknown, conditions: WeakMap<object, JsonObject>): ValidationProblem {
  const last = errors[errors.length - 1];
  if (!last) return { field: 'body', message: 'the request body is invalid' };
  const path = formatPath(last.instancePath, body);
  const field = path || 'body';

  if (last.keyword === 'anyOf' || last.keyword === 'oneOf') {
    if (last.keyword === 'oneOf' && last.params.passingSchemas) {
      return { field, message: `\`${field}\` matches more than one of the allowed shapes` };
    }
    const branches = groupBranches(errors.slice(0, -1), last.schemaPath);
    const lists = [...branches.values()];
    // Every branch only missing a property: "`model` or `models` is required".
    const missing = lists.map((b) => (b.length === 1 && b[0].keyword === 'required' ? String(b[0].params.missingProperty) : ''));
    if (missing.length > 0 && missing.every(Boolean)) {
      const names = missing.map((name) => joinPath(path, name));
      return { field: names[0], message: `${names.map((n) => `\`${n}\``).join(' or ')} is required` };
    }
    // The branch whose `type` discriminator matches the value is the one the client meant.
    const selected = [...branches].find(([index]) => discriminatorMatches((last.schema as unknown[])[index], last.data));
    if (selected) return explain(selected[1], body, conditions);
    const typeMismatch = (e: ErrorObject): boolean => e.keyword === 'type' && e.instancePath === last.instancePath;
    if (lists.every((b) => b.some(typeMismatch))) {
      const types = [...new Set(lists.flatMap((b) => b.filter(typeMismatch).flatMap((e) => e.params.type as string | string[])))];
      return { field, message: `\`${field}\` must be ${typeList(types)}` };
    }
    // Otherwise the branch that got deepest into the value before failing.
    const depth = (b: ErrorObject[]): number => Math.max(...b.map((e) => e.instancePath.split('/').length));
    return explain(lists.reduce((best, b) => (depth(b) > depth(best) ? b : best)), body, conditions);
  }

  if (last.keyword === 'propertyNames' && errors.length > 1) {
    const inner = errors[errors.length - 2];
    // The key is client input of any length: echo only its start.
    const key = String(last.params.propertyName);
    const shown = key.length > 80 ? `${textHead(key, 80)}…` : key;
    return { field, message: `\`${field}\` key \`${shown}\` ${phrase(inner)}` };
  }

  if (last.keyword === 'required') {
    const missingField = joinPath(path, String(last.params.missingProperty));
    return { field: missingField, message: `\`${missingField}\` is required${whenClause(last, path, conditions)}` };
  }

  if (last.keyword === 'additionalProperties') {
    const extra = String(last.params.additionalProperty);
    const allowed = Object.keys(((last.parentSchema as JsonObject | undefined)?.properties as JsonObject | undefined) ?? {});
    return {
      field: joinPath(path, extra),
      message: `\`${field}\` accepts only ${allowed.map((k) => `\`${k}\``).join(', ')} (got \`${extra}\`)`,
    };
  }

  if (last.keyword === 'not') {
    const together = ((last.schema as JsonObject | undefined)?.required as string[] | undefined) ?? [];
    if (together.length > 1) {
      const names = together.map((name) => joinPath(path, name));
      return { field: names[names.length - 1], message: `${names.map((n) => `\`${n}\``).join(' and ')} cannot be used together` };
    }
  }

  return { field, message: `\`${field}\` ${phrase(last)}` };
}

/** Splits the errors of a failed anyOf/oneOf into one list per branch, in branch order. */
function groupBranches(errors: ErrorObject[], unionPath: string): Map<number, ErrorObject[]> {
  const prefix = `${unionPath}/`;
  const byIndex = new Map<number, ErrorObject[]>();
  for (const error of errors) {
    if (!error.schemaPath.startsWith(prefix)) continue;
    const index = Number(error.schemaPath.slice(prefix.length).split('/', 1)[0]);
    const list = byIndex.get(index);
    if (list) list.push(error);
    else byIndex.set(index, [error]);
  }
  return byIndex;
}

/** Whether a union branch declares a `type` const/enum that accepts the value's `type`. */
function discriminatorMatches(branch: unknown, value: unknown): boolean {
  if (typeof value !== 'object' || value === null || !('type' in value)) return false;
  const type = ((branch as JsonObject | undefined)?.properties as JsonObject | undefined)?.type as JsonObject | undefined;
  if (!type) return false;
  const actual = (value as JsonObject).type;
  return type.const === actual || (Array.isArray(type.enum) && type.enum.includes(actual));
}

/** " when thinking.type is enabled", for a `required` failing inside the `then` of a discriminator `if`. */
function whenClause(error: ErrorObject, path: string, conditions: WeakMap<object, JsonObject>): string {
  const parent = error.parentSchema;
  const condition = parent && conditions.get(parent);
  const data = error.data as JsonObject | undefined;
  const keys = Object.keys((condition?.properties as JsonObject | undefined) ?? {});
  if (keys.length !== 1 || !data || data[keys[0]] === undefined) return '';
  const value = data[keys[0]];
  return ` when ${joinPath(path, keys[0])} is ${typeof value === 'string' ? value : JSON.stringify(value)}`;
}

/** What is wrong with a value, without the field name: "must be <= 2". */
function phrase(error: ErrorObject): string {
  const p = error.params as JsonObject;
  switch (error.keyword) {
    case 'type':
      return `must be ${typeList(([] as string[]).concat(p.type as string | string[]))}`;
    case 'enum':
      return `must be one of ${(p.allowedValues as unknown[]).map(formatValue).join(', ')}`;
    case 'const':
      return `must be ${formatValue(p.allowedValue)}`;
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum':
      return `must be ${String(p.comparison)} ${String(p.limit)}`;
    case 'maxLength':
      return `must NOT be longer than ${String(p.limit)} characters`;
    case 'minLength':
      return `must NOT be shorter than ${String(p.limit)} characters`;
    case 'maxItems':
      return `must NOT have more than ${plural(p.limit as number, 'item')}`;
    case 'minItems':
      return `must contain at least ${plural(p.limit as number, 'item')}`;
    case 'maxProperties':
      return `must NOT have more than ${plural(p.limit as number, 'property', 'properties')}`;
    default:
      return error.message ?? 'is invalid';
  }
}

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

function typeList(types: string[]): string {
  const names = types.map((t) => TYPE_NAMES[t] ?? t);
  return names.length > 1 ? `${names.slice(0, -1).join(', ')} or ${names[names.length - 1]}` : names[0];
}

function formatValue(value: unknown): string {
  return typeof value === 'string' ? `\`${value}\`` : JSON.stringify(value);
}

function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return TYPE_NAMES[typeof value] ?? typeof value;
}

function joinPath(path: string, key: string): string {
  if (!path) return key;
  return IDENTIFIER.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/** JSON pointer "/messages/0/role" to "messages[0].role"; walks the body so array indexes and numeric keys differ. */
function formatPath(pointer: string, body: unknown): string {
  if (!pointer) return '';
  let path = '';
  let node = body;
  for (const segment of pointer.slice(1).split('/')) {
    const key = segment.replace(/~1/g, '/').replace(/~0/g, '~');
    path = Array.isArray(node) ? `${path}[${key}]` : joinPath(path, key);
    node = typeof node === 'object' && node !== null ? (node as JsonObject)[key] : undefined;
  }
  return path;
}

let compiled: Record<RequestKind, RequestValidator> | undefined;

/** The request validators, compiled on first use and shared (the schemas never change while the process runs). */
export function requestValidators(): Record<RequestKind, RequestValidator> {
  return (compiled ??= compileRequestValidators());
}
