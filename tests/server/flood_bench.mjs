// tests/server/flood_bench.mjs — issue 21's flood measured on one or more builds side by side, in one run, by hand
// (not in make test): for each build, a fresh aahd with the defaults gets N connections that send nothing, held
// --hold seconds and closed. It reports how /health fared while they were held, how long /health took to answer
// 200 after they closed, the log lines written from the flood's start until a second after that, the descriptors
// the process held before, during and after, and how long SIGTERM took to end it (killed past --stop-limit s); then,
// on a second fresh aahd, the memory a keep-alive connection costs: the RSS before and after --keepalive connections
// that each had one completion and stay open.
//   node tests/server/flood_bench.mjs --builds /tmp/old/build,build [--flood 2000 --hold 8 --keepalive 256]
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';

import { request, sleep } from './lib.mjs';

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const builds = String(arg('builds', 'build')).split(',');
const N = Number(arg('flood', 2000)), HOLD = Number(arg('hold', 8)), KEEP = Number(arg('keepalive', 256));
const STOP_LIMIT = Number(arg('stop-limit', 40));

const fds = (pid) => { try { return fs.readdirSync(`/proc/${pid}/fd`).length; } catch { return null; } };
const rssKiB = (pid) => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);

async function timed(fn, ms) {
  const t0 = Date.now();
  const r = await Promise.race([fn().catch((e) => ({ status: `error ${e.code || e.message}` })),
    sleep(ms).then(() => ({ status: 'timeout' }))]);
  return { status: r.status, s: (Date.now() - t0) / 1000 };
}

async function startWith(build, args = []) {
  process.env.AAH_BUILD = build;
  const { startServer: start } = await import(`./lib.mjs?build=${encodeURIComponent(build)}`);
  return start(args);
}

async function flood(build) {
  const srv = await startWith(build, ['--shutdown-grace-seconds', '3']);
  const pid = srv.proc.pid;
  await request(srv.port, 'GET', '/health');
  const fdBefore = fds(pid);
  const logBefore = srv.log().split('\n').length;
  const socks = [];
  await Promise.all(Array.from({ length: N }, () => new Promise((resolve) => {
    const s = net.connect(srv.port, '127.0.0.1');
    socks.push(s);
    s.on('connect', resolve);
    s.on('error', resolve);
  })));
  await sleep(1000);
  const during = await timed(() => request(srv.port, 'GET', '/health'), (HOLD - 2) * 1000);
  const fdDuring = fds(pid);
  await sleep(Math.max(0, HOLD * 1000 - 1000 - during.s * 1000));
  for (const s of socks) s.destroy();
  const t0 = Date.now();
  let after = null;
  while (Date.now() - t0 < 30000) {
    const r = await timed(() => request(srv.port, 'GET', '/health'), 2000);
    if (r.status === 200) {
      after = (Date.now() - t0) / 1000;
      break;
    }
    await sleep(100);
  }
  await sleep(1000);
  const logLines = srv.log().split('\n').length - logBefore;
  const fdAfter = fds(pid);
  const t1 = Date.now();
  srv.proc.kill('SIGTERM');
  const exited = await Promise.race([srv.exited, sleep(STOP_LIMIT * 1000).then(() => null)]);
  if (!exited) {
    srv.proc.kill('SIGKILL');
    await srv.exited;
  }
  return { health_while_held: during, health_200_after_close_s: after, log_lines: logLines,
    fds: { before: fdBefore, held: fdDuring, after_close: fdAfter },
    sigterm_exit_s: exited ? (Date.now() - t1) / 1000 : `none within ${STOP_LIMIT}s (SIGKILL)`,
    exit: exited ? exited.code : null };
}

async function keepalive(build) {
  const srv = await startWith(build, ['--queue-length', String(2 * KEEP)]);   // every one of them admitted
  const pid = srv.proc.pid;
  const agent = new http.Agent({ keepAlive: true, maxSockets: KEEP });
  const one = () => new Promise((resolve, reject) => {
    const body = JSON.stringify({ prompt: 'cost', max_tokens: 2 });
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/completions', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': body.length } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject);
    req.end(body);
  });
  await one();
  await sleep(500);
  const before = rssKiB(pid);
  const statuses = await Promise.all(Array.from({ length: KEEP }, one));
  await sleep(1000);
  const after = rssKiB(pid);
  const open = fds(pid);
  agent.destroy();
  await srv.stop();
  return { connections: KEEP, ok: statuses.filter((s) => s === 200).length, rss_kib_before: before,
    rss_kib_after: after, kib_per_connection: Math.round((after - before) / KEEP), fds_open: open };
}

const out = {};
for (const b of builds) out[b] = { flood: await flood(b), keepalive: await keepalive(b) };
console.log(JSON.stringify({ flood: N, hold_s: HOLD, results: out }, null, 1));
