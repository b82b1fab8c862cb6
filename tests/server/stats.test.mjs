// tests/server/stats.test.mjs — GET /v1/stats (the dashboard's feed) and GET /dashboard through a real socket: the
// JSON holds what /metrics holds and each regime's layout as aah.json gives it; the API key guards both (as Bearer
// or as Basic credentials' password) while /health stays open; a client's X-Request-Id is taken when it is sane.
// Run by tests/test_stats.sh.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BUILD, MODEL, metrics, request, startServer, until } from './lib.mjs';

const T = 512;
const KEY = 'stats-test-key';
const AUTH = { Authorization: `Bearer ${KEY}` };
const basic = (user, pass) => ({ Authorization: `Basic ${Buffer.from(`${user}:${pass}`).toString('base64')}` });

describe('GET /v1/stats and GET /dashboard', () => {
  let dir;
  let srv;
  let aah;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-stats-'));
    execFileSync(`${BUILD}/aah-mkmodel`, ['--preset', 'tiny', '--tokenizer', MODEL, '--aah', '--aah-context', String(T),
      '--aah-windows', '64,128,256,512', '--out', path.join(dir, 'model')], { stdio: 'pipe' });
    aah = JSON.parse(fs.readFileSync(path.join(dir, 'model', 'aah.json'), 'utf8'));
    srv = await startServer(['--ctx-len', String(T), '--max-batch', '3', '--queue-length', '7'], { AAHD_API_KEY: KEY },
      path.join(dir, 'model'));
  });
  after(async () => {
    const r = await srv.stop();
    fs.rmSync(dir, { recursive: true, force: true });
    assert.equal(r.code, 0, srv.log());
  });

  test('the figures of /metrics, exactly, and every regime\'s layout', async () => {
    const responses = [];
    const used = { prompt: 0, completion: 0 };   // what the responses said: figures independent of the counters
    for (const [i, regime] of ['shallow_freeze', 'full_adaptive', 'full_attention', 'shallow_freeze'].entries()) {
      const prompt = Array.from({ length: 80 + 50 * i }, (_, k) => 3 + ((k * 41 + i) % 2000));
      const r = await request(srv.port, 'POST', '/v1/completions', { prompt, max_tokens: 16, aah_regime: regime }, AUTH);
      assert.equal(r.status, 200, r.text);
      responses.push(r.json.aah);
      used.prompt += r.json.usage.prompt_tokens;
      used.completion += r.json.usage.completion_tokens;
    }
    // a response is counted by status once it has been sent: wait for the four (neither /v1/stats nor /metrics count)
    await until(async () => (await metrics(srv.port, AUTH)).get('aahd_requests_total{status="200"}') === 4, 10000,
      'the four completions counted');
    const [st, m] = [await request(srv.port, 'GET', '/v1/stats', undefined, AUTH), await metrics(srv.port, AUTH)];
    assert.equal(st.status, 200, st.text);
    assert.match(st.headers['content-type'], /^application\/json/);
    const s = st.json;
    assert.equal(s.object, 'aahd.stats');
    assert.equal(s.acr_context_length, T);
    assert.equal(s.acr_context_length, m.get('aahd_acr_context_length'));
    assert.equal(s.tokens.generation_total, m.get('aahd_generation_tokens_total'));
    assert.equal(s.tokens.prompt_total, m.get('aahd_prompt_tokens_total'));
    assert.equal(s.tokens.generation_total, used.completion);
    assert.equal(s.tokens.prompt_total, used.prompt);
    assert.equal(s.requests.running, 0);
    assert.equal(s.requests.waiting, 0);
    assert.equal(s.requests.max_batch, 3);
    assert.equal(s.requests.queue_capacity, 7);
    assert.equal(s.requests.by_status['200'], m.get('aahd_requests_total{status="200"}'));
    assert.equal(s.kv_cache.bytes_capacity, m.get('aahd_kv_cache_bytes_capacity'));
    assert.equal(s.kv_cache.bytes_used, m.get('aahd_kv_cache_bytes_used'));
    assert.equal(s.default_regime, aah.default_regime);
    assert.deepEqual(s.regimes.map((r) => r.name).sort(), ['full_attention', ...Object.keys(aah.regimes)].sort());
    for (const r of s.regimes) {
      const g = (name) => m.get(`${name}{regime="${r.name}"}`);
      assert.equal(r.sequences, g('aahd_sequences_total'));
      assert.equal(r.sequences, { shallow_freeze: 2, full_adaptive: 1, full_attention: 1 }[r.name] || 0, r.name);
      assert.equal(r.attention_products, g('aahd_attention_products_total'));
      assert.equal(r.attention_products_full, g('aahd_attention_products_full_total'));
      assert.equal(r.kv_peak_bytes, g('aahd_kv_peak_bytes_total'));
      assert.equal(r.kv_peak_bytes_full, g('aahd_kv_peak_bytes_full_total'));
      for (const u of r.branch_usage)
        assert.equal(u.usage, m.get(`aahd_branch_usage_total{regime="${r.name}",window="${u.window}"}`), `${r.name} ${u.window}`);
      assert.equal(r.time_to_first_token_seconds.count, m.get(`aahd_time_to_first_token_seconds_count{regime="${r.name}"}`));
      if (r.sequences === 0) {
        assert.equal(r.acr, null, 'no figure without a sequence');
        assert.equal(r.attention_work_ratio, null);
      } else {
        assert.ok(Math.abs(r.acr - g('aahd_acr')) < 1e-6, r.name);
        assert.ok(Math.abs(r.attention_work_ratio - g('aahd_attention_work_ratio')) < 1e-6, r.name);
        assert.ok(Math.abs(r.kv_memory_ratio - g('aahd_kv_memory_ratio')) < 1e-6, r.name);
        // ACR from the exposed counters, as a client computes it
        assert.ok(Math.abs(r.branch_usage_weighted / (T * r.branch_usage_total) - r.acr) < 1e-12, r.name);
      }
      // the layout: full attention one group per layer over every KV head; the others as aah.json says
      const layers = r.layout.layers.map((l) => l.groups.map((x) => ({ kv_heads: x.kv_heads, window: x.window,
        capacity: x.capacity })));
      if (r.name === 'full_attention') {
        assert.equal(r.layout.full, true);
        assert.deepEqual(layers, aah.regimes.shallow_freeze.layers.map(() => [{
          kv_heads: Array.from({ length: r.layout.kv_heads }, (_, h) => h), window: T, capacity: T }]));
      } else {
        assert.equal(r.layout.full, false);
        assert.equal(r.layout.policy, aah.regimes[r.name].policy.kind);
        assert.deepEqual(layers, aah.regimes[r.name].layers.map((l) => l.groups.map((x) => ({ kv_heads: x.kv_heads,
          window: x.window, capacity: x.capacity }))));
      }
    }
    // the responses' branch usage adds up to the counters
    const sf = s.regimes.find((r) => r.name === 'shallow_freeze');
    for (const u of sf.branch_usage) {
      const sum = responses.filter((r) => r.regime === 'shallow_freeze')
        .reduce((a, r) => a + (r.branch_usage[String(u.window)] || 0), 0);
      assert.equal(sum, u.usage, `shallow_freeze window ${u.window}`);
    }
  });

  test('the key guards /v1/stats and /dashboard: Bearer, or Basic with the key as password; /health stays open',
    async () => {
      for (const p of ['/v1/stats', '/dashboard']) {
        const none = await request(srv.port, 'GET', p);
        assert.equal(none.status, 401, p);
        assert.equal(none.json.error.code, 'invalid_api_key');
        assert.equal((await request(srv.port, 'GET', p, undefined, { Authorization: 'Bearer wrong' })).status, 401);
        assert.equal((await request(srv.port, 'GET', p, undefined, basic('me', 'wrong'))).status, 401);
        assert.equal((await request(srv.port, 'GET', p, undefined, basic('me', `${KEY}x`))).status, 401);
        assert.equal((await request(srv.port, 'GET', p, undefined, { Authorization: 'Basic !!!' })).status, 401);
        assert.equal((await request(srv.port, 'GET', p, undefined, { Authorization: 'Basic bm9jb2xvbg==' })).status, 401);
        assert.equal((await request(srv.port, 'GET', p, undefined, AUTH)).status, 200, p);
        assert.equal((await request(srv.port, 'GET', p, undefined, basic('anyone', KEY))).status, 200, p);
        assert.equal((await request(srv.port, 'GET', p, undefined, basic('', KEY))).status, 200, p);
        assert.equal((await request(srv.port, 'POST', p, '{}', AUTH)).status, 405, p);
      }
      // a browser asks for credentials where the challenge is Basic
      assert.match((await request(srv.port, 'GET', '/dashboard')).headers['www-authenticate'], /^Basic realm="aahd"/);
      assert.equal((await request(srv.port, 'GET', '/v1/stats')).headers['www-authenticate'], 'Bearer');
      // Basic works on the API too (the page's own requests carry it)
      assert.equal((await request(srv.port, 'GET', '/metrics', undefined, basic('x', KEY))).status, 200);
      assert.equal((await request(srv.port, 'GET', '/health')).status, 200);
    });

  test('the page ships inside the binary and names nothing outside it', async () => {
    const r = await request(srv.port, 'GET', '/dashboard', undefined, AUTH);
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /^text\/html; charset=utf-8/);
    assert.equal(r.text, fs.readFileSync('server/dashboard.html', 'utf8'));
    assert.doesNotMatch(r.text, /(src|href)\s*=\s*["']?(https?:)?\/\//i, 'no resource from another origin');
    assert.doesNotMatch(r.text, /fetch\(\s*['"`]https?:/, 'no fetch from another origin');
  });

  test('X-Request-Id: a sane client id is ours, anything else is replaced', async () => {
    const body = { prompt: 'id please', max_tokens: 2 };
    const mine = await request(srv.port, 'POST', '/v1/completions', body, { ...AUTH, 'X-Request-Id': 'trace-1.2:3_x' });
    assert.equal(mine.headers['x-request-id'], 'trace-1.2:3_x');
    assert.equal(mine.json.id, 'cmpl-trace-1.2:3_x');
    for (const bad of ['has space', 'x'.repeat(40), 'quote"', '']) {
      const r = await request(srv.port, 'POST', '/v1/completions', body, { ...AUTH, 'X-Request-Id': bad });
      assert.equal(r.status, 200);
      assert.notEqual(r.headers['x-request-id'], bad);
      assert.match(r.headers['x-request-id'], /^[0-9a-f]{16}$/);
    }
    const longest = 'y'.repeat(39);
    assert.equal((await request(srv.port, 'GET', '/health', undefined, { 'X-Request-Id': longest })).headers['x-request-id'], longest);
  });
});
