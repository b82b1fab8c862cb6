// tests/server/reasoning.test.mjs — chat answers split into reasoning_content and content through a real socket
// (server/reasoning.h, docs/chat.md#reasoning): a think block forced by guided_regex (the random test model would
// never write one), whole and streamed, whose deltas join to the whole message byte for byte; reasoning_tokens
// counted from the tokens' own bytes; enable_thinking false and reasoning_parser none; a block the prompt opened
// (continue_final_message on an assistant turn that began one); the developer role; continue_final_message's prompt
// against /v1/completions given the same text. Run by tests/test_reasoning.sh.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { request, sseEvents, startServer } from './lib.mjs';

const CTX = 512;
const post = (srv, body) => request(srv.port, 'POST', '/v1/chat/completions', body);
const complete = (srv, body) => request(srv.port, 'POST', '/v1/completions', body);
// A block, blank lines, an answer: the shape Qwen3 writes. Letters and spaces only inside, so that the split's text
// is the tokens' bytes as they are.
const THINK = '<think>[a-z ]{3,12}</think>\n\n[a-z ]{2,10}';
const Q = [{ role: 'user', content: 'Why is the sky blue?' }];
// conf/chat-template.jinja's rendering of Q then an assistant turn that is continued (no <|im_end|> after it)
const continued = (text) => `<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n${text}`;

// The choice's generated text from its log-probabilities (the tokens' own bytes), and where each token begins.
function tokensOf(choice) {
  const offs = [];
  let bytes = [];
  for (const e of choice.logprobs.content) {
    offs.push(bytes.length);
    bytes = bytes.concat(e.bytes);
  }
  return { raw: Buffer.from(bytes).toString('utf8'), offs };
}

// The streamed choice i joined: reasoning, content, log-probabilities; and no reasoning after the content began.
function joined(events, i) {
  const mine = events.filter((e) => e !== '[DONE]' && e.choices.length && e.choices[0].index === i);
  let reasoning = '', content = '', contentSeen = false;
  const lps = [];
  for (const e of mine) {
    const d = e.choices[0].delta;
    if (d.reasoning_content !== undefined) {
      assert.ok(!contentSeen, 'reasoning after content');
      reasoning += d.reasoning_content;
    }
    if (d.content) contentSeen = true;
    content += d.content ?? '';
    lps.push(...(e.choices[0].logprobs?.content ?? []));
  }
  return { reasoning, content, lps, hasReasoning: mine.some((e) => 'reasoning_content' in e.choices[0].delta),
    finish: mine.at(-1).choices[0].finish_reason };
}

// A slow engine (every step sleeps 2 ms): a stream then sees its tokens one at a time, so a piece the split holds back
// (the "<" that may begin <think>) ends a read of the stream, and the next read must pick up after it.
describe('reasoning_parser qwen3 (the default), ChatML', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', String(CTX), '--chat-template', 'conf/chat-template.jinja'],
      { AAHD_TEST_STEP_DELAY_US: '2000' });
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test('a think block: reasoning_content and content, streamed deltas join to the message, reasoning_tokens', async () => {
    const body = { messages: Q, guided_regex: THINK, max_tokens: 60, temperature: 1, seed: 3, n: 4, logprobs: true };
    const whole = await post(srv, body);
    assert.equal(whole.status, 200, whole.text);
    let reasoningTokens = 0;
    for (const c of whole.json.choices) {
      const m = c.message;
      const { raw, offs } = tokensOf(c);
      assert.match(raw, /^<think>[a-z ]{3,12}<\/think>\n\n[a-z ]{2,10}$/);
      // the tags dropped, nothing trimmed (vLLM's qwen3 parser keeps the blank lines after </think>)
      assert.equal(`<think>${m.reasoning_content}</think>${m.content}`, raw);
      assert.ok(m.content.startsWith('\n\n'), JSON.stringify(m));
      assert.equal(c.finish_reason, 'stop');
      // a token is reasoning when it begins before the content: one that straddles </think> is reasoning
      const contentFrom = Buffer.byteLength(raw) - Buffer.byteLength(m.content);
      reasoningTokens += offs.filter((o) => o < contentFrom).length;
    }
    assert.equal(whole.json.usage.completion_tokens_details.reasoning_tokens, reasoningTokens);
    assert.ok(reasoningTokens > 0 && reasoningTokens < whole.json.usage.completion_tokens);

    const r = await post(srv, { ...body, stream: true, stream_options: { include_usage: true } });
    assert.equal(r.status, 200);
    const events = sseEvents(r.text);
    assert.equal(events.at(-1), '[DONE]');
    // the same usage but for the prompt tokens the prefix cache gave the second request
    const strip = (u) => ({ ...u, prompt_tokens_details: undefined });
    assert.deepEqual(strip(events.at(-2).usage), strip(whole.json.usage));
    for (const [i, c] of whole.json.choices.entries()) {
      const s = joined(events, i);
      assert.equal(s.reasoning, c.message.reasoning_content, `choice ${i}`);
      assert.equal(s.content, c.message.content, `choice ${i}`);
      assert.deepEqual(s.lps, c.logprobs.content, `choice ${i}: every token's log-probability, reasoning or not`);
      assert.equal(s.finish, c.finish_reason);
    }
  });

  test('enable_thinking false: the same text is all content, no reasoning_tokens', async () => {
    const body = { messages: Q, guided_regex: THINK, max_tokens: 60, temperature: 1, seed: 3, logprobs: true,
      chat_template_kwargs: { enable_thinking: false } };
    const h = await post(srv, body);
    assert.equal(h.status, 200, h.text);
    const m = h.json.choices[0].message;
    assert.equal(m.reasoning_content, undefined);
    assert.equal(m.content, tokensOf(h.json.choices[0]).raw);
    assert.match(m.content, /^<think>/);
    assert.equal(h.json.usage.completion_tokens_details.reasoning_tokens, 0);
    const s = joined(sseEvents((await post(srv, { ...body, stream: true })).text), 0);
    assert.equal(s.hasReasoning, false);
    assert.equal(s.content, m.content);
  });

  test('an answer that opens no block is all content', async () => {
    const h = await post(srv, { messages: Q, guided_regex: 'x<think>[a-z]{2,5}</think>', max_tokens: 30, seed: 1 });
    assert.equal(h.status, 200, h.text);
    assert.match(h.json.choices[0].message.content, /^x<think>[a-z]+<\/think>$/);
    assert.equal(h.json.choices[0].message.reasoning_content, undefined);
    assert.equal(h.json.usage.completion_tokens_details.reasoning_tokens, 0);
  });

  test('continue_final_message on a turn that opened <think>: the answer starts in reasoning', async () => {
    const messages = [...Q, { role: 'assistant', content: '<think>Rayleigh' }];
    const body = { messages, continue_final_message: true, max_tokens: 12, temperature: 0.9, seed: 5, logprobs: true };
    const h = await post(srv, body);
    assert.equal(h.status, 200, h.text);
    // the prompt is the conversation cut after the assistant's text: /v1/completions given it writes the same tokens
    const c = await complete(srv, { prompt: continued('<think>Rayleigh'), max_tokens: 12, temperature: 0.9, seed: 5 });
    const text = c.json.choices[0].text;
    assert.ok(!text.includes('</think>'), text);
    const m = h.json.choices[0].message;
    assert.equal(m.reasoning_content, text);
    assert.equal(m.content, '');
    assert.equal(h.json.usage.prompt_tokens, c.json.usage.prompt_tokens);
    // a block that never closed: every generated token is reasoning (the stop token too)
    assert.equal(h.json.usage.completion_tokens_details.reasoning_tokens, h.json.usage.completion_tokens);
    assert.equal(h.json.choices[0].logprobs.content.length, c.json.usage.completion_tokens -
      (c.json.choices[0].finish_reason === 'stop' ? 1 : 0));
    const s = joined(sseEvents((await post(srv, { ...body, stream: true })).text), 0);
    assert.equal(s.reasoning, m.reasoning_content);
    assert.equal(s.content, '');
    // closed by the model (forced): the rest is content
    const closed = await post(srv, { messages, continue_final_message: true, guided_regex: ' light[a-z]{1,4}</think>ok',
      max_tokens: 20, seed: 2 });
    assert.equal(closed.status, 200, closed.text);
    assert.match(closed.json.choices[0].message.reasoning_content, /^ light[a-z]+$/);
    assert.equal(closed.json.choices[0].message.content, 'ok');
  });

  test('continue_final_message continues the assistant text; vLLM\'s refusals', async () => {
    const messages = [...Q, { role: 'assistant', content: 'Because the' }];
    const h = await post(srv, { messages, continue_final_message: true, add_generation_prompt: false, max_tokens: 8,
      temperature: 0.7, seed: 11 });
    assert.equal(h.status, 200, h.text);
    const c = await complete(srv, { prompt: continued('Because the'), max_tokens: 8, temperature: 0.7, seed: 11 });
    assert.equal(h.json.choices[0].message.content, c.json.choices[0].text);
    assert.equal(h.json.choices[0].message.reasoning_content, undefined);
    // without continue_final_message the turn is closed and a new one opened: another prompt
    const plain = await post(srv, { messages, max_tokens: 1 });
    assert.notEqual(plain.json.usage.prompt_tokens, h.json.usage.prompt_tokens);
    for (const [body, re] of [
      [{ messages, continue_final_message: true, add_generation_prompt: true },
        /Cannot set both `continue_final_message` and `add_generation_prompt` to True/],
      [{ messages: Q, continue_final_message: true }, /must be the assistant's/],
      [{ messages: [...Q, { role: 'assistant', content: '  ' }], continue_final_message: true }, /needs text/],
    ]) {
      const r = await post(srv, body);
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, 'continue_final_message');
      assert.match(r.json.error.message, re);
    }
  });

  test('the developer role renders as system where the template does not name it', async () => {
    const as = (role) => [{ role, content: 'Answer in one word.' }, ...Q];
    const body = { max_tokens: 8, temperature: 0, logprobs: true };
    const dev = await post(srv, { ...body, messages: as('developer') });
    const sys = await post(srv, { ...body, messages: as('system') });
    assert.equal(dev.status, 200, dev.text);
    assert.equal(dev.json.usage.prompt_tokens, sys.json.usage.prompt_tokens);
    assert.deepEqual(dev.json.choices[0].logprobs, sys.json.choices[0].logprobs);
    assert.equal(dev.json.choices[0].message.content, sys.json.choices[0].message.content);
  });
});

describe('a template that names the developer role; reasoning_parser none', () => {
  let named, none;
  before(async () => {
    named = await startServer(['--ctx-len', String(CTX), '--chat-template', 'tests/data/chat/developer.jinja']);
    none = await startServer(['--ctx-len', String(CTX), '--chat-template', 'conf/chat-template.jinja',
      '--reasoning-parser', 'none']);
  });
  after(async () => {
    for (const s of [named, none]) {
      const r = await s.stop();
      assert.equal(r.code, 0, s.log());
    }
  });

  test('developer stays developer: the prompt is that of /v1/completions with "developer" in it', async () => {
    const messages = [{ role: 'developer', content: 'Be brief.' }, ...Q];
    const h = await post(named, { messages, max_tokens: 6, seed: 4 });
    assert.equal(h.status, 200, h.text);
    const prompt = '<|im_start|>developer\nBe brief.<|im_end|>\n<|im_start|>user\nWhy is the sky blue?<|im_end|>\n' +
      '<|im_start|>assistant\n';
    const c = await complete(named, { prompt, max_tokens: 6, seed: 4 });
    assert.equal(h.json.choices[0].message.content, c.json.choices[0].text);
    assert.equal(h.json.usage.prompt_tokens, c.json.usage.prompt_tokens);
  });

  test('reasoning_parser none: a think block stays in content', async () => {
    const h = await post(none, { messages: Q, guided_regex: THINK, max_tokens: 60, seed: 3 });
    assert.equal(h.status, 200, h.text);
    assert.match(h.json.choices[0].message.content, /^<think>[a-z ]+<\/think>\n\n[a-z ]+$/);
    assert.equal(h.json.choices[0].message.reasoning_content, undefined);
    assert.equal(h.json.usage.completion_tokens_details.reasoning_tokens, 0);
  });
});
