/* tests/engine/check_scheduler_batching.c — Check suite for engine/scheduler's batching: concurrent submitters get exactly
 * the tokens a lone run gives (greedy and seeded, chunked prompts), n choices share one prefill through engine_seq_fork
 * (also when their leader is cancelled, and a fork is exact on wrapped adaptive rings and a full pool), a split prompt
 * gives what it gives whole, first come first served under a KV budget, and device sampling (AAH_DEVICE_SAMPLING=1)
 * equals the host path. No HTTP; the fixture is tests/engine/sched_test.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/engine/sched_test.h"

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
		engine_item it = { seq, prompt, lens[k], false, false, false };
		ck_assert_msg(engine_forward(er, &it, 1, logits, err, sizeof err) == 0, "%s", err);
		for (int32_t n = 0; n < GEN; n++) {
			want[n] = sampler_argmax(logits, V);
			engine_item step = { seq, &want[n], 1, false, false, false };
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
	remove_model_dir(dir);
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
	engine_item it = { sa, ids, 150, false, false, false };
	ck_assert_msg(engine_forward(a, &it, 1, la, err, sizeof err) == 0, "%s", err);
	it.seq = sb;
	ck_assert_msg(engine_forward(b, &it, 1, lb, err, sizeof err) == 0, "%s", err);
	for (int32_t i = 150; i < 175; i++) {
		engine_item s1 = { sa, &ids[i], 1, false, false, false }, s2 = { sb, &ids[i], 1, false, false, false };
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
		engine_item two[2] = { { sa, &ids[i], 1, false, false, false }, { fa, &ids[i], 1, false, false, false } };
		engine_item s2 = { sb, &ids[i], 1, false, false, false };
		ck_assert_msg(engine_forward(a, two, 2, la, err, sizeof err) == 0, "%s", err);
		ck_assert(engine_forward(b, &s2, 1, lb, err, sizeof err) == 0);
		ck_assert_msg(memcmp(la, lb, (size_t)V * sizeof *la) == 0, "source differs at %d", i);
		ck_assert_msg(memcmp(la + V, lb, (size_t)V * sizeof *la) == 0, "fork differs at %d", i);
	}
	engine_seq_close(a, sa);   /* the fork's pages are its own */
	for (int32_t i = 190; i < 220; i++) {
		engine_item s1 = { fa, &ids[i], 1, false, false, false }, s2 = { sb, &ids[i], 1, false, false, false };
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
	remove_model_dir(dir);
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
	engine_item it = { s, ids, 198, false, false, false };   /* 198: the last page of every ring is partly written */
	ck_assert(engine_forward(e, &it, 1, logits, err, sizeof err) == 0);
	int64_t held = engine_seq_kv_bytes(e, s), used = engine_kv_pages_used(e);
	int32_t f = engine_seq_fork(e, s, err, sizeof err);
	ck_assert_msg(f >= 0, "%s", err);
	ck_assert_int_eq(engine_kv_pages_used(e), used);   /* shared */
	ck_assert_int_eq(engine_seq_kv_bytes(e, f), held);
	/* writing the fork's shared last pages needs a copy of each: more than the 3 free pages */
	engine_item step = { f, ids + 198, 2, false, false, false };
	ck_assert_int_eq(engine_forward(e, &step, 1, logits, err, sizeof err), -1);
	ck_assert_ptr_nonnull(strstr(err, "KV cache full"));
	ck_assert_int_eq(engine_seq_len(e, f), 198);
	ck_assert_int_eq(engine_kv_pages_used(e), used);
	/* closing the fork makes the source the pages' sole holder again: it writes in place */
	engine_seq_close(e, f);
	ck_assert_int_eq(engine_kv_pages_used(e), used);
	engine_item step_s = { s, ids + 198, 2, false, false, false };
	ck_assert(engine_forward(e, &step_s, 1, logits, err, sizeof err) == 0);
	ck_assert_int_eq(engine_kv_pages_used(e), used);
	engine_seq_close(e, s);
	ck_assert_int_eq(engine_kv_pages_used(e), 0);
	free(logits);
	engine_free(e);
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
			l_before = aah_now_s();
			ck_assert_int_eq(sched_submit(sch, &lrp, 1, &lr, err, sizeof err), SCHED_OK);
			l_after = aah_now_s();
		}
		t_before[i] = aah_now_s();
		ck_assert_int_eq(sched_submit(sch, &rp, 1, &shorts[i], err, sizeof err), SCHED_OK);
		t_after[i] = aah_now_s();
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

static Suite *scheduler_batching_suite(void)
{
	Suite *s = suite_create("scheduler-batching");
	TCase *tc = tcase_create("scheduler-batching");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_concurrent_greedy);
	tcase_add_test(tc, test_concurrent_seeded);
	tcase_add_loop_test(tc, test_choices, 0, 2);
	tcase_add_test(tc, test_choices_leader_cancelled);
	tcase_add_test(tc, test_engine_fork);
	tcase_add_test(tc, test_engine_fork_pool_full);
	tcase_add_test(tc, test_fcfs_no_starvation);
	tcase_add_test(tc, test_device_sampling);
	tcase_add_test(tc, test_adaptive_split_prompt);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(scheduler_batching_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
