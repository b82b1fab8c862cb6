// tests/server/batching.test.mjs — continuous batching through a real aahd: 32 concurrent clients (prompts, lengths,
// regimes, seeds, n, streams) each get what they get alone; n choices share one prefill; a flood beyond the queue
// gets 429 + Retry-After while the admitted complete; cancelling half of 16 streams frees exactly their pages; under
// one KV budget the AAH regime runs more sequences at once than full attention. Run by tests/test_batching.sh.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BUILD, MODEL, joinStream, metrics, request, sleep, sseEvents, startServer, until } from './lib.mjs';

const CTX = 512;
const REGIMES = ['full_attention', 'grouping_off', 'full_adaptive', 'shallow_freeze', 'deep_reuse'];

const complete = (srv, body) => request(srv.port, 'POST', '/v1/completions', body);

// A tiny model with aah.json at a 512 context: windows drawn from 64 … 512 (random), or 64 everywhere (fixed: a
// sequence's ring is full, and its pages constant, once it is 80 positions long).
function makeModel(extra) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-batch-'));
  execFileSync(`${BUILD}/aah-mkmodel`, ['--preset', 'tiny', '--tokenizer', MODEL, '--aah', '--aah-context', String(CTX),
    '--aah-windows', '64,128,256,512', ...extra, '--out', dir], { stdio: 'pipe' });
  return dir;
}

// Token ids of a prompt: n ids drawn from a seed (below the special tokens at 2048).
function promptIds(n, seed) {
  const ids = [];
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    ids.push((s >>> 8) % 2000 + 5);
  }
  return ids;
}

// What a response says, in a form to compare: each choice's text and finish reason, the completion tokens.
async function outcome(srv, body) {
  const r = await complete(srv, body);
  assert.equal(r.status, 200, r.text);
  if (body.stream) {
    const events = sseEvents(r.text);
    assert.equal(events.at(-1), '[DONE]');
    return { choices: joinStream(events).map((c) => [c.text, c.finish_reason]) };
  }
  return { choices: r.json.choices.map((c) => [c.text, c.finish_reason]), completion: r.json.usage.completion_tokens };
}

// Starts a stream and resolves once `events` chunks have arrived, with the request (to destroy) and the text so far.
const openStream = (srv, body, events = 2) => new Promise((resolve, reject) => {
  const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/completions', agent: false,
    headers: { 'Content-Type': 'application/json' } }, (res) => {
    let buf = '';
    let resolved = false;
    const s = { req, res, text: () => buf, ended: new Promise((r) => res.on('end', r).on('close', r)) };
    res.on('data', (d) => {
      buf += d;
      if (!resolved && buf.split('\n\n').length > events) {
        resolved = true;
        resolve(s);
      }
    });
    res.on('error', () => {});
  });
  req.on('error', (e) => { if (e.code !== 'ECONNRESET') reject(e); });
  req.end(JSON.stringify({ ...body, stream: true }));
});

// Samples /metrics every 10 ms while work() runs; resolves with work's result and the most running at once.
async function watchRunning(srv, work) {
  let most = 0;
  let done = false;
  const poll = (async () => {
    while (!done) {
      most = Math.max(most, (await metrics(srv.port)).get('aahd_requests_running'));
      await sleep(10);
    }
  })();
  try {
    return { result: await work(), most };
  } finally {
    done = true;
    await poll;
  }
}

describe('32 concurrent clients: each gets exactly what it gets alone', () => {
  let srv;
  let dir;
  before(async () => {
    dir = makeModel([]);
    // a slow step (2 ms) so that the clients overlap for sure; 64-token prompt chunks
    srv = await startServer(['--ctx-len', String(CTX), '--max-batch', '16', '--queue-length', '64',
      '--prefill-chunk', '64'], { AAHD_TEST_STEP_DELAY_US: '2000' }, dir);
  });
  after(async () => {
    const r = await srv.stop();
    fs.rmSync(dir, { recursive: true, force: true });
    assert.equal(r.code, 0, srv.log());
  });

  test('different prompts, lengths, regimes, seeds; greedy and seeded; n; streamed', async () => {
    const bodies = [];
    for (let i = 0; i < 32; i++) {
      const body = {
        prompt: promptIds(3 + ((i * 37) % 300), 1000 + i),   // 3 … 302 tokens: up to five prompt chunks
        max_tokens: 8 + ((i * 13) % 33),
        aah_regime: REGIMES[i % REGIMES.length],
      };
      if (i % 2) Object.assign(body, { temperature: 0.9, top_p: 0.95, seed: 100 + i });
      else body.temperature = 0;
      if (i % 8 === 5) body.n = 3;                            // choices sharing the prefill among strangers
      if (i % 4 === 3) body.stream = true;
      if (i % 11 === 7) body.prompt = `Story number ${i}: once upon a time`;   // text prompts too
      bodies.push(body);
    }
    const alone = [];
    for (const b of bodies) alone.push(await outcome(srv, b));
    const { result: together, most } = await watchRunning(srv, () => Promise.all(bodies.map((b) => outcome(srv, b))));
    for (let i = 0; i < bodies.length; i++)
      assert.deepEqual(together[i], alone[i], `client ${i} (${JSON.stringify({ ...bodies[i], prompt: undefined })})`);
    assert.ok(most >= 8, `the clients ran together (at most ${most} at once)`);
    const m = await metrics(srv.port);
    assert.equal(m.get('aahd_kv_cache_bytes_used'), 0);
    assert.equal(m.get('aahd_requests_running') + m.get('aahd_requests_waiting'), 0);
    // device sampling (run_tests.sh runs this file again with AAH_DEVICE_SAMPLING=1): at least the greedy clients'
    // tokens came from candidates (with no row read back, the tiny model's top-p 0.95 nuclei close inside them too)
    if (process.env.AAH_DEVICE_SAMPLING === '1') assert.equal(m.get('aahd_device_sampling'), 1);
    if (m.get('aahd_device_sampling')) {
      assert.ok(m.get('aahd_draws_from_candidates_total') >= m.get('aahd_generation_tokens_total') / 2, m.raw);
    } else {
      assert.equal(m.get('aahd_draws_from_candidates_total') + m.get('aahd_logits_rows_fetched_total'), 0, m.raw);
    }
  });

  test('n choices share one prefill: the prompt is processed once, each choice equals seed + k alone', async () => {
    const prompt = promptIds(250, 77);
    const body = { prompt, max_tokens: 12, temperature: 1.0, seed: 4242, aah_regime: 'full_adaptive' };
    const before0 = (await metrics(srv.port)).get('aahd_prompt_tokens_total');
    const r = await complete(srv, { ...body, n: 4 });
    assert.equal(r.status, 200, r.text);
    const after0 = (await metrics(srv.port)).get('aahd_prompt_tokens_total');
    assert.equal(after0 - before0, prompt.length, 'prompt tokens through the engine');
    assert.equal(r.json.usage.prompt_tokens, prompt.length);
    for (let k = 0; k < 4; k++) {
      const one = await complete(srv, { ...body, seed: 4242 + k });
      assert.equal(r.json.choices[k].text, one.json.choices[0].text, `choice ${k}`);
    }
    // echo + logprobs: the prompt's log-probabilities, computed once, the same in every choice
    const e = await complete(srv, { prompt: prompt.slice(0, 40), max_tokens: 3, n: 3, echo: true, logprobs: 1,
      temperature: 0.7, seed: 1 });
    assert.equal(e.status, 200, e.text);
    const lp = e.json.choices.map((c) => c.logprobs.token_logprobs.slice(0, 40));
    assert.equal(lp[0][0], null);
    assert.deepEqual(lp[1], lp[0]);
    assert.deepEqual(lp[2], lp[0]);
  });
});

describe('a flood beyond the queue', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', String(CTX), '--max-batch', '4', '--queue-length', '8',
      '--max-connections', '128'], { AAHD_TEST_STEP_DELAY_US: '10000' });
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test('gets 429 with Retry-After, while every admitted request completes as it would alone', async () => {
    // The test decides when the queue is full: 12 long requests, each sent once the last is seen running (the first
    // four) or waiting, or ended (a burst could find the queue full before the engine took any into a slot), take the
    // 4 slots and the 8 places of the queue, and only then do 36 short ones come. A request of 400 tokens lasts 4 s at least at 10 ms a
    // step; on a machine loaded enough that sending eleven takes longer, the first ones end first, and the count
    // includes them (waiting only for running + waiting once hung there: the ended ones were never seen again).
    const long = Array.from({ length: 12 }, (_, i) => ({ prompt: promptIds(10 + i, 5000 + i), max_tokens: 400,
      temperature: 0 }));
    const short = Array.from({ length: 36 }, (_, i) => ({ prompt: promptIds(22 + i, 6000 + i), max_tokens: 16,
      temperature: 0 }));
    const before0 = await metrics(srv.port);
    const first = [];
    let ended = 0;
    const seen = [];   // running/waiting/ended as each long request was counted: the failure message says it
    for (const b of long) {
      first.push(complete(srv, b).finally(() => { ended++; }));
      await until(async () => {
        const m = await metrics(srv.port);
        const [r, w] = [m.get('aahd_requests_running'), m.get('aahd_requests_waiting')];
        // the first four must be in the slots before more come: counted while still queued, an engine slow to take
        // them (a loaded machine, a long step) let the twelve fill the queue of 8 (request 9 then got 429)
        if ((first.length <= 4 ? r : r + w) + ended < first.length) return false;
        seen.push(`${first.length}: ${r}/${w}/${ended}`);
        return true;
      }, 20000, `request ${first.length} running, waiting or ended`);
    }
    const m0 = await metrics(srv.port);
    if (ended === 0) {
      assert.equal(m0.get('aahd_requests_running'), 4);
      assert.equal(m0.get('aahd_requests_waiting'), 8);
    }
    const flood = await Promise.all(short.map((b) => complete(srv, b)));
    const rs = [...(await Promise.all(first)), ...flood];
    const bodies = [...long, ...short];
    const ok = rs.flatMap((r, i) => (r.status === 200 ? [i] : []));
    const refused = rs.filter((r) => r.status === 429);
    assert.equal(ok.length + refused.length, rs.length, rs.map((r) => r.status).join());
    assert.ok(refused.length >= 1, 'some were refused');
    for (let i = 0; i < 12; i++)
      assert.equal(rs[i].status, 200, `long request ${i}: ${rs[i].text} (running/waiting/ended as each was counted: ${
        seen.join(', ')})`);
    for (const r of refused) {
      assert.equal(r.json.error.code, 'queue_full');
      assert.equal(r.json.error.type, 'rate_limit_error');
      assert.ok(Number(r.headers['retry-after']) >= 1, 'Retry-After');
    }
    for (const i of ok) {
      const c = rs[i].json.choices[0];
      assert.equal(c.finish_reason, 'length');
      assert.equal(rs[i].json.usage.completion_tokens, bodies[i].max_tokens);
    }
    for (const i of [0, 7, ...ok.filter((i) => i >= 12).slice(0, 2)]) {   // and the same text as alone
      const one = await complete(srv, bodies[i]);
      assert.equal(rs[i].json.choices[0].text, one.json.choices[0].text, `request ${i}`);
    }
    // a request is counted when libmicrohttpd reports it completed, which may come after its client has read it
    let m;
    const d = (k) => (m.get(k) || 0) - (before0.get(k) || 0);
    await until(async () => {
      m = await metrics(srv.port);
      return d('aahd_requests_total{status="429"}') >= refused.length;
    }, 10000, 'the refusals counted');
    assert.equal(d('aahd_requests_total{status="429"}'), refused.length);
    assert.equal(m.get('aahd_kv_cache_bytes_used'), 0);
    assert.equal(m.get('aahd_requests_running') + m.get('aahd_requests_waiting'), 0);
    assert.equal((await request(srv.port, 'GET', '/health')).status, 200);
  });
});

describe('pages under load (windows of 64: a long sequence holds a constant number of pages)', () => {
  let srv;
  let dir;
  let pageBytes;
  before(async () => {
    dir = makeModel(['--aah-layer-windows', '64,64']);
    // tiny: 2 layers × 2 KV heads; a page is 16 positions × head_dim 16 × K and V × 2 bytes (f16, the default kv_dtype)
    pageBytes = 16 * 16 * 2 * 2;
    // 330 KiB = 330 pages: 16 shallow_freeze sequences (20 pages each), or 2 full-attention ones of 500 positions
    // (4 heads × 32 pages)
    srv = await startServer(['--ctx-len', String(CTX), '--max-batch', '16', '--queue-length', '32',
      '--kv-budget-bytes', String(330 * 1024)], { AAHD_TEST_STEP_DELAY_US: '5000' }, dir);
  });
  after(async () => {
    const r = await srv.stop();
    fs.rmSync(dir, { recursive: true, force: true });
    assert.equal(r.code, 0, srv.log());
  });

  test('cancelling half of 16 streams frees their pages: the survivors\' remain, then none', async () => {
    const perSeq = 2 * 2 * 5 * pageBytes;   // every KV head's ring: ceil(64 / 16) + 1 pages
    const streams = await Promise.all(Array.from({ length: 16 }, (_, i) =>
      openStream(srv, { prompt: promptIds(100, 300 + i), max_tokens: 400, temperature: 0.8, seed: i,
        aah_regime: 'shallow_freeze' }, 2)));
    await until(async () => (await metrics(srv.port)).get('aahd_kv_cache_bytes_used') === 16 * perSeq, 15000,
      'sixteen full rings');
    assert.equal((await metrics(srv.port)).get('aahd_requests_running'), 16);
    for (const s of streams.slice(0, 8)) s.req.destroy();
    await until(async () => {
      const m = await metrics(srv.port);
      return m.get('aahd_requests_running') === 8 && m.get('aahd_kv_cache_bytes_used') === 8 * perSeq;
    }, 15000, 'the cancelled streams\' pages freed');
    // the survivors go on streaming
    const lengths = streams.slice(8).map((s) => s.text().length);
    await until(async () => streams.slice(8).every((s, i) => s.text().length > lengths[i]), 15000,
      'every survivor still streams');
    for (const s of streams.slice(8)) s.req.destroy();
    await until(async () => {
      const m = await metrics(srv.port);
      return m.get('aahd_requests_running') === 0 && m.get('aahd_kv_cache_bytes_used') === 0;
    }, 3000, 'every page freed');
  });

  test('one KV budget: full attention runs 2 long requests at once, the AAH regime all 8', async () => {
    const run = (regime) => watchRunning(srv, () => Promise.all(Array.from({ length: 8 }, (_, i) =>
      complete(srv, { prompt: promptIds(480, 900 + i), max_tokens: 20, temperature: 0, aah_regime: regime }))));
    const full = await run('full_attention');
    const aah = await run('shallow_freeze');
    for (const r of [...full.result, ...aah.result]) assert.equal(r.status, 200, r.text);
    assert.ok(full.most <= 2, `full attention: ${full.most} at once within the budget`);
    assert.ok(aah.most >= 6, `shallow_freeze: ${aah.most} at once`);
    const m = await metrics(srv.port);
    assert.ok(m.get('aahd_kv_cache_bytes_capacity') <= 330 * 1024);
  });
});
