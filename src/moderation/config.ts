import type { GatewayConfig, ModerationEngineConfig } from '../config/types';
import { operatorPatternProblem } from '../operator-regexp';
import { keywordsProblem } from '../guardrails/detectors';
import { pipelineOf } from '../pipeline/request-plugins';

/**
 * Why the `moderation` section or a workspace's `moderation` assignment is wrong, with the field path (a
 * config error at load), or null: duplicate engine ids, an `openai` engine without `base_url`, a `rules`
 * engine without rules, a rule with neither or both of `regex` and `keywords`, a regex that does not compile
 * or matches the empty string, an assignment to an unknown engine, and an assignment whose chat or
 * messages pipeline does not run the stage (an unenforced policy would be a silent hole).
 */
export function moderationConfigProblem(config: GatewayConfig): string | null {
  const ids = new Set<string>();
  for (const [i, e] of config.moderation.engines.entries()) {
    const at = `moderation.engines[${i}]`;
    if (ids.has(e.id)) return `${at}.id: duplicate moderation engine id "${e.id}"`;
    ids.add(e.id);
    const problem = engineProblem(e, at);
    if (problem) return problem;
  }
  const assigned = config.workspaces.findIndex((w) => w.moderation !== undefined);
  for (const [i, w] of config.workspaces.entries()) {
    if (w.moderation !== undefined && !ids.has(w.moderation)) return `workspaces[${i}].moderation: unknown moderation engine "${w.moderation}"`;
  }
  if (assigned >= 0) {
    for (const endpoint of ['chat_completions', 'messages'] as const) {
      if (!pipelineOf(config, endpoint).includes('moderation')) {
        const named = endpoint === 'messages' ? config.pipelines.messages : config.pipelines.chat_completions;
        return `workspaces[${assigned}].moderation: assigns an engine, but pipelines.${named ? endpoint : 'default'} does not run the "moderation" stage`;
      }
    }
  }
  return null;
}

function engineProblem(e: ModerationEngineConfig, at: string): string | null {
  if (e.kind === 'openai') {
    if (!e.base_url) return `${at}.base_url: required for kind "openai"`;
    return null;
  }
  if (e.rules.length === 0) return `${at}.rules: kind "rules" needs at least one rule`;
  for (const [j, r] of e.rules.entries()) {
    const rat = `${at}.rules[${j}]`;
    if ((r.regex === undefined) === (r.keywords === undefined)) return `${rat}: give exactly one of regex and keywords`;
    const keywords = r.keywords && keywordsProblem(r.keywords, `${rat}.keywords`);
    if (keywords) return keywords;
    if (r.regex === undefined) continue;
    const problem = operatorPatternProblem(r.regex, r.flags ?? '', rat);
    if (problem) return problem;
  }
  return null;
}
