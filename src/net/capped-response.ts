/** A body over the cap of `cappedResponseText`. */
export class ResponseTooLarge extends Error {
  constructor(readonly maxBytes: number) {
    super(`answer is larger than ${maxBytes >= 1024 * 1024 ? `${maxBytes / 1024 / 1024} MB` : `${maxBytes} bytes`}`);
    this.name = 'ResponseTooLarge';
  }
}

/**
 * A `fetch` answer's body as UTF-8 text, read up to `maxBytes` of the body as decoded: `fetch` inflates a
 * gzip, deflate or br answer whatever the caller wants, so a few kilobytes on the wire may be gigabytes, and
 * `res.text()` held all of it. Past the cap the body is cancelled and `ResponseTooLarge` thrown.
 *
 * @example const text = await cappedResponseText(await fetch(url), 1024 * 1024);
 */
export async function cappedResponseText(res: Response, maxBytes: number): Promise<string> {
  if (!res.body) return '';
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => undefined);
      throw new ResponseTooLarge(maxBytes);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** An undici response body (or any Readable) that can be dropped unread. */
export type DroppableBody = AsyncIterable<Buffer> & { on(event: 'error', fn: () => void): unknown; destroy(): void };

/** Drops a body we will not read; undici reports the abort as an error event, which nobody needs. */
export function discard(body: { on(event: 'error', fn: () => void): unknown; destroy(): void }): void {
  body.on('error', () => undefined);
  body.destroy();
}

/**
 * An undici body read whole up to `maxBytes`: past it the body is dropped (its connection with it) and
 * `tooLarge()` thrown. Used by the safe fetcher and the job-style video provider.
 *
 * @example const bytes = await readCappedBody(res.body, 2 * 1024 * 1024, () => new Error('too large'));
 */
export async function readCappedBody(body: DroppableBody, maxBytes: number, tooLarge: () => Error): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > maxBytes) {
      discard(body);
      throw tooLarge();
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}
