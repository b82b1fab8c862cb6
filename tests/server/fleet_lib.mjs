// tests/server/fleet_lib.mjs — the fleet tests' helpers: Debian's nginx run as the test's own process (a temporary
// prefix, -p/-c/-e, the error log in a file) with the shipped deploy/nginx/aahd.conf, its ports templated; a free
// port; requests with a client-chosen X-Request-Id; the nginx access log parsed.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const NGINX = process.env.AAH_NGINX || '/usr/sbin/nginx';

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function connects(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.on('connect', () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

// deploy/nginx/aahd.conf with the replicas' ports and the listening port written in; every substitution must hit
// (a shipped file of another shape fails here, not silently later).
export function templateConfig(text, upstreamPorts, listenPort, accessLog) {
  const re = /^(\s*)server 127\.0\.0\.1:\d+( .*;)$/gm;
  const servers = [...text.matchAll(re)];
  if (servers.length === 0) throw new Error('deploy/nginx/aahd.conf: no "server 127.0.0.1:PORT …;" line in the upstream');
  // in each upstream block, the first server line becomes one per replica, with the shipped parameters; the others go
  let out = text.replace(/^upstream [a-z_]+ \{\n[^}]*\}$/gm, (block) => {
    let i = 0;
    return block.replace(re, (line, indent, params) => (i++ === 0
      ? upstreamPorts.map((p) => `${indent}server 127.0.0.1:${p}${params}`).join('\n') : '\u0000'));
  });
  out = out.split('\n').filter((l) => l !== '\u0000').join('\n');
  if (!/^\s*listen 8080;$/m.test(out)) throw new Error('deploy/nginx/aahd.conf: no "listen 8080;"');
  out = out.replace(/^(\s*)listen 8080;$/m, `$1listen 127.0.0.1:${listenPort};`);
  if (!/access_log \S+ aahd;/.test(out)) throw new Error('deploy/nginx/aahd.conf: no "access_log FILE aahd;"');
  out = out.replace(/access_log \S+ aahd;/, `access_log ${accessLog} aahd;`);
  return out;
}

// Starts nginx in front of the given replica ports. stop() ends it (SIGQUIT: graceful) and removes the prefix.
export async function startNginx(upstreamPorts) {
  const prefix = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-nginx-'));
  const port = await freePort();
  const shipped = fs.readFileSync('deploy/nginx/aahd.conf', 'utf8');
  const accessLog = path.join(prefix, 'access.log');
  fs.writeFileSync(path.join(prefix, 'aahd.conf'), templateConfig(shipped, upstreamPorts, port, accessLog));
  const root = process.getuid && process.getuid() === 0;
  const tmp = (n) => `${n}_temp_path ${path.join(prefix, n)};`;
  fs.writeFileSync(path.join(prefix, 'nginx.conf'), [
    // as root, nginx would switch its workers to nobody, who cannot write this prefix: keep them ours
    root ? 'user root root;' : '',
    'daemon off;', 'worker_processes 1;', 'worker_rlimit_nofile 4096;',
    `pid ${path.join(prefix, 'nginx.pid')};`, `error_log ${path.join(prefix, 'error.log')} info;`,
    'events { worker_connections 2048; }',
    'http {', tmp('client_body'), tmp('proxy'), tmp('fastcgi'), tmp('uwsgi'), tmp('scgi'),
    `  include ${path.join(prefix, 'aahd.conf')};`, '}', ''].join('\n'));
  const args = ['-p', prefix, '-c', path.join(prefix, 'nginx.conf'), '-e', path.join(prefix, 'error.log')];
  try {
    execFileSync(NGINX, ['-t', ...args], { stdio: 'pipe' });
  } catch (e) {
    throw new Error(`nginx -t refused the shipped configuration:\n${e.stderr}`);
  }
  const proc = spawn(NGINX, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  process.on('exit', () => { if (proc.exitCode === null) proc.kill('SIGKILL'); });
  const t0 = Date.now();
  while (!(await connects(port))) {
    if (proc.exitCode !== null) throw new Error(`nginx exited: ${stderr}${fs.readFileSync(path.join(prefix, 'error.log'), 'utf8')}`);
    if (Date.now() - t0 > 20000) throw new Error('nginx did not listen within 20 s');
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    port,
    prefix,
    errorLog: () => fs.readFileSync(path.join(prefix, 'error.log'), 'utf8'),
    // access log lines: {status, upstreams: ['127.0.0.1:PORT', …], upstreamStatus: ['503', '200'], rid}
    accessLog() {
      const text = fs.existsSync(accessLog) ? fs.readFileSync(accessLog, 'utf8') : '';
      return text.split('\n').filter(Boolean).map((l) => {
        const m = /" (\d{3}) \d+ \S+ upstream=(.*) upstream_status=(.*) rid=(\S*)$/.exec(l);
        if (!m) return { line: l };
        return { status: Number(m[1]), upstreams: m[2].split(/, | : /), upstreamStatus: m[3].split(/, | : /), rid: m[4], line: l };
      });
    },
    async stop() {
      if (proc.exitCode === null) proc.kill('SIGQUIT');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 10000);
      await exited;
      clearTimeout(timer);
      fs.rmSync(prefix, { recursive: true, force: true });
    },
  };
}
