import type { GatewayState } from './types';

/** The text of the last user message (string content, or its text parts/blocks joined). */
export function lastUserText(body: Record<string, unknown> | null): string {
  const messages = body?.messages;
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as { role?: unknown; content?: unknown };
    if (!m || typeof m !== 'object' || m.role !== 'user') continue;
    if (typeof m.content === 'string') return m.content;
    if (!Array.isArray(m.content)) return '';
    return m.content
      .filter((p): p is { type: string; text: string } => !!p && p.type === 'text' && typeof p.text === 'string')
      .map((p) => p.text)
      .join('\n');
  }
  return '';
}

/**
 * Called by a stage about to add to the last user message (web-fetch's pages, file-parser's documents): keeps
 * what the client itself wrote there, once, as `state.askedText`, so a later stage that acts on what the user
 * asked (web search's query) reads the question, not the pages and documents added to it.
 */
export function keepAskedText(state: GatewayState): void {
  state.askedText ??= lastUserText(state.body);
}

/** What the user asked in the last user message, before any stage added to it. */
export function askedText(state: GatewayState): string {
  return state.askedText ?? lastUserText(state.body);
}
