// tests/server/openai_chat.test.mjs — the official OpenAI Node client's chat.completions.create (npm `openai`, v4)
// against a real aahd serving the test model with conf/chat-template.jinja: whole and streamed (with n, stop, logprobs
// and seed, which must agree), and its error classes for a chat request the server refuses.
// Run by tests/test_openai_node.sh, which installs the package into the cache folder and passes its directory.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { startServer } from './lib.mjs';

const dir = process.env.AAH_OPENAI_DIR;
const OpenAI = createRequire(path.resolve(dir, 'package.json'))('openai');
const KEY = 'sk-test-aahd-chat';
const MODEL = 'qwen3-small-a';
let srv;
let client;

before(async () => {
  srv = await startServer(['--ctx-len', '512', '--api-key', KEY, '--chat-template', 'conf/chat-template.jinja']);
  client = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: KEY, maxRetries: 0, timeout: 30000 });
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, srv.log());
});

const messages = [
  { role: 'system', content: 'You are a terse assistant.' },
  { role: 'user', content: 'Say something about windows.' },
];

test('chat.completions.create with n, logprobs and seed: the same seed gives the same answers', async () => {
  const params = { model: MODEL, messages, max_tokens: 16, temperature: 0.8, seed: 21, n: 3, logprobs: true,
    top_logprobs: 2 };
  const a = await client.chat.completions.create(params);
  assert.equal(a.object, 'chat.completion');
  assert.equal(a.choices.length, 3);
  for (const [i, c] of a.choices.entries()) {
    assert.equal(c.index, i);
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.ok(['stop', 'length'].includes(c.finish_reason));
    assert.ok(c.logprobs.content.length > 0);
    assert.ok(c.logprobs.content.every((t) => t.top_logprobs.length === 2 && t.logprob <= 0));
  }
  assert.ok(a.usage.prompt_tokens > 0);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + a.usage.completion_tokens);
  assert.equal(a.aah.regime, 'full_attention');
  // three samples of one seed (seed, seed + 1, seed + 2): not all the same, and all the same again next time
  assert.ok(new Set(a.choices.map((c) => c.message.content)).size > 1);
  const b = await client.chat.completions.create(params);
  assert.deepEqual(b.choices, a.choices);
});

test('streamed chat.completions.create agrees with the whole answer, with stop and include_usage', async () => {
  const whole = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 24, temperature: 0, n: 2 });
  const text = whole.choices[0].message.content;
  assert.ok(text.length >= 6, text);
  const stop = text.slice(3, 6);
  const params = { model: MODEL, messages, max_tokens: 24, temperature: 0, n: 2, stop: [stop] };
  const cut = await client.chat.completions.create(params);
  assert.equal(cut.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, 'stop');
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const got = ['', ''];
  const finish = [null, null];
  const roles = [];
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) roles.push([c.index, c.delta.role]);
      got[c.index] += c.delta.content ?? '';
      finish[c.index] = c.finish_reason ?? finish[c.index];
    }
  }
  assert.deepEqual(roles.sort(), [[0, 'assistant'], [1, 'assistant']]);
  assert.deepEqual(got, cut.choices.map((c) => c.message.content));
  assert.deepEqual(finish, cut.choices.map((c) => c.finish_reason));
  assert.deepEqual(usage, cut.usage);
});

test('a refused chat request arrives as the client\'s error class, naming the field', async () => {
  await assert.rejects(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: [
    { type: 'image_url', image_url: { url: 'https://example.com/a.png' } }] }] }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'messages[0].content[0]');
  await assert.rejects(client.chat.completions.create({ model: 'no-such-model', messages }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
});
