/**
 * What the schema's type coercion would hide: a key written with no value (`port:`, `prompt: ~`) is YAML
 * null, which Ajv's `coerceTypes` turns into 0, false or "" (a free model, a random port, a drain timeout of
 * 0); and `.inf` or `1e400`, which are numbers to JSON Schema but no price or limit (a cost of Infinity
 * cannot be written to the ledger). Both are refused, naming the path. A stage's own section may be empty
 * (`plugins: { web: }` means "web with its defaults").
 *
 * @example configValueProblem({ server: { port: null } }) // 'server.port: has no value (write one, or remove the line for the default)'
 */
export function configValueProblem(root: unknown): string | undefined {
  return walk(root, '');
}

function walk(value: unknown, at: string): string | undefined {
  if (value === null) {
    if (/^plugins\.[^.[\]]+$/.test(at)) return undefined;
    return `${at || '(root)'}: has no value (write one, or remove the line for the default)`;
  }
  if (typeof value === 'number') return Number.isFinite(value) ? undefined : `${at}: must be a finite number`;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const problem = walk(value[i], `${at}[${i}]`);
      if (problem) return problem;
    }
    return undefined;
  }
  if (typeof value === 'object') {
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
      const problem = walk(v, at ? `${at}.${k}` : k);
      if (problem) return problem;
    }
  }
  return undefined;
}
