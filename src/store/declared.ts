import type { Logger } from 'pino';
import type { GatewayConfig } from '../config/types';
import type { Account, Store, Workspace } from './types';

/**
 * Makes the store hold what gateway.yaml declares: the `default` account and workspace every store has
 * (so a first start needs no setup), plus each declared workspace in its declared account. A workspace that
 * already exists keeps its account (moving a workspace between accounts is not done behind an operator's back).
 */
export async function ensureDeclared(store: Store, config: GatewayConfig): Promise<{ account: Account; workspace: Workspace; elsewhere: Misplaced[] }> {
  const account = await store.ensureAccount('default');
  const workspace = await store.ensureWorkspace('default', account.id);
  for (const a of config.accounts) await store.ensureAccount(a.name);
  const elsewhere: Misplaced[] = [];
  for (const w of config.workspaces) {
    const owner = await store.ensureAccount(w.account);
    const kept = await store.ensureWorkspace(w.name, owner.id);
    if (kept.accountId !== owner.id) elsewhere.push({ workspace: w.name, declared: w.account, accountId: kept.accountId });
  }
  return { account, workspace, elsewhere };
}

/**
 * A declared workspace the store already had under another account: it keeps that one, so its requests bill
 * an account other than the one gateway.yaml names. `serve` warns, naming both (it had been silent).
 */
export interface Misplaced {
  workspace: string;
  /** The account gateway.yaml declares for it. */
  declared: string;
  /** The id of the account it has in the store (and bills). */
  accountId: string;
}

/** Logs each `Misplaced` workspace (at start and on a reload, which declare alike). */
export function warnMisplaced(elsewhere: readonly Misplaced[], logger: Logger): void {
  for (const m of elsewhere) logger.warn(m, misplacedMessage(m));
}

/** What `serve`, a reload and the CLI tell the operator of a declared workspace the store keeps under another account. */
export function misplacedMessage(m: Misplaced): string {
  return `workspace "${m.workspace}" was in the store under another account before gateway.yaml declared it in "${m.declared}": it keeps that account (its requests bill it), as a workspace is not moved between accounts behind an operator's back`;
}
