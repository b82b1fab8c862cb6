// tests/server/soak.mjs — a soak of aahd's connection handling, run by hand (it takes minutes; `make test` runs the
// decisive cases in connections.test.mjs instead). It starts aahd on the test model and runs, for --seconds:
// --clients loops, each request on a new connection (streams, seeded sampling, n=2, echo+logprobs, and streams
// cancelled after their first chunk), a /health probe every 200 ms, optionally --tricklers connections that send
// a header byte every 2 s and reconnect when cut, and optionally a --flood of N idle connections opened in the middle
// of the run, held 8 s and closed (issue 21). Every greedy answer (temperature 0, one prompt per client) must equal
// the one that client got first: a flood may delay, never change or lose a request. It counts every status and every
// socket error, and exits 1 when a client saw a reset or a broken pipe, a probe failed, a greedy answer changed, or a
// request was lost (an error, or a status other than 200; 503 allowed beside tricklers).
//   node tests/server/soak.mjs --seconds 60 --clients 64 --max-connections 64 [--tricklers 72 --request-timeout 5]
//   node tests/server/soak.mjs --seconds 40 --clients 64 --max-connections 64 --flood 2000 [--log FILE: aahd's log]
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';

import { startServer } from './lib.mjs';

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const seconds = arg('seconds', 60), clients = arg('clients', 64), tricklers = arg('tricklers', 0);
const floodN = arg('flood', 0);
const flags = ['--ctx-len', '512', '--max-connections', String(arg('max-connections', 64)), '--queue-length', '256',
  '--max-batch', '8'];
if (arg('request-timeout', 0)) flags.push('--request-timeout', String(arg('request-timeout', 0)));
const srv = await startServer(flags);
const end = Date.now() + seconds * 1000;
const count = {};
const bump = (k) => { count[k] = (count[k] || 0) + 1; };

// One request on a new connection; a cancel destroys it after the first chunk. Resolves with an outcome key.
function one(kind, k) {
  const bodies = {
    stream: { prompt: `stream ${k}`, max_tokens: 24, stream: true, temperature: 0.7, seed: k },
    seeded: { prompt: `seeded ${k}`, max_tokens: 16, temperature: 0.9, seed: k },
    n2: { prompt: `two ${k}`, max_tokens: 8, n: 2, temperature: 1, seed: k },
    logprobs: { prompt: `score ${k}`, max_tokens: 1, echo: true, logprobs: 2 },
    cancel: { prompt: `cancel ${k}`, max_tokens: 200, stream: true },
    greedy: { prompt: `greedy ${Math.floor(k / 100000)}`, max_tokens: 8, temperature: 0 },
  };
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/completions', agent: false,
      headers: { 'Content-Type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d) => {
        text += d;
        if (kind === 'cancel') {
          req.destroy();
          resolve(`${kind} ${res.statusCode} cancelled`);
        }
      });
      res.on('end', () => {
        if (kind === 'greedy' && res.statusCode === 200) {
          const got = JSON.parse(text).choices[0].text;
          const i = Math.floor(k / 100000);
          if (!(i in greedyFirst)) greedyFirst[i] = got;
          else if (greedyFirst[i] !== got) greedyChanged++;
        }
        resolve(`${kind} ${res.statusCode}`);
      });
      res.on('error', () => {});
    });
    req.on('error', (e) => resolve(kind === 'cancel' && req.destroyed ? `${kind} cancelled` : `error ${e.code}`));
    req.setTimeout(60000, () => { req.destroy(); resolve('error no answer in 60 s'); });   // a wedged server
    req.end(JSON.stringify(bodies[kind]));
  });
}

const greedyFirst = {};
let greedyChanged = 0;

async function client(i) {
  const kinds = ['stream', 'seeded', 'n2', 'logprobs', 'cancel', 'greedy'];
  for (let k = 0; Date.now() < end; k++) bump(await one(kinds[(i + k) % kinds.length], i * 100000 + k));
}

async function prober() {
  while (Date.now() < end) {
    const r = await new Promise((resolve) => {
      const req = http.get({ host: '127.0.0.1', port: srv.port, path: '/health', agent: false }, (res) => {
        res.resume();
        res.on('end', () => resolve(`health ${res.statusCode}`));
      });
      req.on('error', (e) => resolve(`health error ${e.code}`));
    });
    bump(r);
    await new Promise((r2) => setTimeout(r2, 200));
  }
}

const lifetimes = [];
async function trickler() {
  while (Date.now() < end) {
    const t0 = Date.now();
    await new Promise((resolve) => {
      const s = net.connect(srv.port, '127.0.0.1');
      const head = 'GET /v1/models HTTP/1.1\r\nX-Slow: ' + 'z'.repeat(10000);
      let i = 0;
      const timer = setInterval(() => { if (i < head.length) s.write(head[i++]); }, 2000);
      s.on('error', () => {});
      s.on('close', () => { clearInterval(timer); resolve(); });
      setTimeout(() => s.destroy(), Math.max(0, end - Date.now()));
    });
    if (Date.now() < end) lifetimes.push((Date.now() - t0) / 1000);
  }
}

// The flood: floodN connections that send nothing, opened at the run's middle, held 8 s, closed.
const floodStats = { opened: 0, failed: 0 };
async function flood() {
  if (!floodN) return;
  await new Promise((r) => setTimeout(r, Math.max(0, (end - Date.now()) / 2 - 4000)));
  const socks = [];
  await Promise.all(Array.from({ length: floodN }, () => new Promise((resolve) => {
    const s = net.connect(srv.port, '127.0.0.1');
    socks.push(s);
    s.on('connect', () => { floodStats.opened++; resolve(); });
    s.on('error', () => { floodStats.failed++; resolve(); });
  })));
  await new Promise((r) => setTimeout(r, 8000));
  for (const s of socks) s.destroy();
}

const t0 = Date.now();
await Promise.all([...Array.from({ length: clients }, (_, i) => client(i)), prober(), flood(),
  ...Array.from({ length: tricklers }, trickler)]);
const r = await srv.stop();
if (process.argv.includes('--log')) fs.writeFileSync(process.argv[process.argv.indexOf('--log') + 1], srv.log());
const resets = Object.entries(count).filter(([k]) => /error (ECONNRESET|EPIPE)/.test(k)).reduce((a, [, v]) => a + v, 0);
const probesBad = Object.entries(count).filter(([k]) => /^health/.test(k) && k !== 'health 200')
  .reduce((a, [, v]) => a + v, 0);
const limitLines = srv.log().split('\n').filter((l) => /connections: the limit/.test(l));
// lost: a request that failed or was not answered 200 (a cancel is cancelled by the client itself); with tricklers
// holding slots past a short request_timeout, a 503 with Retry-After is the contract, not a loss
const lostRe = tricklers ? /^error|^(stream|seeded|n2|logprobs|greedy|cancel) (?!200|503)/
  : /^error|^(stream|seeded|n2|logprobs|greedy|cancel) (?!200)/;
const lost = Object.entries(count).filter(([k]) => lostRe.test(k)).reduce((a, [, v]) => a + v, 0);
console.log(JSON.stringify({ seconds: (Date.now() - t0) / 1000, clients, tricklers, flood: floodN ? floodStats : null,
  outcomes: count, resets, lost, greedy_changed: greedyChanged, probes_failed: probesBad,
  trickler_longest_s: lifetimes.length ? Math.max(...lifetimes) : null, limit_log_lines: limitLines.length,
  log_lines: srv.log().split('\n').length, exit: r.code }, null, 1));
for (const l of limitLines.slice(0, 3)) console.log(l);
process.exit(resets === 0 && probesBad === 0 && lost === 0 && greedyChanged === 0 && r.code === 0 ? 0 : 1);
