/* tests/check_scheduler.c — Check suite for engine/scheduler: concurrent submitters get exactly the tokens a lone
 * run gives (greedy and seeded, chunked prompts, n choices sharing one prefill through engine_seq_fork), prompt
 * log-probabilities equal the engine's own log-softmax, finish reasons, cancellation frees pages, the queue bound,
 * first come first served under a KV budget, stop strings decided on the engine thread, invalid submissions. No HTTP. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "models/tokenizer.h"
#include "tests/test_env.h"

#define CTX 256
#define SLOTS 4

static const char *model_dir(void)
{
	static char dir[1024];
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", testdata());
	return dir;
}

static engine_params eparams(void)
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

static void start_budget(int32_t queue_length, int32_t step_delay_us, int64_t kv_budget_bytes)
{
	char err[512];
	engine_params ep = eparams();
	ep.kv_budget_bytes = kv_budget_bytes;
	ck_assert_msg(engine_init(&eng, model_dir(), &ep, err, sizeof err) == 0, "%s", err);
	sched_params sp = { .max_seqs = SLOTS, .queue_length = queue_length, .step_tokens = 64,
	                    .step_delay_us = step_delay_us };
	ck_assert_msg(sched_init(&sch, eng, &ep, &sp, err, sizeof err) == 0, "%s", err);
}

static void start(int32_t queue_length, int32_t step_delay_us)
{
	start_budget(queue_length, step_delay_us, 0);
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void setup(void)
{
	char err[512];
	engine_params ep = eparams();
	ck_assert_msg(engine_init(&ref_eng, model_dir(), &ep, err, sizeof err) == 0, "%s", err);
	start(16, 0);
}

static void teardown(void)
{
	sched_free(sch);
	engine_free(eng);
	engine_free(ref_eng);
	sch = NULL;
	eng = ref_eng = NULL;
}

/* log_softmax(x)[id] and the n_top best (lower id first among equals), as the scheduler computes them from a whole
 * row (its logprob_fill): the same expressions, so equal rows give equal floats. */
static void ref_logprobs(const float *x, int32_t vocab, int32_t id, int32_t n_top, float *lp, int32_t *ids, float *lps)
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
static int32_t lone_run_lp(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens, const sampler_params *sp,
                           const int32_t *stop_ids, int32_t n_stop, int32_t *out, int32_t n_top, float *lp,
                           int32_t *lp_ids, float *lp_top)
{
	char err[256];
	const int32_t vocab = engine_config(ref_eng)->vocab_size;
	float *logits = malloc((size_t)vocab * sizeof *logits);
	sampler smp;
	ck_assert_int_eq(sampler_init(&smp, sp, vocab), 0);
	int32_t seq = engine_seq_open(ref_eng, NULL, err, sizeof err);
	ck_assert_int_ge(seq, 0);
	engine_item it = { seq, prompt, n_prompt, false };
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
		engine_item step = { seq, &id, 1, false };
		ck_assert_msg(engine_forward(ref_eng, &step, 1, logits, err, sizeof err) == 0, "%s", err);
	}
	engine_seq_close(ref_eng, seq);
	sampler_free(&smp);
	free(logits);
	return n;
}

static int32_t lone_run(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens, const sampler_params *sp,
                        const int32_t *stop_ids, int32_t n_stop, int32_t *out)
{
	return lone_run_lp(prompt, n_prompt, max_tokens, sp, stop_ids, n_stop, out, 0, NULL, NULL, NULL);
}

static void make_prompt(int32_t *p, int32_t n, uint32_t seed)
{
	for (int32_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (int32_t)((seed >> 8) % 2048);
	}
}

static sched_request_params req_params(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens)
{
	sched_request_params rp = { 0 };
	rp.prompt = prompt;
	rp.n_prompt = n_prompt;
	rp.max_tokens = max_tokens;
	rp.sampling.top_p = 1;
	rp.logprobs = -1;
	return rp;
}

static sched_result wait_end(sched_request *r)
{
	sched_view v = { 0 };
	while (v.finish == SCHED_FINISH_NONE)
		sched_request_wait(r, v.version, 5000, &v);
	sched_result res;
	ck_assert(sched_request_result(r, &res));
	return res;
}

/* ---- concurrency: every submitter sees the lone run's tokens ---- */

typedef struct submitter {
	int32_t index;
	sampler_params sp;
	int32_t n_prompt, max_tokens;
	int32_t prompt[200];
	int32_t got[64], n_got;
	sched_finish finish;
} submitter;

static void *submit_main(void *arg)
{
	submitter *t = arg;
	char err[256];
	sched_request_params rp = req_params(t->prompt, t->n_prompt, t->max_tokens);
	rp.sampling = t->sp;
	sched_request *r;
	sched_status st;
	while ((st = sched_submit(sch, &rp, 1, &r, err, sizeof err)) == SCHED_ERR_QUEUE_FULL)
		usleep(1000);
	ck_assert_msg(st == SCHED_OK, "%s", err);
	sched_result res = wait_end(r);
	t->finish = res.finish;
	t->n_got = res.n_tokens;
	memcpy(t->got, sched_request_tokens(r), (size_t)res.n_tokens * sizeof *t->got);
	sched_request_release(r);
	return NULL;
}

static void run_concurrent(float temperature)
{
	enum { N = 10 };
	submitter subs[N];
	pthread_t th[N];
	for (int32_t i = 0; i < N; i++) {
		submitter *t = &subs[i];
		memset(t, 0, sizeof *t);
		t->index = i;
		t->n_prompt = 3 + i * 19;   /* up to 174 tokens: several prompts take more than one 64-token chunk */
		t->max_tokens = 24 + i;
		make_prompt(t->prompt, t->n_prompt, 77u + (uint32_t)i);
		t->sp.temperature = temperature;
		t->sp.top_p = temperature > 0 ? 0.95f : 1;
		t->sp.top_k = temperature > 0 ? 40 : 0;
		t->sp.seed = 1000 + (uint64_t)i;
	}
	for (int32_t i = 0; i < N; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, submit_main, &subs[i]), 0);
	for (int32_t i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	for (int32_t i = 0; i < N; i++) {
		submitter *t = &subs[i];
		int32_t want[64];
		int32_t n = lone_run(t->prompt, t->n_prompt, t->max_tokens, &t->sp, NULL, 0, want);
		ck_assert_int_eq(t->finish, SCHED_FINISH_LENGTH);
		ck_assert_int_eq(t->n_got, n);
		for (int32_t j = 0; j < n; j++)
			ck_assert_msg(t->got[j] == want[j], "submitter %d token %d: %d, lone run %d", i, j, t->got[j], want[j]);
	}
}

START_TEST(test_concurrent_greedy)
{
	run_concurrent(0);
}
END_TEST

START_TEST(test_concurrent_seeded)
{
	run_concurrent(0.9f);
}
END_TEST

/* n choices from one submission: seeds seed, seed+1, …, each equal to its lone run; the prompt is processed once
 * (the others fork its sequence), also when it takes several chunks and when every choice wants its log-probabilities
 * (loop 1: then they are copied from the first). Each choice's stats are those of a lone run. */
START_TEST(test_choices)
{
	enum { N = 3, NP = 150 };
	int32_t prompt[NP];
	make_prompt(prompt, NP, 5);
	sched_request_params rp[N];
	for (int32_t i = 0; i < N; i++) {
		rp[i] = req_params(prompt, NP, 20);
		rp[i].sampling.temperature = 1.0f;
		rp[i].sampling.seed = 42 + (uint64_t)i;
		rp[i].logprobs = _i ? 2 : -1;
		rp[i].prompt_logprobs = _i == 1;
	}
	sched_request *r[N];
	char err[256];
	ck_assert_int_eq(sched_submit(sch, rp, N, r, err, sizeof err), SCHED_OK);
	sched_result res[N];
	for (int32_t i = 0; i < N; i++) {
		res[i] = wait_end(r[i]);
		int32_t want[20];
		int32_t n = lone_run(prompt, NP, 20, &rp[i].sampling, NULL, 0, want);
		ck_assert_int_eq(res[i].n_tokens, n);
		ck_assert_mem_eq(sched_request_tokens(r[i]), want, (size_t)n * sizeof *want);
		ck_assert_int_eq(res[i].stats.n_positions, NP + 19);
		ck_assert(res[i].stats.attn_products == res[0].stats.attn_products);
		ck_assert_int_eq(res[i].stats.kv_bytes_peak, res[0].stats.kv_bytes_peak);
	}
	sched_metrics m;
	sched_metrics_get(sch, &m);
	ck_assert_uint_eq(m.prompt_tokens, NP);
	ck_assert_uint_eq(m.generation_tokens, N * 20);
	if (_i == 1) {
		const sched_logprob_rows *a = sched_request_prompt_logprobs(r[0]);
		for (int32_t i = 1; i < N; i++) {
			const sched_logprob_rows *b = sched_request_prompt_logprobs(r[i]);
			ck_assert_ptr_nonnull(b);
			ck_assert_mem_eq(a->logprob + 1, b->logprob + 1, (NP - 1) * sizeof *a->logprob);
			ck_assert_mem_eq(a->top_ids + 2, b->top_ids + 2, (NP - 1) * 2 * sizeof *a->top_ids);
		}
	}
	for (int32_t i = 0; i < N; i++)
		sched_request_release(r[i]);
}
END_TEST

/* The first choice (the one that prefills) is cancelled in the middle of the prompt: the next takes over the prefill,
 * the last still forks it, and both give their lone runs' tokens. */
START_TEST(test_choices_leader_cancelled)
{
	teardown();
	char err[512];
	engine_params ep = eparams();
	ck_assert_msg(engine_init(&ref_eng, model_dir(), &ep, err, sizeof err) == 0, "%s", err);
	start(16, 20000);
	enum { N = 3, NP = 200 };   /* four prompt steps of 64 */
	int32_t prompt[NP];
	make_prompt(prompt, NP, 6);
	sched_request_params rp[N];
	for (int32_t i = 0; i < N; i++) {
		rp[i] = req_params(prompt, NP, 10);
		rp[i].sampling.temperature = 0.8f;
		rp[i].sampling.seed = 7 + (uint64_t)i;
	}
	sched_request *r[N];
	ck_assert_int_eq(sched_submit(sch, rp, N, r, err, sizeof err), SCHED_OK);
	sched_metrics m;
	do {
		usleep(2000);
		sched_metrics_get(sch, &m);
	} while (m.prompt_tokens == 0);   /* the first chunk went through */
	sched_request_cancel(r[0]);
	sched_result res = wait_end(r[0]);
	ck_assert_int_eq(res.finish, SCHED_FINISH_CANCELLED);
	for (int32_t i = 1; i < N; i++) {
		res = wait_end(r[i]);
		int32_t want[10];
		int32_t n = lone_run(prompt, NP, 10, &rp[i].sampling, NULL, 0, want);
		ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
		ck_assert_int_eq(res.n_tokens, n);
		ck_assert_mem_eq(sched_request_tokens(r[i]), want, (size_t)n * sizeof *want);
	}
	sched_metrics_get(sch, &m);
	ck_assert_uint_lt(m.prompt_tokens, 2 * NP);   /* the cancelled part, then one whole prefill for the other two */
	ck_assert_int_eq(m.kv_bytes_used, 0);
	for (int32_t i = 0; i < N; i++)
		sched_request_release(r[i]);
}
END_TEST

/* ---- engine_seq_fork: a copy that goes on exactly as its source would ---- */

/* qwen3-small-a with an aah.json: an adaptive regime (probes every 3 decode steps) whose rings wrap, so that the fork
 * copies wrapped rings and a policy that has moved. */
static void make_aah_dir(char *dir, size_t n)
{
	snprintf(dir, n, "/tmp/aah-sched-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	const char *files[] = { "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json" };
	for (size_t i = 0; i < 4; i++) {
		char src[2048], dst[2048], abs_src[4096];
		snprintf(src, sizeof src, "%s/%s", model_dir(), files[i]);
		ck_assert_ptr_nonnull(realpath(src, abs_src));
		snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
		ck_assert_int_eq(symlink(abs_src, dst), 0);
	}
	char p[2048];
	snprintf(p, sizeof p, "%s/aah.json", dir);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fputs("{\"version\":1,\"context_length\":256,\"candidate_windows\":[16,32,64,128],\"default_regime\":\"ad\","
	      "\"regimes\":{\"ad\":{\"policy\":{\"kind\":\"adaptive\",\"control_interval\":3,\"feature_ema\":0.5,"
	      "\"resolution_ema\":0.5,\"coverage\":0.6},\"layers\":["
	      "{\"groups\":[{\"kv_heads\":[0],\"window\":32,\"capacity\":64},{\"kv_heads\":[1],\"window\":64,\"capacity\":128}]},"
	      "{\"groups\":[{\"kv_heads\":[0,1],\"window\":16,\"capacity\":32}]}]}}}", f);
	fclose(f);
}

static void remove_dir(const char *dir)
{
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static void stats_eq(const engine_seq_stats *a, const engine_seq_stats *b)
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

/* An adaptive sequence whose prompt the step budget splits gives what it gives fed whole: its windows follow probes
 * every 3 generated tokens, and a prompt's last token fed alone (positions > 0, one token) once counted as a generated
 * one, moving every probe. Budget 4: prompts of 9 and 13 tokens were split 4 + 4 + 1 and 4 + 4 + 4 + 1. */
START_TEST(test_adaptive_split_prompt)
{
	char dir[256], err[512];
	make_aah_dir(dir, sizeof dir);
	engine_params ep = eparams();
	engine *ea, *er;
	ck_assert_msg(engine_init(&ea, dir, &ep, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(engine_init(&er, dir, &ep, err, sizeof err) == 0, "%s", err);
	sched_params sp = { .max_seqs = SLOTS, .queue_length = 8, .step_tokens = 4 };
	sched *sa;
	ck_assert_msg(sched_init(&sa, ea, &ep, &sp, err, sizeof err) == 0, "%s", err);
	const int32_t V = engine_config(er)->vocab_size, lens[2] = { 9, 13 }, GEN = 40;
	float *logits = malloc((size_t)V * sizeof *logits);
	for (int32_t k = 0; k < 2; k++) {
		int32_t prompt[16], want[40];
		make_prompt(prompt, lens[k], 700u + (uint32_t)k);
		sched_request_params rp = req_params(prompt, lens[k], GEN);
		sched_request *r;
		ck_assert_int_eq(sched_submit(sa, &rp, 1, &r, err, sizeof err), SCHED_OK);
		sched_result res = wait_end(r);
		ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
		/* the reference: the whole prompt in one item, then one token per step */
		int32_t seq = engine_seq_open(er, NULL, err, sizeof err);
		engine_item it = { seq, prompt, lens[k], false };
		ck_assert_msg(engine_forward(er, &it, 1, logits, err, sizeof err) == 0, "%s", err);
		for (int32_t n = 0; n < GEN; n++) {
			want[n] = sampler_argmax(logits, V);
			engine_item step = { seq, &want[n], 1, false };
			if (n + 1 < GEN)
				ck_assert_msg(engine_forward(er, &step, 1, logits, err, sizeof err) == 0, "%s", err);
		}
		engine_seq_stats st;
		engine_seq_stats_get(er, seq, &st);
		engine_seq_close(er, seq);
		ck_assert_int_eq(res.n_tokens, GEN);
		ck_assert_mem_eq(sched_request_tokens(r), want, GEN * sizeof *want);
		ck_assert(res.has_stats);
		ck_assert_msg(res.stats.acr == st.acr && res.stats.attn_products == st.attn_products,
		              "prompt %d: ACR %.6f / %llu products split, %.6f / %llu whole", lens[k], res.stats.acr,
		              (unsigned long long)res.stats.attn_products, st.acr, (unsigned long long)st.attn_products);
		ck_assert(st.acr < 1);   /* the windows did move */
		sched_request_release(r);
	}
	free(logits);
	sched_free(sa);
	engine_free(ea);
	engine_free(er);
	remove_dir(dir);
}
END_TEST

START_TEST(test_engine_fork)
{
	char dir[256], err[512];
	make_aah_dir(dir, sizeof dir);
	engine_params ep = { .n_threads = 1, .max_seqs = 3, .ctx_len = CTX, .max_batch_tokens = 64 };
	engine *a, *b;
	ck_assert_msg(engine_init(&a, dir, &ep, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(engine_init(&b, dir, &ep, err, sizeof err) == 0, "%s", err);
	const int32_t V = engine_config(a)->vocab_size;
	float *la = malloc(2 * (size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
	int32_t ids[220];
	make_prompt(ids, 220, 99);
	/* a: 150 prompt tokens (three chunks), 25 decode steps (probes move the windows), then fork */
	int32_t sa = engine_seq_open(a, "ad", err, sizeof err), sb = engine_seq_open(b, "ad", err, sizeof err);
	engine_item it = { sa, ids, 150, false };
	ck_assert_msg(engine_forward(a, &it, 1, la, err, sizeof err) == 0, "%s", err);
	it.seq = sb;
	ck_assert_msg(engine_forward(b, &it, 1, lb, err, sizeof err) == 0, "%s", err);
	for (int32_t i = 150; i < 175; i++) {
		engine_item s1 = { sa, &ids[i], 1, false }, s2 = { sb, &ids[i], 1, false };
		ck_assert(engine_forward(a, &s1, 1, la, err, sizeof err) == 0);
		ck_assert(engine_forward(b, &s2, 1, lb, err, sizeof err) == 0);
	}
	ck_assert_int_eq(engine_seq_fork(a, 2, err, sizeof err), -1);   /* not open */
	int32_t fa = engine_seq_fork(a, sa, err, sizeof err);
	ck_assert_msg(fa >= 0, "%s", err);
	ck_assert_int_eq(engine_seq_len(a, fa), 175);
	ck_assert_int_eq(engine_seq_kv_bytes(a, fa), engine_seq_kv_bytes(a, sa));
	engine_seq_stats st_src, st_fork, st_ref;
	engine_seq_stats_get(a, sa, &st_src);
	engine_seq_stats_get(a, fa, &st_fork);
	stats_eq(&st_src, &st_fork);
	ck_assert(st_src.acr < 1);
	/* both go on as b's lone sequence does, batched together (one product per projection) */
	for (int32_t i = 175; i < 190; i++) {
		engine_item two[2] = { { sa, &ids[i], 1, false }, { fa, &ids[i], 1, false } };
		engine_item s2 = { sb, &ids[i], 1, false };
		ck_assert_msg(engine_forward(a, two, 2, la, err, sizeof err) == 0, "%s", err);
		ck_assert(engine_forward(b, &s2, 1, lb, err, sizeof err) == 0);
		ck_assert_msg(memcmp(la, lb, (size_t)V * sizeof *la) == 0, "source differs at %d", i);
		ck_assert_msg(memcmp(la + V, lb, (size_t)V * sizeof *la) == 0, "fork differs at %d", i);
	}
	engine_seq_close(a, sa);   /* the fork's pages are its own */
	for (int32_t i = 190; i < 220; i++) {
		engine_item s1 = { fa, &ids[i], 1, false }, s2 = { sb, &ids[i], 1, false };
		ck_assert(engine_forward(a, &s1, 1, la, err, sizeof err) == 0);
		ck_assert(engine_forward(b, &s2, 1, lb, err, sizeof err) == 0);
		ck_assert_msg(memcmp(la, lb, (size_t)V * sizeof *la) == 0, "fork differs at %d", i);
	}
	engine_seq_stats_get(a, fa, &st_fork);
	engine_seq_stats_get(b, sb, &st_ref);
	stats_eq(&st_fork, &st_ref);
	/* every slot taken: refused, nothing changes */
	ck_assert_int_ge(engine_seq_open(a, NULL, err, sizeof err), 0);
	ck_assert_int_ge(engine_seq_open(a, NULL, err, sizeof err), 0);
	ck_assert_int_eq(engine_seq_fork(a, fa, err, sizeof err), -1);
	ck_assert_ptr_nonnull(strstr(err, "in use"));
	engine_free(a);
	engine_free(b);
	free(la);
	free(lb);
	remove_dir(dir);
}
END_TEST

/* A fork shares its source's pages (copy-on-write) and takes none; the first write that must copy a shared page needs a
 * free one, and without it that step is refused with nothing taken, while the source goes on. */
START_TEST(test_engine_fork_pool_full)
{
	char err[512];
	engine_params ep = eparams();
	ep.kv_budget_bytes = 0;
	engine *e;
	ck_assert_msg(engine_init(&e, model_dir(), &ep, err, sizeof err) == 0, "%s", err);
	int64_t pool = engine_kv_pool_pages(e), page = engine_kv_page_bytes(e);
	engine_free(e);
	/* room for one sequence of 200 positions and 3 pages: fewer than its 4 rings' last pages */
	ep.kv_budget_bytes = (engine_regime_kv_pages(ref_eng, NULL, 200) + 3) * page;
	ck_assert_int_lt(ep.kv_budget_bytes / page, pool);
	ck_assert_int_eq(engine_config(ref_eng)->n_layers * engine_config(ref_eng)->n_kv_heads, 4);
	ck_assert_msg(engine_init(&e, model_dir(), &ep, err, sizeof err) == 0, "%s", err);
	int32_t ids[200];
	make_prompt(ids, 200, 3);
	float *logits = malloc((size_t)engine_config(e)->vocab_size * sizeof *logits);
	int32_t s = engine_seq_open(e, NULL, err, sizeof err);
	engine_item it = { s, ids, 198, false };   /* 198: the last page of every ring is partly written */
	ck_assert(engine_forward(e, &it, 1, logits, err, sizeof err) == 0);
	int64_t held = engine_seq_kv_bytes(e, s), used = engine_kv_pages_used(e);
	int32_t f = engine_seq_fork(e, s, err, sizeof err);
	ck_assert_msg(f >= 0, "%s", err);
	ck_assert_int_eq(engine_kv_pages_used(e), used);   /* shared */
	ck_assert_int_eq(engine_seq_kv_bytes(e, f), held);
	/* writing the fork's shared last pages needs a copy of each: more than the 3 free pages */
	engine_item step = { f, ids + 198, 2, false };
	ck_assert_int_eq(engine_forward(e, &step, 1, logits, err, sizeof err), -1);
	ck_assert_ptr_nonnull(strstr(err, "KV cache full"));
	ck_assert_int_eq(engine_seq_len(e, f), 198);
	ck_assert_int_eq(engine_kv_pages_used(e), used);
	/* closing the fork makes the source the pages' sole holder again: it writes in place */
	engine_seq_close(e, f);
	ck_assert_int_eq(engine_kv_pages_used(e), used);
	engine_item step_s = { s, ids + 198, 2, false };
	ck_assert(engine_forward(e, &step_s, 1, logits, err, sizeof err) == 0);
	ck_assert_int_eq(engine_kv_pages_used(e), used);
	engine_seq_close(e, s);
	ck_assert_int_eq(engine_kv_pages_used(e), 0);
	free(logits);
	engine_free(e);
}
END_TEST

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

/* Three choices (one prefill, two forks) of an adaptive regime, with logprobs, each with stop strings taken across a
 * token boundary of its own text: each ends with finish STOP at exactly the token the naive rule names — none decoded
 * after it, whatever the timing — and its tokens, log-probabilities and stats (ACR, branch usage, attention products,
 * KV peak) equal those of the same submission with max_tokens cut to that token and no stop strings; the counters
 * count no token beyond. A stop met by the last token allowed is a stop, not a length. Without the scheduler's
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
	remove_dir(dir);
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
	engine_item it = { seq, prompt, NP, true };
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

/* ---- fairness: first come, first served under the KV budget ---- */

/* A long request that must wait for pages is not overtaken by the short ones that arrive after it, though they
 * would fit at once: each is admitted no earlier than the long one, and the long one completes (no starvation). */
START_TEST(test_fcfs_no_starvation)
{
	teardown();
	char err[512];
	engine_params ep = eparams();
	ck_assert_msg(engine_init(&ref_eng, model_dir(), &ep, err, sizeof err) == 0, "%s", err);
	enum { NS = 14, LONG_PROMPT = 200, LONG_GEN = 40, SHORT_PROMPT = 10, SHORT_GEN = 20 };
	int64_t long_pages = engine_regime_kv_pages(ref_eng, NULL, LONG_PROMPT + LONG_GEN);
	int64_t short_pages = engine_regime_kv_pages(ref_eng, NULL, SHORT_PROMPT + SHORT_GEN);
	/* 3 shorts and the long one do not fit together; the long one and 2 shorts do */
	int64_t pool = long_pages + 2 * short_pages;
	ck_assert_int_lt(pool, long_pages + 3 * short_pages);
	start_budget(32, 3000, pool * (int64_t)(2 * 16 * engine_config(ref_eng)->head_dim * sizeof(float)));
	int32_t lp[LONG_PROMPT], sp[NS][SHORT_PROMPT];
	make_prompt(lp, LONG_PROMPT, 1);
	sched_request *shorts[NS], *lr;
	double t_before[NS], t_after[NS], l_before = 0, l_after = 0;
	for (int32_t i = 0; i < NS; i++) {
		make_prompt(sp[i], SHORT_PROMPT, 100u + (uint32_t)i);
		sched_request_params rp = req_params(sp[i], SHORT_PROMPT, SHORT_GEN);
		if (i == 3) {   /* three shorts are running: the long one arrives, then the rest, one every 10 ms */
			sched_request_params lrp = req_params(lp, LONG_PROMPT, LONG_GEN);
			l_before = mono_s();
			ck_assert_int_eq(sched_submit(sch, &lrp, 1, &lr, err, sizeof err), SCHED_OK);
			l_after = mono_s();
		}
		t_before[i] = mono_s();
		ck_assert_int_eq(sched_submit(sch, &rp, 1, &shorts[i], err, sizeof err), SCHED_OK);
		t_after[i] = mono_s();
		if (i < 3) {
			sched_view v = { 0 };
			while (v.n_tokens < 1)
				sched_request_wait(shorts[i], v.version, 5000, &v);
		} else {
			usleep(10000);
		}
	}
	sched_result lres = wait_end(lr);
	ck_assert_int_eq(lres.finish, SCHED_FINISH_LENGTH);
	ck_assert_int_eq(lres.n_tokens, LONG_GEN);
	double l_admit_lo = l_before + lres.queue_s, l_admit_hi = l_after + lres.queue_s;
	ck_assert(lres.queue_s > 0.005);   /* it did wait for pages */
	for (int32_t i = 0; i < NS; i++) {
		sched_result res = wait_end(shorts[i]);
		ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
		if (i < 3)
			ck_assert(t_before[i] + res.queue_s <= l_admit_hi);
		else
			ck_assert_msg(t_after[i] + res.queue_s >= l_admit_lo - 1e-3,
			              "short %d admitted %.1f ms before the long one that arrived first", i,
			              (l_admit_lo - t_after[i] - res.queue_s) * 1e3);
		sched_request_release(shorts[i]);
	}
	sched_request_release(lr);
	sched_metrics m;
	sched_metrics_get(sch, &m);
	ck_assert_int_eq(m.kv_bytes_used, 0);
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

/* ---- device sampling (AAH_DEVICE_SAMPLING=1 on the CPU: run_tests.sh runs this suite both ways) ---- */

/* Every kind of sampler at once, with and without logprobs, and two choices forking one prefill; once without a
 * vocab_limit and once with one (the server's case: the sampler's candidates then span fewer columns than the
 * log-probabilities): tokens and log-probabilities equal the lone runs' bit for bit, and the counters show which path
 * served them — on the device path candidates decided the greedy and top-k draws and their log-probabilities, and
 * rows were read back only where they could not (plain temperature sampling, penalties after the first token); on the
 * host path none of it happened. */
START_TEST(test_device_sampling)
{
	enum { N = 8, NT = 12, TOP = 3 };
	const int32_t vocab = engine_config(ref_eng)->vocab_size;
	const sampler_params kinds[N] = {
		{ .top_p = 1 },                                                           /* greedy */
		{ .top_p = 1 },                                                           /* greedy, logprobs */
		{ .temperature = 0.8f, .top_k = 20, .top_p = 1, .seed = 3 },
		{ .temperature = 1.0f, .top_p = 0.5f, .seed = 4 },
		{ .temperature = 1.2f, .top_p = 1, .min_p = 0.2f, .seed = 5 },
		{ .temperature = 0.9f, .top_p = 1, .seed = 6 },                           /* plain: every id may be drawn */
		{ .temperature = 0.7f, .top_k = 10, .top_p = 1, .presence_penalty = 0.5f, .seed = 7 },
		{ .temperature = 0.6f, .top_k = 5, .top_p = 0.9f, .seed = 8 },            /* two choices of it (below) */
	};
	const char *env = getenv("AAH_DEVICE_SAMPLING");
	const bool want_dev = env && *env ? strcmp(env, "0") != 0 : !engine_backend(eng)->iface.host_memory;
	sched_metrics m0 = { 0 }, m;
	for (int32_t phase = 0; phase < 2; phase++) {
		int32_t prompt[N][40];
		sched_request_params rp[N + 1];
		sched_request *r[N + 1];
		char err[256];
		for (int32_t i = 0; i < N; i++) {
			make_prompt(prompt[i], 5 + 4 * i, 300u + (uint32_t)(i + 10 * phase));
			rp[i] = req_params(prompt[i], 5 + 4 * i, NT);
			rp[i].sampling = kinds[i];
			rp[i].sampling.vocab_limit = phase ? vocab - 8 : 0;
			rp[i].logprobs = i % 2 ? TOP : -1;
		}
		rp[N] = rp[N - 1];
		rp[N].sampling.seed++;
		rp[N].logprobs = TOP;
		/* one submission, so that the engine admits the first SLOTS together whatever the machine's load: the two
		 * greedy ones (0 and 1) prefill in the same step and decode side by side to the end; the last two share a
		 * prompt and fork its prefill */
		ck_assert_int_eq(sched_submit(sch, rp, N + 1, r, err, sizeof err), SCHED_OK);
		for (int32_t i = 0; i <= N; i++) {
			sched_result res = wait_end(r[i]);
			int32_t want[NT], ids[NT * TOP];
			float lp[NT], lps[NT * TOP];
			int32_t n = lone_run_lp(rp[i].prompt, rp[i].n_prompt, NT, &rp[i].sampling, NULL, 0, want, TOP, lp, ids,
			                        lps);
			ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
			ck_assert_int_eq(res.n_tokens, n);
			ck_assert_mem_eq(sched_request_tokens(r[i]), want, (size_t)n * sizeof *want);
			const sched_logprob_rows *g = sched_request_token_logprobs(r[i]);
			if (rp[i].logprobs >= 0) {
				ck_assert_ptr_nonnull(g);
				ck_assert_mem_eq(g->logprob, lp, (size_t)n * sizeof *lp);
				ck_assert_mem_eq(g->top_ids, ids, (size_t)n * TOP * sizeof *ids);
				ck_assert_mem_eq(g->top_logprobs, lps, (size_t)n * TOP * sizeof *lps);
			}
			sched_request_release(r[i]);
		}
		sched_metrics_get(sch, &m);
		ck_assert_int_eq(m.device_sampling, want_dev);
		uint64_t gen = m.generation_tokens - m0.generation_tokens, draws = m.draws_from_top - m0.draws_from_top,
		         lps_top = m.logprobs_from_top - m0.logprobs_from_top,
		         fetched = m.logits_rows_fetched - m0.logits_rows_fetched;
		ck_assert_uint_eq(gen, (N + 1) * NT);
		if (want_dev) {
			/* greedy ×2, top-k 20, top-k 5 ×2 (the follower's first draw from its leader's row), the penalised first */
			ck_assert_uint_ge(draws, 5 * NT + 1);
			ck_assert_uint_ge(fetched, 2 * NT - 1);   /* plain sampling, the penalised after its first */
			ck_assert_uint_le(draws + fetched, gen);
			ck_assert_uint_ge(lps_top, 3 * NT);       /* the greedy one and the two top-k 5 */
		} else {
			ck_assert_uint_eq(draws, 0);
			ck_assert_uint_eq(lps_top, 0);
			ck_assert_uint_eq(fetched, 0);
			/* the two greedy requests, admitted together, decode side by side after their one prefill step: every
			 * token after the first is picked with the other's */
			ck_assert_uint_ge(m.draws_greedy_batched - m0.draws_greedy_batched, 2 * (NT - 1));
		}
		m0 = m;
	}
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
	ck_assert_uint_eq(m.regimes[0].sequences, 1);
	ck_assert(m.regimes[0].attn_products > 0 && m.regimes[0].attn_products <= m.regimes[0].attn_products_full);
	ck_assert(m.regimes[0].kv_bytes_peak > 0);
	ck_assert_double_eq_tol(m.regimes[0].acr_weighted / m.regimes[0].usage_total, res.stats.acr, 1e-9);
	ck_assert_int_eq(m.regimes[0].n_windows, 1);
}
END_TEST

static Suite *scheduler_suite(void)
{
	Suite *s = suite_create("scheduler");
	TCase *tc = tcase_create("scheduler");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_concurrent_greedy);
	tcase_add_test(tc, test_concurrent_seeded);
	tcase_add_loop_test(tc, test_choices, 0, 2);
	tcase_add_test(tc, test_choices_leader_cancelled);
	tcase_add_test(tc, test_engine_fork);
	tcase_add_test(tc, test_engine_fork_pool_full);
	tcase_add_test(tc, test_fcfs_no_starvation);
	tcase_add_test(tc, test_finish_reasons);
	tcase_add_test(tc, test_stop_strings);
	tcase_add_test(tc, test_prompt_logprobs);
	tcase_add_test(tc, test_cancel_frees_pages);
	tcase_add_test(tc, test_cancel_running_and_waiting);
	tcase_add_test(tc, test_queue_full);
	tcase_add_test(tc, test_invalid);
	tcase_add_test(tc, test_metrics);
	tcase_add_test(tc, test_kv_gauge);
	tcase_add_test(tc, test_device_sampling);
	tcase_add_test(tc, test_adaptive_split_prompt);
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
