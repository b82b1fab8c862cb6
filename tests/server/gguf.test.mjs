// tests/server/gguf.test.mjs — aahd serving GGUF files through a real socket: the test model quantized by
// `aah-convert quantize`; the bf16 file answers exactly as the safetensors model it came from (text, ids,
// log-probabilities, /tokenize), the q8_0 file serves with its own tokenizer and regimes, and a bad file is refused at
// start with a message naming it. Run by tests/test_gguf.sh (node --test).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BUILD, MODEL, request, startServer } from './lib.mjs';

const post = (srv, p, body) => request(srv.port, 'POST', p, body);
const get = (srv, p) => request(srv.port, 'GET', p);
const BODY = { prompt: 'The quick brown fox jumps over the lazy dog. <|im_start|>user', max_tokens: 12,
  temperature: 0, logprobs: 3, echo: true };

describe('aahd on GGUF', () => {
  let dir, st, bf, q8;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aah-gguf-'));
    for (const t of ['bf16', 'q8_0'])
      execFileSync(`${BUILD}/aah-convert`, ['quantize', '-q', MODEL, path.join(dir, `m-${t}.gguf`), '--type', t]);
    fs.mkdirSync(path.join(dir, 'q8'));
    fs.renameSync(path.join(dir, 'm-q8_0.gguf'), path.join(dir, 'q8', 'model.gguf'));   /* a directory holding one */
    st = await startServer([], {}, MODEL);
    bf = await startServer([], {}, path.join(dir, 'm-bf16.gguf'));
    q8 = await startServer([], {}, path.join(dir, 'q8'));
  });
  after(async () => {
    for (const s of [st, bf, q8]) if (s) assert.equal((await s.stop()).code, 0);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the bf16 GGUF answers as the safetensors model', async () => {
    const a = await post(st, '/v1/completions', BODY), b = await post(bf, '/v1/completions', BODY);
    assert.equal(a.status, 200, a.text);
    assert.equal(b.status, 200, b.text);
    assert.equal(b.json.choices[0].text, a.json.choices[0].text);
    assert.deepEqual(b.json.choices[0].logprobs, a.json.choices[0].logprobs);
    const ta = await post(st, '/tokenize', { prompt: BODY.prompt }), tb = await post(bf, '/tokenize', { prompt: BODY.prompt });
    assert.equal(tb.status, 200, tb.text);
    assert.deepEqual(tb.json, ta.json);
  });

  test('the q8_0 GGUF in a directory serves', async () => {
    const m = await get(q8, '/v1/models');
    assert.equal(m.status, 200);
    assert.ok(m.json.data[0].aah.regimes.includes('full_attention'));
    const r = await post(q8, '/v1/completions', { ...BODY, echo: false, logprobs: undefined });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.usage.completion_tokens, 12);
    const t = await post(q8, '/tokenize', { prompt: BODY.prompt }), ta = await post(st, '/tokenize', { prompt: BODY.prompt });
    assert.deepEqual(t.json, ta.json);
  });

  test('a truncated GGUF is refused at start, naming the file', async () => {
    const bad = path.join(dir, 'bad.gguf');
    const whole = fs.readFileSync(path.join(dir, 'm-bf16.gguf'));
    fs.writeFileSync(bad, whole.subarray(0, whole.length - 1000));
    await assert.rejects(startServer([], {}, bad), (e) => /bad\.gguf/.test(e.message) && /past the end/.test(e.message));
  });
});
