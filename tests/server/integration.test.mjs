// tests/server/integration.test.mjs — aahd through a real socket with the test model: every endpoint and field,
// streaming equal to non-streaming, echo+logprobs equal to the decode path's log-probabilities, stop strings,
// hostile requests (each its 4xx, the server healthy after), queue full, disconnects freeing pages, metrics
// passing promtool, SIGTERM draining. Run by tests/test_server.sh (node --test).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BUILD, MODEL, joinStream, metrics, rawExchange, request, sleep, sseEvents, startServer, until } from './lib.mjs';

const KEY = 'test-key-123';
const AUTH = { Authorization: `Bearer ${KEY}` };
const CTX = 512;

const post = (srv, path, body, headers = AUTH) => request(srv.port, 'POST', path, body, headers);
const get = (srv, path, headers = AUTH) => request(srv.port, 'GET', path, undefined, headers);
const complete = (srv, body) => post(srv, '/v1/completions', body);

function assertError(r, status, param) {
  assert.equal(r.status, status, `expected ${status}, got ${r.status}: ${r.text}`);
  assert.ok(r.json && r.json.error, `no error object: ${r.text}`);
  const e = r.json.error;
  assert.equal(typeof e.message, 'string');
  assert.equal(typeof e.type, 'string');
  assert.ok('param' in e && 'code' in e, 'error has param and code');
  if (param !== undefined) assert.equal(e.param, param, `param of ${r.text}`);
}

describe('aahd', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', String(CTX), '--api-key', KEY, '--max-body-bytes', '65536', '--max-batch', '4',
      '--queue-length', '16', '--max-tokens', '256', '--max-n', '8']);
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, `exit status after SIGTERM:\n${srv.log()}`);
  });

  test('health, models, tokenizer endpoints', async () => {
    const h = await get(srv, '/health', {});
    assert.equal(h.status, 200);
    assert.equal(h.json.status, 'ok');
    const m = await get(srv, '/v1/models');
    assert.equal(m.status, 200);
    assert.equal(m.json.object, 'list');
    assert.equal(m.json.data.length, 1);
    const model = m.json.data[0];
    assert.equal(model.id, 'qwen3-small-a');
    assert.equal(model.object, 'model');
    assert.equal(model.max_model_len, CTX);
    assert.equal(model.max_batch, 4);
    assert.ok(model.aah.regimes.includes('full_attention'));
    assert.equal(typeof model.aah.default_regime, 'string');

    const t1 = await post(srv, '/tokenize', { content: 'Hello world', add_special: false });
    assert.equal(t1.status, 200);
    assert.ok(Array.isArray(t1.json.tokens) && t1.json.tokens.length > 0);
    const t2 = await post(srv, '/tokenize', { prompt: 'Hello world', add_special_tokens: true });
    assert.deepEqual(t2.json.tokens, t1.json.tokens);   // no BOS for this tokenizer
    const sp = await post(srv, '/tokenize', { content: '<|im_start|>hi' });
    assert.equal(sp.json.tokens[0], 2049, 'special-token text is that special token');
    const d = await post(srv, '/detokenize', { tokens: t1.json.tokens });
    assert.equal(d.status, 200);
    assert.equal(d.json.content, 'Hello world');
    assert.equal(d.json.prompt, 'Hello world');
    const info = await get(srv, '/tokenizer_info');
    assert.equal(info.status, 200);
    assert.equal(info.json.eos_token, '<|endoftext|>');
    assert.equal(info.json.eos_token_id, 2048);
    assert.equal(info.json.bos_token, null);
    assert.equal(typeof info.json.vocab_size, 'number');
    assertError(await post(srv, '/detokenize', { tokens: [1, -5] }), 400, 'tokens');
    assertError(await post(srv, '/tokenize', { content: 7 }), 400);
  });

  test('completion: every field', async () => {
    const r = await complete(srv, { model: 'qwen3-small-a', prompt: 'Hello world', max_tokens: 12, temperature: 0 });
    assert.equal(r.status, 200, r.text);
    const j = r.json;
    assert.match(j.id, /^cmpl-/);
    assert.equal(j.object, 'text_completion');
    assert.equal(typeof j.created, 'number');
    assert.equal(j.model, 'qwen3-small-a');
    assert.equal(j.choices.length, 1);
    const c = j.choices[0];
    assert.equal(c.index, 0);
    assert.equal(typeof c.text, 'string');
    assert.equal(c.logprobs, null);
    assert.equal(c.finish_reason, 'length');
    assert.equal(j.usage.prompt_tokens, 4);
    assert.equal(j.usage.completion_tokens, 12);
    assert.equal(j.usage.total_tokens, 16);
    assert.equal(j.aah.regime, 'full_attention');
    assert.equal(j.aah.acr, 1);
    assert.equal(j.aah.attention_work_ratio, 1);
    assert.ok(Number.isInteger(j.aah.kv_bytes) && j.aah.kv_bytes > 0);
    assert.equal(j.aah.kv_memory_ratio, 1);
    assert.ok(r.headers['x-request-id']);
    // the same request again: greedy is deterministic
    const r2 = await complete(srv, { prompt: 'Hello world', max_tokens: 12, temperature: 0 });
    assert.equal(r2.json.choices[0].text, c.text);
    // the regime by name
    const r3 = await complete(srv, { prompt: 'Hello world', max_tokens: 12, temperature: 0, aah_regime: 'full_attention' });
    assert.equal(r3.status, 200);
    assert.equal(r3.json.aah.regime, 'full_attention');
    assert.equal(r3.json.choices[0].text, c.text);
    // the sampling fields reach the sampler: top_k 1 or min_p 1 leave only the argmax, whatever the temperature
    for (const f of [{ top_k: 1 }, { min_p: 1 }]) {
      const g = await complete(srv, { prompt: 'Hello world', max_tokens: 12, temperature: 1.5, seed: 9, ...f });
      assert.equal(g.status, 200, g.text);
      assert.equal(g.json.choices[0].text, c.text, JSON.stringify(f));
    }
    const pen = await complete(srv, { prompt: 'Hello world', max_tokens: 12, temperature: 0, presence_penalty: 2,
      frequency_penalty: 2, top_p: 0.5, user: 'someone' });
    assert.equal(pen.status, 200, pen.text);
  });

  test('prompt forms: string, strings, ids, arrays of ids', async () => {
    const ids = (await post(srv, '/tokenize', { content: 'The quick brown fox' })).json.tokens;
    const base = { max_tokens: 10, temperature: 0 };
    const a = await complete(srv, { ...base, prompt: 'The quick brown fox' });
    const b = await complete(srv, { ...base, prompt: ids });
    assert.equal(b.status, 200, b.text);
    assert.equal(b.json.choices[0].text, a.json.choices[0].text);
    const c = await complete(srv, { ...base, prompt: ['The quick brown fox', 'Hello world'] });
    assert.equal(c.json.choices.length, 2);
    assert.deepEqual(c.json.choices.map((x) => x.index), [0, 1]);
    assert.equal(c.json.choices[0].text, a.json.choices[0].text);
    const hello = await complete(srv, { ...base, prompt: 'Hello world' });
    assert.equal(c.json.choices[1].text, hello.json.choices[0].text);
    assert.equal(c.json.usage.prompt_tokens, ids.length + 4);
    const d = await complete(srv, { ...base, prompt: [ids, ids.slice(0, 2)] });
    assert.equal(d.status, 200, d.text);
    assert.equal(d.json.choices[0].text, a.json.choices[0].text);
  });

  test('n choices and seeds: choice k equals a lone request with seed + k', async () => {
    const body = { prompt: 'Once upon a time', max_tokens: 20, temperature: 0.9, top_p: 0.95, seed: 1234 };
    const r = await complete(srv, { ...body, n: 3 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices.length, 3);
    for (let k = 0; k < 3; k++) {
      const one = await complete(srv, { ...body, seed: 1234 + k });
      assert.equal(r.json.choices[k].text, one.json.choices[0].text, `choice ${k}`);
    }
    const again = await complete(srv, { ...body, n: 3 });
    assert.deepEqual(again.json.choices.map((c) => c.text), r.json.choices.map((c) => c.text));
    assert.ok(new Set(r.json.choices.map((c) => c.text)).size > 1, 'different seeds, different samples');
  });

  test('streaming equals non-streaming for the same seed', async () => {
    for (const extra of [{ temperature: 0.8, seed: 7 }, { temperature: 0 }, { temperature: 1.0, seed: 3, n: 2, logprobs: 2 }]) {
      const body = { prompt: 'In a distant land', max_tokens: 40, ...extra };
      const plain = await complete(srv, body);
      assert.equal(plain.status, 200, plain.text);
      const s = await complete(srv, { ...body, stream: true, stream_options: { include_usage: true } });
      assert.equal(s.status, 200);
      assert.match(s.headers['content-type'], /^text\/event-stream/);
      const events = sseEvents(s.text);
      assert.equal(events.at(-1), '[DONE]');
      const usage = events.at(-2);
      assert.deepEqual(usage.choices, []);
      assert.deepEqual(usage.usage, plain.json.usage);
      assert.equal(usage.aah.regime, 'full_attention');
      const joined = joinStream(events);
      assert.equal(joined.length, plain.json.choices.length);
      for (const [i, c] of plain.json.choices.entries()) {
        assert.equal(joined[i].text, c.text, `choice ${i} text`);
        assert.equal(joined[i].finish_reason, c.finish_reason);
        assert.ok(joined[i].chunks > 1, 'streamed in pieces');
        assert.ok(joined[i].aah, 'the last chunk carries aah');
        if (c.logprobs) {
          assert.deepEqual(joined[i].logprobs.tokens, c.logprobs.tokens);
          assert.deepEqual(joined[i].logprobs.token_logprobs, c.logprobs.token_logprobs);
          assert.deepEqual(joined[i].logprobs.text_offset, c.logprobs.text_offset);
        }
      }
    }
  });

  test('logprobs: legacy shape; echo gives the prompt tokens, first null, equal to the decode log-probabilities', async () => {
    const prompt = (await post(srv, '/tokenize', { content: 'A story about a small robot' })).json.tokens;
    // greedy generation with the log-probability of each token
    const gen = await complete(srv, { prompt, max_tokens: 8, temperature: 0, logprobs: 3 });
    assert.equal(gen.status, 200, gen.text);
    const lp = gen.json.choices[0].logprobs;
    assert.equal(lp.tokens.length, 8);
    assert.equal(lp.token_logprobs.length, 8);
    assert.equal(lp.top_logprobs.length, 8);
    assert.equal(lp.text_offset.length, 8);
    for (let i = 0; i < 8; i++) {
      const top = Object.values(lp.top_logprobs[i]);
      assert.ok(top.length >= 3 && top.length <= 4);
      assert.equal(Math.max(...top), lp.token_logprobs[i], 'greedy: the token is the top entry');
      assert.ok(lp.token_logprobs[i] <= 0);
    }
    const genIds = (await post(srv, '/tokenize', { content: gen.json.choices[0].text })).json.tokens;
    // the prompt and its continuation, scored with echo (lm-evaluation-harness's loglikelihood request)
    const all = [...prompt, ...genIds];
    for (const max_tokens of [0, 1]) {
      const e = await complete(srv, { prompt: all, max_tokens, temperature: 0, echo: true, logprobs: 1 });
      assert.equal(e.status, 200, e.text);
      const c = e.json.choices[0];
      const el = c.logprobs;
      assert.equal(el.tokens.length, all.length + max_tokens);
      assert.equal(el.token_logprobs.length, all.length + max_tokens);
      assert.equal(el.token_logprobs[0], null);
      assert.equal(el.top_logprobs[0], null);
      assert.equal(el.text_offset[0], 0);
      assert.ok(c.text.startsWith(gen.json.choices[0].text) === false);
      const promptText = (await post(srv, '/detokenize', { tokens: all })).json.content;
      assert.ok(c.text.startsWith(promptText), 'echo puts the prompt text first');
      assert.equal(e.json.usage.prompt_tokens, all.length);
      // when genIds re-tokenizes to the generated ids, their echo log-probabilities equal the decode path's
      const same = genIds.length === 8 && genIds.every((id, i) => el.tokens[prompt.length + i] === lp.tokens[i]);
      assert.ok(same, 'the generated text re-tokenizes to the generated tokens (pick another prompt if not)');
      for (let i = 0; i < 8; i++)
          assert.ok(Math.abs(el.token_logprobs[prompt.length + i] - lp.token_logprobs[i]) < 1e-4,
            `position ${i}: echo ${el.token_logprobs[prompt.length + i]}, decode ${lp.token_logprobs[i]}`);
      for (let i = 1; i < all.length; i++) {
        assert.ok(el.token_logprobs[i] <= 0);
        assert.ok(Math.max(...Object.values(el.top_logprobs[i])) >= el.token_logprobs[i] - 1e-9);
      }
    }
    // log-probabilities of a whole vocabulary row sum to 1: the top-20 entries are a part of it
    const top20 = await complete(srv, { prompt, max_tokens: 1, temperature: 0, logprobs: 20 });
    const probs = Object.values(top20.json.choices[0].logprobs.top_logprobs[0]).map(Math.exp);
    const sum = probs.reduce((a, b) => a + b, 0);
    assert.ok(sum > 0 && sum <= 1 + 1e-6, `sum of top-20 probabilities ${sum}`);
  });

  test('ids of the model\'s padded vocabulary (the tokenizer has 2051, the model 2056 rows): valid, no text', async () => {
    const info = await get(srv, '/tokenizer_info');
    const known = info.json.vocab_size;
    assert.ok(known < 2056, `the test model pads its vocabulary (${known} tokens, 2056 rows)`);
    const pad = [known, 2055];
    const words = (await post(srv, '/tokenize', { content: 'The robot' })).json.tokens.slice(0, 2);
    const prompt = [words[0], pad[0], words[1], pad[1], pad[0]];
    const plainText = (await post(srv, '/detokenize', { tokens: words })).json.content;
    // /detokenize: the padding ids have no text
    const d = await post(srv, '/detokenize', { tokens: prompt });
    assert.equal(d.status, 200, d.text);
    assert.equal(d.json.content, plainText);
    assertError(await post(srv, '/detokenize', { tokens: [1, 2056] }), 400, 'tokens');
    // generation from a prompt that holds them, with and without echo, logprobs, stream
    const g = await complete(srv, { prompt, max_tokens: 2, temperature: 0 });
    assert.equal(g.status, 200, g.text);
    assert.equal(g.json.usage.prompt_tokens, prompt.length);
    for (const stream of [false, true]) {
      const body = { prompt, max_tokens: 1, temperature: 0, echo: true, logprobs: 2, stream };
      const r = await complete(srv, body);
      assert.equal(r.status, 200, r.text);
      const c = stream ? joinStream(sseEvents(r.text))[0] : r.json.choices[0];
      const lp = c.logprobs;
      assert.ok(c.text.startsWith(plainText), `echo: ${JSON.stringify(c.text)}`);
      assert.equal(lp.tokens.length, prompt.length + 1);
      assert.deepEqual(lp.tokens.slice(0, prompt.length).map((t, i) => (pad.includes(prompt[i]) ? t : 'word')),
        ['word', '', 'word', '', ''], 'a padding id renders as empty text');
      assert.equal(lp.token_logprobs[0], null);
      for (let i = 1; i <= prompt.length; i++) {
        assert.equal(typeof lp.token_logprobs[i], 'number', `position ${i}`);
        assert.ok(lp.token_logprobs[i] <= 0);
        assert.ok(Math.max(...Object.values(lp.top_logprobs[i])) >= lp.token_logprobs[i]);
      }
      for (const i of [1, 3, 4])   // the padding id's own log-probability, also under its (empty) text in the top list
        assert.ok(lp.top_logprobs[i][''] >= lp.token_logprobs[i], `top_logprobs[${i}]: ${JSON.stringify(lp.top_logprobs[i])}`);
      // text_offset: a padding id starts where the next token starts
      assert.equal(lp.text_offset[1], lp.text_offset[2]);
      assert.equal(lp.text_offset[3], lp.text_offset[4]);
      assert.equal(lp.text_offset[4], [...plainText].length);
      // as input, a padding id is processed as the decode path does: the next token's log-probability agrees
      const dec = await complete(srv, { prompt: prompt.slice(0, 2), max_tokens: 1, temperature: 0, logprobs: 1 });
      const next = (await post(srv, '/tokenize', { content: dec.json.choices[0].text })).json.tokens;
      if (next.length === 1) {
        const e = await complete(srv, { prompt: [...prompt.slice(0, 2), next[0]], max_tokens: 0, echo: true, logprobs: 1 });
        assert.ok(Math.abs(e.json.choices[0].logprobs.token_logprobs[2] - dec.json.choices[0].logprobs.token_logprobs[0]) < 1e-4);
      }
    }
  });

  test('stop strings: cut before the stop, never returned, never split (also streamed)', async () => {
    const base = { prompt: 'The weather today', max_tokens: 60, temperature: 0 };
    const full = (await complete(srv, base)).json.choices[0].text;
    assert.ok(full.length > 20, `a long enough text: ${JSON.stringify(full)}`);
    // stop strings taken from the middle of the text, of several lengths
    for (const [from, len] of [[10, 3], [6, 1], [15, 6]]) {
      const stop = full.slice(from, from + len);
      const cut = full.slice(0, full.indexOf(stop));
      const r = await complete(srv, { ...base, stop: [stop, 'zzzz-never'] });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].text, cut, `stop ${JSON.stringify(stop)}`);
      assert.equal(r.json.choices[0].finish_reason, 'stop');
      assert.ok(r.json.usage.completion_tokens < 60);
      const s = await complete(srv, { ...base, stop, stream: true });
      const events = sseEvents(s.text);
      const joined = joinStream(events)[0];
      assert.equal(joined.text, cut);
      assert.equal(joined.finish_reason, 'stop');
      for (const e of events) if (e !== '[DONE]') assert.ok(!e.choices[0].text.includes(stop));
    }
    const none = await complete(srv, { ...base, stop: 'zzzz-never' });
    assert.equal(none.json.choices[0].text, full);
    assert.equal(none.json.choices[0].finish_reason, 'length');
  });

  test('20+ malformed and hostile requests: each its 4xx, the server stays healthy', async () => {
    const p = srv.port;
    const cases = [
      ['bad JSON', '{"prompt": "x", ', 400],
      ['not an object', '[1,2,3]', 400],
      ['no prompt', '{"max_tokens": 3}', 400, 'prompt'],
      ['prompt of wrong type', '{"prompt": 42}', 400, 'prompt'],
      ['mixed prompt array', '{"prompt": ["a", 1]}', 400, 'prompt'],
      ['max_tokens a string', '{"prompt": "x", "max_tokens": "5"}', 400, 'max_tokens'],
      ['max_tokens huge', '{"prompt": "x", "max_tokens": 1e30}', 400, 'max_tokens'],
      ['integer beyond int64', '{"prompt": "x", "max_tokens": 99999999999999999999999}', 400],
      ['max_tokens negative', '{"prompt": "x", "max_tokens": -1}', 400, 'max_tokens'],
      ['max_tokens over the cap', '{"prompt": "x", "max_tokens": 257}', 400, 'max_tokens'],
      ['temperature negative', '{"prompt": "x", "temperature": -0.5}', 400, 'temperature'],
      ['temperature overflow', '{"prompt": "x", "temperature": 1e999}', 400],
      ['top_p zero', '{"prompt": "x", "top_p": 0}', 400, 'top_p'],
      ['n zero', '{"prompt": "x", "n": 0}', 400, 'n'],
      ['n too many', '{"prompt": "x", "n": 1000}', 400, 'n'],
      ['logprobs too many', '{"prompt": "x", "logprobs": 21}', 400, 'logprobs'],
      ['logprobs boolean', '{"prompt": "x", "logprobs": true}', 400, 'logprobs'],
      ['five stop strings', '{"prompt": "x", "stop": ["a","b","c","d","e"]}', 400, 'stop'],
      ['stop a number', '{"prompt": "x", "stop": 5}', 400, 'stop'],
      ['seed a string', '{"prompt": "x", "seed": "1"}', 400, 'seed'],
      ['duplicate keys', '{"prompt": "x", "prompt": "y"}', 400],
      ['NUL in a string', '{"prompt": "a\\u0000b"}', 400],
      ['deep nesting', '['.repeat(60000), 400],
      ['empty prompt', '{"prompt": ""}', 400, 'prompt'],
      ['token id out of the vocabulary', '{"prompt": [1, 999999]}', 400, 'prompt'],
      ['negative token id', '{"prompt": [1, -2]}', 400, 'prompt'],
      ['prompt over the context', JSON.stringify({ prompt: Array(CTX + 1).fill(5), max_tokens: 0 }), 400, 'prompt'],
      ['prompt + max_tokens over the context', JSON.stringify({ prompt: Array(CTX - 10).fill(5), max_tokens: 20 }), 400,
        'max_tokens'],
      ['unknown regime', '{"prompt": "x", "aah_regime": "no_such_regime"}', 400, 'aah_regime'],
      ['regime of wrong type', '{"prompt": "x", "aah_regime": 3}', 400, 'aah_regime'],
      ['unsupported suffix', '{"prompt": "x", "suffix": "y"}', 400, 'suffix'],
    ];
    for (const [name, body, status, param] of cases) {
      const r = await request(p, 'POST', '/v1/completions', body, { ...AUTH, 'Content-Type': 'application/json' });
      assertError(r, status, param);
      assert.ok(r.status !== 500, name);
    }
    // invalid UTF-8 inside a string
    const bad = Buffer.concat([Buffer.from('{"prompt": "ab'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}')]);
    assertError(await request(p, 'POST', '/v1/completions', bad, AUTH), 400);
    // an overlong encoding and a lone surrogate
    assertError(await request(p, 'POST', '/v1/completions', Buffer.from([0x7b, 0x22, 0xc0, 0xaf, 0x22, 0x7d]), AUTH), 400);
    assertError(await request(p, 'POST', '/v1/completions', Buffer.from('{"prompt": "\\ud800"}'), AUTH), 400);
    // unknown model: 404 like OpenAI
    const nm = await complete(srv, { model: 'gpt-17', prompt: 'x' });
    assertError(nm, 404, 'model');
    assert.equal(nm.json.error.code, 'model_not_found');
    // API key: missing, wrong, wrong scheme
    assertError(await request(p, 'POST', '/v1/completions', { prompt: 'x' }, {}), 401);
    assertError(await request(p, 'POST', '/v1/completions', { prompt: 'x' }, { Authorization: 'Bearer nope' }), 401);
    assertError(await request(p, 'POST', '/v1/completions', { prompt: 'x' }, { Authorization: `Basic ${KEY}` }), 401);
    assertError(await request(p, 'GET', '/metrics', undefined, {}), 401);
    // method and path
    const m405 = await get(srv, '/v1/completions');
    assertError(m405, 405);
    assert.equal(m405.headers.allow, 'POST');
    assertError(await get(srv, '/v2/nothing'), 404);
    // without the key nothing tells the routes apart: an unknown path and a wrong method are 401 too; /health is open
    for (const [method, path] of [['GET', '/v2/nothing'], ['GET', '/v1/completions'], ['DELETE', '/metrics']]) {
      const r = await request(p, method, path, undefined, {});
      assertError(r, 401);
      assert.equal(r.json.error.code, 'invalid_api_key', `${method} ${path}`);
      assert.equal(r.headers.allow, undefined);
    }
    assertError(await request(p, 'POST', '/health', '', {}), 405);
    // a 10 MB body, declared: 413 before it is read
    const big = await rawExchange(p, `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
      'Content-Type: application/json\r\nContent-Length: 10485760\r\n\r\n');
    assert.match(big, /^HTTP\/1\.1 413 /);
    assert.match(big, /request_too_large/);
    // a 10 MB body, chunked: the running total passes the limit, it is dropped as it comes, then 413
    const chunked = await new Promise((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: p, method: 'POST', path: '/v1/completions', agent: false,
        headers: { ...AUTH, 'Transfer-Encoding': 'chunked' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      });
      req.on('error', reject);
      const piece = Buffer.alloc(1 << 20, 0x61);
      for (let i = 0; i < 10; i++) req.write(piece);
      req.end();
    });
    assert.equal(chunked, 413);
    // and the server is fine
    assert.equal((await get(srv, '/health', {})).status, 200);
    const ok = await complete(srv, { prompt: 'still alive', max_tokens: 3 });
    assert.equal(ok.status, 200);
    assert.equal(ok.json.usage.completion_tokens, 3);
    const mx = await metrics(p, AUTH);
    assert.ok(mx.get('aahd_requests_total{status="400"}') >= 30);
    assert.equal(mx.get('aahd_requests_total{status="500"}'), undefined, 'no 500 for a client mistake');
  });

  test('/metrics: every metric of docs/architecture.md, and promtool check metrics passes', async () => {
    await complete(srv, { prompt: 'metrics please', max_tokens: 5 });
    const m = await metrics(srv.port, AUTH);
    for (const name of ['aahd_requests_total', 'aahd_requests_running', 'aahd_requests_waiting',
      'aahd_prompt_tokens_total', 'aahd_generation_tokens_total', 'aahd_prompt_tokens_per_second',
      'aahd_generation_tokens_per_second', 'aahd_acr', 'aahd_branch_usage_total', 'aahd_attention_work_ratio',
      'aahd_kv_cache_bytes_used', 'aahd_kv_cache_bytes_capacity', 'aahd_kv_memory_ratio',
      'aahd_time_to_first_token_seconds', 'aahd_inter_token_latency_seconds', 'aahd_request_duration_seconds'])
      assert.match(m.raw, new RegExp(`^# TYPE ${name} `, 'm'), name);
    assert.equal(m.get('aahd_acr{regime="full_attention"}'), 1);
    assert.equal(m.get('aahd_attention_work_ratio{regime="full_attention"}'), 1);
    assert.equal(m.get('aahd_kv_memory_ratio{regime="full_attention"}'), 1);
    assert.ok(m.get(`aahd_branch_usage_total{regime="full_attention",window="${CTX}"}`) > 0);
    assert.ok(m.get('aahd_kv_cache_bytes_capacity') > 0);
    assert.equal(m.get('aahd_kv_cache_bytes_used'), 0);
    assert.ok(m.get('aahd_generation_tokens_total') > 0);
    // the histograms are per regime (this model has only full_attention)
    assert.ok(m.get('aahd_time_to_first_token_seconds_count{regime="full_attention"}') > 0);
    assert.equal(m.get('aahd_request_duration_seconds_bucket{regime="full_attention",le="+Inf"}'),
      m.get('aahd_request_duration_seconds_count{regime="full_attention"}'));
    // the counters behind the ratios, and T, so that Prometheus can compute a fleet's figures from counters
    assert.equal(m.get('aahd_acr_context_length'), CTX);
    assert.equal(m.get(`aahd_branch_window{window="${CTX}"}`), CTX);
    assert.ok(m.get('aahd_sequences_total{regime="full_attention"}') >= 1);
    assert.ok(m.get('aahd_attention_products_total{regime="full_attention"}') > 0);
    assert.equal(m.get('aahd_attention_products_total{regime="full_attention"}'),
      m.get('aahd_attention_products_full_total{regime="full_attention"}'));
    assert.equal(m.get('aahd_kv_peak_bytes_total{regime="full_attention"}'),
      m.get('aahd_kv_peak_bytes_full_total{regime="full_attention"}'));
    assert.ok(m.get('aahd_queue_capacity') > 0 && m.get('aahd_max_batch') > 0);
    let out;
    try {
      out = execFileSync('promtool', ['check', 'metrics'], { input: m.raw, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (e) {
      assert.fail(`promtool check metrics failed (is the Debian package prometheus installed? deploy/deps.sh ` +
        `installs it): ${e.message}\n${e.stdout || ''}${e.stderr || ''}`);
    }
    assert.ok(out !== undefined);
  });
});

describe('AAH regimes (a tiny model with aah.json: windows 64 … 512 at a 512 context)', () => {
  let srv;
  let dir;
  const REGIMES = ['full_attention', 'grouping_off', 'full_adaptive', 'shallow_freeze', 'deep_reuse'];
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-test-'));
    execFileSync(`${BUILD}/aah-mkmodel`, ['--preset', 'tiny', '--tokenizer', MODEL, '--aah', '--aah-context', '512',
      '--aah-windows', '64,128,256,512', '--out', dir], { stdio: 'pipe' });
    srv = await startServer(['--ctx-len', String(CTX), '--max-batch', '5'], {}, dir);
  });
  after(async () => {
    const r = await srv.stop();
    fs.rmSync(dir, { recursive: true, force: true });
    assert.equal(r.code, 0, srv.log());
  });

  test('every regime by name: its aah object, and the metrics per regime and window', async () => {
    const models = await request(srv.port, 'GET', '/v1/models');
    assert.deepEqual([...models.json.data[0].aah.regimes].sort(), [...REGIMES].sort());
    assert.equal(models.json.data[0].aah.default_regime, 'shallow_freeze');
    const prompt = Array.from({ length: 300 }, (_, i) => 5 + ((i * 37) % 2000));
    const seen = {};
    for (const regime of REGIMES) {
      const r = await request(srv.port, 'POST', '/v1/completions', { prompt, max_tokens: 40, temperature: 0, aah_regime: regime });
      assert.equal(r.status, 200, r.text);
      const a = r.json.aah;
      assert.equal(a.regime, regime);
      seen[regime] = a;
      if (regime === 'full_attention') {
        assert.equal(a.acr, 1);
        assert.equal(a.attention_work_ratio, 1);
        assert.equal(a.kv_memory_ratio, 1);
      } else {
        // windows below the 340 positions: less work, fewer bytes, ACR below 1
        assert.ok(a.acr > 0 && a.acr < 1, `${regime} acr ${a.acr}`);
        assert.ok(a.attention_work_ratio < 1, `${regime} work ${a.attention_work_ratio}`);
        assert.ok(a.kv_memory_ratio < 1, `${regime} memory ${a.kv_memory_ratio}`);
        assert.ok(a.kv_bytes < seen.full_attention.kv_bytes);
      }
    }
    const bad = await request(srv.port, 'POST', '/v1/completions', { prompt, aah_regime: 'Full_Attention' });
    assertError(bad, 400, 'aah_regime');
    assert.match(bad.json.error.message, /shallow_freeze/, 'the error lists the regimes');
    const m = await metrics(srv.port);
    for (const regime of REGIMES) {
      assert.ok(Math.abs(m.get(`aahd_acr{regime="${regime}"}`) - seen[regime].acr) < 1e-3, regime);
      assert.ok(Math.abs(m.get(`aahd_attention_work_ratio{regime="${regime}"}`) - seen[regime].attention_work_ratio) < 1e-3);
      assert.ok(Math.abs(m.get(`aahd_kv_memory_ratio{regime="${regime}"}`) - seen[regime].kv_memory_ratio) < 1e-3);
    }
    const windows = [...m.keys()].filter((k) => k.startsWith('aahd_branch_usage_total{regime="full_adaptive"'));
    assert.ok(windows.length >= 1 && windows.every((k) => /window="(64|128|256|512)"/.test(k)), windows.join());
    execFileSync('promtool', ['check', 'metrics'], { input: m.raw, stdio: ['pipe', 'pipe', 'pipe'] });
    // no regime named: the model's default
    const d = await request(srv.port, 'POST', '/v1/completions', { prompt, max_tokens: 4 });
    assert.equal(d.json.aah.regime, 'shallow_freeze');
  });

  // The engine thread ends a request at the token that completes a stop string, so a stopped completion's figures are
  // those of exactly the tokens up to it: the aah object of the same request with max_tokens cut to its
  // completion_tokens, alone, in n choices and streamed; and /metrics counts no token beyond (generation tokens and
  // branch usage move by what the responses report).
  test('a stopped completion: its aah object is that of the request cut by max_tokens to where it stopped', async () => {
    const post = (body) => request(srv.port, 'POST', '/v1/completions', body);
    const prompt = Array.from({ length: 150 }, (_, i) => 11 + ((i * 29) % 2000));
    const base = { prompt, temperature: 0.9, seed: 31, logprobs: 2, aah_regime: 'full_adaptive' };
    const m0 = await metrics(srv.port);
    let generated = 0;
    const usage = {};
    const count = (r) => {
      assert.equal(r.status, 200, r.text);
      generated += r.json.usage.completion_tokens;
      for (const [w, u] of Object.entries(r.json.aah.branch_usage)) usage[w] = (usage[w] || 0) + u;
      return r;
    };
    // two choices' whole texts; a stop string of three characters from the middle of each (code points: never half a
    // character), and one that never occurs
    const full = count(await post({ ...base, n: 2, max_tokens: 60 }));
    const texts = full.json.choices.map((c) => Array.from(c.text));
    assert.ok(texts.every((t) => t.length > 30), JSON.stringify(texts));
    const stop = ['\u0001never\u0002', ...texts.map((t, k) => t.slice(20 + 9 * k, 23 + 9 * k).join(''))];
    const cutAt = (text) => Math.min(...stop.map((s) => text.indexOf(s)).filter((i) => i >= 0));
    const lone = [];
    for (let k = 0; k < 2; k++) {
      const whole = full.json.choices[k].text;
      const s = count(await post({ ...base, seed: base.seed + k, max_tokens: 60, stop }));
      const c = s.json.choices[0];
      assert.equal(c.finish_reason, 'stop');
      assert.equal(c.text, whole.slice(0, cutAt(whole)));
      const n = s.json.usage.completion_tokens;
      assert.ok(n > 0 && n < 60, `stopped after ${n} tokens`);
      const cut = count(await post({ ...base, seed: base.seed + k, max_tokens: n }));
      assert.equal(cut.json.usage.completion_tokens, n);
      assert.equal(cut.json.choices[0].finish_reason, 'length');
      assert.ok(cut.json.choices[0].text.startsWith(c.text));
      assert.deepEqual(s.json.aah, cut.json.aah, `choice ${k}: stopped after ${n} tokens vs max_tokens ${n}`);
      assert.ok(s.json.aah.acr < 1);
      // the log-probabilities of the tokens it kept are those of the cut run's first tokens
      const kept = c.logprobs.tokens.length;
      assert.ok(kept >= 1 && kept <= n);
      for (const f of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'])
        assert.deepEqual(c.logprobs[f], cut.json.choices[0].logprobs[f].slice(0, kept), f);
      lone.push({ aah: s.json.aah, n, text: c.text });
    }
    // n = 2 (the second choice forks the first one's prefill): each choice stops where it stopped alone
    const both = count(await post({ ...base, n: 2, max_tokens: 60, stop }));
    assert.deepEqual(both.json.choices.map((c) => c.text), lone.map((l) => l.text));
    assert.equal(both.json.usage.completion_tokens, lone[0].n + lone[1].n);
    assert.equal(both.json.aah.kv_bytes, lone[0].aah.kv_bytes + lone[1].aah.kv_bytes);
    for (const w of Object.keys(both.json.aah.branch_usage))
      assert.equal(both.json.aah.branch_usage[w], lone[0].aah.branch_usage[w] + lone[1].aah.branch_usage[w], w);
    // the windows in ascending order as sent (JSON.parse would sort integer keys itself: read the raw text)
    const sent = [...both.text.match(/"branch_usage":\{([^}]*)\}/)[1].matchAll(/"(\d+)":/g)].map((x) => Number(x[1]));
    assert.ok(sent.length >= 3, both.text);
    assert.deepEqual(sent, [...sent].sort((a, b) => a - b), both.text);
    const streamed = await post({ ...base, n: 2, max_tokens: 60, stop, stream: true, stream_options: { include_usage: true } });
    const events = sseEvents(streamed.text);
    const joined = joinStream(events);
    for (let k = 0; k < 2; k++) {
      assert.equal(joined[k].text, lone[k].text);
      assert.equal(joined[k].finish_reason, 'stop');
      assert.deepEqual(joined[k].aah, lone[k].aah, `streamed choice ${k}`);
    }
    const last = events.filter((e) => e !== '[DONE]' && e.usage).pop();
    count({ status: 200, json: last });
    const m1 = await metrics(srv.port);
    assert.equal(m1.get('aahd_generation_tokens_total') - m0.get('aahd_generation_tokens_total'), generated);
    for (const [w, u] of Object.entries(usage)) {
      const key = `aahd_branch_usage_total{regime="full_adaptive",window="${w}"}`;
      assert.equal(m1.get(key) - (m0.get(key) || 0), u, key);
    }
  });

  test('regimes mixed in one batch give what each gives alone', async () => {
    const prompt = Array.from({ length: 200 }, (_, i) => 7 + ((i * 53) % 2000));
    const alone = {};
    for (const regime of REGIMES)
      alone[regime] = (await request(srv.port, 'POST', '/v1/completions',
        { prompt, max_tokens: 30, temperature: 0.7, seed: 5, aah_regime: regime })).json.choices[0].text;
    const together = await Promise.all(REGIMES.map((regime) => request(srv.port, 'POST', '/v1/completions',
      { prompt, max_tokens: 30, temperature: 0.7, seed: 5, aah_regime: regime })));
    for (const [i, regime] of REGIMES.entries())
      assert.equal(together[i].json.choices[0].text, alone[regime], regime);
    const s = await request(srv.port, 'POST', '/v1/completions',
      { prompt, max_tokens: 30, temperature: 0.7, seed: 5, aah_regime: 'full_adaptive', stream: true });
    assert.equal(joinStream(sseEvents(s.text))[0].text, alone.full_adaptive);
  });
});

describe('aahd under load (a slow engine: every step sleeps 5 ms)', () => {
  let srv;
  const slow = { AAHD_TEST_STEP_DELAY_US: '5000' };
  before(async () => {
    srv = await startServer(['--ctx-len', String(CTX), '--max-batch', '1', '--queue-length', '1'], slow);
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  // Starts a stream and resolves after `events` chunks with the response (to read on) and the request (to destroy).
  const openStream = (body, events = 2) => new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/completions', agent: false,
      headers: { 'Content-Type': 'application/json' } }, (res) => {
      let buf = '';
      let resolved = false;
      res.on('data', (d) => {
        buf += d;
        if (!resolved && buf.split('\n\n').length > events) {
          resolved = true;
          resolve({ req, res, text: () => buf });
        }
      });
      res.on('error', () => {});
    });
    req.on('error', (e) => { if (e.code !== 'ECONNRESET') reject(e); });
    req.end(JSON.stringify({ ...body, stream: true }));
  });

  test('a full queue answers 429 with Retry-After', async () => {
    const a = await openStream({ prompt: 'long one', max_tokens: 300 });   // runs in the only slot
    const waiting = complete(srv, { prompt: 'waits', max_tokens: 2 });      // fills the queue of one
    await until(async () => (await metrics(srv.port)).get('aahd_requests_waiting') === 1, 5000, 'a waiting request');
    const r = await complete(srv, { prompt: 'refused', max_tokens: 2 });
    assertError(r, 429);
    assert.equal(r.json.error.code, 'queue_full');
    assert.ok(Number(r.headers['retry-after']) >= 1);
    a.req.destroy();
    const w = await waiting;
    assert.equal(w.status, 200);
  });

  test('a client leaving mid-stream cancels its request and frees its pages', async () => {
    const before0 = await metrics(srv.port);
    const s = await openStream({ prompt: 'a long story', max_tokens: 400 }, 3);
    const during = await metrics(srv.port);
    assert.equal(during.get('aahd_requests_running'), 1);
    assert.ok(during.get('aahd_kv_cache_bytes_used') > 0, 'the running stream holds pages');
    s.req.destroy();
    await until(async () => {
      const m = await metrics(srv.port);
      return m.get('aahd_kv_cache_bytes_used') === 0 && m.get('aahd_requests_running') === 0;
    }, 3000, 'pages freed after the disconnect');
    const after0 = await metrics(srv.port);
    const generated = after0.get('aahd_generation_tokens_total') - before0.get('aahd_generation_tokens_total');
    assert.ok(generated < 400, `cancelled early: ${generated} tokens generated`);
    assert.match(srv.log(), /client went away mid-stream|client aborted|connection error/);
  });

  test('a client leaving a non-streamed request cancels it too', async () => {
    const before0 = await metrics(srv.port);
    const sock = net.connect(srv.port, '127.0.0.1');
    const body = JSON.stringify({ prompt: 'never read', max_tokens: 400 });
    sock.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    await until(async () => (await metrics(srv.port)).get('aahd_kv_cache_bytes_used') > 0, 15000, 'the request running');
    sock.destroy();
    await until(async () => {
      const m = await metrics(srv.port);
      return m.get('aahd_kv_cache_bytes_used') === 0 && m.get('aahd_requests_running') === 0;
    }, 15000, 'pages freed');
    const generated = (await metrics(srv.port)).get('aahd_generation_tokens_total') - before0.get('aahd_generation_tokens_total');
    assert.ok(generated < 400, `cancelled early: ${generated}`);
  });
});

describe('shutdown', () => {
  test('SIGTERM: stops accepting, finishes the running stream, exits 0', async () => {
    const srv = await startServer(['--ctx-len', String(CTX), '--shutdown-grace-seconds', '20'],
      { AAHD_TEST_STEP_DELAY_US: '5000' });
    const tryConnect = () => new Promise((resolve) => {
      const s = net.connect(srv.port, '127.0.0.1');
      s.on('connect', () => { s.destroy(); resolve('accepted'); });
      s.on('error', (e) => resolve(e.code));
    });
    let ended = false;
    let refusedWhileRunning = null;
    const events = await new Promise((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/completions', agent: false,
        headers: { 'Content-Type': 'application/json' } }, (res) => {
        let buf = '';
        let signalled = false;
        res.on('data', (d) => {
          buf += d;
          if (!signalled) {
            signalled = true;
            srv.proc.kill('SIGTERM');
            // while the stream still runs (400 tokens at 5 ms a step at least), new connections come to be refused
            until(async () => (await tryConnect()) === 'ECONNREFUSED', 10000, 'a refused connection')
              .then(() => { refusedWhileRunning = !ended; }, reject);
          }
        });
        res.on('end', () => {
          ended = true;
          resolve(sseEvents(buf));
        });
      });
      req.on('error', reject);
      req.end(JSON.stringify({ prompt: 'finish me', max_tokens: 400, stream: true }));
    });
    await until(() => refusedWhileRunning !== null, 10000, 'the refusal');
    assert.equal(refusedWhileRunning, true, 'the listening socket is closed while draining');
    const j = joinStream(events)[0];
    assert.equal(j.finish_reason, 'length', 'the running request was finished, not cut');
    assert.equal(events.at(-1), '[DONE]');
    const r = await srv.exited;
    assert.equal(r.code, 0, srv.log());
    assert.match(srv.log(), /draining/);
    assert.match(srv.log(), /stopped/);
  });

  test('SIGINT past the grace period: unfinished requests are cancelled, exit 0', async () => {
    const srv = await startServer(['--ctx-len', String(CTX), '--shutdown-grace-seconds', '0'],
      { AAHD_TEST_STEP_DELAY_US: '20000' });
    const res = request(srv.port, 'POST', '/v1/completions', { prompt: 'too long to wait for', max_tokens: 400 });
    await until(async () => (await metrics(srv.port)).get('aahd_requests_running') === 1, 3000, 'running');
    await sleep(100);
    srv.proc.kill('SIGINT');
    const r = await res;
    assert.equal(r.status, 200);
    assert.equal(r.json.choices[0].finish_reason, 'abort');
    assert.ok(r.json.usage.completion_tokens < 400);
    const e = await srv.exited;
    assert.equal(e.code, 0, srv.log());
  });
});

describe('limits', () => {
  test('listens on 127.0.0.1 by default', async () => {
    const srv = await startServer([]);
    try {
      assert.match(srv.log(), /listening on http:\/\/127\.0\.0\.1:/);
    } finally {
      await srv.stop();
    }
  });
});
