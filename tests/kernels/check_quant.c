/* tests/kernels/check_quant.c — the block-quantized formats and their CPU products.
 *
 * Dequantization: aah_dequantize_row against a value-at-a-time decoder written from the format description
 * (kernels/quant.h: which byte, which nibble, which bits each value lives in), bit for bit, on blocks of random
 * bytes. Activation quantization: the kernels' Q8_0 / Q8_K quantizer equals the reference quantizer
 * (aah_quantize_row_ref) block for block. Products: every table's dots against two naive references computed in
 * double from dequantized values:
 *   (a) the weights times the quantized activations: the integer sums are exact, so the only error is the float
 *       scaling of each block (d_w·d_a rounded, the product rounded, the sum over nb blocks rounded): within
 *       (nb + 4)·2^-24 of Σ|w·a| (relative to the terms' magnitudes);
 *   (b) the weights times the activations as given: adds the activation rounding, at most 0.5·d_a per value for Q8_K
 *       (d_a = max|x|/127 in f32) and 0.5·d_a + 127·2^-11·d_a for Q8_0 (whose scale is stored as a half): the bound
 *       Σ_blocks e_b·Σ_{k∈b}|w_k| with e_b that per-value error, plus (a)'s.
 * Batch invariance: a row's result is the same bits alone or among others, whatever the thread count.
 * The 16-row packed layout of the AVX-512 VNNI products (cpu_qpack.h): packing then unpacking gives back every byte,
 * and its kernels meet reference (a) for every row count of a call and of a group, on random and extreme blocks, giving
 * the generic table's dots bit for bit (the same integer sums, rounded in the same order). */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_qpack.h"
#include "kernels/cpu/cpu_quant.h"
#include "kernels/quant.h"
#include "tests/kernels/kernels_test.h"

static const aah_dtype wtypes[5] = { AAH_DTYPE_Q8_0, AAH_DTYPE_Q4_0, AAH_DTYPE_Q4_K, AAH_DTYPE_Q5_K, AAH_DTYPE_Q6_K };

/* A random half in ±[2^-12, 2^-4): the scales of real blocks, never subnormal, NaN or infinite. */
static aah_half rand_scale(int allow_negative)
{
	float m = ldexpf(1.0f + 0.5f * (rng_f() + 1.0f), -12 + (int)(rng_u64() % 8));
	if (allow_negative && (rng_u64() & 1))
		m = -m;
	return aah_float_to_half(m);
}

/* n values of type t as random blocks: every quant byte random, the scales random halves (rand_scale). malloc'd to
 * the exact size; the caller frees. */
static void *rand_blocks(aah_dtype t, int64_t n)
{
	const size_t bytes = aah_dtype_row_bytes(t, n);
	uint8_t *p = malloc(bytes);
	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < bytes; i++)
		p[i] = (uint8_t)rng_u64();
	const int64_t nb = n / aah_dtype_block_len(t);
	for (int64_t b = 0; b < nb; b++) {
		void *blk = p + (size_t)b * aah_dtype_block_bytes(t);
		switch (t) {
		case AAH_DTYPE_Q8_0: ((aah_block_q8_0 *)blk)->d = rand_scale(1); break;
		case AAH_DTYPE_Q4_0: ((aah_block_q4_0 *)blk)->d = rand_scale(1); break;
		case AAH_DTYPE_Q4_K:
			((aah_block_q4_K *)blk)->d = rand_scale(0);
			((aah_block_q4_K *)blk)->dmin = rand_scale(0);
			break;
		case AAH_DTYPE_Q5_K:
			((aah_block_q5_K *)blk)->d = rand_scale(0);
			((aah_block_q5_K *)blk)->dmin = rand_scale(0);
			break;
		case AAH_DTYPE_Q6_K: ((aah_block_q6_K *)blk)->d = rand_scale(1); break;
		default: break;
		}
	}
	return p;
}

/* ---- dequantization: value i of a block, straight from the layout ---- */

static void k4_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
	/* sub-blocks 0-3: low 6 bits of bytes j (scale) and j+4 (min); 4-7: a nibble of byte j+4 (scale low, min high)
	 * with the top 2 bits of byte j-4 (scale) or byte j (min) above it */
	if (j < 4) {
		*sc = s[j] & 63;
		*m = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
		*m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
	}
}

static float value_at(aah_dtype t, const void *blk, int i)
{
	switch (t) {
	case AAH_DTYPE_Q8_0: {
		const aah_block_q8_0 *b = blk;
		return (float)b->qs[i] * aah_half_to_float(b->d);
	}
	case AAH_DTYPE_Q4_0: {
		const aah_block_q4_0 *b = blk;
		int q = i < 16 ? b->qs[i] & 15 : b->qs[i - 16] >> 4;
		return (float)(q - 8) * aah_half_to_float(b->d);
	}
	case AAH_DTYPE_Q4_K: case AAH_DTYPE_Q5_K: {
		const int j = i / 32, l = i % 32;
		const uint8_t *scales, *qs;
		aah_half d, dmin;
		int hi = 0;
		if (t == AAH_DTYPE_Q4_K) {
			const aah_block_q4_K *b = blk;
			scales = b->scales, qs = b->qs, d = b->d, dmin = b->dmin;
		} else {
			const aah_block_q5_K *b = blk;
			scales = b->scales, qs = b->qs, d = b->d, dmin = b->dmin;
			hi = (b->qh[l] >> j) & 1;   /* bit j of byte l: the fifth bit of value l of sub-block j */
		}
		const uint8_t byte = qs[(j / 2) * 32 + l];   /* sub-blocks 2c and 2c+1 share 32 bytes: low, high nibbles */
		const int q = (j % 2 ? byte >> 4 : byte & 15) + 16 * hi;
		int sc, m;
		k4_scale_min(scales, j, &sc, &m);
		return aah_half_to_float(d) * (float)sc * (float)q - aah_half_to_float(dmin) * (float)m;
	}
	case AAH_DTYPE_Q6_K: {
		const aah_block_q6_K *b = blk;
		/* halves of 128; in each, quarter u of 32: low nibbles of ql[0..32) (u 0), ql[32..64) (u 1), their high
		 * nibbles (u 2, 3); the top 2 bits at bit 2u of qh[l] */
		const int h = i / 128, u = (i % 128) / 32, l = i % 32;
		const uint8_t qlb = b->ql[64 * h + 32 * (u & 1) + l];
		const int q = ((u < 2 ? qlb & 15 : qlb >> 4) | (((b->qh[32 * h + l] >> (2 * u)) & 3) << 4)) - 32;
		return aah_half_to_float(b->d) * (float)b->scales[i / 16] * (float)q;
	}
	default: return NAN;
	}
}

START_TEST(test_dequantize_layout)
{
	rng_seed(101);
	for (int ti = 0; ti < 5; ti++) {
		const aah_dtype t = wtypes[ti];
		const int64_t bl = aah_dtype_block_len(t), n = 8 * bl;
		void *w = rand_blocks(t, n);
		float *got = malloc((size_t)n * sizeof *got);
		aah_dequantize_row(t, got, w, n);
		for (int64_t i = 0; i < n; i++) {
			const void *blk = (const char *)w + (size_t)(i / bl) * aah_dtype_block_bytes(t);
			const float want = value_at(t, blk, (int)(i % bl));
			CHECK(same_float(got[i], want), "%s value %lld: %.9g, the layout says %.9g", aah_dtype_name(t),
			      (long long)i, got[i], want);
		}
		free(w);
		free(got);
	}
}
END_TEST

/* The sizes of every type, and the float types widened exactly. */
START_TEST(test_dequantize_sizes)
{
	ck_assert_uint_eq(aah_dtype_row_bytes(AAH_DTYPE_Q8_0, 64), 68);
	ck_assert_uint_eq(aah_dtype_row_bytes(AAH_DTYPE_Q4_0, 64), 36);
	ck_assert_uint_eq(aah_dtype_row_bytes(AAH_DTYPE_Q4_K, 512), 288);
	ck_assert_uint_eq(aah_dtype_row_bytes(AAH_DTYPE_Q5_K, 256), 176);
	ck_assert_uint_eq(aah_dtype_row_bytes(AAH_DTYPE_Q6_K, 256), 210);
	ck_assert_uint_eq(aah_dtype_row_bytes(AAH_DTYPE_Q4_K, 100), 0);
	ck_assert_uint_eq(aah_dtype_row_bytes(AAH_DTYPE_BF16, 3), 6);
	uint16_t h[3] = { 0x3c00, 0xc000, 0x0001 };   /* 1, -2, the smallest subnormal */
	float f[3];
	aah_dequantize_row(AAH_DTYPE_F16, f, h, 3);
	ck_assert(f[0] == 1.0f && f[1] == -2.0f && f[2] == ldexpf(1.0f, -24));
	uint16_t b[2] = { 0x3f80, 0xc0a0 };   /* bf16 1, -5 */
	aah_dequantize_row(AAH_DTYPE_BF16, f, b, 2);
	ck_assert(f[0] == 1.0f && f[1] == -5.0f);
	/* the extremes of the quants: Q8_0 −128 and 127, Q6_K scale −128 and quant −32 */
	aah_block_q8_0 q8 = { .d = 0x3c00 };
	q8.qs[0] = -128;
	q8.qs[1] = 127;
	float v[AAH_QK_K];
	aah_dequantize_row(AAH_DTYPE_Q8_0, v, &q8, 32);
	ck_assert(v[0] == -128.0f && v[1] == 127.0f && v[2] == 0.0f);
	aah_block_q6_K q6;
	memset(&q6, 0, sizeof q6);
	q6.d = 0x3c00;
	q6.scales[0] = -128;
	aah_dequantize_row(AAH_DTYPE_Q6_K, v, &q6, AAH_QK_K);
	ck_assert(v[0] == 4096.0f && v[16] == 0.0f);   /* (−128)·(0 − 32); scale 0 for the next sub-block */
}
END_TEST

/* ---- activation quantization ---- */

/* Q8_0 activations as llama.cpp's x86 CPU path rounds them (ggml-cpu/arch/x86/quants.c, quantize_row_q8_0): d =
 * amax / 127, q = nearest-even(x · (127 / amax)); the weights' reference quantizer (aah_quantize_row_ref: x · (1 / d),
 * ties away from zero) is the one llama-quantize writes files with, not this. */
static void q8_0_act_ref(aah_block_q8_0 *y, const float *x, int64_t n)
{
	for (int64_t b = 0; b < n / AAH_QK8_0; b++, x += AAH_QK8_0) {
		float amax = 0;
		for (int j = 0; j < AAH_QK8_0; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		const float id = amax ? 127.0f / amax : 0.0f;
		y[b].d = aah_float_to_half(amax / 127.0f);
		for (int j = 0; j < AAH_QK8_0; j++)
			y[b].qs[j] = (int8_t)nearbyintf(x[j] * id);   /* the default rounding: to nearest, ties to even */
	}
}

START_TEST(test_quantize_act_matches_ref)
{
	rng_seed(202);
	const aah_dtype at[2] = { AAH_DTYPE_Q8_0, AAH_DTYPE_Q8_K };
	const int64_t n = 4 * AAH_QK_K;
	float *x = malloc(n * sizeof *x);
	for (int ai = 0; ai < 2; ai++) {
		const size_t bytes = aah_dtype_row_bytes(at[ai], n);
		uint8_t *got = malloc(bytes), *want = malloc(bytes);
		for (int trial = 0; trial < 50; trial++) {
			const float amp = ldexpf(1.0f, (int)(rng_u64() % 20) - 10);
			for (int64_t i = 0; i < n; i++)
				x[i] = amp * rng_f();
			if (trial % 5 == 1)   /* ties: halves of the scale step, which roundf and nearest-even round apart */
				for (int64_t i = 0; i < n; i++)
					x[i] = (float)((int)(rng_u64() % 255) - 127) * 0.5f;
			if (trial % 5 == 2)
				memset(x, 0, AAH_QK_K * sizeof *x);   /* a block of zeros */
			if (trial % 5 == 3)   /* every Q8_0 block's scale exactly 1, the rest exact halves: ties of both signs */
				for (int64_t i = 0; i < n; i++)
					x[i] = i % AAH_QK8_0 ? (float)((int)(rng_u64() % 255) - 127) + (i % 2 ? 0.5f : -0.5f) : 127.0f;
			cpu_quantize_act(at[ai], got, x, n);
			if (at[ai] == AAH_DTYPE_Q8_0)
				q8_0_act_ref((aah_block_q8_0 *)(void *)want, x, n);
			else
				aah_quantize_row_ref(at[ai], want, x, n);
			CHECK(!memcmp(got, want, bytes), "%s trial %d: the kernels' blocks differ from the reference's",
			      aah_dtype_name(at[ai]), trial);
		}
		free(got);
		free(want);
	}
	/* NaN and infinity: no undefined conversion, a block of zeros or clamped quants (what matters: no crash) */
	for (int64_t i = 0; i < n; i++)
		x[i] = i % 3 ? NAN : INFINITY;
	aah_block_q8_K kb[4];
	aah_block_q8_0 zb[32];
	cpu_quantize_act(AAH_DTYPE_Q8_K, kb, x, n);
	cpu_quantize_act(AAH_DTYPE_Q8_0, zb, x, n);
	ck_assert(kb[0].d == 0.0f);
	free(x);
}
END_TEST

/* ---- the dots against the naive references ---- */

typedef struct qref {
	double exact, exact_mag;   /* (a): Σ w·â and Σ|w·â| */
	double given, given_tol;   /* (b): Σ w·x and its tolerance from the activation rounding */
} qref;

static qref reference(aah_dtype t, const void *w, const float *x, const void *xq, int64_t K)
{
	const aah_dtype at = cpu_quant_act_type(t);
	float *wd = malloc(K * sizeof *wd), *ad = malloc(K * sizeof *ad);
	aah_dequantize_row(t, wd, w, K);
	aah_dequantize_row(at, ad, xq, K);
	qref r = { 0, 0, 0, 0 };
	const int64_t abl = aah_dtype_block_len(at);
	for (int64_t b = 0; b < K / abl; b++) {
		float amax = 0;
		double wabs = 0;
		for (int64_t k = b * abl; k < (b + 1) * abl; k++) {
			amax = fmaxf(amax, fabsf(x[k]));
			wabs += fabs((double)wd[k]);
		}
		const double d = amax / 127.0, e = at == AAH_DTYPE_Q8_0 ? d * (0.5 + 127.0 / 2048.0) : 0.5 * d * (1 + 1e-6);
		r.given_tol += e * wabs;
	}
	for (int64_t k = 0; k < K; k++) {
		r.exact += (double)wd[k] * ad[k];
		r.exact_mag += fabs((double)wd[k] * ad[k]);
		r.given += (double)wd[k] * x[k];
	}
	free(wd);
	free(ad);
	return r;
}

START_TEST(test_dot_vs_reference)
{
	const cpu_qkernels *qk = cpu_qkernels_for(isa_names[_i]);
	if (!qk) {
		printf("note: this CPU lacks %s; its quantized dots are skipped\n", isa_names[_i]);
		return;
	}
	rng_seed(303 + (uint64_t)_i);
	const int64_t Ks[3] = { 256, 1024, 3072 };
	for (int ti = 0; ti < 5; ti++)
		for (int ki = 0; ki < 3; ki++) {
			const aah_dtype t = wtypes[ti], at = cpu_quant_act_type(t);
			const int64_t K = Ks[ki], nb = K / aah_dtype_block_len(t);
			const size_t as = aah_dtype_row_bytes(at, K);
			void *w = rand_blocks(t, K);
			float *x = rand_floats(CPU_QDOT_COLS * K, 1.0f);
			for (int64_t i = 0; i < K; i += 7)
				x[i] *= 20.0f;   /* outliers: blocks whose scale is set by one value */
			uint8_t *xq = malloc(CPU_QDOT_COLS * as);
			for (int c = 0; c < CPU_QDOT_COLS; c++)
				cpu_quantize_act(at, xq + c * as, x + c * K, K);
			float alone[CPU_QDOT_COLS];
			for (int c = 0; c < CPU_QDOT_COLS; c++) {
				qk->dot[t](nb, 1, &alone[c], w, xq + c * as, as);
				const qref r = reference(t, w, x + c * K, xq + c * as, K);
				const double tol_a = (double)(nb + 4) * ldexp(1.0, -24) * r.exact_mag;
				CHECK(fabs(alone[c] - r.exact) <= tol_a + 1e-30,
				      "%s %s K=%lld row %d: %.9g, exact %.9g (tolerance %.3g)", qk->isa, aah_dtype_name(t),
				      (long long)K, c, alone[c], r.exact, tol_a);
				CHECK(fabs(alone[c] - r.given) <= r.given_tol + tol_a + 1e-30,
				      "%s %s K=%lld row %d: %.9g, unquantized activations %.9g (tolerance %.3g)", qk->isa,
				      aah_dtype_name(t), (long long)K, c, alone[c], r.given, r.given_tol + tol_a);
			}
			/* the same rows in calls of 2, 3 and 4: the same bits */
			for (int nc = 2; nc <= CPU_QDOT_COLS; nc++)
				for (int c0 = 0; c0 + nc <= CPU_QDOT_COLS; c0++) {
					float s[CPU_QDOT_COLS];
					qk->dot[t](nb, nc, s, w, xq + c0 * as, as);
					for (int c = 0; c < nc; c++)
						CHECK(same_float(s[c], alone[c0 + c]), "%s %s: row %d among %d: %.9g, alone %.9g", qk->isa,
						      aah_dtype_name(t), c0 + c, nc, s[c], alone[c0 + c]);
				}
			free(w);
			free(x);
			free(xq);
		}
}
END_TEST

/* The scales of an extreme block: 1.0 (and dmin 1.0), Q8_0 quants of −128, Q6_K scales of −128. */
static void extreme_scales(aah_dtype t, uint8_t *blk)
{
	switch (t) {
	case AAH_DTYPE_Q8_0:
		((aah_block_q8_0 *)blk)->d = 0x3c00;
		memset(((aah_block_q8_0 *)blk)->qs, 0x80, 32);
		break;
	case AAH_DTYPE_Q4_0: ((aah_block_q4_0 *)blk)->d = 0x3c00; break;
	case AAH_DTYPE_Q4_K: ((aah_block_q4_K *)blk)->d = ((aah_block_q4_K *)blk)->dmin = 0x3c00; break;
	case AAH_DTYPE_Q5_K: ((aah_block_q5_K *)blk)->d = ((aah_block_q5_K *)blk)->dmin = 0x3c00; break;
	case AAH_DTYPE_Q6_K:
		((aah_block_q6_K *)blk)->d = 0x3c00;
		memset(((aah_block_q6_K *)blk)->scales, 0x80, 16);
		break;
	default: break;
	}
}

/* The extremes every dot must sum exactly: Q8_0 quants of −128 (whose magnitude only fits a byte unsigned), Q6_K
 * scales of −128 with quants of 0 (q − 32 = −32), the largest 4/5-bit quants and 6-bit scales, against activations of
 * ±127: integer sums far beyond int16, each term still exact. */
START_TEST(test_dot_extremes)
{
	const cpu_qkernels *qk = cpu_qkernels_for(isa_names[_i]);
	if (!qk)
		return;
	const int64_t K = 512;
	float *x = malloc(K * sizeof *x);
	for (int64_t k = 0; k < K; k++)
		x[k] = k % 2 ? 127.0f : -127.0f;
	x[0] = -127.0f;
	for (int ti = 0; ti < 5; ti++) {
		const aah_dtype t = wtypes[ti], at = cpu_quant_act_type(t);
		const size_t wb = aah_dtype_row_bytes(t, K), as = aah_dtype_row_bytes(at, K);
		for (int pattern = 0; pattern < 2; pattern++) {
			uint8_t *w = malloc(wb), *xq = malloc(as);
			memset(w, pattern ? 0x00 : 0xff, wb);   /* all quant bits set, or all clear */
			const int64_t nb = K / aah_dtype_block_len(t);
			for (int64_t b = 0; b < nb; b++) {
				uint8_t *blk = w + b * aah_dtype_block_bytes(t);
				extreme_scales(t, blk);
			}
			cpu_quantize_act(at, xq, x, K);
			float s;
			qk->dot[t](nb, 1, &s, w, xq, as);
			const qref r = reference(t, w, x, xq, K);
			CHECK(fabs(s - r.exact) <= (double)(nb + 4) * ldexp(1.0, -24) * r.exact_mag,
			      "%s %s pattern %d: %.9g, exact %.9g", qk->isa, aah_dtype_name(t), pattern, s, r.exact);
			free(w);
			free(xq);
		}
	}
	free(x);
}
END_TEST

/* ---- the 16-row packed layout ---- */

static bool have_vnni(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512vnni");
}

/* The packed kernels' tables, each tested where this CPU runs it (the loop tests' index). */
static const struct {
	const char *name;
	cpu_qpack_fn (*kernel)(aah_dtype t);
} qtables[4] = { { "avx512vnni", cpu_qpack_kernel_avx512 }, { "avx2", cpu_qpack_kernel_avx2 },
                  { "vnni256 (EVEX, the AVX-VNNI kernels' twin)", cpu_qpack_kernel_vnni256 },
                  { "avxvnni", cpu_qpack_kernel_avxvnni } };

static bool have_qtable(int i)
{
	__builtin_cpu_init();
	if (i == 0)
		return have_vnni();
	if (i == 2)
		return have_vnni() && __builtin_cpu_supports("avx512vl");
	if (i == 3)
		return __builtin_cpu_supports("avxvnni");
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

START_TEST(test_qpack_round_trip)
{
	rng_seed(505);
	const int64_t K = 512;
	for (int ti = 0; ti < 5; ti++) {
		const aah_dtype t = wtypes[ti];
		ck_assert(cpu_qpack_has(t));
		const size_t rb = aah_dtype_row_bytes(t, K), gs = cpu_qpack_group_bytes(t, K);
		ck_assert_uint_eq(gs, cpu_qpack_block_bytes(t) * (size_t)(K / aah_dtype_block_len(t)));
		ck_assert_uint_eq(cpu_qpack_block_bytes(t) * 16 % 64, 0);   /* 16 rows: whole 64-byte columns */
		for (int n = 1; n <= CPU_QPACK_ROWS; n += 5) {
			uint8_t *w = rand_blocks(t, K * n), *g = malloc(gs), *back = malloc(rb);
			cpu_qpack_group(t, g, w, rb, n, K);
			for (int r = 0; r < n; r++) {
				cpu_qpack_unpack_row(t, back, g, r, K);
				CHECK(!memcmp(back, w + (size_t)r * rb, rb), "%s: row %d of %d back from the group differs",
				      aah_dtype_name(t), r, n);
			}
			free(w);
			free(g);
			free(back);
		}
	}
	ck_assert(!cpu_qpack_has(AAH_DTYPE_Q8_K) && !cpu_qpack_has(AAH_DTYPE_BF16));
}
END_TEST

/* nr rows of blocks w (row-major) packed and multiplied with the nc activation rows x through the packed kernel in
 * calls of every size; each result against reference (a), and the same bits in every call. */
static void qpack_check(int ti_, aah_dtype t, const uint8_t *w, int nr, const float *x, int nc, int64_t K,
                        const char *what0)
{
	const cpu_qpack_fn kern = qtables[ti_].kernel(t);
	char what[64];
	snprintf(what, sizeof what, "%s %s", qtables[ti_].name, what0);
	ck_assert_ptr_nonnull(kern);
	const aah_dtype at = cpu_quant_act_type(t);
	const size_t rb = aah_dtype_row_bytes(t, K), as = cpu_qpack_act_row_bytes(t, K), qs = aah_dtype_row_bytes(at, K);
	const int64_t nb = K / aah_dtype_block_len(t);
	uint8_t *g = aligned_alloc(64, (cpu_qpack_group_bytes(t, K) + 63) & ~(size_t)63), *xa = malloc(nc * as),
	        *xq = malloc(qs);
	cpu_qpack_group(t, g, w, rb, nr, K);
	for (int c = 0; c < nc; c++)
		cpu_qpack_quantize_act(t, xa + c * as, x + c * K, K);
	float alone[CPU_QPACK_COLS][CPU_QPACK_ROWS];
	for (int c = 0; c < nc; c++) {
		float sentinel[CPU_QPACK_ROWS + 1];
		for (int r = 0; r <= CPU_QPACK_ROWS; r++)
			sentinel[r] = -1234.5f;
		kern(nb, 1, nr, sentinel, 0, g, xa + c * as, as, c % 2 ? 512 : 0);
		for (int r = nr; r <= CPU_QPACK_ROWS; r++)
			CHECK(sentinel[r] == -1234.5f, "%s %s: wrote row %d of %d", what, aah_dtype_name(t), r, nr);
		cpu_quantize_act(at, xq, x + c * K, K);
		for (int r = 0; r < nr; r++) {
			alone[c][r] = sentinel[r];
			const qref ref = reference(t, w + (size_t)r * rb, x + c * K, xq, K);
			const double tol = (double)(nb + 4) * ldexp(1.0, -24) * ref.exact_mag;
			CHECK(fabs(sentinel[r] - ref.exact) <= tol + 1e-30, "%s %s K=%lld (%d, %d): %.9g, exact %.9g (tolerance %.3g)",
			      what, aah_dtype_name(t), (long long)K, c, r, sentinel[r], ref.exact, tol);
			float gen;   /* rounded as the portable dot rounds: its bits */
			cpu_qkernels_generic.dot[t](nb, 1, &gen, w + (size_t)r * rb, xq, qs);
			CHECK(same_float(sentinel[r], gen), "%s %s K=%lld (%d, %d): %.9g, the generic dot %.9g", what,
			      aah_dtype_name(t), (long long)K, c, r, sentinel[r], gen);
		}
	}
	for (int n = 2; n <= nc; n++)
		for (int c0 = 0; c0 + n <= nc; c0++) {
			float out[CPU_QPACK_COLS * CPU_QPACK_ROWS];
			kern(nb, n, nr, out, CPU_QPACK_ROWS, g, xa + c0 * as, as, 0);
			for (int c = 0; c < n; c++)
				for (int r = 0; r < nr; r++)
					CHECK(same_float(out[c * CPU_QPACK_ROWS + r], alone[c0 + c][r]),
					      "%s %s: (%d, %d) among %d: %.9g, alone %.9g", what, aah_dtype_name(t), c0 + c, r, n,
					      out[c * CPU_QPACK_ROWS + r], alone[c0 + c][r]);
		}
	free(g);
	free(xa);
	free(xq);
}

START_TEST(test_qpack_kernels)
{
	if (!have_qtable(_i)) {
		printf("note: this CPU cannot run the %s packed kernels; skipped\n", qtables[_i].name);
		return;
	}
	rng_seed(606);
	const int64_t Ks[3] = { 256, 1536, 96 };   /* 96: three blocks of 32 (Q8_0, Q4_0 only) */
	for (int ti = 0; ti < 5; ti++)
		for (int ki = 0; ki < 3; ki++) {
			const aah_dtype t = wtypes[ti];
			const int64_t K = Ks[ki];
			if (K % aah_dtype_block_len(t))
				continue;
			const int nr = ki == 1 ? 16 : ki == 0 ? 11 : 5;   /* a whole group, one that ends early, one of half a group */
			uint8_t *w = rand_blocks(t, K * nr);
			float *x = rand_floats(CPU_QPACK_COLS * K, 1.0f);
			for (int64_t i = 0; i < CPU_QPACK_COLS * K; i += 7)
				x[i] *= 20.0f;
			qpack_check(_i, t, w, nr, x, CPU_QPACK_COLS, K, "random");
			free(w);
			free(x);
		}
}
END_TEST

/* test_dot_extremes' blocks through the packed kernels: the Q8_0 quant −128 (128 + 128 overflows nothing: it is 0
 * unsigned), Q6_K scales of −128, every quant bit set or clear, against activations of ±127. */
START_TEST(test_qpack_extremes)
{
	if (!have_qtable(_i))
		return;
	const int64_t K = 512;
	float *x = malloc(2 * K * sizeof *x);
	for (int64_t k = 0; k < K; k++) {
		x[k] = k % 2 ? 127.0f : -127.0f;
		x[K + k] = 127.0f;
	}
	for (int ti = 0; ti < 5; ti++) {
		const aah_dtype t = wtypes[ti];
		const size_t rb = aah_dtype_row_bytes(t, K);
		for (int pattern = 0; pattern < 2; pattern++) {
			uint8_t *w = malloc(CPU_QPACK_ROWS * rb);
			memset(w, pattern ? 0x00 : 0xff, CPU_QPACK_ROWS * rb);
			const int64_t nb = CPU_QPACK_ROWS * K / aah_dtype_block_len(t);
			for (int64_t b = 0; b < nb; b++) {
				uint8_t *blk = w + b * aah_dtype_block_bytes(t);
				extreme_scales(t, blk);
			}
			qpack_check(_i, t, w, CPU_QPACK_ROWS, x, 2, K, pattern ? "bits clear" : "bits set");
			free(w);
		}
	}
	free(x);
}
END_TEST

/* The vectorized activation quantizers of the packed paths against the portable one, bit for bit: random amplitudes,
 * exact ties of both signs (scale 1), blocks of zeros, NaN, infinities, the largest floats, and the largest magnitude
 * at several places with both signs (the scale is the first's). */
START_TEST(test_qpack_quantize_act_simd)
{
	if (!have_qtable(_i))
		return;
	void (*quantize)(aah_dtype, void *, const float *, int64_t) =
		_i == 0 ? cpu_qpack_quantize_act_avx512 : cpu_qpack_quantize_act_avx2;
	rng_seed(505);
	const int64_t n = 512;
	float *x = malloc(n * sizeof *x);
	const aah_dtype ts[3] = { AAH_DTYPE_Q8_0, AAH_DTYPE_Q4_0, AAH_DTYPE_Q4_K };
	for (int ti = 0; ti < 3; ti++) {
		const size_t bytes = cpu_qpack_act_row_bytes(ts[ti], n);
		uint8_t *got = malloc(bytes), *want = malloc(bytes);
		for (int trial = 0; trial < 70; trial++) {
			const float amp = ldexpf(1.0f, (int)(rng_u64() % 40) - 20);
			for (int64_t i = 0; i < n; i++) {
				x[i] = amp * rng_f();
				switch (trial % 7) {
				case 1: x[i] = i % 32 ? (float)((int)(rng_u64() % 255) - 127) + (i % 2 ? 0.5f : -0.5f) : 127.0f; break;
				case 2: x[i] = i < 64 ? 0.0f : x[i]; break;
				case 3: x[i] = i % 7 == 0 ? NAN : i % 11 == 0 ? -INFINITY : x[i]; break;
				case 4: x[i] = i % 3 ? FLT_MAX : -FLT_MAX; break;
				case 5: x[i] = i % 32 == 5 ? NAN : x[i]; break;
				case 6: x[i] = i < 256 ? -0.0f : i % 9 ? x[i] : i % 2 ? amp : -amp; break;   /* a K block of zeros; ±amp */
				}
			}
			memset(got, 0xa5, bytes);
			memset(want, 0xa5, bytes);
			quantize(ts[ti], got, x, n);
			cpu_qpack_quantize_act(ts[ti], want, x, n);
			CHECK(!memcmp(got, want, bytes), "%s trial %d: the %s activation blocks differ from the portable ones",
			      aah_dtype_name(ts[ti]), trial, qtables[_i].name);
		}
		free(got);
		free(want);
	}
	free(x);
}
END_TEST

/* ---- through the backend: import, matmul, get_rows ---- */

START_TEST(test_backend_matmul_quant)
{
	backend_set bs;
	backends_open(&bs, 7);
	rng_seed(404);
	const int64_t M = 37;   /* 37 rows: the workers' splits end mid-group */
	const int32_t N = 21;   /* 8 + 8 + 5 rows: two whole groups of CPU_QDOT_COLS and a tail of 5 (the gathered scales) */
	for (int ti = 0; ti < 7; ti++) {
		const int64_t K = ti < 5 ? 512 : 96;   /* and 3 blocks of 32 (a model of hidden 96) */
		const aah_dtype t = wtypes[ti < 5 ? ti : ti - 5], at = cpu_quant_act_type(t);
		float *x = rand_floats(N * K, 2.0f);
		const size_t wrow = aah_dtype_row_bytes(t, K), as = aah_dtype_row_bytes(at, K);
		uint8_t *w = malloc(M * wrow), *xq = malloc(as);
		for (int64_t m = 0; m < M; m++) {
			void *r = rand_blocks(t, K);
			memcpy(w + m * wrow, r, wrow);
			free(r);
		}
		float *first = malloc(N * M * sizeof *first);
		for (int bi = 0; bi < bs.n; bi++) {
			aah_backend *b = bs.b[bi];
			aah_tensor wt;
			ck_assert_int_eq(b->iface.weight_import(b, &wt, w, t, M, K), 0);
			float *out = malloc(N * M * sizeof *out), *one = malloc(M * sizeof *one);
			b->iface.matmul(b, out, x, N, &wt);
			for (int32_t i = 0; i < N; i++) {
				b->iface.matmul(b, one, x + i * K, 1, &wt);   /* the row alone */
				cpu_quantize_act(at, xq, x + i * K, K);
				for (int64_t m = 0; m < M; m++) {
					const float got = out[i * M + m];
					CHECK(same_float(got, one[m]), "%s %s row %d col %lld: %.9g in a batch of %d, %.9g alone",
					      bs.label[bi], aah_dtype_name(t), i, (long long)m, got, N, one[m]);
					const qref r = reference(t, w + m * wrow, x + i * K, xq, K);
					CHECK(fabs(got - r.exact) <= (double)(K / 32 + 4) * ldexp(1.0, -24) * r.exact_mag,
					      "%s %s (%d, %lld): %.9g, exact %.9g", bs.label[bi], aah_dtype_name(t), i, (long long)m, got,
					      r.exact);
				}
			}
			/* one table: the same bits with any thread count */
			if (bi % 3 == 0)
				memcpy(first, out, N * M * sizeof *out);
			else
				CHECK(!memcmp(first, out, N * M * sizeof *out), "%s %s: differs from 1 thread", bs.label[bi],
				      aah_dtype_name(t));
			/* get_rows: the rows dequantized exactly */
			const int32_t ids[3] = { 36, 0, 17 };
			float *rows = malloc(3 * K * sizeof *rows), *want = malloc(K * sizeof *want);
			b->iface.get_rows(b, rows, &wt, ids, 3);
			for (int i = 0; i < 3; i++) {
				aah_dequantize_row(t, want, w + ids[i] * wrow, K);
				CHECK(!memcmp(rows + i * K, want, K * sizeof *want), "%s %s get_rows row %d", bs.label[bi],
				      aah_dtype_name(t), ids[i]);
			}
			free(rows);
			free(want);
			b->iface.weight_release(b, &wt);
			free(out);
			free(one);
		}
		free(first);
		free(w);
		free(xq);
		free(x);
	}
	backends_close(&bs);
}
END_TEST

/* What the backend refuses: a quantized vector, a row that is not whole blocks, Q8_K as a weight. */
START_TEST(test_backend_import_refuses)
{
	aah_backend *b = backend_make("generic", 1);
	aah_tensor wt;
	uint8_t buf[4 * 210];
	memset(buf, 0, sizeof buf);
	ck_assert_int_eq(b->iface.weight_import(b, &wt, buf, AAH_DTYPE_Q6_K, 1, 256), -1);
	ck_assert_int_eq(b->iface.weight_import(b, &wt, buf, AAH_DTYPE_Q4_K, 2, 100), -1);
	ck_assert_int_eq(b->iface.weight_import(b, &wt, buf, AAH_DTYPE_Q8_K, 2, 256), -1);
	ck_assert_int_eq(b->iface.weight_import(b, &wt, buf, AAH_DTYPE_Q6_K, 4, 256), 0);
	b->iface.weight_release(b, &wt);
	b->iface.free(b);
}
END_TEST

static Suite *quant_suite(void)
{
	Suite *s = suite_create("quant");
	TCase *tc = tcase_create("formats");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_dequantize_layout);
	tcase_add_test(tc, test_dequantize_sizes);
	tcase_add_test(tc, test_quantize_act_matches_ref);
	suite_add_tcase(s, tc);

	tc = tcase_create("dots");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_dot_vs_reference, 0, 3);
	tcase_add_loop_test(tc, test_dot_extremes, 0, 3);
	suite_add_tcase(s, tc);

	tc = tcase_create("packed");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_qpack_round_trip);
	tcase_add_loop_test(tc, test_qpack_kernels, 0, 4);
	tcase_add_loop_test(tc, test_qpack_extremes, 0, 4);
	tcase_add_loop_test(tc, test_qpack_quantize_act_simd, 0, 2);
	suite_add_tcase(s, tc);

	tc = tcase_create("backend");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_backend_matmul_quant);
	tcase_add_test(tc, test_backend_import_refuses);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(quant_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
