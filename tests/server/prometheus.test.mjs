// tests/server/prometheus.test.mjs — Debian's Prometheus with the shipped deploy/prometheus/ files (scrape interval
// and targets templated) scraping two aahd replicas that run different AAH regimes: its HTTP API returns the fleet's
// ACR that this test computes from the replicas' own completion responses (their aah.branch_usage), to 1e-6.
// Run by tests/test_prometheus.sh.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { freePort } from './fleet_lib.mjs';
import { BUILD, MODEL, metrics, request, startServer, until } from './lib.mjs';

const PROMETHEUS = process.env.AAH_PROMETHEUS || '/usr/bin/prometheus';
const T = 512;

async function startPrometheus(targets, dir) {
  const port = await freePort();
  let conf = fs.readFileSync('deploy/prometheus/prometheus.yml', 'utf8');
  const sub = (re, to) => {
    assert.match(conf, re, `deploy/prometheus/prometheus.yml: ${re}`);
    conf = conf.replace(re, to);
  };
  sub(/scrape_interval: 15s/, 'scrape_interval: 1s');
  sub(/evaluation_interval: 15s/, 'evaluation_interval: 1s');
  sub(/\/etc\/prometheus\/aahd\.rules\.yml/, path.resolve('deploy/prometheus/aahd.rules.yml'));
  sub(/\/etc\/prometheus\/aahd\.alerts\.yml/, path.resolve('deploy/prometheus/aahd.alerts.yml'));
  sub(/targets: \[[^\]]*\]/, `targets: [${targets.map((t) => `'${t}'`).join(', ')}]`);
  const file = path.join(dir, 'prometheus.yml');
  fs.writeFileSync(file, conf);
  execFileSync('promtool', ['check', 'config', file], { stdio: 'pipe' });
  const proc = spawn(PROMETHEUS, [`--config.file=${file}`, `--storage.tsdb.path=${path.join(dir, 'data')}`,
    `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  process.on('exit', () => { if (proc.exitCode === null) proc.kill('SIGKILL'); });
  await until(async () => {
    if (proc.exitCode !== null) throw new Error(`prometheus exited: ${log}`);
    try {
      return (await request(port, 'GET', '/-/ready')).status === 200;
    } catch {
      return false;
    }
  }, 60000, 'prometheus ready');
  return {
    port,
    log: () => log,
    // an instant query: [{metric, value: number}]
    async query(q) {
      const r = await request(port, 'GET', `/api/v1/query?query=${encodeURIComponent(q)}`);
      assert.equal(r.status, 200, r.text);
      return r.json.data.result.map((x) => ({ metric: x.metric, value: Number(x.value[1]) }));
    },
    async stop() {
      if (proc.exitCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}

describe('Prometheus over two replicas of different regimes', () => {
  let dir;
  let a;
  let b;
  let prom;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-prom-'));
    execFileSync(`${BUILD}/aah-mkmodel`, ['--preset', 'tiny', '--tokenizer', MODEL, '--aah', '--aah-context', String(T),
      '--aah-windows', '64,128,256,512', '--out', path.join(dir, 'model')], { stdio: 'pipe' });
    a = await startServer(['--ctx-len', String(T), '--regime', 'shallow_freeze'], {}, path.join(dir, 'model'));
    b = await startServer(['--ctx-len', String(T), '--regime', 'full_adaptive'], {}, path.join(dir, 'model'));
    prom = await startPrometheus([`127.0.0.1:${a.port}`, `127.0.0.1:${b.port}`], dir);
  });
  after(async () => {
    if (prom) await prom.stop();
    for (const s of [a, b]) if (s) await s.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the recording rules give the fleet ACR of the replicas\' own responses, to 1e-6', async () => {
    // both scraped once before any traffic: every counter series starts at 0 in the database
    await until(async () => (await prom.query('aahd_branch_usage_total')).length > 0 &&
      (await prom.query('up == 1')).length === 2, 60000, 'both replicas scraped');
    const responses = [];
    const send = async (srv, body) => {
      const r = await request(srv.port, 'POST', '/v1/completions', body);
      assert.equal(r.status, 200, r.text);
      responses.push(r.json.aah);
    };
    for (let i = 0; i < 6; i++) {
      const prompt = Array.from({ length: 40 + 37 * i }, (_, k) => 5 + ((k * 31 + i) % 2000));
      await send(a, { prompt, max_tokens: 30, temperature: 0 });
      await send(b, { prompt, max_tokens: 30, temperature: 0 });
    }
    // a third regime on a: full attention
    await send(a, { prompt: 'full attention once', max_tokens: 20, aah_regime: 'full_attention' });

    // what the responses say: Σ W·usage / (T·Σ usage), over the fleet and per regime
    const sums = new Map([['', [0, 0]]]);
    for (const r of responses) {
      if (!sums.has(r.regime)) sums.set(r.regime, [0, 0]);
      for (const [w, u] of Object.entries(r.branch_usage))
        for (const key of ['', r.regime]) {
          sums.get(key)[0] += Number(w) * u;
          sums.get(key)[1] += T * u;
        }
    }
    const want = new Map([...sums].map(([k, [num, den]]) => [k, num / den]));
    assert.deepEqual([...want.keys()].sort(), ['', 'full_adaptive', 'full_attention', 'shallow_freeze']);
    assert.equal(want.get('full_attention'), 1);
    // the responses' rounded acr agrees (4 decimals)
    for (const r of responses) if (r.regime !== 'full_adaptive') assert.ok(Math.abs(r.acr - want.get(r.regime)) < 1e-4);
    // and the replicas' own counters say the same
    let num = 0;
    let den = 0;
    for (const s of [a, b]) {
      const m = await metrics(s.port);
      assert.equal(m.get('aahd_acr_context_length'), T);
      for (const [k, v] of m) {
        const w = /^aahd_branch_usage_total\{regime="[^"]+",window="(\d+)"\}$/.exec(k);
        if (w) {
          num += Number(w[1]) * v;
          den += T * v;
        }
      }
    }
    assert.ok(Math.abs(num / den - want.get('')) < 1e-12, `counters ${num / den} vs responses ${want.get('')}`);

    // Prometheus, once it has scraped the last counts and evaluated the rules on them
    const close = async (q, expect) => {
      const got = await prom.query(q);
      return got.length === 1 && Math.abs(got[0].value - expect) < 1e-6;
    };
    await until(async () => close(':aahd_acr:lifetime', want.get('')), 60000,
      `:aahd_acr:lifetime = ${want.get('')} (Prometheus has ${JSON.stringify(await prom.query(':aahd_acr:lifetime'))})`);
    for (const regime of ['shallow_freeze', 'full_adaptive', 'full_attention']) {
      await until(async () => close(`regime:aahd_acr:lifetime{regime="${regime}"}`, want.get(regime)), 30000,
        `regime:aahd_acr:lifetime{regime="${regime}"} = ${want.get(regime)}`);
      // a regime served by one replica: its 5-minute rate form is exact too (every series of a target shares the
      // scrape times, and each began at 0 inside the window)
      await until(async () => close(`regime:aahd_acr:rate5m{regime="${regime}"}`, want.get(regime)), 30000,
        `regime:aahd_acr:rate5m{regime="${regime}"} = ${want.get(regime)}`);
    }
    const fleetRate = (await prom.query(':aahd_acr:rate5m'))[0].value;
    const avg = (want.get('shallow_freeze') + want.get('full_adaptive') + 1) / 3;
    console.log(`# fleet ACR ${want.get('').toFixed(6)} (average of the regimes' ACRs: ${avg.toFixed(6)}); ` +
      `:aahd_acr:lifetime exact, :aahd_acr:rate5m ${fleetRate.toFixed(6)} (rate extrapolation across replicas)`);
    // the work and memory ratios from counters, the same way
    const mm = await Promise.all([a, b].map((s) => metrics(s.port)));
    const tot = (name) => mm.reduce((acc, m) => acc + [...m].filter(([k]) => k.startsWith(`${name}{`))
      .reduce((x, [, v]) => x + v, 0), 0);
    const work = tot('aahd_attention_products_total') / tot('aahd_attention_products_full_total');
    const kvm = tot('aahd_kv_peak_bytes_total') / tot('aahd_kv_peak_bytes_full_total');
    await until(async () => close(':aahd_attention_work_ratio:lifetime', work), 30000, `work ratio ${work}`);
    await until(async () => close(':aahd_kv_memory_ratio:lifetime', kvm), 30000, `KV memory ratio ${kvm}`);
    assert.ok(work < 1 && kvm < 1, `work ${work}, KV memory ${kvm}`);
  });
});
