// tools/dashboard_screenshot.mjs — the picture of GET /dashboard in docs/deploy.md: serves a random-weight AAH model (the demo
// shape with 12 layers and 8 KV heads, one group per KV head, aah-mkmodel --aah) with build/aahd, sends it traffic
// under every regime for a while, and has Debian's headless Chromium take a screenshot.
//   node tools/dashboard_screenshot.mjs [--seconds 90] [--out docs/dashboard.png]
// Needs `make` (build/aahd, build/aah-mkmodel) and the Qwen3 tokenizer in .cache/ (make run fetches it).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { launchChromium } from '../tests/server/chromium.mjs';
import { request, startServer } from '../tests/server/lib.mjs';

const arg = (name, def) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : def;
};
const seconds = Number(arg('--seconds', '90'));
const out = arg('--out', 'docs/dashboard.png');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-shot-'));
const model = path.join(dir, 'model');
execFileSync('build/aah-mkmodel', ['--preset', 'demo', '--layers', '12', '--heads', '8', '--kv-heads', '8',
  '--tokenizer', '.cache/qwen3-tokenizer', '--aah', '--out', model], { stdio: 'inherit' });
const srv = await startServer(['--max-batch', '6', '--threads', '2', '--queue-length', '16'], {}, model);
const regimes = ['shallow_freeze', 'full_adaptive', 'deep_reuse', 'grouping_off', 'full_attention'];
const browser = await launchChromium({ width: 1400, height: 1000 });
const page = await browser.open(`http://127.0.0.1:${srv.port}/dashboard#regime=full_adaptive`);
const t0 = Date.now();
let n = 0;
const client = async (k) => {
  while (Date.now() - t0 < seconds * 1000) {
    const len = 100 + ((n * 389 + k * 211) % 700);
    const prompt = Array.from({ length: len }, (_, i) => 100 + ((i * 7919 + n) % 150000));
    const regime = regimes[(n + k) % regimes.length];
    n++;
    await request(srv.port, 'POST', '/v1/completions', { prompt, max_tokens: 32, aah_regime: regime, temperature: 0.8,
      seed: n, stream: n % 2 === 0 });
  }
};
await Promise.all([0, 1, 2, 3].map(client));
await new Promise((r) => setTimeout(r, 2500));
fs.mkdirSync(path.dirname(out), { recursive: true });
await page.screenshot(out);
console.log(`${out}: ${n} requests in ${seconds} s`);
await browser.close();
await srv.stop();
fs.rmSync(dir, { recursive: true, force: true });
