// tests/server/sampling.test.mjs — the sampling fields through a real socket with the test model (qwen3-small-a: 2051
// tokens, 2056 rows, EOS 2048): logit_bias forcing and removing greedy tokens, its refusals; ignore_eos, min_tokens
// (stop ids and stop strings held back, as vLLM), stop_token_ids; repetition_penalty changing the text, 1 the same as
// absent; the chat endpoint; and every answer the same from a daemon that draws from each row's candidates
// (AAH_DEVICE_SAMPLING=1). Run by tests/test_sampling.sh (node --test).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { joinStream, metrics, request, sseEvents, startServer } from './lib.mjs';

const CTX = 512;
const EOS = 2048;
const VOCAB = 2051;   // the tokenizer's; the model has 2056 rows (padding)
const PROMPT = 'The weather today';

const complete = (srv, body) => request(srv.port, 'POST', '/v1/completions', body);
const chat = (srv, body) => request(srv.port, 'POST', '/v1/chat/completions', body);
const tokenize = async (srv, content) => (await request(srv.port, 'POST', '/tokenize', { content })).json.tokens;
const detokenize = async (srv, tokens) => (await request(srv.port, 'POST', '/detokenize', { tokens })).json.content;

function ok(r) {
  assert.equal(r.status, 200, r.text);
  return r.json.choices[0];
}

function refused(r, param) {
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.error.param, param, r.text);
  assert.equal(r.json.error.type, 'invalid_request_error');
}

// The requests whose answers must not depend on how a token is drawn (host path, or candidates on the "device").
const SAME_ANYWHERE = [
  { prompt: PROMPT, max_tokens: 12, temperature: 0, logit_bias: { 300: 100 } },
  { prompt: PROMPT, max_tokens: 12, temperature: 0, logit_bias: { 7: 8.5, 300: -3 }, logprobs: 2 },
  { prompt: PROMPT, max_tokens: 24, temperature: 0, repetition_penalty: 1.5 },
  { prompt: PROMPT, max_tokens: 24, temperature: 0.8, top_k: 40, seed: 3, repetition_penalty: 1.3, logprobs: 1 },
  { prompt: PROMPT, max_tokens: 10, temperature: 0, logit_bias: { [EOS]: 100 }, min_tokens: 4 },
  { prompt: PROMPT, max_tokens: 10, temperature: 0.7, top_k: 20, seed: 9, logit_bias: { [EOS]: 6 }, min_tokens: 3,
    stop_token_ids: [300] },
  { prompt: PROMPT, max_tokens: 8, temperature: 0, logit_bias: { [EOS]: 100 }, ignore_eos: true, min_tokens: 2 },
  { prompt: PROMPT, max_tokens: 16, temperature: 1.0, seed: 4, n: 2, logit_bias: { 12: 5 }, stream: true },
  { prompt: PROMPT, max_tokens: 12, temperature: 0, min_tokens: 6, stop_token_ids: [300, 7], logprobs: 1 },
];

describe('sampling fields (host path)', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', String(CTX), '--max-batch', '4', '--max-tokens', '256',
      '--chat-template', 'conf/chat-template.jinja'], { AAH_DEVICE_SAMPLING: '0' });
  });
  after(async () => {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  });

  test('logit_bias: +100 makes greedy output that token; -100 on the greedy token changes it; streamed the same',
    async () => {
      const forced = ok(await complete(srv, { prompt: PROMPT, max_tokens: 4, temperature: 0, logit_bias: { 300: 100 } }));
      assert.equal(forced.text, await detokenize(srv, [300, 300, 300, 300]));
      assert.equal(forced.finish_reason, 'length');
      // a real number, as JavaScript sends 100.0, and a bias sampled from: the forced token at any temperature
      const hot = ok(await complete(srv, { prompt: PROMPT, max_tokens: 4, temperature: 1.5, seed: 1,
        logit_bias: { 300: 100.0 } }));
      assert.equal(hot.text, forced.text);
      // log-probabilities are the raw logits': the forced token is not the model's favourite
      const lp = ok(await complete(srv, { prompt: PROMPT, max_tokens: 1, temperature: 0, logit_bias: { 300: 100 },
        logprobs: 1 })).logprobs;
      const plainTop = ok(await complete(srv, { prompt: PROMPT, max_tokens: 1, temperature: 0, logprobs: 1 })).logprobs;
      const [best, bestLp] = Object.entries(plainTop.top_logprobs[0])[0];
      assert.equal(lp.top_logprobs[0][best], bestLp);   // the model's favourite, as without the bias
      assert.equal(lp.tokens[0], await detokenize(srv, [300]));
      assert.ok(lp.token_logprobs[0] < bestLp, JSON.stringify([lp, plainTop]));

      // the greedy first token, by id (a prompt whose first token's text tokenizes back to one id)
      let found = false;
      for (const prompt of [PROMPT, 'Hello world', 'Once upon a time', 'The robot']) {
        const first = ok(await complete(srv, { prompt, max_tokens: 1, temperature: 0 })).text;
        const ids = await tokenize(srv, first);
        if (ids.length !== 1) continue;
        found = true;
        const other = ok(await complete(srv, { prompt, max_tokens: 1, temperature: 0, logit_bias: { [ids[0]]: -100 } }));
        assert.notEqual(other.text, first, `${prompt}: -100 on ${ids[0]} (${JSON.stringify(first)})`);
        // -100 on a token the model does not pick changes nothing
        const same = ok(await complete(srv, { prompt, max_tokens: 6, temperature: 0 })).text;
        assert.equal(ok(await complete(srv, { prompt, max_tokens: 6, temperature: 0, logit_bias: { 301: -100 } })).text,
          same);
        break;
      }
      assert.ok(found, 'no prompt whose greedy first token round-trips');

      const s = await complete(srv, { prompt: PROMPT, max_tokens: 4, temperature: 0, logit_bias: { 300: 100 }, stream: true });
      assert.equal(joinStream(sseEvents(s.text))[0].text, forced.text);
    });

  test('logit_bias: keys that are not token ids of the vocabulary, values out of range, too many: 400 logit_bias',
    async () => {
      const bad = [{ abc: 1 }, { '-1': 1 }, { '+5': 1 }, { '05': 1 }, { '1.0': 1 }, { '': 1 }, { [VOCAB]: 1 },
        { 2055: 1 }, { 99999999999: 1 }, { 5: 101 }, { 5: -100.01 }, { 5: '1' }, { 5: null }, { 5: [1] }, [1, 2], 'x', 3];
      for (const logit_bias of bad)
        refused(await complete(srv, { prompt: PROMPT, max_tokens: 1, logit_bias }), 'logit_bias');
      const many = {};
      for (let i = 0; i < 1025; i++) many[i] = 1;
      refused(await complete(srv, { prompt: PROMPT, max_tokens: 1, logit_bias: many }), 'logit_bias');
      delete many[1024];
      ok(await complete(srv, { prompt: PROMPT, max_tokens: 1, logit_bias: many }));
      // the edges are fine: the last id of the vocabulary, ±100, an empty object, null
      for (const logit_bias of [{ [VOCAB - 1]: 100 }, { 0: -100 }, {}, null])
        ok(await complete(srv, { prompt: PROMPT, max_tokens: 1, logit_bias }));
    });

  test('ignore_eos: EOS no longer ends the request; it is an ordinary token with no text', async () => {
    const stopped = await complete(srv, { prompt: PROMPT, max_tokens: 5, temperature: 0, logit_bias: { [EOS]: 100 } });
    assert.equal(ok(stopped).finish_reason, 'stop');
    assert.equal(ok(stopped).text, '');
    assert.equal(stopped.json.usage.completion_tokens, 1);   // the EOS counted, as before
    const ran = await complete(srv, { prompt: PROMPT, max_tokens: 5, temperature: 0, logit_bias: { [EOS]: 100 },
      ignore_eos: true, logprobs: 0 });
    const c = ok(ran);
    assert.equal(c.finish_reason, 'length');
    assert.equal(c.text, '');
    assert.equal(ran.json.usage.completion_tokens, 5);
    assert.deepEqual(c.logprobs.tokens, Array(5).fill('<|endoftext|>'));   // the token's own text, spelled out
    // false is the default
    assert.deepEqual(ok(await complete(srv, { prompt: PROMPT, max_tokens: 5, temperature: 0, logit_bias: { [EOS]: 100 },
      ignore_eos: false })), ok(stopped));
    refused(await complete(srv, { prompt: PROMPT, max_tokens: 5, ignore_eos: 'yes' }), 'ignore_eos');
  });

  test('min_tokens: EOS and stop_token_ids are held back that long; checked against max_tokens', async () => {
    const plain3 = ok(await complete(srv, { prompt: PROMPT, max_tokens: 3, temperature: 0 })).text;
    const r = await complete(srv, { prompt: PROMPT, max_tokens: 10, temperature: 0, logit_bias: { [EOS]: 100 },
      min_tokens: 3 });
    assert.equal(ok(r).finish_reason, 'stop');
    assert.equal(ok(r).text, plain3);   // the three greedy tokens, then the EOS
    assert.equal(r.json.usage.completion_tokens, 4);
    // a stop_token_ids id likewise
    const t = await complete(srv, { prompt: PROMPT, max_tokens: 10, temperature: 0, logit_bias: { 300: 100 },
      stop_token_ids: [300], min_tokens: 3 });
    assert.equal(ok(t).text, plain3);
    assert.equal(t.json.usage.completion_tokens, 4);
    // under ignore_eos EOS is held back all the same (vLLM), then drawn as an ordinary token
    const ig = ok(await complete(srv, { prompt: PROMPT, max_tokens: 6, temperature: 0, logit_bias: { [EOS]: 100 },
      min_tokens: 3, ignore_eos: true, logprobs: 0 }));
    assert.equal(ig.text, plain3);
    assert.deepEqual(ig.logprobs.tokens.slice(3), Array(3).fill('<|endoftext|>'));
    // equal to max_tokens is fine; above it, or above the default of 16, a 400; and its type and sign
    ok(await complete(srv, { prompt: PROMPT, max_tokens: 4, min_tokens: 4, temperature: 0 }));
    refused(await complete(srv, { prompt: PROMPT, max_tokens: 4, min_tokens: 5 }), 'min_tokens');
    refused(await complete(srv, { prompt: PROMPT, min_tokens: 17 }), 'min_tokens');
    for (const min_tokens of [-1, 1.5, '3', 257])
      refused(await complete(srv, { prompt: PROMPT, max_tokens: 4, min_tokens }), 'min_tokens');
  });

  test('min_tokens and stop strings: one that ends in the first min_tokens tokens\' text does not count (vLLM)',
    async () => {
      const full = ok(await complete(srv, { prompt: PROMPT, max_tokens: 40, temperature: 0, logprobs: 0 }));
      const toks = full.logprobs.tokens;
      // a token that occurs twice, first at i, later at j > i + 1
      let i = -1;
      let j = -1;
      for (let a = 0; a < toks.length && j < 0; a++)
        if (/^[ -~]+$/.test(toks[a]) && toks[a].length >= 2)
          for (let b = a + 2; b < toks.length && j < 0; b++)
            if (toks[b] === toks[a]) [i, j] = [a, b];
      assert.ok(j > 0, `no repeated token in ${JSON.stringify(toks)}`);
      const stop = toks[i];
      assert.ok(full.text.startsWith(toks.slice(0, j + 1).join('')), 'the tokens spell the text');
      const before = ok(await complete(srv, { prompt: PROMPT, max_tokens: 40, temperature: 0, stop }));
      assert.equal(before.text, full.text.slice(0, full.text.indexOf(stop)));
      // held back past its first appearance: it ends where the stop string first ends after token i's text
      const boundary = toks.slice(0, i + 1).join('').length;
      const at = full.text.indexOf(stop, Math.max(0, boundary - stop.length + 1));
      assert.ok(at > full.text.indexOf(stop), 'a later appearance to stop at');
      for (const stream of [false, true]) {
        const r = await complete(srv, { prompt: PROMPT, max_tokens: 40, temperature: 0, stop, min_tokens: i + 1, stream });
        assert.equal(r.status, 200, r.text);
        const c = stream ? joinStream(sseEvents(r.text))[0] : r.json.choices[0];
        assert.equal(c.text, full.text.slice(0, at), `stop ${JSON.stringify(stop)}, min_tokens ${i + 1}`);
        assert.equal(c.finish_reason, 'stop');
      }
    });

  test('stop_token_ids: end the request as EOS does; checked', async () => {
    const r = await complete(srv, { prompt: PROMPT, max_tokens: 10, temperature: 0, logit_bias: { 300: 100 },
      stop_token_ids: [300] });
    assert.equal(ok(r).finish_reason, 'stop');
    assert.equal(ok(r).text, '');
    assert.equal(r.json.usage.completion_tokens, 1);
    // a greedy token by id: the text stops just before it
    const full = ok(await complete(srv, { prompt: PROMPT, max_tokens: 20, temperature: 0, logprobs: 0 }));
    const k = full.logprobs.tokens.findIndex((t, n) => n >= 2 && /^[ -~]+$/.test(t));
    const ids = await tokenize(srv, full.logprobs.tokens[k]);
    assert.equal(ids.length, 1, `${JSON.stringify(full.logprobs.tokens[k])} is one token`);
    const cut = await complete(srv, { prompt: PROMPT, max_tokens: 20, temperature: 0, stop_token_ids: [ids[0]] });
    const upto = full.logprobs.tokens.indexOf(full.logprobs.tokens[k]);
    assert.equal(ok(cut).finish_reason, 'stop');
    assert.equal(ok(cut).text, full.logprobs.tokens.slice(0, upto).join(''));
    assert.equal(cut.json.usage.completion_tokens, upto + 1);
    // EOS in stop_token_ids under ignore_eos: it stops after all
    const e = ok(await complete(srv, { prompt: PROMPT, max_tokens: 5, temperature: 0, logit_bias: { [EOS]: 100 },
      ignore_eos: true, stop_token_ids: [EOS] }));
    assert.equal(e.finish_reason, 'stop');
    // repeats count once: 64 distinct ids and the model's EOS are too many, 63 are fine
    const ids64 = Array.from({ length: 64 }, (_, n) => n + 1);
    refused(await complete(srv, { prompt: PROMPT, max_tokens: 1, stop_token_ids: ids64 }), 'stop_token_ids');
    ok(await complete(srv, { prompt: PROMPT, max_tokens: 1, stop_token_ids: [...ids64.slice(0, 63), 1, 2, EOS] }));
    for (const stop_token_ids of [[VOCAB], [-1], ['5'], [1.5], 5, { 1: 1 }])
      refused(await complete(srv, { prompt: PROMPT, max_tokens: 1, stop_token_ids }), 'stop_token_ids');
    ok(await complete(srv, { prompt: PROMPT, max_tokens: 1, stop_token_ids: [] }));
  });

  test('repetition_penalty: changes the text; 1 is the same as absent; checked', async () => {
    for (const body of [{ prompt: PROMPT, max_tokens: 40, temperature: 0 },
      { prompt: PROMPT, max_tokens: 40, temperature: 0.9, seed: 11, top_p: 0.9 }]) {
      const absent = ok(await complete(srv, body)).text;
      assert.equal(ok(await complete(srv, { ...body, repetition_penalty: 1 })).text, absent);
      assert.notEqual(ok(await complete(srv, { ...body, repetition_penalty: 1.8 })).text, absent);
    }
    // the prompt counts: two tokens lifted far above the rest by logit_bias, 300 by more; with 300 in the prompt a
    // penalty of 2 halves its (positive) logit and 301 wins; with 300 absent from the prompt it does not
    const base = await tokenize(srv, PROMPT);
    const pick = async (prompt, repetition_penalty) => ok(await complete(srv, { prompt, max_tokens: 1, temperature: 0,
      logit_bias: { 300: 60, 301: 40 }, logprobs: 0, repetition_penalty })).logprobs.tokens[0];
    const [t300, t301] = [await detokenize(srv, [300]), await detokenize(srv, [301])];
    assert.equal(await pick([...base, 300], 1), t300);
    assert.equal(await pick([...base, 300], 2), t301);
    assert.equal(await pick([...base, 302], 2), t300);
    for (const repetition_penalty of [0, -1, 2.5, '1.2'])
      refused(await complete(srv, { prompt: PROMPT, max_tokens: 1, repetition_penalty }), 'repetition_penalty');
    ok(await complete(srv, { prompt: PROMPT, max_tokens: 1, repetition_penalty: 2 }));
  });

  test('chat: the same fields, the same rules', async () => {
    const messages = [{ role: 'user', content: 'Hello there' }];
    const forced = await chat(srv, { messages, max_tokens: 3, temperature: 0, logit_bias: { 300: 100 } });
    assert.equal(forced.status, 200, forced.text);
    assert.equal(forced.json.choices[0].message.content, await detokenize(srv, [300, 300, 300]));
    const ig = await chat(srv, { messages, max_tokens: 4, temperature: 0, logit_bias: { [EOS]: 100 }, ignore_eos: true });
    assert.equal(ig.json.choices[0].finish_reason, 'length');
    assert.equal(ig.json.usage.completion_tokens, 4);
    const st = await chat(srv, { messages, max_tokens: 4, temperature: 0, logit_bias: { 300: 100 }, stop_token_ids: [300],
      min_tokens: 1 });
    assert.equal(st.json.choices[0].finish_reason, 'stop');
    assert.equal(st.json.usage.completion_tokens, 2);
    const plain = await chat(srv, { messages, max_completion_tokens: 30, temperature: 0 });
    const rep1 = await chat(srv, { messages, max_completion_tokens: 30, temperature: 0, repetition_penalty: 1 });
    assert.equal(rep1.json.choices[0].message.content, plain.json.choices[0].message.content);
    refused(await chat(srv, { messages, logit_bias: { x: 1 } }), 'logit_bias');
    refused(await chat(srv, { messages, max_completion_tokens: 3, min_tokens: 4 }), 'min_tokens');
    refused(await chat(srv, { messages, stop_token_ids: [VOCAB] }), 'stop_token_ids');
  });

  describe('a daemon that draws from each row\'s candidates (AAH_DEVICE_SAMPLING=1)', () => {
    let dev;
    before(async () => {
      dev = await startServer(['--ctx-len', String(CTX), '--max-batch', '4', '--max-tokens', '256'],
        { AAH_DEVICE_SAMPLING: '1' });
    });
    after(async () => {
      const r = await dev.stop();
      assert.equal(r.code, 0, dev.log());
    });

    test('gives the host path\'s answers, reading rows back where the candidates cannot decide', async () => {
      const m0 = await metrics(dev.port);
      assert.equal(m0.get('aahd_device_sampling'), 1);
      const norm = (r) => {
        assert.equal(r.status, 200, r.text);
        if (r.json) return r.json.choices.map((c) => [c.text, c.finish_reason, c.logprobs]);
        return joinStream(sseEvents(r.text)).map((c) => [c.text, c.finish_reason]);
      };
      // all at once too, so that they share steps
      const host = await Promise.all(SAME_ANYWHERE.map((b) => complete(srv, b)));
      const device = await Promise.all(SAME_ANYWHERE.map((b) => complete(dev, b)));
      for (let k = 0; k < SAME_ANYWHERE.length; k++)
        assert.deepEqual(norm(device[k]), norm(host[k]), JSON.stringify(SAME_ANYWHERE[k]));
      const m1 = await metrics(dev.port);
      assert.ok(m1.get('aahd_logits_rows_fetched_total') > m0.get('aahd_logits_rows_fetched_total'));
      assert.ok(m1.get('aahd_draws_from_candidates_total') > m0.get('aahd_draws_from_candidates_total'),
        'greedy draws under min_tokens alone come from candidates');
    });
  });
});
