/* tests/models/check_gguf.c — GGUF files end to end: the reader against valid, truncated and lying files; the reference
 * quantizers against their error bounds; `aah-convert quantize` through its command line, its files read back by an
 * independent reader (tests/gguf_ref.py: byte-for-byte re-serialisation, numpy dequantization equal bit for bit to
 * aah_dequantize_row) and served by the engine — logits against a float64 forward pass of the dequantized weights,
 * bf16 files equal to the safetensors they came from, Llama's RoPE row order undone; the tokenizer read from a GGUF
 * giving the ids tokenizer.json gives. */
#define TEST_TMPDIR "gguf"
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/quant.h"
#include "models/gguf.h"
#include "models/gguf_model.h"
#include "models/model.h"
#include "models/model_config.h"
#include "models/tokenizer.h"
#include "tests/test_env.h"
#include "tools/convert/gguf_write.h"

static const char *cache_dir(void)
{
	const char *d = getenv("AAH_CACHE");
	return d && *d ? d : ".cache";
}

static char *path_in(const char *name)
{
	static char buf[4][700];
	static int k;
	char *p = buf[k++ % 4];
	snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
	return p;
}

/* ---- the reader ---- */

static int fill_pattern(void *ctx, int32_t index, void *dst, size_t nbytes, char *err, size_t err_len)
{
	for (size_t i = 0; i < nbytes; i++)
		((unsigned char *)dst)[i] = (unsigned char)(i * 7 + (size_t)index);
	return 0;
}

/* A small valid file: a few keys of every kind, an F32, a Q8_0 and a Q4_K tensor. Returns its bytes (caller frees). */
static unsigned char *small_file(size_t *len)
{
	gguf_writer *w = gguf_writer_init();
	const char *toks[] = { "a", "bc" };
	size_t tl[] = { 1, 2 };
	int32_t iv[] = { 1, -2, 3 };
	ck_assert(!gguf_writer_str(w, "general.architecture", "qwen3", 5) && !gguf_writer_u32(w, "u", 7) &&
	          !gguf_writer_i32(w, "i", -7) && !gguf_writer_f32(w, "f", 0.25f) && !gguf_writer_bool(w, "b", true) &&
	          !gguf_writer_str_array(w, "sa", toks, tl, 2) && !gguf_writer_i32_array(w, "ia", iv, 3));
	int64_t ne1[] = { 8 }, ne2[] = { 64, 3 }, ne3[] = { 256, 2 };
	ck_assert(!gguf_writer_tensor(w, "t.f32", 1, ne1, GGML_TYPE_F32));
	ck_assert(!gguf_writer_tensor(w, "t.q8", 2, ne2, GGML_TYPE_Q8_0));
	ck_assert(!gguf_writer_tensor(w, "t.q4k", 2, ne3, GGML_TYPE_Q4_K));
	ck_assert_int_ne(gguf_writer_tensor(w, "bad", 2, (int64_t[]){ 100, 1 }, GGML_TYPE_Q8_0), 0);   /* not blocks */
	char err[256];
	ck_assert_msg(!gguf_writer_write(w, path_in("s.gguf"), fill_pattern, NULL, err, sizeof err), "%s", err);
	gguf_writer_free(w);
	return read_all(path_in("s.gguf"), len);
}

START_TEST(test_reader_valid)
{
	size_t len;
	unsigned char *buf = small_file(&len);
	gguf_file g;
	char err[256];
	ck_assert_msg(gguf_parse(&g, buf, len, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(g.version, 3);
	ck_assert_int_eq(g.n_kv, 7);
	ck_assert_int_eq(g.n_tensors, 3);
	int64_t v;
	double f;
	bool b;
	gguf_str s;
	ck_assert_int_eq(gguf_get_int(&g, "u", &v, err, sizeof err), 1);
	ck_assert_int_eq(v, 7);
	ck_assert_int_eq(gguf_get_int(&g, "i", &v, err, sizeof err), 1);
	ck_assert_int_eq(v, -7);
	ck_assert_int_eq(gguf_get_float(&g, "f", &f, err, sizeof err), 1);
	ck_assert(f == 0.25);
	ck_assert_int_eq(gguf_get_bool(&g, "b", &b, err, sizeof err), 1);
	ck_assert(b);
	ck_assert_int_eq(gguf_get_str(&g, "general.architecture", &s, err, sizeof err), 1);
	ck_assert(s.len == 5 && !memcmp(s.s, "qwen3", 5));
	ck_assert_int_eq(gguf_get_int(&g, "absent", &v, err, sizeof err), 0);
	ck_assert_int_eq(gguf_get_int(&g, "general.architecture", &v, err, sizeof err), -1);
	ck_assert_ptr_nonnull(strstr(err, "general.architecture"));
	const gguf_kv *sa = gguf_find_kv(&g, "sa"), *ia = gguf_find_kv(&g, "ia");
	ck_assert(sa && sa->n == 2 && sa->strs[1].len == 2 && !memcmp(sa->strs[1].s, "bc", 2));
	ck_assert(ia && ia->n == 3 && gguf_arr_int(ia, 1) == -2);
	const gguf_tensor_info *q4 = gguf_find_tensor(&g, "t.q4k");
	ck_assert(q4 && q4->type == GGML_TYPE_Q4_K && q4->ne[0] == 256 && q4->ne[1] == 2 && q4->nbytes == 288);
	ck_assert_int_eq(q4->offset % 32, 0);
	ck_assert_int_eq(((const unsigned char *)q4->data)[5], (unsigned char)(5 * 7 + 2));
	ck_assert_int_eq((size_t)((const unsigned char *)q4->data - buf) % 32, 0);
	gguf_free(&g);
	free(buf);
}
END_TEST

/* Every truncation of a valid file is refused with a message, never read past. */
START_TEST(test_reader_truncated)
{
	size_t len;
	unsigned char *buf = small_file(&len);
	for (size_t n = 0; n < len; n++) {
		unsigned char *cut = malloc(n ? n : 1);   /* its own allocation: ASan sees a read past n */
		memcpy(cut, buf, n);
		gguf_file g;
		char err[256] = "";
		ck_assert_msg(gguf_parse(&g, cut, n, err, sizeof err) == -1, "a file cut to %zu of %zu bytes parsed", n, len);
		ck_assert_msg(*err, "no message at %zu", n);
		free(cut);
	}
	free(buf);
}
END_TEST

static void put_u32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* Where tensor name's info starts in buf (its u64 name length), found by the name's bytes. */
static size_t info_at(const unsigned char *buf, size_t len, const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 8; i + n <= len; i++)
		if (!memcmp(buf + i, name, n) && buf[i - 8] == n)
			return i - 8;
	ck_abort_msg("no %s", name);
	return 0;
}

static void expect_refused(unsigned char *buf, size_t len, const char *needle)
{
	gguf_file g;
	char err[256] = "";
	ck_assert_msg(gguf_parse(&g, buf, len, err, sizeof err) == -1, "parsed, expected '%s'", needle);
	ck_assert_msg(strstr(err, needle), "'%s' does not say '%s'", err, needle);
}

/* Lies in the header: each refused with a message naming what is wrong. */
START_TEST(test_reader_hostile)
{
	size_t len;
	unsigned char *orig = small_file(&len), *b = malloc(len);
#define FRESH() memcpy(b, orig, len)
	FRESH(); b[0] = 'X'; expect_refused(b, len, "magic");
	FRESH(); put_u32(b + 4, 4); expect_refused(b, len, "version 4");
	FRESH(); put_u64(b + 8, UINT64_MAX); expect_refused(b, len, "cannot fit");
	FRESH(); put_u64(b + 16, 1ull << 40); expect_refused(b, len, "cannot fit");
	FRESH(); put_u64(b + 24, 1ull << 40); expect_refused(b, len, "64 MiB");   /* the first key's length */
	size_t q8 = info_at(orig, len, "t.q8"), q4 = info_at(orig, len, "t.q4k"), f32 = info_at(orig, len, "t.f32");
	size_t q8_dims = q8 + 8 + 4, q8_type = q8_dims + 4 + 16, q8_off = q8_type + 4;
	FRESH(); put_u32(b + q8_dims, 5); expect_refused(b, len, "t.q8");
	FRESH(); put_u32(b + q8_dims, 0); expect_refused(b, len, "dimensions");
	FRESH(); put_u64(b + q8_dims + 4, 0); expect_refused(b, len, "dimension 0");
	FRESH(); put_u64(b + q8_dims + 4, 48); expect_refused(b, len, "whole blocks");
	FRESH(); put_u64(b + q8_dims + 4 + 8, 1ull << 62); expect_refused(b, len, "t.q8");
	FRESH(); put_u32(b + q8_type, 3); expect_refused(b, len, "ggml type 3");
	FRESH(); put_u32(b + q8_type, 99); expect_refused(b, len, "not supported");
	uint64_t off = 0;
	for (int i = 7; i >= 0; i--) off = off << 8 | b[q8_off + i];
	FRESH(); put_u64(b + q8_off, off + 4); expect_refused(b, len, "alignment");
	FRESH(); put_u64(b + q8_off, 0); expect_refused(b, len, "overlaps");
	FRESH(); put_u64(b + q8_off, 1ull << 40); expect_refused(b, len, "t.q8");
	FRESH(); put_u64(b + q4, 1ull << 30); expect_refused(b, len, "");   /* a name longer than the file */
	FRESH(); memcpy(b + f32 + 8, "t.q4k", 5);   /* "t.f32" and "t.q4k" have the same length: a duplicate name */
	expect_refused(b, len, "appears twice");
	/* keys: a duplicate ('u' → 'i') and an alignment that is not a power of two */
	size_t ku = info_at(orig, len, "u");
	FRESH(); b[ku + 8] = 'i'; expect_refused(b, len, "appears twice");
	FRESH(); b[ku + 9] = 13; expect_refused(b, len, "not a GGUF type");
	FRESH(); b[ku + 9] = GGUF_TYPE_ARRAY; expect_refused(b, len, "");   /* u32 7 read as a bool array's type */
	free(b);
	free(orig);
	/* general.alignment 48 */
	gguf_writer *w = gguf_writer_init();
	gguf_writer_u32(w, "general.alignment", 48);
	char err[256];
	ck_assert(!gguf_writer_write(w, path_in("a.gguf"), fill_pattern, NULL, err, sizeof err));
	gguf_writer_free(w);
	unsigned char *a = read_all(path_in("a.gguf"), &len);
	expect_refused(a, len, "general.alignment");
	free(a);
#undef FRESH
}
END_TEST

/* ---- the reference quantizers ---- */

static uint64_t rng = 0x1234567;
static float frand(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* quantize → dequantize: each value within a fraction of its block's largest magnitude (the type's grid step; Q4_0's
 * grid ends one step short on the side opposite its signed maximum), plus fixed cases: zeros stay zeros, the largest
 * value of a Q8_0 block is exact up to its half-float scale. */
START_TEST(test_quant_ref_bounds)
{
	static const struct {
		aah_dtype t;
		double bound;
	} types[] = {
		{ AAH_DTYPE_Q8_0, 0.5 / 127 + 2e-3 }, { AAH_DTYPE_Q4_0, 1.0 / 8 + 2e-3 }, { AAH_DTYPE_Q4_K, 2.0 / 15 },
		{ AAH_DTYPE_Q5_K, 2.0 / 31 },          { AAH_DTYPE_Q6_K, 1.0 / 32 + 4e-3 }, { AAH_DTYPE_Q8_K, 0.5 / 127 + 1e-6 },
	};
	enum { N = 4096 };
	float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
	void *q = malloc(aah_dtype_row_bytes(AAH_DTYPE_Q8_K, N));
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		aah_dtype t = types[ti].t;
		int64_t bl = aah_dtype_block_len(t);
		for (int pass = 0; pass < 3; pass++) {
			for (int i = 0; i < N; i++)   /* uniform; heavy-tailed; offset (K types' mins) */
				x[i] = pass == 0 ? frand() : pass == 1 ? frand() * frand() * frand() * 10 : 0.5f + frand() * 0.1f;
			aah_quantize_row_ref(t, q, x, N);
			aah_dequantize_row(t, y, q, N);
			double worst = 0;
			for (int64_t b0 = 0; b0 < N; b0 += bl) {
				float amax = 0;
				for (int64_t i = b0; i < b0 + bl; i++) amax = fmaxf(amax, fabsf(x[i]));
				for (int64_t i = b0; i < b0 + bl; i++) worst = fmax(worst, fabs(x[i] - y[i]) / amax);
			}
			ck_assert_msg(worst <= types[ti].bound, "%s pass %d: error %.4g of the block maximum (bound %.4g)",
			              aah_dtype_name(t), pass, worst, types[ti].bound);
		}
		memset(x, 0, N * sizeof *x);
		aah_quantize_row_ref(t, q, x, N);
		aah_dequantize_row(t, y, q, N);
		for (int i = 0; i < N; i++) ck_assert_msg(y[i] == 0.0f, "%s: zeros came back as %g", aah_dtype_name(t), y[i]);
	}
	/* Q8_K: bsums are the sums of each 16 quants; d·q reproduces the block maximum within rounding */
	for (int i = 0; i < N; i++) x[i] = frand();
	aah_quantize_row_ref(AAH_DTYPE_Q8_K, q, x, N);
	const aah_block_q8_K *k = q;
	for (int b0 = 0; b0 < N / AAH_QK_K; b0++)
		for (int j = 0; j < 16; j++) {
			int s = 0;
			for (int i = 0; i < 16; i++) s += k[b0].qs[j * 16 + i];
			ck_assert_int_eq(s, k[b0].bsums[j]);
		}
	/* Q8_0 of 0, 1, …, 31 and its negation: d = 31/127, q = round(i·127/31) */
	for (int i = 0; i < 32; i++) x[i] = (float)i, x[32 + i] = -(float)i;
	aah_quantize_row_ref(AAH_DTYPE_Q8_0, q, x, 64);
	const aah_block_q8_0 *b = q;
	ck_assert_uint_eq(b[0].d, aah_float_to_half(31.0f / 127.0f));
	for (int i = 0; i < 32; i++) {
		ck_assert_int_eq(b[0].qs[i], (int)roundf((float)i * (1.0f / (31.0f / 127.0f))));
		ck_assert_int_eq(b[1].qs[i], -b[0].qs[i]);
	}
	free(x);
	free(y);
	free(q);
}
END_TEST

/* ---- aah-convert quantize, read back ---- */

/* A small Qwen3 (or Llama) model with the 2056-token test tokenizer, wide enough (hidden 256) that every K type is
 * used, into tmpdir/src. */
static void make_model(const char *arch, const char *tied)
{
	char tok[600], out[600], bin[600];
	snprintf(tok, sizeof tok, "%s/qwen3-small-a", testdata());
	snprintf(out, sizeof out, "%s/src", tmpdir);
	snprintf(bin, sizeof bin, "%s/aah-mkmodel", build_dir());
	const char *argv[] = { bin, "--out", out, "--arch", arch, "--preset", "tiny", "--tokenizer", tok, "--hidden", "256",
	                       "--heads", "4", "--kv-heads", "2", "--head-dim", "64", "--intermediate", "512",
	                       "--layers", "3", "--tied", tied, "--seed", "7", NULL };
	ck_assert_msg(tool_run(argv) == 0, "aah-mkmodel: %s", log_text);
}

static void quantize(const char *type, const char *out)
{
	char bin[600], src[600];
	snprintf(bin, sizeof bin, "%s/aah-convert", build_dir());
	snprintf(src, sizeof src, "%s/src", tmpdir);
	const char *argv[] = { bin, "quantize", src, out, "--type", type, NULL };
	ck_assert_msg(tool_run(argv) == 0, "aah-convert quantize --type %s: %s", type, log_text);
}


static const int32_t prompt[] = { 1, 872, 198, 970, 1879, 11, 419, 374, 264, 1273, 13, 1000, 1500, 2047, 2, 198 };
#define N_PROMPT ((int32_t)(sizeof prompt / sizeof prompt[0]))

/* The engine's logits over the prompt, all positions (caller frees). */
static float *engine_logits(const char *model, int32_t *vocab)
{
	engine *e;
	char err[512];
	engine_params p = { .n_threads = 2, .max_seqs = 1, .max_batch_tokens = 64, .ctx_len = 64 };
	ck_assert_msg(engine_init(&e, model, &p, err, sizeof err) == 0, "%s", err);
	*vocab = engine_config(e)->vocab_size;
	float *l = malloc((size_t)N_PROMPT * (size_t)*vocab * sizeof *l);
	int32_t seq = engine_seq_open(e, NULL, err, sizeof err);
	ck_assert_int_ge(seq, 0);
	engine_item it = { seq, prompt, N_PROMPT, true, false, false };
	ck_assert_msg(engine_forward(e, &it, 1, l, err, sizeof err) == 0, "%s", err);
	engine_free(e);
	return l;
}

/* Python's dequantization (f32, ggml's operation order) against aah_dequantize_row of the tensors the loader bound:
 * bit for bit, every tensor. */
static void check_dequant_equal(const char *gguf, const char *deq)
{
	size_t len;
	unsigned char *ref = read_all(deq, &len);
	size_t flen;
	unsigned char *file = read_all(gguf, &flen);
	gguf_file g;
	char err[256];
	ck_assert_msg(gguf_parse(&g, file, flen, err, sizeof err) == 0, "%s", err);
	size_t at = 0;
	for (int64_t i = 0; i < g.n_tensors; i++) {
		const gguf_tensor_info *t = &g.tensors[i];
		int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
		aah_dtype ty = (aah_dtype)gguf_ggml_to_aah(t->type);
		float *row = malloc((size_t)n * sizeof *row);
		for (int64_t r = 0; r < rows; r++) {
			aah_dequantize_row(ty, row, (const unsigned char *)t->data + (size_t)r * aah_dtype_row_bytes(ty, n), n);
			ck_assert_uint_le(at + (size_t)n * 4, len);
			ck_assert_msg(!memcmp(row, ref + at, (size_t)n * 4), "%.*s (%s) row %lld: numpy and aah_dequantize_row "
			              "differ", (int)t->name.len, t->name.s, aah_dtype_name(ty), (long long)r);
			at += (size_t)n * 4;
		}
		free(row);
	}
	ck_assert_uint_eq(at, len);
	gguf_free(&g);
	free(file);
	free(ref);
}

/* Each type: the written file re-serialised byte for byte and dequantized near the source by the independent
 * reader; its dequantization bit-equal to ours; the engine's logits on it against two float64 forward passes of the
 * same dequantized weights. The activation rounding is the one llama.cpp's CPU path uses: a product with Q8_0 / Q4_0
 * weights takes its activations as Q8_0 blocks of 32, one with K-type weights as Q8_K blocks of 256 (each value off
 * by up to 1/254 of its block's largest magnitude); float weights take f32 activations. So: (1) against the pass
 * that rounds its activations the same way (gguf_ref.py's OUT.act) the engine must agree to f32 accumulation,
 * |Δ| ≤ 1e-3·(1 + max|logit|); (2) against the exact pass, within what that rounding itself moves the logits on this
 * model (tol_act = max |exact − rounded|, measured by the reference, not assumed) plus (1)'s slack; greedy tokens
 * equal to the exact pass's wherever its top-2 margin exceeds twice that. Random models are badly conditioned for
 * 8-bit activations (a logit is a dot of near-orthogonal vectors, so the relative error of each product is
 * ~sqrt(n)/254), which is why tol_act is measured: on this model it is about a tenth of the largest logit. Worse,
 * such a model amplifies the few values whose f32 and float64 copies round to different 8-bit levels (through
 * near-tied attention scores): its served logits may leave the rounded pass by a whole tol_act for some prompts (seen:
 * q8_0 and Llama q4_k_m, 0.5–1.2, while every single product on the same activations agrees to 1e-4 relative). So
 * the tight served check (1) runs on a well-conditioned model, the trained run, and a random model's served logits
 * are held to 2·tol_act of the exact pass.
 * exact: the backend's exact products (AAH_CPU_QUANT_MATMUL=f32), so (2) with tol_act 0: the file alone. */
/* The engine's logits on gguf (exact: with the backend's exact products) against ref (the exact float64 pass) and act
 * (the pass with the served activation rounding), as the comment above says. */
static void compare_logits(const char *arch, const char *type, const char *gguf, const double *ref, const double *act,
                           bool exact, bool conditioned)
{
	if (exact)   /* the CPU backend's exact products (f32 activations, double sums) instead of the 8-bit ones */
		setenv("AAH_CPU_QUANT_MATMUL", "f32", 1);
	else
		unsetenv("AAH_CPU_QUANT_MATMUL");
	int32_t V;
	float *got = engine_logits(gguf, &V);
	const size_t n = (size_t)N_PROMPT * (size_t)V;
	double amax = 0, tol_act = 0, d_act = 0, d_ref = 0;
	for (size_t i = 0; i < n; i++) {
		amax = fmax(amax, fabs(ref[i]));
		tol_act = fmax(tol_act, fabs(ref[i] - act[i]));
		d_act = fmax(d_act, fabs(got[i] - act[i]));
		d_ref = fmax(d_ref, fabs(got[i] - ref[i]));
	}
	/* served on a random model: both it and the rounded pass sit within tol_act of the exact pass, and where a value
	 * lies on a rounding boundary they may round it apart, which such a model amplifies: 2·tol_act apart at most */
	const double tight = 1e-3 * (1 + amax), tol = exact ? tight : (conditioned ? 1 : 2) * tol_act + tight;
	int compared = 0;
	for (int32_t p = 0; p < N_PROMPT; p++) {
		const double *r = ref + (size_t)p * V;
		const float *g = got + (size_t)p * V;
		int32_t best = 0, second = -1, mine = 0;
		for (int32_t v = 1; v < V; v++) {
			if (g[v] > g[mine]) mine = v;
			if (r[v] > r[best]) second = best, best = v;
			else if (second < 0 || r[v] > r[second]) second = v;
		}
		if (r[best] - r[second] > 2 * tol) {
			compared++;
			ck_assert_msg(mine == best, "%s %s position %d: greedy %d, float64 %d (margin %.3f)", arch, type, p, mine,
			              best, r[best] - r[second]);
		}
	}
	if (getenv("AAH_TEST_VERBOSE"))
		fprintf(stderr, "%s %s%s: max|logit| %.3f; vs the rounded-activation float64 pass %.2e, vs the exact pass "
		        "%.2e (the activation rounding's own effect %.4f; tolerance %.4f); greedy checked at %d of %d\n", arch,
		        type, exact ? " (exact products)" : "", amax, d_act, d_ref, tol_act, tol, compared,
		        N_PROMPT);
	ck_assert_msg(exact || !conditioned || d_act <= tight, "%s %s: logits differ from the float64 forward with the same activation "
	              "rounding by %.3g (tolerance %.3g)", arch, type, d_act, tight);
	ck_assert_msg(d_ref <= tol, "%s %s%s: logits differ from the exact float64 forward by %.4f (tolerance %.4f)", arch,
	              type, exact ? " (exact products)" : "", d_ref, tol);
	free(got);
}

/* general.quantization_version, then general.file_type, come last: where llama-quantize sets them, so that it turns
 * the f32 file into the very bytes of the TYPE file (`make check-llamacpp`, tests/interop/llamacpp.sh). */
static void check_last_keys(const char *gguf, int64_t ftype)
{
	size_t len;
	void *buf = read_all(gguf, &len);
	gguf_file g;
	char err[256];
	ck_assert_msg(gguf_parse(&g, buf, len, err, sizeof err) == 0, "%s", err);
	ck_assert_int_ge(g.n_kv, 2);
	const gguf_str *a = &g.kv[g.n_kv - 2].key, *b = &g.kv[g.n_kv - 1].key;
	ck_assert_msg(a->len == 28 && !memcmp(a->s, "general.quantization_version", 28), "%s: second last key %.*s", gguf,
	              (int)a->len, a->s);
	ck_assert_msg(b->len == 17 && !memcmp(b->s, "general.file_type", 17), "%s: last key %.*s", gguf, (int)b->len, b->s);
	int64_t v;
	ck_assert_int_eq(gguf_get_int(&g, "general.file_type", &v, err, sizeof err), 1);
	ck_assert_int_eq(v, ftype);
	gguf_free(&g);
	free(buf);
}

static void check_type(const char *arch, const char *type, bool conditioned)
{
	char gguf[700], src[600], ids[512] = "";
	snprintf(gguf, sizeof gguf, "%s/m-%s.gguf", tmpdir, type);
	snprintf(src, sizeof src, "%s/src", tmpdir);
	quantize(type, gguf);
	static const struct { const char *type; int64_t ftype; } ftypes[] = {
		{ "q8_0", 7 }, { "q4_0", 2 }, { "q4_k_m", 15 }, { "q5_k_m", 17 }, { "bf16", 32 }, { "f16", 1 }, { "f32", 0 },
	};
	size_t fi = 0;
	while (fi < sizeof ftypes / sizeof ftypes[0] && strcmp(type, ftypes[fi].type))
		fi++;
	ck_assert_msg(fi < sizeof ftypes / sizeof ftypes[0], "%s: no file type known to the test", type);
	check_last_keys(gguf, ftypes[fi].ftype);
	for (int32_t i = 0; i < N_PROMPT; i++)
		snprintf(ids + strlen(ids), sizeof ids - strlen(ids), i ? ",%d" : "%d", (int)prompt[i]);
	const char *argv[] = { "/usr/bin/python3", "tests/gguf_ref.py", "all", gguf, src, ids, path_in("ref"), NULL };
	ck_assert_msg(tool_run(argv) == 0, "gguf_ref.py: %s", log_text);
	check_dequant_equal(gguf, path_in("ref.deq"));
	size_t len, len_act;
	double *ref = (double *)read_all(path_in("ref"), &len);
	double *act = (double *)read_all(path_in("ref.act"), &len_act);
	ck_assert_uint_eq(len, len_act);
	compare_logits(arch, type, gguf, ref, act, true, conditioned);    /* the file side alone */
	compare_logits(arch, type, gguf, ref, act, false, conditioned);   /* as served */
	free(ref);
	free(act);
}

/* The trained AAH run (runs/aah, imported: hidden 96, so the K types fall back to Q8_0; Q4_0 is 4-bit), a
 * well-conditioned model: there the served 8-bit products must match the rounded-activation pass tightly. */
START_TEST(test_quantize_trained)
{
	char bin[600], src[600];
	snprintf(bin, sizeof bin, "%s/aah-convert", build_dir());
	snprintf(src, sizeof src, "%s/src", tmpdir);
	const char *argv[] = { bin, "import", "-q", "runs/aah/checkpoint-10000.pt", src, NULL };
	ck_assert_msg(tool_run(argv) == 0, "import: %s", log_text);
	check_type("trained", _i ? "q4_0" : "q8_0", true);
}
END_TEST

static const char *const all_types[] = { "q8_0", "q4_0", "q4_k_m", "q5_k_m", "bf16", "f16", "f32" };

/* Every type on Qwen3 (random, hidden 256: every K type in use), two on Llama: first the file side alone — with the backend's exact products the engine on
 * the file equals the float64 forward of its dequantized weights (names, shapes, block layouts, the tied head,
 * Llama's row order) — then the products as served, 8-bit activations, against the pass that rounds them alike. */
START_TEST(test_quantize)
{
	make_model(_i < 7 ? "qwen3" : "llama", _i < 7 ? "1" : "0");
	check_type(_i < 7 ? "qwen3" : "llama", _i < 7 ? all_types[_i] : _i == 7 ? "q4_k_m" : "bf16", false);
}
END_TEST

/* A bf16 GGUF of a bf16 model holds the same numbers: the engine gives the same logits bit for bit (Qwen3 and Llama,
 * whose q/k rows the writer interleaves for llama.cpp and the loader puts back), and the mixes pick llama.cpp's types. */
START_TEST(test_bf16_equals_safetensors)
{
	const char *arch = _i ? "llama" : "qwen3";
	make_model(arch, _i ? "0" : "1");
	quantize("bf16", path_in("m.gguf"));
	int32_t V1, V2;
	float *a = engine_logits(path_in("src"), &V1), *b = engine_logits(path_in("m.gguf"), &V2);
	ck_assert_int_eq(V1, V2);
	ck_assert_msg(!memcmp(a, b, (size_t)N_PROMPT * (size_t)V1 * sizeof *a), "%s: logits differ", arch);
	free(a);
	free(b);
	model_files m;
	char err[512];
	quantize("q4_k_m", path_in("k.gguf"));
	ck_assert_msg(model_files_load(&m, path_in("k.gguf"), err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(m.config.n_layers, 3);
	ck_assert_int_eq(m.config.head_dim, 64);
	ck_assert_int_eq(m.config.tie_word_embeddings, !_i);
	/* 3 layers: use_more_bits picks layers 0 (< 3/8? no: 0 < 0 is false) … i ≥ 7·3/8 = 2, and (i − 0) % 3 == 2 */
	ck_assert_int_eq(m.w.layers[0].wv->dtype, ST_Q4_K);
	ck_assert_int_eq(m.w.layers[2].wv->dtype, ST_Q6_K);
	ck_assert_int_eq(m.w.layers[2].w_down->dtype, ST_Q6_K);
	ck_assert_int_eq(m.w.layers[1].w_down->dtype, ST_Q4_K);
	ck_assert_int_eq(m.w.layers[1].wq->dtype, ST_Q4_K);
	ck_assert_int_eq(m.w.lm_head->dtype, ST_Q6_K);
	ck_assert_int_eq(m.w.embed->dtype, _i ? ST_Q4_K : ST_Q6_K);   /* tied: the embedding is the head */
	ck_assert_int_eq(m.w.norm->dtype, ST_F32);
	ck_assert_ptr_null(m.chat_template);   /* the test tokenizer's tokenizer_config.json has none */
	model_files_free(&m);
}
END_TEST

/* Llama 3.1's rope scaling: quantize writes llama.cpp's rope_freqs tensor (first, f32, head_dim / 2 factors as its
 * converter computes them), the loader divides each frequency by its factor, and the GGUF's logits are the source
 * model's (llama3 rope_scaling in config.json) to float rounding, far from those of the same weights unscaled. A
 * factor that is not positive, or a tensor of the wrong length, is refused by name. */
START_TEST(test_llama31_rope_freqs)
{
	make_model("llama", "0");
	int32_t V0, V1, V2;
	float *plain = engine_logits(path_in("src"), &V0);
	char cmd[1600];
	snprintf(cmd, sizeof cmd, "cd %s/src && /usr/bin/python3 -c \"import json; c = json.load(open('config.json')); "
	         "c['rope_scaling'] = {'rope_type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0, "
	         "'high_freq_factor': 4.0, 'original_max_position_embeddings': 32}; "
	         "json.dump(c, open('config.json', 'w'))\"", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
	float *scaled = engine_logits(path_in("src"), &V1);
	quantize("bf16", path_in("m.gguf"));
	float *gg = engine_logits(path_in("m.gguf"), &V2);
	ck_assert_int_eq(V0, V1);
	ck_assert_int_eq(V1, V2);
	double worst = 0, moved = 0;
	for (int64_t i = 0; i < (int64_t)N_PROMPT * V1; i++) {
		worst = fmax(worst, fabs((double)gg[i] - scaled[i]));
		moved = fmax(moved, fabs((double)plain[i] - scaled[i]));
	}
	ck_assert_msg(worst < 1e-4, "GGUF with rope_freqs against its source: max |logit diff| %.3g", worst);
	ck_assert_msg(moved > 1e-2, "llama3 scaling changed the logits by only %.3g: the test shows nothing", moved);
	free(plain);
	free(scaled);
	free(gg);
	/* the tensor: convert_hf_to_gguf.py's formula, here in double from the config's numbers (theta 1e6, d 64) */
	size_t len;
	unsigned char *buf = read_all(path_in("m.gguf"), &len);
	gguf_file g;
	char err[512];
	ck_assert(gguf_parse(&g, buf, len, err, sizeof err) == 0);
	const gguf_tensor_info *t = gguf_find_tensor(&g, "rope_freqs.weight");
	ck_assert_msg(t, "no rope_freqs.weight");
	ck_assert_uint_eq(t->type, 0);
	ck_assert_uint_eq(t->n_dims, 1);
	ck_assert_int_eq(t->ne[0], 32);
	int kept = 0, blended = 0, divided = 0;
	for (int j = 0; j < 32; j++) {
		const double freq = pow(1e6, -2.0 * j / 64), wavelen = 2 * M_PI / freq;
		double want;
		if (wavelen < 32 / 4.0)
			want = 1, kept++;
		else if (wavelen > 32 / 1.0)
			want = 8, divided++;
		else {
			const double smooth = (32 / wavelen - 1) / (4 - 1);
			want = 1 / ((1 - smooth) / 8 + smooth), blended++;
		}
		float got;
		memcpy(&got, (const char *)t->data + 4 * j, 4);
		ck_assert_msg(fabs(got / want - 1) < 1e-6, "rope_freqs[%d] = %.9g, want %.9g", j, (double)got, want);
	}
	ck_assert(kept && blended && divided);   /* every branch of the formula taken */
	/* refusals: a factor of zero, then one value short (the tensor's declared length) */
	unsigned char *first = (unsigned char *)t->data;
	const size_t at = info_at(buf, len, "rope_freqs.weight");
	gguf_free(&g);
	model_files m;
	memset(first + 4 * 5, 0, 4);
	FILE *f = fopen(path_in("bad.gguf"), "wb");
	fwrite(buf, 1, len, f);
	fclose(f);
	ck_assert_int_eq(model_files_load(&m, path_in("bad.gguf"), err, sizeof err), -1);
	ck_assert_msg(strstr(err, "rope_freqs.weight") && strstr(err, "value 5"), "%s", err);
	buf[at + 8 + 17 + 4] = 31;   /* ne[0]: 32 → 31 */
	f = fopen(path_in("bad.gguf"), "wb");
	fwrite(buf, 1, len, f);
	fclose(f);
	ck_assert_int_eq(model_files_load(&m, path_in("bad.gguf"), err, sizeof err), -1);
	ck_assert_msg(strstr(err, "rope_freqs.weight") && strstr(err, "head_dim / 2"), "%s", err);
	free(buf);
}
END_TEST

/* tmpdir/src/config.json's rope_scaling set to the Python literal rs. */
static void set_rope_scaling(const char *rs)
{
	char cmd[1600];
	snprintf(cmd, sizeof cmd, "cd %s/src && /usr/bin/python3 -c \"import json; c = json.load(open('config.json')); "
	         "c['rope_scaling'] = %s; json.dump(c, open('config.json', 'w'))\"", tmpdir, rs);
	ck_assert_int_eq(system(cmd), 0);
}

static double max_diff(const float *a, const float *b, size_t n)
{
	double worst = 0;
	for (size_t i = 0; i < n; i++)
		worst = fmax(worst, fabs((double)a[i] - b[i]));
	return worst;
}

/* YaRN (Qwen3's long-context recipe): a config.json's rope_scaling (Hugging Face's semantics) and the GGUF written
 * from it (llama.cpp's keys) give the same logits, the GGUF's against gguf_ref.py's float64 forward, which computes
 * YaRN as ggml's rope does from those keys alone; with a given attention factor and betas too. */
START_TEST(test_yarn)
{
	make_model("qwen3", "0");
	int32_t V0, V1, V2;
	float *plain = engine_logits(path_in("src"), &V0);
	/* original context 32 at θ 1e6, d 64: the ramp runs over dimensions 0 … 4, so every branch is taken */
	set_rope_scaling("{'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 32}");
	float *scaled = engine_logits(path_in("src"), &V1);
	ck_assert_int_eq(V0, V1);
	const size_t n = (size_t)N_PROMPT * (size_t)V1;
	const double moved = max_diff(plain, scaled, n);
	ck_assert_msg(moved > 1e-2, "yarn changed the logits by only %.3g: the test shows nothing", moved);
	check_type("qwen3", "bf16", false);
	float *gg = engine_logits(path_in("m-bf16.gguf"), &V2);
	ck_assert_int_eq(V1, V2);
	double worst = max_diff(gg, scaled, n);
	ck_assert_msg(worst < 1e-4, "yarn GGUF against its source: max |logit diff| %.3g", worst);
	size_t len;
	unsigned char *buf = read_all(path_in("m-bf16.gguf"), &len);
	gguf_file g;
	char err[512];
	ck_assert(gguf_parse(&g, buf, len, err, sizeof err) == 0);
	gguf_str st;
	double f;
	int64_t orig;
	ck_assert_int_eq(gguf_get_str(&g, "qwen3.rope.scaling.type", &st, err, sizeof err), 1);
	ck_assert(st.len == 4 && !memcmp(st.s, "yarn", 4));
	ck_assert_int_eq(gguf_get_float(&g, "qwen3.rope.scaling.factor", &f, err, sizeof err), 1);
	ck_assert_double_eq(f, 4.0);
	ck_assert_int_eq(gguf_get_int(&g, "qwen3.rope.scaling.original_context_length", &orig, err, sizeof err), 1);
	ck_assert_int_eq(orig, 32);
	ck_assert_int_eq(gguf_get_float(&g, "qwen3.rope.scaling.yarn_attn_factor", &f, err, sizeof err), 0);
	ck_assert_int_eq(gguf_get_float(&g, "qwen3.rope.scaling.yarn_beta_fast", &f, err, sizeof err), 0);
	gguf_free(&g);
	/* a type it cannot run is named */
	unsigned char *ty = memmem(buf, len, "yarn", 4);
	ck_assert_ptr_nonnull(ty);
	ty[3] = 'm';
	FILE *fp = fopen(path_in("bad.gguf"), "wb");
	fwrite(buf, 1, len, fp);
	fclose(fp);
	model_files m;
	ck_assert_int_eq(model_files_load(&m, path_in("bad.gguf"), err, sizeof err), -1);
	ck_assert_msg(strstr(err, "yarm") && strstr(err, "rope.scaling.type"), "%s", err);
	free(buf);
	free(gg);
	free(scaled);

	/* an attention factor and betas of its own: written as llama.cpp's yarn_attn_factor (over the default one) and
	 * yarn_beta_fast / slow, read back to the same logits and to the reference's */
	set_rope_scaling("{'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 32, "
	                 "'attention_factor': 1.5, 'beta_fast': 8, 'beta_slow': 2}");
	scaled = engine_logits(path_in("src"), &V1);
	ck_assert_msg(max_diff(plain, scaled, n) > 1e-2, "the second yarn config changed nothing");
	check_type("qwen3", "bf16", false);
	gg = engine_logits(path_in("m-bf16.gguf"), &V2);
	worst = max_diff(gg, scaled, n);
	ck_assert_msg(worst < 1e-4, "yarn GGUF (attention factor, betas) against its source: max |logit diff| %.3g", worst);
	buf = read_all(path_in("m-bf16.gguf"), &len);
	ck_assert(gguf_parse(&g, buf, len, err, sizeof err) == 0);
	ck_assert_int_eq(gguf_get_float(&g, "qwen3.rope.scaling.yarn_attn_factor", &f, err, sizeof err), 1);
	ck_assert_double_eq_tol(f, 1.5 / (0.1 * log(4.0) + 1), 1e-6);
	ck_assert_int_eq(gguf_get_float(&g, "qwen3.rope.scaling.yarn_beta_fast", &f, err, sizeof err), 1);
	ck_assert_double_eq(f, 8.0);
	ck_assert_int_eq(gguf_get_float(&g, "qwen3.rope.scaling.yarn_beta_slow", &f, err, sizeof err), 1);
	ck_assert_double_eq(f, 2.0);
	gguf_free(&g);
	free(buf);
	free(gg);
	free(scaled);
	free(plain);

	/* what has no GGUF form is refused by name: truncate false */
	set_rope_scaling("{'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 32, 'truncate': False}");
	char bin[600];
	snprintf(bin, sizeof bin, "%s/aah-convert", build_dir());
	const char *q[] = { bin, "quantize", path_in("src"), path_in("t.gguf"), "--type", "bf16", NULL };
	ck_assert_int_ne(tool_run(q), 0);
	ck_assert_msg(strstr(log_text, "truncate"), "%s", log_text);
}
END_TEST

/* A metadata-only Qwen3 GGUF's writer: the architecture keys, rope.freq_base base and
 * attention.layer_norm_rms_epsilon eps, over an embedding of 10 rows written by meta_config. */
static gguf_writer *meta_writer(float base, float eps)
{
	gguf_writer *w = gguf_writer_init();
	ck_assert_ptr_nonnull(w);
	ck_assert(!gguf_writer_str(w, "general.architecture", "qwen3", 5) && !gguf_writer_u32(w, "qwen3.block_count", 1) &&
	          !gguf_writer_u32(w, "qwen3.embedding_length", 8) && !gguf_writer_u32(w, "qwen3.feed_forward_length", 16) &&
	          !gguf_writer_u32(w, "qwen3.attention.head_count", 2) && !gguf_writer_u32(w, "qwen3.attention.key_length", 4) &&
	          !gguf_writer_u32(w, "qwen3.context_length", 64) && !gguf_writer_f32(w, "qwen3.rope.freq_base", base) &&
	          !gguf_writer_f32(w, "qwen3.attention.layer_norm_rms_epsilon", eps));
	return w;
}

/* Writes w's file (freeing w) and reads its model config through gguf_model_config: 0 and c, or -1 and err. */
static int meta_config(gguf_writer *w, const char *name, model_config *c, char *err, size_t err_len)
{
	ck_assert(!gguf_writer_tensor(w, "token_embd.weight", 2, (int64_t[]){ 8, 10 }, GGML_TYPE_F32));
	char werr[256];
	ck_assert_msg(!gguf_writer_write(w, path_in(name), fill_pattern, NULL, werr, sizeof werr), "%s", werr);
	gguf_writer_free(w);
	size_t len;
	unsigned char *buf = read_all(path_in(name), &len);
	gguf_file g;
	ck_assert(gguf_parse(&g, buf, len, werr, sizeof werr) == 0);
	const int rc = gguf_model_config(c, &g, name, err, err_len);
	gguf_free(&g);
	free(buf);
	return rc;
}

/* The model config of a metadata-only Qwen3 GGUF with YaRN keys and one more float key (extra, NULL for none; it may
 * be yarn_beta_fast, 16 otherwise): 0 and c, or -1 and err. */
static int yarn_meta(const char *extra, float value, model_config *c, char *err, size_t err_len)
{
	gguf_writer *w = meta_writer(1e6f, 1e-6f);
	ck_assert(!gguf_writer_str(w, "qwen3.rope.scaling.type", "yarn", 4) &&
	          !gguf_writer_f32(w, "qwen3.rope.scaling.factor", 4.0f) &&
	          !gguf_writer_u32(w, "qwen3.rope.scaling.original_context_length", 32) &&
	          !gguf_writer_f32(w, "qwen3.rope.scaling.yarn_beta_slow", 2.0f));
	const char *fast = "qwen3.rope.scaling.yarn_beta_fast";   /* 16 unless extra is this key */
	ck_assert(!gguf_writer_f32(w, extra ? extra : fast, extra ? value : 16.0f));
	if (extra && strcmp(extra, fast))
		ck_assert(!gguf_writer_f32(w, fast, 16.0f));
	return meta_config(w, "y.gguf", c, err, err_len);
}

/* llama.cpp's YaRN keys as the loader reads them: the betas, yarn_attn_factor times the default attention factor, the
 * neutral values of the keys it cannot run accepted, any other value refused by the key's name. */
START_TEST(test_yarn_gguf_keys)
{
	model_config c;
	char err[512];
	ck_assert_msg(yarn_meta(NULL, 0, &c, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(c.rope_scaling, MODEL_ROPE_YARN);
	ck_assert_int_eq(c.rope_original_max_pos, 32);
	ck_assert_double_eq(c.rope_beta_fast, 16.0);
	ck_assert_double_eq(c.rope_beta_slow, 2.0);
	ck_assert_double_eq_tol(c.rope_attn_factor, 0.1 * log(4.0) + 1, 1e-6);
	ck_assert_msg(yarn_meta("qwen3.rope.scaling.yarn_attn_factor", 1.25f, &c, err, sizeof err) == 0, "%s", err);
	ck_assert_double_eq_tol(c.rope_attn_factor, 1.25 * (0.1 * log(4.0) + 1), 1e-6);
	static const struct { const char *key; float neutral, other; } keys[] = {
		{ "qwen3.rope.scaling.yarn_ext_factor", 1.0f, 0.5f },
		{ "qwen3.rope.scaling.yarn_log_multiplier", 0.0f, 0.1f },
		{ "qwen3.rope.scaling.attn_factor", 1.0f, 2.0f },
		{ "qwen3.rope.scaling.yarn_attn_factor", 1.0f, -1.0f },
	};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		ck_assert_msg(yarn_meta(keys[i].key, keys[i].neutral, &c, err, sizeof err) == 0, "%s: %s", keys[i].key, err);
		ck_assert_int_eq(yarn_meta(keys[i].key, keys[i].other, &c, err, sizeof err), -1);
		ck_assert_msg(strstr(err, keys[i].key), "%s", err);
	}
	/* betas that cannot be a ramp: the config's own check, on the GGUF's values */
	ck_assert_int_eq(yarn_meta("qwen3.rope.scaling.yarn_beta_fast", 1.0f, &c, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "beta_fast") && strstr(err, "y.gguf"), "%s", err);
}
END_TEST

/* The model config of a metadata-only Qwen3 GGUF whose rope.freq_base and layer_norm_rms_epsilon are given, and
 * whose eos_token_id is eos (-1: absent), over an embedding of 10 rows: 0 and c, or -1 and err. */
static int plain_meta(float base, float eps, int32_t eos, model_config *c, char *err, size_t err_len)
{
	gguf_writer *w = meta_writer(base, eps);
	if (eos >= 0)
		ck_assert(!gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos));
	return meta_config(w, "p.gguf", c, err, err_len);
}

/* Lying values are refused at load, naming the key: a NaN or infinite float (it used to vanish from the config and
 * leave the default in its place), a rope base or epsilon out of range, an end token past the embedding; and a
 * tokenizer with more tokens than the embedding has rows, or its end token past them. */
START_TEST(test_lying_values)
{
	model_config c;
	char err[512];
	ck_assert_msg(plain_meta(1e6f, 1e-6f, 9, &c, err, sizeof err) == 0, "%s", err);
	ck_assert_double_eq(c.rope_theta, 1e6f);
	ck_assert_int_eq(c.eos_token_id, 9);
	static const struct { float base, eps; const char *key; } bad[] = {
		{ NAN, 1e-6f, "qwen3.rope.freq_base" }, { 1e6f, NAN, "qwen3.attention.layer_norm_rms_epsilon" },
		{ INFINITY, 1e-6f, "qwen3.rope.freq_base" }, { 1e6f, -INFINITY, "layer_norm_rms_epsilon" },
		{ 0.5f, 1e-6f, "rope_theta" }, { 1e6f, 2.0f, "rms_norm_eps" }, { 0.0f, 1e-6f, "rope_theta" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		ck_assert_int_eq(plain_meta(bad[i].base, bad[i].eps, -1, &c, err, sizeof err), -1);
		ck_assert_msg(strstr(err, bad[i].key), "case %zu: %s", i, err);
	}
	ck_assert_int_eq(plain_meta(1e6f, 1e-6f, 10, &c, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "eos_token_id") && strstr(err, "10"), "%s", err);

	/* the test tokenizer (2051 tokens with its specials) against embeddings of fewer and more rows */
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", testdata());
	tokenizer *t = tokenizer_load(dir, err, sizeof err);
	ck_assert_msg(t, "%s", err);
	const int32_t n = tokenizer_vocab_size(t);
	model_config m = { .vocab_size = n + 5 };
	ck_assert_msg(model_config_check_tokenizer(&m, t, err, sizeof err) == 0, "%s", err);   /* a padded embedding */
	m.vocab_size = n - 1;
	ck_assert_int_eq(model_config_check_tokenizer(&m, t, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "tokenizer has") && strstr(err, "rows"), "%s", err);
	if (tokenizer_eos(t) > 0) {
		m.vocab_size = tokenizer_eos(t);   /* more rows than most tokens would need, but not the end token's */
		if (n <= m.vocab_size) {
			ck_assert_int_eq(model_config_check_tokenizer(&m, t, err, sizeof err), -1);
			ck_assert_msg(strstr(err, "end token"), "%s", err);
		}
	}
	tokenizer_free(t);
}
END_TEST

/* ---- the command line and the loader's refusals ---- */

START_TEST(test_cli)
{
	char bin[600];
	snprintf(bin, sizeof bin, "%s/aah-convert", build_dir());
	const char *help[] = { bin, "quantize", "--help", NULL };
	ck_assert_int_eq(tool_run(help), 0);
	ck_assert_ptr_nonnull(strstr(log_text, "q4_k_m"));
	make_model("qwen3", "1");
	const char *bad_type[] = { bin, "quantize", path_in("src"), path_in("o.gguf"), "--type", "q3_k", NULL };
	ck_assert_int_eq(tool_run(bad_type), 2);
	ck_assert_ptr_nonnull(strstr(log_text, "q3_k"));
	const char *no_type[] = { bin, "quantize", path_in("src"), path_in("o.gguf"), NULL };
	ck_assert_int_eq(tool_run(no_type), 2);
	const char *missing[] = { bin, "quantize", path_in("nothing"), path_in("o.gguf"), "--type", "q8_0", NULL };
	ck_assert_int_eq(tool_run(missing), 1);
	const char *bad_out[] = { bin, "quantize", path_in("src"), path_in("no/such/dir/o.gguf"), "--type", "q8_0", NULL };
	ck_assert_int_eq(tool_run(bad_out), 1);
	quantize("q8_0", path_in("o.gguf"));
	const char *again[] = { bin, "quantize", path_in("o.gguf"), path_in("p.gguf"), "--type", "q8_0", NULL };
	ck_assert_int_eq(tool_run(again), 1);
	ck_assert_ptr_nonnull(strstr(log_text, "GGUF"));
	/* nothing but the outputs was left behind (no .partial files) */
	char cmd[800];
	snprintf(cmd, sizeof cmd, "ls %s | grep -c partial > %s/n; true", tmpdir, tmpdir);
	ck_assert_int_eq(system(cmd), 0);
	size_t len;
	unsigned char *n = read_all(path_in("n"), &len);
	ck_assert_str_eq((char *)n, "0\n");
	free(n);
}
END_TEST

START_TEST(test_loader_refusals)
{
	make_model("qwen3", "1");
	quantize("q8_0", path_in("m.gguf"));
	char err[512];
	model_files m;
	/* a directory holding it and no config.json loads it; aah.json beside it is what the engine reads */
	ck_assert_int_eq(system("true"), 0);
	char cmd[1600];
	snprintf(cmd, sizeof cmd, "mkdir %s/d && cp %s/m.gguf %s/d/ && cp %s/m.gguf %s/d2.gguf", tmpdir, tmpdir, tmpdir,
	         tmpdir, tmpdir);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_msg(model_files_load(&m, path_in("d"), err, sizeof err) == 0, "%s", err);
	ck_assert_ptr_nonnull(strstr(m.dir, "/d"));
	model_files_free(&m);
	snprintf(cmd, sizeof cmd, "cp %s/m.gguf %s/d/other.gguf", tmpdir, tmpdir);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(model_files_load(&m, path_in("d"), err, sizeof err), -1);
	ck_assert_ptr_nonnull(strstr(err, "several .gguf"));
	/* a file without one tensor names it in llama.cpp's words; a truncated file names the tensor cut off */
	size_t len;
	unsigned char *buf = read_all(path_in("m.gguf"), &len);
	gguf_file g;
	ck_assert(gguf_parse(&g, buf, len, err, sizeof err) == 0);
	const gguf_tensor_info *last = &g.tensors[g.n_tensors - 1];
	char last_name[128];
	snprintf(last_name, sizeof last_name, "%.*s", (int)last->name.len, last->name.s);
	size_t cut = (size_t)((const unsigned char *)last->data - buf) + 10;
	gguf_free(&g);
	FILE *f = fopen(path_in("cut.gguf"), "wb");
	fwrite(buf, 1, cut, f);
	fclose(f);
	ck_assert_int_eq(model_files_load(&m, path_in("cut.gguf"), err, sizeof err), -1);
	ck_assert_msg(strstr(err, last_name) && strstr(err, "cut.gguf"), "%s", err);
	size_t at = info_at(buf, len, "blk.1.attn_q.weight");
	buf[at + 8 + 4] = 'X';   /* "blk.1.attn_q.weight" → "blk.X…": unknown */
	f = fopen(path_in("bad.gguf"), "wb");
	fwrite(buf, 1, len, f);
	fclose(f);
	ck_assert_int_eq(model_files_load(&m, path_in("bad.gguf"), err, sizeof err), -1);
	ck_assert_msg(strstr(err, "blk.X.attn_q.weight"), "%s", err);
	buf[at + 8 + 4] = '1';
	memcpy(buf + at + 8 + 6, "attn_z", 6);   /* a name we do not know */
	f = fopen(path_in("bad.gguf"), "wb");
	fwrite(buf, 1, len, f);
	fclose(f);
	ck_assert_int_eq(model_files_load(&m, path_in("bad.gguf"), err, sizeof err), -1);
	ck_assert_msg(strstr(err, "attn_z"), "%s", err);
	free(buf);
}
END_TEST

/* aah-convert calibrate on a GGUF writes aah.json beside the file, and the engine serving the file finds it there. */
START_TEST(test_calibrate)
{
	make_model("qwen3", "1");
	quantize("q4_k_m", path_in("m.gguf"));
	char bin[600];
	snprintf(bin, sizeof bin, "%s/aah-convert", build_dir());
	const char *argv[] = { bin, "calibrate", path_in("m.gguf"), "--tokens", "128", "--context", "64",
	                       "--eval-tokens", "64", NULL };
	ck_assert_msg(tool_run(argv) == 0, "calibrate: %s", log_text);
	struct stat st;
	ck_assert_int_eq(stat(path_in("aah.json"), &st), 0);
	engine *e;
	char err[512];
	engine_params p = { .n_threads = 2, .max_seqs = 1, .ctx_len = 64 };
	ck_assert_msg(engine_init(&e, path_in("m.gguf"), &p, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(engine_regime_count(e), 5);   /* full_attention and the four calibrated regimes */
	engine_free(e);
}
END_TEST

/* ---- the tokenizer ---- */

/* The GGUF of a tokenizer directory: a tiny model on it, quantized (the tokenizer is the same whatever the type). */
static void tokenizer_gguf(const char *tok_dir, const char *out)
{
	char bin[600], src[600];
	snprintf(bin, sizeof bin, "%s/aah-mkmodel", build_dir());
	snprintf(src, sizeof src, "%s/tsrc", tmpdir);
	const char *mk[] = { bin, "--out", src, "--preset", "tiny", "--tokenizer", tok_dir, "--dtype", "bf16", NULL };
	ck_assert_msg(tool_run(mk) == 0, "aah-mkmodel: %s", log_text);
	snprintf(bin, sizeof bin, "%s/aah-convert", build_dir());
	const char *q[] = { bin, "quantize", "-q", src, out, "--type", "q8_0", NULL };
	ck_assert_msg(tool_run(q) == 0, "aah-convert: %s", log_text);
}

static int64_t encode(const tokenizer *t, const char *s, size_t n, bool add, int32_t *ids, int64_t cap)
{
	char err[256];
	return tokenizer_encode(t, s, n, add, ids, cap, err, sizeof err);
}

/* Both tokenizers give the same ids, the same decoded text and the same errors on s. */
static void same_ids(const tokenizer *a, const tokenizer *b, const char *s, size_t n)
{
	static int32_t ia[1 << 16], ib[1 << 16];
	for (int add = 0; add < 2; add++) {
		int64_t na = encode(a, s, n, add, ia, 1 << 16), nb = encode(b, s, n, add, ib, 1 << 16);
		ck_assert_msg(na == nb, "'%.40s': %lld ids from the directory, %lld from the GGUF", s, (long long)na,
		              (long long)nb);
		if (na > 0) {
			ck_assert_msg(!memcmp(ia, ib, (size_t)na * sizeof *ia), "'%.40s': the ids differ", s);
			static char da[1 << 18], db[1 << 18];
			for (int skip = 0; skip < 2; skip++) {
				int64_t la = tokenizer_decode(a, ia, na, skip, da, sizeof da);
				int64_t lb = tokenizer_decode(b, ib, nb, skip, db, sizeof db);
				ck_assert_msg(la == lb && !memcmp(da, db, (size_t)la), "'%.40s': decoded text differs", s);
			}
		}
	}
}

START_TEST(test_tokenizer_qwen3)
{
	char dir[600];
	snprintf(dir, sizeof dir, "%s/qwen3-tokenizer", cache_dir());
	char err[512];
	tokenizer *js = tokenizer_load(dir, err, sizeof err);
	ck_assert_msg(js, "the Qwen3 tokenizer is not in the cache (%s); run `sh tools/fetch_tokenizer.sh %s`", err,
	              cache_dir());
	tokenizer_gguf(dir, path_in("tok.gguf"));
	tokenizer *gg = tokenizer_load(path_in("tok.gguf"), err, sizeof err);
	ck_assert_msg(gg, "%s", err);
	ck_assert_int_eq(tokenizer_vocab_size(js), tokenizer_vocab_size(gg));
	ck_assert_int_eq(tokenizer_bos(js), tokenizer_bos(gg));
	ck_assert_int_eq(tokenizer_eos(js), tokenizer_eos(gg));
	ck_assert_int_eq(tokenizer_add_bos(js), tokenizer_add_bos(gg));
	/* the same specials, but for the added tokens that only look special: tokenizer.json has <|fim_prefix|>,
	 * <|fim_middle|>, <|fim_suffix|>, <|fim_pad|>, <|repo_name|> and <|file_sep|> non-special, and the GGUF marks them
	 * CONTROL, as llama.cpp's converter does (its loader warns of each otherwise) */
	int looks_special = 0;
	for (int32_t i = 0; i < tokenizer_vocab_size(js); i++) {
		const char *text = tokenizer_token_text(js, i);
		ck_assert_str_eq(text, tokenizer_token_text(gg, i));
		if (tokenizer_is_special(js, i) == tokenizer_is_special(gg, i))
			continue;
		size_t n = strlen(text);
		ck_assert_msg(tokenizer_is_special(gg, i) && n > 4 && !memcmp(text, "<|", 2) && !strcmp(text + n - 2, "|>"),
		              "token %d '%s': special %d in tokenizer.json, %d in the GGUF", (int)i, text,
		              tokenizer_is_special(js, i), tokenizer_is_special(gg, i));
		looks_special++;
	}
	ck_assert_int_eq(looks_special, 6);
	/* every string of check_tokenizer: the reference items (and their Hugging Face ids) … */
	char ref[600];
	snprintf(ref, sizeof ref, "%s/qwen3-tokenizer.ref.json", testdata());
	json_error_t je;
	json_t *root = json_load_file(ref, 0, &je);
	ck_assert_msg(root, "%s: %s", ref, je.text);
	size_t i;
	json_t *item;
	json_array_foreach(json_object_get(root, "items"), i, item) {
		const char *text = json_string_value(json_object_get(item, "text"));
		size_t n = json_string_length(json_object_get(item, "text"));
		same_ids(js, gg, text, n);
		json_t *want = json_object_get(item, "ids");
		static int32_t got[1 << 16];
		int64_t k = encode(gg, text, n, false, got, 1 << 16);
		ck_assert_int_eq(k, (int64_t)json_array_size(want));
		for (int64_t j = 0; j < k; j++) ck_assert_int_eq(got[j], json_integer_value(json_array_get(want, (size_t)j)));
	}
	json_decref(root);
	/* … the special-token, unit and invalid-UTF-8 strings it builds */
	static const char *const more[] = { "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "<|im_", "'ll",
	                                    " ", "a", "\xe4\xb8\xad", "7", "\n", "\r\n", "!", "\xf0\x9f\x98\x80", "\t ",
	                                    "\xff", "abc\xc0\x80", "\xed\xa0\x80", "\xe4\xbd", "x\xf4\x90\x80\x80",
	                                    "<|im_start|>user\nHi <think>x</think><|im_end|>\n", "  12345 6789\t\n\n  x",
	                                    "Ünïcödé ﬁ Å Å 한국어 日本語 😀 I'M DON'T 'S" };
	for (size_t m = 0; m < sizeof more / sizeof more[0]; m++) same_ids(js, gg, more[m], strlen(more[m]));
	tokenizer_free(js);
	tokenizer_free(gg);
}
END_TEST

START_TEST(test_tokenizer_refusals)
{
	char dir[600];
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", testdata());
	tokenizer_gguf(dir, path_in("tok.gguf"));
	char err[512];
	tokenizer *a = tokenizer_load(dir, err, sizeof err), *b = tokenizer_load(path_in("tok.gguf"), err, sizeof err);
	ck_assert_msg(a && b, "%s", err);
	same_ids(a, b, "Hello world, this is a test of 12345 things.\n<|im_start|>", 57);
	tokenizer_free(a);
	tokenizer_free(b);
	size_t len;
	unsigned char *buf = read_all(path_in("tok.gguf"), &len);
	/* the pre-tokenizer name and the model name are checked */
	unsigned char *p = memmem(buf, len, "qwen2", 5);
	ck_assert_ptr_nonnull(p);
	memcpy(p, "qwen9", 5);
	ck_assert_ptr_null(tokenizer_from_gguf(buf, len, err, sizeof err));
	ck_assert_msg(strstr(err, "qwen9"), "%s", err);
	memcpy(p, "qwen2", 5);
	p = memmem(buf, len, "gpt2", 4);
	memcpy(p, "t5xx", 4);
	ck_assert_ptr_null(tokenizer_from_gguf(buf, len, err, sizeof err));
	ck_assert_msg(strstr(err, "t5xx"), "%s", err);
	free(buf);
}
END_TEST

/* The SentencePiece tokenizer of dir (its tokenizer.model) travels inside a GGUF and gives the same ids, embedded and
 * rebuilt from the pieces as llama.cpp's converter writes a 'llama' tokenizer (pieces, scores, types, no model);
 * returns the GGUF's bytes (*len) for the caller to take apart. */
static unsigned char *spm_roundtrip(const char *dir, size_t *len)
{
	tokenizer_gguf(dir, path_in("tok.gguf"));
	char err[512];
	tokenizer *a = tokenizer_load(dir, err, sizeof err);
	ck_assert_msg(a, "%s", err);
	tokenizer *b = tokenizer_load(path_in("tok.gguf"), err, sizeof err);
	ck_assert_msg(b, "%s", err);
	ck_assert_int_eq(tokenizer_bos(a), tokenizer_bos(b));
	ck_assert_int_eq(tokenizer_eos(a), tokenizer_eos(b));
	ck_assert_int_eq(tokenizer_add_bos(a), tokenizer_add_bos(b));
	static const char *const texts[] = { "Once upon a time there was a little girl named Lily.", "  two  spaces\n\nand",
	                                     "<s>control</s> pieces", "Ünïcödé 日本語 😀", "", "a", "\xff" };
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) same_ids(a, b, texts[i], strlen(texts[i]));
	tokenizer_free(b);
	unsigned char *buf = read_all(path_in("tok.gguf"), len);
	unsigned char *k = memmem(buf, *len, GGUF_SPM_MODEL_KEY, strlen(GGUF_SPM_MODEL_KEY));
	ck_assert_ptr_nonnull(k);
	k[0] = 'b';
	tokenizer *c = tokenizer_from_gguf(buf, *len, err, sizeof err);
	ck_assert_msg(c, "%s", err);
	ck_assert_int_eq(tokenizer_bos(a), tokenizer_bos(c));
	ck_assert_int_eq(tokenizer_eos(a), tokenizer_eos(c));
	ck_assert_int_eq(tokenizer_add_bos(a), tokenizer_add_bos(c));
	static const char *const more[] = { " leading space", "trailing space ", "tabs\tand\r\nreturns", "<0x41> <unk>",
	                                    "\xe2\x96\x81 the escape itself", "ABCDEFG xyz 0123456789 !?.,;:",
	                                    "   ", "\n", "x\xe2\x96\x81\xe2\x96\x81y" };
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) same_ids(a, c, texts[i], strlen(texts[i]));
	for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) same_ids(a, c, more[i], strlen(more[i]));
	tokenizer_free(c);
	tokenizer_free(a);
	return buf;
}

/* The trained run's tokenizer.model (no dummy prefix). */
START_TEST(test_tokenizer_spm)
{
	size_t len;
	unsigned char *buf = spm_roundtrip("runs/aah", &len);
	char err[512];
	/* and what it needs is checked: the scores' type, one unknown token */
	unsigned char *sk = memmem(buf, len, "tokenizer.ggml.scores", 21);
	ck_assert_ptr_nonnull(sk);
	unsigned char *at = sk + 21;   /* the value type (u32 ARRAY = 9), then the element type (u32 FLOAT32 = 6) */
	ck_assert_int_eq(at[0], 9);
	ck_assert_int_eq(at[4], 6);
	at[4] = 5;   /* INT32: same width, wrong type */
	ck_assert_ptr_null(tokenizer_from_gguf(buf, len, err, sizeof err));
	ck_assert_msg(strstr(err, "tokenizer.ggml.scores"), "%s", err);
	at[4] = 6;
	unsigned char *tk = memmem(buf, len, "tokenizer.ggml.token_type", 25);
	ck_assert_ptr_nonnull(tk);
	ck_assert_int_eq(tk[25], 9);
	unsigned char *ty = tk + 25 + 4 + 4 + 8;   /* the first token's type (<unk>: 2), int32 */
	ck_assert_int_eq(ty[0], 2);
	ty[0] = 1;
	ck_assert_ptr_null(tokenizer_from_gguf(buf, len, err, sizeof err));
	ck_assert_msg(strstr(err, "unknown type"), "%s", err);
	free(buf);
}
END_TEST

/* A tokenizer.model made as Llama 2's was (tests/data/spm-llama2/README.md: BPE, byte fallback, digits split, the
 * dummy "▁" prefix, every space kept): the rebuilt model adds the prefix as tokenizer.ggml.add_space_prefix says. */
START_TEST(test_tokenizer_spm_llama2)
{
	char dir[600];
	snprintf(dir, sizeof dir, "%s/spm-llama2", testdata());
	size_t len;
	unsigned char *buf = spm_roundtrip(dir, &len);
	unsigned char *k = memmem(buf, len, "tokenizer.ggml.add_space_prefix", 31);
	ck_assert_ptr_nonnull(k);
	ck_assert_int_eq(k[31], 7);   /* BOOL */
	ck_assert_int_eq(k[35], 1);   /* true, from the model's normalizer */
	/* the prefix is a space put in front: with the key false, " " + s gives the ids s gave with it */
	char err[512];
	tokenizer *t = tokenizer_from_gguf(buf, len, err, sizeof err);
	ck_assert_msg(t, "%s", err);
	k[35] = 0;
	tokenizer *u = tokenizer_from_gguf(buf, len, err, sizeof err);
	ck_assert_msg(u, "%s", err);
	static const char *const texts[] = { "a", "Once upon a time", "  two", "0123 45", "\n x" };
	static int32_t i1[256], i2[256];
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		char sp[64];
		snprintf(sp, sizeof sp, " %s", texts[i]);
		const int64_t n1 = encode(t, texts[i], strlen(texts[i]), false, i1, 256);
		const int64_t n2 = encode(u, sp, strlen(sp), false, i2, 256);
		ck_assert_msg(n1 > 0 && n1 == n2 && !memcmp(i1, i2, (size_t)n1 * sizeof *i1), "'%s'", texts[i]);
	}
	ck_assert_int_eq(encode(t, "a", 1, false, i1, 256), 1);
	ck_assert_int_eq(encode(u, "a", 1, false, i2, 256), 1);
	ck_assert_int_ne(i1[0], i2[0]);   /* "▁a" against "a" */
	tokenizer_free(u);
	tokenizer_free(t);
	free(buf);
}
END_TEST

static Suite *gguf_suite(void)
{
	Suite *s = suite_create("gguf");
	TCase *t = tcase_create("reader");
	tcase_add_checked_fixture(t, tmp_setup, tmp_teardown);
	tcase_add_test(t, test_reader_valid);
	tcase_add_test(t, test_reader_truncated);
	tcase_add_test(t, test_reader_hostile);
	tcase_add_test(t, test_quant_ref_bounds);
	suite_add_tcase(s, t);
	t = tcase_create("quantize");
	tcase_add_checked_fixture(t, tmp_setup, tmp_teardown);
	tcase_set_timeout(t, 300);
	tcase_add_loop_test(t, test_quantize, 0, 9);
	tcase_add_loop_test(t, test_quantize_trained, 0, 2);
	tcase_add_loop_test(t, test_bf16_equals_safetensors, 0, 2);
	tcase_add_test(t, test_llama31_rope_freqs);
	tcase_add_test(t, test_yarn);
	tcase_add_test(t, test_yarn_gguf_keys);
	tcase_add_test(t, test_lying_values);
	tcase_add_test(t, test_cli);
	tcase_add_test(t, test_loader_refusals);
	tcase_add_test(t, test_calibrate);
	suite_add_tcase(s, t);
	t = tcase_create("tokenizer");
	tcase_add_checked_fixture(t, tmp_setup, tmp_teardown);
	tcase_set_timeout(t, 300);
	tcase_add_test(t, test_tokenizer_qwen3);
	tcase_add_test(t, test_tokenizer_refusals);
	tcase_add_test(t, test_tokenizer_spm);
	tcase_add_test(t, test_tokenizer_spm_llama2);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(gguf_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
