#!/usr/bin/env node
// tools/heldout_loss.mjs — the held-out loss of a text as a running aahd serves it: the text tokenized by aahd
// (/tokenize, BOS first), cut into chunks of N+1 tokens that overlap by one (every token but the first is predicted
// once, each chunk at positions 0 … N-1, the tail shorter), each chunk's prompt log-probabilities from
// /v1/completions (echo, logprobs 0, max_tokens 0), their negated mean per regime. The chunks are those of
// `tools/aah_train.py eval --chunk N`, the float64 reference, so the two print the same figure up to f32 rounding.
//
//   node tools/heldout_loss.mjs URL TEXT [--regime NAME]... [--chunk N] [--parallel K]
//
// URL e.g. http://127.0.0.1:8080; the regimes default to every one /v1/models offers; N to the context − 1 (a prompt
// holds at most the context, and its first token is not predicted); K requests in flight at once (default 4; the
// server's kernels are batch-invariant, so K does not change a figure). AAHD_API_KEY is sent when set. Prints one
// line per regime, then all of them as one JSON array. Exit status 0, 1 on any error (the server's message), 2 usage.
import fs from 'node:fs';
import { pathToFileURL } from 'node:url';

const USAGE = 'usage: node tools/heldout_loss.mjs URL TEXT [--regime NAME]... [--chunk N] [--parallel K]';

async function call(url, path, body, key) {
  const headers = { 'Content-Type': 'application/json' };
  if (key) headers.Authorization = `Bearer ${key}`;
  const r = await fetch(url + path, body === undefined ? { headers } : { method: 'POST', headers,
    body: JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    /* reported below */
  }
  if (r.status !== 200 || !json)
    throw new Error(`${path}: HTTP ${r.status}: ${json?.error?.message ?? text.slice(0, 200)}`);
  return json;
}

// [start, end) of each chunk of `ids`: N+1 tokens overlapping by one, then the shorter tail (as heldout_loss).
export function chunks(nIds, n) {
  const out = [];
  const full = Math.floor((nIds - 1) / n);
  for (let i = 0; i < full; i++) out.push([i * n, i * n + n + 1]);
  if (nIds - 1 - full * n > 0) out.push([full * n, nIds]);
  return out;
}

// The loss of `ids` (BOS first) in each regime: {regime, chunk, loss, ppl, tokens, acr}; acr is aahd's, per request,
// weighted by the tokens each scored.
export async function heldoutLoss(url, ids, { regimes, chunk, parallel = 4, key } = {}) {
  const out = [];
  for (const regime of regimes) {
    const spans = chunks(ids.length, chunk);
    let total = 0;
    let count = 0;
    let acrSum = 0;
    let next = 0;
    const worker = async () => {
      while (next < spans.length) {
        const [a, b] = spans[next++];
        const r = await call(url, '/v1/completions', { prompt: ids.slice(a, b), echo: true, logprobs: 0,
          max_tokens: 0, aah_regime: regime }, key);
        const lps = r.choices[0].logprobs.token_logprobs;
        if (lps.length !== b - a || lps[0] !== null || lps.slice(1).some((x) => typeof x !== 'number'))
          throw new Error(`chunk [${a}, ${b}): ${lps.length} log-probabilities for ${b - a} tokens`);
        for (let i = 1; i < lps.length; i++) total -= lps[i];
        count += b - a - 1;
        acrSum += r.aah.acr * (b - a - 1);
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, parallel) }, worker));
    const loss = total / count;
    const acr = Math.round((acrSum / count) * 1e4) / 1e4;   // four decimals, as aahd gives it
    out.push({ regime, chunk, loss, ppl: Math.exp(loss), tokens: count, acr });
  }
  return out;
}

async function main(argv) {
  const pos = [];
  const regimes = [];
  let chunk = null;
  let parallel = 4;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--help' || a === '-h') {
      console.log(USAGE);
      return 0;
    }
    if (a === '--regime' || a === '--chunk' || a === '--parallel') {
      const v = argv[++i];
      if (v === undefined) throw new UsageError(`${a} needs a value`);
      if (a === '--regime') regimes.push(v);
      else {
        if (!/^[1-9][0-9]*$/.test(v)) throw new UsageError(`${a} '${v}' is not a positive integer`);
        if (a === '--chunk') chunk = Number(v);
        else parallel = Number(v);
      }
    } else if (a.startsWith('-')) throw new UsageError(`unknown option '${a}'`);
    else pos.push(a);
  }
  if (pos.length !== 2) throw new UsageError('URL and TEXT are needed');
  const [url0, file] = pos;
  const url = url0.replace(/\/+$/, '');
  const key = process.env.AAHD_API_KEY;
  const text = fs.readFileSync(file, 'utf8');
  const models = await call(url, '/v1/models', undefined, key);
  const model = models.data[0];
  const offered = model.aah?.regimes ?? ['full_attention'];
  for (const r of regimes)
    if (!offered.includes(r)) throw new Error(`the server offers no regime '${r}' (it has: ${offered.join(', ')})`);
  const ctx = model.max_model_len;
  if (chunk === null) chunk = ctx - 1;
  if (chunk > ctx - 1) throw new Error(`--chunk ${chunk}: a prompt holds at most ${ctx} tokens, so at most ${ctx - 1}`);
  const { tokens } = await call(url, '/tokenize', { content: text, add_special: true }, key);
  if (tokens.length < 2) throw new Error(`${file}: ${tokens.length} tokens, nothing to predict`);
  const rows = await heldoutLoss(url, tokens, { regimes: regimes.length ? regimes : offered, chunk, parallel, key });
  for (const r of rows)
    console.log(`${model.id}\t${r.regime}\tloss ${r.loss.toFixed(4)}\tppl ${r.ppl.toFixed(2)}\tACR ${r.acr.toFixed(4)}\t` +
      `${r.tokens} tokens\tchunk ${r.chunk}`);
  console.log(JSON.stringify(rows.map((r) => ({ model: model.id, ...r }))));
  return 0;
}

class UsageError extends Error {}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).then((rc) => process.exit(rc), (e) => {
    console.error(`heldout_loss: ${e.message}${e instanceof UsageError ? `\n${USAGE}` : ''}`);
    process.exit(e instanceof UsageError ? 2 : 1);
  });
}
