import pino, { type Logger } from 'pino';

/**
 * Paths whose values never reach a log line: credentials in headers and configs. Exact paths only:
 * wildcard paths make pino walk every logged object, which showed in the hot-path profile; log calls
 * name what they log, and none logs a request body or a provider config.
 */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'headers.authorization',
  'headers["x-api-key"]',
  'api_key',
  'apiKey',
  'key',
];

/**
 * The gateway's structured logger: pino, JSON lines on stdout unless `destination` is given. Stdout is
 * written asynchronously (lines written while a write is under way go out together), so logging never
 * blocks a request; pino flushes what is left when the process exits.
 */
export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  const options = { level, base: { service: 'model-gateway' }, redact: { paths: REDACT_PATHS, censor: '[redacted]' } };
  return pino(options, (destination as pino.DestinationStream | undefined) ?? pino.destination({ dest: 1, sync: false }));
}
