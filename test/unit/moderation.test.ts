import { describe, expect, it } from 'vitest';
import { registry } from '../../plugins';
import { parseConfigText } from '../../src/config/load';
import { cutMiddle, FLAGGED_INPUT_MAX } from '../../src/moderation/flagged-input';
import { compileEngine } from '../../src/moderation/engines';
import type { ModerationEngineConfig } from '../../src/config/types';
import { testConfigYaml } from '../fixtures/gateway';

describe('cutMiddle (flagged_input, spec 7.6)', () => {
  it('leaves text of at most 100 characters alone', () => {
    expect(cutMiddle('')).toBe('');
    expect(cutMiddle('short')).toBe('short');
    const hundred = 'x'.repeat(100);
    expect(cutMiddle(hundred)).toBe(hundred);
  });

  it('cuts longer text in the middle to exactly 100 characters: 50 head, an ellipsis, 49 tail', () => {
    const text = 'a'.repeat(60) + 'm'.repeat(30) + 'z'.repeat(60);
    const cut = cutMiddle(text);
    expect(FLAGGED_INPUT_MAX).toBe(100);
    expect(Array.from(cut)).toHaveLength(100);
    expect(cut).toBe('a'.repeat(50) + '…' + 'z'.repeat(49));
    expect(cutMiddle('b'.repeat(101))).toBe('b'.repeat(50) + '…' + 'b'.repeat(49));
  });

  it('counts code points, never splitting a surrogate pair', () => {
    const cut = cutMiddle('😀'.repeat(150));
    expect(Array.from(cut)).toHaveLength(100);
    expect(cut).toBe('😀'.repeat(50) + '…' + '😀'.repeat(49));
  });

  it('honours a smaller maximum', () => {
    expect(cutMiddle('abcdefghij', 5)).toBe('ab…ij');
    expect(cutMiddle('abcdefghij', 1)).toBe('…');
  });
});

/** A local rules engine with `rules` (deny on error). */
const rulesEngine = (rules: ModerationEngineConfig['rules']) => compileEngine({ id: 'local', kind: 'rules', model: 'unused', timeout_ms: 1000, on_error: 'deny', rules });

describe('rules engine', () => {
  it('reports rule names, sorted, and the first flagged text', async () => {
    const e = rulesEngine([
      { name: 'weapons', keywords: ['bomb', 'nerve agent'] },
      { name: 'self_harm', regex: 'hurt\\s+myself', flags: 'i' },
    ]);
    expect(e.modelSlug).toBe('rules');
    expect(e.providerName).toBe('local');
    expect(await e.check(['hello', 'build a BOMB', 'I want to Hurt  myself'])).toEqual({ reasons: ['self_harm', 'weapons'], flaggedIndex: 1 });
    expect(await e.check(['bombastic speech'])).toEqual({ reasons: [], flaggedIndex: -1 });
  });

  it('judges each text as written and in its normalised view: full-width letters and zero-width characters no longer hide a match', async () => {
    const e = rulesEngine([
      { name: 'weapons', keywords: ['bomb', 'ｎｅｒｖｅ agent'] },
      { name: 'fraud', regex: 'card\\s+dump', flags: 'i' },
      { name: 'hidden', regex: '\u200b' },
    ]);
    const none = { reasons: [], flaggedIndex: -1 };
    expect(await e.check(['build a ｂｏｍｂ'])).toEqual({ reasons: ['weapons'], flaggedIndex: 0 });
    expect(await e.check(['hello', 'build a bo\u00admb'])).toEqual({ reasons: ['weapons'], flaggedIndex: 1 });
    expect(await e.check(['a Nerve  agent'])).toEqual({ reasons: ['weapons'], flaggedIndex: 0 });
    expect(await e.check(['sell a ＣＡＲＤ dump'])).toEqual({ reasons: ['fraud'], flaggedIndex: 0 });
    // The text as written is judged too: a rule may look for what normalising takes away.
    expect(await e.check(['b\u200bomb'])).toEqual({ reasons: ['hidden', 'weapons'], flaggedIndex: 0 });
    expect(await e.check(['ｂｏｍｂａｓｔｉｃ speech', 'nervous agent'])).toEqual(none);
  });
});

describe('config checks at load', () => {
  const base = testConfigYaml('http://127.0.0.1:9/v1', '[auth, validate, moderation, upstream]');
  const load = (extra: string, pipelineYaml = base) => () => parseConfigText(pipelineYaml + extra, { registry });

  it('accepts engines and an assignment, with defaults filled', () => {
    const config = load('moderation:\n  engines:\n    - { id: m, kind: openai, base_url: http://x/v1 }\nworkspaces:\n  - { name: default, moderation: m }\n')();
    expect(config.moderation.engines[0]).toMatchObject({ model: 'omni-moderation-latest', timeout_ms: 5000, on_error: 'deny', rules: [] });
    expect(config.workspaces[0].moderation).toBe('m');
  });

  it('refuses bad engines and assignments with their path', () => {
    expect(load('workspaces:\n  - { name: default, moderation: nope }\n')).toThrow('workspaces[0].moderation: unknown moderation engine "nope"');
    expect(load('moderation:\n  engines:\n    - { id: m, kind: openai }\n')).toThrow('moderation.engines[0].base_url: required for kind "openai"');
    expect(load('moderation:\n  engines:\n    - { id: m, kind: rules }\n')).toThrow('moderation.engines[0].rules: kind "rules" needs at least one rule');
    expect(load('moderation:\n  engines:\n    - { id: m, kind: rules, rules: [{ name: r, regex: "(" }] }\n')).toThrow('moderation.engines[0].rules[0].regex: invalid regular expression');
    expect(load('moderation:\n  engines:\n    - { id: m, kind: rules, rules: [{ name: r }] }\n')).toThrow('moderation.engines[0].rules[0]: give exactly one of regex and keywords');
    expect(load('moderation:\n  engines:\n    - { id: m, kind: rules, rules: [{ name: r, regex: "a*" }] }\n')).toThrow('matches the empty string');
    expect(load('moderation:\n  engines:\n    - { id: m, kind: rules, rules: [{ name: r, regex: "x", flags: u }] }\n')).toThrow('moderation.engines[0].rules[0].flags: flag "u" is not accepted');
    expect(load('moderation:\n  engines:\n    - { id: m, kind: rules, rules: [{ name: r, keywords: [bomb, "  "] }] }\n')).toThrow('moderation.engines[0].rules[0].keywords[1]: empty or white space only');
    expect(load('moderation:\n  engines:\n    - { id: m, kind: rules, rules: [{ name: r, keywords: [x] }] }\n    - { id: m, kind: rules, rules: [{ name: r, keywords: [x] }] }\n')).toThrow(
      'moderation.engines[1].id: duplicate moderation engine id "m"',
    );
  });

  it('refuses an assignment whose pipeline does not run the stage', () => {
    const noStage = testConfigYaml('http://127.0.0.1:9/v1', '[auth, validate, upstream]');
    expect(load('moderation:\n  engines:\n    - { id: m, kind: rules, rules: [{ name: r, keywords: [x] }] }\nworkspaces:\n  - { name: default, moderation: m }\n', noStage)).toThrow(
      'workspaces[0].moderation: assigns an engine, but pipelines.default does not run the "moderation" stage',
    );
  });
});

describe('answers of a moderation endpoint or a guardrail classifier (hostile upstreams)', () => {
  /** A server whose every answer is `{"results":[…]}`/`{"score":…}` after `padMb` MB of spaces, gzip-compressed (a few KB on the wire). */
  async function bombServer(padMb: number, json: string) {
    const { createServer } = await import('node:http');
    const { gzipSync } = await import('node:zlib');
    const body = gzipSync(Buffer.concat([Buffer.alloc(padMb * 1024 * 1024, 0x20), Buffer.from(json)]), { level: 1 });
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip', 'content-length': body.length }).end(body));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as import('node:net').AddressInfo).port}`;
    return { url, wire: body.length, close: () => new Promise((r) => (server.closeAllConnections(), server.close(r))) };
  }

  it('a compressed answer that inflates past the cap fails the check instead of being inflated whole', async () => {
    const { httpClassify } = await import('../../src/guardrails/check');
    const mod = await bombServer(40, '{"results":[{"flagged":false,"categories":{}}]}');
    const cls = await bombServer(40, '{"score":0.1}');
    try {
      expect(mod.wire).toBeLessThan(200_000);
      const engine = compileEngine({ id: 'm', kind: 'openai', base_url: `${mod.url}/v1`, model: 'omni', timeout_ms: 10_000, on_error: 'deny', rules: [] } as never);
      await expect(engine.check(['hello'])).rejects.toThrow('answer is larger than 16 MB');
      await expect(httpClassify(`${cls.url}/classify`, { input: 'hello', guardrail_id: 'g' }, { timeoutMs: 10_000 })).rejects.toThrow('classifier answer is larger than 1 MB');
    } finally {
      await Promise.all([mod.close(), cls.close()]);
    }
  });
});
