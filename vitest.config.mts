import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 20000,
    hookTimeout: 30000,
    pool: 'forks',
    // After the run: no secret of any test gateway appears in any gateway log line (test/log-audit.ts).
    globalSetup: ['test/log-audit.ts'],
  },
});
