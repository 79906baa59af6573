import { afterEach, describe, expect, it } from 'vitest';
import { post, startTestGateway, type TestGateway } from '../fixtures/gateway';
import { videoConfigYaml } from '../fixtures/videos';

/** Spec 4.3-4.5 edge cases: what a client can put in a path or a body that an answer quotes or a store is asked. */

let open: TestGateway[] = [];
afterEach(async () => {
  await Promise.all(open.map((g) => g.close()));
  open = [];
});

async function start(yaml = videoConfigYaml()): Promise<TestGateway> {
  const g = await startTestGateway({ yaml });
  open.push(g);
  return g;
}

describe('POST /presets/{slug}/messages: odd values', () => {
  it('an unknown model is named cut at 200 characters, in the message and in metadata.model, as the inference endpoints do', async () => {
    const g = await start();
    const long = 'x'.repeat(5000);
    for (const body of [{ model: long }, { model: 'sim/chat', models: [long] }, { model: 'sim/chat', fallbacks: [{ model: long }] }]) {
      const res = await post(`${g.url}/presets/p/messages`, g.managementKey, { ...body, messages: [] });
      expect(res.status).toBe(404);
      expect(res.json.error.message).toBe(`Model \`${'x'.repeat(200)}…\` is not available on this gateway (see GET /models)`);
      expect(res.json.error.metadata).toEqual({ error_type: 'not_found', model: `${'x'.repeat(200)}…` });
    }
  });
});
