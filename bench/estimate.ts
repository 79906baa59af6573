import { readFileSync } from 'node:fs';
import path from 'node:path';
import { inputTokens } from '../src/spend/estimate';

/**
 * `npm run bench:estimate`: what the spend estimate's token count costs an agent-like request (a long system
 * prompt and tool list sent with every request, a conversation that grows by a turn each time), the first
 * time and once its texts were seen: the time of `inputTokens` on the event loop, in microseconds.
 */
const ROOT = path.resolve(__dirname, '..', '..');
const text = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
const at = (from: number, chars: number) => text.slice(from % (text.length - chars), (from % (text.length - chars)) + chars);

function request(turns: number, variant: number) {
  const messages: { role: string; content: string }[] = [{ role: 'system', content: `${variant} ${at(0, 20_000)}` }];
  for (let i = 0; i < turns; i++) {
    messages.push({ role: 'user', content: `${variant} ${at(20_000 + i * 3_000, 800)}` });
    messages.push({ role: 'assistant', content: `${variant} ${at(21_000 + i * 3_000, 2_000)}` });
  }
  messages.push({ role: 'user', content: `${variant} ${at(50_000 + turns * 997, 400)}` });
  const tools = Array.from({ length: 12 }, (_, i) => ({ type: 'function', function: { name: `tool_${i}`, description: `${variant} ${at(60_000 + i * 900, 800)}`, parameters: { type: 'object', properties: { q: { type: 'string' } } } } }));
  return { model: 'm', messages, tools };
}

function time(body: Record<string, unknown>): number {
  const start = process.hrtime.bigint();
  inputTokens(body);
  return Number(process.hrtime.bigint() - start) / 1000;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
// Loads the tokenizer's tables and warms the JIT on texts of another variant.
for (let v = -20; v < 0; v++) inputTokens(request(5, v));
const rows: string[] = ['| turns | characters | first time µs | next turn µs | same request again µs |', '|---:|---:|---:|---:|---:|'];
for (const turns of [0, 5, 20]) {
  const first: number[] = [];
  const next: number[] = [];
  const again: number[] = [];
  for (let i = 0; i < 9; i++) {
    // A conversation never seen (every text carries `v`), then the same with one more turn, then that again.
    const v = turns * 100 + i;
    first.push(time(request(turns, v)));
    next.push(time(request(turns + 1, v)));
    again.push(time(request(turns + 1, v)));
  }
  rows.push(`| ${turns} | ${JSON.stringify(request(turns, 0)).length} | ${Math.round(median(first))} | ${Math.round(median(next))} | ${Math.round(median(again))} |`);
}
process.stdout.write(`${rows.join('\n')}\n`);
