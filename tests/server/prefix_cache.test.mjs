// tests/server/prefix_cache.test.mjs — the prefix cache through real aahd daemons: one with the cache on (the default)
// and one with --prefix-cache off answer the same multiple-choice, chat-turn and generation requests with the same
// bytes of choices (tokens, text, log-probabilities), in full attention and in AAH regimes; usage says what came from
// the cache (usage.prompt_tokens_details.cached_tokens), /metrics and /v1/stats count it.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BUILD, MODEL, metrics, request, startServer } from './lib.mjs';

const CTX = 512;

function promptIds(n, seed) {
  const ids = [];
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    ids.push((s >>> 8) % 2048);
  }
  return ids;
}

describe('prefix cache: on and off give the same answers', () => {
  let on;
  let off;
  let dir;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-prefix-'));
    execFileSync(`${BUILD}/aah-mkmodel`, ['--preset', 'tiny', '--tokenizer', MODEL, '--aah', '--aah-context', String(CTX),
      '--aah-windows', '64,128,256,512', '--out', dir], { stdio: 'pipe' });
    const args = ['--ctx-len', String(CTX), '--max-batch', '4', '--prefill-chunk', '64'];
    [on, off] = await Promise.all([startServer(args, {}, dir), startServer([...args, '--prefix-cache', 'off'], {}, dir)]);
  });
  after(async () => {
    const r = await Promise.all([on.stop(), off.stop()]);
    fs.rmSync(dir, { recursive: true, force: true });
    assert.equal(r[0].code, 0, on.log());
    assert.equal(r[1].code, 0, off.log());
  });

  const both = async (body) => {
    const [a, b] = await Promise.all([request(on.port, 'POST', '/v1/completions', body),
      request(off.port, 'POST', '/v1/completions', body)]);
    assert.equal(a.status, 200, a.body);
    assert.equal(b.status, 200, b.body);
    assert.deepEqual(a.json.choices, b.json.choices);
    assert.equal(a.json.usage.prompt_tokens, b.json.usage.prompt_tokens);
    assert.equal(b.json.usage.prompt_tokens_details.cached_tokens, 0);
    return a.json;
  };

  for (const regime of ['full_attention', 'shallow_freeze', 'full_adaptive']) {
    test(`multiple choice (echo, logprobs, max_tokens 0), then a repeat and a next turn: ${regime}`, async () => {
      const ctx = promptIds(150, 7);
      const prompts = [0, 1, 2, 3].map((k) => [...ctx, ...promptIds(3 + 4 * k, 50 + k)]);
      const first = await both({ prompt: prompts, max_tokens: 0, echo: true, logprobs: 2, aah_regime: regime });
      // the three after the first start after the context's 9 whole blocks (143 positions)
      assert.ok(first.usage.prompt_tokens_details.cached_tokens >= 3 * 143, JSON.stringify(first.usage));
      const again = await both({ prompt: prompts, max_tokens: 0, echo: true, logprobs: 2, aah_regime: regime });
      assert.ok(again.usage.prompt_tokens_details.cached_tokens >= 4 * 143, JSON.stringify(again.usage));
      // a chat's next turn: the first prompt and more, generating with n = 2 sampled choices
      const turn = await both({ prompt: [...prompts[0], ...promptIds(40, 99)], max_tokens: 12, n: 2, temperature: 0.9,
        seed: 5, logprobs: 1, aah_regime: regime });
      assert.ok(turn.usage.prompt_tokens_details.cached_tokens >= 143, JSON.stringify(turn.usage));
    });
  }

  test('32 concurrent clients over 4 shared system prompts, mixed requests: the same answers as the cache off', async () => {
    const systems = [0, 1, 2, 3].map((k) => promptIds(60 + 37 * k, 200 + k));
    const bodies = Array.from({ length: 32 }, (_, i) => {
      const prompt = [...systems[i % 4], ...promptIds(5 + (i % 7) * 9, 300 + i)];
      const regime = ['full_attention', 'shallow_freeze', 'full_adaptive'][i % 3];
      return i % 4 === 0 ? { prompt, max_tokens: 0, echo: true, logprobs: 1, aah_regime: regime }
        : i % 4 === 1 ? { prompt, max_tokens: 8, n: 2, temperature: 1, seed: i, aah_regime: regime }
          : { prompt, max_tokens: 10, temperature: i % 2 ? 0.7 : 0, seed: i, logprobs: 2, aah_regime: regime };
    });
    const run = (port) => Promise.all(bodies.map((b) => request(port, 'POST', '/v1/completions', b)));
    const [a, b] = await Promise.all([run(on.port), run(off.port)]);
    let cached = 0;
    for (let i = 0; i < bodies.length; i++) {
      assert.equal(a[i].status, 200, a[i].body);
      assert.equal(b[i].status, 200, b[i].body);
      assert.deepEqual(a[i].json.choices, b[i].json.choices, `request ${i}`);
      cached += a[i].json.usage.prompt_tokens_details.cached_tokens;
    }
    assert.ok(cached > 0);
  });

  test('/metrics and /v1/stats count queries, hits and hit tokens; the cache off counts none', async () => {
    const m = await metrics(on.port);
    const mo = await metrics(off.port);
    for (const name of ['aahd_prefix_cache_queries_total', 'aahd_prefix_cache_hits_total',
      'aahd_prefix_cache_hit_tokens_total', 'aahd_prefix_cache_bytes', 'aahd_prefix_cache_evictions_total'])
      assert.ok(m.has(name) && mo.has(name), name);
    assert.equal(m.get('aahd_prefix_cache_enabled'), 1);
    assert.equal(mo.get('aahd_prefix_cache_enabled'), 0);
    assert.equal(mo.get('aahd_prefix_cache_hits_total'), 0);
    assert.ok(m.get('aahd_prefix_cache_hits_total') >= 3 * 7);
    assert.ok(m.get('aahd_prefix_cache_hits_total') <= m.get('aahd_prefix_cache_queries_total'));
    assert.ok(m.get('aahd_prefix_cache_bytes') > 0);
    // what was sent = what was prefilled + what the cache gave
    assert.equal(m.get('aahd_prompt_tokens_total') + m.get('aahd_prefix_cache_hit_tokens_total'),
      mo.get('aahd_prompt_tokens_total'));
    // nothing runs: the sequences hold no pages, whatever the cache keeps
    assert.equal(m.get('aahd_kv_cache_bytes_used'), 0);
    const st = await request(on.port, 'GET', '/v1/stats');
    assert.equal(st.status, 200);
    const pc = st.json.prefix_cache;
    assert.equal(pc.enabled, true);
    assert.equal(pc.hits, m.get('aahd_prefix_cache_hits_total'));
    assert.equal(pc.hit_tokens, m.get('aahd_prefix_cache_hit_tokens_total'));
    assert.equal(pc.hit_rate, pc.hits / pc.queries);
    assert.ok(pc.token_hit_rate > 0 && pc.token_hit_rate < 1);
  });
});

describe('prefix cache: the configuration', () => {
  test('--prefix-cache takes on or off, and nothing else', () => {
    let err = '';
    try {
      execFileSync(`${BUILD}/aahd`, ['--prefix-cache', 'maybe', '--print-config'], { stdio: 'pipe' });
    } catch (e) {
      err = String(e.stderr);
    }
    assert.match(err, /prefix_cache: 'maybe' is not one of on off/);
    const out = String(execFileSync(`${BUILD}/aahd`, ['--prefix-cache', 'off', '--prefix-cache-bytes', '64M',
      '--print-config']));
    assert.match(out, /^prefix_cache = "off"$/m);
    assert.match(out, /^prefix_cache_bytes = 67108864$/m);
  });
});

// The workload in an AAH regime whose windows (32, 64, 128 and 4096, one per layer) are far shorter than
// the prompts and the prefill chunk: one 1500-token beginning P, then P + a tail of 20, 200 and 1000 tokens. Each
// continuation after the first restores P's 93 whole blocks (1487 positions, at least |P| − 32), and every answer —
// choices, prompt and generated log-probabilities, finish reasons, usage and the aah object — is what a daemon with
// the cache off answers. In f16 and f32 KV, and in full attention for comparison.
describe('prefix cache: one beginning, different continuations, in an AAH regime', () => {
  const CTXL = 4096;
  let dir;
  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-prefix-div-'));
    execFileSync(`${BUILD}/aah-mkmodel`, ['--preset', 'tiny', '--layers', '4', '--tokenizer', MODEL, '--aah',
      '--aah-context', String(CTXL), '--aah-windows', '32,64,128,4096', '--aah-layer-windows', '32,64,128,4096',
      '--aah-default', 'shallow_freeze', '--out', dir], { stdio: 'pipe' });
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  for (const kv of ['f16', 'f32']) {
    test(`P + A, then P + B (tails of 20, 200, 1000 tokens): ${kv} KV`, async () => {
      const args = ['--ctx-len', String(CTXL), '--max-batch', '4', '--kv-dtype', kv];
      const [on, off] = await Promise.all([startServer(args, {}, dir),
        startServer([...args, '--prefix-cache', 'off'], {}, dir)]);
      try {
        const P = promptIds(1500, 17);
        for (const regime of ['shallow_freeze', 'full_attention']) {
          for (const [t, len] of [20, 200, 1000].entries()) {
            for (const k of [0, 1]) {
              const body = { prompt: [...P, ...promptIds(len, 1000 * t + 10 * k + (regime === 'full_attention'))],
                max_tokens: 6, temperature: 0, logprobs: 2, echo: true, aah_regime: regime };
              const [a, b] = await Promise.all([request(on.port, 'POST', '/v1/completions', body),
                request(off.port, 'POST', '/v1/completions', body)]);
              assert.equal(a.status, 200, a.text);
              assert.equal(b.status, 200, b.text);
              assert.deepEqual(a.json.choices, b.json.choices, `${regime} tail ${len} #${k}`);
              assert.deepEqual(a.json.aah, b.json.aah, `${regime} tail ${len} #${k}: the aah object`);
              assert.equal(a.json.usage.prompt_tokens, b.json.usage.prompt_tokens);
              const cached = a.json.usage.prompt_tokens_details.cached_tokens;
              // the first of the six in a regime misses; every other starts after P's blocks
              if (t > 0 || k > 0) assert.ok(cached >= 1500 - 32, `${regime} tail ${len} #${k}: ${cached} cached`);
            }
          }
        }
      } finally {
        const r = await Promise.all([on.stop(), off.stop()]);
        assert.equal(r[0].code, 0, on.log());
        assert.equal(r[1].code, 0, off.log());
      }
    });
  }
});

describe('prefix cache: divergent tails under concurrency', () => {
  test('48 concurrent requests over two 1500-token beginnings, tails of 20, 200 and 1000, AAH and full attention: '
    + 'the answers of the cache off', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-prefix-conc-'));
    execFileSync(`${BUILD}/aah-mkmodel`, ['--preset', 'tiny', '--layers', '4', '--tokenizer', MODEL, '--aah',
      '--aah-context', '4096', '--aah-windows', '32,64,128,4096', '--aah-layer-windows', '32,64,128,4096',
      '--out', dir], { stdio: 'pipe' });
    const args = ['--ctx-len', '4096', '--max-batch', '8', '--queue-length', '64'];
    const [on, off] = await Promise.all([startServer(args, {}, dir), startServer([...args, '--prefix-cache', 'off'], {}, dir)]);
    try {
      const begins = [promptIds(1500, 41), promptIds(1500, 42)];
      const bodies = Array.from({ length: 48 }, (_, i) => ({
        prompt: [...begins[i % 2], ...promptIds([20, 200, 1000][i % 3], 500 + i)],
        aah_regime: i % 4 < 3 ? 'shallow_freeze' : 'full_attention', max_tokens: 4, logprobs: 1,
        ...(i % 5 === 0 ? { echo: true } : {}), ...(i % 2 ? { temperature: 0.8, seed: i } : { temperature: 0 }) }));
      const run = (port) => Promise.all(bodies.map((b) => request(port, 'POST', '/v1/completions', b)));
      const [a, b] = await Promise.all([run(on.port), run(off.port)]);
      let cached = 0;
      for (let i = 0; i < bodies.length; i++) {
        assert.equal(a[i].status, 200, a[i].text);
        assert.equal(b[i].status, 200, b[i].text);
        assert.deepEqual(a[i].json.choices, b[i].json.choices, `request ${i}`);
        assert.deepEqual(a[i].json.aah, b[i].json.aah, `request ${i}: the aah object`);
        if (!bodies[i].echo) cached += a[i].json.usage.prompt_tokens_details.cached_tokens;
      }
      // each (beginning, regime) pair computes its beginning once at most: of the 38 requests without echo (an echo
      // request restores only blocks whose prompt log-probabilities a request computed), 4 may be first
      assert.ok(cached >= (38 - 4) * (1500 - 32), `${cached} cached`);
    } finally {
      const r = await Promise.all([on.stop(), off.stop()]);
      fs.rmSync(dir, { recursive: true, force: true });
      assert.equal(r[0].code, 0, on.log());
      assert.equal(r[1].code, 0, off.log());
    }
  });
});

// Tenants: a prefix cache is a timing side channel, so prompts sent under different cache_salt values, or with
// different API keys (prefix_cache_scope = key, the default), never share a block; the same salt or key does.
describe('prefix cache: tenants kept apart', () => {
  let dir;
  let keys;
  let srv;
  let global;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-prefix-tenants-'));
    keys = path.join(dir, 'keys');
    fs.writeFileSync(keys, '# name key\nalice sk-alice-0123456789\nbob\tsk-bob-0123456789\n');
    const args = ['--ctx-len', '512', '--max-batch', '2', '--api-keys', keys, '--chat-template', 'conf/chat-template.jinja'];
    [srv, global] = await Promise.all([startServer(args), startServer([...args, '--prefix-cache-scope', 'global'])]);
  });
  after(async () => {
    const r = await Promise.all([srv.stop(), global.stop()]);
    fs.rmSync(dir, { recursive: true, force: true });
    assert.equal(r[0].code, 0, srv.log());
    assert.equal(r[1].code, 0, global.log());
  });
  const alice = { Authorization: 'Bearer sk-alice-0123456789' };
  const bob = { Authorization: 'Bearer sk-bob-0123456789' };
  const cachedOf = async (port, body, headers, path_ = '/v1/completions') => {
    const r = await request(port, 'POST', path_, body, headers);
    assert.equal(r.status, 200, r.text);
    return r.json.usage.prompt_tokens_details.cached_tokens;
  };

  test('cache_salt: another salt restores nothing, the same salt hits (completions and chat)', async () => {
    const prompt = promptIds(300, 5);
    const body = (salt) => ({ prompt, max_tokens: 1, temperature: 0, ...(salt === undefined ? {} : { cache_salt: salt }) });
    assert.equal(await cachedOf(srv.port, body('A'), alice), 0);
    assert.equal(await cachedOf(srv.port, body('B'), alice), 0);
    assert.equal(await cachedOf(srv.port, body(undefined), alice), 0);
    assert.ok(await cachedOf(srv.port, body('A'), alice) >= 287);
    assert.ok(await cachedOf(srv.port, body(undefined), alice) >= 287);
    const chat = (salt) => ({ messages: [{ role: 'system', content: 'x '.repeat(200) }, { role: 'user', content: 'hi' }],
      max_tokens: 1, temperature: 0, cache_salt: salt });
    assert.equal(await cachedOf(srv.port, chat('C'), alice, '/v1/chat/completions'), 0);
    assert.equal(await cachedOf(srv.port, chat('D'), alice, '/v1/chat/completions'), 0);
    assert.ok(await cachedOf(srv.port, chat('C'), alice, '/v1/chat/completions') > 0);
  });

  test('API keys: by default each key\'s prefixes are its own; prefix_cache_scope global shares them', async () => {
    const prompt = promptIds(300, 6);
    const body = { prompt, max_tokens: 1, temperature: 0 };
    assert.equal(await cachedOf(srv.port, body, alice), 0);
    assert.equal(await cachedOf(srv.port, body, bob), 0);
    assert.ok(await cachedOf(srv.port, body, bob) >= 287);
    assert.equal(await cachedOf(global.port, body, alice), 0);
    assert.ok(await cachedOf(global.port, body, bob) >= 287);
    // and a salt still parts them within one scope
    assert.equal(await cachedOf(global.port, { ...body, cache_salt: 'x' }, bob), 0);
  });

  test('a key not in the file is refused; a malformed cache_salt is a 400 that names it', async () => {
    const r = await request(srv.port, 'POST', '/v1/completions', { prompt: 'x', max_tokens: 1 },
      { Authorization: 'Bearer sk-carol' });
    assert.equal(r.status, 401);
    for (const salt of ['', 7, ['a'], 'é'.repeat(200)]) {
      const b = await request(srv.port, 'POST', '/v1/completions', { prompt: 'x', max_tokens: 1, cache_salt: salt }, alice);
      assert.equal(b.status, 400, `${JSON.stringify(salt)}: ${b.text}`);
      assert.equal(b.json.error.param, 'cache_salt');
      const c = await request(srv.port, 'POST', '/v1/chat/completions',
        { messages: [{ role: 'user', content: 'x' }], max_tokens: 1, cache_salt: salt }, alice);
      assert.equal(c.status, 400, `chat ${JSON.stringify(salt)}: ${c.text}`);
      assert.equal(c.json.error.param, 'cache_salt');
    }
  });

  test('an api_keys file that lies is refused at start, naming the line', () => {
    for (const [text, want] of [['alice k1\nbob k1\n', /line 2: the key of 'bob' is also the key of 'alice'/],
      ['alice k1\nalice k2\n', /line 2: the name 'alice' is given twice/], ['al ice k1\n', /line 1: want 'NAME KEY'/],
      ['# nothing\n', /no key in it/], ['al/ice k1\n', /line 1: a name is/]]) {
      fs.writeFileSync(keys + '.bad', text);
      let err = '';
      try {
        execFileSync(`${BUILD}/aahd`, ['--model', MODEL, '--port', '0', '--api-keys', keys + '.bad'],
          { stdio: 'pipe', timeout: 20000 });
      } catch (e) {
        err = String(e.stderr);
      }
      assert.match(err, want, text);
      assert.doesNotMatch(err, /k1|k2/, 'the message quotes no key');
    }
  });
});
