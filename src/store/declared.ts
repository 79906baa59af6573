import type { GatewayConfig } from '../config/types';
import type { Account, Store, Workspace } from './types';

/**
 * Makes the store hold what gateway.yaml declares: the `default` account and workspace every store has
 * (so a first start needs no setup), plus each declared workspace in its declared account. A workspace that
 * already exists keeps its account (moving a workspace between accounts is not done behind an operator's back).
 */
export async function ensureDeclared(store: Store, config: GatewayConfig): Promise<{ account: Account; workspace: Workspace }> {
  const account = await store.ensureAccount('default');
  const workspace = await store.ensureWorkspace('default', account.id);
  for (const a of config.accounts) await store.ensureAccount(a.name);
  for (const w of config.workspaces) {
    const owner = await store.ensureAccount(w.account);
    await store.ensureWorkspace(w.name, owner.id);
  }
  return { account, workspace };
}
