/* tests/tools/check_calibrate.c — Check suite for aah-convert calibrate: the assignment logic (tools/convert/calib_assign.c)
 * on hand-made measurements, and the built tool through its command line on a model whose weights make chosen heads
 * local and the others global, read back by aahd's parser and served by aahd; and bad input. */
#include <check.h>
#include <dirent.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "models/aah_config.h"
#include "base/fs.h"
#include "tools/convert/aah_write.h"
#include "models/model_config.h"
#include "tools/convert/safetensors_write.h"
#include "tools/convert/sha256.h"
#define TEST_TMPDIR "calibrate"
#include "tests/test_env.h"
#include "tools/convert/calib_assign.h"

/* ---- hand-made measurements: T = 64, candidates 8/16/32/64, bands cut at 8, 16, 32 ---- */

static const int32_t hi4[4] = { 8, 16, 32, 64 };

static calib_meas meas4(int32_t L, int32_t nkv, const double *mass)
{
	return (calib_meas){ .n_layers = L, .n_kv = nkv, .q_per_kv = 2, .n_bands = 4, .band_hi = hi4, .mass = mass };
}

static calib_params params4(double coverage)
{
	return (calib_params){ .context_length = 64, .windows = { 8, 16, 32, 64 }, .n_windows = 4, .coverage = coverage };
}

START_TEST(test_window_alone)
{
	const double mass[4] = { 0.90, 0.04, 0.03, 0.03 };   /* kept: 0.90 at 8, 0.94 at 16, 0.97 at 32, 1 at 64 */
	calib_meas m = meas4(1, 1, mass);
	ck_assert_double_eq_tol(calib_kept(&m, mass, 16), 0.94, 1e-12);
	calib_params p = params4(0.95);
	ck_assert_int_eq(calib_window_alone(&m, &p, mass), 32);
	p.coverage = 0.94;   /* exactly the share at 16 (0.9 + 0.04 in float64): a tie keeps it */
	ck_assert_int_eq(calib_window_alone(&m, &p, mass), 16);
	p.coverage = 0.9;
	ck_assert_int_eq(calib_window_alone(&m, &p, mass), 8);
	p.coverage = 1;
	ck_assert_int_eq(calib_window_alone(&m, &p, mass), 64);
	const double none[4] = { 0 };
	ck_assert_int_eq(calib_window_alone(&m, &p, none), 64);
	/* candidates that never reach the coverage: the largest */
	const double far[4] = { 0.5, 0.2, 0.1, 0.2 };
	calib_params q = { .context_length = 64, .windows = { 8, 16 }, .n_windows = 2, .coverage = 0.95 };
	ck_assert_int_eq(calib_window_alone(&m, &q, far), 16);
}
END_TEST

static double cost_of(const calib_params *p, int32_t na, int32_t wa, int32_t nb, int32_t wb)
{
	(void)p;
	return (double)na * wa + (double)nb * wb;
}

START_TEST(test_joint_scorer)
{
	calib_meas m = meas4(1, 2, NULL);
	calib_params p = params4(0.95);
	int32_t wa, wb;
	/* alone: a needs 16 (0.94 at 8), b needs 16; together a at 8 and b at 16 keep (0.94 + 0.98) / 2 = 0.96 */
	const double a1[4] = { 0.94, 0.06, 0, 0 }, b1[4] = { 0.2, 0.78, 0.02, 0 };
	calib_windows_joint(&m, &p, a1, 2, b1, 2, &wa, &wb);
	ck_assert_int_eq(wa, 8);
	ck_assert_int_eq(wb, 16);
	/* the floor: a keeps 0.85 at 8, below 2·0.95 − 1 = 0.90, so it is not sacrificed to b's mass nine times its own */
	const double a2[4] = { 0.85, 0.15, 0, 0 }, b2[4] = { 0, 9, 0, 0 };
	calib_windows_joint(&m, &p, a2, 2, b2, 2, &wa, &wb);
	ck_assert_int_eq(wa, 16);
	ck_assert_int_eq(wb, 16);
	/* widening one to narrow the other: alone a needs 8 and b 64 (2·8 + 8·64 = 528); a widened to 32 keeps all of its
	 * mass and pays for b at 32, which keeps 0.90 (the floor): pooled (1 + 0.90) / 2 = 0.95 for 2·32 + 8·32 = 320 */
	const double a3[4] = { 0.96, 0.03, 0.01, 0 }, b3[4] = { 0.5, 0.2, 0.2, 0.1 };
	calib_windows_joint(&m, &p, a3, 2, b3, 8, &wa, &wb);
	ck_assert_int_eq(wa, 32);
	ck_assert_int_eq(wb, 32);
	/* ... unless b's mass outweighs a's: then a's surplus cannot pay for b's miss, and each keeps its own */
	const double b4[4] = { 2.5, 1, 1, 0.5 };
	calib_windows_joint(&m, &p, a3, 2, b4, 8, &wa, &wb);
	ck_assert_int_eq(wa, 8);
	ck_assert_int_eq(wb, 64);
	/* no pair qualifies (candidates end below T): each alone, the largest */
	calib_params q = { .context_length = 64, .windows = { 8, 16 }, .n_windows = 2, .coverage = 0.95 };
	const double a4[4] = { 0.5, 0.2, 0.1, 0.2 };
	calib_windows_joint(&m, &q, a4, 2, a4, 2, &wa, &wb);
	ck_assert_int_eq(wa, 16);
	ck_assert_int_eq(wb, 16);
	/* over random pairs: never costlier than alone, always the pooled coverage and each the floor */
	uint64_t s = 12345;
	for (int it = 0; it < 5000; it++) {
		double ma[4], mb[4];
		for (int b = 0; b < 4; b++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			ma[b] = (double)(s >> 40) / (1 << 24) * (b ? 0.3 : 1);
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			mb[b] = (double)(s >> 40) / (1 << 24) * (b ? 0.3 : 1) * (it % 3 + 1);
		}
		int32_t na = 2 * (1 + it % 4), nb = 2 * (1 + (it / 4) % 4);
		int32_t ia = calib_window_alone(&m, &p, ma), ib = calib_window_alone(&m, &p, mb);
		calib_windows_joint(&m, &p, ma, na, mb, nb, &wa, &wb);
		ck_assert(cost_of(&p, na, wa, nb, wb) <= cost_of(&p, na, ia, nb, ib));
		double Ma = ma[0] + ma[1] + ma[2] + ma[3], Mb = mb[0] + mb[1] + mb[2] + mb[3];
		double pooled = (calib_kept(&m, ma, wa) * Ma + calib_kept(&m, mb, wb) * Mb) / (Ma + Mb);
		ck_assert_msg(pooled >= 0.95 - 1e-9, "pooled %.6f", pooled);
		ck_assert(calib_kept(&m, ma, wa) >= 0.9 - 1e-9 && calib_kept(&m, mb, wb) >= 0.9 - 1e-9);
	}
}
END_TEST

START_TEST(test_tree)
{
	/* six heads, two features each: 0, 3, 4 local; 1, 2, 5 global, 5 the farthest */
	const double feat[6 * 2] = { 0.9, 0.1, 0.2, 0.9, 0.25, 0.85, 0.92, 0.12, 0.88, 0.1, 0.0, 1.0 };
	double reach[6];
	for (int h = 0; h < 6; h++)
		reach[h] = 1 - feat[h * 2];
	calib_tree t;
	ck_assert_int_eq(calib_tree_build(&t, feat, reach, 6, 2, 1), 0);
	ck_assert_int_eq(t.n_leaves, 2);
	const calib_node *l0 = &t.nodes[t.leaves[0]], *l1 = &t.nodes[t.leaves[1]];
	ck_assert_int_eq(l0->n, 3);
	ck_assert_int_eq(l1->n, 3);
	int32_t seen = 0;
	for (int i = 0; i < 3; i++)
		seen |= 1 << t.order[l0->first + i];
	ck_assert_int_eq(seen, (1 << 0) | (1 << 3) | (1 << 4));
	ck_assert_int_eq(calib_tree_sibling_leaf(&t, t.leaves[0]), t.leaves[1]);
	char path[CALIB_MAX_LEVELS + 1];
	calib_tree_path(&t, t.leaves[1], path);
	ck_assert_str_eq(path, "1");
	calib_tree_free(&t);
	/* four levels: every head alone; paths of depth 2 or 3 (three heads split 1 + 2) */
	ck_assert_int_eq(calib_tree_build(&t, feat, reach, 6, 2, 4), 0);
	ck_assert_int_eq(t.n_leaves, 6);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(t.nodes[t.leaves[i]].n, 1);
	calib_tree_path(&t, t.leaves[0], path);
	ck_assert(strlen(path) >= 2 && path[0] == '0');
	calib_tree_free(&t);
	/* an uneven natural split: one far head against five alike — not halves */
	const double f2[6 * 2] = { 0.9, 0.1, 0.9, 0.1, 0.91, 0.1, 0.0, 1.0, 0.9, 0.11, 0.89, 0.1 };
	for (int h = 0; h < 6; h++)
		reach[h] = 1 - f2[h * 2];
	ck_assert_int_eq(calib_tree_build(&t, f2, reach, 6, 2, 1), 0);
	ck_assert_int_eq(t.nodes[t.leaves[0]].n, 5);
	ck_assert_int_eq(t.order[t.nodes[t.leaves[1]].first], 3);
	calib_tree_free(&t);
	/* identical heads: the cut nearest the middle */
	const double f3[4 * 2] = { 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5 };
	const double r3[4] = { 0.5, 0.5, 0.5, 0.5 };
	ck_assert_int_eq(calib_tree_build(&t, f3, r3, 4, 2, 1), 0);
	ck_assert_int_eq(t.nodes[t.leaves[0]].n, 2);
	calib_tree_free(&t);
}
END_TEST

/* Layer 0: KV heads 0 and 2 local (all mass within 8), 1 and 3 spread (0.85 within 32); layer 1: heads 1 and 2 local.
 * Chunk 1 of 2 sees head 0 of layer 0 reach to 16. */
static void synth(double *mass, double *chunks)
{
	const double local[4] = { 1, 0, 0, 0 }, wide[4] = { 0.25, 0.25, 0.35, 0.15 };
	const int loc[2][4] = { { 1, 0, 1, 0 }, { 0, 1, 1, 0 } };
	for (int l = 0; l < 2; l++)
		for (int h = 0; h < 4; h++)
			for (int b = 0; b < 4; b++) {
				double v = (loc[l][h] ? local[b] : wide[b]) * 100;
				double c1 = l == 0 && h == 0 ? (b == 0 ? 30 : b == 1 ? 20 : 0) : v / 2;
				chunks[((0 * 2 + l) * 4 + h) * 4 + b] = v - c1;
				chunks[((1 * 2 + l) * 4 + h) * 4 + b] = c1;
				mass[(l * 4 + h) * 4 + b] = v;
			}
}

static const aah_group *group_of(const aah_regime *r, int32_t l, int32_t kv)
{
	for (int32_t g = 0; g < r->layers[l].n_groups; g++)
		for (int32_t i = 0; i < r->layers[l].groups[g].n_kv_heads; i++)
			if (r->layers[l].groups[g].kv_heads[i] == kv)
				return &r->layers[l].groups[g];
	return NULL;
}

START_TEST(test_assign_regimes)
{
	double mass[2 * 4 * 4], chunks[2 * 2 * 4 * 4];
	synth(mass, chunks);
	calib_meas m = meas4(2, 4, mass);
	m.n_chunks = 2;
	m.chunk_mass = chunks;
	calib_params p = params4(0.95);
	aah_config a;
	calib_info info;
	char err[256];
	ck_assert_msg(calib_assign(&a, &info, &m, &p, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(a.n_regimes, 4);
	const int loc[2][4] = { { 1, 0, 1, 0 }, { 0, 1, 1, 0 } };
	for (int k = 0; k < 4; k++) {
		const aah_regime *r = aah_config_regime(&a, calib_kind_name((calib_kind)k));
		ck_assert_ptr_nonnull(r);
		for (int l = 0; l < 2; l++)
			for (int h = 0; h < 4; h++) {
				const aah_group *G = group_of(r, l, h);
				ck_assert_ptr_nonnull(G);
				ck_assert_msg(G->window == (loc[l][h] ? 8 : 64), "%s layer %d head %d: window %d", r->name, l, h,
				              G->window);
				ck_assert(G->capacity >= G->window);
				if (k != CALIB_FULL_ADAPTIVE)
					ck_assert_int_eq(G->capacity, G->window);
			}
	}
	/* shallow_freeze: one split per layer, the local pair against the global pair */
	const aah_regime *sf = aah_config_regime(&a, "shallow_freeze");
	ck_assert_int_eq(sf->layers[0].n_groups, 2);
	ck_assert_ptr_eq(group_of(sf, 0, 0), group_of(sf, 0, 2));
	ck_assert_ptr_eq(group_of(sf, 1, 1), group_of(sf, 1, 2));
	ck_assert_int_eq(sf->policy.kind, AAH_POLICY_STATIC);
	/* full_adaptive: the policy's constants; head 0 of layer 0 needed 16 in chunk 1 alone: its capacity */
	const aah_regime *fa = aah_config_regime(&a, "full_adaptive");
	ck_assert_int_eq(fa->policy.kind, AAH_POLICY_ADAPTIVE);
	ck_assert_int_eq(fa->policy.control_interval, 5);
	ck_assert_float_eq_tol(fa->policy.feature_ema, 0.9f, 1e-6f);
	ck_assert_float_eq_tol(fa->policy.resolution_ema, 0.15f, 1e-6f);
	ck_assert_float_eq_tol(fa->policy.coverage, 0.95f, 1e-6f);
	ck_assert_int_eq(group_of(fa, 0, 0)->capacity, 16);
	ck_assert_int_eq(group_of(fa, 0, 2)->capacity, 8);
	ck_assert_int_eq(fa->layers[0].n_groups, 4);
	/* full_adaptive's layer-1 tree is layer 1's own: heads 1 and 2 under one first split ... */
	const calib_group_info *fi = info.group[CALIB_FULL_ADAPTIVE] + 1 * 4;
	int g1 = -1, g2 = -1;
	for (int g = 0; g < fa->layers[1].n_groups; g++) {
		if (fa->layers[1].groups[g].kv_heads[0] == 1)
			g1 = g;
		if (fa->layers[1].groups[g].kv_heads[0] == 2)
			g2 = g;
	}
	ck_assert(g1 >= 0 && g2 >= 0 && fi[g1].path[0] == fi[g2].path[0]);
	/* ... deep_reuse's is layer 0's in every layer: the same groups, in the same order */
	const aah_regime *dr = aah_config_regime(&a, "deep_reuse");
	ck_assert_int_eq(dr->layers[1].n_groups, dr->layers[0].n_groups);
	for (int g = 0; g < dr->layers[0].n_groups; g++) {
		ck_assert_int_eq(dr->layers[1].groups[g].n_kv_heads, dr->layers[0].groups[g].n_kv_heads);
		for (int i = 0; i < dr->layers[0].groups[g].n_kv_heads; i++)
			ck_assert_int_eq(dr->layers[1].groups[g].kv_heads[i], dr->layers[0].groups[g].kv_heads[i]);
		ck_assert_str_eq(info.group[CALIB_DEEP_REUSE][4 + g].path, info.group[CALIB_DEEP_REUSE][g].path);
	}
	/* ACR and KV ratio: grouping_off's windows 8, 64, 8, 64 | 64, 8, 8, 64: mean 36 of 64 */
	const aah_regime *go = aah_config_regime(&a, "grouping_off");
	ck_assert_double_eq_tol(calib_regime_acr(go, 2, 4, 2, 64, 0), 36.0 / 64, 1e-12);
	ck_assert_double_eq_tol(calib_regime_kv_ratio(go, 2, 4, 64), 36.0 / 64, 1e-12);
	ck_assert_double_eq_tol(calib_regime_acr(fa, 2, 4, 2, 64, 1), (36.0 * 8 + 8) / 8 / 64, 1e-12);   /* 16, not 8 */
	/* the written file parses back as aahd parses it, windows and all */
	json_t *doc = aah_config_to_json(&a, NULL);
	char *text = json_dumps(doc, 0);
	model_config mc = { .n_layers = 2, .n_heads = 8, .n_kv_heads = 4, .head_dim = 16, .hidden_size = 64 };
	aah_config back;
	ck_assert_msg(aah_config_parse(&back, text, strlen(text), &mc, err, sizeof err) == 0, "%s", err);
	ck_assert_str_eq(back.default_regime, "shallow_freeze");
	for (int k = 0; k < 4; k++) {
		const aah_regime *x = &a.regimes[k], *y = aah_config_regime(&back, x->name);
		ck_assert_ptr_nonnull(y);
		ck_assert_int_eq(y->policy.kind, x->policy.kind);
		for (int l = 0; l < 2; l++)
			for (int h = 0; h < 4; h++) {
				ck_assert_int_eq(group_of(y, l, h)->window, group_of(x, l, h)->window);
				ck_assert_int_eq(group_of(y, l, h)->capacity, group_of(x, l, h)->capacity);
			}
	}
	aah_config_free(&back);
	free(text);
	json_decref(doc);
	aah_config_free(&a);
	calib_info_free(&info);
	/* bands that do not hold a candidate are refused */
	const int32_t hi3[3] = { 8, 32, 64 };
	m.band_hi = hi3;
	m.n_bands = 3;
	ck_assert_int_eq(calib_assign(&a, NULL, &m, &p, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "16"), "%s", err);
}
END_TEST

/* ---- the tool through its command line ---- */

static int calibrate(const char *arg, ...)
{
	static char tool[512];
	snprintf(tool, sizeof tool, "%s/aah-convert", build_dir());
	ck_assert_msg(access(tool, X_OK) == 0, "%s is not built (set AAH_BUILD)", tool);
	const char *argv[64];
	int n = 0;
	argv[n++] = tool;
	argv[n++] = "calibrate";
	va_list ap;
	va_start(ap, arg);
	for (const char *a = arg; a && n < 63; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	return tool_run(argv);
}

static const char *tpath(const char *name)
{
	static char buf[64][600];
	static int which;
	which = (which + 1) % 64;
	snprintf(buf[which], sizeof buf[which], "%s/%s", tmpdir, name);
	return buf[which];
}

static void write_bytes(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(data, 1, n, f), n);
	fclose(f);
}

/* Words drawn by seed, a space between, a newline every 12: our own text (no licence), ~6 bytes a word. */
static void write_words(const char *path, int n_words, uint64_t seed)
{
	static const char *const words[] = { "the", "river", "stone", "carries", "light", "over", "seven", "quiet",
		                                 "hills", "where", "a", "keeper", "counts", "boats", "and", "names", "them",
		                                 "after", "winds", "that", "never", "came", "back", "home", "tonight" };
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	for (int i = 0; i < n_words; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		fprintf(f, "%s%c", words[(seed >> 33) % (sizeof words / sizeof words[0])], i % 12 == 11 ? '\n' : ' ');
	}
	fclose(f);
}

/* The local/global model: Qwen3, 2 layers, 8 query / 4 KV heads of 32, hidden 64, context 1024, F32, tied
 * embeddings, qwen3-small-a's tokenizer. Every token's embedding has 1 in dimension 0, which no output projection
 * writes, so every layer's normalised input has the same positive value there. Every query head and the local KV
 * heads read only that dimension into rotary pair 12 (frequency 10000^-0.75 = 1e-3 per position), and q/k RMSNorm
 * scale it to 42·√32: the score of key distance d is then ≈ 9980·cos(0.001·d), which falls by ≈ 0.005·d² nats — a
 * Gaussian of width ~10 tokens around the query, all but nothing beyond 128. The global KV heads' k projection is
 * zero, so their scores are all 0: uniform attention over the whole prefix. local[l][k] marks the local KV heads. */
enum { LG_L = 2, LG_H = 8, LG_KV = 4, LG_HD = 32, LG_HID = 64, LG_I = 64, LG_T = 1024 };
static const int lg_local[LG_L][LG_KV] = { { 1, 0, 1, 0 }, { 0, 1, 1, 0 } };

static float *lg_tensor(int64_t n, uint64_t *seed, float scale)
{
	float *x = malloc((size_t)n * sizeof *x);
	for (int64_t i = 0; i < n; i++) {
		*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = scale * ((float)((*seed >> 40) & 0xffffff) / (float)(1 << 24) - 0.5f);
	}
	return x;
}

static void lg_model(const char *dir)
{
	mkdir(dir, 0755);
	char src[600], dst[600], err[512];
	snprintf(src, sizeof src, "%s/qwen3-small-a/tokenizer.json", testdata());
	snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
	ck_assert_msg(aah_copy_file(src, dst, err, sizeof err) == 0, "%s", err);
	snprintf(src, sizeof src, "%s/qwen3-small-a/tokenizer_config.json", testdata());
	snprintf(dst, sizeof dst, "%s/tokenizer_config.json", dir);
	ck_assert_msg(aah_copy_file(src, dst, err, sizeof err) == 0, "%s", err);
	const int V = 2056;
	char cfg[1024];
	int n = snprintf(cfg, sizeof cfg,
	                 "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"vocab_size\": %d, "
	                 "\"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, "
	                 "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, "
	                 "\"max_position_embeddings\": %d, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
	                 "\"tie_word_embeddings\": true, \"hidden_act\": \"silu\", \"attention_bias\": false, "
	                 "\"bos_token_id\": 2048, \"eos_token_id\": 2048, \"torch_dtype\": \"float32\"}\n",
	                 V, LG_HID, LG_I, LG_L, LG_H, LG_KV, LG_HD, LG_T);
	snprintf(dst, sizeof dst, "%s/config.json", dir);
	write_bytes(dst, cfg, (size_t)n);

	snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
	st_writer *w = st_writer_open(dst, err, sizeof err);
	ck_assert_ptr_nonnull(w);
	float *keep[64];
	int nk = 0;
	uint64_t seed = 7;
	float *embed = lg_tensor((int64_t)V * LG_HID, &seed, 1.0f);
	for (int v = 0; v < V; v++)
		embed[(int64_t)v * LG_HID] = 1.0f;
	keep[nk++] = embed;
	int64_t sh_embed[2] = { V, LG_HID }, sh_vec[1] = { LG_HID }, sh_hd[1] = { LG_HD };
	st_writer_add(w, "model.embed_tokens.weight", ST_F32, 2, sh_embed, embed);
	float *ones = malloc(LG_HID * sizeof *ones), *qk_norm = malloc(LG_HD * sizeof *qk_norm);
	for (int i = 0; i < LG_HID; i++)
		ones[i] = 1;
	for (int i = 0; i < LG_HD; i++)
		qk_norm[i] = i == 12 ? 42.0f : 1.0f;
	keep[nk++] = ones;
	keep[nk++] = qk_norm;
	st_writer_add(w, "model.norm.weight", ST_F32, 1, sh_vec, ones);
	for (int l = 0; l < LG_L; l++) {
		char name[128];
#define ADD(suffix, nd, shape, data)                                                     \
	do {                                                                                 \
		snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                    \
		ck_assert_int_eq(st_writer_add(w, name, ST_F32, nd, shape, data), 0);           \
	} while (0)
		float *wq = calloc((size_t)LG_H * LG_HD * LG_HID, sizeof *wq);
		float *wk = calloc((size_t)LG_KV * LG_HD * LG_HID, sizeof *wk);
		for (int h = 0; h < LG_H; h++)
			wq[(int64_t)(h * LG_HD + 12) * LG_HID] = 1;
		for (int k = 0; k < LG_KV; k++)
			if (lg_local[l][k])
				wk[(int64_t)(k * LG_HD + 12) * LG_HID] = 1;
		float *wv = lg_tensor((int64_t)LG_KV * LG_HD * LG_HID, &seed, 0.3f);
		float *wo = lg_tensor((int64_t)LG_HID * LG_H * LG_HD, &seed, 0.1f);
		float *wg = lg_tensor((int64_t)LG_I * LG_HID, &seed, 0.3f), *wu = lg_tensor((int64_t)LG_I * LG_HID, &seed, 0.3f);
		float *wd = lg_tensor((int64_t)LG_HID * LG_I, &seed, 0.1f);
		for (int i = 0; i < LG_H * LG_HD; i++)
			wo[i] = 0;   /* row 0: dimension 0 of the residual stays 1 */
		for (int i = 0; i < LG_I; i++)
			wd[i] = 0;
		keep[nk++] = wq, keep[nk++] = wk, keep[nk++] = wv, keep[nk++] = wo;
		keep[nk++] = wg, keep[nk++] = wu, keep[nk++] = wd;
		int64_t sq[2] = { LG_H * LG_HD, LG_HID }, skv[2] = { LG_KV * LG_HD, LG_HID }, so[2] = { LG_HID, LG_H * LG_HD };
		int64_t sg[2] = { LG_I, LG_HID }, sd[2] = { LG_HID, LG_I };
		ADD("input_layernorm.weight", 1, sh_vec, ones);
		ADD("post_attention_layernorm.weight", 1, sh_vec, ones);
		ADD("self_attn.q_proj.weight", 2, sq, wq);
		ADD("self_attn.k_proj.weight", 2, skv, wk);
		ADD("self_attn.v_proj.weight", 2, skv, wv);
		ADD("self_attn.o_proj.weight", 2, so, wo);
		ADD("self_attn.q_norm.weight", 1, sh_hd, qk_norm);
		ADD("self_attn.k_norm.weight", 1, sh_hd, qk_norm);
		ADD("mlp.gate_proj.weight", 2, sg, wg);
		ADD("mlp.up_proj.weight", 2, sg, wu);
		ADD("mlp.down_proj.weight", 2, sd, wd);
#undef ADD
	}
	ck_assert_msg(st_writer_close(w) == 0, "%s", err);
	for (int i = 0; i < nk; i++)
		free(keep[i]);
}

/* Names in dir that are not in the NULL-terminated list `allowed`: the test's way to see nothing was left. */
static int strays(const char *dir, const char *const *allowed)
{
	DIR *d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		bool ok = false;
		for (int i = 0; allowed[i]; i++)
			ok |= !strcmp(de->d_name, allowed[i]);
		if (!ok) {
			fprintf(stderr, "stray file %s/%s\n", dir, de->d_name);
			n++;
		}
	}
	closedir(d);
	return n;
}

/* aahd's ACR line for a prompt of n ids under regime, decoding n_gen tokens. */
static double aahd_acr(const char *model, const char *regime, int n, int n_gen)
{
	static char ids[1 << 14];
	int at = 0;
	for (int i = 0; i < n; i++)
		at += snprintf(ids + at, sizeof ids - (size_t)at, "%s%d", i ? "," : "", 5 + (i * 37) % 2000);
	char aahd[512], ng[16];
	snprintf(aahd, sizeof aahd, "%s/aahd", build_dir());
	snprintf(ng, sizeof ng, "%d", n_gen);
	const char *argv[] = { aahd, "--model", model, "--prompt-ids", ids, "-n", ng, "--regime", regime, "--threads", "2",
		                   NULL };
	ck_assert_msg(tool_run(argv) == 0, "aahd: %s", log_text);
	char key[128];
	snprintf(key, sizeof key, "regime %s: ACR ", regime);
	const char *p = strstr(log_text, key);
	ck_assert_msg(p, "no ACR line in: %s", log_text);
	return strtod(p + strlen(key), NULL);
}

/* The ACR the calibrate report printed for regime (its table's fourth column). */
static double report_acr(const char *report, const char *regime)
{
	char key[64];
	snprintf(key, sizeof key, "\n%s ", regime);
	const char *p = strstr(report, key);
	ck_assert_msg(p, "no row for %s in the report: %s", regime, report);
	char name[32], policy[16];
	int groups;
	double acr;
	ck_assert_int_eq(sscanf(p + 1, "%31s %15s %d %lf", name, policy, &groups, &acr), 4);
	return acr;
}

START_TEST(test_cli_local_global)
{
	const char *model = tpath("model");
	lg_model(model);
	write_words(tpath("calib.txt"), 6000, 1);
	write_words(tpath("eval.txt"), 3000, 2);
	/* an aah.json already there, even a broken one, neither stops the measurement (full attention) nor survives */
	write_bytes(tpath("model/aah.json"), "{\"version\": 7}", 14);
	int rc = calibrate(model, "--text", tpath("calib.txt"), "--eval-text", tpath("eval.txt"), "--tokens", "4096",
	                   "--eval-tokens", "2048", "--threads", "2", "--backend", "cpu", NULL);
	ck_assert_msg(rc == 0, "calibrate failed (%d): %s", rc, log_text);
	char report[sizeof log_text];
	memcpy(report, log_text, sizeof report);
	ck_assert_msg(strstr(report, "measuring 4096/4096 tokens"), "no progress line: %s", report);
	ck_assert_msg(strstr(report, "candidates 128/256/512/1024"), "%s", report);
	/* aahd's parser loads it with the model's shape */
	char err[1024];
	model_config mc;
	ck_assert_msg(model_config_load(&mc, model, err, sizeof err) == 0, "%s", err);
	aah_config a;
	ck_assert_msg(aah_config_load(&a, model, &mc, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(a.context_length, LG_T);
	ck_assert_int_eq(a.n_regimes, 4);
	for (int k = 0; k < 4; k++) {
		const aah_regime *r = aah_config_regime(&a, calib_kind_name((calib_kind)k));
		ck_assert_ptr_nonnull(r);
		for (int l = 0; l < LG_L; l++)
			for (int h = 0; h < LG_KV; h++) {
				const aah_group *G = group_of(r, l, h);
				bool all_local = true;
				for (int i = 0; i < G->n_kv_heads; i++)
					all_local &= lg_local[l][G->kv_heads[i]] != 0;
				int want = all_local ? 128 : 1024;
				ck_assert_msg(G->window == want, "%s layer %d KV head %d (%s): window %d, want %d", r->name, l, h,
				              lg_local[l][h] ? "local" : "global", G->window, want);
				ck_assert(G->capacity >= G->window);
			}
	}
	/* the side file: provenance with the text's digest, features that say which heads are local */
	char want_sha[65];
	ck_assert_int_eq(sha256_file_hex(tpath("calib.txt"), want_sha, err, sizeof err), 0);
	json_error_t je;
	char side[600];
	snprintf(side, sizeof side, "%s/aah-calib.json", model);
	json_t *sj = json_load_file(side, 0, &je);
	ck_assert_msg(sj, "%s: %s", side, je.text);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(sj, "text"), 0), "sha256")),
	                 want_sha);
	ck_assert_int_eq(json_integer_value(json_object_get(sj, "tokens")), 4096);
	ck_assert_ptr_nonnull(json_object_get(sj, "tool_version"));
	for (int l = 0; l < LG_L; l++)
		for (int h = 0; h < LG_KV; h++) {
			json_t *kh = json_array_get(json_object_get(json_array_get(json_object_get(sj, "layers"), l), "kv_heads"), h);
			double kept = json_real_value(json_object_get(json_object_get(kh, "kept"), "128"));
			double ent = json_real_value(json_object_get(kh, "entropy_normalized"));
			ck_assert_msg(lg_local[l][h] ? kept > 0.999 && ent < 0.75 : kept < 0.5 && ent > 0.99,
			              "layer %d head %d: kept %.4f at 128, entropy %.4f", l, h, kept, ent);
		}
	ck_assert(json_real_value(json_object_get(json_object_get(json_object_get(json_object_get(sj, "regimes"),
	                                                                          "grouping_off"), "eval"), "loss")) > 0);
	json_decref(sj);
	json_t *aj = json_load_file(tpath("model/aah.json"), 0, &je);
	ck_assert_ptr_nonnull(aj);
	json_t *prov = json_object_get(aj, "provenance");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(prov, "text"), 0), "sha256")),
	                 want_sha);
	ck_assert_double_eq_tol(json_real_value(json_object_get(prov, "coverage")), 0.95, 1e-9);
	json_decref(aj);
	/* aahd on a long prompt: each static regime's ACR is what aah.json implies (and what the report printed); the
	 * adaptive one starts at its windows and stays within its candidates and capacities while it decodes */
	for (int k = 0; k < 4; k++) {
		const aah_regime *r = aah_config_regime(&a, calib_kind_name((calib_kind)k));
		double implied = calib_regime_acr(r, LG_L, LG_KV, LG_H / LG_KV, LG_T, 0);
		char want[16], got[16], rep[16];
		snprintf(want, sizeof want, "%.4f", implied);
		snprintf(got, sizeof got, "%.4f", aahd_acr(model, r->name, 900, 0));
		snprintf(rep, sizeof rep, "%.4f", report_acr(report, r->name));
		ck_assert_str_eq(got, want);
		ck_assert_str_eq(rep, want);
		if (r->policy.kind == AAH_POLICY_ADAPTIVE) {
			double acr = aahd_acr(model, r->name, 900, 24);
			double hi = calib_regime_acr(r, LG_L, LG_KV, LG_H / LG_KV, LG_T, 1);
			ck_assert_msg(acr >= 128.0 / LG_T - 1e-4 && acr <= hi + 1e-4, "adaptive ACR %.4f outside [%.4f, %.4f]", acr,
			              128.0 / LG_T, hi);
		}
	}
	aah_config_free(&a);
	const char *const done[] = { "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
		                         "aah.json", "aah-calib.json", NULL };
	ck_assert_int_eq(strays(model, done), 0);
}
END_TEST

/* Bad input: a clear message and exit status, and nothing written — an aah.json already there stays as it was. */
START_TEST(test_cli_bad_input)
{
	const char *model = tpath("model");
	lg_model(model);
	write_words(tpath("calib.txt"), 3000, 1);
	write_words(tpath("eval.txt"), 600, 2);
	write_words(tpath("short.txt"), 100, 3);
	write_bytes(tpath("empty.txt"), "", 0);
	write_bytes(tpath("latin1.txt"), "caf\xe9 cr\xe8me\n", 11);
	write_bytes(tpath("afile"), "x", 1);
	const char *c = tpath("calib.txt"), *e = tpath("eval.txt");
	struct {
		const char *flag, *value, *text, *want;
		int status;
	} cases[] = {
		{ "--windows", "2048,4096", NULL, "no head fits the candidate windows", 1 },
		{ "--windows", "1024,2048", NULL, "no head fits the candidate windows", 1 },
		{ "--windows", "128,2048", NULL, "exceeds the context length 1024", 1 },
		{ "--context", "2048", NULL, "exceeds the model's context (max_position_embeddings 1024)", 1 },
		{ "--tokens", "100", NULL, "less than one chunk", 1 },
		{ NULL, NULL, "empty.txt", "the file is empty", 1 },
		{ NULL, NULL, "latin1.txt", "not valid UTF-8 (byte 3)", 1 },
		{ NULL, NULL, "short.txt", "fewer than one context of 1024", 1 },
		{ NULL, NULL, "missing.txt", "No such file", 1 },
		{ "--out", tpath("afile/aah.json"), NULL, "--out", 1 },
		{ "--out", tpath("nowhere/aah.json"), NULL, "cannot write there", 1 },
		{ "--calib-out", tpath("nowhere/side.json"), NULL, "cannot write there", 1 },
		{ "--out", tpath("model"), NULL, "is a folder", 1 },
		{ "--eval-text", c, NULL, "not used for calibration", 1 },
		{ "--eval-text", tpath("latin1.txt"), NULL, "not valid UTF-8", 1 },
		{ "--coverage", "0.3", NULL, "--coverage must be a number in [0.5, 1]", 2 },
		{ "--windows", "512,256", NULL, "ascending", 2 },
		{ "--backend", "tpu", NULL, "--backend must be", 2 },
	};
	const char *sentinel = "{\"not\": \"touched\"}\n";
	write_bytes(tpath("model/aah.json"), sentinel, strlen(sentinel));
	const char *const with_sentinel[] = { "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
		                                  "aah.json", NULL };
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *text = cases[i].text ? tpath(cases[i].text) : c;
		int rc = cases[i].flag ? calibrate(model, "--text", text, "--eval-text", e, "--quiet", cases[i].flag,
		                                   cases[i].value, NULL)
		                       : calibrate(model, "--text", text, "--eval-text", e, "--quiet", NULL);
		ck_assert_msg(rc == cases[i].status, "case %zu (%s %s): status %d, want %d: %s", i,
		              cases[i].flag ? cases[i].flag : "--text", cases[i].flag ? cases[i].value : cases[i].text, rc,
		              cases[i].status, log_text);
		ck_assert_msg(strstr(log_text, cases[i].want), "case %zu: want '%s' in: %s", i, cases[i].want, log_text);
		ck_assert_int_eq(strays(model, with_sentinel), 0);
		FILE *f = fopen(tpath("model/aah.json"), "r");
		char back[64] = "";
		ck_assert_ptr_nonnull(f);
		ck_assert(fgets(back, sizeof back, f) != NULL);
		fclose(f);
		ck_assert_str_eq(back, sentinel);
	}
	ck_assert_int_eq(access(tpath("nowhere"), F_OK), -1);
}
END_TEST

static Suite *calibrate_suite(void)
{
	Suite *s = suite_create("calibrate");
	TCase *tc = tcase_create("assign");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_window_alone);
	tcase_add_test(tc, test_joint_scorer);
	tcase_add_test(tc, test_tree);
	tcase_add_test(tc, test_assign_regimes);
	suite_add_tcase(s, tc);
	tc = tcase_create("cli");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_cli_local_global);
	tcase_add_test(tc, test_cli_bad_input);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(calibrate_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
