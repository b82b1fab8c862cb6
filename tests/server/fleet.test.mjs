// tests/server/fleet.test.mjs — three aahd replicas behind Debian's nginx with the shipped deploy/nginx/aahd.conf, on
// loopback: 200 concurrent requests (streamed and not) spread over all three and answer what a lone replica answers;
// a replica SIGTERMed in the middle loses nothing (what it had finishes or ends "abort", what came after goes to the
// others); when every replica is full, the client gets 429 with Retry-After. Run by tests/test_fleet.sh.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { startNginx } from './fleet_lib.mjs';
import { joinStream, metrics, request, sseEvents, startServer, until } from './lib.mjs';

const PROMPTS = Array.from({ length: 10 }, (_, i) => `Replica prompt ${i}: the ${['fox', 'dog', 'cat', 'owl', 'elk'][i % 5]} says`);

// One completion through a fresh connection, with our X-Request-Id; streamed ones are joined into one choice.
function complete(port, body, rid, extra = {}) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/completions', agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data), 'X-Request-Id': rid,
        ...extra } },
    (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        const out = { status: res.statusCode, headers: res.headers, text };
        try {
          if (res.statusCode === 200 && body.stream) {
            const [c] = joinStream(sseEvents(text));
            out.choice = c;
          } else {
            out.json = JSON.parse(text);
            if (res.statusCode === 200) out.choice = out.json.choices[0];
          }
        } catch (e) {
          out.parseError = e.message;
        }
        resolve(out);
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(120000, () => req.destroy(new Error(`${rid}: no answer in 120 s`)));
    req.end(data);
  });
}

function connects(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.on('connect', () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

const served = async (srv) => (await metrics(srv.port)).get('aahd_requests_total{status="200"}') || 0;

describe('three replicas behind nginx', () => {
  const FLAGS = ['--max-batch', '8', '--queue-length', '256', '--max-connections', '256', '--ctx-len', '256'];
  let lone;
  let replicas;
  let nginx;
  const want = new Map();   // prompt index → the lone replica's greedy {text, finish_reason}
  before(async () => {
    lone = await startServer(FLAGS);
    for (let i = 0; i < PROMPTS.length; i++) {
      const r = await complete(lone.port, { prompt: PROMPTS[i], max_tokens: 12, temperature: 0 }, `lone-${i}`);
      assert.equal(r.status, 200, r.text);
      want.set(i, { text: r.choice.text, finish_reason: r.choice.finish_reason });
    }
    await lone.stop();
  });
  after(async () => {
    if (nginx) await nginx.stop();
    for (const r of replicas || []) await r.stop();
  });

  test('200 concurrent requests, streamed and not, spread over all three, each what a lone replica answers',
    async () => {
      replicas = [await startServer(FLAGS), await startServer(FLAGS), await startServer(FLAGS)];
      nginx = await startNginx(replicas.map((r) => r.port));
      const jobs = Array.from({ length: 200 }, (_, k) => complete(nginx.port,
        { prompt: PROMPTS[k % PROMPTS.length], max_tokens: 12, temperature: 0, stream: k % 2 === 1 }, `fleet-${k}`));
      const res = await Promise.all(jobs);
      res.forEach((r, k) => {
        assert.equal(r.status, 200, `request ${k}: ${r.status} ${r.text}`);
        assert.equal(r.headers['x-request-id'], `fleet-${k}`, 'X-Request-Id comes back');
        const w = want.get(k % PROMPTS.length);
        assert.equal(r.choice.text, w.text, `request ${k} (stream ${k % 2 === 1}) differs from the lone replica`);
        assert.equal(r.choice.finish_reason, w.finish_reason);
      });
      // every replica served some; together exactly the 200 (nothing retried, nothing lost). A response is counted
      // once it has been sent, so the last ones may still be on their way into the counters.
      let counts;
      await until(async () => (counts = await Promise.all(replicas.map(served))).reduce((a, b) => a + b, 0) >= 200,
        10000, 'the 200 responses counted');
      assert.ok(counts.every((c) => c > 0), `requests per replica: ${counts}`);
      assert.equal(counts.reduce((a, b) => a + b, 0), 200, `requests per replica: ${counts}`);
      // nginx sent our X-Request-Id on: the replicas took it as the completion id
      const fleetLog = () => nginx.accessLog().filter((l) => l.rid && l.rid.startsWith('fleet-'));
      await until(async () => fleetLog().length === 200, 10000, 'the access log lines');   // written after the send
      const log = fleetLog();
      for (const l of log) assert.deepEqual(l.upstreamStatus, ['200'], l.line);
      console.log(`# requests per replica: ${counts.join(', ')}`);
    });

  test('a session (X-Session-Id) stays on one replica, and the sessions spread over them', async () => {
    // 12 sessions × 3 turns, sent concurrently: every turn of a session reaches the replica its key hashes to
    const reqs = [];
    for (let s = 0; s < 12; s++)
      for (let t = 0; t < 3; t++)
        reqs.push(complete(nginx.port, { prompt: `${PROMPTS[s % 10]} turn ${t}`, max_tokens: 2, temperature: 0 },
          `sess-${s}-${t}`, { 'X-Session-Id': `user-${s}` }));
    for (const r of await Promise.all(reqs)) assert.equal(r.status, 200, r.text);
    const sessLog = () => nginx.accessLog().filter((l) => l.rid && l.rid.startsWith('sess-'));
    await until(async () => sessLog().length === 36, 10000, 'the access log lines');
    const where = new Map();
    for (const l of sessLog()) {
      const s = l.rid.split('-')[1];
      assert.equal(l.upstreams.length, 1, l.line);
      if (!where.has(s)) where.set(s, l.upstreams[0]);
      assert.equal(l.upstreams[0], where.get(s), `session ${s}: ${l.line}`);
    }
    assert.ok(new Set(where.values()).size > 1, `12 sessions all on one replica: ${[...where.values()]}`);
  });

  test('everything an OpenAI-completions client or an evaluator uses passes through nginx unchanged', async () => {
    const direct = replicas[0].port;
    const same = async (method, p, body) => {
      const [a, b] = [await request(nginx.port, method, p, body), await request(direct, method, p, body)];
      assert.equal(a.status, 200, `${method} ${p} through nginx: ${a.status} ${a.text}`);
      // nginx may pick another replica than the one asked directly: only its start time differs
      const plain = (j) => JSON.parse(JSON.stringify(j, (k, v) => (k === 'created' ? undefined : v)));
      assert.deepEqual(plain(a.json), plain(b.json), `${method} ${p}`);
      return a;
    };
    await same('GET', '/v1/models');
    await same('GET', '/tokenizer_info');
    const t = await same('POST', '/tokenize', { prompt: 'The fox', add_special_tokens: false });
    await same('POST', '/detokenize', { tokens: t.json.tokens });
    assert.equal((await request(nginx.port, 'GET', '/health')).status, 200);
    // loglikelihood scoring (echo + logprobs, max_tokens 0), as lm-evaluation-harness and aah-eval send it
    const score = { prompt: t.json.tokens, max_tokens: 0, echo: true, logprobs: 1, temperature: 0 };
    const [a, b] = [await request(nginx.port, 'POST', '/v1/completions', score),
      await request(direct, 'POST', '/v1/completions', score)];
    assert.equal(a.status, 200, a.text);
    assert.deepEqual(a.json.choices[0].logprobs, b.json.choices[0].logprobs);
  });

  test('a body over client_max_body_size is refused by nginx in the OpenAI error shape', async () => {
    const big = { prompt: 'x'.repeat(1100000), max_tokens: 1 };
    const r = await request(nginx.port, 'POST', '/v1/completions', big);
    assert.equal(r.status, 413);
    assert.equal(r.json.error.code, 'request_too_large');
  });
});

describe('a replica drains on SIGTERM behind nginx', () => {
  // 30 ms a step: the 24 requests of 40 tokens keep the victim busy for seconds, running when the signal comes
  const FLAGS = ['--max-batch', '4', '--queue-length', '256', '--max-connections', '256', '--ctx-len', '256',
    '--shutdown-grace-seconds', '1'];
  const ENV = { AAHD_TEST_STEP_DELAY_US: '30000' };
  let replicas;
  let nginx;
  const want = new Map();
  after(async () => {
    if (nginx) await nginx.stop();
    for (const r of replicas || []) await r.stop();
  });

  test('what it had finishes or ends "abort"; what came after goes to the others; nothing is lost', async () => {
    const lone = await startServer(FLAGS.slice(0, 8));
    for (let i = 0; i < PROMPTS.length; i++) {
      const r = await complete(lone.port, { prompt: PROMPTS[i], max_tokens: 40, temperature: 0 }, `lone-${i}`);
      want.set(i, r.choice);
    }
    await lone.stop();
    replicas = [await startServer(FLAGS, ENV), await startServer(FLAGS, ENV), await startServer(FLAGS, ENV)];
    nginx = await startNginx(replicas.map((r) => r.port));
    const victim = replicas[1];
    const body = (k, stream) => ({ prompt: PROMPTS[k % PROMPTS.length], max_tokens: 40, temperature: 0, stream });
    const waveA = Array.from({ length: 24 }, (_, k) => complete(nginx.port, body(k, k % 2 === 0), `drainA-${k}`));
    await until(async () => (await metrics(victim.port)).get('aahd_requests_running') > 0, 30000, 'the victim running');
    victim.proc.kill('SIGTERM');
    // its log says "draining" a moment before it stops accepting: wait until its port refuses connections
    await until(async () => /draining/.test(victim.log()) && !(await connects(victim.port)), 10000,
      'the victim no longer accepting');
    // sent after the drain began: the victim refuses them (connection refused, or 503), nginx passes them on
    const waveB = Array.from({ length: 24 }, (_, k) => complete(nginx.port, body(k, k % 2 === 1), `drainB-${k}`));
    const [a, b] = [await Promise.all(waveA), await Promise.all(waveB)];
    const exit = await victim.exited;
    assert.equal(exit.code, 0, victim.log());
    let aborted = 0;
    for (const [k, r] of a.entries()) {
      assert.equal(r.status, 200, `drainA-${k}: ${r.status} ${r.text}`);
      const w = want.get(k % PROMPTS.length);
      if (r.choice.finish_reason === 'abort') {
        aborted++;
        assert.ok(w.text.startsWith(r.choice.text), `drainA-${k}: an aborted text is a prefix of the full one`);
      } else {
        assert.equal(r.choice.text, w.text, `drainA-${k}`);
        assert.equal(r.choice.finish_reason, w.finish_reason);
      }
    }
    const victimAddr = `127.0.0.1:${victim.port}`;
    // nginx writes a request's log line after its last byte went out: the client may be done first
    await until(async () => nginx.accessLog().filter((l) => /^drain[AB]-/.test(l.rid || '')).length === 48, 10000,
      'the access log lines');
    const log = new Map(nginx.accessLog().filter((l) => l.rid).map((l) => [l.rid, l]));
    let triedVictim = 0;
    for (const [k, r] of b.entries()) {
      assert.equal(r.status, 200, `drainB-${k}: ${r.status} ${r.text}`);
      const w = want.get(k % PROMPTS.length);
      assert.equal(r.choice.text, w.text, `drainB-${k}: served whole by another replica`);
      assert.equal(r.choice.finish_reason, w.finish_reason);
      const l = log.get(`drainB-${k}`);
      assert.ok(l, `drainB-${k} in the access log`);
      assert.notEqual(l.upstreams[l.upstreams.length - 1], victimAddr, l.line);
      if (l.upstreams.includes(victimAddr)) triedVictim++;
    }
    console.log(`# wave A: ${a.length - aborted} finished, ${aborted} aborted by the drain; wave B: ` +
      `${triedVictim} of ${b.length} first reached the draining replica and were passed on`);
  });
});

describe('every replica full', () => {
  // one slot and one queue place each: six requests of 4000 tokens at 50 ms a step (minutes) fill the fleet
  const FLAGS = ['--max-batch', '1', '--queue-length', '1', '--ctx-len', '4096'];
  const ENV = { AAHD_TEST_STEP_DELAY_US: '50000' };
  let replicas;
  let nginx;
  after(async () => {
    if (nginx) await nginx.stop();
    for (const r of replicas || []) await r.stop();
  });

  test('the client gets 429 with Retry-After once all are full', async () => {
    replicas = [await startServer(FLAGS, ENV), await startServer(FLAGS, ENV), await startServer(FLAGS, ENV)];
    nginx = await startNginx(replicas.map((r) => r.port));
    const state = async () => Promise.all(replicas.map(async (r) => {
      const m = await metrics(r.port);
      return { running: m.get('aahd_requests_running'), waiting: m.get('aahd_requests_waiting') };
    }));
    // settled: every request in the fleet counted, none waiting beside a free slot (a request waits in the queue
    // until the engine's next step admits it, and meanwhile that replica's one queue place is taken)
    const settled = async (n) => {
      const s = await state();
      return s.reduce((a, x) => a + x.running + x.waiting, 0) === n && s.every((x) => x.waiting === 0 || x.running === 1);
    };
    // six streams, one at a time: a full replica answers 429 and nginx passes the request to the next, so each lands
    // where there is room
    const held = [];
    for (let k = 0; k < 6; k++) {
      const req = http.request({ host: '127.0.0.1', port: nginx.port, method: 'POST', path: '/v1/completions',
        agent: false, headers: { 'Content-Type': 'application/json', 'X-Request-Id': `held-${k}` } });
      const status = new Promise((resolve) => {
        req.on('error', () => resolve('error'));
        req.on('response', (res) => { res.resume(); resolve(res.statusCode); });
      });
      req.end(JSON.stringify({ prompt: PROMPTS[k], max_tokens: 4000, temperature: 0, stream: true }));
      held.push({ req, status });
      await until(async () => settled(k + 1), 30000, `request ${k + 1} in the fleet`);
      assert.equal(await status, 200, `held-${k}`);
    }
    const s = await state();
    assert.deepEqual(s, [1, 1, 1].map(() => ({ running: 1, waiting: 1 })), 'every replica full');
    const r = await complete(nginx.port, { prompt: 'one too many', max_tokens: 4 }, 'overflow');
    assert.equal(r.status, 429, r.text);
    assert.ok(Number(r.headers['retry-after']) >= 1, 'Retry-After reaches the client');
    assert.equal(r.json.error.code, 'queue_full');
    await until(async () => nginx.accessLog().some((x) => x.rid === 'overflow'), 10000, 'the access log line');
    const l = nginx.accessLog().find((x) => x.rid === 'overflow');
    assert.deepEqual(l.upstreamStatus, ['429', '429', '429'], 'every replica was asked');
    for (const h of held) h.req.destroy();
    await until(async () => (await state()).every((x) => x.running + x.waiting === 0), 30000,
      'the held requests cancelled');
  });
});
