// tests/server/structured.test.mjs — constrained decoding through a real socket (docs/structured-output.md). Every
// schema of tests/data/grammar/schemas, through each surface in turn (response_format json_schema,
// structured_outputs.json, guided_json, llama-server's json_schema), sampled at temperature 1 with 20 seeds (n: 20)
// from a random-weights model (qwen3-small-a, 2056 rows) and from the trained demo run (runs/aah checkpoint 10000,
// imported by aah-convert): every output that the grammar completed validates under python3-jsonschema
// (tests/structured_validate.py), and the outputs cut by max_tokens are counted and must be few. Then regexes
// (re.fullmatch), choices, llama.cpp's GBNF grammars (tests/grammar_ref.py, an independent Earley recognizer),
// json_object, the chat endpoint streamed, determinism under a seed, the refusals that name the field and keyword,
// and the /metrics families. Run by tests/test_structured.sh (node --test).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BUILD, TESTDATA, metrics, request, startServer } from './lib.mjs';

const SCHEMAS = `${TESTDATA}/grammar/schemas`;
const GBNF = `${TESTDATA}/grammar/gbnf`;
// 20 seeds; the sanitizer pass sets fewer (tests/test_structured.sh): the same code paths, fewer outputs to judge
const SEEDS = Number(process.env.AAH_STRUCTURED_SEEDS || 20);
const schemas = fs.readdirSync(SCHEMAS).filter((f) => f.endsWith('.json')).sort()
  .map((f) => ({ name: f, schema: JSON.parse(fs.readFileSync(path.join(SCHEMAS, f), 'utf8')).schema }));

// The four surfaces that carry a JSON Schema, used in turn.
const SURFACES = [
  (s) => ({ response_format: { type: 'json_schema', json_schema: { name: 'out', schema: s, strict: true } } }),
  (s) => ({ structured_outputs: { json: s } }),
  (s) => ({ guided_json: JSON.stringify(s) }),
  (s) => ({ json_schema: s }),
];

function validate(cases) {
  const out = execFileSync('/usr/bin/python3', ['tests/structured_validate.py'],
    { input: JSON.stringify(cases), maxBuffer: 1 << 28 });
  return JSON.parse(out);
}

function texts(r) {
  assert.equal(r.status, 200, r.text);
  return r.json.choices;
}

// Samples every schema; returns { cases, cut }: the outputs the grammar completed, per schema, and those cut short.
async function sampleSchemas(srv, maxTokens, prompt) {
  const cases = [];
  let cut = 0;
  let total = 0;
  const cutNames = {};
  for (let i = 0; i < schemas.length; i++) {
    const { name, schema } = schemas[i];
    const outputs = [];
    // two requests of n: 10 (the server's max_n is 16): choice k draws with seed + k, so 20 seeds in all
    const choices = [];
    for (const seed of [1000 * i, 1000 * i + SEEDS / 2]) {
      const r = await request(srv.port, 'POST', '/v1/completions', {
        prompt, max_tokens: maxTokens, temperature: 1, seed, n: SEEDS / 2, ...SURFACES[i % SURFACES.length](schema),
      });
      assert.equal(r.status, 200, `${name}: ${r.text}`);
      choices.push(...texts(r));
    }
    for (const c of choices) {
      total++;
      if (c.finish_reason === 'stop') outputs.push(c.text);
      else {
        assert.equal(c.finish_reason, 'length', `${name}: ${JSON.stringify(c)}`);
        cut++;
        cutNames[name] = (cutNames[name] || 0) + 1;
      }
    }
    cases.push({ name, kind: 'schema', spec: schema, outputs });
  }
  if (cut) console.log(`cut by max_tokens: ${JSON.stringify(cutNames)}`);
  return { cases, cut, total };
}

describe('constrained decoding, random weights (qwen3-small-a)', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', '4096', '--max-batch', '8', '--max-tokens', '2048', '--queue-length', '64',
      '--chat-template', 'conf/chat-template.jinja']);
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test(`every schema (${schemas.length}), ${SEEDS} seeds at temperature 1: completed outputs validate`, async () => {
    const { cases, cut, total } = await sampleSchemas(srv, 2048, 'Answer in JSON:');
    const v = validate(cases);
    assert.deepEqual(v.failures, [], JSON.stringify(v.failures.slice(0, 5), null, 1));
    console.log(`random weights: ${v.checked} outputs validated, ${cut} of ${total} cut by max_tokens`);
    // open-ended schemas (an unanchored pattern, recursion, free additional properties) can run past max_tokens at
    // temperature 1 on random weights: those are counted, not judged (check_scheduler holds cut outputs to be prefixes)
    assert.ok(cut <= total * 0.15, `${cut} of ${total} outputs ran out of tokens`);
  });

  test('regexes match in full (re.fullmatch) and choices are members', async () => {
    const regexes = ['[0-9]{3}-[0-9]{4}', '(yes|no|maybe)', '[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8}){0,2}',
      '\\d{4}-\\d{2}-\\d{2}', '(0|[1-9][0-9]*)(\\.[0-9]{1,3})?', '[a-f0-9]{8}', '(ab|cd)*e', '\\w{1,8}@\\w{1,8}\\.com',
      '[^\\n"]{1,20}', '(\\+|-)?[0-9]{1,5}'];
    const cases = [];
    for (const [i, re] of regexes.entries()) {
      const surface = i % 2 ? { guided_regex: re } : { structured_outputs: { regex: re } };
      const r = await request(srv.port, 'POST', '/v1/completions',
        { prompt: 'x', max_tokens: 200, temperature: 1, seed: i, n: 10, ...surface });
      const out = texts(r).filter((c) => c.finish_reason === 'stop').map((c) => c.text);
      assert.ok(out.length >= 8, `${re}: ${out.length} of 10 complete`);
      cases.push({ name: re, kind: 'regex', spec: re, outputs: out });
    }
    const choices = ['Paris', 'London', 'New York', 'Zürich', 'naïve "quotes"'];
    for (const surface of [{ guided_choice: choices }, { structured_outputs: { choice: choices } }]) {
      const r = await request(srv.port, 'POST', '/v1/completions',
        { prompt: 'x', max_tokens: 50, temperature: 1, seed: 5, n: 10, ...surface });
      const out = texts(r).map((c) => {
        assert.equal(c.finish_reason, 'stop');
        return c.text;
      });
      cases.push({ name: 'choice', kind: 'choice', spec: choices, outputs: out });
    }
    const v = validate(cases);
    assert.deepEqual(v.failures, [], JSON.stringify(v.failures.slice(0, 5), null, 1));
  });

  test("llama.cpp's GBNF grammars: every sample is in the language (an independent Earley recognizer)", async () => {
    const cases = [];
    for (const f of fs.readdirSync(GBNF).filter((x) => x.endsWith('.gbnf')).sort()) {
      const text = fs.readFileSync(path.join(GBNF, f), 'utf8');
      const surface = f.length % 2 ? { grammar: text } : { structured_outputs: { grammar: text } };
      const r = await request(srv.port, 'POST', '/v1/completions',
        { prompt: 'x', max_tokens: 300, temperature: 1, seed: 7, n: 10, ...surface });
      const out = texts(r).filter((c) => c.finish_reason === 'stop').map((c) => c.text);
      cases.push({ name: f, kind: 'gbnf', spec: text, outputs: out });
    }
    const v = validate(cases);
    assert.deepEqual(v.failures, [], JSON.stringify(v.failures.slice(0, 5), null, 1));
    assert.ok(v.checked >= 20, `only ${v.checked} complete samples`);
  });

  test('json_object; the chat endpoint, streamed; the same seed gives the same outputs', async () => {
    const body = { messages: [{ role: 'user', content: 'Give me JSON' }], max_tokens: 400, temperature: 1, seed: 3,
      response_format: { type: 'json_object' } };
    const a = await request(srv.port, 'POST', '/v1/chat/completions', body);
    assert.equal(a.status, 200, a.text);
    const ca = a.json.choices[0];
    if (ca.finish_reason === 'stop') assert.equal(typeof JSON.parse(ca.message.content), 'object');
    const s = await request(srv.port, 'POST', '/v1/chat/completions', { ...body, stream: true });
    assert.equal(s.status, 200, s.text);
        const streamed = s.text.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)));
    assert.equal(streamed.map((e) => e.choices[0]?.delta?.content || '').join(''), ca.message.content);
    assert.equal(streamed.map((e) => e.choices[0]?.finish_reason).filter(Boolean)[0], ca.finish_reason);
    const again = await request(srv.port, 'POST', '/v1/chat/completions', body);
    assert.equal(again.json.choices[0].message.content, ca.message.content);
  });

  test('refusals name the field and what is not supported', async () => {
    const cases = [
      [{ json_schema: { type: 'object', patternProperties: { a: {} } } }, 'json_schema', 'patternProperties'],
      [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string',
        format: 'email' } } } }, 'response_format', 'email'],
      [{ guided_regex: '(a)\\1' }, 'guided_regex', 'backreference'],
      [{ grammar: 'root ::= x' }, 'grammar', "rule 'x' is used but never defined"],
      [{ grammar: 'root ::= root "a" | "b"' }, 'grammar', 'left recursion'],
      [{ guided_choice: [] }, 'guided_choice', 'list'],
      [{ guided_json: { type: 'object' }, guided_regex: 'a' }, 'guided_regex', 'both constrain'],
      [{ structured_outputs: { regex: 'a', choice: ['a'] } }, 'structured_outputs', 'one constraint'],
      [{ response_format: { type: 'xml' } }, 'response_format', 'xml'],
      [{ guided_whitespace_pattern: ' *', guided_json: {} }, 'guided_whitespace_pattern', 'not supported'],
    ];
    for (const [extra, param, words] of cases) {
      const r = await request(srv.port, 'POST', '/v1/completions', { prompt: 'x', max_tokens: 5, ...extra });
      assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.text}`);
      assert.equal(r.json.error.param, param, r.text);
      assert.ok(r.json.error.message.includes(words), `${r.json.error.message} lacks ${words}`);
    }
  });

  test("a matcher's bound (nesting past 512) is a 400 naming the field, not a 500 nor a hang", async () => {
    const open = (await request(srv.port, 'POST', '/tokenize', { content: '[' })).json.tokens;
    assert.equal(open.length, 1);
    const r = await request(srv.port, 'POST', '/v1/completions', { prompt: 'x', max_tokens: 700, temperature: 0,
      logit_bias: { [open[0]]: 100 }, grammar: 'root ::= "[" root "]" | "x"' });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, 'grammar');
    assert.equal(r.json.error.code, 'grammar_failed');
    assert.ok(r.json.error.message.includes('deeper than 512'), r.text);
    const ok = await request(srv.port, 'POST', '/v1/completions', { prompt: 'x', max_tokens: 20,
      grammar: 'root ::= "[" root "]" | "x"' });
    assert.equal(ok.status, 200, ok.text);
  });

  test('/metrics: constrained requests by kind, cache hits, compile and mask histograms', async () => {
    const m = await metrics(srv.port);
    const get = (name) => m.get(name);
    assert.ok(get('aahd_constrained_requests_total{kind="json_schema"}') >= schemas.length);
    assert.ok(get('aahd_constrained_requests_total{kind="regex"}') >= 10);
    assert.ok(get('aahd_grammar_cache_hits_total') >= 1);
    assert.ok(get('aahd_grammar_compile_errors_total') >= 2);
    assert.ok(get('aahd_grammar_compile_seconds_count') >= schemas.length);
    assert.ok(get('aahd_grammar_mask_seconds_count') > 1000);
    assert.ok(get('aahd_constrained_complete_total') > 0);
    assert.equal(get('aahd_constrained_errors_total'), 1);
  });
});

describe('constrained decoding, the trained demo run (runs/aah, step 10000)', () => {
  let srv;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-structured-'));
  before(async () => {
    execFileSync(`${BUILD}/aah-convert`, ['import', '-q', 'runs/aah', path.join(tmp, 'aah')], { stdio: 'pipe' });
    srv = await startServer(['--max-batch', '8', '--queue-length', '64'], {}, path.join(tmp, 'aah'));
  });
  after(async () => {
    const r = await srv.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
    assert.equal(r.code, 0, srv.log());
  });

  test(`every schema (${schemas.length}), ${SEEDS} seeds at temperature 1: completed outputs validate`, async () => {
    const { cases, cut, total } = await sampleSchemas(srv, 230, 'The record:');
    const v = validate(cases);
    assert.deepEqual(v.failures, [], JSON.stringify(v.failures.slice(0, 5), null, 1));
    console.log(`trained demo: ${v.checked} outputs validated, ${cut} of ${total} cut by max_tokens (context 256)`);
    assert.ok(v.checked >= total / 2, `only ${v.checked} of ${total} outputs completed within the context`);
  });
});
