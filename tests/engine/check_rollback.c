/* tests/engine/check_rollback.c — speculative decoding's engine half: generated items checked at once and then
 * taken back (engine_seq_truncate) leave a sequence exactly where one token at a time leaves it: logits, stats, ACR. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/aah_policy.h"
#include "engine/engine.h"
#include "kernels/argmax.h"
#include "models/aah_config.h"
#include "models/model.h"
#include "tests/test_env.h"

/* The backend the engine tests run on: AAH_TEST_BACKEND (cpu, the default, or cuda: `make test-gpu`). */
static const char *test_backend(void)
{
	const char *b = getenv("AAH_TEST_BACKEND");
	return b && *b ? b : "cpu";
}

static bool on_cuda(void) { return !strcmp(test_backend(), "cuda"); }

static uint64_t rng_state;
static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16);
}

#define CTX 1024

/* Two regimes over candidates 32 … 256: "s", static, each KV head its own group at 64 or 128 (so that its ring of
 * 6 or 10 pages wraps every 96 or 160 positions), and "a", adaptive every `interval` steps, each KV head at 32, 64 or
 * 128 with twice that capacity. Caller frees. */
static char *aah_json_two(int32_t n_layers, int32_t n_kv, int32_t interval)
{
	size_t cap = 1 << 15, at = 0;
	char *s = malloc(cap);
	at += (size_t)snprintf(s + at, cap - at, "{\"version\":1,\"context_length\":%d,"
	                       "\"candidate_windows\":[32,64,128,256],\"regimes\":{", CTX);
	for (int r = 0; r < 2; r++) {
		if (r == 0)
			at += (size_t)snprintf(s + at, cap - at, "\"s\":{\"policy\":{\"kind\":\"static\"},\"layers\":[");
		else
			at += (size_t)snprintf(s + at, cap - at, ",\"a\":{\"policy\":{\"kind\":\"adaptive\","
			                       "\"control_interval\":%d},\"layers\":[", interval);
		for (int l = 0; l < n_layers; l++) {
			at += (size_t)snprintf(s + at, cap - at, "%s{\"groups\":[", l ? "," : "");
			for (int h = 0; h < n_kv; h++) {
				int32_t w = r == 0 ? 64 << (rnd() % 2) : 32 << (rnd() % 3);
				at += (size_t)snprintf(s + at, cap - at, "%s{\"kv_heads\":[%d],\"window\":%d,\"capacity\":%d}",
				                       h ? "," : "", h, w, r == 0 ? w : 2 * w);
			}
			at += (size_t)snprintf(s + at, cap - at, "]}");
		}
		at += (size_t)snprintf(s + at, cap - at, "]}");
	}
	snprintf(s + at, cap - at, "},\"default_regime\":\"s\"}");
	return s;
}

/* The engine of a test: qwen3-small-a (2 layers, 2 KV heads of 2 query heads each) with aah_json_two. */
typedef struct fixture {
	char dir[256];
	char *json;
	model_config mc;
} fixture;

static void fixture_make(fixture *fx, int32_t interval)
{
	char src[1024], err[512];
	snprintf(src, sizeof src, "%s/qwen3-small-a", testdata());
	model_files ref;
	ck_assert_msg(model_files_load(&ref, src, err, sizeof err) == 0, "%s", err);
	fx->mc = ref.config;
	model_files_free(&ref);
	fx->json = aah_json_two(fx->mc.n_layers, fx->mc.n_kv_heads, interval);
	make_model_dir(fx->dir, sizeof fx->dir, "rollback", "qwen3-small-a", fx->json);
}

static void fixture_free(fixture *fx)
{
	remove_model_dir(fx->dir);
	free(fx->json);
}

static engine *engine_make(const fixture *fx, aah_dtype kv, int32_t rollback)
{
	engine_params p = { .backend = test_backend(), .n_threads = 2, .max_seqs = 4, .ctx_len = CTX, .kv_dtype = kv,
	                    .rollback = rollback };
	engine *e;
	char err[512];
	ck_assert_msg(engine_init(&e, fx->dir, &p, err, sizeof err) == 0, "%s", err);
	return e;
}

/* Everything a truncation restores, field by field (not kv_bytes and kv_bytes_peak: the pages stay). */
static void assert_stats_equal(const engine_seq_stats *a, const engine_seq_stats *b, const char *what)
{
	ck_assert_msg(a->n_positions == b->n_positions, "%s: n_positions %lld vs %lld", what, (long long)a->n_positions,
	              (long long)b->n_positions);
	ck_assert_msg(a->attn_products == b->attn_products, "%s: attn_products %llu vs %llu", what,
	              (unsigned long long)a->attn_products, (unsigned long long)b->attn_products);
	ck_assert_msg(a->attn_products_full == b->attn_products_full, "%s: attn_products_full %llu vs %llu", what,
	              (unsigned long long)a->attn_products_full, (unsigned long long)b->attn_products_full);
	ck_assert_msg(a->kv_bytes_full_peak == b->kv_bytes_full_peak, "%s: kv_bytes_full_peak %lld vs %lld", what,
	              (long long)a->kv_bytes_full_peak, (long long)b->kv_bytes_full_peak);
	ck_assert_msg(a->n_usage == b->n_usage, "%s: %d usage windows vs %d", what, a->n_usage, b->n_usage);
	for (int32_t i = 0; i < a->n_usage; i++)
		ck_assert_msg(a->usage_window[i] == b->usage_window[i] && a->usage[i] == b->usage[i],
		              "%s: usage %d: window %d × %.17g vs window %d × %.17g", what, i, a->usage_window[i], a->usage[i],
		              b->usage_window[i], b->usage[i]);
	ck_assert_msg(a->branch_usage_weighted == b->branch_usage_weighted &&
	              a->branch_usage_total == b->branch_usage_total,
	              "%s: branch usage %.17g / %.17g vs %.17g / %.17g", what, a->branch_usage_weighted,
	              a->branch_usage_total, b->branch_usage_weighted, b->branch_usage_total);
	ck_assert_msg(a->acr == b->acr, "%s: acr %.17g vs %.17g", what, a->acr, b->acr);
	ck_assert_int_eq(a->context_length, b->context_length);
	ck_assert_str_eq(a->regime, b->regime);
}

static engine_seq_stats stats_of(const engine *e, int32_t seq)
{
	engine_seq_stats st;
	ck_assert_int_eq(engine_seq_stats_get(e, seq, &st), 0);
	return st;
}

/* Row of a verify pass against the one-token step's: bit for bit on the CPU; on CUDA, where a chunk and a single token
 * sum in other orders, to rounding (a 16-bit pool can turn it into a last-bit difference of a stored key). */
static void assert_row_equal(const float *got, const float *want, int32_t V, aah_dtype kv, const char *what,
                             int32_t pos)
{
	if (!on_cuda()) {
		ck_assert_msg(memcmp(got, want, (size_t)V * sizeof *got) == 0, "%s: position %d: the verify row differs from "
		              "the decode step's", what, pos);
		return;
	}
	const float tol = kv == AAH_DTYPE_F32 ? 1e-4f : 3e-3f;
	for (int32_t x = 0; x < V; x++)
		ck_assert_msg(fabsf(got[x] - want[x]) <= tol * (1 + fabsf(want[x])), "%s: position %d column %d: %.9g vs %.9g",
		              what, pos, x, got[x], want[x]);
}

/* ---- speculative decoding against one token at a time ---- */

static const char *const spec_regimes[] = { "full_attention", "s", "a" };
static const aah_dtype spec_types[] = { AAH_DTYPE_F32, AAH_DTYPE_F16 };

/* Sequence A decodes greedily one token at a time; sequence B, of the same prompt, feeds verify passes [next, d1 … dk]
 * (k 0 … 15 within the steps to the next probe; drafts A's own next tokens or random ones), keeps each pass's rows up
 * to the first wrong draft as speculative decoding does, and truncates the rest — sometimes in two steps, sometimes
 * the whole pass (to be fed again). Every kept row is A's row, and at the end B's stats are A's, across many wraps
 * of the windowed rings. */
START_TEST(test_spec_equals_one_by_one)
{
	const char *regime = spec_regimes[_i / 2];
	const aah_dtype kv = spec_types[_i % 2];
	char what[128], err[512];
	snprintf(what, sizeof what, "%s kv %s", regime, aah_dtype_name(kv));
	rng_state = 0x5eed0000u + (uint64_t)_i;
	fixture fx;
	fixture_make(&fx, 7);
	engine *e = engine_make(&fx, kv, ENGINE_MAX_ROLLBACK);
	const int32_t V = fx.mc.vocab_size, n_prompt = 40, N = on_cuda() ? 260 : 520;
	const int64_t page_bytes = engine_kv_page_bytes(e);
	int32_t prompt[40];
	for (int i = 0; i < n_prompt; i++)
		prompt[i] = (int32_t)(rnd() % (uint32_t)V);

	/* A: the prompt, then N greedy steps; la[i] the row after feeding a[i], whose argmax is a[i + 1] */
	int32_t A = engine_seq_open(e, regime, err, sizeof err);
	ck_assert_msg(A >= 0, "%s", err);
	ck_assert_msg(engine_seq_allow_rollback(e, A, err, sizeof err) == 0, "%s", err);   /* the same rings as B's */
	float *prompt_row = malloc((size_t)V * sizeof *prompt_row), *la = malloc((size_t)N * V * sizeof *la);
	float *rows = malloc((size_t)16 * V * sizeof *rows);
	int32_t *a = malloc((size_t)(N + 1) * sizeof *a);
	engine_item it = { .seq = A, .tokens = prompt, .n_tokens = n_prompt };
	ck_assert_msg(engine_forward(e, &it, 1, prompt_row, err, sizeof err) == 0, "%s", err);
	a[0] = aah_argmax(prompt_row, V);
	for (int32_t i = 0; i < N; i++) {
		engine_item s1 = { .seq = A, .tokens = &a[i], .n_tokens = 1 };
		ck_assert_msg(engine_forward(e, &s1, 1, la + (int64_t)i * V, err, sizeof err) == 0, "%s", err);
		a[i + 1] = aah_argmax(la + (int64_t)i * V, V);
	}
	const engine_seq_stats sa = stats_of(e, A);
	/* one token at a time, a sequence holds what the count says */
	ck_assert_int_eq(engine_seq_kv_bytes(e, A), engine_regime_kv_pages(e, regime, n_prompt + N) * page_bytes);

	/* B */
	int32_t B = engine_seq_open(e, regime, err, sizeof err);
	ck_assert_msg(B >= 0, "%s", err);
	ck_assert_msg(engine_seq_allow_rollback(e, B, err, sizeof err) == 0, "%s", err);
	it.seq = B;
	ck_assert_msg(engine_forward(e, &it, 1, rows, err, sizeof err) == 0, "%s", err);
	assert_row_equal(rows, prompt_row, V, kv, what, n_prompt - 1);
	int32_t j = 0, written = n_prompt, n_items = 0, n_whole = 0, n_two_step = 0, n_partial = 0;
	int32_t tokens[16];
	while (j < N) {
		const int32_t pos0 = n_prompt + j;
		ck_assert_int_eq(engine_seq_len(e, B), pos0);
		const int32_t room = engine_seq_steps_to_probe(e, B);
		ck_assert_int_ge(room, 0);
		if (!strcmp(regime, "a"))
			ck_assert_int_lt(room, 7);
		else
			ck_assert_int_eq(room, INT32_MAX);
		int32_t kmax = N - j - 1 < 15 ? N - j - 1 : 15;
		if (room < INT32_MAX)
			kmax = room == 0 ? 0 : room - 1 < kmax ? room - 1 : kmax;
		const int32_t k = kmax > 0 ? (int32_t)(rnd() % (uint32_t)(kmax + 1)) : 0;
		tokens[0] = a[j];
		for (int32_t m = 1; m <= k; m++)
			tokens[m] = rnd() % 3 ? a[j + m] : (a[j + m] + 1 + (int32_t)(rnd() % (uint32_t)(V - 1))) % V;
		const engine_seq_stats before = stats_of(e, B);
		engine_item v = { .seq = B, .tokens = tokens, .n_tokens = k + 1, .all_logits = true,
		                  .generated = k > 0 || rnd() % 2 };
		ck_assert_msg(engine_forward(e, &v, 1, rows, err, sizeof err) == 0, "%s: %s", what, err);
		n_items++;
		if (pos0 + k + 1 > written)
			written = pos0 + k + 1;
		/* never more pages than admission counts for the most it wrote */
		ck_assert_int_le(engine_seq_kv_bytes(e, B), engine_regime_kv_pages(e, regime, written) * page_bytes);
		int32_t acc = 1;
		while (acc <= k && tokens[acc] == a[j + acc])
			acc++;
		for (int32_t r = 0; r < acc; r++) {
			assert_row_equal(rows + (int64_t)r * V, la + (int64_t)(j + r) * V, V, kv, what, pos0 + r);
			if (!on_cuda())
				ck_assert_int_eq(aah_argmax(rows + (int64_t)r * V, V), a[j + r + 1]);
		}
		/* a probe step (room 0) moved the windows: it is never taken back, nor anything before it */
		if (room != 0 && rnd() % 8 == 0) {   /* the whole pass back, to be fed again */
			ck_assert_msg(engine_seq_truncate(e, B, pos0, err, sizeof err) == 0, "%s: %s", what, err);
			engine_seq_stats after = stats_of(e, B);
			assert_stats_equal(&after, &before, what);
			n_whole++;
			continue;
		}
		if (acc <= k && k + 1 - acc >= 2 && rnd() % 4 == 0) {   /* back in two steps */
			ck_assert_msg(engine_seq_truncate(e, B, pos0 + acc + 1, err, sizeof err) == 0, "%s: %s", what, err);
			n_two_step++;
		}
		if (acc <= k)
			n_partial++;
		ck_assert_msg(engine_seq_truncate(e, B, pos0 + acc, err, sizeof err) == 0, "%s: %s", what, err);
		ck_assert_int_eq(engine_seq_len(e, B), pos0 + acc);
		j += acc;
	}
	const engine_seq_stats sb = stats_of(e, B);
	assert_stats_equal(&sb, &sa, what);
	ck_assert_int_ge(sb.kv_bytes, sa.kv_bytes);   /* pages above the length stay */
	/* the mix the test means to have: many passes, whole ones and partial ones taken back */
	ck_assert_msg(n_items > 60 && n_whole > 3 && n_partial > 10, "%s: %d passes, %d whole, %d partial, %d in two steps",
	              what, n_items, n_whole, n_partial, n_two_step);
	if (strcmp(regime, "a") != 0)
		ck_assert_msg(n_two_step > 0, "%s: no truncation in two steps", what);
	/* and both go on alike: a last step each */
	int32_t last = a[N];
	engine_item sA = { .seq = A, .tokens = &last, .n_tokens = 1 }, sB = { .seq = B, .tokens = &last, .n_tokens = 1 };
	ck_assert(engine_forward(e, &sA, 1, la, err, sizeof err) == 0);
	ck_assert(engine_forward(e, &sB, 1, rows, err, sizeof err) == 0);
	assert_row_equal(rows, la, V, kv, what, n_prompt + N);
	engine_seq_stats fa = stats_of(e, A), fb = stats_of(e, B);
	assert_stats_equal(&fb, &fa, what);
	engine_free(e);
	fixture_free(&fx);
	free(prompt_row); free(la); free(rows); free(a);
}
END_TEST

/* ---- refusals: each returns -1 with a message and changes nothing ---- */

static void assert_unchanged(const engine *e, int32_t seq, int32_t len, const engine_seq_stats *st, const char *what)
{
	ck_assert_msg(engine_seq_len(e, seq) == len, "%s: length %d, was %d", what, engine_seq_len(e, seq), len);
	engine_seq_stats now = stats_of(e, seq);
	assert_stats_equal(&now, st, what);
	ck_assert_int_eq(now.kv_bytes, st->kv_bytes);
}

static void expect_truncate_refused(engine *e, int32_t seq, int32_t len, const char *needle)
{
	char err[512] = "";
	const int32_t cur = engine_seq_len(e, seq);
	const engine_seq_stats st = stats_of(e, seq);
	ck_assert_msg(engine_seq_truncate(e, seq, len, err, sizeof err) == -1, "truncate to %d (of %d) accepted", len, cur);
	ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
	assert_unchanged(e, seq, cur, &st, needle);
}

static void expect_forward_refused(engine *e, const engine_item *it, const char *needle)
{
	char err[512] = "";
	const int32_t cur = engine_seq_len(e, it->seq);
	const engine_seq_stats st = stats_of(e, it->seq);
	const int32_t room = engine_seq_steps_to_probe(e, it->seq);
	float *logits = malloc((size_t)16 * 4096 * sizeof *logits);
	ck_assert_msg(engine_forward(e, it, 1, logits, err, sizeof err) == -1, "item of %d tokens accepted", it->n_tokens);
	ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
	assert_unchanged(e, it->seq, cur, &st, needle);
	ck_assert_int_eq(engine_seq_steps_to_probe(e, it->seq), room);
	free(logits);
}

static void feed(engine *e, int32_t seq, const int32_t *ids, int32_t n, bool generated)
{
	char err[512];
	float *logits = malloc((size_t)4096 * sizeof *logits);
	engine_item it = { .seq = seq, .tokens = ids, .n_tokens = n, .generated = generated };
	ck_assert_msg(engine_forward(e, &it, 1, logits, err, sizeof err) == 0, "%s", err);
	free(logits);
}

START_TEST(test_refusals)
{
	fixture fx;
	rng_state = 99;
	fixture_make(&fx, 5);
	char err[512] = "";
	int32_t ids[40];
	for (int i = 0; i < 40; i++)
		ids[i] = (int32_t)(rnd() % 2048);

	/* engine_params.rollback beyond 0 … 16 */
	{
		engine_params p = { .backend = test_backend(), .n_threads = 1, .max_seqs = 1, .ctx_len = CTX,
		                    .rollback = ENGINE_MAX_ROLLBACK + 1 };
		engine *e = NULL;
		ck_assert_int_eq(engine_init(&e, fx.dir, &p, err, sizeof err), -1);
		ck_assert_ptr_null(e);
		ck_assert_msg(strstr(err, "rollback 17") != NULL, "%s", err);
		p.rollback = -1;
		ck_assert_int_eq(engine_init(&e, fx.dir, &p, err, sizeof err), -1);
		ck_assert_msg(strstr(err, "rollback -1") != NULL, "%s", err);
	}

	/* an engine without rollback: no sequence may allow it, none is truncated */
	{
		engine *e = engine_make(&fx, AAH_DTYPE_F32, 0);
		ck_assert_int_eq(engine_rollback_max(e), 0);
		int32_t s = engine_seq_open(e, "s", err, sizeof err);
		ck_assert_int_eq(engine_seq_allow_rollback(e, s, err, sizeof err), -1);
		ck_assert_msg(strstr(err, "rollback 0") != NULL, "%s", err);
		feed(e, s, ids, 20, false);
		feed(e, s, ids + 20, 4, true);
		expect_truncate_refused(e, s, 22, "does not allow rollback");
		engine_free(e);
	}

	engine *e = engine_make(&fx, AAH_DTYPE_F32, ENGINE_MAX_ROLLBACK);
	ck_assert_int_eq(engine_rollback_max(e), ENGINE_MAX_ROLLBACK);
	ck_assert_int_eq(engine_seq_steps_to_probe(e, 0), -1);   /* not open */
	ck_assert_int_eq(engine_seq_allow_rollback(e, 3, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "not open") != NULL, "%s", err);
	ck_assert_int_eq(engine_seq_truncate(e, 3, 0, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "not open") != NULL, "%s", err);

	/* a static regime: never a probe */
	int32_t s = engine_seq_open(e, "s", err, sizeof err);
	ck_assert_int_eq(engine_seq_steps_to_probe(e, s), INT32_MAX);
	{   /* a generated item needs a prompt before it */
		engine_item g = { .seq = s, .tokens = ids, .n_tokens = 3, .generated = true };
		ck_assert_msg(engine_seq_allow_rollback(e, s, err, sizeof err) == 0, "%s", err);
		expect_forward_refused(e, &g, "no prompt");
	}
	feed(e, s, ids, 20, false);
	/* too late to allow it: the rings are sized */
	ck_assert_int_eq(engine_seq_allow_rollback(e, s, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "not empty") != NULL, "%s", err);
	/* a prompt is not taken back */
	expect_truncate_refused(e, s, 19, "prompt chunk");
	expect_truncate_refused(e, s, 21, "cannot be truncated to 21");
	expect_truncate_refused(e, s, -1, "cannot be truncated to -1");
	ck_assert_int_eq(engine_seq_truncate(e, s, 20, err, sizeof err), 0);   /* nothing to take back */
	{   /* a generated item is not a prompt for the prefix cache */
		engine_item g = { .seq = s, .tokens = ids, .n_tokens = 3, .generated = true, .cache = true };
		expect_forward_refused(e, &g, "cache");
	}
	/* 17 generated positions: 16 may go back, not 17 */
	feed(e, s, ids, 17, true);
	ck_assert_int_eq(engine_seq_len(e, s), 37);
	expect_truncate_refused(e, s, 20, "takes back 17 positions");
	expect_truncate_refused(e, s, 19, "prompt chunk");
	ck_assert_msg(engine_seq_truncate(e, s, 21, err, sizeof err) == 0, "%s", err);
	/* the limit counts from the highest position written, not from the length */
	expect_truncate_refused(e, s, 20, "takes back 17 positions");
	feed(e, s, ids, 2, true);   /* 23: still below the 37 written */
	expect_truncate_refused(e, s, 20, "takes back 17 positions");
	ck_assert_msg(engine_seq_truncate(e, s, 21, err, sizeof err) == 0, "%s", err);
	/* decode steps since the prompt, one token at a time and generated or not, go back as one run */
	feed(e, s, ids, 1, false);
	feed(e, s, ids + 1, 1, true);
	feed(e, s, ids + 2, 3, true);
	ck_assert_int_eq(engine_seq_len(e, s), 26);
	ck_assert_msg(engine_seq_truncate(e, s, 22, err, sizeof err) == 0, "%s", err);
	/* a prompt chunk moves the floor */
	feed(e, s, ids, 5, false);
	expect_truncate_refused(e, s, 26, "prompt chunk");
	/* a measured item's sums stay with the caller: the floor moves past it too */
	{
		static const int32_t edges[] = { 8 };
		double ent[2 * 4];
		engine_measure m = { .n_bands = 2, .band_edges = edges, .entropy = ent };
		ck_assert_msg(engine_seq_measure(e, s, &m, err, sizeof err) == 0, "%s", err);
		feed(e, s, ids, 2, true);
		ck_assert_int_eq(engine_seq_measure(e, s, NULL, err, sizeof err), 0);
		expect_truncate_refused(e, s, 28, "measured");
	}

	/* what a sequence may take back lasts through other sequences' forwards; a fork inherits it */
	int32_t o = engine_seq_open(e, "s", err, sizeof err);
	ck_assert_msg(engine_seq_allow_rollback(e, o, err, sizeof err) == 0, "%s", err);
	feed(e, o, ids, 30, false);
	feed(e, s, ids, 4, true);
	feed(e, o, ids, 1, false);
	int32_t f = engine_seq_fork(e, s, err, sizeof err);
	ck_assert_msg(f >= 0, "%s", err);
	ck_assert_msg(engine_seq_truncate(e, s, 31, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(engine_seq_truncate(e, f, 30, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(engine_seq_truncate(e, o, 30, err, sizeof err) == 0, "%s", err);
	expect_truncate_refused(e, o, 29, "prompt chunk");
	engine_seq_close(e, f);
	engine_seq_close(e, o);
	engine_seq_close(e, s);

	/* an adaptive regime probes every 5 decode steps: a generated item ends before the next probe */
	int32_t ad = engine_seq_open(e, "a", err, sizeof err);
	ck_assert_msg(engine_seq_allow_rollback(e, ad, err, sizeof err) == 0, "%s", err);
	feed(e, ad, ids, 20, false);
	ck_assert_int_eq(engine_seq_steps_to_probe(e, ad), 0);   /* the first decode step probes */
	{
		engine_item g = { .seq = ad, .tokens = ids, .n_tokens = 2, .generated = true };
		expect_forward_refused(e, &g, "probe");
	}
	feed(e, ad, ids, 1, true);   /* the probe itself, fed alone (generated or not, it is the decode step it was) */
	expect_truncate_refused(e, ad, 20, "probe");
	ck_assert_int_eq(engine_seq_steps_to_probe(e, ad), 4);
	{
		engine_item g = { .seq = ad, .tokens = ids, .n_tokens = 5, .generated = true };
		expect_forward_refused(e, &g, "probe");
	}
	feed(e, ad, ids, 3, true);
	ck_assert_int_eq(engine_seq_steps_to_probe(e, ad), 1);
	ck_assert_msg(engine_seq_truncate(e, ad, 22, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(engine_seq_steps_to_probe(e, ad), 3);   /* the step count is taken back */
	feed(e, ad, ids, 3, true);
	ck_assert_int_eq(engine_seq_steps_to_probe(e, ad), 0);
	feed(e, ad, ids, 1, false);   /* the second probe */
	ck_assert_int_eq(engine_seq_steps_to_probe(e, ad), 4);
	expect_truncate_refused(e, ad, 25, "probe");
	engine_free(e);
	fixture_free(&fx);
}
END_TEST

/* ---- the policy's counters ---- */

/* aah_seq_uncount takes back exactly what aah_seq_count added, and drops the usage entries the taken-back tokens
 * created (a window first selected after a probe), so that the counters equal those of a sequence that never counted
 * them; steps to the next probe follow the decode step count. */
START_TEST(test_policy_uncount)
{
	const char *json =
		"{\"version\":1,\"context_length\":4096,\"candidate_windows\":[512,1024,2048,4096],\"regimes\":{\"a\":{"
		"\"policy\":{\"kind\":\"adaptive\",\"control_interval\":5},\"layers\":[{\"groups\":[{\"kv_heads\":[0],"
		"\"window\":512,\"capacity\":2048},{\"kv_heads\":[1],\"window\":1024,\"capacity\":2048}]}]}}}";
	model_config mc = { .n_layers = 1, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16 };
	aah_config cfg;
	char err[256];
	ck_assert_msg(aah_config_parse(&cfg, json, strlen(json), &mc, err, sizeof err) == 0, "%s", err);
	aah_regimes rs;
	ck_assert_int_eq(aah_regimes_init(&rs, &cfg, 1, 2, 2, 4096), 0);
	aah_seq_state x, y;
	ck_assert_int_eq(aah_seq_state_init(&x, &rs), 0);
	ck_assert_int_eq(aah_seq_state_init(&y, &rs), 0);
	const int32_t ri = aah_regimes_find(&rs, "a");
	aah_seq_state_reset(&x, &rs, ri);
	ck_assert_int_eq(aah_seq_steps_to_probe(&x, &rs), 0);
	aah_seq_count(&x, &rs, 37, false);
	x.decode_steps = 3;
	ck_assert_int_eq(aah_seq_steps_to_probe(&x, &rs), 2);
	/* a probe moved group 0 to a window it never had: y is x from here on, without the tokens taken back */
	x.group_window[0] = 2048;   /* its capacity */
	x.head_window[0] = x.group_window[0];
	aah_seq_state_copy(&y, &x, &rs);
	const int32_t n0 = x.n_usage;
	aah_seq_count(&x, &rs, 3, false);
	ck_assert_int_eq(x.n_usage, n0 + 1);
	aah_seq_uncount(&x, &rs, 3, n0);   /* all of them: the entry goes */
	ck_assert_int_eq(x.n_usage, y.n_usage);
	for (int32_t i = 0; i < y.n_usage; i++)
		ck_assert(x.usage_window[i] == y.usage_window[i] && x.usage[i] == y.usage[i]);
	aah_seq_count(&x, &rs, 5, false);
	aah_seq_count(&y, &rs, 2, false);
	aah_seq_uncount(&x, &rs, 3, n0);   /* some of them: it stays */
	ck_assert_int_eq(x.n_usage, n0 + 1);
	for (int32_t i = 0; i < y.n_usage; i++)
		ck_assert(x.usage_window[i] == y.usage_window[i] && x.usage[i] == y.usage[i]);
	ck_assert(aah_seq_acr(&x, &rs) == aah_seq_acr(&y, &rs));
	/* a static regime never probes */
	aah_seq_state_reset(&x, &rs, aah_regimes_find(&rs, AAH_FULL_ATTENTION));
	ck_assert_int_eq(aah_seq_steps_to_probe(&x, &rs), INT32_MAX);
	aah_seq_state_free(&x);
	aah_seq_state_free(&y);
	aah_regimes_free(&rs);
	aah_config_free(&cfg);
}
END_TEST

/* ---- pages ---- */

/* Rollback costs no page: with it (the engine's and the sequence's) a sequence is counted, and holds, what one without
 * it does — the count checked against an independent formula, per head min(ceil(len / 16), ceil(capacity / 16) + 1). */
START_TEST(test_pages)
{
	fixture fx;
	rng_state = 7;
	fixture_make(&fx, 5);
	char err[512];
	engine *e0 = engine_make(&fx, AAH_DTYPE_F32, 0), *e = engine_make(&fx, AAH_DTYPE_F32, ENGINE_MAX_ROLLBACK);
	engine_regime_layout lay;
	const int32_t heads = fx.mc.n_layers * fx.mc.n_kv_heads;
	for (int32_t ri = 0; ri < engine_regime_count(e); ri++) {
		ck_assert_int_eq(engine_regime_layout_get(e, ri, &lay), 0);
		for (int64_t len = 0; len <= CTX; len += 7) {
			int64_t want = 0;
			const int64_t lp = (len + 15) / 16, stride = (CTX + 15) / 16 + 1;
			for (int32_t h = 0; h < heads; h++) {
				const int64_t cap = lay.group_capacity[lay.head_group[h]];
				int64_t slots = (cap + 15) / 16 + 1;
				slots = slots < stride ? slots : stride;
				want += lp < slots ? lp : slots;
			}
			ck_assert_int_eq(engine_regime_kv_pages(e, lay.name, len), want);
			ck_assert_int_eq(engine_regime_kv_pages(e0, lay.name, len), want);
		}
	}
	/* decode one token at a time with and without rollback: each holds exactly the count */
	const int64_t pb = engine_kv_page_bytes(e);
	int32_t s0 = engine_seq_open(e, "s", err, sizeof err), s1 = engine_seq_open(e, "s", err, sizeof err);
	ck_assert_msg(engine_seq_allow_rollback(e, s1, err, sizeof err) == 0, "%s", err);
	float *logits = malloc((size_t)2 * fx.mc.vocab_size * sizeof *logits);
	for (int32_t len = 1; len <= 400; len++) {
		int32_t id = (int32_t)(rnd() % 2048);
		engine_item its[2] = { { .seq = s0, .tokens = &id, .n_tokens = 1 },
		                       { .seq = s1, .tokens = &id, .n_tokens = 1 } };
		ck_assert_msg(engine_forward(e, its, 2, logits, err, sizeof err) == 0, "%s", err);
		ck_assert_int_eq(engine_seq_kv_bytes(e, s0), engine_regime_kv_pages(e, "s", len) * pb);
		ck_assert_int_eq(engine_seq_kv_bytes(e, s1), engine_regime_kv_pages(e, "s", len) * pb);
	}
	free(logits);
	engine_free(e0);
	engine_free(e);
	fixture_free(&fx);
}
END_TEST

/* ---- the prefix cache under sequences that take positions back ---- */

/* A prompt cached by a sequence that allows rollback restores into another such sequence (and into a plain one), and
 * each then decodes — speculating, with truncations — exactly as the one that computed the prompt. */
START_TEST(test_prefix_cache_rollback)
{
	fixture fx;
	rng_state = 4711;
	fixture_make(&fx, 5);
	char err[512];
	engine_params p = { .backend = test_backend(), .n_threads = 2, .max_seqs = 3, .ctx_len = CTX,
	                    .rollback = ENGINE_MAX_ROLLBACK, .prefix_cache = 1 };
	engine *e;
	ck_assert_msg(engine_init(&e, fx.dir, &p, err, sizeof err) == 0, "%s", err);
	const int32_t V = fx.mc.vocab_size, n = 300, steps = 200;
	int32_t ids[300];
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t)(rnd() % (uint32_t)V);
	float *ref = malloc((size_t)(steps + 1) * V * sizeof *ref), *rows = malloc((size_t)16 * V * sizeof *rows);
	int32_t toks[201];
	/* the first: the prompt in chunks (inserted after each), then greedy steps */
	int32_t s = engine_seq_open(e, "s", err, sizeof err);
	ck_assert_msg(engine_seq_allow_rollback(e, s, err, sizeof err) == 0, "%s", err);
	for (int32_t at = 0; at < n;) {
		const int32_t k = n - at < 64 ? n - at : 64;
		engine_item it = { .seq = s, .tokens = ids + at, .n_tokens = k, .cache = true };
		ck_assert_msg(engine_forward(e, &it, 1, ref, err, sizeof err) == 0, "%s", err);
		at += k;
		engine_prefix_insert(e, s, NULL, ids, NULL);
	}
	toks[0] = aah_argmax(ref, V);
	for (int32_t i = 0; i < steps; i++) {
		engine_item it = { .seq = s, .tokens = &toks[i], .n_tokens = 1 };
		ck_assert_msg(engine_forward(e, &it, 1, ref + (int64_t)i * V, err, sizeof err) == 0, "%s", err);
		toks[i + 1] = aah_argmax(ref + (int64_t)i * V, V);
	}
	const engine_seq_stats sref = stats_of(e, s);
	engine_seq_close(e, s);
	for (int variant = 0; variant < 2; variant++) {
		int32_t t = engine_seq_open(e, "s", err, sizeof err);
		if (variant == 0)
			ck_assert_msg(engine_seq_allow_rollback(e, t, err, sizeof err) == 0, "%s", err);
		const int32_t P = engine_prefix_restore(e, t, NULL, ids, n, NULL);
		ck_assert_msg(P > 200, "restored %d positions", P);
		engine_item rest = { .seq = t, .tokens = ids + P, .n_tokens = n - P };
		ck_assert_msg(engine_forward(e, &rest, 1, rows, err, sizeof err) == 0, "%s", err);
		int32_t j = 0;
		while (j < steps) {
			int32_t k = variant == 0 ? (int32_t)(rnd() % 8) : 0;
			if (k > steps - j - 1)
				k = steps - j - 1;
			int32_t tk[16];
			tk[0] = toks[j];
			for (int32_t m = 1; m <= k; m++)
				tk[m] = rnd() % 2 ? toks[j + m] : (toks[j + m] + 1) % V;
			engine_item v = { .seq = t, .tokens = tk, .n_tokens = k + 1, .all_logits = true, .generated = true };
			ck_assert_msg(engine_forward(e, &v, 1, rows, err, sizeof err) == 0, "%s", err);
			int32_t acc = 1;
			while (acc <= k && tk[acc] == toks[j + acc])
				acc++;
			for (int32_t r = 0; r < acc; r++)
				assert_row_equal(rows + (int64_t)r * V, ref + (int64_t)(j + r) * V, V, AAH_DTYPE_F32, "restored",
				                 n + j + r);
			if (variant == 0)
				ck_assert_msg(engine_seq_truncate(e, t, n + j + acc, err, sizeof err) == 0, "%s", err);
			j += acc;
		}
		engine_seq_stats st = stats_of(e, t);
		assert_stats_equal(&st, &sref, variant == 0 ? "restored, speculating" : "restored, plain");
		engine_seq_close(e, t);
	}
	free(ref); free(rows);
	engine_free(e);
	fixture_free(&fx);
}
END_TEST

int main(void)
{
	/* On the CUDA backend: skip without a device, and run in this process (a CUDA context does not survive fork). */
	if (on_cuda() && !aah_backend_cuda_available()) {
		printf("no CUDA device: skipped (AAH_TEST_BACKEND=cuda)\n");
		return 0;
	}
	Suite *s = suite_create("rollback");
	TCase *tc = tcase_create("speculation");
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_spec_equals_one_by_one, 0,
	                    (int)(sizeof spec_regimes / sizeof spec_regimes[0] * sizeof spec_types / sizeof spec_types[0]));
	tcase_add_test(tc, test_prefix_cache_rollback);
	suite_add_tcase(s, tc);
	tc = tcase_create("refusals");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_refusals);
	suite_add_tcase(s, tc);
	tc = tcase_create("policy");
	tcase_add_test(tc, test_policy_uncount);
	suite_add_tcase(s, tc);
	tc = tcase_create("pages");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_pages);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	if (on_cuda())
		srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
