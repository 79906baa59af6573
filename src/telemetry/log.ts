import pino, { type Logger } from 'pino';

/** Paths whose values never reach a log line: credentials in headers, configs and bodies. */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'headers.authorization',
  'headers["x-api-key"]',
  '*.api_key',
  '*.*.api_key',
  'api_key',
  'key',
  'apiKey',
];

/** The gateway's structured logger (pino, JSON lines on stdout unless `destination` is given). */
export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  const options = { level, base: { service: 'model-gateway' }, redact: { paths: REDACT_PATHS, censor: '[redacted]' } };
  return destination ? pino(options, destination as pino.DestinationStream) : pino(options);
}
