/* tests/engine/check_aah.c — AAH for real: windowed attention over the trimmed, paged cache equals a naive dense-masked
 * forward pass written here (float64), whatever the windows, GQA layout and chunking; bytes, work and ACR add up. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/aah_policy.h"
#include "engine/engine.h"
#include "kernels/cpu/cpu_kernels.h"
#include "models/aah_config.h"
#include "models/model.h"
#include "tests/test_env.h"

/* The backend the engine tests run on: AAH_TEST_BACKEND (cpu, the default, or cuda: `make test-gpu`). */
static const char *test_backend(void)
{
	const char *b = getenv("AAH_TEST_BACKEND");
	return b && *b ? b : "cpu";
}

static uint64_t rng_state;
static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16);
}

/* An aah.json with one regime "r" of the given policy, each KV head its own group with a window drawn from
 * windows[] (by the seed) and capacity = cap_mult × window (capped at T). Caller frees. */
static char *aah_json_random(const model_config *mc, const int32_t *windows, int nw, int32_t T, const char *policy,
                             int cap_mult, int32_t *chosen /* (n_layers, n_kv) or NULL */)
{
	size_t cap = 1 << 16, at = 0;
	char *s = malloc(cap);
	at += (size_t)snprintf(s + at, cap - at, "{\"version\":1,\"context_length\":%d,\"candidate_windows\":[", T);
	for (int i = 0; i < nw; i++)
		at += (size_t)snprintf(s + at, cap - at, "%s%d", i ? "," : "", windows[i]);
	at += (size_t)snprintf(s + at, cap - at, "],\"regimes\":{\"r\":{\"policy\":{\"kind\":\"%s\"},\"layers\":[", policy);
	for (int l = 0; l < mc->n_layers; l++) {
		at += (size_t)snprintf(s + at, cap - at, "%s{\"groups\":[", l ? "," : "");
		for (int h = 0; h < mc->n_kv_heads; h++) {
			int32_t w = windows[rnd() % (uint32_t)(cap_mult > 1 ? nw - 1 : nw)];
			int32_t c = w * cap_mult < T ? w * cap_mult : T;
			if (chosen)
				chosen[l * mc->n_kv_heads + h] = w;
			at += (size_t)snprintf(s + at, cap - at, "%s{\"kv_heads\":[%d],\"window\":%d,\"capacity\":%d}", h ? "," : "",
			                       h, w, c);
		}
		at += (size_t)snprintf(s + at, cap - at, "]}");
	}
	snprintf(s + at, cap - at, "]}},\"default_regime\":\"r\"}");
	return s;
}

/* ---- the naive reference: float64, dense causal attention with a window mask ---- */

static double tget(const st_tensor *t, int64_t i)
{
	switch (t->dtype) {
	case ST_BF16: return cpu_bf16_to_f32(((const uint16_t *)t->data)[i]);
	case ST_F16: return cpu_f16_to_f32(((const uint16_t *)t->data)[i]);
	default: return ((const float *)t->data)[i];
	}
}

static void ref_rmsnorm(double *o, const double *x, const st_tensor *w, int64_t d, double eps)
{
	double ss = 0;
	for (int64_t i = 0; i < d; i++)
		ss += x[i] * x[i];
	double inv = 1.0 / sqrt(ss / (double)d + eps);
	for (int64_t i = 0; i < d; i++)
		o[i] = x[i] * inv * tget(w, i);
}

static void ref_matvec(double *o, const st_tensor *w, const double *x)
{
	int64_t M = w->shape[0], K = w->shape[1];
	for (int64_t m = 0; m < M; m++) {
		double s = 0;
		for (int64_t k = 0; k < K; k++)
			s += tget(w, m * K + k) * x[k];
		o[m] = s;
	}
}

static void ref_rope(double *v, int64_t pos, const float *inv_freq, int32_t hd)
{
	for (int32_t j = 0; j < hd / 2; j++) {
		double th = (double)pos * (double)inv_freq[j], a = v[j], b = v[j + hd / 2];
		v[j] = a * cos(th) - b * sin(th);
		v[j + hd / 2] = a * sin(th) + b * cos(th);
	}
}

/* What the reference measures of its attention, when asked (engine_measure's meaning): per layer and query head,
 * the probability mass by key distance in bands cut at edges, and the entropy, summed over the positions. */
typedef struct ref_measure {
	int32_t n_bands;
	const int32_t *edges;   /* (n_bands − 1) */
	double *band;           /* (n_layers, n_heads, n_bands) */
	double *entropy;        /* (n_layers, n_heads) */
} ref_measure;

/* logits (n, vocab) for tokens ids[0..n) with windows (n_layers, n_kv); meas NULL or filled (+=). */
static void ref_forward_measured(const model_files *m, const int32_t *ids, int64_t n, const int32_t *windows,
                                 double *logits, const ref_measure *meas)
{
	const model_config *c = &m->config;
	const int64_t H = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads, I = c->intermediate_size;
	const int64_t V = c->vocab_size;
	float *inv_freq = malloc((size_t)hd / 2 * sizeof *inv_freq);
	model_config_rope_freqs(c, inv_freq);
	double *x = malloc((size_t)(n * H) * sizeof *x), *xn = malloc((size_t)H * sizeof *xn);
	double *K = malloc((size_t)(n * nkv * hd) * sizeof *K), *Vv = malloc((size_t)(n * nkv * hd) * sizeof *Vv);
	double *Q = malloc((size_t)(n * nh * hd) * sizeof *Q), *att = malloc((size_t)(nh * hd) * sizeof *att);
	double *tmp = malloc((size_t)(H > I ? H : I) * 2 * sizeof *tmp), *g = malloc((size_t)I * sizeof *g);
	double *u = malloc((size_t)I * sizeof *u), *sc = malloc((size_t)n * sizeof *sc);
	for (int64_t t = 0; t < n; t++)
		for (int64_t i = 0; i < H; i++)
			x[t * H + i] = tget(m->w.embed, ids[t] * H + i);
	for (int32_t l = 0; l < c->n_layers; l++) {
		const model_layer_weights *w = &m->w.layers[l];
		for (int64_t t = 0; t < n; t++) {
			ref_rmsnorm(xn, x + t * H, w->attn_norm, H, c->rms_norm_eps);
			ref_matvec(Q + t * nh * hd, w->wq, xn);
			ref_matvec(K + t * nkv * hd, w->wk, xn);
			ref_matvec(Vv + t * nkv * hd, w->wv, xn);
			for (int64_t h = 0; h < nh; h++) {
				if (c->qk_norm) {
					ref_rmsnorm(tmp, Q + (t * nh + h) * hd, w->q_norm, hd, c->rms_norm_eps);
					memcpy(Q + (t * nh + h) * hd, tmp, (size_t)hd * sizeof *tmp);
				}
				ref_rope(Q + (t * nh + h) * hd, t, inv_freq, (int32_t)hd);
			}
			for (int64_t h = 0; h < nkv; h++) {
				if (c->qk_norm) {
					ref_rmsnorm(tmp, K + (t * nkv + h) * hd, w->k_norm, hd, c->rms_norm_eps);
					memcpy(K + (t * nkv + h) * hd, tmp, (size_t)hd * sizeof *tmp);
				}
				ref_rope(K + (t * nkv + h) * hd, t, inv_freq, (int32_t)hd);
			}
		}
		for (int64_t t = 0; t < n; t++) {
			for (int64_t h = 0; h < nh; h++) {
				int64_t kvh = h / (nh / nkv), W = windows[l * nkv + kvh];
				double mx = -INFINITY, sum = 0;
				for (int64_t s = 0; s <= t; s++) {   /* dense: every key, masked outside the window */
					if (s < t - W + 1) {
						sc[s] = -INFINITY;
						continue;
					}
					double d = 0;
					for (int64_t i = 0; i < hd; i++)
						d += Q[(t * nh + h) * hd + i] * K[(s * nkv + kvh) * hd + i];
					sc[s] = d / sqrt((double)hd);
					if (sc[s] > mx)
						mx = sc[s];
				}
				for (int64_t s = 0; s <= t; s++) {
					sc[s] = exp(sc[s] - mx);
					sum += sc[s];
				}
				for (int64_t s = 0; meas && s <= t; s++) {
					if (sc[s] == 0)
						continue;
					const double pr = sc[s] / sum;
					int32_t b = 0;
					while (b < meas->n_bands - 1 && t - s >= meas->edges[b])
						b++;
					meas->band[((int64_t)l * nh + h) * meas->n_bands + b] += pr;
					meas->entropy[(int64_t)l * nh + h] -= pr * log(pr);
				}
				for (int64_t i = 0; i < hd; i++) {
					double o = 0;
					for (int64_t s = 0; s <= t; s++)
						o += sc[s] * Vv[(s * nkv + kvh) * hd + i];
					att[h * hd + i] = o / sum;
				}
			}
			ref_matvec(tmp, w->wo, att);
			for (int64_t i = 0; i < H; i++)
				x[t * H + i] += tmp[i];
			ref_rmsnorm(xn, x + t * H, w->ffn_norm, H, c->rms_norm_eps);
			ref_matvec(g, w->w_gate, xn);
			ref_matvec(u, w->w_up, xn);
			for (int64_t i = 0; i < I; i++)
				g[i] = g[i] / (1 + exp(-g[i])) * u[i];
			ref_matvec(tmp, w->w_down, g);
			for (int64_t i = 0; i < H; i++)
				x[t * H + i] += tmp[i];
		}
	}
	for (int64_t t = 0; t < n; t++) {
		ref_rmsnorm(xn, x + t * H, m->w.norm, H, c->rms_norm_eps);
		ref_matvec(logits + t * V, m->w.lm_head, xn);
	}
	free(inv_freq); free(x); free(xn); free(K); free(Vv); free(Q); free(att); free(tmp); free(g); free(u); free(sc);
}

static void ref_forward(const model_files *m, const int32_t *ids, int64_t n, const int32_t *windows, double *logits)
{
	ref_forward_measured(m, ids, n, windows, logits, NULL);
}

/* ---- equivalence ---- */

typedef struct eq_case {
	const char *model;
	uint64_t seed;
	int32_t n_tokens;
	int32_t chunk;            /* engine max_batch_tokens */
	int32_t prompt;           /* tokens fed as one prefill; the rest one by one (decode) */
} eq_case;

static const eq_case eq_cases[] = {
	{ "qwen3-small-a", 1, 1500, 512, 1200 },   /* GQA 2:1, windows 64/128/256 crossed many times */
	{ "qwen3-small-b", 2, 1500, 100, 1400 },   /* MQA */
	{ "qwen3-small-a", 3, 700, 37, 600 },      /* odd chunks: spans cross chunk and page edges */
	{ "qwen3-small-b", 4, 400, 512, 1 },       /* all decode */
};

START_TEST(test_windowed_equals_dense_masked)
{
	const eq_case *ec = &eq_cases[_i];
	rng_state = 0x1234567ull + ec->seed * 7919;
	char src[1024], err[512];
	snprintf(src, sizeof src, "%s/%s", testdata(), ec->model);
	model_files ref;
	ck_assert_msg(model_files_load(&ref, src, err, sizeof err) == 0, "%s", err);
	const model_config *c = &ref.config;
	const int32_t windows[] = { 64, 128, 256, 2048 };
	int32_t *chosen = malloc((size_t)c->n_layers * c->n_kv_heads * sizeof *chosen);
	char *json = aah_json_random(c, windows, 3, 2048, "static", 1, chosen);
	char dir[256];
	make_model_dir(dir, sizeof dir, "check", ec->model, json);

	engine_params p = { .backend = test_backend(), .n_threads = 2, .max_seqs = 2, .ctx_len = 2048,
	                    .max_batch_tokens = ec->chunk };
	engine *e;
	ck_assert_msg(engine_init(&e, dir, &p, err, sizeof err) == 0, "%s", err);
	int32_t seq = engine_seq_open(e, "r", err, sizeof err);
	ck_assert_msg(seq >= 0, "%s", err);
	const int64_t V = c->vocab_size, n = ec->n_tokens;
	int32_t *ids = malloc((size_t)n * sizeof *ids);
	for (int64_t i = 0; i < n; i++)
		ids[i] = (int32_t)(rnd() % (uint32_t)V);
	float *got = malloc((size_t)(n * V) * sizeof *got);
	engine_item it = { seq, ids, ec->prompt, true, false, false };
	ck_assert_msg(engine_forward(e, &it, 1, got, err, sizeof err) == 0, "%s", err);
	for (int64_t t = ec->prompt; t < n; t++) {
		engine_item step = { seq, &ids[t], 1, false, false, false };
		ck_assert_msg(engine_forward(e, &step, 1, got + t * V, err, sizeof err) == 0, "%s", err);
	}
	double *want = malloc((size_t)(n * V) * sizeof *want);
	ref_forward(&ref, ids, n, chosen, want);
	double worst = 0;
	for (int64_t t = 0; t < n; t++)
		for (int64_t v = 0; v < V; v++) {
			double d = fabs(got[t * V + v] - want[t * V + v]) / (1.0 + fabs(want[t * V + v]));
			if (d > worst)
				worst = d;
			ck_assert_msg(d <= 1e-4, "%s position %lld token %lld: %.6f vs naive %.6f", ec->model, (long long)t,
			              (long long)v, got[t * V + v], want[t * V + v]);
		}
	/* The work counter equals what the windows allow: Σ over tokens, layers and query heads of min(W, p + 1). */
	engine_seq_stats st;
	ck_assert_int_eq(engine_seq_stats_get(e, seq, &st), 0);
	uint64_t expect = 0, full = 0;
	for (int64_t pos = 0; pos < n; pos++)
		for (int32_t l = 0; l < c->n_layers; l++)
			for (int32_t h = 0; h < c->n_heads; h++) {
				int64_t w = chosen[l * c->n_kv_heads + h / (c->n_heads / c->n_kv_heads)];
				expect += (uint64_t)(w < pos + 1 ? w : pos + 1);
				full += (uint64_t)(pos + 1);
			}
	ck_assert_uint_eq(st.attn_products, expect);
	ck_assert_uint_eq(st.attn_products_full, full);
	printf("equivalence %s, %lld tokens, chunk %d: max relative diff %.2e; work ratio %.4f\n", ec->model, (long long)n,
	       ec->chunk, worst, (double)expect / (double)full);
	engine_free(e);
	model_files_free(&ref);
	remove_model_dir(dir);
	free(json); free(chosen); free(ids); free(got); free(want);
}
END_TEST

/* With every window ≥ the length, the windowed regime is full attention, bit for bit. */
START_TEST(test_large_windows_equal_full_attention)
{
	char src[1024], err[512], dir[256];
	snprintf(src, sizeof src, "%s/%s", testdata(), "qwen3-small-a");
	model_files ref;
	ck_assert_msg(model_files_load(&ref, src, err, sizeof err) == 0, "%s", err);
	const int32_t windows[] = { 1024, 2048 };
	rng_state = 99;
	char *json = aah_json_random(&ref.config, windows, 2, 2048, "static", 1, NULL);
	make_model_dir(dir, sizeof dir, "check", "qwen3-small-a", json);
	engine_params p = { .backend = test_backend(), .n_threads = 2, .max_seqs = 2, .ctx_len = 2048,
	                    .max_batch_tokens = 128 };
	engine *e;
	ck_assert_msg(engine_init(&e, dir, &p, err, sizeof err) == 0, "%s", err);
	const int64_t n = 900, V = ref.config.vocab_size;
	int32_t *ids = malloc((size_t)n * sizeof *ids);
	for (int64_t i = 0; i < n; i++)
		ids[i] = (int32_t)(rnd() % (uint32_t)V);
	float *a = malloc((size_t)(n * V) * sizeof *a), *b = malloc((size_t)(n * V) * sizeof *b);
	int32_t s1 = engine_seq_open(e, "r", err, sizeof err), s2 = engine_seq_open(e, "full_attention", err, sizeof err);
	ck_assert(s1 >= 0 && s2 >= 0);
	engine_item it1 = { s1, ids, (int32_t)n, true, false, false }, it2 = { s2, ids, (int32_t)n, true, false, false };
	ck_assert(engine_forward(e, &it1, 1, a, err, sizeof err) == 0);
	ck_assert(engine_forward(e, &it2, 1, b, err, sizeof err) == 0);
	ck_assert_int_eq(memcmp(a, b, (size_t)(n * V) * sizeof *a), 0);
	engine_free(e);
	model_files_free(&ref);
	remove_model_dir(dir);
	free(json); free(ids); free(a); free(b);
}
END_TEST

/* The logits do not depend on how a prompt was chunked, for every KV element type: a query reads its chunk's own
 * keys as the cache would hold them. (Decode steps are chunks of one.) */
START_TEST(test_chunking_invariant)
{
	static const aah_dtype types[] = { AAH_DTYPE_F32, AAH_DTYPE_BF16, AAH_DTYPE_F16 };
	char src[1024], err[512], dir[256];
	snprintf(src, sizeof src, "%s/%s", testdata(), "qwen3-small-a");
	model_files ref;
	ck_assert_msg(model_files_load(&ref, src, err, sizeof err) == 0, "%s", err);
	const int32_t windows[] = { 64, 128, 256 };
	rng_state = 2024;
	char *json = aah_json_random(&ref.config, windows, 3, 2048, "static", 1, NULL);
	make_model_dir(dir, sizeof dir, "check", "qwen3-small-a", json);
	const int32_t n = 300, V = ref.config.vocab_size;
	int32_t ids[300];
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t)(rnd() % 2048);
	float *a = malloc((size_t)n * V * sizeof *a), *b = malloc((size_t)n * V * sizeof *b);
	const int32_t chunks[] = { 512, 37, 1 };
	for (size_t ti = 0; ti < 3; ti++)
		for (size_t ci = 0; ci < 3; ci++) {
			engine_params p = { .backend = test_backend(), .n_threads = 2, .max_seqs = 1, .ctx_len = 1024,
			                    .max_batch_tokens = chunks[ci], .kv_dtype = types[ti] };
			engine *e;
			ck_assert_msg(engine_init(&e, dir, &p, err, sizeof err) == 0, "%s", err);
			int32_t seq = engine_seq_open(e, NULL, err, sizeof err);
			engine_item it = { seq, ids, n, true, false, false };
			ck_assert_msg(engine_forward(e, &it, 1, ci == 0 ? a : b, err, sizeof err) == 0, "%s", err);
			if (ci > 0 && strcmp(test_backend(), "cuda") != 0)
				ck_assert_msg(memcmp(a, b, (size_t)n * V * sizeof *a) == 0,
				              "kv %s: chunks of %d give other logits than one chunk", aah_dtype_name(types[ti]),
				              chunks[ci]);
			/* the CUDA backend sums single tokens (gemv) and chunks (tiles) in other orders: equal to rounding, which
			 * a 16-bit pool can turn into a last-bit difference of a stored key (2^-8 relative in bf16) */
			const float tol = types[ti] == AAH_DTYPE_F32 ? 1e-4f : 3e-3f;
			for (int64_t x = 0; ci > 0 && !strcmp(test_backend(), "cuda") && x < (int64_t)n * V; x++)
				ck_assert_msg(fabsf(a[x] - b[x]) <= tol * (1 + fabsf(a[x])),
				              "kv %s: chunks of %d give other logits than one chunk (%.9g, %.9g)",
				              aah_dtype_name(types[ti]), chunks[ci], a[x], b[x]);
			engine_free(e);
		}
	engine_free(NULL);
	model_files_free(&ref);
	remove_model_dir(dir);
	free(json); free(a); free(b);
}
END_TEST

/* ---- measurement (engine_seq_measure: calibration) ---- */

/* A prompt in chunks under full attention and under a static windowed regime, measured: each layer's and head's band
 * mass and entropy equal the float64 reference's; the logits are those of an unmeasured run, bit for bit. */
START_TEST(test_measure_equals_reference)
{
	char src[1024], err[512], dir[256];
	snprintf(src, sizeof src, "%s/%s", testdata(), "qwen3-small-a");
	model_files ref;
	ck_assert_msg(model_files_load(&ref, src, err, sizeof err) == 0, "%s", err);
	const model_config *c = &ref.config;
	const int32_t windows[] = { 64, 128, 256 };
	int32_t *chosen = malloc((size_t)c->n_layers * c->n_kv_heads * sizeof *chosen);
	int32_t *full = malloc((size_t)c->n_layers * c->n_kv_heads * sizeof *full);
	for (int32_t i = 0; i < c->n_layers * c->n_kv_heads; i++)
		full[i] = 1024;
	rng_state = 31337;
	char *json = aah_json_random(c, windows, 3, 1024, "static", 1, chosen);
	make_model_dir(dir, sizeof dir, "check", "qwen3-small-a", json);
	engine_params p = { .backend = test_backend(), .n_threads = 2, .max_seqs = 3, .ctx_len = 1024,
	                    .max_batch_tokens = 128 };
	engine *e;
	ck_assert_msg(engine_init(&e, dir, &p, err, sizeof err) == 0, "%s", err);
	enum { N = 300, NB = 4 };
	const int32_t edges[NB - 1] = { 4, 32, 100 }, V = c->vocab_size, L = c->n_layers, NH = c->n_heads;
	int32_t ids[N];
	for (int i = 0; i < N; i++)
		ids[i] = (int32_t)(rnd() % (uint32_t)V);
	float *plain = malloc((size_t)N * V * sizeof *plain), *got = malloc((size_t)N * V * sizeof *got);
	double *want_logits = malloc((size_t)N * V * sizeof *want_logits);
	const char *regimes[2] = { "full_attention", "r" };
	for (int ri = 0; ri < 2; ri++) {
		double *band = calloc((size_t)L * NH * NB, sizeof *band), *ent = calloc((size_t)L * NH, sizeof *ent);
		double *wband = calloc((size_t)L * NH * NB, sizeof *wband), *went = calloc((size_t)L * NH, sizeof *went);
		int32_t s0 = engine_seq_open(e, regimes[ri], err, sizeof err), s1 = engine_seq_open(e, regimes[ri], err, sizeof err);
		ck_assert(s0 >= 0 && s1 >= 0);
		engine_measure m = { .n_bands = NB, .band_edges = edges, .band_mass = band, .entropy = ent };
		ck_assert_msg(engine_seq_measure(e, s1, &m, err, sizeof err) == 0, "%s", err);
		/* two prompt pieces (the second reads the cache), each in chunks of at most 128 */
		engine_item a0 = { s0, ids, 200, true, false, false }, a1 = { s1, ids, 200, true, false, false };
		ck_assert(engine_forward(e, &a0, 1, plain, err, sizeof err) == 0);
		ck_assert(engine_forward(e, &a1, 1, got, err, sizeof err) == 0);
		engine_item b0 = { s0, ids + 200, N - 200, true, false, false }, b1 = { s1, ids + 200, N - 200, true, false, false };
		ck_assert(engine_forward(e, &b0, 1, plain + (int64_t)200 * V, err, sizeof err) == 0);
		ck_assert(engine_forward(e, &b1, 1, got + (int64_t)200 * V, err, sizeof err) == 0);
		if (strcmp(test_backend(), "cuda") != 0)
			ck_assert_msg(memcmp(plain, got, (size_t)N * V * sizeof *got) == 0, "%s: measuring changed the logits",
			              regimes[ri]);
		ck_assert_int_eq(m.rows, N);
		ref_measure rm = { NB, edges, wband, went };
		ref_forward_measured(&ref, ids, N, ri == 0 ? full : chosen, want_logits, &rm);
		double worst = 0;
		for (int64_t i = 0; i < (int64_t)L * NH * NB; i++) {
			const double d = fabs(band[i] - wband[i]) / (1.0 + wband[i]);
			worst = d > worst ? d : worst;
			ck_assert_msg(d <= 1e-5, "%s layer %d head %d band %d: mass %.9g, want %.9g", regimes[ri],
			              (int)(i / (NH * NB)), (int)(i / NB % NH), (int)(i % NB), band[i], wband[i]);
		}
		for (int64_t i = 0; i < (int64_t)L * NH; i++) {
			const double d = fabs(ent[i] - went[i]) / (1.0 + went[i]);
			worst = d > worst ? d : worst;
			ck_assert_msg(d <= 1e-5, "%s layer %d head %d: entropy %.9g, want %.9g", regimes[ri], (int)(i / NH),
			              (int)(i % NH), ent[i], went[i]);
		}
		/* some mass is beyond the windows' reach only under full attention */
		double far = 0;
		for (int64_t i = 0; i < (int64_t)L * NH; i++)
			far += wband[i * NB + NB - 1];
		ck_assert(ri == 0 ? far > 0 : 1);
		printf("measure %s: %d rows, worst relative difference %.2e against the float64 reference\n", regimes[ri], N,
		       worst);
		/* cleared: a further step adds nothing; a fork starts unmeasured */
		int32_t f = engine_seq_fork(e, s1, err, sizeof err);
		ck_assert_msg(f >= 0, "%s", err);
		engine_item step = { f, ids, 1, false, false, false };
		ck_assert(engine_forward(e, &step, 1, got, err, sizeof err) == 0);
		ck_assert_int_eq(m.rows, N);
		ck_assert_int_eq(engine_seq_measure(e, s1, NULL, err, sizeof err), 0);
		step.seq = s1;
		ck_assert(engine_forward(e, &step, 1, got, err, sizeof err) == 0);
		ck_assert_int_eq(m.rows, N);
		engine_seq_close(e, f);
		engine_seq_close(e, s0);
		engine_seq_close(e, s1);
		free(band); free(ent); free(wband); free(went);
	}
	engine_free(e);
	model_files_free(&ref);
	remove_model_dir(dir);
	free(json); free(chosen); free(full); free(plain); free(got); free(want_logits);
}
END_TEST

/* engine_seq_measure refuses what it cannot measure, with a message, and changes nothing then. */
START_TEST(test_measure_errors)
{
	char src[1024], err[512], dir[256];
	snprintf(src, sizeof src, "%s/%s", testdata(), "qwen3-small-a");
	model_files ref;
	ck_assert_msg(model_files_load(&ref, src, err, sizeof err) == 0, "%s", err);
	const int32_t windows[] = { 64, 128 };
	rng_state = 5;
	char *json = aah_json_random(&ref.config, windows, 2, 1024, "adaptive", 2, NULL);
	make_model_dir(dir, sizeof dir, "check", "qwen3-small-a", json);
	engine_params p = { .backend = test_backend(), .n_threads = 1, .max_seqs = 2, .ctx_len = 1024 };
	engine *e;
	ck_assert_msg(engine_init(&e, dir, &p, err, sizeof err) == 0, "%s", err);
	double ent[64 * 64];
	const int32_t up[2] = { 8, 4 }, ok[2] = { 4, 8 }, zero[1] = { 0 };
	engine_measure m = { .n_bands = 1, .entropy = ent };
	int32_t ad = engine_seq_open(e, "r", err, sizeof err), fa = engine_seq_open(e, "full_attention", err, sizeof err);
	ck_assert(ad >= 0 && fa >= 0);
	ck_assert_int_eq(engine_seq_measure(e, ad, &m, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "adaptive") != NULL, "%s", err);
	ck_assert_int_eq(engine_seq_measure(e, 7, &m, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "not open") != NULL, "%s", err);
	m.n_bands = 0;
	ck_assert_int_eq(engine_seq_measure(e, fa, &m, err, sizeof err), -1);
	m.n_bands = ENGINE_MEASURE_MAX_BANDS + 1;
	ck_assert_int_eq(engine_seq_measure(e, fa, &m, err, sizeof err), -1);
	m.n_bands = 3;
	m.band_edges = up;
	ck_assert_int_eq(engine_seq_measure(e, fa, &m, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "ascending") != NULL, "%s", err);
	m.n_bands = 2;
	m.band_edges = zero;
	ck_assert_int_eq(engine_seq_measure(e, fa, &m, err, sizeof err), -1);
	m.n_bands = 3;
	m.band_edges = NULL;
	ck_assert_int_eq(engine_seq_measure(e, fa, &m, err, sizeof err), -1);
	m.band_edges = ok;
	m.entropy = NULL;
	ck_assert_int_eq(engine_seq_measure(e, fa, &m, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "nothing") != NULL, "%s", err);
	/* refused: nothing was set, so a forward measures nothing */
	int32_t id = 3;
	engine_item it = { fa, &id, 1, false, false, false };
	float *logits = malloc((size_t)ref.config.vocab_size * sizeof *logits);
	ck_assert(engine_forward(e, &it, 1, logits, err, sizeof err) == 0);
	ck_assert_int_eq(m.rows, 0);
	/* one band, the entropy alone: accepted; the mass of one band would be 1 per row */
	m.entropy = ent;
	m.n_bands = 1;
	memset(ent, 0, sizeof ent);
	ck_assert_int_eq(engine_seq_measure(e, fa, &m, err, sizeof err), 0);
	ck_assert(engine_forward(e, &it, 1, logits, err, sizeof err) == 0);
	ck_assert_int_eq(m.rows, 1);
	for (int32_t i = 0; i < ref.config.n_layers * ref.config.n_heads; i++)
		ck_assert(ent[i] > 0 && ent[i] <= log(2.0) + 1e-6);   /* the second position: two keys */
	free(logits);
	engine_free(e);
	model_files_free(&ref);
	remove_model_dir(dir);
	free(json);
}
END_TEST

/* ---- accounting ---- */

START_TEST(test_kv_bytes_match_formula)
{
	char src[1024], err[512], dir[256];
	snprintf(src, sizeof src, "%s/%s", testdata(), "qwen3-small-a");
	model_files ref;
	ck_assert_msg(model_files_load(&ref, src, err, sizeof err) == 0, "%s", err);
	const model_config *c = &ref.config;
	const int32_t windows[] = { 64, 128, 256, 2048 };
	int32_t *chosen = malloc((size_t)c->n_layers * c->n_kv_heads * sizeof *chosen);
	rng_state = 4242;
	char *json = aah_json_random(c, windows, 4, 2048, "static", 1, chosen);
	make_model_dir(dir, sizeof dir, "check", "qwen3-small-a", json);
	engine_params p = { .backend = test_backend(), .n_threads = 1, .max_seqs = 1, .ctx_len = 2048,
	                    .max_batch_tokens = 64 };
	engine *e;
	ck_assert_msg(engine_init(&e, dir, &p, err, sizeof err) == 0, "%s", err);
	int32_t seq = engine_seq_open(e, NULL, err, sizeof err);
	float *logits = malloc((size_t)c->vocab_size * sizeof *logits);
	const int64_t elsize = 4, page = 16;
	for (int32_t len = 1; len <= 1000; len++) {
		int32_t id = (int32_t)(rnd() % (uint32_t)c->vocab_size);
		engine_item it = { seq, &id, 1, false, false, false };
		ck_assert(engine_forward(e, &it, 1, logits, err, sizeof err) == 0);
		int64_t formula = 0, slack = 0;
		for (int32_t h = 0; h < c->n_layers * c->n_kv_heads; h++) {
			int64_t keep = len < chosen[h] ? len : chosen[h];
			formula += keep * c->head_dim * 2 * elsize;
			slack += page * c->head_dim * 2 * elsize;   /* at most one page per head beyond the formula */
		}
		int64_t got = engine_seq_kv_bytes(e, seq);
		ck_assert_msg(got >= formula && got <= formula + slack, "len %d: %lld bytes, formula %lld (+ ≤ %lld)", len,
		              (long long)got, (long long)formula, (long long)slack);
		/* the page count is exactly the pages the ring needs */
		int64_t pages = 0;
		for (int32_t h = 0; h < c->n_layers * c->n_kv_heads; h++) {
			int64_t lp = (len + page - 1) / page, slots = (chosen[h] + page - 1) / page + 1;
			pages += lp < slots ? lp : slots;
		}
		ck_assert_int_eq(got, pages * page * c->head_dim * 2 * elsize);
	}
	engine_free(e);
	model_files_free(&ref);
	remove_model_dir(dir);
	free(json); free(chosen); free(logits);
}
END_TEST

/* The worked case: f = 0.5, 0.25, 0.125, 0.125 over windows 512, 1024, 2048, 4096 at T = 4096 gives 0.3125. */
START_TEST(test_acr_worked_case)
{
	/* 8 KV heads in one layer, one query head each: 4 groups of 1 at 512, 2 at 1024, 1 at 2048, 1 at 4096 */
	const char *json =
		"{\"version\":1,\"context_length\":4096,\"candidate_windows\":[512,1024,2048,4096],\"regimes\":{\"r\":{"
		"\"layers\":[{\"groups\":[{\"kv_heads\":[0,1,2,3],\"window\":512},{\"kv_heads\":[4,5],\"window\":1024},"
		"{\"kv_heads\":[6],\"window\":2048},{\"kv_heads\":[7],\"window\":4096}]}]}}}";
	model_config mc = { .n_layers = 1, .n_heads = 8, .n_kv_heads = 8, .head_dim = 16 };
	aah_config a;
	char err[256];
	ck_assert_msg(aah_config_parse(&a, json, strlen(json), &mc, err, sizeof err) == 0, "%s", err);
	aah_regimes rs;
	ck_assert_int_eq(aah_regimes_init(&rs, &a, 1, 8, 1, 4096), 0);
	aah_seq_state s;
	ck_assert_int_eq(aah_seq_state_init(&s, &rs), 0);
	aah_seq_state_reset(&s, &rs, aah_regimes_find(&rs, "r"));
	aah_seq_count(&s, &rs, 37, false);
	/* independently: f_W from the group sizes, Σ f_W·W / T */
	double f[4] = { 4 / 8.0, 2 / 8.0, 1 / 8.0, 1 / 8.0 }, W[4] = { 512, 1024, 2048, 4096 }, acr = 0;
	for (int i = 0; i < 4; i++)
		acr += f[i] * W[i] / 4096;
	ck_assert_double_eq_tol(acr, 0.3125, 1e-12);
	ck_assert_double_eq_tol(aah_seq_acr(&s, &rs), 0.3125, 1e-12);
	/* full attention is 1 by definition */
	aah_seq_state_reset(&s, &rs, aah_regimes_find(&rs, AAH_FULL_ATTENTION));
	aah_seq_count(&s, &rs, 5, false);
	ck_assert_double_eq_tol(aah_seq_acr(&s, &rs), 1.0, 1e-12);
	aah_seq_state_free(&s);
	aah_regimes_free(&rs);
	aah_config_free(&a);
}
END_TEST

/* The engine's per-request ACR equals Σ f_W·W/T computed here from the groups it was given. */
START_TEST(test_engine_acr_and_usage)
{
	char src[1024], err[512], dir[256];
	snprintf(src, sizeof src, "%s/%s", testdata(), "qwen3-small-b");   /* 3 layers, 1 KV head, 8 query heads */
	model_files ref;
	ck_assert_msg(model_files_load(&ref, src, err, sizeof err) == 0, "%s", err);
	const int32_t windows[] = { 128, 256, 512, 1024 };
	int32_t chosen[3];
	rng_state = 777;
	char *json = aah_json_random(&ref.config, windows, 4, 1024, "static", 1, chosen);
	make_model_dir(dir, sizeof dir, "check", "qwen3-small-b", json);
	engine_params p = { .backend = test_backend(), .n_threads = 1, .max_seqs = 1, .ctx_len = 1024 };
	engine *e;
	ck_assert_msg(engine_init(&e, dir, &p, err, sizeof err) == 0, "%s", err);
	int32_t seq = engine_seq_open(e, NULL, err, sizeof err);
	int32_t ids[300];
	for (int i = 0; i < 300; i++)
		ids[i] = (int32_t)(rnd() % 2048);
	float *logits = malloc((size_t)ref.config.vocab_size * sizeof *logits);
	engine_item it = { seq, ids, 300, false, false, false };
	ck_assert(engine_forward(e, &it, 1, logits, err, sizeof err) == 0);
	engine_seq_stats st;
	ck_assert_int_eq(engine_seq_stats_get(e, seq, &st), 0);
	double acr = 0;
	for (int l = 0; l < 3; l++)
		acr += (1.0 / 3) * chosen[l] / 1024.0;   /* each layer's one group holds all 8 query heads */
	ck_assert_double_eq_tol(st.acr, acr, 1e-9);
	ck_assert_str_eq(st.regime, "r");
	double total = 0;
	for (int i = 0; i < st.n_usage; i++)
		total += st.usage[i];
	ck_assert_double_eq_tol(total, 300.0 * 8 * 3, 1e-6);
	engine_free(e);
	model_files_free(&ref);
	remove_model_dir(dir);
	free(json); free(logits);
}
END_TEST

/* ---- the adaptive policy ---- */

START_TEST(test_adaptive_never_exceeds_capacity)
{
	const char *json =
		"{\"version\":1,\"context_length\":4096,\"candidate_windows\":[512,1024,2048,4096],\"regimes\":{\"a\":{"
		"\"policy\":{\"kind\":\"adaptive\",\"control_interval\":5,\"feature_ema\":0.9,\"resolution_ema\":0.15},"
		"\"layers\":[{\"groups\":[{\"kv_heads\":[0],\"window\":512,\"capacity\":1024},{\"kv_heads\":[1],\"window\":1024,"
		"\"capacity\":2048}]},{\"groups\":[{\"kv_heads\":[0,1],\"window\":512,\"capacity\":512}]}]}}}";
	model_config mc = { .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16 };
	aah_config a;
	char err[256];
	ck_assert_msg(aah_config_parse(&a, json, strlen(json), &mc, err, sizeof err) == 0, "%s", err);
	aah_regimes rs;
	ck_assert_int_eq(aah_regimes_init(&rs, &a, 2, 2, 2, 4096), 0);
	aah_seq_state s;
	ck_assert_int_eq(aah_seq_state_init(&s, &rs), 0);
	int32_t ri = aah_regimes_find(&rs, "a");
	aah_seq_state_reset(&s, &rs, ri);
	float mass[2 * 2 * 4];
	rng_state = 31337;
	int saw_change = 0;
	for (int step = 0; step < 5000; step++) {
		for (int i = 0; i < 16; i++)   /* mass anywhere, often far away: pushes windows up */
			mass[i] = (float)(rnd() % 1000) * (i % 4 == 3 ? 5.0f : 1.0f);
		aah_seq_control(&s, &rs, mass);
		for (int g = 0; g < rs.r[ri].n_groups; g++) {
			int32_t w = s.group_window[g];
			ck_assert_int_le(w, rs.r[ri].group_capacity[g]);
			ck_assert(w == 512 || w == 1024 || w == 2048 || w == 4096);
			saw_change |= w != rs.r[ri].group_window0[g];
		}
	}
	ck_assert(saw_change);   /* the controller does move windows, within capacity */
	/* all mass nearby: every window falls back to the smallest candidate */
	for (int step = 0; step < 200; step++) {
		for (int i = 0; i < 16; i++)
			mass[i] = i % 4 == 0 ? 1.0f : 0.0f;
		aah_seq_control(&s, &rs, mass);
	}
	for (int g = 0; g < rs.r[ri].n_groups; g++)
		ck_assert_int_eq(s.group_window[g], 512);
	aah_seq_state_free(&s);
	aah_regimes_free(&rs);
	aah_config_free(&a);
}
END_TEST

/* An adaptive regime through the engine: probes run every control interval, the selections stay within each group's
 * capacity (seen in the branch usage), logits stay finite, and the windows save work. */
START_TEST(test_adaptive_in_engine)
{
	char src[1024], err[512], dir[256];
	snprintf(src, sizeof src, "%s/%s", testdata(), "qwen3-small-a");
	model_files ref;
	ck_assert_msg(model_files_load(&ref, src, err, sizeof err) == 0, "%s", err);
	const int32_t windows[] = { 32, 64, 128, 256 };
	rng_state = 5;
	char *json = aah_json_random(&ref.config, windows, 4, 256, "adaptive", 2, NULL);
	make_model_dir(dir, sizeof dir, "check", "qwen3-small-a", json);
	engine_params p = { .backend = test_backend(), .n_threads = 2, .max_seqs = 1, .ctx_len = 1024 };
	engine *e;
	ck_assert_msg(engine_init(&e, dir, &p, err, sizeof err) == 0, "%s", err);
	int32_t seq = engine_seq_open(e, NULL, err, sizeof err);
	const int32_t V = ref.config.vocab_size;
	float *logits = malloc((size_t)V * sizeof *logits);
	int32_t ids[64];
	for (int i = 0; i < 64; i++)
		ids[i] = (int32_t)(rnd() % 2048);
	engine_item it = { seq, ids, 64, false, false, false };
	ck_assert(engine_forward(e, &it, 1, logits, err, sizeof err) == 0);
	for (int step = 0; step < 400; step++) {
		int32_t id = (int32_t)(rnd() % 2048);
		engine_item s1 = { seq, &id, 1, false, false, false };
		ck_assert(engine_forward(e, &s1, 1, logits, err, sizeof err) == 0);
		for (int32_t v = 0; v < V; v++)
			ck_assert(isfinite(logits[v]));
	}
	engine_seq_stats st;
	ck_assert_int_eq(engine_seq_stats_get(e, seq, &st), 0);
	ck_assert(st.acr > 0 && st.acr <= 1);
	for (int i = 0; i < st.n_usage; i++)
		ck_assert_int_le(st.usage_window[i], 256);   /* capacity is at most 2 × 128 = 256 = T */
	ck_assert(st.attn_products < st.attn_products_full);
	engine_free(e);
	model_files_free(&ref);
	remove_model_dir(dir);
	free(json); free(logits);
}
END_TEST

/* ---- aah.json validation ---- */

static void expect_bad(const char *json, const char *needle)
{
	model_config mc = { .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16 };
	aah_config a;
	char err[512] = "";
	ck_assert_msg(aah_config_parse(&a, json, strlen(json), &mc, err, sizeof err) == -1, "accepted: %s", json);
	ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
	aah_config_free(&a);
}

#define HEAD "{\"version\":1,\"context_length\":4096,\"candidate_windows\":[512,1024,2048,4096],"
#define L0 "{\"groups\":[{\"kv_heads\":[0,1],\"window\":512}]}"

START_TEST(test_aah_json_invalid)
{
	expect_bad("not json", "not valid JSON");
	expect_bad("{\"version\":2}", "version");
	expect_bad(HEAD "\"regimes\":{\"r\":{\"layers\":[" L0 "," L0 "]}},\"default_regime\":\"nope\"}", "default_regime 'nope'");
	expect_bad(HEAD "\"regimes\":{\"r\":{\"layers\":[" L0 ",{\"groups\":[{\"kv_heads\":[0,1],\"window\":500}]}]}}}",
	           "layer 1 group 0: 'window' must be one of the candidate windows");
	expect_bad(HEAD "\"regimes\":{\"r\":{\"layers\":[" L0 ",{\"groups\":[{\"kv_heads\":[0],\"window\":512},"
	                "{\"kv_heads\":[0,1],\"window\":1024}]}]}}}",
	           "layer 1: KV head 0 is in group 0 and group 1");
	expect_bad(HEAD "\"regimes\":{\"r\":{\"layers\":[" L0 ",{\"groups\":[{\"kv_heads\":[0],\"window\":512}]}]}}}",
	           "layer 1: KV head 1 is in no group");
	expect_bad(HEAD "\"regimes\":{\"r\":{\"layers\":[" L0 ",{\"groups\":[{\"kv_heads\":[0,1],\"window\":1024,"
	                "\"capacity\":512}]}]}}}",
	           "layer 1 group 0: capacity 512 is below window 1024");
	expect_bad(HEAD "\"regimes\":{\"r\":{\"layers\":[" L0 ",{\"groups\":[{\"kv_heads\":[0,2],\"window\":512}]}]}}}",
	           "layer 1 group 0: kv_heads[1] is not a KV head index");
	expect_bad(HEAD "\"regimes\":{\"r\":{\"layers\":[{\"groups\":[{\"kv_heads\":[0,1,0],\"window\":512}]}," L0 "]}}}",
	           "3 KV heads, the model has 2");
	expect_bad(HEAD "\"regimes\":{\"r\":{\"layers\":[" L0 "]}}}", "must be an array of 2 layers");
	expect_bad(HEAD "\"regimes\":{\"full_attention\":{\"layers\":[" L0 "," L0 "]}}}", "reserved");
	expect_bad(HEAD "\"regimes\":{\"r\":{\"policy\":{\"kind\":\"magic\"},\"layers\":[" L0 "," L0 "]}}}", "policy kind");
	expect_bad(HEAD "\"regimes\":{\"r\":{\"layers\":[" L0 ",{\"groups\":[{\"kv_heads\":[0,1],\"window\":512,"
	                "\"capacity\":9999}]}]}}}",
	           "exceeds context_length");
	expect_bad("{\"version\":1,\"context_length\":4096,\"candidate_windows\":[1024,512],\"regimes\":{}}",
	           "ascending");
}
END_TEST

START_TEST(test_run_directory)
{
	char root[] = "/tmp/aah-run-XXXXXX", out[4096], err[512], p[4200];
	ck_assert_ptr_nonnull(mkdtemp(root));
	/* not steps: leading zeros or a sign (aah-convert import reads names by the same rule, aah_parse_step) */
	const char *steps[] = { "checkpoint-1000", "checkpoint-10000", "checkpoint-5000", "checkpoint-x", "other",
		                "checkpoint-0200000", "checkpoint-+20000", "checkpoint- 30000" };
	for (int i = 0; i < 8; i++) {
		snprintf(p, sizeof p, "%s/%s", root, steps[i]);
		ck_assert_int_eq(mkdir(p, 0755), 0);
	}
	ck_assert_int_eq(aah_resolve_model_dir(root, -1, out, sizeof out, err, sizeof err), 0);
	snprintf(p, sizeof p, "%s/checkpoint-10000", root);
	ck_assert_str_eq(out, p);
	ck_assert_int_eq(aah_resolve_model_dir(root, 5000, out, sizeof out, err, sizeof err), 0);
	snprintf(p, sizeof p, "%s/checkpoint-5000", root);
	ck_assert_str_eq(out, p);
	ck_assert_int_eq(aah_resolve_model_dir(root, 7, out, sizeof out, err, sizeof err), -1);
	ck_assert_ptr_nonnull(strstr(err, "checkpoint-7"));
	snprintf(p, sizeof p, "rm -rf '%s'", root);
	ck_assert_int_eq(system(p), 0);
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
	Suite *s = suite_create("aah");
	TCase *tc = tcase_create("equivalence");
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_windowed_equals_dense_masked, 0, (int)(sizeof eq_cases / sizeof eq_cases[0]));
	tcase_add_test(tc, test_large_windows_equal_full_attention);
	tcase_add_test(tc, test_chunking_invariant);
	suite_add_tcase(s, tc);
	tc = tcase_create("measure");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_measure_equals_reference);
	tcase_add_test(tc, test_measure_errors);
	suite_add_tcase(s, tc);
	tc = tcase_create("accounting");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_kv_bytes_match_formula);
	tcase_add_test(tc, test_acr_worked_case);
	tcase_add_test(tc, test_engine_acr_and_usage);
	suite_add_tcase(s, tc);
	tc = tcase_create("policy");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_adaptive_never_exceeds_capacity);
	tcase_add_test(tc, test_adaptive_in_engine);
	suite_add_tcase(s, tc);
	tc = tcase_create("files");
	tcase_add_test(tc, test_aah_json_invalid);
	tcase_add_test(tc, test_run_directory);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	if (on_cuda)
		srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
