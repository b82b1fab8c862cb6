// tests/server/soak.mjs — a soak of aahd's connection handling, run by hand (it takes minutes; `make test` runs the
// decisive cases in connections.test.mjs instead). It starts aahd on the test model and runs, for --seconds:
// --clients loops, each request on a new connection (streams, seeded sampling, n=2, echo+logprobs, and streams
// cancelled after their first chunk), a /health probe every 200 ms, and optionally --tricklers connections that send
// a header byte every 2 s and reconnect when cut. It counts every status and every socket error, and exits 1 when a
// client saw a reset or a broken pipe, or a probe failed.
//   node tests/server/soak.mjs --seconds 60 --clients 64 --max-connections 64 [--tricklers 72 --request-timeout 5]
import http from 'node:http';
import net from 'node:net';

import { startServer } from './lib.mjs';

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const seconds = arg('seconds', 60), clients = arg('clients', 64), tricklers = arg('tricklers', 0);
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
  };
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/completions', agent: false,
      headers: { 'Content-Type': 'application/json' } }, (res) => {
      res.on('data', () => {
        if (kind === 'cancel') {
          req.destroy();
          resolve(`${kind} ${res.statusCode} cancelled`);
        }
      });
      res.on('end', () => resolve(`${kind} ${res.statusCode}`));
      res.on('error', () => {});
    });
    req.on('error', (e) => resolve(kind === 'cancel' && req.destroyed ? `${kind} cancelled` : `error ${e.code}`));
    req.end(JSON.stringify(bodies[kind]));
  });
}

async function client(i) {
  const kinds = ['stream', 'seeded', 'n2', 'logprobs', 'cancel'];
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

const t0 = Date.now();
await Promise.all([...Array.from({ length: clients }, (_, i) => client(i)), prober(),
  ...Array.from({ length: tricklers }, trickler)]);
const r = await srv.stop();
const resets = Object.entries(count).filter(([k]) => /error (ECONNRESET|EPIPE)/.test(k)).reduce((a, [, v]) => a + v, 0);
const probesBad = Object.entries(count).filter(([k]) => /^health/.test(k) && k !== 'health 200')
  .reduce((a, [, v]) => a + v, 0);
const limitLines = srv.log().split('\n').filter((l) => /connections: the limit/.test(l));
console.log(JSON.stringify({ seconds: (Date.now() - t0) / 1000, clients, tricklers, outcomes: count, resets,
  probes_failed: probesBad, trickler_longest_s: lifetimes.length ? Math.max(...lifetimes) : null,
  limit_log_lines: limitLines.length, exit: r.code }, null, 1));
for (const l of limitLines.slice(0, 3)) console.log(l);
process.exit(resets === 0 && probesBad === 0 && r.code === 0 ? 0 : 1);
