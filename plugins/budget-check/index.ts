import type { StageDefinition } from '../../src/pipeline/types';
import type { Services } from '../../src/services';
import { SpendControl } from '../../src/spend/control';
import schema from './schema.json';

/**
 * `budget-check`: the spend checks of spec 8.4 and 8.2 before any provider is contacted (guardrail budgets,
 * workspace budgets, the key's limit, the balance, the in-flight budget; see src/spend/control.ts). The
 * request's estimate is held while it runs and settled to its actual cost when it ends. A later stage that
 * calls upstreams in the request's place (fusion, the web-fetch tool loop) widens the hold to cover them.
 */
export const budgetCheck: StageDefinition<Record<string, never>, Services> = {
  id: 'budget-check',
  configSchema: schema,
  keepsBody: true,
  beforeUpstream: true,
  create(_config, services) {
    return async (ctx, next) => {
      const state = ctx.state.gateway;
      const models = SpendControl.modelsOf(state.body);
      const hold = (state.spendHold = { admission: await services.spend.admit(services.config, services.models, state), models });
      state.onFinish.push(() => {
        if (hold.admission) services.spend.settle(hold.admission, state);
      });
      await next();
    };
  },
};
