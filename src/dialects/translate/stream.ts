/*
 * Stream translation between the two client dialects, one event at a time (never the whole stream buffered):
 * messages-style events → chat.completion.chunk events in stream-to-chat.ts, the other way in
 * stream-to-messages.ts; what both share (the translator's contract, `[DONE]`, the event parser) in
 * stream-common.ts.
 */
export type { StreamTranslator } from './stream-common';
export { messagesToChatStream } from './stream-to-chat';
export { chatToMessagesStream } from './stream-to-messages';
