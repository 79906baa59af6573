import type { Dialect } from '../providers/types';
import { chatCompletions } from './chat-completions';
import { messages } from './messages';
import type { DialectAdapter } from './types';

export type { DialectAdapter, FinishInfo, StreamRewriter } from './types';

export const DIALECTS: Readonly<Record<Dialect, DialectAdapter>> = {
  chat_completions: chatCompletions,
  messages,
};
