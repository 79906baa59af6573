type Obj = Record<string, unknown>;
type Dialect = 'chat_completions' | 'messages';
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

export const DEFAULT_JUDGE_PROMPT = [
  'You are given a question and {count} candidate answers to it, written independently by different assistants.',
  'Write the single best answer to the question: keep what the candidates get right, correct their mistakes,',
  'and leave out claims that are not supported. Reply with the answer only; do not mention the candidates.',
  '',
  'Question:',
  '{question}',
  '',
  '{answers}',
].join('\n');

/** Fields that steer routing across several models: a candidate or judge call names exactly one model. */
const ROUTING_FIELDS = ['models', 'fallbacks'];

/** The body each candidate model gets: the client's request, for one model, never streamed. */
export function candidateBody(body: Obj, model: string): Obj {
  const out: Obj = { ...body, model, stream: false };
  for (const k of [...ROUTING_FIELDS, 'stream_options']) delete out[k];
  return out;
}

/**
 * The judge's request, in the client's dialect: the conversation up to the last user turn, then one user turn
 * written from `template` with the question (that last user turn's text) and the numbered answers. When the
 * conversation does not end with a user turn (a tool result, a prefill), the question is the conversation
 * itself and the judge turn is appended.
 */
export function judgeBody(input: { body: Obj; judge: string; answers: string[]; template: string; stream: boolean }): Obj {
  const { body, judge, answers, template, stream } = input;
  const messages = Array.isArray(body.messages) ? [...(body.messages as unknown[])] : [];
  const last = messages.at(-1);
  const lastText = isObj(last) && last.role === 'user' ? textOf(last.content) : null;
  if (lastText !== null) messages.pop();
  const question = lastText ?? '(the conversation above)';
  const numbered = answers.map((a, i) => `Answer ${i + 1}:\n${a}`).join('\n\n');
  // One pass over the template, with a function (a `$&` in user text stays literal): a `{count}` or
  // `{answers}` inside the question or an answer is their text, not a placeholder filled in again.
  const values: Record<string, string> = { question, count: String(answers.length), answers: numbered };
  const content = template.replace(/\{(question|count|answers)\}/g, (_m, name: string) => values[name]);
  messages.push({ role: 'user', content });
  const out: Obj = { ...body, model: judge, messages, stream };
  for (const k of ROUTING_FIELDS) delete out[k];
  if (!stream) delete out.stream_options;
  return out;
}

/** A message's text: a string, or its text blocks joined; null when it has none (only images, tool results). */
function textOf(content: unknown): string | null {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return null;
  const texts = content.filter((b): b is Obj & { text: string } => isObj(b) && b.type === 'text' && typeof b.text === 'string');
  return texts.length > 0 ? texts.map((b) => b.text).join('\n') : null;
}
