/* tests/engine/check_prefix_cache.c — Check suite for the prefix cache (engine/prefix_cache.c, engine_prefix_*, the
 * scheduler's use of it): with the cache on, a hit, a miss, a partial hit and a full one give logits, tokens and
 * log-probabilities bit for bit those of the cache off, in full attention, a static and an adaptive AAH regime whose
 * rings wrap, and every KV type; under concurrent submitters; the cache yields every page before a request is refused
 * and keeps to its byte cap; pages shared copy-on-write never change under their other holders. No HTTP. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "tests/test_env.h"

#define CTX 256

static char aah_dir[256];

/* qwen3-small-a with an aah.json: an adaptive regime (probes every 3 decode steps) and a static one, both with
 * capacities below the prompts, so that rings wrap while a prompt is fed and while it decodes. */
static void make_aah_dir(void)
{
	snprintf(aah_dir, sizeof aah_dir, "/tmp/aah-prefix-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(aah_dir));
	const char *files[] = { "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json" };
	for (size_t i = 0; i < 4; i++) {
		char src[2048], dst[2048], abs_src[4096];
		snprintf(src, sizeof src, "%s/qwen3-small-a/%s", testdata(), files[i]);
		ck_assert_ptr_nonnull(realpath(src, abs_src));
		snprintf(dst, sizeof dst, "%s/%s", aah_dir, files[i]);
		ck_assert_int_eq(symlink(abs_src, dst), 0);
	}
	char p[2048];
	snprintf(p, sizeof p, "%s/aah.json", aah_dir);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	const char *layers = "\"layers\":["
	                     "{\"groups\":[{\"kv_heads\":[0],\"window\":32,\"capacity\":64},"
	                     "{\"kv_heads\":[1],\"window\":64,\"capacity\":128}]},"
	                     "{\"groups\":[{\"kv_heads\":[0,1],\"window\":32,\"capacity\":48}]}]";
	fprintf(f, "{\"version\":1,\"context_length\":256,\"candidate_windows\":[16,32,64,128],\"default_regime\":\"ad\","
	           "\"regimes\":{\"ad\":{\"policy\":{\"kind\":\"adaptive\",\"control_interval\":3,\"feature_ema\":0.5,"
	           "\"resolution_ema\":0.5,\"coverage\":0.6},%s},"
	           "\"st\":{\"policy\":{\"kind\":\"static\"},%s}}}", layers, layers);
	fclose(f);
}

static void remove_aah_dir(void)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", aah_dir);
	ck_assert_int_eq(system(cmd), 0);
}

static engine_params eparams(aah_dtype kv, int32_t prefix)
{
	engine_params p = { 0 };
	p.n_threads = 1;
	p.max_seqs = 4;
	p.ctx_len = CTX;
	p.max_batch_tokens = 64;
	p.kv_dtype = kv;
	p.prefix_cache = prefix;
	return p;
}

static void make_tokens(int32_t *p, int32_t n, uint32_t seed)
{
	for (int32_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (int32_t)((seed >> 8) % 2048);
	}
}

/* ---- the engine: restore, feed the rest in chunks (inserting after each), decode greedily ---- */

enum { MAXP = 200, GEN = 12 };

/* Runs prompt (n) on e: restore (when the cache is on), the rest in chunks of `chunk` (never leaving one token), every
 * row's logits kept, then GEN greedy tokens. rows: (n + GEN, vocab) logits after each position, the restored positions'
 * rows left as they were. Returns the positions restored. */
static engine_seq_stats last_stats;   /* engine_run's sequence's, just before it closed */
static const char *run_tenant;        /* the prefix-cache tenant engine_run's prompts are under (NULL: none) */

static int32_t engine_run(engine *e, const char *regime, const int32_t *prompt, int32_t n, int32_t chunk, float *rows,
                          int32_t *gen)
{
	char err[256];
	const int32_t V = engine_config(e)->vocab_size;
	int32_t seq = engine_seq_open(e, regime, err, sizeof err);
	ck_assert_msg(seq >= 0, "%s", err);
	const int32_t restored = engine_prefix_restore(e, seq, run_tenant, prompt, n, NULL);
	ck_assert_int_eq(engine_seq_len(e, seq), restored);
	ck_assert_int_le(restored, n - 2);
	int32_t at = restored;
	while (at < n) {
		int32_t c = n - at < chunk ? n - at : chunk;
		if (n - at - c == 1)
			c--;
		engine_item it = { seq, prompt + at, c, true, true, false };
		ck_assert_msg(engine_forward(e, &it, 1, rows + (int64_t)at * V, err, sizeof err) == 0, "%s", err);
		at += c;
		engine_prefix_insert(e, seq, run_tenant, prompt, NULL);
	}
	const float *last = rows + (int64_t)(n - 1) * V;
	for (int32_t g = 0; g < GEN; g++) {
		gen[g] = sampler_argmax(last, V);
		engine_item it = { seq, &gen[g], 1, false, false, false };
		ck_assert_msg(engine_forward(e, &it, 1, rows + (int64_t)(n + g) * V, err, sizeof err) == 0, "%s", err);
		last = rows + (int64_t)(n + g) * V;
	}
	engine_seq_stats st;
	ck_assert_int_eq(engine_seq_stats_get(e, seq, &st), 0);
	ck_assert_int_eq(st.n_positions, n + GEN);
	last_stats = st;
	engine_seq_close(e, seq);
	return restored;
}

/* The prompts of the engine tests: a 100-token context C; C + 5 different tails (multiple choice); the first again
 * (a whole hit); it extended by 60 (a chat's next turn); a prompt sharing only 20 tokens (a partial block: a miss);
 * one that parts from C after 40 (an earlier boundary). Returns how many; lens[i], toks[i]. */
static int32_t engine_prompts(int32_t toks[][MAXP], int32_t *lens)
{
	int32_t ctx[MAXP];
	make_tokens(ctx, MAXP, 11);
	int32_t k = 0;
	for (int32_t t = 0; t < 5; t++) {
		memcpy(toks[k], ctx, 100 * sizeof(int32_t));
		make_tokens(toks[k] + 100, 3 + 7 * t, 100u + (uint32_t)t);
		lens[k++] = 100 + 3 + 7 * t;
	}
	memcpy(toks[k], toks[0], (size_t)lens[0] * sizeof(int32_t));
	lens[k++] = lens[0];
	memcpy(toks[k], toks[4], (size_t)lens[4] * sizeof(int32_t));
	make_tokens(toks[k] + lens[4], 60, 999);
	lens[k] = lens[4] + 60;
	k++;
	memcpy(toks[k], ctx, 20 * sizeof(int32_t));
	make_tokens(toks[k] + 20, 50, 555);
	lens[k++] = 70;
	memcpy(toks[k], ctx, 40 * sizeof(int32_t));
	make_tokens(toks[k] + 40, 90, 777);
	lens[k++] = 130;
	return k;
}

static int32_t engine_peek_tenant(engine *e, const char *tenant, const int32_t *p)
{
	return engine_prefix_peek(e, "st", tenant, p, 120, -1);
}

/* Every row the cached run computed equals the uncached run's, bit for bit, and so do the generated tokens. */
static void engine_equal(const char *regime, aah_dtype kv, int32_t chunk)
{
	char err[512];
	engine_params off = eparams(kv, 0), on = eparams(kv, 1);
	engine *a, *b;
	ck_assert_msg(engine_init(&a, aah_dir, &off, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(engine_init(&b, aah_dir, &on, err, sizeof err) == 0, "%s", err);
	const int32_t V = engine_config(a)->vocab_size;
	static int32_t toks[16][MAXP];
	int32_t lens[16];
	const int32_t n = engine_prompts(toks, lens);
	float *ra = malloc((size_t)(MAXP + GEN + 64) * V * sizeof(float));
	float *rb = malloc((size_t)(MAXP + GEN + 64) * V * sizeof(float));
	int32_t hits = 0, restored_total = 0;
	for (int32_t i = 0; i < n; i++) {
		int32_t ga[GEN], gb[GEN];
		ck_assert_int_eq(engine_run(a, regime, toks[i], lens[i], lens[i], ra, ga), 0);
		const engine_seq_stats sa = last_stats;
		int32_t r = engine_run(b, regime, toks[i], lens[i], chunk, rb, gb);
		const engine_seq_stats *sb = &last_stats;
		/* the aah figures too: work, usage, ACR, the KV peak */
		ck_assert_msg(sa.attn_products == sb->attn_products && sa.attn_products_full == sb->attn_products_full,
		              "%s prompt %d: %llu / %llu products without the cache, %llu / %llu with", regime, i,
		              (unsigned long long)sa.attn_products, (unsigned long long)sa.attn_products_full,
		              (unsigned long long)sb->attn_products, (unsigned long long)sb->attn_products_full);
		ck_assert(sa.acr == sb->acr);
		ck_assert_int_eq(sa.n_usage, sb->n_usage);
		ck_assert_mem_eq(sa.usage, sb->usage, (size_t)sa.n_usage * sizeof *sa.usage);
		ck_assert_int_eq(sa.kv_bytes_peak, sb->kv_bytes_peak);
		hits += r > 0;
		restored_total += r;
		for (int32_t p = r; p < lens[i] + GEN; p++)
			ck_assert_msg(!memcmp(ra + (int64_t)p * V, rb + (int64_t)p * V, (size_t)V * sizeof(float)),
			              "%s %s prompt %d (%d tokens, %d restored): the logits after position %d differ", regime,
			              aah_dtype_name(kv), i, lens[i], r, p);
		ck_assert_mem_eq(ga, gb, sizeof ga);
	}
	engine_prefix_stats st;
	engine_prefix_stats_get(b, &st);
	ck_assert(st.enabled);
	ck_assert_uint_eq(st.queries, (uint64_t)n);
	ck_assert_uint_eq(st.hits, (uint64_t)hits);
	ck_assert_uint_eq(st.hit_tokens, (uint64_t)restored_total);
	/* the tails hit the context's 6 blocks (95 positions); the repeat and the next turn more; the 20-token one misses */
	ck_assert_int_ge(hits, 6);
	ck_assert_int_gt(st.bytes, 0);
	/* every page the cache holds is the cache's alone now (no sequence is open) */
	ck_assert_int_eq(engine_kv_pages_used(b) * engine_kv_page_bytes(b), st.bytes);
	engine_prefix_clear(b);
	ck_assert_int_eq(engine_kv_pages_used(b), 0);
	free(ra);
	free(rb);
	engine_free(a);
	engine_free(b);
}

static void aah_setup(void) { make_aah_dir(); }
static void aah_teardown(void) { remove_aah_dir(); }

static const aah_dtype kv_types[3] = { AAH_DTYPE_F32, AAH_DTYPE_F16, AAH_DTYPE_BF16 };

START_TEST(test_engine_full_attention) { engine_equal("full_attention", kv_types[_i], 64); }
END_TEST
START_TEST(test_engine_static) { engine_equal("st", kv_types[_i], 64); }
END_TEST
START_TEST(test_engine_adaptive) { engine_equal("ad", kv_types[_i], 64); }
END_TEST
/* chunks shorter than a block: blocks complete across chunks, and rings wrap between inserts */
START_TEST(test_engine_small_chunks) { engine_equal(_i ? "ad" : "full_attention", AAH_DTYPE_F16, 6); }
END_TEST

/* A regime's blocks serve only that regime. */
START_TEST(test_engine_regime_apart)
{
	char err[512];
	engine_params on = eparams(AAH_DTYPE_F32, 1);
	engine *e;
	ck_assert_msg(engine_init(&e, aah_dir, &on, err, sizeof err) == 0, "%s", err);
	const int32_t V = engine_config(e)->vocab_size;
	int32_t p[120], g[GEN];
	make_tokens(p, 120, 5);
	float *rows = malloc((size_t)(120 + GEN) * V * sizeof(float));
	ck_assert_int_eq(engine_run(e, "st", p, 120, 64, rows, g), 0);
	ck_assert_int_eq(engine_prefix_peek(e, "full_attention", NULL, p, 120, -1), 0);
	ck_assert_int_eq(engine_prefix_peek(e, "ad", NULL, p, 120, -1), 0);
	ck_assert_int_eq(engine_prefix_peek(e, "st", NULL, p, 120, -1), 7 * 16 - 1);
	ck_assert_int_eq(engine_run(e, "full_attention", p, 120, 64, rows, g), 0);
	ck_assert_int_eq(engine_run(e, "st", p, 120, 64, rows, g), 7 * 16 - 1);
	free(rows);
	engine_free(e);
}
END_TEST

/* One beginning, different continuations, in every regime: P (150 tokens) + tails of 20, 60 and 90 tokens, each prompt
 * fed whole (one item longer than every windowed ring, so the rings drop pages inside it and the spill keeps them) or
 * in chunks of 64. Every continuation after the first restores P's 9 whole blocks (143 positions), bit for bit; a
 * prompt that parts from the second inside its tail (after 200 tokens, past the partly restored page the second
 * started on) restores 12 blocks, which needs the spilled pages around that boundary. */
static void divergent(const char *regime, aah_dtype kv, int32_t chunk)
{
	char err[512];
	engine_params off = eparams(kv, 0), on = eparams(kv, 1);
	engine *a, *b;
	ck_assert_msg(engine_init(&a, aah_dir, &off, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(engine_init(&b, aah_dir, &on, err, sizeof err) == 0, "%s", err);
	const int32_t V = engine_config(a)->vocab_size;
	static int32_t toks[4][CTX];
	const int32_t lens[4] = { 170, 210, 240, 230 };
	make_tokens(toks[0], 150, 21);
	for (int32_t t = 0; t < 3; t++) {
		memcpy(toks[t], toks[0], 150 * sizeof(int32_t));
		make_tokens(toks[t] + 150, lens[t] - 150, 300u + (uint32_t)t);
	}
	memcpy(toks[3], toks[1], 200 * sizeof(int32_t));
	make_tokens(toks[3] + 200, 30, 400);
	const int32_t want[4] = { 0, 143, 143, 12 * 16 - 1 };
	float *ra = malloc((size_t)(CTX + GEN) * V * sizeof(float));
	float *rb = malloc((size_t)(CTX + GEN) * V * sizeof(float));
	for (int32_t i = 0; i < 4; i++) {
		int32_t ga[GEN], gb[GEN];
		ck_assert_int_eq(engine_run(a, regime, toks[i], lens[i], lens[i], ra, ga), 0);
		const engine_seq_stats sa = last_stats;
		int32_t r = engine_run(b, regime, toks[i], lens[i], chunk, rb, gb);
		ck_assert_msg(r == want[i], "%s %s chunk %d prompt %d: %d positions restored, want %d", regime,
		              aah_dtype_name(kv), chunk, i, r, want[i]);
		ck_assert(sa.attn_products == last_stats.attn_products && sa.acr == last_stats.acr);
		ck_assert_int_eq(sa.kv_bytes_peak, last_stats.kv_bytes_peak);
		for (int32_t p = r; p < lens[i] + GEN; p++)
			ck_assert_msg(!memcmp(ra + (int64_t)p * V, rb + (int64_t)p * V, (size_t)V * sizeof(float)),
			              "%s prompt %d: the logits after position %d differ", regime, i, p);
		ck_assert_mem_eq(ga, gb, sizeof ga);
	}
	/* every page is the cache's alone now, and accounted */
	engine_prefix_stats st;
	engine_prefix_stats_get(b, &st);
	ck_assert_int_eq(engine_kv_pages_used(b) * engine_kv_page_bytes(b), st.bytes);
	engine_prefix_clear(b);
	ck_assert_int_eq(engine_kv_pages_used(b), 0);
	free(ra);
	free(rb);
	engine_free(a);
	engine_free(b);
}

static const char *const div_regimes[3] = { "st", "ad", "full_attention" };
START_TEST(test_divergent_whole) { divergent(div_regimes[_i % 3], _i < 3 ? AAH_DTYPE_F32 : AAH_DTYPE_F16, CTX); }
END_TEST
START_TEST(test_divergent_chunks) { divergent(div_regimes[_i % 3], _i < 3 ? AAH_DTYPE_F16 : AAH_DTYPE_F32, 64); }
END_TEST

/* Tenants: the same prompt under another tenant restores nothing; under its own it hits. */
START_TEST(test_tenants_apart)
{
	char err[512];
	engine_params on = eparams(AAH_DTYPE_F32, 1);
	engine *e;
	ck_assert_msg(engine_init(&e, aah_dir, &on, err, sizeof err) == 0, "%s", err);
	const int32_t V = engine_config(e)->vocab_size;
	int32_t p[120], g[GEN];
	make_tokens(p, 120, 5);
	float *rows = malloc((size_t)(120 + GEN) * V * sizeof(float));
	const char *order[] = { "A", "B", NULL, "", "A", "B", "AB" };
	const int32_t want[] = { 0, 0, 0, 7 * 16 - 1, 7 * 16 - 1, 7 * 16 - 1, 0 };   /* "" is the shared one, as NULL */
	for (int32_t i = 0; i < 7; i++) {
		run_tenant = order[i];
		ck_assert_int_eq(engine_peek_tenant(e, order[i], p), want[i]);
		ck_assert_msg(engine_run(e, "st", p, 120, 64, rows, g) == want[i], "tenant %s", order[i] ? order[i] : "NULL");
	}
	run_tenant = NULL;
	free(rows);
	engine_free(e);
}
END_TEST

/* Eviction under a byte cap that holds two 200-token prompts' pages (12 blocks of 4 heads each: 48 pages, every
 * head's, the windowed ones' spilled pages included): a shared beginning outlives the tails of older prompts. P + A,
 * then P + B (a hit at P's 6 blocks touches them), then Q (another beginning): the cap evicts A's tail first, the
 * least recently used leaves, and P + C still hits P's blocks; and a spill never evicts its own prompt's blocks. */
START_TEST(test_evict_tails_before_shared_beginning)
{
	char err[512];
	engine_params on = eparams(AAH_DTYPE_F32, 1);
	engine *e;
	ck_assert_msg(engine_init(&e, aah_dir, &on, err, sizeof err) == 0, "%s", err);
	const int64_t page = engine_kv_page_bytes(e);
	engine_free(e);
	on.prefix_cache_bytes = 100 * page;
	ck_assert_msg(engine_init(&e, aah_dir, &on, err, sizeof err) == 0, "%s", err);
	const int32_t V = engine_config(e)->vocab_size;
	static int32_t pa[200], pb[200], pc[200], q[200];
	int32_t g[GEN];
	make_tokens(pa, 200, 77);
	memcpy(pb, pa, 100 * sizeof(int32_t));
	memcpy(pc, pa, 100 * sizeof(int32_t));
	make_tokens(pa + 100, 100, 1);
	make_tokens(pb + 100, 100, 2);
	make_tokens(pc + 100, 100, 3);
	make_tokens(q, 200, 4);
	float *rows = malloc((size_t)(200 + GEN) * V * sizeof(float));
	ck_assert_int_eq(engine_run(e, "st", pa, 200, 200, rows, g), 0);
	engine_prefix_stats st;
	engine_prefix_stats_get(e, &st);
	ck_assert_int_eq(st.bytes, 48 * page);   /* every head's page of every block: the windowed heads' spilled too */
	ck_assert_int_eq(engine_run(e, "st", pb, 200, 200, rows, g), 6 * 16 - 1);
	engine_prefix_stats_get(e, &st);
	ck_assert_int_eq(st.bytes, (12 + 6) * 4 * page);   /* P's 6 blocks once, A's and B's tails */
	ck_assert_uint_eq(st.evictions, 0);
	ck_assert_int_eq(engine_run(e, "st", q, 200, 200, rows, g), 0);
	engine_prefix_stats_get(e, &st);
	ck_assert_int_le(st.bytes, 100 * page);
	ck_assert_uint_eq(st.evictions, 5);   /* 120 pages over the cap of 100: 5 of the 6 blocks of A's tail */
	ck_assert_int_eq(engine_run(e, "st", pb, 200, 200, rows, g), 12 * 16 - 1);   /* B is whole */
	ck_assert_int_eq(engine_run(e, "st", pc, 200, 200, rows, g), 6 * 16 - 1);    /* P's beginning is there */
	/* C's tail took the room of A's last block, the oldest leaf: A again hits only P's 6 */
	ck_assert_int_eq(engine_run(e, "st", pa, 200, 200, rows, g), 6 * 16 - 1);
	engine_prefix_stats_get(e, &st);
	ck_assert_int_le(st.bytes, 100 * page);
	free(rows);
	engine_free(e);
}
END_TEST

/* A forked sequence shares its source's pages; writes copy them, so neither changes the other: both go on exactly as
 * a lone run, and the shared pages are counted once in the pool. */
START_TEST(test_fork_copy_on_write)
{
	char err[512];
	engine_params ep = eparams(AAH_DTYPE_F16, 0);
	engine *e, *r;
	ck_assert_msg(engine_init(&e, aah_dir, &ep, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(engine_init(&r, aah_dir, &ep, err, sizeof err) == 0, "%s", err);
	const int32_t V = engine_config(e)->vocab_size;
	int32_t p[150];
	make_tokens(p, 150, 21);
	float *la = malloc((size_t)V * sizeof(float)), *lb = malloc((size_t)V * sizeof(float));
	float *lr = malloc((size_t)V * sizeof(float));
	int32_t a = engine_seq_open(e, "st", err, sizeof err);
	engine_item it = { a, p, 101, false, false, false };   /* 101: the last page is partly written, and shared */
	ck_assert(engine_forward(e, &it, 1, la, err, sizeof err) == 0);
	int64_t used = engine_kv_pages_used(e);
	int32_t b = engine_seq_fork(e, a, err, sizeof err);
	ck_assert_msg(b >= 0, "%s", err);
	ck_assert_int_eq(engine_kv_pages_used(e), used);   /* shared, not copied */
	int32_t s = engine_seq_open(r, "st", err, sizeof err);
	engine_item ir = { s, p, 101, false, false, false };
	ck_assert(engine_forward(r, &ir, 1, lr, err, sizeof err) == 0);
	/* a and b diverge: a is fed p[101…], b other tokens; each must equal a lone run of its own tokens */
	int32_t q[60];
	make_tokens(q, 60, 22);
	engine_item two[2] = { { a, p + 101, 49, false, false, false }, { b, q, 49, false, false, false } };
	ck_assert(engine_forward(e, two, 2, NULL, err, sizeof err) == 0);
	engine_item more = { s, p + 101, 49, false, false, false };
	ck_assert(engine_forward(r, &more, 1, lr, err, sizeof err) == 0);
	engine_item step_a = { a, p + 149, 1, false, false, false };
	ck_assert(engine_forward(e, &step_a, 1, la, err, sizeof err) == 0);
	engine_item step_r = { s, p + 149, 1, false, false, false };
	ck_assert(engine_forward(r, &step_r, 1, lr, err, sizeof err) == 0);
	ck_assert_mem_eq(la, lr, (size_t)V * sizeof(float));
	engine_seq_close(r, s);
	s = engine_seq_open(r, "st", err, sizeof err);
	int32_t pq[160];
	memcpy(pq, p, 101 * sizeof(int32_t));
	memcpy(pq + 101, q, 50 * sizeof(int32_t));
	engine_item whole = { s, pq, 151, false, false, false };
	ck_assert(engine_forward(r, &whole, 1, lr, err, sizeof err) == 0);
	engine_item step_b = { b, q + 49, 1, false, false, false };
	ck_assert(engine_forward(e, &step_b, 1, lb, err, sizeof err) == 0);
	ck_assert_mem_eq(lb, lr, (size_t)V * sizeof(float));
	engine_seq_close(e, a);
	engine_seq_close(e, b);
	ck_assert_int_eq(engine_kv_pages_used(e), 0);
	free(la);
	free(lb);
	free(lr);
	engine_free(e);
	engine_free(r);
}
END_TEST

/* Three forks of a 10-token sequence (one page per ring, shared by all three) in a pool with room for exactly two more
 * pages per ring: the step that writes all three asks for two copies per ring — the third writer holds the page
 * alone by then — and runs; each fork's logits equal a lone run's. */
START_TEST(test_fork_batch_need_exact)
{
	char err[512];
	engine_params ep = eparams(AAH_DTYPE_F32, 0);
	engine *probe;
	ck_assert_msg(engine_init(&probe, aah_dir, &ep, err, sizeof err) == 0, "%s", err);
	const int64_t page = engine_kv_page_bytes(probe);
	const int32_t rings = engine_config(probe)->n_layers * engine_config(probe)->n_kv_heads;
	engine_free(probe);
	ep.kv_budget_bytes = 3 * rings * page;
	engine *e, *r;
	ck_assert_msg(engine_init(&e, aah_dir, &ep, err, sizeof err) == 0, "%s", err);
	ep.kv_budget_bytes = 0;
	ck_assert_msg(engine_init(&r, aah_dir, &ep, err, sizeof err) == 0, "%s", err);
	const int32_t V = engine_config(e)->vocab_size;
	int32_t p[10], next[3] = { 5, 6, 7 };
	make_tokens(p, 10, 41);
	float *l = malloc((size_t)3 * V * sizeof(float)), *lr = malloc((size_t)V * sizeof(float));
	int32_t s[3];
	s[0] = engine_seq_open(e, "full_attention", err, sizeof err);
	engine_item it = { s[0], p, 10, false, false, false };
	ck_assert_msg(engine_forward(e, &it, 1, l, err, sizeof err) == 0, "%s", err);
	s[1] = engine_seq_fork(e, s[0], err, sizeof err);
	s[2] = engine_seq_fork(e, s[0], err, sizeof err);
	ck_assert(s[1] >= 0 && s[2] >= 0);
	ck_assert_int_eq(engine_kv_pages_used(e), rings);
	engine_item three[3] = { { s[0], &next[0], 1, false, false, false }, { s[1], &next[1], 1, false, false, false }, { s[2], &next[2], 1, false, false, false } };
	ck_assert_msg(engine_forward(e, three, 3, l, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(engine_kv_pages_used(e), 3 * rings);
	for (int32_t k = 0; k < 3; k++) {
		int32_t q = engine_seq_open(r, "full_attention", err, sizeof err), pq[11];
		memcpy(pq, p, sizeof p);
		pq[10] = next[k];
		engine_item w = { q, pq, 11, false, false, false };
		ck_assert(engine_forward(r, &w, 1, lr, err, sizeof err) == 0);
		ck_assert_mem_eq(l + (int64_t)k * V, lr, (size_t)V * sizeof(float));
		engine_seq_close(r, q);
	}
	free(l);
	free(lr);
	engine_free(e);
	engine_free(r);
}
END_TEST

/* ---- the scheduler: the same requests with the cache off and on ---- */

typedef struct run_out {
	int32_t n_tokens;
	int32_t tokens[GEN];
	float gen_lp[GEN];
	float prompt_lp[MAXP];
	int32_t prompt_top[MAXP * 2];
	float prompt_top_lp[MAXP * 2];
	int32_t cached;
} run_out;

typedef struct sched_pair {
	engine *e[2];
	sched *s[2];
} sched_pair;

static void pair_start(sched_pair *sp, aah_dtype kv, int64_t kv_budget, int64_t cap_bytes, int32_t step_tokens)
{
	char err[512];
	for (int32_t k = 0; k < 2; k++) {
		engine_params ep = eparams(kv, k);
		ep.kv_budget_bytes = kv_budget;
		ep.prefix_cache_bytes = cap_bytes;
		ck_assert_msg(engine_init(&sp->e[k], aah_dir, &ep, err, sizeof err) == 0, "%s", err);
		sched_params p = { .max_seqs = 4, .queue_length = 64, .step_tokens = step_tokens };
		ck_assert_msg(sched_init(&sp->s[k], sp->e[k], &ep, &p, err, sizeof err) == 0, "%s", err);
	}
}

static void pair_stop(sched_pair *sp)
{
	for (int32_t k = 0; k < 2; k++) {
		sched_free(sp->s[k]);
		engine_free(sp->e[k]);
	}
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

static void collect(sched_request *r, const sched_result *res, int32_t n_prompt, bool echo, run_out *o)
{
	memset(o, 0, sizeof *o);
	o->n_tokens = res->n_tokens;
	o->cached = res->cached_tokens;
	memcpy(o->tokens, sched_request_tokens(r), (size_t)res->n_tokens * sizeof(int32_t));
	const sched_logprob_rows *g = sched_request_token_logprobs(r);
	memcpy(o->gen_lp, g->logprob, (size_t)res->n_tokens * sizeof(float));
	if (echo) {
		const sched_logprob_rows *p = sched_request_prompt_logprobs(r);
		memcpy(o->prompt_lp + 1, p->logprob + 1, (size_t)(n_prompt - 1) * sizeof(float));
		memcpy(o->prompt_top + 2, p->top_ids + 2, (size_t)(n_prompt - 1) * 2 * sizeof(int32_t));
		memcpy(o->prompt_top_lp + 2, p->top_logprobs + 2, (size_t)(n_prompt - 1) * 2 * sizeof(float));
	}
}

/* One multiple-choice request: n prompts (context + continuation) submitted together, echo with 2 log-probabilities
 * and max_tokens gen (0: scoring only), on both schedulers; every number equal. Returns Σ cached tokens (cache on). */
static int32_t mc_request(sched_pair *sp, const char *regime, int32_t (*toks)[MAXP], const int32_t *lens, int32_t n,
                          int32_t gen, float temperature, uint64_t seed)
{
	char err[256];
	run_out *out[2];
	int32_t cached = 0;
	for (int32_t k = 0; k < 2; k++) {
		out[k] = calloc((size_t)n, sizeof(run_out));
		sched_request_params rp[8];
		sched_request *r[8];
		for (int32_t i = 0; i < n; i++) {
			memset(&rp[i], 0, sizeof rp[i]);
			rp[i].prompt = toks[i];
			rp[i].n_prompt = lens[i];
			rp[i].max_tokens = gen;
			rp[i].sampling.top_p = 1;
			rp[i].sampling.temperature = temperature;
			rp[i].sampling.seed = seed + (uint64_t)i;
			rp[i].regime = regime;
			rp[i].logprobs = 2;
			rp[i].prompt_logprobs = true;
		}
		ck_assert_msg(sched_submit(sp->s[k], rp, n, r, err, sizeof err) == SCHED_OK, "%s", err);
		for (int32_t i = 0; i < n; i++) {
			sched_result res = wait_end(r[i]);
			ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
			collect(r[i], &res, lens[i], true, &out[k][i]);
			if (k == 0)
				ck_assert_int_eq(res.cached_tokens, 0);
			cached += k == 1 ? res.cached_tokens : 0;
			sched_request_release(r[i]);
		}
	}
	for (int32_t i = 0; i < n; i++) {
		const run_out *a = &out[0][i], *b = &out[1][i];
		ck_assert_int_eq(a->n_tokens, b->n_tokens);
		ck_assert_mem_eq(a->tokens, b->tokens, sizeof a->tokens);
		ck_assert_mem_eq(a->gen_lp, b->gen_lp, sizeof a->gen_lp);
		ck_assert_msg(!memcmp(a->prompt_lp, b->prompt_lp, sizeof a->prompt_lp), "%s prompt %d: prompt log-probabilities"
		              " differ (cached %d)", regime, i, b->cached);
		ck_assert_mem_eq(a->prompt_top, b->prompt_top, sizeof a->prompt_top);
		ck_assert_mem_eq(a->prompt_top_lp, b->prompt_top_lp, sizeof a->prompt_top_lp);
	}
	free(out[0]);
	free(out[1]);
	return cached;
}

/* Multiple choice as aah-eval sends it: the first prompt prefills the context, the others wait for it and start
 * after it — in one request, then again in a second request over the same context (a whole hit). */
static void sched_mc(const char *regime, aah_dtype kv)
{
	sched_pair sp;
	pair_start(&sp, kv, 0, 0, 48);
	static int32_t toks[4][MAXP];
	int32_t lens[4];
	int32_t ctx[MAXP];
	make_tokens(ctx, MAXP, 31);
	for (int32_t i = 0; i < 4; i++) {
		memcpy(toks[i], ctx, 90 * sizeof(int32_t));
		make_tokens(toks[i] + 90, 2 + 5 * i, 40u + (uint32_t)i);
		lens[i] = 92 + 5 * i;
	}
	int32_t c1 = mc_request(&sp, regime, toks, lens, 4, 0, 0, 1);
	ck_assert_int_ge(c1, 3 * (5 * 16 - 1));   /* the three others start after the context's 5 whole blocks */
	int32_t c2 = mc_request(&sp, regime, toks, lens, 4, 6, 0.8f, 7);   /* again, and generating, sampled */
	ck_assert_int_ge(c2, 4 * (5 * 16 - 1));
	sched_metrics m;
	sched_metrics_get(sp.s[1], &m);
	ck_assert(m.prefix.enabled);
	ck_assert_uint_eq(m.prefix.hit_tokens, (uint64_t)(c1 + c2));
	ck_assert_uint_le(m.prefix.hits, m.prefix.queries);
	ck_assert_uint_ge(m.prefix.hits, 7);
	sched_metrics m0;
	sched_metrics_get(sp.s[0], &m0);
	ck_assert(!m0.prefix.enabled);
	ck_assert_uint_eq(m.prompt_tokens + m.prefix.hit_tokens, m0.prompt_tokens);   /* what the cache saved, exactly */
	pair_stop(&sp);
}

START_TEST(test_sched_mc_full) { sched_mc("full_attention", kv_types[_i]); }
END_TEST
START_TEST(test_sched_mc_adaptive) { sched_mc("ad", kv_types[_i]); }
END_TEST

/* Concurrent submitters of prompts that share beginnings (few-shot style: one of 3 prefixes, then a tail), greedy
 * and sampled, with logprobs: every result equals the cache-off scheduler's. */
typedef struct submitter {
	sched *s;
	const char *regime;
	int32_t prompt[MAXP], n;
	float temperature;
	uint64_t seed;
	run_out out;
} submitter;

static void *submit_main(void *arg)
{
	submitter *t = arg;
	char err[256];
	sched_request_params rp = { 0 };
	rp.prompt = t->prompt;
	rp.n_prompt = t->n;
	rp.max_tokens = GEN;
	rp.sampling.top_p = 1;
	rp.sampling.temperature = t->temperature;
	rp.sampling.seed = t->seed;
	rp.regime = t->regime;
	rp.logprobs = 1;
	sched_request *r;
	sched_status st;
	while ((st = sched_submit(t->s, &rp, 1, &r, err, sizeof err)) == SCHED_ERR_QUEUE_FULL)
		usleep(1000);
	ck_assert_msg(st == SCHED_OK, "%s", err);
	sched_result res = wait_end(r);
	ck_assert_int_eq(res.finish, SCHED_FINISH_LENGTH);
	collect(r, &res, t->n, false, &t->out);
	sched_request_release(r);
	return NULL;
}

START_TEST(test_sched_concurrent)
{
	sched_pair sp;
	/* a pool that the prompts' cached blocks outgrow, so that evictions happen under the load */
	engine *probe;
	char err[512];
	engine_params ep = eparams(AAH_DTYPE_F16, 0);
	ck_assert_msg(engine_init(&probe, aah_dir, &ep, err, sizeof err) == 0, "%s", err);
	const int64_t page = engine_kv_page_bytes(probe);
	const int64_t budget = 2 * engine_regime_kv_pages(probe, "full_attention", 200 + GEN) * page;
	engine_free(probe);
	pair_start(&sp, AAH_DTYPE_F16, budget, 0, 32);
	enum { N = 12 };
	static submitter subs[2][N];
	int32_t base[3][MAXP];
	for (int32_t b = 0; b < 3; b++)
		make_tokens(base[b], MAXP, 60u + (uint32_t)b);
	const char *regimes[3] = { "full_attention", "st", "ad" };
	for (int32_t k = 0; k < 2; k++)
		for (int32_t i = 0; i < N; i++) {
			submitter *t = &subs[k][i];
			memset(t, 0, sizeof *t);
			t->s = sp.s[k];
			t->regime = regimes[i % 3];
			int32_t shared = 40 + 30 * (i % 4);
			memcpy(t->prompt, base[i % 3], (size_t)shared * sizeof(int32_t));
			make_tokens(t->prompt + shared, 8 + i, 500u + (uint32_t)i);
			t->n = shared + 8 + i;
			t->temperature = i % 2 ? 0.7f : 0;
			t->seed = 90 + (uint64_t)i;
		}
	for (int32_t round = 0; round < 2; round++)   /* the second round hits what the first left */
		for (int32_t k = 0; k < 2; k++) {
			pthread_t th[N];
			for (int32_t i = 0; i < N; i++)
				ck_assert_int_eq(pthread_create(&th[i], NULL, submit_main, &subs[k][i]), 0);
			for (int32_t i = 0; i < N; i++)
				pthread_join(th[i], NULL);
			for (int32_t i = 0; k == 1 && i < N; i++) {
				const run_out *a = &subs[0][i].out, *b = &subs[1][i].out;
				ck_assert_int_eq(a->n_tokens, b->n_tokens);
				ck_assert_msg(!memcmp(a->tokens, b->tokens, sizeof a->tokens), "round %d submitter %d (%s, cached %d):"
				              " tokens differ", round, i, subs[1][i].regime, b->cached);
				ck_assert_mem_eq(a->gen_lp, b->gen_lp, sizeof a->gen_lp);
			}
		}
	sched_metrics m;
	sched_metrics_get(sp.s[1], &m);
	ck_assert_uint_gt(m.prefix.hits, 0);
	ck_assert_uint_gt(m.prefix.evictions, 0);
	ck_assert_int_le(m.kv_bytes_used, m.kv_bytes_capacity);
	pair_stop(&sp);
}
END_TEST

/* The cache yields: a pool full of cached blocks still takes the largest request it could ever take, at once, with
 * the tokens of the cache off; and the byte cap holds after every prompt. */
START_TEST(test_eviction_never_refuses)
{
	char err[512];
	engine_params ep = eparams(AAH_DTYPE_F32, 1);
	engine *probe;
	ck_assert_msg(engine_init(&probe, aah_dir, &ep, err, sizeof err) == 0, "%s", err);
	const int64_t page = engine_kv_page_bytes(probe);
	const int64_t pages_big = engine_regime_kv_pages(probe, "full_attention", CTX);
	engine_free(probe);
	ep.kv_budget_bytes = pages_big * page;   /* one full-context sequence: the cache must give all back */
	engine *e;
	ck_assert_msg(engine_init(&e, aah_dir, &ep, err, sizeof err) == 0, "%s", err);
	sched *s;
	sched_params p = { .max_seqs = 2, .queue_length = 8, .step_tokens = 64 };
	ck_assert_msg(sched_init(&s, e, &ep, &p, err, sizeof err) == 0, "%s", err);
	int32_t prompt[CTX];
	for (int32_t i = 0; i < 6; i++) {   /* six different 120-token prompts: more than the pool holds */
		make_tokens(prompt, 120, 300u + (uint32_t)i);
		sched_request_params rp = { 0 };
		rp.prompt = prompt;
		rp.n_prompt = 120;
		rp.max_tokens = 2;
		rp.sampling.top_p = 1;
		rp.regime = "full_attention";
		rp.logprobs = -1;
		sched_request *r;
		ck_assert_msg(sched_submit(s, &rp, 1, &r, err, sizeof err) == SCHED_OK, "%s", err);
		ck_assert_int_eq(wait_end(r).finish, SCHED_FINISH_LENGTH);
		sched_request_release(r);
	}
	sched_metrics m;
	sched_metrics_get(s, &m);
	ck_assert_int_gt(m.prefix.bytes, 0);
	ck_assert_uint_gt(m.prefix.evictions, 0);
	/* the whole context: prompt + max_tokens = CTX */
	make_tokens(prompt, CTX - 8, 9);
	sched_request_params rp = { 0 };
	rp.prompt = prompt;
	rp.n_prompt = CTX - 8;
	rp.max_tokens = 8;
	rp.sampling.top_p = 1;
	rp.regime = "full_attention";
	rp.logprobs = -1;
	sched_request *r;
	ck_assert_msg(sched_submit(s, &rp, 1, &r, err, sizeof err) == SCHED_OK, "%s", err);
	sched_result res = wait_end(r);
	ck_assert_msg(res.finish == SCHED_FINISH_LENGTH, "finish %d: %s", res.finish, res.err);
	ck_assert_int_eq(res.n_tokens, 8);
	sched_request_release(r);
	sched_free(s);
	engine_free(e);

	/* the byte cap: 20 pages of 4 heads (5 blocks) at most, after every prompt */
	ep.kv_budget_bytes = 0;
	ep.prefix_cache_bytes = 20 * page;
	ck_assert_msg(engine_init(&e, aah_dir, &ep, err, sizeof err) == 0, "%s", err);
	const int32_t V = engine_config(e)->vocab_size;
	float *rows = malloc((size_t)(150 + GEN) * V * sizeof(float));
	int32_t gen[GEN];
	for (int32_t i = 0; i < 4; i++) {
		make_tokens(prompt, 150, 70u + (uint32_t)i);
		engine_run(e, "full_attention", prompt, 150, 64, rows, gen);
		engine_prefix_stats st;
		engine_prefix_stats_get(e, &st);
		ck_assert_int_le(st.bytes, 20 * page);
		ck_assert_int_gt(st.bytes, 0);
		ck_assert_int_eq(st.max_bytes, 20 * page);
	}
	free(rows);
	engine_free(e);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("prefix_cache");
	TCase *tc = tcase_create("engine");
	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, aah_setup, aah_teardown);
	tcase_add_loop_test(tc, test_engine_full_attention, 0, 3);
	tcase_add_loop_test(tc, test_engine_static, 0, 3);
	tcase_add_loop_test(tc, test_engine_adaptive, 0, 3);
	tcase_add_loop_test(tc, test_engine_small_chunks, 0, 2);
	tcase_add_test(tc, test_engine_regime_apart);
	tcase_add_test(tc, test_fork_copy_on_write);
	tcase_add_test(tc, test_fork_batch_need_exact);
	tcase_add_loop_test(tc, test_divergent_whole, 0, 6);
	tcase_add_loop_test(tc, test_divergent_chunks, 0, 6);
	tcase_add_test(tc, test_tenants_apart);
	tcase_add_test(tc, test_evict_tails_before_shared_beginning);
	suite_add_tcase(s, tc);
	TCase *ts = tcase_create("scheduler");
	tcase_set_timeout(ts, 120);
	tcase_add_checked_fixture(ts, aah_setup, aah_teardown);
	tcase_add_loop_test(ts, test_sched_mc_full, 0, 3);
	tcase_add_loop_test(ts, test_sched_mc_adaptive, 0, 3);
	tcase_add_test(ts, test_sched_concurrent);
	tcase_add_test(ts, test_eviction_never_refuses);
	suite_add_tcase(s, ts);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
