/* tests/engine/sched_test.h — what the scheduler suites share (check_scheduler.c: finish reasons, stop strings,
 * log-probabilities, cancellation, the queue, invalid submissions, metrics; check_scheduler_batching.c: concurrency, n
 * choices, engine_seq_fork, first come first served, device sampling): the model, one engine under a scheduler and a
 * second for lone reference runs, the lone run itself, and small helpers. Included once per suite. */
#ifndef AAH_SCHED_TEST_H
#define AAH_SCHED_TEST_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "tests/test_env.h"


#define CTX 256
#define SLOTS 4

static inline const char *model_dir(void)
{
	static char dir[1024];
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", testdata());
	return dir;
}

static inline engine_params eparams(void)
{
	engine_params p = { 0 };
	p.n_threads = 1;
	p.max_seqs = SLOTS;
	p.ctx_len = CTX;
	p.max_batch_tokens = 64 + SLOTS;
	p.kv_dtype = AAH_DTYPE_F32;
	return p;
}

/* ---- fixture: one engine under a scheduler, and a second engine for lone reference runs ---- */

static engine *eng, *ref_eng;
static sched *sch;

static inline void start_budget(int32_t queue_length, int32_t step_delay_us, int64_t kv_budget_bytes)
{
	char err[512];
	engine_params ep = eparams();
	ep.kv_budget_bytes = kv_budget_bytes;
	ck_assert_msg(engine_init(&eng, model_dir(), &ep, err, sizeof err) == 0, "%s", err);
	sched_params sp = { .max_seqs = SLOTS, .queue_length = queue_length, .step_tokens = 64,
	                    .step_delay_us = step_delay_us };
	ck_assert_msg(sched_init(&sch, eng, &ep, &sp, err, sizeof err) == 0, "%s", err);
}

static inline void start(int32_t queue_length, int32_t step_delay_us)
{
	start_budget(queue_length, step_delay_us, 0);
}

static inline void setup(void)
{
	char err[512];
	engine_params ep = eparams();
	ck_assert_msg(engine_init(&ref_eng, model_dir(), &ep, err, sizeof err) == 0, "%s", err);
	start(16, 0);
}

static inline void teardown(void)
{
	sched_free(sch);
	engine_free(eng);
	engine_free(ref_eng);
	sch = NULL;
	eng = ref_eng = NULL;
}

/* log_softmax(x)[id] and the n_top best (lower id first among equals), as the scheduler computes them from a whole
 * row (its logprob_fill): the same expressions, so equal rows give equal floats. */
static inline void ref_logprobs(const float *x, int32_t vocab, int32_t id, int32_t n_top, float *lp, int32_t *ids,
                                float *lps)
{
	double m = -INFINITY, sum = 0;
	for (int32_t v = 0; v < vocab; v++)
		if (x[v] > m)
			m = x[v];
	for (int32_t v = 0; v < vocab; v++)
		sum += exp((double)x[v] - m);
	double lse = m + log(sum);
	*lp = (float)((double)x[id] - lse);
	for (int32_t j = 0; j < n_top; j++) {   /* the j-th largest: above the (j-1)-th in (value desc, id asc) order */
		int32_t best = -1;
		for (int32_t v = 0; v < vocab; v++) {
			bool after = j == 0 || x[v] < x[ids[j - 1]] || (x[v] == x[ids[j - 1]] && v > ids[j - 1]);
			if (after && (best < 0 || x[v] > x[best]))
				best = v;
		}
		ids[j] = best;
		lps[j] = (float)((double)x[best] - lse);
	}
}

/* The lone run: the whole prompt in one forward call, then one token per call, with the request's own sampler.
 * Returns the tokens generated (stopping at a stop id, not counted); with lp, each token's log-probability and its
 * n_top best (lp_ids, lp_top: n_top a token) as well. */
static inline int32_t lone_run_lp(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens,
                                  const sampler_params *sp, const int32_t *stop_ids, int32_t n_stop, int32_t *out,
                                  int32_t n_top, float *lp, int32_t *lp_ids, float *lp_top)
{
	char err[256];
	const int32_t vocab = engine_config(ref_eng)->vocab_size;
	float *logits = malloc((size_t)vocab * sizeof *logits);
	sampler smp;
	ck_assert_int_eq(sampler_init(&smp, sp, vocab), 0);
	sampler_prompt(&smp, prompt, n_prompt);   /* as the scheduler does: the repetition penalty counts the prompt */
	int32_t seq = engine_seq_open(ref_eng, NULL, err, sizeof err);
	ck_assert_int_ge(seq, 0);
	engine_item it = { seq, prompt, n_prompt, false, false, false };
	ck_assert_msg(engine_forward(ref_eng, &it, 1, logits, err, sizeof err) == 0, "%s", err);
	int32_t n = 0;
	while (n < max_tokens) {
		int32_t id = sampler_sample(&smp, logits);
		sampler_accept(&smp, id);
		bool stop = false;
		for (int32_t i = 0; i < n_stop; i++)
			stop |= id == stop_ids[i];
		if (stop)
			break;
		if (lp)
			ref_logprobs(logits, vocab, id, n_top, lp + n, lp_ids + (int64_t)n * n_top, lp_top + (int64_t)n * n_top);
		out[n++] = id;
		if (n == max_tokens || n_prompt + n > CTX)
			break;
		engine_item step = { seq, &id, 1, false, false, false };
		ck_assert_msg(engine_forward(ref_eng, &step, 1, logits, err, sizeof err) == 0, "%s", err);
	}
	engine_seq_close(ref_eng, seq);
	sampler_free(&smp);
	free(logits);
	return n;
}

static inline int32_t lone_run(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens, const sampler_params *sp,
                               const int32_t *stop_ids, int32_t n_stop, int32_t *out)
{
	return lone_run_lp(prompt, n_prompt, max_tokens, sp, stop_ids, n_stop, out, 0, NULL, NULL, NULL);
}

static inline void make_prompt(int32_t *p, int32_t n, uint32_t seed)
{
	for (int32_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (int32_t)((seed >> 8) % 2048);
	}
}

static inline sched_request_params req_params(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens)
{
	sched_request_params rp = { 0 };
	rp.prompt = prompt;
	rp.n_prompt = n_prompt;
	rp.max_tokens = max_tokens;
	rp.sampling.top_p = 1;
	rp.logprobs = -1;
	return rp;
}

static inline sched_result wait_end(sched_request *r)
{
	sched_view v = { 0 };
	while (v.finish == SCHED_FINISH_NONE)
		sched_request_wait(r, v.version, 5000, &v);
	sched_result res;
	ck_assert(sched_request_result(r, &res));
	return res;
}

/* qwen3-small-a with an aah.json: an adaptive regime (probes every 3 decode steps) whose rings wrap, so that the fork
 * copies wrapped rings and a policy that has moved. */
static inline void make_aah_dir(char *dir, size_t n)
{
	make_model_dir(dir, n, "sched", "qwen3-small-a",
	               "{\"version\":1,\"context_length\":256,\"candidate_windows\":[16,32,64,128],\"default_regime\":\"ad\","
	               "\"regimes\":{\"ad\":{\"policy\":{\"kind\":\"adaptive\",\"control_interval\":3,\"feature_ema\":0.5,"
	               "\"resolution_ema\":0.5,\"coverage\":0.6},\"layers\":["
	               "{\"groups\":[{\"kv_heads\":[0],\"window\":32,\"capacity\":64},{\"kv_heads\":[1],\"window\":64,\"capacity\":128}]},"
	               "{\"groups\":[{\"kv_heads\":[0,1],\"window\":16,\"capacity\":32}]}]}}}");
}

static inline void stats_eq(const engine_seq_stats *a, const engine_seq_stats *b)
{
	ck_assert_str_eq(a->regime, b->regime);
	ck_assert_int_eq(a->n_positions, b->n_positions);
	ck_assert(a->attn_products == b->attn_products && a->attn_products_full == b->attn_products_full);
	ck_assert_int_eq(a->kv_bytes, b->kv_bytes);
	ck_assert_int_eq(a->kv_bytes_peak, b->kv_bytes_peak);
	ck_assert_int_eq(a->n_usage, b->n_usage);
	ck_assert_mem_eq(a->usage, b->usage, (size_t)a->n_usage * sizeof *a->usage);
	ck_assert(a->acr == b->acr);
}

#endif
