import { describe, expect, it } from 'vitest';
import { classifyUpstreamError, upstreamErrorType } from '../../src/providers/upstream-errors';

describe('a prompt too long for the model is context_length_exceeded (spec 7.4), in the wordings providers use', () => {
  it.each([
    ['OpenAI (older models)', "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."],
    ['OpenAI (GPT-5)', 'Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 300000 tokens.'],
    ['Anthropic, prompt and max_tokens', 'input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length or `max_tokens` and try again'],
    ['Anthropic, prompt', 'prompt is too long: 210000 tokens > 200000 maximum'],
    ['Bedrock', 'Input is too long for requested model.'],
    ['others', 'The input exceeds the context window of this model'],
  ])('%s', (_who, message) => {
    expect(upstreamErrorType(400, '', message)).toBe('context_length_exceeded');
  });

  it("the provider's code says so whatever the text (it was read from the text alone)", () => {
    expect(upstreamErrorType(400, 'context_length_exceeded', 'Your input is longer than allowed.')).toBe('context_length_exceeded');
    const e = classifyUpstreamError(400, JSON.stringify({ error: { message: 'Your input is longer than allowed.', type: 'invalid_request_error', code: 'context_length_exceeded' } }), 'p');
    expect(e.errorType).toBe('context_length_exceeded');
    expect(e.message).toBe('Your input is longer than allowed.');
  });

  it('other caller mistakes stay invalid_request (a max_tokens above the model output limit is not a context overflow)', () => {
    expect(upstreamErrorType(400, 'invalid_request_error', 'max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens for claude-x')).toBe('invalid_request');
    expect(upstreamErrorType(400, 'invalid_value', "Invalid value for 'temperature'")).toBe('invalid_request');
  });
});

describe("the operator's provider account (credit, quota, billing) is provider_unavailable, not the caller's mistake or a rate limit", () => {
  it.each([
    ['Anthropic, 400', 400, 'invalid_request_error', 'Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.'],
    ['OpenAI, 429 insufficient_quota', 429, 'insufficient_quota', 'You exceeded your current quota, please check your plan and billing details.'],
    ['OpenAI, billing not active', 429, 'billing_not_active', 'Your account is not active, please check your billing details on our website.'],
  ])('%s', (_who, status, code, message) => {
    expect(upstreamErrorType(status, code, message)).toBe('provider_unavailable');
    // Its text is not the caller's to read: the message names the provider and status only.
    const e = classifyUpstreamError(status, JSON.stringify({ error: { message, code } }), 'p');
    expect(e.message).toBe(`Provider p returned HTTP ${status}`);
  });

  it('an ordinary rate limit stays rate_limit_exceeded', () => {
    expect(upstreamErrorType(429, 'rate_limit_exceeded', 'Rate limit reached for requests')).toBe('rate_limit_exceeded');
  });
});
