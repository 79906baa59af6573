import type { WorkspaceConfig } from '../../src/config/types';
import { GatewayError } from '../../src/errors/gateway-error';
import { checkGuardrail, compileGuardrail, httpClassify, type CompiledGuardrail } from '../../src/guardrails/check';
import { requestTexts } from '../../src/guardrails/texts';
import type { GatewayState, PipelineRecord, StageDefinition } from '../../src/pipeline/types';
import type { Services } from '../../src/services';
import type { KeyRecord } from '../../src/store/types';
import schema from './schema.json';

/** Where a guardrail was assigned: `guardrail_scope` of spec 7.8's pipeline records. */
export type GuardrailScope = 'workspace_default' | 'member' | 'api_key';

const SCOPE_WORDS: Record<GuardrailScope, string> = { workspace_default: 'workspace default', member: 'member', api_key: 'API key' };

/**
 * The guardrails that apply to a key, in the order they run: the workspace default, the member's (the
 * key's creator), the key's own (by key id or name). A guardrail assigned at two scopes runs once, at the
 * first.
 */
export function assignedGuardrails(workspace: WorkspaceConfig | undefined, key: KeyRecord): { id: string; scope: GuardrailScope }[] {
  if (!workspace) return [];
  const out: { id: string; scope: GuardrailScope }[] = [];
  const add = (id: string | undefined, scope: GuardrailScope) => {
    if (id !== undefined && !out.some((g) => g.id === id)) out.push({ id, scope });
  };
  add(workspace.default_guardrail, 'workspace_default');
  add(workspace.members.find((m) => m.user_id === key.creatorUserId)?.guardrail, 'member');
  add(workspace.keys.find((k) => k.key === key.id || k.key === key.name)?.guardrail, 'api_key');
  return out;
}

/**
 * `guardrail`: the content rules of the guardrails assigned to the request's workspace, member and key
 * (README "Guardrails"), before routing. Every text the model will read is checked; a match blocks (403
 * `permission_denied` with `error.metadata.patterns`), is redacted in the body that goes upstream, or is
 * flagged; each guardrail that ran leaves a record in `gateway_metadata.pipeline` and an event on the trace.
 * Guardrails are operator policy: no request field turns them off.
 */
export const guardrail: StageDefinition<Record<string, never>, Services> = {
  id: 'guardrail',
  configSchema: schema,
  beforeUpstream: true,
  create(_config, services) {
    // Guardrails without content rules (budget only) have no engines and are skipped.
    const compiled = new Map<string, CompiledGuardrail>();
    for (const g of services.config.guardrails) {
      const c = compileGuardrail(g);
      if (c.engines.length > 0) compiled.set(c.id, c);
    }
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      const key = state.key;
      if (compiled.size > 0 && key && state.body && (state.endpoint === 'messages' || state.endpoint === 'chat_completions')) {
        const workspace = await services.spend.workspaceConfig(key, services.config);
        for (const { id, scope } of assignedGuardrails(workspace, key)) {
          const g = compiled.get(id);
          if (g) await apply(g, scope, state, services);
        }
      }
      await next();
    };
  },
};

async function apply(g: CompiledGuardrail, scope: GuardrailScope, state: GatewayState, services: Services): Promise<void> {
  // Collected afresh for each guardrail: an earlier one may have redacted the texts.
  const slots = requestTexts(state.body!, state.endpoint);
  // The classifier call is given up when the client leaves (it had run on to its timeout). `state.signal`
  // is read only when there is a call to make: it makes an AbortSignal.
  const outcome = await checkGuardrail(g, slots, (url, body, limits) => httpClassify(url, body, { ...limits, signal: state.signal }));
  // Aborted with the request (the client left, a shutdown cut it): no engine failed, the endpoint ends it.
  if (state.abort.aborted) throw state.abort.reason;
  const detected = outcome.patterns.length > 0;
  const failedClosed = !detected && outcome.error !== null && g.onError === 'deny';
  // A classifier verdict has no span to redact, so under `redact` it blocks rather than pass unredacted.
  const action = failedClosed || (detected && (g.action === 'block' || (g.action === 'redact' && outcome.unredactable))) ? 'block' : detected ? g.action : 'allow';
  const where = `guardrail "${g.id}" (${SCOPE_WORDS[scope]})`;
  const summary = failedClosed
    ? `blocked: ${where} could not complete its check and fails closed`
    : detected
      ? `${action === 'block' ? 'blocked' : action === 'redact' ? 'redacted' : 'flagged'}: ${outcome.patterns.join(', ')}`
      : outcome.error
        ? `allowed: the check failed and ${where} fails open`
        : 'no match';
  const record: PipelineRecord = {
    type: 'guardrail',
    name: g.id,
    guardrail_id: g.id,
    guardrail_scope: scope,
    summary,
    data: { action, detected, engines: g.engines, patterns: outcome.patterns, ...(outcome.error ? { error: outcome.error } : {}) },
  };
  state.pipeline.push(record);
  state.span.addEvent('guardrail', {
    'gateway.guardrail.id': g.id,
    'gateway.guardrail.scope': scope,
    'gateway.guardrail.action': action,
    'gateway.guardrail.patterns': outcome.patterns,
    ...(outcome.error ? { 'gateway.guardrail.error': outcome.error } : {}),
  });
  if (outcome.error) services.logger.warn({ guardrail_id: g.id, on_error: g.onError, reason: outcome.error }, 'guardrail engine failed');
  if (action === 'redact') outcome.redactAll();
  if (action === 'block') {
    const message = failedClosed
      ? `Request blocked: ${where} could not complete its check (${outcome.error}) and is set to deny on error`
      : `Request blocked by ${where}: it matched ${outcome.patterns.join(', ')}`;
    throw new GatewayError('permission_denied', message, { metadata: { patterns: outcome.patterns, guardrail_id: g.id, guardrail_scope: scope } });
  }
}
