import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

/**
 * Issue 8, "a test greps all output of a full test run's server logs for the test keys and finds none":
 * every gateway a test starts writes its log lines and the secrets it knows into this folder when it ends
 * (test/fixtures/audit.ts): one started in process through `startTestGateway` (the gateway keys created for
 * it, the provider keys of its config), and every CLI child process (test/fixtures/cli.ts: the keys a
 * `keys create` printed, the secrets of its config file, environment and stdin; for `serve`, all it wrote).
 * After the whole run this teardown searches every log line of every test for every secret and fails the
 * run if one appears.
 */
export function setup(): () => void {
  const dir = mkdtempSync(path.join(tmpdir(), 'gw-log-audit-'));
  process.env.GATEWAY_TEST_AUDIT_DIR = dir;
  return () => {
    try {
      const read = (prefix: string) =>
        readdirSync(dir)
          .filter((f) => f.startsWith(prefix))
          .map((f) => readFileSync(path.join(dir, f), 'utf8'))
          .join('\n');
      const logs = read('logs-');
      const secrets = [...new Set(read('secrets-').split('\n').filter((s) => s.length >= 12))];
      const leaked = secrets.filter((s) => logs.includes(s));
      process.stdout.write(`log audit: ${secrets.length} secrets searched in ${logs.length} characters of gateway logs, ${leaked.length} found\n`);
      // A run of unit tests alone starts no gateway: nothing to audit (the line above then says 0 secrets).
      const problem = leaked.length > 0 ? `log audit: secrets found in gateway logs: ${leaked.map((s) => `${s.slice(0, 6)}…`).join(', ')}` : null;
      if (problem) {
        // vitest reports a teardown error but still exits 0: the exit code is set here so CI fails.
        process.exitCode = 1;
        throw new Error(problem);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
}
export default setup;
