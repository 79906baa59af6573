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
