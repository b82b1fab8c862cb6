/* tests/engine/check_scheduler.c — Check suite for engine/scheduler's requests: stop strings decided on the engine thread,
 * finish reasons, prompt log-probabilities equal the engine's own log-softmax, cancellation frees pages, the queue
 * bound and draining, invalid submissions, the metrics and the KV gauge. No HTTP; the fixture is tests/engine/sched_test.h,
 * and the batching cases (concurrency, n choices, forks, FCFS, device sampling) are check_scheduler_batching.c. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/tokenizer.h"
#include "tests/engine/sched_test.h"

/* ---- stop strings: the engine thread ends a request at the token that completes one ---- */

/* Token k's text within the whole text of ids (the streaming decoder's pieces): [*from, *to). */
static void token_span(const tokenizer *t, const int32_t *ids, int32_t k, size_t *from, size_t *to)
{
	tokenizer_stream ts;
	tokenizer_stream_init(&ts, t, true);
	char buf[4096];
	size_t at = 0;
	for (int32_t i = 0; i <= k; i++) {
		*from = at;
		int64_t n = tokenizer_token_bytes(t, ids[i], NULL, 0) < 0 ? 0 : tokenizer_stream_push(&ts, ids[i], buf, sizeof buf);
		ck_assert_int_ge(n, 0);
		at += (size_t)n;
	}
	*to = at;
}

/* The naive rule: the text decoded token by token, searched whole after each; the first token after which a stop
 * string occurs, and which one (the earliest to begin; the lower index on a tie). -1: none. */
static int32_t naive_stop(const tokenizer *t, const int32_t *ids, int32_t n, const char *const *stop, const size_t *len,
                          int32_t n_stop, int32_t *which)
{
	tokenizer_stream ts;
	tokenizer_stream_init(&ts, t, true);
	static char text[1 << 16];
	size_t tl = 0;
	for (int32_t i = 0; i < n; i++) {
		if (tokenizer_token_bytes(t, ids[i], NULL, 0) >= 0)
			tl += (size_t)tokenizer_stream_push(&ts, ids[i], text + tl, (int64_t)(sizeof text - tl));
		size_t best = (size_t)-1;
		*which = -1;
		for (int32_t j = 0; j < n_stop; j++) {
			const char *hit = memmem(text, tl, stop[j], len[j]);
			if (hit && (size_t)(hit - text) < best) {
				best = (size_t)(hit - text);
				*which = j;
			}
		}
		if (*which >= 0)
			return i;
	}
	return -1;
}

/* The text a request published (sched_view.text, made once on the engine thread) is the tokenizer's decoding of its
 * tokens, cut where the earliest of the stop strings begins; finished, all safe. */
static void text_check(const tokenizer *tk, sched_request *r, int32_t n_tokens, const char *const *stop,
                       const size_t *len, int32_t n_stop)
{
	sched_view v;
	sched_request_view(r, &v);
	ck_assert_int_eq(v.text.n_tokens, n_tokens);
	ck_assert(v.text.finished);
	int32_t ids[256], k = 0;   /* ids of the padded vocabulary that the tokenizer lacks make no text */
	for (int32_t i = 0; i < n_tokens && k < 256; i++)
		if (sched_request_tokens(r)[i] < tokenizer_vocab_size(tk))
			ids[k++] = sched_request_tokens(r)[i];
	int64_t n = tokenizer_decode(tk, ids, k, false, NULL, 0);
	ck_assert_int_ge(n, 0);
	char *want = malloc((size_t)n + 1);
	tokenizer_decode(tk, ids, k, false, want, n + 1);
	size_t cut = (size_t)n;
	for (int32_t i = 0; i < n_stop; i++) {
		const char *hit = memmem(want, (size_t)n, stop[i], len[i]);
		if (hit && (size_t)(hit - want) < cut)
			cut = (size_t)(hit - want);
	}
	ck_assert_int_eq(v.text.stopped, cut < (size_t)n);
	ck_assert_uint_eq(v.text.len, cut);
	ck_assert_uint_eq(v.text.safe, cut);
	ck_assert_mem_eq(v.text.text, want, cut);
	free(want);
}

/* Three choices (one prefill, two forks) of an adaptive regime, with logprobs, each with stop strings taken across a
 * token boundary of its own text: each ends with finish STOP at exactly the token the naive rule names — none decoded
 * after it, whatever the timing — and its tokens, log-probabilities and stats (ACR, branch usage, attention products,
 * KV peak) equal those of the same submission with max_tokens cut to that token and no stop strings; the counters
 * count no token beyond; each published text is the decoding of its tokens, cut where the stop string begins. A stop
 * met by the last token allowed is a stop, not a length. Without the scheduler's
 * tokenizer, stop strings are refused, as are bad ones. */
START_TEST(test_stop_strings)
{
	enum { N = 3, NP = 40, MAX = 48 };
	char dir[256], err[512];
	make_aah_dir(dir, sizeof dir);
	engine_params ep = eparams();
	engine *ea;
	ck_assert_msg(engine_init(&ea, dir, &ep, err, sizeof err) == 0, "%s", err);
	tokenizer *tk = tokenizer_load(model_dir(), err, sizeof err);
	ck_assert_msg(tk, "%s", err);
	sched_params spar = { .max_seqs = SLOTS, .queue_length = 16, .step_tokens = 64, .tok = tk };
	sched *sa;
	ck_assert_msg(sched_init(&sa, ea, &ep, &spar, err, sizeof err) == 0, "%s", err);
	int32_t prompt[NP];
	make_prompt(prompt, NP, 77);
	sched_request_params rp[N];
	for (int32_t i = 0; i < N; i++) {
		rp[i] = req_params(prompt, NP, MAX);
		rp[i].sampling.temperature = 1.0f;
		rp[i].sampling.seed = 300 + (uint64_t)i;
		rp[i].logprobs = 2;
	}
	sched_request *r[N];
	uint64_t gen_want = 0;

	/* the whole texts first */
	int32_t full[N][MAX];
	ck_assert_int_eq(sched_submit(sa, rp, N, r, err, sizeof err), SCHED_OK);
	for (int32_t i = 0; i < N; i++) {
		sched_result res = wait_end(r[i]);
		ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
		ck_assert_int_eq(res.n_tokens, MAX);
		memcpy(full[i], sched_request_tokens(r[i]), sizeof full[i]);
		text_check(tk, r[i], MAX, NULL, NULL, 0);
		sched_request_release(r[i]);
		gen_want += MAX;
	}
	/* stop strings: one that never occurs, then for choice i the last character of a token's text and the first of
	 * the next one's, from token 6 + 9i on */
	char stops[N + 1][16] = { "\xff\xfe" };
	size_t len[N + 1] = { 2 };
	const char *stop[N + 1] = { stops[0] };
	for (int32_t i = 0; i < N; i++) {
		size_t a0, a1, b0, b1;
		int32_t k = 6 + 9 * i;
		for (;; k++) {
			ck_assert_int_lt(k + 1, MAX);
			token_span(tk, full[i], k, &a0, &a1);
			token_span(tk, full[i], k + 1, &b0, &b1);
			if (a1 > a0 && b1 > b0)
				break;
		}
		char text[4096];
		tokenizer_stream ts;
		tokenizer_stream_init(&ts, tk, true);
		size_t tl = 0;
		for (int32_t j = 0; j <= k + 1; j++)
			if (tokenizer_token_bytes(tk, full[i][j], NULL, 0) >= 0)
				tl += (size_t)tokenizer_stream_push(&ts, full[i][j], text + tl, (int64_t)(sizeof text - tl));
		size_t s0 = a1 - 1, s1 = b0 + 1;
		while (s0 > a0 && ((unsigned char)text[s0] & 0xc0) == 0x80)
			s0--;
		while (s1 < b1 && ((unsigned char)text[s1] & 0xc0) == 0x80)
			s1++;
		ck_assert_uint_le(s1 - s0, sizeof stops[0]);
		memcpy(stops[i + 1], text + s0, s1 - s0);
		len[i + 1] = s1 - s0;
		stop[i + 1] = stops[i + 1];
	}
	int32_t at[N], which[N];
	for (int32_t i = 0; i < N; i++) {
		at[i] = naive_stop(tk, full[i], MAX, stop, len, N + 1, &which[i]);
		ck_assert_int_ge(at[i], 0);
		ck_assert_int_lt(at[i] + 1, MAX);   /* it does end early */
		ck_assert_int_ge(which[i], 1);
	}

	/* with the stop strings */
	sched_request *rs[N];
	sched_result stopped[N];
	for (int32_t i = 0; i < N; i++) {
		rp[i].stop = stop;
		rp[i].stop_len = len;
		rp[i].n_stop = N + 1;
	}
	ck_assert_int_eq(sched_submit(sa, rp, N, rs, err, sizeof err), SCHED_OK);
	for (int32_t i = 0; i < N; i++) {
		stopped[i] = wait_end(rs[i]);
		ck_assert_int_eq(stopped[i].finish, SCHED_FINISH_STOP);
		ck_assert_int_eq(stopped[i].stop_id, -1);
		ck_assert_int_eq(stopped[i].stop_string, which[i]);
		ck_assert_int_eq(stopped[i].n_tokens, at[i] + 1);   /* the token that completed it is the last */
		ck_assert_mem_eq(sched_request_tokens(rs[i]), full[i], (size_t)(at[i] + 1) * sizeof **full);
		ck_assert(stopped[i].has_stats);
		text_check(tk, rs[i], at[i] + 1, stop, len, N + 1);
		gen_want += (uint64_t)(at[i] + 1);
	}

	/* the same submission cut to those tokens by max_tokens: the same tokens, log-probabilities and stats */
	for (int32_t i = 0; i < N; i++) {
		rp[i].n_stop = 0;
		rp[i].max_tokens = at[i] + 1;
	}
	ck_assert_int_eq(sched_submit(sa, rp, N, r, err, sizeof err), SCHED_OK);
	for (int32_t i = 0; i < N; i++) {
		sched_result cut = wait_end(r[i]);
		ck_assert_int_eq(cut.finish, SCHED_FINISH_LENGTH);
		ck_assert_int_eq(cut.n_tokens, at[i] + 1);
		ck_assert_mem_eq(sched_request_tokens(r[i]), sched_request_tokens(rs[i]), (size_t)cut.n_tokens * sizeof(int32_t));
		const sched_logprob_rows *a = sched_request_token_logprobs(rs[i]), *b = sched_request_token_logprobs(r[i]);
		ck_assert_mem_eq(a->logprob, b->logprob, (size_t)cut.n_tokens * sizeof *a->logprob);
		ck_assert_mem_eq(a->top_ids, b->top_ids, (size_t)cut.n_tokens * 2 * sizeof *a->top_ids);
		ck_assert_int_eq(stopped[i].stats.n_positions, NP + at[i]);   /* its last token was never fed */
		stats_eq(&stopped[i].stats, &cut.stats);
		ck_assert(cut.stats.acr < 1);   /* the windows did move */
		text_check(tk, r[i], cut.n_tokens, NULL, NULL, 0);
		gen_want += (uint64_t)cut.n_tokens;
		sched_request_release(r[i]);
	}

	/* a stop met by the last token max_tokens allows: a stop */
	rp[0].stop = stop;
	rp[0].stop_len = len;
	rp[0].n_stop = N + 1;
	rp[0].max_tokens = at[0] + 1;
	ck_assert_int_eq(sched_submit(sa, rp, 1, r, err, sizeof err), SCHED_OK);
	sched_result last = wait_end(r[0]);
	ck_assert_int_eq(last.finish, SCHED_FINISH_STOP);
	ck_assert_int_eq(last.n_tokens, at[0] + 1);
	stats_eq(&last.stats, &stopped[0].stats);
	gen_want += (uint64_t)last.n_tokens;
	sched_request_release(r[0]);

	sched_metrics m;
	sched_metrics_get(sa, &m);
	ck_assert_uint_eq(m.generation_tokens, gen_want);
	ck_assert_int_eq(m.kv_bytes_used, 0);

	/* refused: more than STOP_TEXT_MAX, an empty one, one too long, and any without the scheduler's tokenizer */
	const char *five[5] = { "a", "b", "c", "d", "e" };
	size_t five_len[5] = { 1, 1, 1, 1, 1 }, zero = 0, big = STOP_TEXT_MAX_BYTES + 1;
	sched_request_params bad = req_params(prompt, NP, 4);
	bad.stop = five;
	bad.stop_len = five_len;
	bad.n_stop = 5;
	ck_assert_int_eq(sched_submit(sa, &bad, 1, r, err, sizeof err), SCHED_ERR_INVALID);
	bad.n_stop = 1;
	bad.stop_len = &zero;
	ck_assert_int_eq(sched_submit(sa, &bad, 1, r, err, sizeof err), SCHED_ERR_INVALID);
	bad.stop_len = &big;
	ck_assert_int_eq(sched_submit(sa, &bad, 1, r, err, sizeof err), SCHED_ERR_INVALID);
	bad.stop_len = five_len;
	ck_assert_int_eq(sched_submit(sch, &bad, 1, r, err, sizeof err), SCHED_ERR_INVALID);
	ck_assert_ptr_nonnull(strstr(err, "tokenizer"));

	for (int32_t i = 0; i < N; i++)
		sched_request_release(rs[i]);
	sched_free(sa);
	engine_free(ea);
	tokenizer_free(tk);
	remove_model_dir(dir);
}
END_TEST

/* ---- the sampling fields: min_tokens, ignore_eos, stop_token_ids, logit_bias, the repetition penalty ---- */

static bool holds(const int32_t *ids, int32_t n, int32_t id)
{
	for (int32_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* One submission of requests that share a prompt (one prefill, the others fork it), each with its own adjustments:
 * each ends as its lone run with the same sampler does, token for token — on the host path (its batched greedy pick
 * declines the adjusted ones) and on the device path (the candidates decline logit_bias and the repetition penalty,
 * and read the row) alike; run_tests.sh runs this suite both ways. And by construction: logit_bias +100 on an id the
 * model never picks makes it the first token; min_tokens delays it; without the id among the stop ids (ignore_eos) it
 * is an ordinary token to max_tokens; an extra stop id ends the request at its first appearance. */
START_TEST(test_sampling_fields)
{
	enum { NP = 12, MAX = 10, K = 8 };
	const int32_t vocab = engine_config(ref_eng)->vocab_size;
	int32_t prompt[NP], plain[MAX];
	make_prompt(prompt, NP, 21);
	const sampler_params greedy = { .top_p = 1 };
	ck_assert_int_eq(lone_run(prompt, NP, MAX, &greedy, NULL, 0, plain), MAX);
	int32_t eos = 100;   /* an "EOS" the greedy text never holds */
	while (holds(plain, MAX, eos))
		eos++;
	const int32_t x = plain[3];   /* a stop_token_ids id: the first place it appears ends the plain run */
	int32_t x_at = 0;
	while (plain[x_at] != x)
		x_at++;
	const int32_t eos_only[1] = { eos }, both[2] = { eos, x };
	const sampler_bias force[1] = { { eos, 100.0f } };
	const sampler_bias mix[2] = { { plain[0], -100.0f }, { 7, 3.0f } };
	struct {
		sampler_params sp;
		const int32_t *stop;
		int32_t n_stop;
	} c[K] = {
		{ { .top_p = 1, .bias = force, .n_bias = 1 }, eos_only, 1 },
		{ { .top_p = 1, .bias = force, .n_bias = 1, .min_tokens = 4, .min_tokens_ids = eos_only, .n_min_tokens_ids = 1 },
		  eos_only, 1 },
		/* ignore_eos: EOS held back by min_tokens all the same (vLLM), then an ordinary token */
		{ { .top_p = 1, .bias = force, .n_bias = 1, .min_tokens = 2, .min_tokens_ids = eos_only, .n_min_tokens_ids = 1 },
		  NULL, 0 },
		{ { .top_p = 1 }, both, 2 },
		{ { .top_p = 1, .min_tokens = x_at + 1, .min_tokens_ids = both, .n_min_tokens_ids = 2 }, both, 2 },
		{ { .temperature = 0.9f, .top_k = 30, .top_p = 1, .seed = 5, .repetition_penalty = 1.3f, .bias = mix,
		    .n_bias = 2, .min_tokens = 3, .min_tokens_ids = both, .n_min_tokens_ids = 2 }, both, 2 },
		{ { .top_p = 1, .repetition_penalty = 1.5f }, eos_only, 1 },
		{ { .top_p = 1, .repetition_penalty = 1.0f }, eos_only, 1 },   /* 1: off */
	};
	sched_request_params rp[K];
	sched_request *r[K];
	char err[256];
	for (int32_t i = 0; i < K; i++) {
		rp[i] = req_params(prompt, NP, MAX);
		rp[i].sampling = c[i].sp;
		rp[i].stop_ids = c[i].stop;
		rp[i].n_stop_ids = c[i].n_stop;
	}
	sched_metrics m0, m;
	sched_metrics_get(sch, &m0);
	ck_assert_int_eq(sched_submit(sch, rp, K, r, err, sizeof err), SCHED_OK);
	int32_t got[K][MAX], n[K];
	sched_result res[K];
	for (int32_t i = 0; i < K; i++) {
		res[i] = wait_end(r[i]);
		int32_t want[MAX];
		int32_t nw = lone_run(prompt, NP, MAX, &c[i].sp, c[i].stop, c[i].n_stop, want);
		n[i] = res[i].n_tokens;
		ck_assert_msg(n[i] == nw, "case %d: %d tokens, the lone run %d", i, n[i], nw);
		memcpy(got[i], sched_request_tokens(r[i]), (size_t)n[i] * sizeof **got);
		ck_assert_msg(!memcmp(got[i], want, (size_t)n[i] * sizeof *want), "case %d: other tokens than its lone run", i);
		ck_assert_int_eq(res[i].finish, n[i] < MAX ? SCHED_FINISH_STOP : SCHED_FINISH_LENGTH);
		sched_request_release(r[i]);
	}
	/* logit_bias +100: the forced id first, a stop */
	ck_assert_int_eq(n[0], 0);
	ck_assert_int_eq(res[0].stop_id, eos);
	/* min_tokens 4 holds it back for four tokens, the greedy ones, then it stops */
	ck_assert_int_eq(n[1], 4);
	ck_assert_int_eq(res[1].stop_id, eos);
	ck_assert_mem_eq(got[1], plain, 4 * sizeof *plain);
	/* not a stop id (ignore_eos): two greedy tokens, then the forced id to max_tokens */
	ck_assert_int_eq(res[2].finish, SCHED_FINISH_LENGTH);
	ck_assert_int_eq(n[2], MAX);
	ck_assert_mem_eq(got[2], plain, 2 * sizeof *plain);
	for (int32_t k = 2; k < MAX; k++)
		ck_assert_int_eq(got[2][k], eos);
	/* an extra stop id ends the plain text where it first appears, and is not among the tokens */
	ck_assert_int_eq(n[3], x_at);
	ck_assert_int_eq(res[3].stop_id, x);
	ck_assert_mem_eq(got[3], plain, (size_t)x_at * sizeof *plain);
	/* held back up to and including its first place: the text goes on past it */
	ck_assert_int_gt(n[4], x_at);
	ck_assert(!holds(got[4], x_at + 1, x));
	/* sampled: no stop id among its first three, never the id biased by -100 */
	ck_assert_int_ge(n[5], 3);
	ck_assert(!holds(got[5], 3, x) && !holds(got[5], n[5], plain[0]));
	/* a repetition penalty of 1 is none */
	ck_assert_int_eq(n[7], MAX);
	ck_assert_mem_eq(got[7], plain, sizeof plain);

	sched_metrics_get(sch, &m);
	const uint64_t gen = m.generation_tokens - m0.generation_tokens, fetched = m.logits_rows_fetched -
	                     m0.logits_rows_fetched, top = m.draws_from_top - m0.draws_from_top;
	ck_assert_uint_le(top + fetched, gen);
	if (m.device_sampling)
		ck_assert_uint_gt(fetched, 0);   /* logit_bias and the repetition penalty read their rows */
	else
		ck_assert_uint_eq(fetched + top, 0);

	/* refused at submit: ids out of range, a negative min_tokens, too many entries */
	sched_request_params bad = req_params(prompt, NP, 4);
	const sampler_bias far[1] = { { vocab, 1.0f } };
	bad.sampling.bias = far;
	bad.sampling.n_bias = 1;
	ck_assert_int_eq(sched_submit(sch, &bad, 1, r, err, sizeof err), SCHED_ERR_INVALID);
	bad = req_params(prompt, NP, 4);
	const int32_t neg[1] = { -2 };
	bad.sampling.min_tokens_ids = neg;
	bad.sampling.n_min_tokens_ids = 1;
	ck_assert_int_eq(sched_submit(sch, &bad, 1, r, err, sizeof err), SCHED_ERR_INVALID);
	bad = req_params(prompt, NP, 4);
	bad.stop_ids = neg;
	bad.n_stop_ids = 1;
	ck_assert_int_eq(sched_submit(sch, &bad, 1, r, err, sizeof err), SCHED_ERR_INVALID);
	bad = req_params(prompt, NP, 4);
	bad.sampling.min_tokens = -1;
	ck_assert_int_eq(sched_submit(sch, &bad, 1, r, err, sizeof err), SCHED_ERR_INVALID);
	bad = req_params(prompt, NP, 4);
	bad.sampling.repetition_penalty = NAN;
	ck_assert_int_eq(sched_submit(sch, &bad, 1, r, err, sizeof err), SCHED_ERR_INVALID);
	ck_assert_int_eq(sched_busy(sch), 0);
}
END_TEST

/* ---- finish reasons ---- */

START_TEST(test_finish_reasons)
{
	int32_t prompt[12], want[16];
	make_prompt(prompt, 12, 9);
	sampler_params greedy = { .top_p = 1 };
	int32_t n = lone_run(prompt, 12, 16, &greedy, NULL, 0, want);
	ck_assert_int_eq(n, 16);
	char err[256];
	sched_request *r;

	sched_request_params rp = req_params(prompt, 12, 16);
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_OK);
	sched_result res = wait_end(r);
	ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
	ck_assert_int_eq(res.n_tokens, 16);
	ck_assert_int_eq(res.stop_id, -1);
	ck_assert(res.has_stats);
	ck_assert_int_eq(res.stats.n_positions, 12 + 15);   /* the last token is never fed */
	ck_assert(res.ttft_s >= 0 && res.duration_s >= res.ttft_s);
	sched_request_release(r);

	/* the third greedy token as EOS: two tokens, then STOP */
	int32_t eos = want[2];
	rp.stop_ids = &eos;
	rp.n_stop_ids = 1;
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_OK);
	res = wait_end(r);
	ck_assert_int_eq(res.finish, SCHED_FINISH_STOP);
	ck_assert_int_eq(res.stop_id, eos);
	int32_t expect = 2;
	if (want[0] == eos) expect = 0;
	else if (want[1] == eos) expect = 1;
	ck_assert_int_eq(res.n_tokens, expect);
	sched_request_release(r);

	/* max_tokens 0: the prompt only */
	rp = req_params(prompt, 12, 0);
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_OK);
	res = wait_end(r);
	sched_view v;
	sched_request_view(r, &v);
	ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
	ck_assert_int_eq(res.n_tokens, 0);
	ck_assert(v.prompt_done);
	ck_assert_int_eq(res.stats.n_positions, 12);
	sched_request_release(r);

	/* the context ends it: CTX - 4 prompt tokens leave room to feed 4 generated tokens, so 5 are generated */
	int32_t *big = malloc(CTX * sizeof *big);
	make_prompt(big, CTX - 4, 3);
	rp = req_params(big, CTX - 4, 50);
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_OK);
	res = wait_end(r);
	ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
	ck_assert_int_eq(res.n_tokens, 5);
	sched_request_release(r);
	free(big);
}
END_TEST

/* ---- log-probabilities ---- */

START_TEST(test_prompt_logprobs)
{
	enum { NP = 150, TOP = 5 };   /* 150 tokens: three prompt chunks */
	int32_t prompt[NP];
	make_prompt(prompt, NP, 11);
	char err[256];
	sched_request_params rp = req_params(prompt, NP, 3);
	rp.logprobs = TOP;
	rp.prompt_logprobs = true;
	sched_request *r;
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_OK);
	sched_result res = wait_end(r);
	ck_assert_int_eq(res.n_tokens, 3);
	const sched_logprob_rows *pl = sched_request_prompt_logprobs(r);
	const sched_logprob_rows *gl = sched_request_token_logprobs(r);
	ck_assert_ptr_nonnull(pl);
	ck_assert_ptr_nonnull(gl);
	ck_assert_int_eq(pl->n_top, TOP);
	ck_assert(isnan(pl->logprob[0]));

	/* the engine's own logits for every prompt position, log-softmax in float64 */
	const int32_t vocab = engine_config(ref_eng)->vocab_size;
	float *logits = malloc((size_t)NP * vocab * sizeof *logits);
	int32_t seq = engine_seq_open(ref_eng, NULL, err, sizeof err);
	engine_item it = { seq, prompt, NP, true, false, false };
	ck_assert_msg(engine_forward(ref_eng, &it, 1, logits, err, sizeof err) == 0, "%s", err);
	engine_seq_close(ref_eng, seq);
	for (int32_t pos = 1; pos < NP; pos++) {
		const float *row = logits + (int64_t)(pos - 1) * vocab;
		double m = -INFINITY, sum = 0;
		for (int32_t v = 0; v < vocab; v++)
			m = row[v] > m ? row[v] : m;
		for (int32_t v = 0; v < vocab; v++)
			sum += exp((double)row[v] - m);
		double lse = m + log(sum);
		double want = (double)row[prompt[pos]] - lse;
		ck_assert_msg(fabs(pl->logprob[pos] - want) < 1e-4, "position %d: %f, engine %f", pos, pl->logprob[pos], want);
		/* top-N: sorted, the first is the argmax, each value is its token's log-softmax */
		const int32_t *ids = pl->top_ids + (int64_t)pos * TOP;
		const float *lps = pl->top_logprobs + (int64_t)pos * TOP;
		ck_assert_int_eq(ids[0], sampler_argmax(row, vocab));
		for (int32_t j = 0; j < TOP; j++) {
			ck_assert(fabs(lps[j] - ((double)row[ids[j]] - lse)) < 1e-4);
			if (j > 0)
				ck_assert(lps[j] <= lps[j - 1]);
		}
		ck_assert(pl->logprob[pos] <= lps[0] + 1e-6);
	}
	/* greedy: each generated token is the top entry, with the same log-probability */
	const int32_t *tok = sched_request_tokens(r);
	for (int32_t i = 0; i < 3; i++) {
		ck_assert_int_eq(gl->top_ids[i * TOP], tok[i]);
		ck_assert_float_eq(gl->logprob[i], gl->top_logprobs[i * TOP]);
	}
	/* and the first generated token is predicted by the last prompt row */
	ck_assert_int_eq(tok[0], sampler_argmax(logits + (int64_t)(NP - 1) * vocab, vocab));
	free(logits);
	sched_request_release(r);
}
END_TEST

/* ---- cancellation ---- */

static atomic_int notified_tokens;
static _Atomic(sched_request *) cancel_me;

/* On the engine thread, before its next step: cancel after the first published output. The request pointer is
 * stored right after sched_submit returns; the spin covers the moment between. */
static void cancel_on_first(void *ctx, bool last)
{
	if (last || atomic_fetch_add(&notified_tokens, 1) != 0)
		return;
	sched_request *r;
	while (!(r = atomic_load(&cancel_me)))
		;
	sched_request_cancel(r);
}

START_TEST(test_cancel_frees_pages)
{
	int32_t prompt[100];
	make_prompt(prompt, 100, 21);
	char err[256];
	sched_request_params rp = req_params(prompt, 100, 150);
	rp.notify = cancel_on_first;
	atomic_store(&notified_tokens, 0);
	atomic_store(&cancel_me, NULL);
	sched_request *r;
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_OK);
	atomic_store(&cancel_me, r);
	sched_result res = wait_end(r);
	sched_metrics m;
	sched_metrics_get(sch, &m);
	ck_assert_int_eq(res.finish, SCHED_FINISH_CANCELLED);
	ck_assert_int_lt(res.n_tokens, 3);
	ck_assert(res.has_stats);
	ck_assert_int_gt(res.stats.kv_bytes_peak, 0);
	ck_assert_int_eq(m.kv_bytes_used, 0);
	ck_assert_int_eq(m.running, 0);
	ck_assert_int_gt(m.kv_bytes_capacity, 0);
	sched_request_release(r);
}
END_TEST

/* Deterministic: a slow engine (step delay), a running request cancelled from outside, and one still waiting. */
START_TEST(test_cancel_running_and_waiting)
{
	teardown();
	char err[512];
	engine_params ep = eparams();
	ck_assert_msg(engine_init(&ref_eng, model_dir(), &ep, err, sizeof err) == 0, "%s", err);
	start(8, 20000);
	int32_t prompt[20];
	make_prompt(prompt, 20, 4);
	sched_request_params rp[SLOTS + 1];
	for (int32_t i = 0; i <= SLOTS; i++)
		rp[i] = req_params(prompt, 20, 200);
	sched_request *r[SLOTS + 1];
	ck_assert_int_eq(sched_submit(sch, rp, SLOTS + 1, r, err, sizeof err), SCHED_OK);
	sched_view v = { 0 };
	while (v.n_tokens < 2)
		sched_request_wait(r[0], v.version, 5000, &v);
	sched_metrics m;
	sched_metrics_get(sch, &m);
	ck_assert_int_eq(m.running, SLOTS);
	ck_assert_int_eq(m.waiting, 1);
	ck_assert_int_gt(m.kv_bytes_used, 0);
	sched_request_cancel(r[0]);           /* running */
	sched_request_cancel(r[SLOTS]);       /* waiting … or admitted into r[0]'s slot: either way it ends */
	sched_result res = wait_end(r[0]);
	ck_assert_int_eq(res.finish, SCHED_FINISH_CANCELLED);
	ck_assert_int_lt(res.n_tokens, 200);
	res = wait_end(r[SLOTS]);
	ck_assert_int_eq(res.finish, SCHED_FINISH_CANCELLED);
	sched_cancel_all(sch);
	for (int32_t i = 1; i < SLOTS; i++) {
		res = wait_end(r[i]);
		ck_assert_int_eq(res.finish, SCHED_FINISH_CANCELLED);
	}
	sched_metrics_get(sch, &m);
	ck_assert_int_eq(m.kv_bytes_used, 0);
	ck_assert_int_eq(m.running + m.waiting, 0);
	ck_assert_int_eq(sched_busy(sch), 0);
	for (int32_t i = 0; i <= SLOTS; i++)
		sched_request_release(r[i]);
	/* after sched_cancel_all, new work runs normally */
	sched_request *again;
	sched_request_params one = req_params(prompt, 20, 3);
	ck_assert_int_eq(sched_submit(sch, &one, 1, &again, err, sizeof err), SCHED_OK);
	res = wait_end(again);
	ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
	sched_request_release(again);
}
END_TEST

/* ---- the queue bound and draining ---- */

START_TEST(test_queue_full)
{
	teardown();
	char err[512];
	engine_params ep = eparams();
	ck_assert_msg(engine_init(&ref_eng, model_dir(), &ep, err, sizeof err) == 0, "%s", err);
	start(2, 20000);
	int32_t prompt[8];
	make_prompt(prompt, 8, 1);
	sched_request_params rp[SLOTS + 3];
	for (int32_t i = 0; i < SLOTS + 3; i++)
		rp[i] = req_params(prompt, 8, 100);
	sched_request *r[SLOTS + 3];
	/* more than the queue holds in one submission: refused whole */
	ck_assert_int_eq(sched_submit(sch, rp, 3, r, err, sizeof err), SCHED_ERR_QUEUE_FULL);
	ck_assert_ptr_null(r[0]);
	/* fill the slots, one at a time, each admitted before the next */
	for (int32_t i = 0; i < SLOTS; i++) {
		ck_assert_int_eq(sched_submit(sch, &rp[i], 1, &r[i], err, sizeof err), SCHED_OK);
		sched_view v = { 0 };
		while (v.n_tokens < 1)
			sched_request_wait(r[i], v.version, 5000, &v);
	}
	ck_assert_int_eq(sched_submit(sch, &rp[SLOTS], 2, &r[SLOTS], err, sizeof err), SCHED_OK);
	ck_assert_int_eq(sched_submit(sch, &rp[SLOTS + 2], 1, &r[SLOTS + 2], err, sizeof err), SCHED_ERR_QUEUE_FULL);
	ck_assert_int_eq(sched_busy(sch), SLOTS + 2);
	/* draining refuses new work; what waits and runs goes on */
	sched_drain(sch);
	sched_request_cancel(r[0]);
	ck_assert_int_eq(sched_submit(sch, &rp[SLOTS + 2], 1, &r[SLOTS + 2], err, sizeof err), SCHED_ERR_SHUTDOWN);
	sched_cancel_all(sch);
	for (int32_t i = 0; i < SLOTS + 2; i++) {
		wait_end(r[i]);
		sched_request_release(r[i]);
	}
	ck_assert_int_eq(sched_busy(sch), 0);
}
END_TEST

/* ---- invalid submissions ---- */

START_TEST(test_invalid)
{
	char err[256];
	sched_request *r = (sched_request *)1;
	int32_t prompt[4] = { 1, 2, 3, 4 };
	sched_request_params rp = req_params(prompt, 0, 4);
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_ERR_INVALID);
	ck_assert_ptr_null(r);
	int32_t bad[2] = { 1, 1 << 20 };
	rp = req_params(bad, 2, 4);
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_ERR_INVALID);
	rp = req_params(prompt, 4, 4);
	rp.regime = "no_such_regime";
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_ERR_REGIME);
	ck_assert_ptr_nonnull(strstr(err, "no_such_regime"));
	rp = req_params(prompt, 4, 4);
	rp.logprobs = SCHED_MAX_LOGPROBS + 1;
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_ERR_INVALID);
	rp = req_params(prompt, 4, -1);
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_ERR_INVALID);
	int32_t *big = calloc(CTX + 1, sizeof *big);
	rp = req_params(big, CTX + 1, 0);
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_ERR_TOO_LONG);
	free(big);
	/* a valid one with an invalid one: neither is queued */
	sched_request_params two[2] = { req_params(prompt, 4, 4), req_params(prompt, 0, 4) };
	sched_request *rr[2];
	ck_assert_int_eq(sched_submit(sch, two, 2, rr, err, sizeof err), SCHED_ERR_INVALID);
	ck_assert_int_eq(sched_busy(sch), 0);
	/* the default regime by name */
	rp = req_params(prompt, 4, 2);
	rp.regime = engine_default_regime(eng);
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_OK);
	sched_result res = wait_end(r);
	ck_assert_str_eq(res.stats.regime, engine_default_regime(eng));
	sched_request_release(r);
}
END_TEST

/* aahd_kv_cache_bytes_used at the instants a reader can see: every notification, on the engine thread, reads the
 * metrics as a scrape would. The gauge stays in [0, capacity] and a whole number of pages, and once the only running
 * request has ended (its last notification) it is 0 — also when that request's last step took a new page (prompt 5:
 * max_tokens 12 writes position 16), which a gauge adjusted by the ended sequence's bytes got wrong. */
typedef struct gauge_watch {
	int64_t page_bytes;
	int32_t bad;                  /* notifications that saw a gauge out of [0, capacity] or not whole pages */
	int64_t at_end;               /* the gauge at the last notification */
	atomic_int ended;             /* set after the others, which the test reads once it is */
} gauge_watch;

static void gauge_notify(void *ctx, bool last)
{
	gauge_watch *w = ctx;
	sched_metrics m;
	sched_metrics_get(sch, &m);
	if (m.kv_bytes_used < 0 || m.kv_bytes_used > m.kv_bytes_capacity || m.kv_bytes_used % w->page_bytes)
		w->bad++;
	if (last) {
		w->at_end = m.kv_bytes_used;
		atomic_store(&w->ended, 1);
	}
}

START_TEST(test_kv_gauge)
{
	int32_t prompt[5];
	make_prompt(prompt, 5, 31);
	char err[256];
	for (int32_t max_tokens = 1; max_tokens <= 40; max_tokens++) {
		gauge_watch w = { .page_bytes = engine_kv_page_bytes(eng), .at_end = -1 };
		atomic_init(&w.ended, 0);
		sched_request_params rp = req_params(prompt, 5, max_tokens);
		rp.notify = gauge_notify;
		rp.notify_ctx = &w;
		sched_request *r;
		ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_OK);
		wait_end(r);
		sched_request_release(r);
		while (atomic_load(&w.ended) == 0)   /* the last notification follows the result */
			usleep(1000);
		ck_assert_int_eq(w.bad, 0);
		ck_assert_msg(w.at_end == 0, "max_tokens %d: %lld bytes used after the only request ended", max_tokens,
		              (long long)w.at_end);
	}
	sched_metrics m;
	sched_metrics_get(sch, &m);
	ck_assert_int_eq(m.kv_bytes_used, 0);
}
END_TEST

START_TEST(test_metrics)
{
	int32_t prompt[30];
	make_prompt(prompt, 30, 8);
	char err[256];
	sched_request_params rp = req_params(prompt, 30, 10);
	sched_request *r;
	ck_assert_int_eq(sched_submit(sch, &rp, 1, &r, err, sizeof err), SCHED_OK);
	sched_result res = wait_end(r);
	sched_request_release(r);
	sched_metrics m;
	sched_metrics_get(sch, &m);
	ck_assert_uint_eq(m.prompt_tokens, 30);
	ck_assert_uint_eq(m.generation_tokens, 10);
	ck_assert(m.generation_tokens_per_s > 0);
	ck_assert_uint_eq(m.ttft.count, 1);
	ck_assert_uint_eq(m.inter_token.count, 9);
	ck_assert_uint_eq(m.duration.count, 1);
	ck_assert_int_ge(m.n_regimes, 1);
	const aah_tally *a = &m.regimes[0].aah;
	ck_assert_uint_eq(a->sequences, 1);
	ck_assert(a->attn_products > 0 && a->attn_products <= a->attn_products_full);
	ck_assert(a->kv_bytes_peak > 0);
	ck_assert_double_eq_tol(aah_tally_acr(a), res.stats.acr, 1e-9);
	ck_assert_int_eq(a->n_windows, 1);
}
END_TEST


/* ---- constrained decoding ---- */

/* The lone run of a constrained request: the mask of a fresh matcher at each step (the stop ids where the grammar
 * may end), sampler_sample_masked, until a stop id, the grammar's end or max_tokens. */
static int32_t lone_run_grammar(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens, const sampler_params *sp,
                                const int32_t *stop_ids, int32_t n_stop, grammar *g, int32_t *out, bool *complete)
{
	char err[256];
	const int32_t vocab = engine_config(ref_eng)->vocab_size;
	float *logits = malloc((size_t)vocab * sizeof *logits);
	uint32_t *mask = malloc((size_t)(vocab + 31) / 32 * 4);
	sampler smp;
	ck_assert_int_eq(sampler_init(&smp, sp, vocab), 0);
	sampler_prompt(&smp, prompt, n_prompt);
	grammar_matcher *m = grammar_matcher_new(g);
	int32_t seq = engine_seq_open(ref_eng, NULL, err, sizeof err);
	engine_item it = { seq, prompt, n_prompt, false, false, false };
	ck_assert_msg(engine_forward(ref_eng, &it, 1, logits, err, sizeof err) == 0, "%s", err);
	int32_t n = 0;
	*complete = false;
	while (n < max_tokens) {
		if (grammar_matcher_must_end(m)) {
			*complete = true;
			break;
		}
		ck_assert_int_ge(grammar_matcher_mask(m, mask), 0);
		if (grammar_matcher_can_end(m))
			for (int32_t i = 0; i < n_stop; i++)
				mask[stop_ids[i] >> 5] |= 1u << (stop_ids[i] & 31);
		int32_t id = sampler_sample_masked(&smp, logits, mask);
		ck_assert_int_ge(id, 0);
		sampler_accept(&smp, id);
		bool stop = false;
		for (int32_t i = 0; i < n_stop; i++)
			stop |= id == stop_ids[i];
		if (stop) {
			*complete = true;
			break;
		}
		ck_assert_int_eq(grammar_matcher_accept(m, id), 0);
		out[n++] = id;
		if (grammar_matcher_must_end(m)) {
			*complete = true;
			break;
		}
		if (n == max_tokens)
			break;
		engine_item step = { seq, &id, 1, false, false, false };
		ck_assert_msg(engine_forward(ref_eng, &step, 1, logits, err, sizeof err) == 0, "%s", err);
	}
	engine_seq_close(ref_eng, seq);
	grammar_matcher_free(m);
	sampler_free(&smp);
	free(mask);
	free(logits);
	return n;
}

/* Constrained and free requests in one batch: each constrained output is a sentence of its grammar and the same
 * tokens as its lone masked run (greedy and seeded samples); the free ones are untouched; a grammar that admits
 * nothing longer ends the request with a stop and no step for an end token; an empty language ends it at once; a
 * grammar of another vocabulary width is refused; the metrics count it all. */
START_TEST(test_constrained)
{
	enum { NP = 10, MAX = 40, K = 6 };
	char err[256], dir[1024];
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", testdata());
	tokenizer *tk = tokenizer_load(dir, err, sizeof err);
	ck_assert_msg(tk != NULL, "%s", err);
	const int32_t vocab = engine_config(ref_eng)->vocab_size;
	grammar_vocab *gv = grammar_vocab_new(tk, vocab, err, sizeof err);
	ck_assert_msg(gv != NULL, "%s", err);
	const char *src = "root ::= \"{\\\"a\\\": \" [0-9]{1,3} \", \\\"b\\\": \\\"\" [a-z ]{0,12} \"\\\"}\"";
	grammar *g = grammar_compile(gv, src, strlen(src), err, sizeof err);
	ck_assert_msg(g != NULL, "%s", err);
	/* a language with optional tail: the stop id may end it early */
	const char *src2 = "root ::= [a-e]+ (\" \" [a-e]+){0,6}";
	grammar *g2 = grammar_compile(gv, src2, strlen(src2), err, sizeof err);
	ck_assert_msg(g2 != NULL, "%s", err);
	int32_t prompt[NP];
	make_prompt(prompt, NP, 77);
	const int32_t stop[1] = { 5 };
	struct {
		sampler_params sp;
		grammar *g;
	} c[K] = {
		{ { .top_p = 1 }, g },
		{ { .temperature = 1.0f, .top_p = 1, .seed = 11 }, g },
		{ { .temperature = 1.0f, .top_k = 20, .top_p = 0.9f, .seed = 12 }, g2 },
		{ { .top_p = 1 }, NULL },
		{ { .temperature = 0.8f, .top_p = 1, .seed = 13 }, NULL },
		{ { .temperature = 1.2f, .top_p = 1, .seed = 14, .repetition_penalty = 1.2f }, g2 },
	};
	sched_request_params rp[K];
	sched_request *r[K];
	for (int32_t i = 0; i < K; i++) {
		rp[i] = req_params(prompt, NP, MAX);
		rp[i].sampling = c[i].sp;
		rp[i].stop_ids = stop;
		rp[i].n_stop_ids = 1;
		rp[i].grammar = c[i].g;
	}
	sched_metrics m0, m;
	sched_metrics_get(sch, &m0);
	/* one at a time, so that each is its own submission (no shared prefill decides anything here) */
	for (int32_t i = 0; i < K; i++)
		ck_assert_int_eq(sched_submit(sch, &rp[i], 1, &r[i], err, sizeof err), SCHED_OK);
	int32_t n_constrained = 0;
	for (int32_t i = 0; i < K; i++) {
		sched_result res = wait_end(r[i]);
		int32_t want[MAX];
		bool complete = false;
		int32_t nw = c[i].g ? lone_run_grammar(prompt, NP, MAX, &c[i].sp, stop, 1, c[i].g, want, &complete)
		                    : lone_run(prompt, NP, MAX, &c[i].sp, stop, 1, want);
		ck_assert_msg(res.n_tokens == nw, "case %d: %d tokens, the lone run %d", i, res.n_tokens, nw);
		ck_assert_msg(!memcmp(sched_request_tokens(r[i]), want, (size_t)nw * sizeof *want),
		              "case %d: other tokens than its lone run", i);
		if (!c[i].g) {
			ck_assert(!res.grammar_complete);
			sched_request_release(r[i]);
			continue;
		}
		n_constrained++;
		/* the output is a sentence of the grammar (or a prefix, when max_tokens cut it) */
		grammar_matcher *mm = grammar_matcher_new(c[i].g);
		for (int32_t k = 0; k < res.n_tokens; k++)
			ck_assert_int_eq(grammar_matcher_accept(mm, sched_request_tokens(r[i])[k]), 0);
		ck_assert_int_eq(res.grammar_complete, complete);
		/* the first grammar's sentences are at most 31 bytes, so its outputs close within MAX tokens: a complete
		 * grammar, ended by the grammar itself (no end token can come: the grammar admits nothing after '}') */
		if (c[i].g == g) {
			ck_assert_msg(res.finish == SCHED_FINISH_STOP && res.grammar_complete && res.stop_id < 0,
			              "case %d: finish %d, complete %d, stop id %d", i, res.finish, res.grammar_complete,
			              res.stop_id);
		}
		if (res.finish == SCHED_FINISH_STOP) {
			ck_assert(res.grammar_complete);
			ck_assert(grammar_matcher_can_end(mm));
		} else {
			ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
			ck_assert_int_eq(res.n_tokens, MAX);
		}
		if (res.stop_id < 0 && res.finish == SCHED_FINISH_STOP)
			ck_assert(grammar_matcher_must_end(mm));   /* ended by the grammar, not by an end token */
		grammar_matcher_free(mm);
		sched_request_release(r[i]);
	}
	/* an empty language: done before any token */
	const char *empty = "root ::= \"\"";
	grammar *g3 = grammar_compile(gv, empty, strlen(empty), err, sizeof err);
	ck_assert_ptr_nonnull(g3);
	sched_request_params e = req_params(prompt, NP, MAX);
	e.grammar = g3;
	sched_request *re;
	ck_assert_int_eq(sched_submit(sch, &e, 1, &re, err, sizeof err), SCHED_OK);
	sched_result rr = wait_end(re);
	ck_assert_int_eq(rr.finish, SCHED_FINISH_STOP);
	ck_assert_int_eq(rr.n_tokens, 0);
	ck_assert(rr.grammar_complete);
	sched_request_release(re);
	/* a grammar compiled for another width is refused */
	grammar_vocab *gv2 = grammar_vocab_new(tk, vocab + 1, err, sizeof err);
	grammar *g4 = grammar_compile(gv2, empty, strlen(empty), err, sizeof err);
	e.grammar = g4;
	ck_assert_int_eq(sched_submit(sch, &e, 1, &re, err, sizeof err), SCHED_ERR_INVALID);
	ck_assert_msg(strstr(err, "logits columns") != NULL, "%s", err);
	sched_metrics_get(sch, &m);
	ck_assert_int_eq(m.constrained_requests - m0.constrained_requests, (uint64_t)n_constrained + 1);
	ck_assert_uint_ge(m.grammar_mask.count - m0.grammar_mask.count, 1);
	ck_assert_int_eq(m.constrained_errors - m0.constrained_errors, 0);
	/* the requests hold their own references: the grammars outlive them only as long as we keep ours */
	grammar_unref(g);
	grammar_unref(g2);
	grammar_unref(g3);
	grammar_unref(g4);
	grammar_vocab_free(gv);
	grammar_vocab_free(gv2);
	tokenizer_free(tk);
}
END_TEST

static Suite *scheduler_suite(void)
{
	Suite *s = suite_create("scheduler");
	TCase *tc = tcase_create("scheduler");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_finish_reasons);
	tcase_add_test(tc, test_sampling_fields);
	tcase_add_test(tc, test_constrained);
	tcase_add_test(tc, test_stop_strings);
	tcase_add_test(tc, test_prompt_logprobs);
	tcase_add_test(tc, test_cancel_frees_pages);
	tcase_add_test(tc, test_cancel_running_and_waiting);
	tcase_add_test(tc, test_queue_full);
	tcase_add_test(tc, test_invalid);
	tcase_add_test(tc, test_metrics);
	tcase_add_test(tc, test_kv_gauge);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(scheduler_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
