import pino, { type Logger } from 'pino';
import { keysMasked } from './span-text';

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
  const options = { level, base: { service: 'model-gateway' }, redact: { paths: REDACT_PATHS, censor: '[redacted]' }, serializers: { err: loggedError } };
  const stdout = () => heldAsList(pino.destination({ dest: 1, sync: false, minLength: LOG_BUFFER_BYTES, periodicFlush: LOG_FLUSH_MS }));
  return pino(options, (destination as pino.DestinationStream | undefined) ?? stdout());
}

/**
 * pino's error serializer (message, stack, own fields, causes), then every gateway key in it masked as its
 * label (`sk-gw-v1-...abcd`). A stage may throw anything, with a key in it (the Authorization header quoted
 * in its message, an object holding it); redaction by path cannot see into a message or a stack. Runs only
 * when a line logs an `err`, never on an access line.
 */
function loggedError(err: unknown): unknown {
  return keysMasked(pino.stdSerializers.err(err as Error), 8);
}

type Destination = ReturnType<typeof pino.destination>;

/**
 * `stream` with the lines it holds kept in a list and handed over joined, `LOG_BUFFER_BYTES` at a time.
 * sonic-boom holds lines by appending each to one string and measuring that string's UTF-8 length at every
 * line, which copies everything held so far each time (~2 KB copied and allocated per access line; 4 KB of a
 * chat request's 60 KB of allocations, `npm run bench:alloc`). Its flush, synchronous flush (at exit,
 * pino's own handler) and end hand over what the list holds first, so no line is kept back.
 */
function heldAsList(stream: Destination): Destination {
  const write = stream.write.bind(stream);
  const flush = stream.flush.bind(stream);
  const flushSync = stream.flushSync.bind(stream);
  const end = stream.end.bind(stream);
  let held: string[] = [];
  let size = 0; // UTF-16 units: close enough to bytes for a threshold
  const release = () => {
    if (held.length === 0) return;
    const text = held.length === 1 ? held[0] : held.join('');
    held = [];
    size = 0;
    write(text);
  };
  stream.write = (line: string) => {
    held.push(line);
    size += line.length;
    if (size >= LOG_BUFFER_BYTES) release();
    return true;
  };
  stream.flush = (cb?: (err?: Error) => void) => {
    release();
    flush(cb);
  };
  stream.flushSync = () => {
    release();
    flushSync();
  };
  stream.end = (() => {
    release();
    end();
  }) as typeof stream.end;
  return stream;
}
