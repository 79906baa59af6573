import { describe, expect, it } from 'vitest';
import { applyPreset } from '../../src/presets/apply';
import { Presets } from '../../src/presets/lookup';
import type { PresetWithVersion, Store } from '../../src/store/types';

const preset = (version: number, model: string) =>
  ({ preset: { workspaceId: 'ws', slug: 'p' }, version: { version, model } }) as unknown as PresetWithVersion;

/** A store whose preset reads wait until released, as a PostgreSQL round trip can outlast a write. */
function slowStore(value: () => PresetWithVersion) {
  const waiting: (() => void)[] = [];
  const store = {
    findPreset: async () => {
      const read = value(); // what the database held when the read ran
      await new Promise<void>((r) => waiting.push(r));
      return read;
    },
  } as unknown as Store;
  return { store, release: () => waiting.splice(0).forEach((r) => r()) };
}

describe('Presets.find', () => {
  it('a read that a write in this process overtook does not put the replaced version back', async () => {
    let stored = preset(1, 'old');
    const { store, release } = slowStore(() => stored);
    const presets = new Presets(store, 60_000);
    const reading = presets.find('ws', 'p'); // reads version 1
    stored = preset(2, 'new');
    presets.remember(stored); // the write's 200
    release();
    expect((await reading)?.version.version).toBe(2);
    expect((await presets.find('ws', 'p'))?.version.version).toBe(2); // cached: no read
  });

  it('caches what it read when no write came between', async () => {
    const { store, release } = slowStore(() => preset(1, 'old'));
    const presets = new Presets(store, 60_000);
    const reading = presets.find('ws', 'p');
    release();
    expect((await reading)?.version.version).toBe(1);
    expect((await presets.find('ws', 'p'))?.version.version).toBe(1);
  });
});

describe('applyPreset', () => {
  it("a /messages request gets its own copy of the version's system blocks (the version is cached; a redaction edits blocks in place)", () => {
    const blocks = [{ type: 'text', text: 'Call 555-0100.', cache_control: { type: 'ephemeral' } }];
    const found = { preset: { workspaceId: 'ws', slug: 'p' }, version: { version: 1, config: {}, systemPrompt: 'Call 555-0100.', systemBlocks: blocks } } as unknown as PresetWithVersion;
    const first = applyPreset({ messages: [] }, 'messages', { slug: 'p' }, found);
    (first.system as { text: string }[])[0].text = '[REDACTED]';
    expect(applyPreset({ messages: [] }, 'messages', { slug: 'p' }, found).system).toEqual([{ type: 'text', text: 'Call 555-0100.', cache_control: { type: 'ephemeral' } }]);
    expect(blocks[0].text).toBe('Call 555-0100.');
  });

  it("every value of the version is the request's own copy: an edit in place does not reach the next request", () => {
    const config = JSON.parse('{"tools":[{"name":"f","input_schema":{"type":"object","properties":{"__proto__":{"type":"string"}}}}],"thinking":{"type":"enabled","budget_tokens":2048},"plugins":[{"id":"web"}]}');
    const found = { preset: { workspaceId: 'ws', slug: 'p' }, version: { version: 1, config, systemPrompt: null, systemBlocks: null } } as unknown as PresetWithVersion;
    const saved = JSON.stringify(config);
    for (const dialect of ['messages', 'chat_completions'] as const) {
      const first = applyPreset({ messages: [] }, dialect, { slug: 'p' }, found) as any;
      (dialect === 'messages' ? first.tools[0].input_schema : first.tools[0].function.parameters).type = 'edited';
      if (first.thinking) first.thinking.budget_tokens = 1;
      first.plugins[0].enabled = false;
    }
    expect(JSON.stringify(config)).toBe(saved);
    // A `__proto__` field (as JSON.parse makes it: an own field) is copied as one.
    const applied = applyPreset({ messages: [] }, 'messages', { slug: 'p' }, found);
    expect(JSON.stringify(applied.tools)).toBe(JSON.stringify(config.tools));
  });

  it("a preset of more than 4 cache breakpoints keeps its last 4 on /messages (the upstream refuses more)", () => {
    const cc = { type: 'ephemeral' };
    const tools = ['a', 'b', 'c'].map((name) => ({ name, input_schema: { type: 'object' }, cache_control: cc }));
    const systemBlocks = ['x', 'y', 'z'].map((text) => ({ type: 'text', text, cache_control: cc }));
    const found = { preset: { workspaceId: 'ws', slug: 'p' }, version: { version: 1, config: { tools }, systemPrompt: 'x', systemBlocks } } as unknown as PresetWithVersion;
    const applied = applyPreset({ messages: [{ role: 'user', content: 'hi' }] }, 'messages', { slug: 'p' }, found) as any;
    expect(applied.tools.map((t: any) => !!t.cache_control)).toEqual([false, false, true]);
    expect(applied.system.map((b: any) => !!b.cache_control)).toEqual([true, true, true]);
    expect(tools.every((t) => t.cache_control === cc)).toBe(true); // the cached version is as saved
  });
});
