// tests/server/speculation.test.mjs — speculative decoding through a real socket (docs/speculative.md): the server's
// default (--speculation ngram), a request's choice (aah_speculation: off, ngram, regime, model, the object form), on
// completions and chat, streamed and whole: every answer is the one without speculation — text, logprobs, finish,
// usage, ACR — and says what its drafts did; /metrics counts per draft kind; impossible choices get a 400 naming
// aah_speculation; a draft model with another tokenizer, or a default that cannot run, stops the daemon at start.
// Run by tests/test_speculation.sh (node --test).
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BUILD, MODEL, TESTDATA, joinStream, metrics, request, sseEvents, startServer } from './lib.mjs';

const CTX = 512;
const complete = (srv, body) => request(srv.port, 'POST', '/v1/completions', body);
const chat = (srv, body) => request(srv.port, 'POST', '/v1/chat/completions', body);

function mkmodel(extra) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-spec-'));
  execFileSync(`${BUILD}/aah-mkmodel`, ['--preset', 'tiny', ...extra, '--out', dir], { stdio: 'pipe' });
  return dir;
}

// What must be the same with speculation and without.
function answer(r, stream) {
  assert.equal(r.status, 200, r.text);
  if (stream) {
    const events = sseEvents(r.text);
    assert.equal(events.at(-1), '[DONE]');
    return { choices: joinStream(events).map((c) => [c.text, c.finish_reason]) };
  }
  const j = r.json;
  return {
    choices: j.choices.map((c) => [c.text ?? c.message?.content, c.finish_reason, c.logprobs]),
    usage: [j.usage.prompt_tokens, j.usage.completion_tokens],
    acr: j.aah.acr,
    branch: j.aah.branch_usage,
  };
}

// A prompt whose continuation copies from it: prompt lookup finds its phrases again.
const COPY = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu '.repeat(4);

describe('speculative decoding: the server default and each request\'s choice', () => {
  let srv;
  let target;
  let draft;
  before(async () => {
    const tok = MODEL;   // the test model's tokenizer (qwen3-small-a)
    target = mkmodel(['--tokenizer', tok, '--aah', '--aah-context', String(CTX), '--aah-windows', '64,128,256,512']);
    draft = mkmodel(['--tokenizer', tok, '--seed', '5']);
    srv = await startServer(['--ctx-len', String(CTX), '--max-batch', '4', '--speculation', 'ngram', '--spec-k', '4',
      '--draft-regime', 'deep_reuse', '--model-draft', draft, '--chat-template', 'conf/chat-template.jinja'], {},
    target);
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
    fs.rmSync(target, { recursive: true, force: true });
    fs.rmSync(draft, { recursive: true, force: true });
  });

  const BODIES = [
    { prompt: COPY, max_tokens: 40, temperature: 0 },
    { prompt: COPY, max_tokens: 40, temperature: 0, logprobs: 2, aah_regime: 'full_adaptive' },
    { prompt: COPY, max_tokens: 40, temperature: 0.8, top_k: 30, seed: 11 },
    { prompt: 'The weather today', max_tokens: 30, temperature: 0, n: 2, stream: true },
    { prompt: COPY, max_tokens: 30, temperature: 0.7, seed: 3, stop: ['kappa'], aah_regime: 'full_attention' },
    // an output that repeats itself (a random model's rarely copies its prompt): prompt lookup finds it at once
    { prompt: COPY, max_tokens: 40, temperature: 0, logit_bias: { 300: 100 }, logprobs: 1 },
  ];
  const CHOICES = ['ngram', 'regime', 'model', { draft: 'ngram', k: 2, adaptive: false },
    { draft: 'regime', regime: 'grouping_off', k: 6 }, { draft: 'model', k: 3 }];

  test('every answer is the one without speculation, and says what its drafts did', async () => {
    for (const body of BODIES) {
      const off = await complete(srv, { ...body, aah_speculation: 'off' });
      const want = answer(off, body.stream);
      if (!body.stream)
        assert.equal(off.json.aah.speculation, undefined, 'off: no speculation object');
      const dflt = await complete(srv, body);   // the server's default: ngram
      assert.deepEqual(answer(dflt, body.stream), want, `default, ${JSON.stringify(body)}`);
      if (!body.stream)
        assert.equal(dflt.json.aah.speculation.draft, 'ngram');
      for (const choice of CHOICES) {
        if (choice.draft === 'regime' && body.aah_regime === choice.regime) continue;
        const r = await complete(srv, { ...body, aah_speculation: choice });
        assert.deepEqual(answer(r, body.stream), want, `${JSON.stringify(choice)}, ${JSON.stringify(body)}`);
        if (!body.stream) {
          const s = r.json.aah.speculation;
          assert.equal(s.draft, typeof choice === 'string' ? choice : choice.draft);
          assert.ok(s.accepted_tokens <= s.drafted_tokens && s.verify_passes >= 0, JSON.stringify(s));
        }
      }
    }
    // a copying prompt under prompt lookup: drafts are proposed and some taken
    const r = await complete(srv, { prompt: COPY, max_tokens: 60, temperature: 0, aah_speculation: 'model' });
    const s = r.json.aah.speculation;
    assert.ok(s.drafted_tokens > 0 && s.verify_passes > 0, JSON.stringify(s));
  });

  test('chat, whole and streamed: the same answers', async () => {
    const messages = [{ role: 'user', content: COPY }];
    for (const stream of [false, true]) {
      const off = await chat(srv, { messages, max_tokens: 30, temperature: 0, stream, aah_speculation: 'off' });
      assert.equal(off.status, 200, off.text);
      for (const choice of ['ngram', 'regime', 'model']) {
        const on = await chat(srv, { messages, max_tokens: 30, temperature: 0, stream, aah_speculation: choice });
        assert.equal(on.status, 200, on.text);
        if (stream) {
          const text = (x) => sseEvents(x.text).filter((e) => e !== '[DONE]')
            .map((e) => e.choices?.[0]?.delta?.content ?? '').join('');
          assert.equal(text(on), text(off));
        } else {
          assert.equal(on.json.choices[0].message.content, off.json.choices[0].message.content);
          assert.equal(on.json.aah.speculation.draft, choice);
        }
      }
    }
  });

  test('/metrics: drafted, accepted, passes, acceptance and mean accepted length per draft kind', async () => {
    const m = await metrics(srv.port);
    for (const d of ['ngram', 'regime', 'model']) {
      const drafted = m.get(`aahd_spec_draft_tokens_total{draft="${d}"}`);
      const accepted = m.get(`aahd_spec_accepted_tokens_total{draft="${d}"}`);
      const passes = m.get(`aahd_spec_verify_passes_total{draft="${d}"}`);
      assert.ok(drafted > 0 && passes > 0 && accepted <= drafted, `${d}: ${drafted} ${accepted} ${passes}`);
      assert.ok(Math.abs(m.get(`aahd_spec_acceptance_rate{draft="${d}"}`) - accepted / drafted) < 1e-5);
      assert.ok(Math.abs(m.get(`aahd_spec_mean_accepted_length{draft="${d}"}`) - (1 + accepted / passes)) < 1e-5);
    }
    assert.equal(m.get('aahd_spec_draft_steps_total{draft="ngram"}'), 0);
    assert.ok(m.get('aahd_spec_draft_steps_total{draft="regime"}') > 0);
    assert.ok(m.get('aahd_spec_draft_steps_total{draft="model"}') > 0);
  });

  test('impossible choices get a 400 naming aah_speculation', async () => {
    const bad = ['bogus', 3, true, { k: 3 }, { draft: 'ngram', k: 0 }, { draft: 'ngram', k: 16 },
      { draft: 'ngram', k: 2.5 }, { draft: 'ngram', regime: 'deep_reuse' }, { draft: 'ngram', adaptive: 'yes' },
      { draft: 'ngram', extra: 1 }, { draft: 'regime', regime: 'nosuch' },
      { draft: 'regime', regime: 'shallow_freeze' }];   // the request's own (the default) regime
    for (const s of bad) {
      const r = await complete(srv, { prompt: 'x', max_tokens: 2, aah_speculation: s });
      assert.equal(r.status, 400, `${JSON.stringify(s)}: ${r.text}`);
      assert.equal(r.json.error.param, 'aah_speculation', r.text);
    }
  });
});

describe('speculative decoding: what a server without drafts refuses', () => {
  test('regime and model drafts need --draft-regime and --model-draft; ngram runs anywhere', async () => {
    const srv = await startServer(['--ctx-len', String(CTX), '--max-batch', '2']);
    try {
      for (const [choice, says] of [['model', '--model-draft'], ['regime', '--draft-regime']]) {
        const r = await complete(srv, { prompt: 'x', max_tokens: 2, aah_speculation: choice });
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.param, 'aah_speculation');
        assert.match(r.json.error.message, new RegExp(says));
      }
      const r = await complete(srv, { prompt: COPY, max_tokens: 20, temperature: 0, aah_speculation: 'ngram' });
      const off = await complete(srv, { prompt: COPY, max_tokens: 20, temperature: 0 });
      assert.equal(r.json.choices[0].text, off.json.choices[0].text);
    } finally {
      assert.equal((await srv.stop()).code, 0);
    }
  });

  test('a draft model with another tokenizer, or a default that cannot run, stops aahd at start', () => {
    const other = mkmodel(['--arch', 'llama', '--tokenizer', `${TESTDATA}/spm-llama2`]);
    try {
      const cases = [
        [['--model-draft', other], /tokenizer is not the model's/],
        [['--speculation', 'model'], /speculation = model needs a model_draft/],
        [['--speculation', 'regime'], /speculation = regime needs a draft_regime/],
        [['--model-draft', '/nonexistent/model'], /model_draft/],
      ];
      for (const [args, says] of cases) {
        const r = spawnSync(`${BUILD}/aahd`, ['--model', MODEL, '--port', '0', '--threads', '1', ...args],
          { encoding: 'utf8', timeout: 60000 });
        assert.notEqual(r.status, 0, `${args.join(' ')}: exited 0`);
        assert.match(r.stderr, says, r.stderr);
      }
    } finally {
      fs.rmSync(other, { recursive: true, force: true });
    }
  });
});
