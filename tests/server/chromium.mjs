// tests/server/chromium.mjs — Debian's headless Chromium driven over the Chrome DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages ending in NUL on file descriptors 3 and 4), so that no npm package and no
// debugging port is needed: open a page, evaluate script in it, take a screenshot.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const CHROMIUM = process.env.AAH_CHROMIUM || '/usr/bin/chromium';

export async function launchChromium({ width = 1400, height = 1000 } = {}) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-chromium-'));
  const proc = spawn(CHROMIUM, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-extensions',
    `--user-data-dir=${profile}`, `--window-size=${width},${height}`, '--remote-debugging-pipe', 'about:blank'],
  { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  process.on('exit', () => { if (proc.exitCode === null) proc.kill('SIGKILL'); });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const toBrowser = proc.stdio[3];
  const fromBrowser = proc.stdio[4];
  let nextId = 1;
  const pending = new Map();
  let buf = Buffer.alloc(0);
  fromBrowser.on('data', (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    for (let i; (i = buf.indexOf(0)) >= 0;) {
      const msg = JSON.parse(buf.subarray(0, i).toString('utf8'));
      buf = buf.subarray(i + 1);
      const p = msg.id !== undefined && pending.get(msg.id);
      if (!p) continue;
      pending.delete(msg.id);
      if (msg.error) p.reject(new Error(`${p.method}: ${msg.error.message}`));
      else p.resolve(msg.result);
    }
  });
  const send = (method, params = {}, sessionId = undefined) => new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject, method });
    toBrowser.write(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }) + '\0');
    exited.then(() => {
      if (pending.has(id)) reject(new Error(`chromium exited during ${method}:\n${stderr}`));
    });
  });
  await send('Browser.getVersion');
  return {
    stderr: () => stderr,
    // Opens url in a new page; returns {evaluate(expr), waitFor(expr, ms), screenshot(file)}.
    async open(url) {
      const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
      const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
      const s = (m, p) => send(m, p, sessionId);
      await s('Page.enable');
      await s('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: 1, mobile: false });
      await s('Page.navigate', { url });
      const page = {
        async evaluate(expression) {
          const r = await s('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true });
          if (r.exceptionDetails) throw new Error(`in the page: ${r.exceptionDetails.exception?.description || r.exceptionDetails.text}`);
          return r.result.value;
        },
        async waitFor(expression, ms, what) {
          const t0 = Date.now();
          for (;;) {
            // a page still loading may have no body yet: an exception is "not yet"
            if (await page.evaluate(`(() => { try { return !!(${expression}); } catch { return false; } })()`)) return;
            if (Date.now() - t0 > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
            await new Promise((r) => setTimeout(r, 100));
          }
        },
        // The whole page as PNG into file.
        async screenshot(file) {
          const h = await page.evaluate('document.documentElement.scrollHeight');
          await s('Emulation.setDeviceMetricsOverride', { width, height: Math.max(height, h), deviceScaleFactor: 1, mobile: false });
          const { data } = await s('Page.captureScreenshot', { format: 'png' });
          fs.writeFileSync(file, Buffer.from(data, 'base64'));
          await s('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: 1, mobile: false });
        },
      };
      return page;
    },
    async close() {
      try {
        await Promise.race([send('Browser.close'), new Promise((r) => setTimeout(r, 5000))]);
      } catch {
        /* it may be gone already */
      }
      const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}
