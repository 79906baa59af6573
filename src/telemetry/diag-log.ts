import { diag, DiagLogLevel, type DiagLogger } from '@opentelemetry/api';
import type { Logger } from 'pino';

/** The same message is logged at most once per this long (a collector that is down fails every export). */
const REPEAT_MS = 60_000;

/**
 * OpenTelemetry's own warnings and errors (a span export that failed: collector down, hanging, refusing)
 * in the gateway's log, at `warn`. Without a diag logger they went nowhere, so a collector that lost every
 * span was silent. A message repeats at most once a minute, with how many times it came meanwhile.
 *
 * @example routeDiagToLog(logger);
 */
export function routeDiagToLog(logger: Logger, clock: () => number = Date.now): void {
  const last = new Map<string, { at: number; count: number }>();
  const say = (message: string, args: unknown[]) => {
    const now = clock();
    const seen = last.get(message);
    if (seen && now - seen.at < REPEAT_MS) {
      seen.count++;
      return;
    }
    if (last.size > 100) last.clear();
    last.set(message, { at: now, count: 0 });
    const cause = args.find((a) => a instanceof Error) as Error | undefined;
    logger.warn({ telemetry: true, ...(cause ? { reason: cause.message } : {}), ...(seen?.count ? { repeated: seen.count } : {}) }, `telemetry: ${message}`);
  };
  const quiet = () => undefined;
  const sink: DiagLogger = { error: (m, ...a) => say(m, a), warn: (m, ...a) => say(m, a), info: quiet, debug: quiet, verbose: quiet };
  diag.setLogger(sink, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
}
