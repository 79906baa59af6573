import { describe, expect, it } from 'vitest';
import { base64Bytes, base64BytesAtMost } from '../../plugins/file-parser/base64-size';

describe('file-parser: the decoded size of base64', () => {
  it('is what Buffer.from decodes, for every length, padded or not, with line breaks, spaces and URL-safe characters', () => {
    for (let n = 0; n <= 40; n++) {
      const bytes = Buffer.from(Array.from({ length: n }, (_, i) => (i * 37 + 251) % 256));
      const plain = bytes.toString('base64');
      const mime = plain.replace(/.{1,8}/g, (line) => `${line}\r\n`);
      for (const data of [plain, plain.replace(/=+$/, ''), mime, ` ${plain} `, bytes.toString('base64url')]) {
        expect(base64Bytes(data), JSON.stringify(data)).toBe(n);
        expect(Buffer.from(data, 'base64').length).toBe(n);
        expect(base64BytesAtMost(data)).toBeGreaterThanOrEqual(n);
      }
      // Without skipped characters, the length alone is exact.
      expect(base64BytesAtMost(plain)).toBe(n);
    }
    expect(base64Bytes('QQ==QUJD')).toBe(Buffer.from('QQ==QUJD', 'base64').length); // stops at the first '='
  });
});
