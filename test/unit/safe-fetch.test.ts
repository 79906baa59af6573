import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addressVerdict, ipLiteralOf, parseIpv4Loose } from '../../src/net/address-policy';
import { decodeEntities, htmlToText } from '../../src/net/html-text';
import { checkedAddress, documentText, FetchRefused, safeFetch, type SafeFetchOptions } from '../../src/net/safe-fetch';

async function refusal(p: Promise<unknown>): Promise<FetchRefused> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(FetchRefused);
    return err as FetchRefused;
  }
  throw new Error('expected a refusal');
}

describe('address policy', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['127.255.0.9', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['169.254.169.254', 'metadata'],
    ['169.254.1.1', 'link-local'],
    ['100.64.0.1', 'cgnat'],
    ['0.0.0.0', 'this-network'],
    ['224.0.0.1', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['::1', 'loopback'],
    ['[::1]', 'loopback'],
    ['::', 'unspecified'],
    ['::ffff:127.0.0.1', 'ipv4-mapped'],
    ['::ffff:7f00:1', 'ipv4-mapped'],
    ['::ffff:8.8.8.8', 'ipv4-mapped'],
    ['::127.0.0.1', 'ipv4-compatible'],
    ['64:ff9b::10.0.0.1', 'nat64'],
    ['fe80::1', 'link-local'],
    ['fc00::1', 'unique-local'],
    ['fd12:3456::1', 'unique-local'],
    ['fd00:ec2::254', 'metadata'],
    ['ff02::1', 'multicast'],
    ['2002:7f00:1::1', '6to4-loopback'],
    ['2001:db8::1', 'documentation'],
  ])('refuses %s (%s)', (address, reason) => {
    expect(addressVerdict(address)).toEqual({ allowed: false, reason });
  });

  it.each(['8.8.8.8', '93.184.216.34', '172.32.0.1', '100.128.0.1', '2606:4700::1111', '2a00:1450:4001::200e'])('allows public %s', (address) => {
    expect(addressVerdict(address)).toEqual({ allowed: true });
  });

  it('reads every numeric IPv4 spelling as the address it means', () => {
    const loop = 0x7f000001;
    expect(parseIpv4Loose('2130706433')).toBe(loop);
    expect(parseIpv4Loose('0x7f000001')).toBe(loop);
    expect(parseIpv4Loose('0177.0.0.1')).toBe(loop);
    expect(parseIpv4Loose('127.1')).toBe(loop);
    expect(parseIpv4Loose('0x7f.0.0.1')).toBe(loop);
    expect(parseIpv4Loose('1.2.3.999')).toBe('invalid');
    expect(parseIpv4Loose('example.com')).toBeNull();
    expect(ipLiteralOf('2130706433')).toEqual({ address: '127.0.0.1', family: 4 });
    expect(ipLiteralOf('[::1]')).toEqual({ address: '::1', family: 6 });
  });

  it.each([
    ['http://127.0.0.1/', 'Address 127.0.0.1 is loopback'],
    ['http://10.1.2.3/', 'Address 10.1.2.3 is private'],
    ['http://169.254.169.254/latest/meta-data/', 'Address 169.254.169.254 is metadata'],
    ['http://[::1]/', 'Address ::1 is loopback'],
    ['http://[::ffff:127.0.0.1]/', 'Address ::ffff:7f00:1 is ipv4-mapped'],
    ['http://2130706433/', 'Address 127.0.0.1 is loopback'],
    ['http://0x7f000001/', 'Address 127.0.0.1 is loopback'],
    ['http://0177.0.0.1/', 'Address 127.0.0.1 is loopback'],
    ['http://127.1/', 'Address 127.0.0.1 is loopback'],
  ])('a URL to %s is refused before any connection', async (url, message) => {
    const resolve = async () => {
      throw new Error('an IP literal must not be resolved');
    };
    const err = await refusal(checkedAddress(new URL(url), url, { resolve }));
    expect(err.code).toBe('blocked_address');
    expect(err.message).toBe(message);
  });

  it('a hostname resolving to a private address is refused, even with a public one beside it; the message does not show the address (no oracle for the internal DNS)', async () => {
    const resolve = async (host: string) => {
      expect(host).toBe('intranet.example.com');
      return [
        { address: '93.184.216.34', family: 4 },
        { address: '10.0.0.5', family: 4 },
      ];
    };
    const err = await refusal(checkedAddress(new URL('https://intranet.example.com/x'), 'https://intranet.example.com/x', { resolve }));
    expect(err.code).toBe('blocked_address');
    // The record, the tool result the model reads and the file-parser error all quote this message: a key
    // holder had read the internal address of any name the gateway's resolver knows (db.internal → 10.0.3.7).
    expect(err.message).toBe('intranet.example.com does not resolve to a public address');
    expect(err.message).not.toContain('10.0.0.5');
    const ok = await checkedAddress(new URL('https://public.example/'), 'https://public.example/', { resolve: async () => [{ address: '93.184.216.34', family: 4 }] });
    expect(ok.address).toBe('93.184.216.34');
  });

  it('a name that does not resolve gets the very refusal of a name resolving to an internal address (no oracle for which internal names exist); the operator log tells them apart', async () => {
    const logged: { obj: object; msg: string }[] = [];
    const logger = { info: (obj: object, msg: string) => logged.push({ obj, msg }) };
    const seen = async (host: string, resolve: () => Promise<{ address: string; family: number }[]>) => {
      const err = await refusal(checkedAddress(new URL(`https://${host}/x`), `https://${host}/x`, { resolve, logger }));
      return { code: err.code, message: err.message.replace(host, '<host>') };
    };
    const nxdomain = await seen('nope.corp.internal', async () => {
      throw Object.assign(new Error('getaddrinfo ENOTFOUND nope.corp.internal'), { code: 'ENOTFOUND' });
    });
    const internal = await seen('db.corp.internal', async () => [{ address: '10.0.3.7', family: 4 }]);
    const empty = await seen('void.corp.internal', async () => []);
    expect(nxdomain).toEqual({ code: 'blocked_address', message: '<host> does not resolve to a public address' });
    expect(internal).toEqual(nxdomain);
    expect(empty).toEqual(nxdomain);
    expect(logged.map((l) => l.obj)).toEqual([
      { host: 'nope.corp.internal', cause: 'lookup failed (ENOTFOUND)' },
      { host: 'db.corp.internal', cause: 'an answer is private' },
      { host: 'void.corp.internal', cause: 'no address' },
    ]);
    expect(JSON.stringify(logged)).not.toContain('10.0.3.7');
  });

  it('refuses other schemes and credentials', async () => {
    const base: SafeFetchOptions = { maxBytes: 1000, timeoutMs: 1000, maxRedirects: 2, allowedContentTypes: ['text/plain'] };
    expect((await refusal(safeFetch('file:///etc/passwd', base))).code).toBe('bad_scheme');
    expect((await refusal(safeFetch('gopher://example.com/', base))).code).toBe('bad_scheme');
    expect((await refusal(safeFetch('http://user:pw@example.com/', base))).code).toBe('bad_url');
    expect((await refusal(safeFetch('not a url', base))).code).toBe('bad_url');
  });
});

describe('safeFetch against local servers', () => {
  let first: http.Server;
  let second: http.Server;
  let firstPort = 0;
  let secondPort = 0;
  let secondHits = 0;

  beforeAll(async () => {
    second = http.createServer((_req, res) => {
      secondHits++;
      res.writeHead(200, { 'content-type': 'text/plain' }).end('secret internal data');
    });
    first = http.createServer((req, res) => {
      const url = req.url ?? '/';
      if (url === '/page') {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        res.end('<html><head><title>T</title><style>p{}</style></head><body><p>Hello &amp; <b>welcome</b></p><script>alert(1)</script></body></html>');
      } else if (url === '/to-other-loopback-port') {
        res.writeHead(302, { location: `http://127.0.0.1:${secondPort}/` }).end();
      } else if (url === '/to-private') {
        res.writeHead(301, { location: 'http://10.0.0.1/admin' }).end();
      } else if (url === '/to-metadata-decimal') {
        res.writeHead(307, { location: 'http://2852039166/latest/meta-data/' }).end();
      } else if (url === '/hop') {
        res.writeHead(302, { location: '/page' }).end();
      } else if (url === '/loop') {
        res.writeHead(302, { location: '/loop' }).end();
      } else if (url === '/big') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('x'.repeat(5000));
      } else if (url === '/big-chunked') {
        res.writeHead(200, { 'content-type': 'text/plain', 'transfer-encoding': 'chunked' });
        let n = 0;
        const tick = setInterval(() => {
          if (n++ === 10 || res.destroyed) return clearInterval(tick), res.end();
          res.write('y'.repeat(1000));
        }, 2);
      } else if (url === '/slow') {
        setTimeout(() => res.writeHead(200, { 'content-type': 'text/plain' }).end('late'), 2000);
      } else if (url === '/image') {
        res.writeHead(200, { 'content-type': 'image/png' }).end(Buffer.from([0x89, 0x50]));
      } else {
        res.writeHead(404).end();
      }
    });
    await Promise.all([new Promise<void>((r) => first.listen(0, '127.0.0.1', r)), new Promise<void>((r) => second.listen(0, '127.0.0.1', r))]);
    firstPort = (first.address() as AddressInfo).port;
    secondPort = (second.address() as AddressInfo).port;
  });
  afterAll(async () => {
    first.closeAllConnections();
    second.closeAllConnections();
    await Promise.all([new Promise((r) => first.close(r)), new Promise((r) => second.close(r))]);
  });

  const opts = (over: Partial<SafeFetchOptions> = {}): SafeFetchOptions => ({
    maxBytes: 2000,
    timeoutMs: 1000,
    maxRedirects: 3,
    allowedContentTypes: ['text/html', 'text/plain'],
    testOnlyLoopbackPorts: [firstPort],
    ...over,
  });

  it('without the test allowance even the test server is refused', async () => {
    const err = await refusal(safeFetch(`http://127.0.0.1:${firstPort}/page`, opts({ testOnlyLoopbackPorts: undefined })));
    expect(err.code).toBe('blocked_address');
  });

  it('fetches an allowed page, follows a checked redirect, and reduces HTML to text', async () => {
    const doc = await safeFetch(`http://127.0.0.1:${firstPort}/hop`, opts());
    expect(doc.status).toBe(200);
    expect(doc.redirects).toEqual([`http://127.0.0.1:${firstPort}/page`]);
    expect(doc.mediaType).toBe('text/html');
    expect(documentText(doc)).toBe('T\nHello & welcome');
  });

  it('a name is connected to at the checked address, not resolved again', async () => {
    let calls = 0;
    const resolve = async () => (calls++, [{ address: '127.0.0.1', family: 4 }]);
    const doc = await safeFetch(`http://rebind.test:${firstPort}/page`, opts({ resolve }));
    expect(doc.address).toBe('127.0.0.1');
    expect(calls).toBe(1); // one resolution per hop: the socket's lookup answers with the pinned address
  });

  it('a redirect from the allowed server to another loopback port is refused, and never reaches it', async () => {
    const before = secondHits;
    const err = await refusal(safeFetch(`http://127.0.0.1:${firstPort}/to-other-loopback-port`, opts()));
    expect(err.code).toBe('blocked_address');
    expect(err.message).toBe('Address 127.0.0.1 is loopback');
    expect(secondHits).toBe(before);
  });

  it('a redirect to a private address or a decimal-encoded metadata address is refused', async () => {
    expect((await refusal(safeFetch(`http://127.0.0.1:${firstPort}/to-private`, opts()))).message).toBe('Address 10.0.0.1 is private');
    expect((await refusal(safeFetch(`http://127.0.0.1:${firstPort}/to-metadata-decimal`, opts()))).message).toBe('Address 169.254.169.254 is metadata');
  });

  it('stops after max_redirects', async () => {
    const err = await refusal(safeFetch(`http://127.0.0.1:${firstPort}/loop`, opts({ maxRedirects: 2 })));
    expect(err.code).toBe('too_many_redirects');
  });

  it('caps the body size, declared or streamed', async () => {
    expect((await refusal(safeFetch(`http://127.0.0.1:${firstPort}/big`, opts()))).code).toBe('too_large');
    const streamed = await refusal(safeFetch(`http://127.0.0.1:${firstPort}/big-chunked`, opts()));
    expect(streamed.code).toBe('too_large');
    expect(streamed.message).toBe('Body exceeds 2000 bytes');
  });

  it('times out', async () => {
    const err = await refusal(safeFetch(`http://127.0.0.1:${firstPort}/slow`, opts({ timeoutMs: 200 })));
    expect(err.code).toBe('timeout');
  });

  it('refuses a content type the config does not allow, and HTTP errors', async () => {
    const err = await refusal(safeFetch(`http://127.0.0.1:${firstPort}/image`, opts()));
    expect(err.code).toBe('content_type');
    expect(err.message).toBe('Content type image/png is not allowed');
    const ok = await safeFetch(`http://127.0.0.1:${firstPort}/image`, opts({ allowedContentTypes: ['image/*'] }));
    expect([...ok.body]).toEqual([0x89, 0x50]);
    expect((await refusal(safeFetch(`http://127.0.0.1:${firstPort}/missing`, opts()))).code).toBe('http_status');
  });
});

describe('htmlToText', () => {
  it('drops scripts, styles, comments and tags, decodes entities, collapses whitespace', () => {
    const html = `<!doctype html><html><head><meta charset="utf-8"><title>Fish &amp; Chips</title>
      <script>var a = "<p>not text</p>";</script><style>body { color: red }</style></head>
      <body><!-- hidden --><h1>Menu</h1>
      <p>Cod   &ndash; &pound;9 &#8364;10 &#x263A;<br>Haddock</p>
      <a href="/x?a=1&b=2" title="a > b">link</a>text<noscript>enable js</noscript>
      <ul><li>one</li><li>two</li></ul>&unknown; &lt;tag&gt;</body></html>`;
    expect(htmlToText(html)).toBe('Fish & Chips\nMenu\nCod – £9 €10 ☺\nHaddock\nlinktext\none\ntwo\n&unknown; <tag>');
  });

  it('survives an unclosed script', () => {
    expect(htmlToText('<p>keep</p><script>while(1){}')).toBe('keep');
  });

  it('reads tags that never close in one pass (each used to scan to the end of the page: quadratic)', () => {
    // 240 KB each: with the old patterns the first took over a minute (96 KB blocked the event loop 14 s),
    // well past the test's time limit; now a few ms.
    const n = 60_000;
    expect(htmlToText(`<p>start</p>${'<a x'.repeat(n)}`).startsWith('start\n<a x<a x')).toBe(true);
    expect(htmlToText(`<p>start</p>${'<!x'.repeat(n)}`).startsWith('start')).toBe(true);
    expect(htmlToText(`<head>${'<title'.repeat(n)}`)).toBe('');
    // Attribute runs that an optional-value grammar backtracks on exponentially (40 repeats, 122 bytes, took
    // 10 s; 44 about a minute, past the test's limit): short on purpose, so a regression fails, not hangs.
    expect(htmlToText(`<a${' x='.repeat(44)}`)).toBe(`<a${' x='.repeat(44)}`);
    expect(htmlToText(`<a${' x = y'.repeat(30)}`)).toBe(`<a${' x = y'.repeat(30)}`);
    // Attributes still read as before: quoted values may hold `<` and `>`, unquoted ones end at a space.
    expect(htmlToText('<p class="a>b" title=\'<x>\' id=x>hi</p><img src=a.png alt="<y>">there')).toBe('hi\nthere');
  });

  it('finds the title in one pass when <title> never closes (quadratic before: 0.5 MB took 6 s, 2.8 MB minutes)', () => {
    expect(htmlToText(`<head>${'<title>'.repeat(400_000)}</head><p>body`)).toBe('body');
    expect(htmlToText('<head><title lang="en">Fish &amp; Chips</title ><title>Second</title></head><p>x')).toBe('Fish & Chips\nx');
    expect(htmlToText('<head><title>Open<title>Still open</title></head>')).toBe('Open\nStill open');
    expect(htmlToText('<head><title>never closed</head><p>x')).toBe('x');
  });

  it('decodes entities as the regex it replaced did, and never from Object.prototype', () => {
    // The replaced pass: one regex, a callback per match (a 2 MB page of "&a" took 0.9 s, now ~30 ms). Its
    // table of names is the one under test (looked up through a lone `&name;`): this compares the scanning.
    const before = (text: string) =>
      text.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z][a-z0-9]*);?/gi, (whole, ref: string) => {
        if (ref[0] === '#') {
          const code = ref[1] === 'x' || ref[1] === 'X' ? parseInt(ref.slice(2), 16) : parseInt(ref.slice(1), 10);
          if (!Number.isFinite(code) || code <= 0 || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return '\uFFFD';
          return String.fromCodePoint(code);
        }
        const lone = `&${ref};`;
        return decodeEntities(lone) === lone ? whole : decodeEntities(lone);
      });
    const pieces = ['&', '&', '&#', '&#x', '#', 'x', 'X', '1', '0', '65', 'f', 'G', 'a', 'A', 'amp', 'AMP', 'lt', ';', ';', ' ', 'eacute', 'shy', 'D800', '110000'];
    let seed = 11;
    const rand = (n: number) => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) % n;
    };
    let decoded = 0;
    for (let n = 0; n < 20_000; n++) {
      const text = Array.from({ length: 1 + rand(12) }, () => pieces[rand(pieces.length)]).join('');
      expect(decodeEntities(text), text).toBe(before(text));
      decoded += before(text) !== text ? 1 : 0;
    }
    expect(decoded).toBeGreaterThan(2_000);
    expect(decodeEntities('&AMP; &Eacute &#X41;&#65 &#0; &#xD800; &#99999999999; &ampx &amp')).toBe('& é AA \uFFFD \uFFFD \uFFFD &ampx &');
    expect(decodeEntities('&constructor; &toString; &hasOwnProperty &__proto__;')).toBe('&constructor; &toString; &hasOwnProperty &__proto__;');
    expect(decodeEntities('a&a'.repeat(500_000))).toBe('a&a'.repeat(500_000));
  });
});

describe('safeFetch name lookups', () => {
  it('at most 2 run at once in the process: names that never resolve hold no more of libuv\'s 4 threads, and a lookup still queued when its fetch ends never starts', async () => {
    let running = 0;
    let most = 0;
    let calls = 0;
    const hung: (() => void)[] = [];
    // A name whose DNS never answers: getaddrinfo holds a libuv thread (4 in all, shared with every other
    // lookup of the gateway, providers' included) until the system resolver gives up, seconds later.
    const resolve = (host: string) => {
      calls++;
      most = Math.max(most, ++running);
      return new Promise<never>((_, reject) => hung.push(() => (running--, reject(Object.assign(new Error(host), { code: 'ETIMEOUT' })))));
    };
    const opts: SafeFetchOptions = { maxBytes: 100, timeoutMs: 300, maxRedirects: 0, allowedContentTypes: ['text/plain'], resolve };
    const errs = await Promise.all(Array.from({ length: 6 }, (_, i) => refusal(safeFetch(`http://slow${i}.example/`, opts))));
    expect(errs.map((e) => e.code)).toEqual(Array(6).fill('timeout'));
    expect(most).toBe(2);
    expect(calls).toBe(2);
    hung.splice(0).forEach((end) => end());
    // The slots come back when the lookups end.
    const ok = (host: string) => (calls++, Promise.resolve([{ address: '10.0.0.1', family: 4 }]));
    expect((await refusal(safeFetch('http://after.example/', { ...opts, resolve: ok }))).code).toBe('blocked_address');
    expect(calls).toBe(3);
  });
});
