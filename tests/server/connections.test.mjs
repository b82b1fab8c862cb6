// tests/server/connections.test.mjs — the front of aahd's HTTP server through real sockets, with small limits so that
// every case decides quickly: over max_connections a connection waits for a slot (answered when one frees, 503 with
// Retry-After past request_timeout, never a reset) and clients that reconnect at the limit are all served; probes
// (/health, /metrics) have slots of their own; one log line per burst; a request's head and body have a deadline
// (tricklers cut with 408); framing refusals (two Content-Lengths, 2^64, a sign, a huge chunk size, Transfer-Encoding
// beside a length) answered with the error object; a body over max_body_bytes sent in one go reads its 413 (a
// lingering close); a client that half-closes after its request gets exactly its one response. Run by tests/test_connections.sh.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { metrics, request, sleep, startServer, until } from './lib.mjs';

// A raw connection: what the server sent, whether it closed, and how (an error code such as ECONNRESET, or null).
function raw(port) {
  const s = net.connect(port, '127.0.0.1');
  const st = { s, chunks: [], error: null, closed: false };
  st.connected = new Promise((resolve) => s.on('connect', resolve));
  st.done = new Promise((resolve) => {
    s.on('error', (e) => { st.error = e.code; });
    s.on('close', () => { st.closed = true; resolve(); });
  });
  s.on('data', (d) => st.chunks.push(d));
  st.text = () => Buffer.concat(st.chunks).toString('latin1');
  return st;
}

// The responses in a raw byte stream: [{ status, headers, body }] (bodies framed by Content-Length; 1xx have none).
function responses(text) {
  const out = [];
  let rest = text;
  while (rest.length) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) break;
    const lines = rest.slice(0, end).split('\r\n');
    const m = /^HTTP\/1\.1 (\d{3}) /.exec(lines[0]);
    assert.ok(m, `not a status line: ${JSON.stringify(lines[0])} in ${JSON.stringify(text.slice(0, 300))}`);
    const headers = {};
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
    }
    const n = Number(headers['content-length'] || 0);
    const body = rest.slice(end + 4, end + 4 + n);
    out.push({ status: Number(m[1]), headers, body, json: body.startsWith('{') ? JSON.parse(body) : null });
    rest = rest.slice(end + 4 + n);
  }
  return out;
}

function assertErrorObject(r, status, code) {
  assert.equal(r.status, status, JSON.stringify(r));
  assert.ok(r.json && r.json.error, `no error object: ${r.body}`);
  assert.equal(typeof r.json.error.message, 'string');
  assert.ok('param' in r.json.error && 'code' in r.json.error);
  if (code) assert.equal(r.json.error.code, code, r.body);
}

const get = (path) => `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`;
const post = (body, extra = '') =>
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}Content-Length: ${body.length}\r\n\r\n${body}`;

describe('connections over the limit', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--max-connections', '2', '--probe-connections', '1', '--connection-timeout', '60',
      '--request-timeout', '60']);
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test('a connection over max_connections waits for a slot, probes have their own, one log line for the burst',
    async () => {
      // two connections in the middle of a request's head take both slots (an idle one would give its slot up)
      const a = raw(srv.port);
      const b = raw(srv.port);
      await Promise.all([a.connected, b.connected]);
      a.s.write('GET /v1/mod');
      b.s.write('GET /v1/mod');
      await until(async () => (await request(srv.port, 'GET', '/health')).status === 200, 5000, 'a probe slot');
      // a third sends its request: it waits (no answer, no reset) …
      const c = raw(srv.port);
      await c.connected;
      c.s.write(get('/v1/models'));
      // … while probes are answered from their own slot, one after the other
      for (const path of ['/health', '/metrics', '/health']) {
        const r = await request(srv.port, 'GET', path);
        assert.equal(r.status, 200, `${path} while every slot is held`);
        assert.equal(r.headers.connection, 'close');
      }
      assert.equal(c.text(), '', 'the waiting connection has no answer yet');
      assert.equal(c.closed, false);
      // a slot frees: the waiting one is served
      a.s.destroy();
      await until(() => responses(c.text()).length === 1, 10000, 'the waiting request answered');
      const r = responses(c.text())[0];
      assert.equal(r.status, 200);
      assert.equal(r.json.object, 'list');
      assert.equal(c.error, null);
      b.s.destroy();
      c.s.destroy();
      // the burst ends (no connection waits for a second): one line says what happened
      await until(() => /connections: the limit of 2 was reached/.test(srv.log()), 10000, 'the burst\'s log line');
      const lines = srv.log().split('\n').filter((l) => /connections: the limit of 2/.test(l));
      assert.equal(lines.length, 1, lines.join('\n'));
      assert.match(lines[0], /1 waited for a slot and got it/);
      assert.match(lines[0], /4 probes served beyond it/);   // the first /health above, and three
      assert.doesNotMatch(srv.log(), /reached connection limit/i);
    });

  test('a connection idle between requests gives its slot to one that waits, with a plain close', async () => {
    const keep = [raw(srv.port), raw(srv.port)];
    for (const k of keep) {
      await k.connected;
      k.s.write(get('/v1/models'));
      await until(() => responses(k.text()).length === 1, 10000, 'the first answer');
    }
    // both slots are held by connections idle between requests: a newcomer is served at once, the oldest idle closed
    const r = await request(srv.port, 'GET', '/v1/models');
    assert.equal(r.status, 200);
    await keep[0].done;
    assert.equal(keep[0].error, null, 'closed, not reset');
    assert.equal(responses(keep[0].text()).length, 1, 'nothing more was sent to it');
    assert.equal(keep[1].closed, false, 'the younger idle one stays');
    keep[1].s.destroy();
  });

  test('clients that reconnect for every request at the limit are all served, none reset', async () => {
    // 6 clients, 2 slots, 8 requests each on a new connection: a finished connection's slot passes to the next
    const client = async (k) => {
      const statuses = [];
      for (let i = 0; i < 8; i++) {
        const r = await request(srv.port, 'POST', '/v1/completions', { prompt: `client ${k} request ${i}`, max_tokens: 2 });
        statuses.push(r.status);
      }
      return statuses;
    };
    const all = await Promise.all([0, 1, 2, 3, 4, 5].map(client));
    assert.deepEqual(all.flat(), Array(48).fill(200));
    const m = await metrics(srv.port);
    assert.equal(m.get('aahd_requests_total{status="200"}') >= 48, true);
  });
});

describe('waiting and trickling clients have deadlines', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--max-connections', '2', '--probe-connections', '1', '--connection-timeout', '60',
      '--request-timeout', '1'], { AAHD_TEST_STEP_DELAY_US: '5000' });
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test('a connection that waits past request_timeout gets 503 with Retry-After and the error object', async () => {
    // a and b hold both slots with requests of 500 tokens (2.5 s at least at 5 ms a step); four more come after
    const a = raw(srv.port);
    const b = raw(srv.port);
    await Promise.all([a.connected, b.connected]);
    for (const c of [a, b]) c.s.write(post('{"prompt": "busy", "max_tokens": 500}'));
    await until(async () => (await metrics(srv.port)).get('aahd_requests_running') === 2, 10000, 'both running');
    const waiting = [0, 1, 2, 3].map(() => raw(srv.port));
    for (const w of waiting) {
      await w.connected;
      w.s.write(post('{"prompt": "x", "max_tokens": 1}'));
    }
    await Promise.all(waiting.map((w) => w.done));
    for (const w of waiting) {
      const rs = responses(w.text());
      assert.equal(rs.length, 1, w.text());
      assertErrorObject(rs[0], 503, 'server_busy');
      assert.equal(rs[0].headers['retry-after'], '1');
      assert.equal(w.error, null, 'answered and closed, not reset');
    }
    a.s.destroy();
    b.s.destroy();
    await until(() => /connections: the limit of 2 was reached/.test(srv.log()), 10000, 'the burst\'s log line');
    const lines = srv.log().split('\n').filter((l) => /connections: the limit of 2/.test(l));
    assert.equal(lines.length, 1, lines.join('\n'));
    assert.match(lines[0], /4 answered 503/);
  });

  test('a client that trickles its head or its body is cut at request_timeout with 408; probes pass meanwhile',
    async () => {
      const head = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60\r\n' +
        'X-Padding: ' + 'p'.repeat(200) + '\r\n\r\n';
      const trickle = async (c, bytes) => {
        // a byte every 50 ms: 200 bytes would take 10 s, far past the 1 s deadline
        for (let i = 0; i < bytes.length && !c.closed; i++) {
          c.s.write(bytes[i]);
          await sleep(50);
        }
      };
      const inHead = raw(srv.port);
      const inBody = raw(srv.port);
      await Promise.all([inHead.connected, inBody.connected]);
      inBody.s.write(head);
      const t1 = trickle(inHead, head);
      const t2 = trickle(inBody, '{"prompt": "' + 'y'.repeat(200));
      // both slots are held by tricklers: /health still answers
      assert.equal((await request(srv.port, 'GET', '/health')).status, 200);
      await Promise.all([inHead.done, inBody.done]);
      await Promise.all([t1, t2]);
      for (const c of [inHead, inBody]) {
        const rs = responses(c.text());
        assert.equal(rs.length, 1, c.text());
        assertErrorObject(rs[0], 408, 'request_timeout');
      }
      // the slots are free again
      assert.equal((await request(srv.port, 'GET', '/v1/models')).status, 200);
      // counted when libmicrohttpd reports the request completed, which may come after the client has read it
      let n408;
      await until(async () => (n408 = (await metrics(srv.port)).get('aahd_requests_total{status="408"}')) >= 2, 10000,
        'the two 408s counted');
      assert.equal(n408, 2);
    });
});

describe('idle connections', () => {
  test('are closed after connection_timeout, before and after a request, without a reset', async () => {
    const srv = await startServer(['--connection-timeout', '1']);
    try {
      const fresh = raw(srv.port);
      const used = raw(srv.port);
      await Promise.all([fresh.connected, used.connected]);
      used.s.write(get('/v1/models'));
      await Promise.all([fresh.done, used.done]);
      assert.equal(fresh.text(), '');
      assert.equal(responses(used.text())[0].status, 200);
      for (const c of [fresh, used]) assert.equal(c.error, null);
    } finally {
      await srv.stop();
    }
  });
});

describe('per_ip_connections', () => {
  test('a client address over it is answered 429 with Retry-After and the error object', async () => {
    const srv = await startServer(['--per-ip-connections', '1']);
    try {
      const a = raw(srv.port);
      await a.connected;
      a.s.write('GET /v1/mod');   // holds one connection, mid-request
      await until(async () => {
        const b = raw(srv.port);
        await b.connected;
        b.s.write(get('/v1/models'));
        await b.done;
        const rs = responses(b.text());
        if (!rs.length || rs[0].status !== 429) return false;   // (until a is counted)
        assertErrorObject(rs[0], 429, 'too_many_connections');
        assert.equal(rs[0].headers['retry-after'], '1');
        assert.equal(b.error, null);
        return true;
      }, 10000, 'a 429 for the second connection');
      a.s.destroy();
      await until(async () => (await request(srv.port, 'GET', '/v1/models')).status === 200, 10000, 'served again');
    } finally {
      await srv.stop();
    }
  });
});

describe('framing', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', '512', '--max-body-bytes', '65536', '--api-key', 'k3y']);
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });
  const auth = 'Authorization: Bearer k3y\r\n';
  const exchange = async (bytes, { half = false } = {}) => {
    const c = raw(srv.port);
    await c.connected;
    if (half) c.s.end(bytes);
    else c.s.write(bytes);
    const timer = setTimeout(() => c.s.destroy(), 20000);
    await c.done;
    clearTimeout(timer);
    return c;
  };

  test('Content-Length: two different ones, 2^64 and beyond, a sign: 400 with the error object, one status line',
    async () => {
      const body = '{"prompt": "hi", "max_tokens": 1}';
      for (const lengths of [[body.length, body.length + 1], ['18446744073709551616'], ['99999999999999999999999'],
        ['-1'], ['+33'], [`${body.length}, ${body.length}`]]) {
        const h = lengths.map((l) => `Content-Length: ${l}\r\n`).join('');
        const c = await exchange(`POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}${h}\r\n${body}`);
        const rs = responses(c.text());
        assert.equal(rs.length, 1, `one answer for ${lengths}: ${c.text()}`);
        assertErrorObject(rs[0], 400, 'bad_request');
        assert.equal((c.text().match(/HTTP\/1\.1 /g) || []).length, 1);
      }
      // the same length twice is one length
      const ok = await exchange(`POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n` +
        `Content-Length: ${body.length}\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      assert.equal(responses(ok.text())[0].status, 200, ok.text());
      // Transfer-Encoding beside a length, or not chunked
      const both = await exchange(`POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\n` +
        `Content-Length: 5\r\n\r\n0\r\n\r\n`);
      assertErrorObject(responses(both.text())[0], 400, 'bad_request');
      const gz = await exchange(`POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: gzip\r\n\r\n`);
      assertErrorObject(responses(gz.text())[0], 501, 'not_implemented');
    });

  test('a chunk size past max_body_bytes is refused at once with 413, before any of its data', async () => {
    // the size line alone, not even its line end: the answer must not wait for data that never comes
    const c = await exchange(`POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\n\r\n` +
      '7fffffffffffffff');
    const rs = responses(c.text());
    assert.equal(rs.length, 1, c.text());
    assertErrorObject(rs[0], 413, 'request_too_large');
    // and a chunked body within the limit is served
    const body = '{"prompt": "chunked", "max_tokens": 1}';
    const ok = await exchange(`POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n` +
      `Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\n${body.slice(0, 5)}\r\n${(body.length - 5).toString(16)}\r\n` +
      `${body.slice(5)}\r\n0\r\nX-Trailer: t\r\n\r\n`);
    assert.equal(responses(ok.text())[0].status, 200, ok.text());
  });

  test('a body over max_body_bytes sent in one go reads its 413, not a reset or a broken pipe', async () => {
    const big = Buffer.alloc(10 << 20, 0x61);
    for (const headers of [{ Authorization: 'Bearer k3y' }, {}]) {
      const r = await new Promise((resolve, reject) => {
        const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/completions',
          agent: false, headers: { ...headers, 'Content-Type': 'application/json', 'Content-Length': big.length } },
        (res) => {
          let text = '';
          res.on('data', (d) => { text += d; });
          res.on('end', () => resolve({ status: res.statusCode, text }));
        });
        req.on('error', reject);   // EPIPE or ECONNRESET fail the test
        req.end(big);
      });
      assert.equal(r.status, 413, r.text);
      assert.equal(JSON.parse(r.text).error.code, 'request_too_large');
    }
    // the same through a raw socket: headers and the whole body in one write
    const c = await exchange(Buffer.concat([Buffer.from(`POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}` +
      `Content-Length: ${big.length}\r\n\r\n`), big]));
    assert.equal(c.error, null, 'closed without a reset');
    assertErrorObject(responses(c.text())[0], 413, 'request_too_large');
  });

  test('pipelined requests, Expect: 100-continue, a blank line between requests', async () => {
    const body = '{"prompt": "a", "max_tokens": 1}';
    const c = await exchange(`GET /v1/models HTTP/1.1\r\nHost: x\r\n${auth}\r\n` +
      `POST /tokenize HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 17\r\n\r\n{"content": "hi"}\r\n` +
      `GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    assert.deepEqual(responses(c.text()).map((r) => r.status), [200, 200, 200], c.text());
    const e = raw(srv.port);
    await e.connected;
    e.s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Expect: 100-continue\r\nConnection: close\r\n` +
      `Content-Length: ${body.length}\r\n\r\n`);
    await until(() => /^HTTP\/1\.1 100 Continue\r\n\r\n/.test(e.text()), 10000, '100 Continue');
    e.s.write(body);
    await e.done;
    const rs = responses(e.text());
    assert.deepEqual(rs.map((r) => r.status), [100, 200], e.text());
  });
});

describe('a client that half-closes after its request (a slow engine: every step sleeps 5 ms)', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', '512'], { AAHD_TEST_STEP_DELAY_US: '5000' });
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test('gets exactly its one response, streamed or not: no 1xx it did not ask for', async () => {
    for (const stream of [false, true]) {
      const body = JSON.stringify({ prompt: 'half closed', max_tokens: 40, temperature: 0, stream });
      const c = raw(srv.port);
      await c.connected;
      c.s.end(post(body));   // the whole request, then FIN: the write side is closed
      await c.done;
      assert.equal(c.error, null);
      const text = c.text();
      assert.match(text, /^HTTP\/1\.1 200 /, text.slice(0, 200));
      assert.equal((text.match(/HTTP\/1\.1 /g) || []).length, 1, text.slice(0, 400));
      if (stream) {
        assert.match(text, /data: \[DONE\]/);
      } else {
        const rs = responses(text);
        assert.equal(rs.length, 1, text);
        assert.equal(rs[0].json.usage.completion_tokens, 40);
      }
    }
    // a GET that half-closes (what curl-like tools and proxies do): one 200, every time
    for (let i = 0; i < 10; i++) {
      const c = raw(srv.port);
      await c.connected;
      c.s.end(get('/health'));
      await c.done;
      const rs = responses(c.text());
      assert.deepEqual(rs.map((r) => r.status), [200], c.text());
    }
  });
});
