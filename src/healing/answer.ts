/** What kind of JSON a request asked for. `schema` is absent for chat's `json_object`. */
export interface RequestedJson {
  format: 'json_object' | 'json_schema';
  schema?: Record<string, unknown>;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

/**
 * The structured output a request asked for, in the client's dialect, or null when it asked for none:
 * chat `response_format` `{type: json_object}` or `{type: json_schema, json_schema: {schema}}`; messages
 * `output_config.format` `{type: json_schema, schema}`.
 *
 * @example requestedJson('chat_completions', {response_format: {type: 'json_object'}}) // {format: 'json_object'}
 */
export function requestedJson(dialect: 'chat_completions' | 'messages', body: Obj | null): RequestedJson | null {
  if (dialect === 'chat_completions') {
    const rf = body?.response_format;
    if (!isObj(rf)) return null;
    if (rf.type === 'json_object') return { format: 'json_object' };
    if (rf.type === 'json_schema' && isObj(rf.json_schema)) {
      const schema = rf.json_schema.schema;
      return isObj(schema) ? { format: 'json_schema', schema } : { format: 'json_schema' };
    }
    return null;
  }
  const oc = body?.output_config;
  const format = isObj(oc) ? oc.format : undefined;
  if (!isObj(format) || format.type !== 'json_schema') return null;
  return isObj(format.schema) ? { format: 'json_schema', schema: format.schema } : { format: 'json_schema' };
}

/**
 * The assistant's text in a non-streaming answer body, or null when there is none to heal (a tool call, an
 * error body, a refusal): chat `choices[0].message.content` (a string); messages: its text blocks joined.
 */
export function answerText(dialect: 'chat_completions' | 'messages', body: unknown): string | null {
  if (!isObj(body)) return null;
  if (dialect === 'chat_completions') {
    const choice = Array.isArray(body.choices) ? body.choices[0] : undefined;
    const content = isObj(choice) && isObj(choice.message) ? choice.message.content : undefined;
    return typeof content === 'string' ? content : null;
  }
  if (!Array.isArray(body.content)) return null;
  const texts = body.content.filter((b): b is Obj & { text: string } => isObj(b) && b.type === 'text' && typeof b.text === 'string');
  return texts.length > 0 ? texts.map((b) => b.text).join('') : null;
}

/** One assistant text of an answer and where it goes back: `choice` is the chat choice's index (absent for messages). */
export interface AnswerPart {
  choice?: number;
  text: string;
  /**
   * The text goes with a call of the client's tools (chat `tool_calls` / `function_call`, a messages `tool_use`
   * block): the model's remark before the call, not its answer.
   */
  callsTools: boolean;
  write(text: string): void;
}

/**
 * Every assistant text of a non-streaming answer body: chat one per choice whose `message.content` is a string
 * (`n` > 1 has several; a tool call or refusal has none), messages its text blocks joined (as `answerText`).
 *
 * @example answerParts('chat_completions', {choices: [{index: 0, message: {content: '{}'}}]}) // [{choice: 0, text: '{}', write}]
 */
export function answerParts(dialect: 'chat_completions' | 'messages', body: unknown): AnswerPart[] {
  if (!isObj(body)) return [];
  if (dialect === 'messages') {
    const text = answerText(dialect, body);
    const callsTools = (body.content as unknown[]).some((b) => isObj(b) && b.type === 'tool_use');
    return text === null ? [] : [{ text, callsTools, write: (t) => setAnswerText(dialect, body, t) }];
  }
  if (!Array.isArray(body.choices)) return [];
  const parts: AnswerPart[] = [];
  body.choices.forEach((choice, position) => {
    const message = isObj(choice) && isObj(choice.message) ? choice.message : undefined;
    if (!message || typeof message.content !== 'string') return;
    const index = typeof (choice as Obj).index === 'number' ? ((choice as Obj).index as number) : position;
    const callsTools = (Array.isArray(message.tool_calls) && message.tool_calls.length > 0) || isObj(message.function_call);
    parts.push({ choice: index, text: message.content, callsTools, write: (t) => { message.content = t; } });
  });
  return parts;
}

/**
 * Writes `text` back as the assistant's text (in place). Messages: the first text block gets it and the other
 * text blocks go, since together they were the one JSON document; other blocks (thinking, tool use) stay.
 */
export function setAnswerText(dialect: 'chat_completions' | 'messages', body: Obj, text: string): void {
  if (dialect === 'chat_completions') {
    ((body.choices as Obj[])[0].message as Obj).content = text;
    return;
  }
  let first = true;
  body.content = (body.content as unknown[]).filter((b) => {
    if (!isObj(b) || b.type !== 'text' || typeof b.text !== 'string') return true;
    if (!first) return false;
    first = false;
    b.text = text;
    return true;
  });
}
