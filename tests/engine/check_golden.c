/* tests/engine/check_golden.c — the engine against reference logits from an independent implementation (llama.cpp,
 * checked against a float64 pass): two small Qwen3 models, 7 prompts, every prompt position and 24 greedy steps. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "tests/test_env.h"

#define LOGIT_TOL 0.01
#define MARGIN_MIN 0.05

/* The backend the engine tests run on: AAH_TEST_BACKEND (cpu, the default, or cuda: `make test-gpu`). */
static const char *test_backend(void)
{
	const char *b = getenv("AAH_TEST_BACKEND");
	return b && *b ? b : "cpu";
}

/* The ways the engine may be run; each must match the reference. */
typedef struct run_cfg {
	const char *isa;           /* AAH_CPU_ISA */
	int32_t threads;
	int32_t max_batch;         /* small values split the prompt into chunks */
	int token_by_token;        /* feed the prompt one token per forward call */
} run_cfg;

static const run_cfg cfgs[] = {
	{ "avx512", 2, 512, 0 }, { "avx2", 2, 512, 0 }, { "generic", 1, 512, 0 },
	{ "avx512", 2, 7, 0 }, { "avx2", 1, 64, 0 }, { "avx512", 2, 512, 1 },
};
static const char *models[] = { "qwen3-small-a", "qwen3-small-b" };

static double max_diff_seen;

/* Checks our logits row against a reference top-10 array [[id, logit], …]. */
static void check_top(const float *row, json_t *top, const char *what, const char *prompt, int pos)
{
	size_t i;
	json_t *pair;
	json_array_foreach(top, i, pair) {
		int id = (int)json_integer_value(json_array_get(pair, 0));
		double ref = json_number_value(json_array_get(pair, 1));
		double d = fabs((double)row[id] - ref);
		if (d > max_diff_seen)
			max_diff_seen = d;
		ck_assert_msg(d <= LOGIT_TOL, "%s '%s' position %d token %d: logit %.5f, reference %.5f (diff %.5f)", what,
		              prompt, pos, id, row[id], ref, d);
	}
}

static void run_model(const char *model, const run_cfg *rc)
{
	char dir[1024], path[1100];
	snprintf(dir, sizeof dir, "%s/%s", testdata(), model);
	snprintf(path, sizeof path, "%s/%s.ref.json", testdata(), model);
	json_error_t jerr;
	json_t *ref = json_load_file(path, 0, &jerr);
	ck_assert_msg(ref != NULL, "%s: %s", path, jerr.text);
	if (rc->isa)
		setenv("AAH_CPU_ISA", rc->isa, 1);

	engine_params p = { .backend = test_backend(), .n_threads = rc->threads, .max_seqs = 2,
	                    .max_batch_tokens = rc->max_batch, .kv_dtype = AAH_DTYPE_F32 };
	engine *e;
	char err[512];
	ck_assert_msg(engine_init(&e, dir, &p, err, sizeof err) == 0, "%s", err);
	const int32_t V = engine_config(e)->vocab_size;
	const char *fuse = getenv("AAH_FUSE");   /* tests/run_tests.sh runs this suite again with AAH_FUSE=1 */
	const bool fused = fuse && *fuse ? strcmp(fuse, "0") != 0 : !strcmp(test_backend(), "cuda");
	ck_assert_msg(engine_projections_fused(e) == fused, "projections fused: %d (AAH_FUSE %s, backend %s)",
	              engine_projections_fused(e), fuse ? fuse : "unset", test_backend());

	size_t pi;
	json_t *pr;
	json_array_foreach(json_object_get(ref, "prompts"), pi, pr) {
		const char *name = json_string_value(json_object_get(pr, "name"));
		json_t *jids = json_object_get(pr, "prompt_ids"), *gen = json_object_get(pr, "gen_ids");
		int32_t n = (int32_t)json_array_size(jids), ng = (int32_t)json_array_size(gen);
		int32_t *ids = malloc((size_t)n * sizeof *ids);
		for (int32_t i = 0; i < n; i++)
			ids[i] = (int32_t)json_integer_value(json_array_get(jids, i));
		float *logits = malloc((size_t)n * V * sizeof *logits);
		int32_t seq = engine_seq_open(e, NULL, err, sizeof err);
		ck_assert_int_ge(seq, 0);
		if (rc->token_by_token) {
			for (int32_t i = 0; i < n; i++) {
				engine_item it = { seq, &ids[i], 1, false, false, false };
				ck_assert_msg(engine_forward(e, &it, 1, logits + (int64_t)i * V, err, sizeof err) == 0, "%s", err);
			}
		} else {
			engine_item it = { seq, ids, n, true, false, false };
			ck_assert_msg(engine_forward(e, &it, 1, logits, err, sizeof err) == 0, "%s", err);
		}
		json_t *ptop = json_object_get(pr, "prompt_top");
		for (int32_t i = 0; i < n; i++)
			check_top(logits + (int64_t)i * V, json_array_get(ptop, (size_t)i), "prompt", name, i);

		/* Greedy steps: feed the reference's tokens so that every step is compared, and require our argmax to
		 * equal them until the first step whose reference margin is too thin to decide. */
		json_t *gtop = json_object_get(pr, "gen_top"), *gmargin = json_object_get(pr, "gen_margin");
		float *row = malloc((size_t)V * sizeof *row);
		memcpy(row, logits + (int64_t)(n - 1) * V, (size_t)V * sizeof *row);
		int greedy_ok = 1;
		for (int32_t k = 0; k < ng; k++) {
			check_top(row, json_array_get(gtop, (size_t)k), "generation", name, k);
			int32_t want = (int32_t)json_integer_value(json_array_get(gen, (size_t)k));
			if (json_number_value(json_array_get(gmargin, (size_t)k)) < MARGIN_MIN)
				greedy_ok = 0;
			if (greedy_ok)
				ck_assert_msg(sampler_argmax(row, V) == want, "'%s' greedy step %d: ours %d, reference %d", name, k,
				              sampler_argmax(row, V), want);
			engine_item it = { seq, &want, 1, false, false, false };
			ck_assert_msg(engine_forward(e, &it, 1, row, err, sizeof err) == 0, "%s", err);
		}
		check_top(row, json_object_get(pr, "after_last_top"), "after last", name, ng);
		engine_seq_close(e, seq);
		free(row);
		free(logits);
		free(ids);
	}
	engine_free(e);
	json_decref(ref);
	unsetenv("AAH_CPU_ISA");
}

START_TEST(test_golden)
{
	int m = _i % 2;
	const run_cfg *rc = &cfgs[_i / 2];
	if (!strcmp(test_backend(), "cuda") && (_i / 2 == 1 || _i / 2 == 2))
		return;   /* they differ from the first only in the CPU's instruction set */
	max_diff_seen = 0;
	run_model(models[m], rc);
	printf("golden %s isa=%s threads=%d batch=%d%s: max |logit diff| %.2e\n", models[m], rc->isa, rc->threads,
	       rc->max_batch, rc->token_by_token ? " token-by-token" : "", max_diff_seen);
}
END_TEST

/* Fused projections (one product for q, k, v and one for gate, up; engine_params.fuse_projections) against separate
 * ones: the same weight rows dotted with the same activations, so the same logits, and the same weight bytes. */
START_TEST(test_fused_projections)
{
	char dir[1024], err[512];
	snprintf(dir, sizeof dir, "%s/%s", testdata(), models[_i]);
	engine *ef, *es;
	engine_params p = { .backend = test_backend(), .n_threads = 2, .max_seqs = 1, .max_batch_tokens = 64,
	                    .kv_dtype = AAH_DTYPE_F32, .fuse_projections = 1 };
	ck_assert_msg(engine_init(&ef, dir, &p, err, sizeof err) == 0, "%s", err);
	p.fuse_projections = -1;
	ck_assert_msg(engine_init(&es, dir, &p, err, sizeof err) == 0, "%s", err);
	ck_assert(engine_projections_fused(ef));
	ck_assert(!engine_projections_fused(es));
	ck_assert_int_eq(engine_weight_bytes_per_token(ef), engine_weight_bytes_per_token(es));
	const int32_t V = engine_config(ef)->vocab_size, n = 100;   /* two chunks of 64 rows, then decode steps */
	int32_t ids[100];
	for (int32_t i = 0; i < n; i++)
		ids[i] = (int32_t)((i * 7919u + 13u) % (uint32_t)V);
	float *lf = malloc((size_t)n * V * sizeof *lf), *ls = malloc((size_t)n * V * sizeof *ls);
	int32_t sf = engine_seq_open(ef, NULL, err, sizeof err), ss = engine_seq_open(es, NULL, err, sizeof err);
	engine_item itf = { sf, ids, n - 4, true, false, false }, its = { ss, ids, n - 4, true, false, false };
	ck_assert_msg(engine_forward(ef, &itf, 1, lf, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(engine_forward(es, &its, 1, ls, err, sizeof err) == 0, "%s", err);
	for (int32_t i = n - 4; i < n; i++) {
		engine_item df = { sf, &ids[i], 1, false, false, false }, ds = { ss, &ids[i], 1, false, false, false };
		ck_assert_msg(engine_forward(ef, &df, 1, lf + (int64_t)i * V, err, sizeof err) == 0, "%s", err);
		ck_assert_msg(engine_forward(es, &ds, 1, ls + (int64_t)i * V, err, sizeof err) == 0, "%s", err);
	}
	/* bit for bit on the CPU (its products do not depend on a weight's row count); a device's GEMM may choose
	 * another algorithm for another shape */
	const int on_cuda = !strcmp(test_backend(), "cuda");
	double worst = 0;
	for (int64_t i = 0; i < (int64_t)n * V; i++) {
		double d = fabs((double)lf[i] - ls[i]);
		worst = d > worst || isnan(d) ? d : worst;
	}
	ck_assert_msg(on_cuda ? worst <= 1e-4 : worst == 0, "%s: fused against separate projections: max |diff| %.3g",
	              models[_i], worst);
	engine_free(ef);
	engine_free(es);
	free(lf);
	free(ls);
}
END_TEST

/* engine_forward without host logits keeps the same rows in the engine, in item order (a prompt chunked across
 * forward chunks, an all-logits item, a decode step): engine_logits_row reads each back as the host path writes it,
 * engine_logits_top reduces them (max, candidates in order, the log-softmax normaliser), and rows that were not kept
 * or would not fit are refused. */
START_TEST(test_kept_logits)
{
	char dir[1024], err[512];
	snprintf(dir, sizeof dir, "%s/%s", testdata(), models[0]);
	engine *eh, *ek;
	engine_params p = { .backend = test_backend(), .n_threads = 2, .max_seqs = 3, .max_batch_tokens = 64,
	                    .kv_dtype = AAH_DTYPE_F32 };
	ck_assert_msg(engine_init(&eh, dir, &p, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(engine_init(&ek, dir, &p, err, sizeof err) == 0, "%s", err);
	const int on_cuda = !strcmp(test_backend(), "cuda");
	const int32_t V = engine_config(ek)->vocab_size, NR = 7, NT = 16;
	ck_assert_int_ge(engine_logits_rows_max(ek), NR);
	int32_t ids[70];
	for (int32_t i = 0; i < 70; i++)
		ids[i] = (int32_t)((i * 7919u + 5u) % (uint32_t)V);
	float *lh = malloc((size_t)NR * V * sizeof *lh), *lk = malloc((size_t)NR * V * sizeof *lk);
	aah_logits_stats st[7];
	int32_t top_ids[7 * 16];
	float top_l[7 * 16], temp[7];
	for (int32_t step = 0; step < 2; step++) {
		engine_item items[3];
		int32_t nr = step ? 3 : NR;
		if (step == 0) {   /* 70 tokens (two forward chunks, one row), 5 with every row, 1 */
			items[0] = (engine_item){ 0, ids, 70, false, false, false };
			items[1] = (engine_item){ 1, ids + 10, 5, true, false, false };
			items[2] = (engine_item){ 2, ids + 20, 1, false, false, false };
			for (int32_t q = 0; q < 3; q++) {
				ck_assert_int_eq(engine_seq_open(eh, NULL, err, sizeof err), q);
				ck_assert_int_eq(engine_seq_open(ek, NULL, err, sizeof err), q);
			}
		} else {   /* a decode step */
			for (int32_t q = 0; q < 3; q++)
				items[q] = (engine_item){ q, ids + 30 + q, 1, false, false, false };
		}
		ck_assert_msg(engine_forward(eh, items, 3, lh, err, sizeof err) == 0, "%s", err);
		ck_assert_msg(engine_forward(ek, items, 3, NULL, err, sizeof err) == 0, "%s", err);
		for (int32_t r = 0; r < nr; r++) {
			temp[r] = 0.5f + 0.25f * (float)r;
			float *row = lk + (int64_t)r * V;
			ck_assert_int_eq(engine_logits_row(ek, r, row), 0);
			const float *h = lh + (int64_t)r * V;
			double worst = 0;
			for (int32_t v = 0; v < V; v++)
				worst = fmax(worst, fabs((double)row[v] - h[v]));
			ck_assert_msg(on_cuda ? worst <= 1e-5 : worst == 0, "step %d row %d: max |diff| %.3g", step, r, worst);
		}
		ck_assert_int_eq(engine_logits_row(ek, nr, lk), -1);
		ck_assert_int_eq(engine_logits_top(ek, st, top_ids, top_l, 0, nr, V, temp, NT), 0);
		for (int32_t r = 0; r < nr; r++) {   /* against the kept row read back: candidates are exact everywhere */
			const float *h = lk + (int64_t)r * V;
			double m = -INFINITY, sum = 0;
			for (int32_t v = 0; v < V; v++)
				m = h[v] > m ? h[v] : m;
			for (int32_t v = 0; v < V; v++)
				sum += exp((double)h[v] - m);
			ck_assert((double)st[r].max == m);
			ck_assert_msg(fabs(st[r].lse - (m + log(sum))) <= 1e-5, "row %d: lse %.9g, %.9g", r, st[r].lse,
			              m + log(sum));
			ck_assert_int_eq(top_ids[r * NT], sampler_argmax(h, V));
			for (int32_t j = 0; j < NT; j++) {
				ck_assert(j == 0 || top_l[r * NT + j] <= top_l[r * NT + j - 1]);
				ck_assert(top_l[r * NT + j] == h[top_ids[r * NT + j]]);
			}
		}
		/* not kept, or not there: refused */
		ck_assert_int_eq(engine_logits_top(ek, st, top_ids, top_l, 1, nr, V, temp, NT), -1);
		ck_assert_int_eq(engine_logits_top(ek, st, top_ids, top_l, 0, nr, V, temp, AAH_LOGITS_TOP_MAX + 1), -1);
		ck_assert_int_eq(engine_logits_top(ek, st, top_ids, top_l, 0, nr, V + 1, temp, NT), -1);
	}
	/* more rows than the engine keeps: an error, and nothing changed; a host-logits forward keeps none */
	int32_t len = engine_seq_len(ek, 0);
	int32_t many = engine_logits_rows_max(ek) + 1;
	int32_t *big = calloc((size_t)many, sizeof *big);
	engine_item it = { 0, big, many, true, false, false };
	ck_assert_int_eq(engine_forward(ek, &it, 1, NULL, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "exceed") != NULL, "%s", err);
	ck_assert_int_eq(engine_seq_len(ek, 0), len);
	engine_item one = { 0, ids, 1, false, false, false };
	ck_assert_msg(engine_forward(ek, &one, 1, lk, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(engine_logits_row(ek, 0, lk), -1);
	ck_assert_int_eq(engine_logits_top(ek, st, top_ids, top_l, 0, 1, V, temp, NT), -1);
	free(big);
	free(lh);
	free(lk);
	engine_free(eh);
	engine_free(ek);
}
END_TEST

int main(void)
{
	/* On the CUDA backend: skip without a device, and run in this process (a CUDA context does not survive fork). */
	const int on_cuda = !strcmp(test_backend(), "cuda");
	if (on_cuda && !aah_backend_cuda_available()) {
		printf("no CUDA device: skipped (AAH_TEST_BACKEND=cuda)\n");
		return 0;
	}
	Suite *s = suite_create("golden");
	TCase *tc = tcase_create("reference_logits");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_golden, 0, (int)(2 * sizeof cfgs / sizeof cfgs[0]));
	tcase_add_loop_test(tc, test_fused_projections, 0, 2);
	tcase_add_test(tc, test_kept_logits);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	if (on_cuda)
		srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
