import { inputTokens } from '../src/spend/estimate';
import { agentChatBody as request } from './config';

/**
 * `npm run bench:estimate`: what the spend estimate's token count costs an agent-like request (a long system
 * prompt and tool list sent with every request, a conversation that grows by a turn each time), the first
 * time and once its texts were seen: the time of `inputTokens` on the event loop, in microseconds.
 */
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
