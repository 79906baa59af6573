import { isIPv6 } from 'node:net';

/**
 * Which IP addresses an outbound fetch on a caller's behalf may reach (SSRF protection). Everything that is
 * not plainly public unicast is refused: private, loopback, link-local, CGNAT, "this network", multicast,
 * broadcast, documentation and benchmark ranges, cloud metadata addresses, and any IPv6 form that embeds
 * an IPv4 address (mapped, compatible, NAT64, 6to4 is checked through its embedded address).
 *
 * @example addressVerdict('169.254.169.254') // { allowed: false, reason: 'metadata' }
 */
export type AddressVerdict = { allowed: true } | { allowed: false; reason: string };

type V4Range = readonly [base: number, bits: number, reason: string];

const ip4 = (a: number, b: number, c: number, d: number): number => ((a << 24) >>> 0) + (b << 16) + (c << 8) + d;

/** Checked in order: the first match names the reason. */
const V4_REFUSED: readonly V4Range[] = [
  [ip4(169, 254, 169, 254), 32, 'metadata'],
  [ip4(168, 63, 129, 16), 32, 'metadata'],
  [ip4(255, 255, 255, 255), 32, 'broadcast'],
  [ip4(0, 0, 0, 0), 8, 'this-network'],
  [ip4(10, 0, 0, 0), 8, 'private'],
  [ip4(100, 64, 0, 0), 10, 'cgnat'],
  [ip4(127, 0, 0, 0), 8, 'loopback'],
  [ip4(169, 254, 0, 0), 16, 'link-local'],
  [ip4(172, 16, 0, 0), 12, 'private'],
  [ip4(192, 0, 0, 0), 24, 'reserved'],
  [ip4(192, 0, 2, 0), 24, 'documentation'],
  [ip4(192, 88, 99, 0), 24, 'reserved'],
  [ip4(192, 168, 0, 0), 16, 'private'],
  [ip4(198, 18, 0, 0), 15, 'benchmarking'],
  [ip4(198, 51, 100, 0), 24, 'documentation'],
  [ip4(203, 0, 113, 0), 24, 'documentation'],
  [ip4(224, 0, 0, 0), 4, 'multicast'],
  [ip4(240, 0, 0, 0), 4, 'reserved'],
];

function inV4(value: number, base: number, bits: number): boolean {
  if (bits === 0) return true;
  const mask = bits === 32 ? 0xffffffff : (~((1 << (32 - bits)) - 1)) >>> 0;
  return ((value & mask) >>> 0) === ((base & mask) >>> 0);
}

function v4Verdict(value: number): AddressVerdict {
  for (const [base, bits, reason] of V4_REFUSED) if (inV4(value, base, bits)) return { allowed: false, reason };
  return { allowed: true };
}

/**
 * An IPv4 host in any form `inet_aton` and the WHATWG URL parser accept: `127.0.0.1`, `2130706433`,
 * `0x7f000001`, `0177.0.0.1`, `127.1`. Returns the 32-bit value, `null` for a host that is not numeric,
 * or `'invalid'` for one that looks numeric but is malformed (e.g. `1.2.3.999`): refuse those rather than
 * let a resolver guess.
 */
export function parseIpv4Loose(host: string): number | null | 'invalid' {
  const parts = host.split('.');
  if (parts.length > 1 && parts[parts.length - 1] === '') parts.pop();
  const nums = parts.map(numericPart);
  if (nums[nums.length - 1] === null) return null;
  if (parts.length > 4 || nums.some((n) => n === null)) return 'invalid';
  const values = nums as number[];
  const last = values[values.length - 1];
  if (values.slice(0, -1).some((n) => n > 255)) return 'invalid';
  if (last >= 256 ** (5 - values.length)) return 'invalid';
  let out = last;
  values.slice(0, -1).forEach((n, i) => (out += n * 256 ** (3 - i)));
  return out;
}

function numericPart(part: string): number | null {
  if (/^0x[0-9a-f]*$/i.test(part)) return part.length === 2 ? 0 : parseInt(part.slice(2), 16);
  if (/^0[0-7]+$/.test(part)) return parseInt(part.slice(1), 8);
  if (/^(0|[1-9][0-9]*)$/.test(part)) return Number(part);
  return null;
}

/** An IPv6 literal (no brackets, no zone) as eight 16-bit groups, or null. */
export function parseIpv6(text: string): number[] | null {
  if (!isIPv6(text)) return null;
  let s = text.toLowerCase();
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(s);
  if (v4) {
    const [a, b, c, d] = v4.slice(1).map(Number);
    s = s.slice(0, v4.index) + ((a << 8) | b).toString(16) + ':' + ((c << 8) | d).toString(16);
  }
  const [head, rest] = s.includes('::') ? s.split('::') : [s, undefined];
  const headGroups = head ? head.split(':').map((g) => parseInt(g, 16)) : [];
  const restGroups = rest ? rest.split(':').map((g) => parseInt(g, 16)) : [];
  const missing = 8 - headGroups.length - restGroups.length;
  if (missing < 0 || (rest === undefined && missing !== 0)) return null;
  return [...headGroups, ...new Array(missing).fill(0), ...restGroups];
}

function v6Verdict(g: number[]): AddressVerdict {
  const zeroUpTo = (n: number) => g.slice(0, n).every((x) => x === 0);
  if (zeroUpTo(7) && g[7] === 1) return { allowed: false, reason: 'loopback' };
  if (zeroUpTo(8)) return { allowed: false, reason: 'unspecified' };
  // Why refuse rather than check the embedded IPv4: stacks differ in whether they route these to IPv4.
  if (zeroUpTo(5) && g[5] === 0xffff) return { allowed: false, reason: 'ipv4-mapped' };
  if (zeroUpTo(6)) return { allowed: false, reason: 'ipv4-compatible' };
  if (g[0] === 0x64 && g[1] === 0xff9b) return { allowed: false, reason: 'nat64' };
  if (g[0] === 0xfd00 && g[1] === 0x0ec2 && g.slice(2, 7).every((x) => x === 0) && g[7] === 0x254) {
    return { allowed: false, reason: 'metadata' };
  }
  if ((g[0] & 0xfe00) === 0xfc00) return { allowed: false, reason: 'unique-local' };
  if ((g[0] & 0xffc0) === 0xfe80) return { allowed: false, reason: 'link-local' };
  if ((g[0] & 0xffc0) === 0xfec0) return { allowed: false, reason: 'site-local' };
  if ((g[0] & 0xff00) === 0xff00) return { allowed: false, reason: 'multicast' };
  if (g[0] === 0x2002) {
    const inner = v4Verdict(((g[1] << 16) >>> 0) + g[2]);
    return inner.allowed ? inner : { allowed: false, reason: `6to4-${inner.reason}` };
  }
  if (g[0] === 0x2001 && g[1] === 0x0db8) return { allowed: false, reason: 'documentation' };
  if (g[0] === 0x2001 && g[1] < 0x0200) return { allowed: false, reason: 'reserved' }; // Teredo, ORCHID, benchmarking
  if ((g[0] & 0xe000) !== 0x2000) return { allowed: false, reason: 'not-global-unicast' };
  return { allowed: true };
}

/**
 * The verdict for one resolved address (IPv4 dotted quad or IPv6, optionally bracketed).
 *
 * @example addressVerdict('::ffff:127.0.0.1') // { allowed: false, reason: 'ipv4-mapped' }
 */
export function addressVerdict(address: string): AddressVerdict {
  const bare = address.replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  const v6 = parseIpv6(bare);
  if (v6) return v6Verdict(v6);
  const v4 = parseIpv4Loose(bare);
  if (typeof v4 === 'number') return v4Verdict(v4);
  return { allowed: false, reason: 'not-an-ip-address' };
}

/** True for 127/8 and ::1 (the only addresses the test-only loopback allowance may open). */
export function isLoopback(address: string): boolean {
  const verdict = addressVerdict(address);
  return !verdict.allowed && verdict.reason === 'loopback';
}

/** A URL hostname that is an IP literal (any numeric IPv4 spelling, or bracketed IPv6), canonicalised. */
export function ipLiteralOf(hostname: string): { address: string; family: 4 | 6 } | 'invalid' | null {
  const bare = hostname.replace(/^\[|\]$/g, '');
  if (isIPv6(bare)) return { address: bare, family: 6 };
  const v4 = parseIpv4Loose(bare);
  if (v4 === null || v4 === 'invalid') return v4;
  return { address: [v4 >>> 24, (v4 >>> 16) & 255, (v4 >>> 8) & 255, v4 & 255].join('.'), family: 4 };
}
