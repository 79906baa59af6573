/**
 * An absolute http(s) URL as it may go to a client or a model: `http://` or `https://`, nothing that is no
 * part of a URL (whitespace, C0 and C1 control characters, DEL), and it parses. Search results' `url`s
 * (`https://a.example/\n[9] …` had written a source line of its own into the prompt) and video `output_urls`
 * (`javascript:`, `file:`, `data:` had reached the client) keep only such URLs.
 *
 * @example isHttpUrl('https://v.example/a.mp4') // true
 * @example isHttpUrl('javascript:alert(1)') // false
 */
export function isHttpUrl(url: unknown): url is string {
  return typeof url === 'string' && /^https?:\/\/[^\s\x00-\x1f\x7f-\x9f]+$/i.test(url) && URL.canParse(url);
}
