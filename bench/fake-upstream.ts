import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The benchmark's upstream: both API styles, fixed ~300-byte answers and 20-chunk streams, no delay.
 * Every answer is prebuilt once so the fake costs as little as possible and the gateway is what is measured.
 */
const CHAT_JSON = Buffer.from(
  JSON.stringify({
    id: 'chatcmpl-bench000000000000000000000001',
    object: 'chat.completion',
    created: 1700000000,
    model: 'bench-upstream',
    choices: [{ index: 0, message: { role: 'assistant', content: 'The quick brown fox jumps over the lazy dog. '.repeat(2).trim() }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 12, completion_tokens: 20, total_tokens: 32 },
  }),
);

const MESSAGES_JSON = Buffer.from(
  JSON.stringify({
    id: 'msg_bench0000000000000000000001',
    type: 'message',
    role: 'assistant',
    model: 'bench-upstream',
    content: [{ type: 'text', text: 'The quick brown fox jumps over the lazy dog. '.repeat(2).trim() }],
    stop_reason: 'end_turn',
    stop_sequence: null,
    usage: { input_tokens: 12, output_tokens: 20, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 },
  }),
);

const WORDS = 'The quick brown fox jumps over the lazy dog and keeps running far away into the green forest today'.split(' ');

function chatStream(withUsage: boolean): Buffer {
  const base = { id: 'chatcmpl-bench000000000000000000000001', object: 'chat.completion.chunk', created: 1700000000, model: 'bench-upstream' };
  const parts: string[] = [];
  for (let i = 0; i < 20; i++) {
    const delta = i === 0 ? { role: 'assistant', content: WORDS[i] } : { content: ` ${WORDS[i]}` };
    // As OpenAI does: once `include_usage` is set (the gateway always sets it), every chunk has `"usage":null`.
    parts.push(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, finish_reason: i === 19 ? 'stop' : null }], ...(withUsage ? { usage: null } : {}) })}\n\n`);
  }
  if (withUsage) parts.push(`data: ${JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: 12, completion_tokens: 20, total_tokens: 32 } })}\n\n`);
  parts.push('data: [DONE]\n\n');
  return Buffer.from(parts.join(''));
}

function messagesStream(): Buffer {
  const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  const parts = [
    ev('message_start', {
      message: { id: 'msg_bench0000000000000000000001', type: 'message', role: 'assistant', model: 'bench-upstream', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 12, output_tokens: 1 } },
    }),
    ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
  ];
  for (let i = 0; i < 15; i++) parts.push(ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: i ? ` ${WORDS[i]}` : WORDS[i] } }));
  parts.push(ev('content_block_stop', { index: 0 }));
  parts.push(ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 20 } }));
  parts.push(ev('message_stop', {}));
  return Buffer.from(parts.join('')); // 20 events
}

const STREAMS = { chat: chatStream(false), chatUsage: chatStream(true), messages: messagesStream() };

/** Starts the fake on `port` (0 = any). Also answers POST /v1/traces (OTLP/HTTP protobuf) so telemetry can export. */
export function startBenchUpstream(port = 0, host = '127.0.0.1'): Promise<{ server: Server; port: number; url: string }> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = req.url ?? '';
      // An empty ExportTraceServiceResponse, as a collector answers a full success (the exporter decodes it).
      if (url.endsWith('/traces')) return void res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': 0 }).end();
      const body = Buffer.concat(chunks).toString('latin1');
      // A substring test is enough for a fake and costs nothing next to a JSON parse.
      const stream = body.includes('"stream":true');
      if (url.endsWith('/chat/completions')) {
        if (!stream) return void res.writeHead(200, { 'content-type': 'application/json', 'content-length': CHAT_JSON.length }).end(CHAT_JSON);
        const out = body.includes('"include_usage":true') ? STREAMS.chatUsage : STREAMS.chat;
        return void res.writeHead(200, { 'content-type': 'text/event-stream', 'content-length': out.length }).end(out);
      }
      if (url.endsWith('/messages')) {
        if (!stream) return void res.writeHead(200, { 'content-type': 'application/json', 'content-length': MESSAGES_JSON.length }).end(MESSAGES_JSON);
        return void res.writeHead(200, { 'content-type': 'text/event-stream', 'content-length': STREAMS.messages.length }).end(STREAMS.messages);
      }
      res.writeHead(404).end();
    });
  });
  server.keepAliveTimeout = 60_000;
  return new Promise((resolve) =>
    server.listen(port, host, () => {
      const p = (server.address() as AddressInfo).port;
      resolve({ server, port: p, url: `http://${host}:${p}/v1` });
    }),
  );
}

if (require.main === module) {
  const port = Number(process.argv[2] ?? 0);
  void startBenchUpstream(port).then(({ port: p }) => process.stdout.write(`fake upstream listening on ${p}\n`));
}
