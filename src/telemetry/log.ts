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

/** Stdout log lines are held until this many bytes wait (about ten access lines) ... */
const LOG_BUFFER_BYTES = 4096;
/** ... or the next flush, which runs this often. */
const LOG_FLUSH_MS = 100;

/**
 * The gateway's structured logger: pino, JSON lines on stdout unless `destination` is given. Stdout is
 * written asynchronously, so logging never blocks a request, and in batches: lines wait until
 * `LOG_BUFFER_BYTES` are held or the flush every `LOG_FLUSH_MS` comes. Why batches: each asynchronous write
 * hands the line to a thread-pool thread, and on a busy or single core that thread runs at once, before the
 * request that logged goes on (with one request at a time, 8 % of the profile's wall time was under that
 * write; README, Performance).
 * pino writes out what is held when the process exits (also on an uncaught exception); a process killed
 * with SIGKILL loses at most the last `LOG_FLUSH_MS` of lines.
 */
export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  const options = { level, base: { service: 'model-gateway' }, redact: { paths: REDACT_PATHS, censor: '[redacted]' } };
  const stdout = () => pino.destination({ dest: 1, sync: false, minLength: LOG_BUFFER_BYTES, periodicFlush: LOG_FLUSH_MS });
  return pino(options, (destination as pino.DestinationStream | undefined) ?? stdout());
}
