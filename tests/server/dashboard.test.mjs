// tests/server/dashboard.test.mjs — GET /dashboard opened in Debian's headless Chromium: the page's DOM shows the
// figures /metrics gives, and its heat map has one cell per layer × KV-head group of the selected regime with the
// windows and capacities of the model's aah.json. Also writes a screenshot (checked to be a PNG of the page's size).
// Run by tests/test_dashboard.sh.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { launchChromium } from './chromium.mjs';
import { BUILD, MODEL, metrics, request, startServer, until } from './lib.mjs';

const T = 512;

describe('the dashboard in headless Chromium', () => {
  let dir;
  let srv;
  let browser;
  let aah;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-dash-'));
    execFileSync(`${BUILD}/aah-mkmodel`, ['--preset', 'tiny', '--tokenizer', MODEL, '--aah', '--aah-context', String(T),
      '--aah-windows', '64,128,256,512', '--out', path.join(dir, 'model')], { stdio: 'pipe' });
    aah = JSON.parse(fs.readFileSync(path.join(dir, 'model', 'aah.json'), 'utf8'));
    srv = await startServer(['--ctx-len', String(T), '--max-batch', '4', '--queue-length', '12'], {}, path.join(dir, 'model'));
    for (const [i, regime] of ['shallow_freeze', 'full_adaptive', 'deep_reuse', 'full_attention'].entries()) {
      const prompt = Array.from({ length: 100 + 60 * i }, (_, k) => 5 + ((k * 29 + i) % 2000));
      const r = await request(srv.port, 'POST', '/v1/completions', { prompt, max_tokens: 24, aah_regime: regime });
      assert.equal(r.status, 200, r.text);
    }
    // chat requests are counted like the others (this model has no template: answered 400, counted all the same)
    for (let i = 0; i < 2; i++)
      assert.equal((await request(srv.port, 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] })).status, 400);
    browser = await launchChromium({ width: 1400, height: 1000 });
  });
  after(async () => {
    if (browser) await browser.close();
    if (srv) await srv.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the DOM holds the figures of /metrics and one heat-map cell per layer × group of aah.json', async () => {
    await until(async () => (await metrics(srv.port)).get('aahd_requests_running') === 0, 10000, 'idle');
    const m = await metrics(srv.port);
    const page = await browser.open(`http://127.0.0.1:${srv.port}/dashboard#regime=full_adaptive`);
    await page.waitFor('document.body.dataset.ready >= 1', 30000, 'the first poll rendered');
    const dom = await page.evaluate(`(() => {
      const v = (id) => document.getElementById(id).dataset.value;
      const rows = {};
      for (const tr of document.querySelectorAll('#regimes tr[data-regime]')) {
        const cell = (c) => tr.querySelector('td.' + c).dataset.value;
        rows[tr.dataset.regime] = { acr: cell('acr'), work: cell('work'), kvmem: cell('kvmem'), sequences: cell('sequences'),
          usage: Object.fromEntries([...tr.querySelectorAll('[data-window]')].map((e) => [e.dataset.window, e.dataset.usage])) };
      }
      const cells = [...document.querySelectorAll('#heatmap .cell')].map((c) => ({ layer: +c.dataset.layer,
        group: +c.dataset.group, window: +c.dataset.window, capacity: +c.dataset.capacity, heads: c.dataset.kvHeads,
        text: c.textContent }));
      return { gen: v('gen-total'), prompt: v('prompt-total'), running: v('running'), waiting: v('waiting'),
        kvUsed: v('kv-used'), kvCap: v('kv-capacity'), maxBatch: v('max-batch'), queue: v('queue-capacity'),
        chat: v('chat-total'), requests: v('requests-total'),
        heatRegime: document.getElementById('heatmap').dataset.regime, rows, cells,
        text: document.body.innerText };
    })()`);
    assert.equal(Number(dom.gen), m.get('aahd_generation_tokens_total'));
    assert.equal(Number(dom.prompt), m.get('aahd_prompt_tokens_total'));
    assert.equal(Number(dom.running), m.get('aahd_requests_running'));
    assert.equal(Number(dom.waiting), m.get('aahd_requests_waiting'));
    assert.equal(Number(dom.kvUsed), m.get('aahd_kv_cache_bytes_used'));
    assert.equal(Number(dom.kvCap), m.get('aahd_kv_cache_bytes_capacity'));
    assert.equal(Number(dom.maxBatch), m.get('aahd_max_batch'));
    assert.equal(Number(dom.queue), m.get('aahd_queue_capacity'));
    const sum = (family) => [...m].filter(([k]) => k.startsWith(`${family}{`)).reduce((a, [, v]) => a + v, 0);
    assert.equal(Number(dom.chat), sum('aahd_chat_requests_total'));
    assert.equal(Number(dom.chat), 2);
    assert.equal(Number(dom.requests), sum('aahd_requests_total'));
    const regimes = ['full_attention', ...Object.keys(aah.regimes)];
    assert.deepEqual(Object.keys(dom.rows).sort(), regimes.sort());
    for (const regime of regimes) {
      const row = dom.rows[regime];
      const acr = m.get(`aahd_acr{regime="${regime}"}`);
      if (acr === undefined) {   // no sequence ran under it: no figure, not a made-up one
        assert.equal(row.acr, '', regime);
        assert.equal(Number(row.sequences), 0);
        continue;
      }
      assert.ok(Math.abs(Number(row.acr) - acr) < 1e-6, `${regime} ACR ${row.acr} vs ${acr}`);
      assert.ok(Math.abs(Number(row.work) - m.get(`aahd_attention_work_ratio{regime="${regime}"}`)) < 1e-6, regime);
      assert.ok(Math.abs(Number(row.kvmem) - m.get(`aahd_kv_memory_ratio{regime="${regime}"}`)) < 1e-6, regime);
      assert.equal(Number(row.sequences), m.get(`aahd_sequences_total{regime="${regime}"}`));
      for (const [k, v] of m) {
        const w = new RegExp(`^aahd_branch_usage_total\\{regime="${regime}",window="(\\d+)"\\}$`).exec(k);
        if (w) assert.equal(Number(row.usage[w[1]]), v, `${regime} window ${w[1]}`);
      }
      assert.ok(dom.text.includes(acr.toFixed(4)), `the ACR of ${regime} is on the page`);
    }
    // the heat map of the regime the URL named: one cell per (layer, group) of aah.json, its window and capacity
    const heatCells = (regime) => aah.regimes[regime].layers.flatMap((l, li) => l.groups.map((g, gi) => ({
      layer: li, group: gi, window: g.window, capacity: g.capacity, heads: g.kv_heads.join(',') })));
    const strip = (cells) => cells.map(({ text, ...c }) => c);
    assert.equal(dom.heatRegime, 'full_adaptive');
    assert.deepEqual(strip(dom.cells), heatCells('full_adaptive'));
    for (const c of dom.cells) assert.ok(c.text.startsWith(`${c.window}/${c.capacity}`), c.text);
    // choosing another regime redraws it
    const other = Object.keys(aah.regimes).find((r) => r !== 'full_adaptive');
    const cells = await page.evaluate(`(() => {
      const s = document.getElementById('regime-select');
      s.value = ${JSON.stringify(other)};
      s.dispatchEvent(new Event('change'));
      return [...document.querySelectorAll('#heatmap .cell')].map((c) => ({ layer: +c.dataset.layer,
        group: +c.dataset.group, window: +c.dataset.window, capacity: +c.dataset.capacity, heads: c.dataset.kvHeads }));
    })()`);
    assert.deepEqual(cells, heatCells(other));

    const shot = path.join(dir, 'dashboard.png');
    await page.screenshot(shot);
    const png = fs.readFileSync(shot);
    assert.equal(png.subarray(1, 4).toString('latin1'), 'PNG');
    assert.equal(png.readUInt32BE(16), 1400, 'the screenshot is the page\'s width');
  });
});
