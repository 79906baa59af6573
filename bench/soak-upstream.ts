import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The soak test's upstream: both API styles, streams only, paced (a pause of `paceMs` after every second event) so a client can
 * leave in the middle. The upstream model name picks the behaviour:
 * - `ok`: a full 20-chunk stream;
 * - `die`: five chunks, then the socket is destroyed (an upstream that dies mid-stream);
 * - `fail`: 500 before any output (the gateway falls back to its next endpoint).
 * Also answers POST /v1/traces (OTLP) with 200.
 */
export function startSoakUpstream(paceMs: number, port = 0): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = req.url ?? '';
      if (url.endsWith('/traces')) return void res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as { model?: string };
      if (body.model === 'fail') return void res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":{"message":"soak: injected failure"}}');
      const events = url.endsWith('/messages') ? messagesEvents() : chatEvents();
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      void pace(res, events, paceMs, body.model === 'die' ? 5 : Infinity);
    });
  });
  server.keepAliveTimeout = 60_000;
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve({ server, port: (server.address() as AddressInfo).port })));
}

async function pace(res: ServerResponse, events: string[], paceMs: number, dieAfter: number): Promise<void> {
  for (let i = 0; i < events.length; i++) {
    if (res.destroyed) return;
    if (i === dieAfter) return void res.socket?.destroy();
    res.write(events[i]);
    if (paceMs > 0 && i % 2 === 1) await new Promise((r) => setTimeout(r, paceMs));
  }
  res.end();
}

const WORDS = 'the quick brown fox jumps over the lazy dog and keeps running far away into the green forest today'.split(' ');

function chatEvents(): string[] {
  const base = { id: 'chatcmpl-soak', object: 'chat.completion.chunk', created: 1700000000, model: 'soak' };
  const out = Array.from({ length: 20 }, (_, i) => {
    const w = WORDS[i % WORDS.length];
    return `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: i ? { content: ` ${w}` } : { role: 'assistant', content: w }, finish_reason: i === 19 ? 'stop' : null }] })}\n\n`;
  });
  out.push(`data: ${JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: 12, completion_tokens: 20, total_tokens: 32 } })}\n\n`, 'data: [DONE]\n\n');
  return out;
}

function messagesEvents(): string[] {
  const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  const out = [
    ev('message_start', { message: { id: 'msg_soak', type: 'message', role: 'assistant', model: 'soak', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 12, output_tokens: 1 } } }),
    ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
  ];
  for (let i = 0; i < 15; i++) out.push(ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: i ? ` ${WORDS[i]}` : WORDS[i] } }));
  out.push(ev('content_block_stop', { index: 0 }), ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 20 } }), ev('message_stop', {}));
  return out;
}

if (require.main === module) {
  void startSoakUpstream(Number(process.argv[2] ?? 2), Number(process.argv[3] ?? 0)).then(({ port }) => process.stdout.write(`soak upstream listening on ${port}\n`));
}
