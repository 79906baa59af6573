import { describe, expect, it } from 'vitest';
import { parseConfigText } from '../../src/config/load';
import { openStore } from '../../src/store';
import { ensureDeclared } from '../../src/store/declared';
import { registry } from '../../plugins/index';
import { testConfigYaml } from '../fixtures/gateway';

describe('ensureDeclared', () => {
  it('creates declared accounts and workspaces, and names a declared workspace the store already had under another account (it keeps that one)', async () => {
    const store = await openStore({ driver: 'sqlite', path: ':memory:' } as never);
    try {
      const first = await ensureDeclared(store, parseConfigText(testConfigYaml(), { registry, env: {} }));
      // Made before gateway.yaml declared it (e.g. by `keys create --workspace team-a`): in the default account.
      await store.ensureWorkspace('team-a', first.account.id);
      const yaml = `${testConfigYaml()}accounts:\n  - { name: default }\n  - { name: acme, billing: prepaid }\nworkspaces:\n  - { name: team-a, account: acme }\n  - { name: team-b, account: acme }\n`;
      const second = await ensureDeclared(store, parseConfigText(yaml, { registry, env: {} }));
      const acme = await store.ensureAccount('acme');
      expect(second.elsewhere).toEqual([{ workspace: 'team-a', declared: 'acme', accountId: first.account.id }]);
      expect((await store.ensureWorkspace('team-b', 'unused')).accountId).toBe(acme.id);
      // Declared again, nothing has changed: the same one is named again (serve warns at every start).
      expect((await ensureDeclared(store, parseConfigText(yaml, { registry, env: {} }))).elsewhere).toHaveLength(1);
    } finally {
      await store.close();
    }
  });
});
