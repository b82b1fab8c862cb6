// tests/server/chat.test.mjs — POST /v1/chat/completions through a real socket: the prompt a chat request runs is the
// template rendered as python3-jinja2 renders it (tests/jinja/render_ref.py, transformers' settings), so its tokens are
// those of /v1/completions given that prompt (same seed, same text, same log-probabilities); the chat shapes, whole
// and streamed; the template's sources (--chat-template, tokenizer_config.json) and a model without one; every bad
// request and hostile template gets its 4xx in time while the requests beside it run undisturbed; the counters.
// Run by tests/test_chat.sh.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BUILD, MODEL, metrics, request, sseEvents, startServer, until } from './lib.mjs';

const PY = process.env.PYTHON || '/usr/bin/python3';
const TEMPLATE = 'conf/chat-template.jinja';
const CTX = 512;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-chat-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// The reference rendering: the variables the server renders with (transformers' apply_chat_template passes tools and
// documents as None; add_generation_prompt defaults to true as in vLLM; the test model has no BOS, EOS <|endoftext|>).
// renderAll takes [[messages, extra], …] and renders them all in one Python run (tests/chat_render.py).
// The usage of a chat request against that of the same prompt sent to /v1/completions: equal but for the tokens the
// prefix cache supplied (docs/prefix_cache.md), which depend on what ran before; those are a whole count below the
// prompt's length. A chat usage has completion_tokens_details.reasoning_tokens besides (docs/chat.md#reasoning): these
// answers of the random test model open no <think> block, so it is 0.
function sameUsage(got, want, what) {
  const cached = got.prompt_tokens_details?.cached_tokens;
  assert.ok(Number.isInteger(cached) && cached >= 0 && cached < got.prompt_tokens, `${what}: cached_tokens ${cached}`);
  assert.deepEqual(got.completion_tokens_details, { reasoning_tokens: 0 }, what);
  const strip = (u) => ({ ...u, prompt_tokens_details: undefined, completion_tokens_details: undefined });
  assert.deepEqual(strip(got), strip(want), what);
}

const varsOf = (messages, extra = {}) => ({ messages, tools: null, documents: null, add_generation_prompt: true,
  eos_token: '<|endoftext|>', ...extra });
function renderAll(template, list) {
  const file = path.join(tmp, `vars-${process.hrtime.bigint()}.json`);
  fs.writeFileSync(file, JSON.stringify(list.map(([m, e]) => varsOf(m, e))));
  return JSON.parse(execFileSync(PY, ['tests/chat_render.py', template, file]).toString('utf8'));
}
const render = (template, messages, extra) => renderAll(template, [[messages, extra]])[0];

// Conversations the fixtures of issue 26 name: system prompts, several turns, tool messages, empty contents, Unicode.
const CONVERSATIONS = [
  [{ role: 'user', content: 'Hello there' }],
  [{ role: 'system', content: 'You answer in one line.' }, { role: 'user', content: 'What is a window?' }],
  [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Name a prime.' },
    { role: 'assistant', content: 'Seven.' }, { role: 'user', content: 'Another one?' }],
  [{ role: 'user', content: 'Call the tool.' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: '{"x": 42}' }],
  [{ role: 'system', content: '' }, { role: 'user', content: '' }],
  [{ role: 'user', content: 'Grüße, 世界 — ünïcödé 🎉' }],
];

const post = (srv, body) => request(srv.port, 'POST', '/v1/chat/completions', body);

describe('with a configured template (--chat-template conf/chat-template.jinja)', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', String(CTX), '--chat-template', TEMPLATE, '--max-batch', '4']);
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test('/v1/models says chat is available, and from which template', async () => {
    const r = await request(srv.port, 'GET', '/v1/models');
    assert.equal(r.status, 200);
    assert.deepEqual(r.json.data[0].chat, { available: true, template: `--chat-template ${TEMPLATE}` });
  });

  test('each conversation runs the prompt python3-jinja2 renders: the tokens of /v1/completions with it', async () => {
    const prompts = renderAll(TEMPLATE, CONVERSATIONS.flatMap((m) => [[m, { add_generation_prompt: true }],
      [m, { add_generation_prompt: false }]]));
    for (const [ci, messages] of CONVERSATIONS.entries()) {
      for (const agp of [true, false]) {
        const prompt = prompts[2 * ci + (agp ? 0 : 1)];
        const common = { max_tokens: 10, temperature: 0.9, seed: 100 + ci, n: 2, logprobs: 2 };
        const c = await request(srv.port, 'POST', '/v1/completions', { prompt, ...common });
        assert.equal(c.status, 200, c.text);
        const { logprobs, ...rest } = common;
        const h = await post(srv, { messages, ...rest, logprobs: true, top_logprobs: logprobs,
          add_generation_prompt: agp });
        assert.equal(h.status, 200, h.text);
        const what = `conversation ${ci}, add_generation_prompt ${agp}`;
        assert.equal(h.json.object, 'chat.completion');
        assert.match(h.json.id, /^chatcmpl-/);
        sameUsage(h.json.usage, c.json.usage, what);
        assert.equal(h.json.choices.length, 2);
        for (const [i, ch] of h.json.choices.entries()) {
          const ref = c.json.choices[i];
          assert.equal(ch.index, i);
          assert.deepEqual(ch.message, { role: 'assistant', content: ref.text }, what);
          assert.equal(ch.finish_reason, ref.finish_reason, what);
          assert.deepEqual(ch.logprobs.content.map((e) => e.token), ref.logprobs.tokens, what);
          assert.deepEqual(ch.logprobs.content.map((e) => e.logprob), ref.logprobs.token_logprobs, what);
        }
        assert.equal(h.json.aah.regime, c.json.aah.regime);
      }
    }
  });

  test('logprobs in the chat shape: token, logprob, bytes, top_logprobs best first', async () => {
    const h = await post(srv, { messages: CONVERSATIONS[1], max_completion_tokens: 8, seed: 5, logprobs: true,
      top_logprobs: 3 });
    assert.equal(h.status, 200, h.text);
    const content = h.json.choices[0].logprobs.content;
    assert.equal(content.length, h.json.usage.completion_tokens);
    let joined = [];
    for (const e of content) {
      assert.deepEqual(Object.keys(e).sort(), ['bytes', 'logprob', 'token', 'top_logprobs']);
      assert.ok(e.logprob <= 0);
      assert.equal(e.top_logprobs.length, 3);
      for (let k = 1; k < 3; k++) assert.ok(e.top_logprobs[k - 1].logprob >= e.top_logprobs[k].logprob);
      assert.ok(e.top_logprobs[0].logprob >= e.logprob);
      for (const t of e.top_logprobs) assert.deepEqual(Object.keys(t).sort(), ['bytes', 'logprob', 'token']);
      joined = joined.concat(e.bytes);
    }
    // the tokens' bytes are the answer's bytes
    assert.equal(Buffer.from(joined).toString('utf8'), h.json.choices[0].message.content);
    const none = await post(srv, { messages: CONVERSATIONS[0], max_tokens: 3, logprobs: true });
    assert.equal(none.json.choices[0].logprobs.content.length, 3);
    assert.ok(none.json.choices[0].logprobs.content.every((e) => e.top_logprobs.length === 0));
    const off = await post(srv, { messages: CONVERSATIONS[0], max_tokens: 3 });
    assert.equal(off.json.choices[0].logprobs, null);
  });

  test('streamed: the role first, deltas that join to the whole answer, finish_reason last, then usage', async () => {
    const body = { messages: CONVERSATIONS[2], max_tokens: 12, temperature: 0.8, seed: 9, n: 2, logprobs: true,
      top_logprobs: 1 };
    const whole = await post(srv, body);
    const r = await post(srv, { ...body, stream: true, stream_options: { include_usage: true } });
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /text\/event-stream/);
    const events = sseEvents(r.text);
    assert.equal(events.at(-1), '[DONE]');
    const usage = events.at(-2);
    assert.deepEqual(usage.choices, []);
    sameUsage(usage.usage, whole.json.usage, 'streamed usage');
    for (const [i, ref] of whole.json.choices.entries()) {
      const mine = events.slice(0, -2).filter((e) => e.choices[0].index === i);
      for (const e of mine) {
        assert.equal(e.object, 'chat.completion.chunk');
        assert.equal(e.id, events[0].id);
        assert.equal(e.usage, null);   // every chunk but the last says usage null (include_usage)
      }
      assert.deepEqual(mine[0].choices[0].delta, { role: 'assistant', content: '' });
      assert.ok(mine.slice(1).every((e) => !('role' in e.choices[0].delta)));
      assert.ok(mine.slice(0, -1).every((e) => e.choices[0].finish_reason === null));
      assert.equal(mine.at(-1).choices[0].finish_reason, ref.finish_reason);
      assert.ok(mine.at(-1).choices[0].aah.regime);
      assert.equal(mine.map((e) => e.choices[0].delta.content ?? '').join(''), ref.message.content);
      const lps = mine.flatMap((e) => e.choices[0].logprobs?.content ?? []);
      assert.deepEqual(lps, ref.logprobs.content);
    }
  });

  test('stop strings end the answer before them; max_completion_tokens wins over max_tokens', async () => {
    const base = { messages: CONVERSATIONS[0], temperature: 0, max_tokens: 30 };
    const free = await post(srv, base);
    const text = free.json.choices[0].message.content;
    assert.ok(text.length > 4, text);
    const stop = text.slice(2, 4);
    const cut = await post(srv, { ...base, stop: [stop] });
    assert.equal(cut.json.choices[0].message.content, text.slice(0, text.indexOf(stop)));
    assert.equal(cut.json.choices[0].finish_reason, 'stop');
    const short = await post(srv, { ...base, max_completion_tokens: 2 });
    assert.equal(short.json.usage.completion_tokens, 2);
    assert.equal(short.json.choices[0].finish_reason, 'length');
  });

  test('text parts join with "\\n" (as vLLM joins them); other part types are refused by name', async () => {
    const common = { max_tokens: 6, seed: 3, temperature: 1 };
    const parts = await post(srv, { messages: [{ role: 'user', content: [{ type: 'text', text: 'one' },
      { type: 'text', text: 'two' }] }], ...common });
    const str = await post(srv, { messages: [{ role: 'user', content: 'one\ntwo' }], ...common });
    assert.equal(parts.status, 200, parts.text);
    assert.deepEqual(parts.json.choices, str.json.choices);
    const img = await post(srv, { messages: [{ role: 'user', content: [{ type: 'text', text: 'see' },
      { type: 'image_url', image_url: { url: 'http://example.com/x.png' } }] }] });
    assert.equal(img.status, 400);
    assert.equal(img.json.error.param, 'messages[0].content[1]');
    assert.match(img.json.error.message, /image_url/);
  });

  test('bad requests: each gets its 400 naming the field, and the next request is served', async () => {
    const many = Array.from({ length: 10000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `m${i}` }));
    let deep = 'x';
    for (let i = 0; i < 40; i++) deep = [deep];
    const cases = [
      [{ max_tokens: 2 }, 'messages', /required/],
      [{ messages: 'hello' }, 'messages', /array/],
      [{ messages: [] }, 'messages', /empty/],
      [{ messages: {} }, 'messages', /array/],
      [{ messages: many }, 'messages', /10000 messages/],
      [{ messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role', /wizard/],
      [{ messages: [{ content: 'x' }] }, 'messages[0].role', /role/],
      [{ messages: [{ role: 'user' }] }, 'messages[0].content', /content/],
      [{ messages: [{ role: 'user', content: 5 }] }, 'messages[0].content', /string/],
      [{ messages: [{ role: 'user', content: deep }] }, 'messages[0]', /deeper/],
      [{ messages: [{ role: 'user', content: [deep] }] }, 'messages[0]', /deeper/],
      [{ messages: CONVERSATIONS[0], top_logprobs: 2 }, 'top_logprobs', /logprobs/],
      [{ messages: CONVERSATIONS[0], logprobs: 3 }, 'logprobs', /true or false/],
      [{ messages: CONVERSATIONS[0], top_logprobs: 21, logprobs: true }, 'top_logprobs', /\[0, 20\]/],
      [{ messages: CONVERSATIONS[0], response_format: { type: 'json_object', strict: true } }, 'response_format',
        /unknown field 'strict'/],
      [{ messages: CONVERSATIONS[0], response_format: { type: 'xml' } }, 'response_format', /not supported/],
      [{ messages: CONVERSATIONS[0], tool_choice: 'required' }, 'tool_choice', /needs 'tools'/],
      [{ messages: CONVERSATIONS[0], chat_template: '{{ 1 }}' }, 'chat_template', /own chat template/],
      [{ messages: CONVERSATIONS[0], chat_template_kwargs: { messages: [] } }, 'chat_template_kwargs', /messages/],
      [{ messages: CONVERSATIONS[0], max_completion_tokens: -1 }, 'max_completion_tokens', /integer/],
      [{ messages: CONVERSATIONS[0], n: 0 }, 'n', /integer/],
      [{ messages: CONVERSATIONS[0], temperature: 3 }, 'temperature', /\[0, 2\]/],
      [{ messages: CONVERSATIONS[0], aah_regime: 'nope' }, 'aah_regime', /nope/],
      [{ messages: CONVERSATIONS[0], max_tokens: CTX }, 'max_tokens', /maximum context length/],
      [{ messages: [{ role: 'user', content: 'word '.repeat(2000) }] }, 'messages', /maximum context length/],
    ];
    for (const [body, param, re] of cases) {
      const t0 = Date.now();
      const r = await post(srv, body);
      assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${r.text}`);
      assert.equal(r.json.error.param, param, r.text);
      assert.match(r.json.error.message, re);
      assert.ok(Date.now() - t0 < 10000);
    }
    const bad = await request(srv.port, 'POST', '/v1/chat/completions', '{"messages": [');
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.code, 'invalid_json');
    const other = await post(srv, { model: 'other', messages: CONVERSATIONS[0] });
    assert.equal(other.status, 404);
    assert.equal(other.json.error.code, 'model_not_found');
    const ok = await post(srv, { messages: CONVERSATIONS[0], max_tokens: 2 });
    assert.equal(ok.status, 200);
  });

  test('every request field is accounted for: implemented, a documented no-op, or a 400 that names it; unknown too',
    async () => {
      const M = CONVERSATIONS[0];
      const comp = (body) => request(srv.port, 'POST', '/v1/completions', body);
      // refused with a value that would change the output, on both endpoints (server/request_fields.c)
      const refused = [['guided_whitespace_pattern', ' *'], ['priority', 3], ['include_stop_str_in_output', true],
        ['logits_processors', ['x']],
        ['allowed_token_ids', [1]], ['prompt_logprobs', 1], ['n_predict', 5], ['use_beam_search', true]];
      for (const [name, value] of refused) {
        for (const [which, r] of [['chat', await post(srv, { messages: M, max_tokens: 1, [name]: value })],
          ['completions', await comp({ prompt: 'x', max_tokens: 1, [name]: value })]]) {
          assert.equal(r.status, 400, `${which} ${name}: ${r.text}`);
          assert.equal(r.json.error.param, name, r.text);
          assert.match(r.json.error.message, /not supported/);
        }
      }
      // the constraint fields are implemented on both endpoints (docs/structured-output.md; tests/test_structured.sh)
      const constrained = [['structured_outputs', { regex: 'a' }], ['guided_json', { const: 'a' }], ['guided_regex', 'a'],
        ['guided_choice', ['a']], ['guided_grammar', 'root ::= "a"'], ['grammar', 'root ::= "a"'],
        ['json_schema', { const: 'a' }], ['response_format', { type: 'json_schema', json_schema: { schema: { const: 'a' } } }]];
      for (const [name, value] of constrained) {
        for (const [which, r] of [['chat', await post(srv, { messages: M, max_tokens: 8, [name]: value })],
          ['completions', await comp({ prompt: 'x', max_tokens: 8, [name]: value })]]) {
          assert.equal(r.status, 200, `${which} ${name}: ${r.text}`);
          const c = r.json.choices[0];
          assert.equal(c.message ? c.message.content : c.text, name.includes('json') || name === 'response_format' ? '"a"' : 'a');
          assert.equal(c.finish_reason, 'stop');
        }
      }
      // chat-only refusals
      for (const [name, value] of [['parallel_tool_calls', 0], ['store', true], ['reasoning_effort', 'low'],
        ['service_tier', 'flex'], ['web_search_options', {}]]) {
        const r = await post(srv, { messages: M, max_tokens: 1, [name]: value });
        assert.equal(r.status, 400, `${name}: ${r.text}`);
        assert.equal(r.json.error.param, name);
      }
      // the values that change nothing, and the documented no-ops, are answered
      const neutral = { repetition_penalty: 1, min_tokens: 0, ignore_eos: false, priority: 0, stop_token_ids: [],
        include_stop_str_in_output: false, skip_special_tokens: true, user: 'u-1', cache_prompt: true };
      const a = await post(srv, { messages: M, max_tokens: 1, ...neutral, metadata: { k: 'v' }, store: false,
        service_tier: 'auto', parallel_tool_calls: true });
      assert.equal(a.status, 200, a.text);
      const b = await comp({ prompt: 'x', max_tokens: 1, ...neutral });
      assert.equal(b.status, 200, b.text);
      // unknown names, and a field of the other endpoint
      for (const [r, param] of [[await post(srv, { messages: M, max_tokens: 1, frobnicate: 1 }), 'frobnicate'],
        [await comp({ prompt: 'x', max_tokens: 1, frobnicate: 1 }), 'frobnicate'],
        [await post(srv, { messages: M, max_tokens: 1, prompt: 'x' }), 'prompt'],
        [await comp({ prompt: 'x', max_tokens: 1, messages: M }), 'messages'],
        [await comp({ prompt: 'x', max_tokens: 1, metadata: {} }), 'metadata']]) {
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.param, param, r.text);
        assert.match(r.json.error.message, /unrecognized request argument/);
      }
      // stream_options without stream; a tool that is not a function
      for (const r of [await post(srv, { messages: M, max_tokens: 1, stream_options: { include_usage: true } }),
        await comp({ prompt: 'x', max_tokens: 1, stream_options: { include_usage: true } })]) {
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.param, 'stream_options');
      }
      const tool = await post(srv, { messages: M, max_tokens: 1, tools: [{ type: 'web_search' }] });
      assert.equal(tool.status, 400, tool.text);
      assert.equal(tool.json.error.param, 'tools');
    });

  test('chat requests are counted by status in aahd_chat_requests_total, in aahd_requests_total and /v1/stats', async (t) => {
    // a server of its own: a request is counted when libmicrohttpd reports it completed, which may come after its
    // client has read the answer, so on a busy machine the last request of an earlier test here was counted after
    // a baseline taken now (seen: 2 chat 400s where 1 was sent)
    const srv = await startServer(['--ctx-len', String(CTX), '--chat-template', TEMPLATE]);
    t.after(async () => {
      const r = await srv.stop();
      assert.equal(r.code, 0, srv.log());
    });
    const m0 = await metrics(srv.port);
    const get = (m, k) => m.get(k) ?? 0;
    await post(srv, { messages: CONVERSATIONS[0], max_tokens: 1 });
    await post(srv, { messages: 7 });
    await request(srv.port, 'POST', '/v1/completions', { prompt: 'x', max_tokens: 1 });
    // wait for the counts to arrive, then check them exactly
    const d = (m, k) => get(m, k) - get(m0, k);
    let m1;
    await until(async () => {
      m1 = await metrics(srv.port);
      return d(m1, 'aahd_requests_total{status="200"}') >= 2 && d(m1, 'aahd_chat_requests_total{status="400"}') >= 1;
    }, 10000, 'the requests counted');
    assert.equal(get(m1, 'aahd_chat_requests_total{status="200"}') - get(m0, 'aahd_chat_requests_total{status="200"}'), 1);
    assert.equal(get(m1, 'aahd_chat_requests_total{status="400"}') - get(m0, 'aahd_chat_requests_total{status="400"}'), 1);
    assert.equal(get(m1, 'aahd_requests_total{status="200"}') - get(m0, 'aahd_requests_total{status="200"}'), 2);
    const st = await request(srv.port, 'GET', '/v1/stats');
    assert.equal(st.json.requests.chat_by_status['200'], m1.get('aahd_chat_requests_total{status="200"}'));
    assert.equal(st.json.requests.chat_by_status['400'], m1.get('aahd_chat_requests_total{status="400"}'));
  });
});

// Qwen3's own template (the Qwen3 tokenizer's tokenizer_config.json, which `make test` fetches into the cache) served
// over the test model: namespace(), messages[::-1], string methods, tojson of the tools, enable_thinking.
describe('Qwen3\'s template', () => {
  const CACHE = process.env.AAH_CACHE || '.cache';
  const file = path.join(tmp, 'qwen3.jinja');
  let srv;
  before(async () => {
    const cfg = path.join(CACHE, 'qwen3-tokenizer', 'tokenizer_config.json');
    assert.ok(fs.existsSync(cfg), `${cfg} is missing: tools/fetch_tokenizer.sh fetches it (make test does)`);
    fs.writeFileSync(file, JSON.parse(fs.readFileSync(cfg, 'utf8')).chat_template);
    srv = await startServer(['--ctx-len', String(CTX), '--chat-template', file]);
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test('the prompt of each conversation is python3-jinja2\'s, with and without thinking and tools', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city — «now»',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const withThink = [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: '<think>\nhm\n</think>\n\nHello!' },
      { role: 'user', content: 'And now?' }];
    const variants = [];
    for (const messages of [...CONVERSATIONS, withThink])
      for (const kw of [undefined, { enable_thinking: false }]) variants.push({ messages, kw, tools: undefined });
    variants.push({ messages: CONVERSATIONS[1], kw: undefined, tools });
    const prompts = renderAll(file, variants.map((v) => [v.messages, { ...(v.kw || {}), tools: v.tools ?? null }]));
    for (const [i, v] of variants.entries()) {
      const prompt = prompts[i];
      const c = await request(srv.port, 'POST', '/v1/completions', { prompt, max_tokens: 6, seed: i });
      const body = { messages: v.messages, max_tokens: 6, seed: i };
      if (v.kw) body.chat_template_kwargs = v.kw;
      if (v.tools) body.tools = v.tools;
      const h = await post(srv, body);
      assert.equal(h.status, 200, `${i}: ${h.text}`);
      sameUsage(h.json.usage, c.json.usage, `variant ${i}`);
      assert.equal(h.json.choices[0].message.content, c.json.choices[0].text, `variant ${i}`);
    }
  });
});

// Mistral's template (a fixture of tests/test_jinja.sh): roles must alternate, a system message only first — the
// template's own raise_exception, answered 400 with its message.
describe('Mistral\'s template', () => {
  const file = 'tests/data/chat/mistral.jinja';
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', String(CTX), '--chat-template', file]);
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test('a conversation it takes runs python3-jinja2\'s prompt; one it refuses gets its message as a 400', async () => {
    const ok = [CONVERSATIONS[0], CONVERSATIONS[2], CONVERSATIONS[5]];
    const prompts = renderAll(file, ok.map((m) => [m]));
    for (const [i, messages] of ok.entries()) {
      const c = await request(srv.port, 'POST', '/v1/completions', { prompt: prompts[i], max_tokens: 5, seed: i });
      const h = await post(srv, { messages, max_tokens: 5, seed: i });
      assert.equal(h.status, 200, h.text);
      sameUsage(h.json.usage, c.json.usage, 'usage');
      assert.equal(h.json.choices[0].message.content, c.json.choices[0].text);
    }
    const refused = [
      [[{ role: 'user', content: 'a' }, { role: 'user', content: 'b' }], /roles must alternate/],
      [[{ role: 'user', content: 'a' }, { role: 'system', content: 'b' }, { role: 'user', content: 'c' }],
        /Only user and assistant roles/],
      [CONVERSATIONS[3], /Tool call IDs/],
    ];
    for (const [messages, re] of refused) {
      const r = await post(srv, { messages });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.code, 'chat_template_error');
      assert.equal(r.json.error.param, 'messages');
      assert.match(r.json.error.message, re);
    }
  });
});

describe('without a template', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', String(CTX)]);
  });
  after(async () => {
    await srv.stop();
  });

  test('a chat request gets a 400 that names --chat-template; /v1/models says chat is unavailable', async () => {
    const r = await post(srv, { messages: CONVERSATIONS[0] });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'chat_template_missing');
    assert.match(r.json.error.message, /--chat-template/);
    const m = await request(srv.port, 'GET', '/v1/models');
    assert.deepEqual(m.json.data[0].chat, { available: false, template: null });
    const c = await request(srv.port, 'POST', '/v1/completions', { prompt: 'still here', max_tokens: 2 });
    assert.equal(c.status, 200);
  });
});

// A model directory whose tokenizer_config.json carries the template (the list-of-named-templates form, "default"
// taken): the test model's files linked, its tokenizer_config.json extended.
function modelWithTemplate(name, template) {
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir);
  for (const f of fs.readdirSync(MODEL))
    if (f !== 'tokenizer_config.json') fs.symlinkSync(path.resolve(MODEL, f), path.join(dir, f));
  const cfg = JSON.parse(fs.readFileSync(path.join(MODEL, 'tokenizer_config.json'), 'utf8'));
  cfg.chat_template = [{ name: 'tool_use', template: '{{ raise_exception("not this one") }}' },
    { name: 'default', template }];
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(cfg));
  return dir;
}

// A template that behaves by chat_template_kwargs.mode: as conf/chat-template.jinja, or refusing a tool message
// (raise_exception), or looping for ever in effect (three nested loops over the messages), or recursing without end.
const HOSTILE = `{%- if mode == 'loop' %}
{%- for a in messages %}{%- for b in messages %}{%- for c in messages %}{%- for d in messages %}{{ '' }}{%- endfor %}{%- endfor %}{%- endfor %}{%- endfor %}
{%- elif mode == 'recurse' %}
{%- macro deeper(n) %}{{ deeper(n) }}{% endmacro %}{{ deeper(1) }}
{%- elif mode == 'grow' %}
{%- for a in messages %}{%- for b in messages %}{%- for c in messages %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{%- endfor %}{%- endfor %}{%- endfor %}
{%- else %}
{%- for message in messages %}
{%- if message.role == 'tool' %}
{{- raise_exception('this template has no tool role') }}
{%- endif %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- endif %}
{%- endif %}`;

describe('the model\'s own template (tokenizer_config.json), and hostile ones', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', String(CTX), '--max-batch', '4'], {}, modelWithTemplate('hostile', HOSTILE));
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test('the "default" template of tokenizer_config.json is the one rendered', async () => {
    const m = await request(srv.port, 'GET', '/v1/models');
    assert.equal(m.json.data[0].chat.available, true);
    assert.match(m.json.data[0].chat.template, /tokenizer_config\.json$/);
    const messages = CONVERSATIONS[1];
    const file = path.join(tmp, 'hostile.jinja');
    fs.writeFileSync(file, HOSTILE);
    const prompt = render(file, messages);
    const c = await request(srv.port, 'POST', '/v1/completions', { prompt, max_tokens: 6, seed: 4 });
    const h = await post(srv, { messages, max_tokens: 6, seed: 4 });
    assert.equal(h.status, 200, h.text);
    assert.equal(h.json.choices[0].message.content, c.json.choices[0].text);
    sameUsage(h.json.usage, c.json.usage, 'usage');
  });

  test('raise_exception, endless loops, recursion and growth get their 400 in time; the requests beside them run undisturbed',
    async () => {
      const probe = { messages: CONVERSATIONS[2], max_tokens: 24, temperature: 0.7, seed: 77 };
      const alone = await post(srv, probe);
      assert.equal(alone.status, 200, alone.text);
      const many = Array.from({ length: 400 }, (_, i) => ({ role: 'user', content: `m${i}` }));
      const hostile = [
        [{ messages: CONVERSATIONS[3] }, 'chat_template_error', /no tool role/],
        [{ messages: many, chat_template_kwargs: { mode: 'loop' } }, 'chat_template_limit', /./],
        [{ messages: CONVERSATIONS[0], chat_template_kwargs: { mode: 'recurse' } }, 'chat_template_limit', /./],
        [{ messages: many, chat_template_kwargs: { mode: 'grow' } }, 'chat_template_limit', /./],
      ];
      const t0 = Date.now();
      const beside = Promise.all([post(srv, probe), post(srv, { ...probe, stream: true })]);
      const answers = await Promise.all(hostile.map(([body]) => post(srv, body)));
      for (const [i, r] of answers.entries()) {
        assert.equal(r.status, 400, `${i}: ${r.text}`);
        assert.equal(r.json.error.code, hostile[i][1], r.text);
        assert.equal(r.json.error.param, 'messages');
        assert.match(r.json.error.message, hostile[i][2]);
      }
      assert.ok(Date.now() - t0 < 30000, 'within the request timeout');
      const [same, streamed] = await beside;
      assert.deepEqual(same.json.choices, alone.json.choices);
      const text = sseEvents(streamed.text).filter((e) => e !== '[DONE]')
        .map((e) => e.choices[0].delta.content ?? '').join('');
      assert.equal(text, alone.json.choices[0].message.content);
    });
});

describe('queueing and cancellation, as /v1/completions (a slow engine: every step sleeps 5 ms)', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', String(CTX), '--max-batch', '1', '--queue-length', '1', '--chat-template',
      TEMPLATE], { AAHD_TEST_STEP_DELAY_US: '5000' });
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });
  const long = { messages: CONVERSATIONS[0], max_tokens: 300 };
  // A chat stream, resolved after `events` events with the request (to destroy).
  const openStream = (body, events = 2) => new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/chat/completions',
      agent: false, headers: { 'Content-Type': 'application/json' } }, (res) => {
      let buf = '';
      let resolved = false;
      res.on('data', (d) => {
        buf += d;
        if (!resolved && buf.split('\n\n').length > events) {
          resolved = true;
          resolve({ req, res });
        }
      });
      res.on('error', () => {});
    });
    req.on('error', (e) => { if (e.code !== 'ECONNRESET') reject(e); });
    req.end(JSON.stringify({ ...body, stream: true }));
  });
  const idle = () => until(async () => {
    const m = await metrics(srv.port);
    return m.get('aahd_kv_cache_bytes_used') === 0 && m.get('aahd_requests_running') === 0 &&
      m.get('aahd_requests_waiting') === 0;
  }, 10000, 'pages freed');

  test('a full queue answers a chat request 429 with Retry-After', async () => {
    const a = await openStream(long, 3);
    const waiting = post(srv, { messages: CONVERSATIONS[0], max_tokens: 2 });
    await until(async () => (await metrics(srv.port)).get('aahd_requests_waiting') === 1, 5000, 'a waiting request');
    const r = await post(srv, { messages: CONVERSATIONS[0], max_tokens: 2 });
    assert.equal(r.status, 429);
    assert.equal(r.json.error.code, 'queue_full');
    assert.ok(Number(r.headers['retry-after']) >= 1);
    a.req.destroy();
    assert.equal((await waiting).status, 200);
    await idle();
  });

  test('a client leaving a chat stream, or a whole chat request, cancels it and frees its pages', async () => {
    const m0 = await metrics(srv.port);
    const s = await openStream(long, 3);
    assert.equal((await metrics(srv.port)).get('aahd_requests_running'), 1);
    s.req.destroy();
    await idle();
    const sock = net.connect(srv.port, '127.0.0.1');
    const body = JSON.stringify(long);
    sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    await until(async () => (await metrics(srv.port)).get('aahd_kv_cache_bytes_used') > 0, 15000, 'the request running');
    sock.destroy();
    await idle();
    const generated = (await metrics(srv.port)).get('aahd_generation_tokens_total') - m0.get('aahd_generation_tokens_total');
    assert.ok(generated < 300, `both cancelled early: ${generated} tokens generated of 2 × 300`);
  });
});

// libmicrohttpd serves every connection on 4 epoll workers (docs/http-front.md): a chat handler that blocked one while
// its job ran would let at most 4 chat requests be in flight at once. Ten are, whole and streamed, and all answer.
describe('more chat requests in flight than libmicrohttpd has workers (a slow engine: every step sleeps 5 ms)', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', String(CTX), '--max-batch', '1', '--queue-length', '16', '--chat-template',
      TEMPLATE], { AAHD_TEST_STEP_DELAY_US: '5000' });
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test('ten at once, six whole and four streamed, are all submitted and all answered', async () => {
    const body = { messages: CONVERSATIONS[1], max_tokens: 40, temperature: 0 };
    const pending = [];
    for (let i = 0; i < 10; i++) pending.push(post(srv, i < 6 ? body : { ...body, stream: true }));
    await until(async () => {
      const m = await metrics(srv.port);
      return m.get('aahd_requests_running') + m.get('aahd_requests_waiting') === 10;
    }, 15000, 'ten chat requests in the scheduler at once');
    const answers = await Promise.all(pending);
    const whole = answers[0].json.choices[0].message.content;
    for (const [i, r] of answers.entries()) {
      assert.equal(r.status, 200, r.text);
      if (i < 6) {
        assert.equal(r.json.object, 'chat.completion');
        assert.equal(r.json.choices[0].message.content, whole);
        continue;
      }
      const events = sseEvents(r.text);
      assert.equal(events.at(-1), '[DONE]');
      const text = events.slice(0, -1).map((e) => e.choices[0]?.delta?.content ?? '').join('');
      assert.equal(text, whole, 'a stream joins to the whole answer (temperature 0)');
    }
  });
});

test('a template that does not parse fails the start, naming its line and column', async () => {
  const file = path.join(tmp, 'broken.jinja');
  fs.writeFileSync(file, '{% for m in messages %}\n{{ m.content }\n{% endfor %}\n');
  await assert.rejects(startServer(['--chat-template', file]), (e) => {
    assert.match(e.message, /broken\.jinja/);
    assert.match(e.message, /line 2, column \d+/);
    return true;
  });
  await assert.rejects(startServer(['--chat-template', path.join(tmp, 'absent.jinja')]), /absent\.jinja/);
  assert.ok(fs.existsSync(`${BUILD}/aahd`));
});
