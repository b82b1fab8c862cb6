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
