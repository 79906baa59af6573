import type { ServerResponse } from 'node:http';

/** The keep-alive line: an SSE comment, which every SSE parser (the official SDKs' included) skips. */
export const KEEPALIVE_COMMENT = ': keepalive\n\n';

/**
 * While a stream a provider has accepted waits for its first output (a reasoning model may think for
 * minutes before its first token), the client would see nothing at all, not even the headers: proxies with
 * an idle timeout (nginx and load balancers: 60 s) and clients with a header timeout cut such requests.
 * Once the wait passes `everyMs`, the 200 and the SSE headers go out, then an SSE comment every `everyMs`
 * until the answer begins (OpenRouter sends comments the same way). The status was 200 already once a
 * provider accepted (spec 7.5.2), and the events held back for failover (`message_start`, the role chunk)
 * stay held, so a failover is as silent as before. A stream whose answer begins within `everyMs` (the
 * common case) writes nothing here.
 *
 * @example const keepalive = new StreamKeepalive(ctx.res, 5000, () => sseHead(state));
 *          state.streamAccepted = keepalive.accepted; … keepalive.stop();
 */
export class StreamKeepalive {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** The 200 and the SSE headers went out from here: an error now ends the stream in-band. */
  wroteHead = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly everyMs: number,
    private readonly head: () => Record<string, string>,
  ) {}

  /** Routing: a provider accepted the stream and its first output is awaited (a later attempt's call is a no-op). */
  readonly accepted = (): void => {
    if (this.timer !== undefined || this.stopped || this.everyMs <= 0) return;
    this.timer = setInterval(this.beat, this.everyMs);
  };

  private readonly beat = (): void => {
    const res = this.res;
    if (res.destroyed || res.writableEnded) return this.stop();
    try {
      if (!res.headersSent) {
        res.writeHead(200, this.head());
        this.wroteHead = true;
      }
      res.write(KEEPALIVE_COMMENT);
    } catch {
      // A timer's throw would end the process; the answer's own writer meets (and reports) whatever this met.
      this.stop();
    }
  };

  /** The answer began, or the request ended: no more comments. */
  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }
}
