import { diag } from '@opentelemetry/api';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { routeDiagToLog } from '../../src/telemetry/diag-log';

describe("OpenTelemetry's own warnings and errors in the gateway's log", () => {
  afterEach(() => diag.disable());

  it('a failed export is logged at warn with its reason, once a minute however often it repeats', () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(JSON.parse(l)) });
    let now = 0;
    routeDiagToLog(logger, () => now);
    for (let i = 0; i < 5; i++) diag.error('OTLP span export failed', new Error('connect ECONNREFUSED 127.0.0.1:4318'));
    diag.debug('chatter');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 40, msg: 'telemetry: OTLP span export failed', reason: 'connect ECONNREFUSED 127.0.0.1:4318' });
    now = 61_000;
    diag.error('OTLP span export failed', new Error('connect ECONNREFUSED 127.0.0.1:4318'));
    expect(lines).toHaveLength(2);
    expect(lines[1]).toMatchObject({ repeated: 4 });
  });
});
