// tests/server/flood.test.mjs — issue 21's regression tests through real sockets, with the defaults: 2000 TCP
// connections opened within a second that send nothing, held 8 s and closed. While they are held a client that speaks
// is served (/health, and a greedy completion equal to one from before); after, /health answers within 5 s, the same
// completion again, the log has a few dozen lines at most, the process holds as many descriptors as before, and
// SIGTERM exits 0 within shutdown_grace_seconds (+1 s). So it does with SIGTERM sent while the flood is held, and a
// second signal exits at once whatever still runs. Run by tests/test_server.sh beside integration.test.mjs.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { describe, test } from 'node:test';

import { request, sleep, startServer, until } from './lib.mjs';

const FLOOD = 2000;
const HOLD_MS = 8000;

const fds = (pid) => fs.readdirSync(`/proc/${pid}/fd`).length;

// Opens n connections that send nothing; resolves once each is connected or has failed, with the sockets.
async function flood(port, n) {
  const socks = [];
  await Promise.all(Array.from({ length: n }, () => new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    socks.push(s);
    s.on('connect', resolve);
    s.on('error', resolve);   // (a reset counts as gone; the test is about what the server does after)
    s.on('close', resolve);
  })));
  return socks;
}

const greedy = { prompt: 'The flood is over and', max_tokens: 8, temperature: 0 };

describe('a flood of idle connections (issue 21)', () => {
  test('2000 held 8 s and closed: served meanwhile, /health within 5 s after, the same completion, few log lines, descriptors back',
    async () => {
      const grace = 3;
      const srv = await startServer(['--shutdown-grace-seconds', String(grace)]);
      try {
        const before = await request(srv.port, 'POST', '/v1/completions', greedy);
        assert.equal(before.status, 200, before.text);
        await sleep(200);
        const fdBefore = fds(srv.proc.pid);
        const logBefore = srv.log().split('\n').length;
        const socks = await flood(srv.port, FLOOD);
        // while they are held, a client that speaks is served: the silent ones hold no slot
        const t1 = Date.now();
        const during = await request(srv.port, 'GET', '/health');
        assert.equal(during.status, 200, during.text);
        const mid = await request(srv.port, 'POST', '/v1/completions', greedy);
        assert.equal(mid.status, 200, mid.text);
        assert.equal(mid.json.choices[0].text, before.json.choices[0].text);
        await sleep(HOLD_MS - (Date.now() - t1));
        for (const s of socks) s.destroy();
        const t0 = Date.now();
        await until(async () => {
          try {
            return (await request(srv.port, 'GET', '/health')).status === 200;
          } catch {
            return false;
          }
        }, 5000, '/health 200 after the flood');
        assert.ok(Date.now() - t0 <= 5000);
        const after = await request(srv.port, 'POST', '/v1/completions', greedy);
        assert.equal(after.status, 200, after.text);
        assert.equal(after.json.choices[0].text, before.json.choices[0].text);
        // every socket of the flood closed on both sides of the front, within a few seconds
        await until(() => fds(srv.proc.pid) <= fdBefore, 5000, `descriptors back to ${fdBefore} (now ${fds(srv.proc.pid)})`);
        // the burst's own lines, not one per connection
        await sleep(1500);
        const lines = srv.log().split('\n').slice(logBefore - 1).filter((l) => l.trim());
        assert.ok(lines.length <= 30, `${lines.length} log lines during the flood:\n${lines.slice(0, 40).join('\n')}`);
      } finally {
        // and it still stops: exit 0 within the grace (+1 s)
        const t0 = Date.now();
        srv.proc.kill('SIGTERM');
        const r = await Promise.race([srv.exited, sleep((grace + 1) * 1000 + 500).then(() => null)]);
        if (!r) srv.proc.kill('SIGKILL');
        assert.ok(r, `still running ${(Date.now() - t0) / 1000}s after SIGTERM:\n${srv.log().slice(-3000)}`);
        assert.equal(r.code, 0, srv.log().slice(-3000));
      }
    });

  test('SIGTERM while 2000 are held: exit 0 within shutdown_grace_seconds', async () => {
    const grace = 3;
    const srv = await startServer(['--shutdown-grace-seconds', String(grace)]);
    let socks = [];
    try {
      socks = await flood(srv.port, FLOOD);
      await sleep(2000);
      const t0 = Date.now();
      srv.proc.kill('SIGTERM');
      const r = await Promise.race([srv.exited, sleep((grace + 1) * 1000 + 500).then(() => null)]);
      assert.ok(r, `still running ${(Date.now() - t0) / 1000}s after SIGTERM:\n${srv.log().slice(-2000)}`);
      assert.equal(r.code, 0, srv.log().slice(-2000));
      assert.ok(Date.now() - t0 <= (grace + 1) * 1000 + 500);
    } finally {
      for (const s of socks) s.destroy();
      if (srv.proc.exitCode === null && srv.proc.signalCode === null) srv.proc.kill('SIGKILL');
      await srv.exited;
    }
  });

  test('a second signal exits at once, a long stream and the flood still held', async () => {
    const srv = await startServer(['--shutdown-grace-seconds', '60'], { AAHD_TEST_STEP_DELAY_US: '20000' });
    let socks = [];
    try {
      socks = await flood(srv.port, 500);
      // a stream of 400 tokens at 20 ms a step (8 s at least) holds the drain
      const streaming = new Promise((resolve) => {
        const s = net.connect(srv.port, '127.0.0.1');
        const body = JSON.stringify({ prompt: 'a long one', max_tokens: 400, stream: true });
        s.on('data', () => resolve(s));
        s.on('error', () => {});
        s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${body.length}\r\n\r\n${body}`);
      });
      const s = await streaming;
      socks.push(s);
      srv.proc.kill('SIGTERM');
      await until(() => /draining/.test(srv.log()), 5000, 'draining');
      const t0 = Date.now();
      srv.proc.kill('SIGTERM');
      const r = await Promise.race([srv.exited, sleep(2000).then(() => null)]);
      assert.ok(r, `still running ${(Date.now() - t0) / 1000}s after the second signal:\n${srv.log().slice(-2000)}`);
      assert.equal(r.code, 0, srv.log().slice(-2000));
      assert.match(srv.log(), /second signal/);
    } finally {
      for (const s of socks) s.destroy();
      if (srv.proc.exitCode === null && srv.proc.signalCode === null) srv.proc.kill('SIGKILL');
      await srv.exited;
    }
  });
});
