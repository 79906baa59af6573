import { describe, expect, it } from 'vitest';
import { DEFAULT_JUDGE_PROMPT, judgeBody } from '../../plugins/fusion/judge';

describe('fusion judge prompt', () => {
  it('fills each placeholder once: braces and $-patterns in the question and answers stay as written', () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'List {count} items, then {answers} and $& please' }] };
    const out = judgeBody({ body, judge: 'j', answers: ['A {question}', 'B'], template: DEFAULT_JUDGE_PROMPT, stream: false });
    const text = (out.messages as { content: string }[]).at(-1)!.content;
    expect(text).toContain('List {count} items, then {answers} and $& please');
    expect(text).toContain('Answer 1:\nA {question}');
    expect(text).toContain('2 candidate answers');
    expect(text).not.toMatch(/\{count\} candidate/);
  });
});
