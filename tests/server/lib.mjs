// tests/server/lib.mjs — helpers of the HTTP integration tests: start a real aahd on a free port (port 0; the
// port is read from its log) with the test model, plain and raw HTTP requests, SSE parsing, /metrics reading.
import { spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';

export const BUILD = process.env.AAH_BUILD || 'build';
export const TESTDATA = process.env.AAH_TESTDATA || 'tests/data';
export const MODEL = `${TESTDATA}/qwen3-small-a`;
// How long a request may go without a byte before the test calls the server hung: long enough for a request queued
// behind dozens of others on a loaded 2-core machine, five times that under the sanitizers (5-20x slower).
const IDLE_MS = (BUILD.endsWith('/san') ? 5 : 1) * 180000;

// Every daemon started here is killed when the test process ends, however it ends (a failed assertion, the
// runner's timeout), so that none outlives the run.
const live = new Set();
const killAll = () => {
  for (const p of live) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
};
process.on('exit', killAll);
for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'])
  process.on(sig, () => {
    killAll();
    process.exit(1);
  });

// Starts aahd with extra flags and environment; resolves once it listens. stop() sends SIGTERM and waits.
export async function startServer(args = [], env = {}, model = MODEL) {
  const bin = `${BUILD}/aahd`;
  const proc = spawn(bin, ['--model', model, '--port', '0', '--threads', '1', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  live.add(proc);
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => {
    live.delete(proc);
    resolve({ code, signal });
  }));
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`aahd did not start within 20 s:\n${log}`)), 20000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on http:\/\/\S*:(\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`aahd exited (${code}) before listening:\n${log}`));
    });
  });
  return {
    proc,
    port,
    base: `http://127.0.0.1:${port}`,
    log: () => log,
    exited,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 15000);
      const r = await exited;
      clearTimeout(timer);
      return r;
    },
  };
}

// One HTTP request on a fresh connection; body a string, Buffer or object (sent as JSON).
export function request(port, method, path, body, headers = {}) {
  return new Promise((resolve, reject) => {
    let data = body;
    const h = { ...headers };
    if (body !== undefined && typeof body === 'object' && !Buffer.isBuffer(body)) {
      data = JSON.stringify(body);
      h['Content-Type'] = h['Content-Type'] || 'application/json';
    }
    const req = http.request({ host: '127.0.0.1', port, method, path, headers: h, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json = null;
        try {
          json = JSON.parse(text);
        } catch {
          /* not JSON */
        }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
    });
    req.on('error', reject);
    req.setTimeout(IDLE_MS, () => req.destroy(new Error(`${method} ${path}: no answer in ${IDLE_MS / 1000} s`)));
    if (data !== undefined) req.end(data);
    else req.end();
  });
}

// The events of an SSE body: parsed JSON objects, and '[DONE]'.
export function sseEvents(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    const line = block.trim();
    if (!line) continue;
    if (!line.startsWith('data: ')) throw new Error(`not an SSE data line: ${line}`);
    const payload = line.slice(6);
    out.push(payload === '[DONE]' ? '[DONE]' : JSON.parse(payload));
  }
  return out;
}

// Joins a stream's chunks per choice: text, finish_reason, logprobs arrays, aah.
export function joinStream(events) {
  const choices = new Map();
  for (const e of events) {
    if (e === '[DONE]' || !e.choices) continue;
    for (const c of e.choices) {
      const acc = choices.get(c.index) || { index: c.index, text: '', finish_reason: null, chunks: 0,
        logprobs: { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] } };
      acc.text += c.text;
      acc.chunks++;
      if (c.finish_reason) acc.finish_reason = c.finish_reason;
      if (c.aah) acc.aah = c.aah;
      if (c.logprobs) for (const k of Object.keys(acc.logprobs)) acc.logprobs[k].push(...c.logprobs[k]);
      choices.set(c.index, acc);
    }
  }
  return [...choices.values()].sort((a, b) => a.index - b.index);
}

// /metrics as a map "name{labels}" → number.
export async function metrics(port, headers = {}) {
  const r = await request(port, 'GET', '/metrics', undefined, headers);
  if (r.status !== 200) throw new Error(`/metrics: ${r.status} ${r.text}`);
  const m = new Map();
  for (const line of r.text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  m.raw = r.text;
  return m;
}

// Polls cond() every 50 ms until it is true or ms pass.
export async function until(cond, ms, what) {
  const t0 = Date.now();
  for (;;) {
    if (await cond()) return;
    if (Date.now() - t0 > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// Raw bytes over a socket; resolves with whatever the server sent before it closed (or after ms).
export function rawExchange(port, bytes, ms = 5000) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    const chunks = [];
    const done = () => resolve(Buffer.concat(chunks).toString('latin1'));
    s.on('data', (c) => chunks.push(c));
    s.on('error', done);
    s.on('close', done);
    s.setTimeout(ms, () => s.destroy());
    s.write(bytes);
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
