// tests/server/openai_client.test.mjs — the official OpenAI Node client (npm `openai`, v4) against a real aahd:
// models, completions, streaming, echo with logprobs, the aah_regime extension, and its error classes.
// Run by tests/test_openai_node.sh, which installs the package into the cache folder and passes its directory.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { startServer } from './lib.mjs';

const dir = process.env.AAH_OPENAI_DIR;
const OpenAI = createRequire(path.resolve(dir, 'package.json'))('openai');
const KEY = 'sk-test-aahd';
let srv;
let client;

before(async () => {
  srv = await startServer(['--ctx-len', '512', '--api-key', KEY]);
  client = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: KEY, maxRetries: 0, timeout: 30000 });
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, srv.log());
});

test('models.list', async () => {
  const page = await client.models.list();
  assert.equal(page.data.length, 1);
  assert.equal(page.data[0].id, 'qwen3-small-a');
});

test('completions.create, plain and streamed, agree', async () => {
  const params = { model: 'qwen3-small-a', prompt: 'Hello from the OpenAI client', max_tokens: 24, temperature: 0.7, seed: 11 };
  const c = await client.completions.create(params);
  assert.equal(c.object, 'text_completion');
  assert.equal(c.choices.length, 1);
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 24);
  assert.equal(c.aah.regime, 'full_attention');
  const stream = await client.completions.create({ ...params, stream: true });
  let text = '';
  let chunks = 0;
  let finish = null;
  for await (const chunk of stream) {
    chunks++;
    text += chunk.choices[0]?.text ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.ok(chunks > 1);
  assert.equal(text, c.choices[0].text);
  assert.equal(finish, 'length');
});

test('echo with logprobs (the loglikelihood request), and aah_regime', async () => {
  const c = await client.completions.create({ model: 'qwen3-small-a', prompt: [1, 2, 3, 4, 5], max_tokens: 1, echo: true,
    logprobs: 1, temperature: 0, aah_regime: 'full_attention' });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.token_logprobs.length, 6);
  assert.equal(lp.token_logprobs[0], null);
  assert.ok(lp.token_logprobs.slice(1).every((x) => typeof x === 'number' && x <= 0));
  assert.equal(c.aah.regime, 'full_attention');
});

test('errors arrive as the client\'s error classes', async () => {
  await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x' }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found');
  await assert.rejects(client.completions.create({ model: 'qwen3-small-a', prompt: 'x', max_tokens: -3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
  const wrong = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.completions.create({ model: 'qwen3-small-a', prompt: 'x' }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});
