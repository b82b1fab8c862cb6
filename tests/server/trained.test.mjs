// tests/server/trained.test.mjs — the trained runs end to end: every committed checkpoint of runs/base and runs/aah
// imported by `aah-convert import`, served by a real aahd, gives the float64 PyTorch reference's prompt
// log-probabilities (`tools/aah_train.py score`) on held-out text, in full attention and in every AAH regime of its
// run, and its greedy tokens; the `aah` object says what the run's AAH state implies; tools/heldout_loss.mjs gives
// `aah_train.py eval`'s loss. Run by tests/test_trained.sh (node --test).
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';

import { BUILD, request, startServer } from './lib.mjs';

const run = promisify(execFile);
const PY = process.env.PYTHON || '/usr/bin/python3';
const RUNS = ['base', 'aah'];
const STEPS = [1000, 5000, 10000];
// Windows of held-out text, as [start, end) in its ids (BOS first): a short one at the start of the text (inside the
// smallest AAH window, 32, so both regimes must agree there), one of 100 tokens (past the windows 32 and 64) and one
// of 240 (past 128) from further on; each continued greedily for GREEDY tokens (240 + 16 = the context, 256).
const WINDOWS = [[0, 20], [300, 400], [1000, 1240]];
const GREEDY = 16;
// aahd computes in f32 (f32 weights as trained, f32 activations, f32 KV cache) against the reference's float64: what
// that costs is of the order of 1e-6 per log-probability (seen: a few 1e-6). 1e-4 leaves room for longer sums and
// other CPUs' kernels and is still far below what a wrong convention costs: one window one key short (31 for 32) in
// one KV head of layer 0 moved 173 of 239 log-probabilities of a window by more than 1e-4, the largest by 2.9e-2.
const TOL = 1e-4;
// aahd's greedy tokens must be the reference's, except at a step the reference decided by less than this (top-1 minus
// top-2 log-probability: f32 may swap so close a pair; tests/engine/check_golden.c has the same rule), where the two
// continuations may part: the comparison of that window stops there.
const MARGIN = 1e-3;
// The loss is a mean of such log-probabilities.
const TOL_LOSS = 1e-5;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-trained-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// The held-out text: whole lines from the start of runs/text/test.txt, about 6 kB (some 1700 ids).
function heldoutText() {
  const lines = fs.readFileSync('runs/text/test.txt', 'utf8').split('\n');
  let text = '';
  for (const l of lines) {
    if (Buffer.byteLength(text) >= 6000) break;
    text += `${l}\n`;
  }
  const file = path.join(tmp, 'heldout.txt');
  fs.writeFileSync(file, text);
  return file;
}

describe('trained runs through aah-convert import and aahd', () => {
  let ref;      // "run/step/regime/window" → the reference's JSON object
  let evalRef;  // regime → the reference loss of checkpoint-10000 of runs/aah over the held-out text
  let textFile;
  let worst = 0;   // the largest |aahd − reference| of a log-probability seen
  const greedy = [0, 0];   // greedy steps compared, of all
  const ties = [];         // where a near-tie parted them

  before(async () => {
    textFile = heldoutText();
    // aahd's tokenizer (tests/test_train.sh checks it encodes as the trainer does)
    const ids = execFileSync(`${BUILD}/aah-tokenize`, ['--tokenizer', 'runs/aah', '--add-special', '-'],
      { input: fs.readFileSync(textFile) }).toString().trim().split(',').map(Number);
    assert.ok(ids.length >= WINDOWS.at(-1)[1], `${ids.length} ids in the held-out text`);
    const idsFile = path.join(tmp, 'windows.ids');
    fs.writeFileSync(idsFile, WINDOWS.map(([a, b]) => ids.slice(a, b).join(',')).join('\n') + '\n');
    const ckpts = RUNS.flatMap((r) => STEPS.map((s) => `runs/${r}/checkpoint-${s}.pt`));
    // the float64 references, in two processes beside the imports
    const score = run(PY, ['tools/aah_train.py', 'score', ...ckpts, '--regime', 'all', '--ids-file', idsFile,
      '--max-tokens', String(GREEDY)], { maxBuffer: 1 << 26 });
    const evalRun = run(PY, ['tools/aah_train.py', 'eval', 'runs/aah/checkpoint-10000.pt', '--text', textFile,
      '--chunk', '255'], { maxBuffer: 1 << 26 });
    for (const r of RUNS)
      execFileSync(`${BUILD}/aah-convert`, ['import', '-q', `runs/${r}`, path.join(tmp, r)], { stdio: 'pipe' });
    ref = new Map();
    const lines = (await score).stdout.trim().split('\n').map((l) => JSON.parse(l));
    for (const o of lines) {
      const r = o.checkpoint.split('/')[1];
      const w = WINDOWS.findIndex(([a, b]) => o.tokens.join(',') === ids.slice(a, b).join(','));
      ref.set(`${r}/${o.step}/${o.regime}/${w}`, o);
    }
    assert.equal(lines.length, 3 * (3 + 3 * 2), 'one reference per checkpoint, regime and window');
    evalRef = new Map(JSON.parse((await evalRun).stdout.trim().split('\n').at(-1)).map((o) => [o.regime, o]));
  });

  after(() => {
    console.log(`# largest |aahd - float64 reference| of a log-probability: ${worst.toExponential(2)}`);
    console.log(`# greedy steps equal: ${greedy[0]} of ${greedy[1]}; parted at near-ties: ${ties.join('; ') || 'none'}`);
  });

  test('the import is a run directory per run, aah.json only for the AAH run', () => {
    for (const r of RUNS)
      for (const s of STEPS) {
        const dir = path.join(tmp, r, `checkpoint-${s}`);
        for (const f of ['config.json', 'model.safetensors', 'tokenizer.model', 'tokenizer_config.json'])
          assert.ok(fs.existsSync(path.join(dir, f)), `${dir}/${f}`);
        assert.equal(fs.existsSync(path.join(dir, 'aah.json')), r === 'aah', `${dir}/aah.json`);
        if (r === 'aah') {
          const a = JSON.parse(fs.readFileSync(path.join(dir, 'aah.json'), 'utf8'));
          assert.equal(a.provenance.step, s);
          assert.equal(a.provenance.source, `checkpoint-${s}.pt`);
        }
      }
  });

  for (const r of RUNS)
    for (const step of STEPS)
      test(`${r} checkpoint-${step}: aahd's log-probabilities, greedy tokens and aah object`, async () => {
        // f32 KV: the exact path, held to the float64 reference (the daemon's default f16 KV rounds every key and value)
        const srv = await startServer(['--checkpoint-step', String(step), '--kv-dtype', 'f32'], {}, path.join(tmp, r));
        try {
          const post = (p, body) => request(srv.port, 'POST', p, body);
          const m = await request(srv.port, 'GET', '/v1/models');
          const regimes = m.json.data[0].aah.regimes;
          assert.deepEqual(regimes, r === 'aah' ? ['full_attention', 'shallow_freeze'] : ['full_attention']);
          assert.equal(m.json.data[0].max_model_len, 256);
          const text = new Map();   // id → its text, as aahd's logprobs name tokens
          const idText = async (id) => {
            if (!text.has(id)) text.set(id, (await post('/detokenize', { tokens: [id] })).json.content);
            return text.get(id);
          };
          const served = new Map();   // "regime/window" → aahd's prompt log-probabilities
          for (const regime of regimes)
            for (let w = 0; w < WINDOWS.length; w++) {
              const o = ref.get(`${r}/${step}/${regime}/${w}`);
              assert.ok(o, `a reference for ${r}/${step}/${regime}/${w}`);
              const what = `${r} step ${step} ${regime} window ${w}`;
              // the prompt's log-probabilities
              const p = await post('/v1/completions', { prompt: o.tokens, echo: true, logprobs: 0, max_tokens: 0,
                aah_regime: regime });
              assert.equal(p.status, 200, p.text);
              const lps = p.json.choices[0].logprobs.token_logprobs;
              assert.equal(lps.length, o.tokens.length);
              assert.equal(lps[0], null);
              served.set(`${regime}/${w}`, lps);
              for (let i = 1; i < lps.length; i++) {
                const d = Math.abs(lps[i] - o.token_logprobs[i]);
                worst = Math.max(worst, d);
                assert.ok(d <= TOL, `${what}: token ${i}: aahd ${lps[i]}, reference ${o.token_logprobs[i]}`);
              }
              // what the run's AAH state implies: the regime, ACR (aahd gives four decimals), and the attention
              // work of these windows (each query reads min(p + 1, W) keys of its KV head; max_tokens 0: the prompt)
              const aah = p.json.aah;
              assert.equal(aah.regime, regime);
              assert.equal(aah.acr, Math.round(o.acr * 1e4) / 1e4, `${what}: ACR`);
              const L = o.tokens.length;
              const full = (L * (L + 1)) / 2;
              let work = 1;
              if (o.windows) {
                const perKv = o.windows.flat();
                work = perKv.reduce((s, W) => s + (W >= L ? full : (W * (W + 1)) / 2 + (L - W) * W), 0) /
                  (perKv.length * full);
              }
              assert.ok(Math.abs(aah.attention_work_ratio - work) < 1e-12,
                `${what}: attention work ratio ${aah.attention_work_ratio}, the windows give ${work}`);
              if (regime === 'shallow_freeze' && L > 32) assert.ok(aah.kv_memory_ratio < 1, `${what}: KV ratio`);
              if (regime === 'full_attention') assert.equal(aah.kv_memory_ratio, 1);
              // the greedy continuation (decode steps), step by step while the reference decided it firmly
              const g = await post('/v1/completions', { prompt: o.tokens, max_tokens: GREEDY, temperature: 0,
                logprobs: 0, aah_regime: regime });
              assert.equal(g.status, 200, g.text);
              const gl = g.json.choices[0].logprobs;
              assert.equal(gl.tokens.length, GREEDY);
              let k = 0;
              for (; k < GREEDY; k++) {
                if (gl.tokens[k] !== await idText(o.greedy_tokens[k])) {
                  assert.ok(o.greedy_margins[k] < MARGIN, `${what}: greedy token ${k}: aahd '${gl.tokens[k]}', ` +
                    `reference id ${o.greedy_tokens[k]} (decided by ${o.greedy_margins[k]})`);
                  ties.push(`${what} step ${k} (margin ${o.greedy_margins[k].toExponential(1)})`);
                  break;
                }
                const d = Math.abs(gl.token_logprobs[k] - o.greedy_logprobs[k]);
                worst = Math.max(worst, d);
                assert.ok(d <= TOL, `${what}: greedy ${k}: aahd ${gl.token_logprobs[k]}, ref ${o.greedy_logprobs[k]}`);
              }
              greedy[0] += k;
              greedy[1] += GREEDY;
              if (k === GREEDY) assert.equal(g.json.choices[0].text, o.greedy_text);
            }
          // where every window covers the prompt (20 tokens < 32), the AAH regime is full attention, in the
          // reference and in aahd bit for bit
          if (r === 'aah') {
            const a = ref.get(`aah/${step}/full_attention/0`).token_logprobs;
            const b = ref.get(`aah/${step}/shallow_freeze/0`).token_logprobs;
            assert.deepEqual(a, b);
            assert.deepEqual(served.get('full_attention/0'), served.get('shallow_freeze/0'));
            assert.notDeepEqual(served.get('full_attention/2'), served.get('shallow_freeze/2'));
            assert.notDeepEqual(ref.get(`aah/${step}/full_attention/2`).token_logprobs,
              ref.get(`aah/${step}/shallow_freeze/2`).token_logprobs);
          }
        } finally {
          const x = await srv.stop();
          assert.equal(x.code, 0, srv.log());
        }
      });

  test('tools/heldout_loss.mjs gives aah_train.py eval\'s loss', async () => {
    const srv = await startServer(['--kv-dtype', 'f32'], {}, path.join(tmp, 'aah'));
    try {
      const { stdout } = await run('node', ['tools/heldout_loss.mjs', srv.base, textFile, '--chunk', '255',
        '--parallel', '3']);
      const rows = JSON.parse(stdout.trim().split('\n').at(-1));
      assert.deepEqual(rows.map((x) => x.regime), ['full_attention', 'shallow_freeze']);
      for (const row of rows) {
        const e = evalRef.get(row.regime);
        assert.equal(row.tokens, e.tokens, 'tokens predicted');
        assert.ok(Math.abs(row.loss - e.loss) <= TOL_LOSS, `${row.regime}: served ${row.loss}, reference ${e.loss}`);
        assert.equal(row.acr, e.acr);
        console.log(`# ${row.regime}: served loss ${row.loss.toFixed(6)}, float64 reference ${e.loss.toFixed(6)} ` +
          `(${row.tokens} tokens)`);
      }
      // its errors: a regime the server lacks, bad usage
      await assert.rejects(run('node', ['tools/heldout_loss.mjs', srv.base, textFile, '--regime', 'nope']),
        (e) => e.code === 1 && /offers no regime 'nope'/.test(e.stderr));
      await assert.rejects(run('node', ['tools/heldout_loss.mjs', srv.base]),
        (e) => e.code === 2 && /URL and TEXT/.test(e.stderr));
      await assert.rejects(run('node', ['tools/heldout_loss.mjs', srv.base, textFile, '--chunk', '256']),
        (e) => e.code === 1 && /at most 255/.test(e.stderr));
    } finally {
      await srv.stop();
    }
  });
});
