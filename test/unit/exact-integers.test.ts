import { describe, expect, it } from 'vitest';
import { exactIntegers, stringifyExact } from '../../src/routes/exact-integers';
import { jsonShape } from '../../src/routes/json-checks';

const roundTrip = (text: string) => stringifyExact(JSON.parse(text), exactIntegers(text) ?? new Map());

describe('integers past 2^53 keep their digits', () => {
  it('the shape scan notes a 16-digit integer outside strings, not in a string or a fraction', () => {
    expect(jsonShape('{"seed":9223372036854775807}', 100, 0).longInteger).toBe(true);
    expect(jsonShape('{"seed":-1234567890123456}', 100, 0).longInteger).toBe(true);
    expect(jsonShape('{"seed":123456789012345}', 100, 0).longInteger).toBe(false);
    expect(jsonShape('{"s":"9223372036854775807"}', 100, 0).longInteger).toBe(false);
    expect(jsonShape('{"t":0.12345678901234567890}', 100, 0).longInteger).toBe(false);
  });

  it('finds only inexact integers, and writes them back with their digits wherever they are', () => {
    expect(exactIntegers('{"a":9007199254740992,"b":1234567890123456,"s":"9223372036854775807"}')).toBeNull();
    const text = '{"seed":9223372036854775807,"x":[{"m":-18446744073709551615}],"big":100000000000000000000000,"f":12345678901234567.5,"e":12345678901234567e2}';
    expect([...exactIntegers(text)!.values()]).toEqual(['9223372036854775807', '-18446744073709551615', '100000000000000000000000']);
    expect(roundTrip(text)).toBe('{"seed":9223372036854775807,"x":[{"m":-18446744073709551615}],"big":100000000000000000000000,"f":12345678901234568,"e":1234567890123456800}');
  });

  it('two spellings of one double are left as JSON writes the double; a string that looks like the mark is kept', () => {
    expect(roundTrip('{"a":9223372036854775807,"b":9223372036854775808}')).toBe('{"a":9223372036854776000,"b":9223372036854776000}');
    expect(roundTrip('{"a":9223372036854775807,"s":"x123"}')).toBe('{"a":9223372036854775807,"s":"x123"}');
  });
});
