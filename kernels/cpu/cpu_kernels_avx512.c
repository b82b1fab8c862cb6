/* kernels/cpu/cpu_kernels_avx512.c — the AVX-512 table (F, BW, VL, DQ). Compiled with AVX-512 flags and used
 * only when the CPU has them (cpu_kernels_select); a panel × 16 rows of sums in registers.
 * Loops over tile shapes are unrolled at compile time (always_inline + constant bounds) so that every
 * accumulator lives in a register: a spilled accumulator costs a store-to-load round trip per FMA. */
#include "kernels/cpu/cpu_kernels.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

INLINE __m512 load16(const void *w, aah_dtype t, int64_t i)
{
	if (t == AAH_DTYPE_BF16) {
		__m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	}
	if (t == AAH_DTYPE_F16)
		return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
	return _mm512_loadu_ps((const float *)w + i);
}

/* The first n < 16 elements at i through a mask; zeros beyond. */
INLINE __m512 load16_tail(const void *w, aah_dtype t, int64_t i, __mmask16 m)
{
	if (t == AAH_DTYPE_BF16) {
		__m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	}
	if (t == AAH_DTYPE_F16)
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i));
	return _mm512_maskz_loadu_ps(m, (const float *)w + i);
}

/* The sums of a, b, c and d's 16 lanes, in lanes 0 … 3: each exactly what _mm512_reduce_add_ps gives (lanes i and
 * i + 8 added, then i and i + 4, then 0 + 2 and 1 + 3, then those two; float addition commutes, so the pairing alone
 * fixes the result), four at a time with 10 shuffles and adds in place of 28; attention's scores end here, so a key's
 * score is the same in a block of four or alone. */
INLINE __m128 hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d)
{
	__m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
	__m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
	__m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
	x = _mm512_add_ps(x, _mm512_permute_ps(x, 0x4e));
	x = _mm512_add_ps(x, _mm512_permute_ps(x, 0xb1));
	return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	                                                                      0, 0), x));
}

/* G panels (CPU_PANEL rows each, one vector) against N activation rows: G·N accumulators, each weight vector loaded
 * once and widened once for the N rows, each activation broadcast from xt (k-major: xt[k·N + i]) by the FMA's own
 * load. k in order, one FMA per k (cpu_kernels.h). bf16 pairs: the even k is the 32-bit word shifted left by 16, the
 * odd k the word with its low half cleared. */
#define PANEL_PREFETCH 2048   /* bytes ahead in each panel's stream */

INLINE void panel_block(float *out, int64_t ldo, const float *xt, const int N, const char *w, int64_t pstride,
                        const int G, const aah_dtype T, int64_t K, int64_t m0, int64_t M)
{
	__m512 acc[4][16];   /* G·N ≤ 16 */
	UNROLL for (int g = 0; g < G; g++)
		UNROLL for (int i = 0; i < N; i++)
			acc[g][i] = _mm512_setzero_ps();
	int64_t k = 0;
	if (T == AAH_DTYPE_BF16) {
		const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
		for (; k + 2 <= K; k += 2) {
			__m512 we[4], wo[4];
			UNROLL for (int g = 0; g < G; g++) {
				const char *src = w + g * pstride + k * 32;
				_mm_prefetch(src + PANEL_PREFETCH, _MM_HINT_T0);
				__m512i v = _mm512_load_si512((const void *)src);
				we[g] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
				wo[g] = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
			}
			const float *xe = xt + k * N, *xo = xe + N;
			UNROLL for (int i = 0; i < N; i++)
				UNROLL for (int g = 0; g < G; g++) {
					acc[g][i] = _mm512_fmadd_ps(we[g], _mm512_set1_ps(xe[i]), acc[g][i]);
					acc[g][i] = _mm512_fmadd_ps(wo[g], _mm512_set1_ps(xo[i]), acc[g][i]);
				}
		}
		if (k < K) {   /* odd K: the last pair's even half */
			__m512 we[4];
			UNROLL for (int g = 0; g < G; g++)
				we[g] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_load_si512((const void *)(w + g * pstride + k * 32)), 16));
			UNROLL for (int i = 0; i < N; i++)
				UNROLL for (int g = 0; g < G; g++)
					acc[g][i] = _mm512_fmadd_ps(we[g], _mm512_set1_ps(xt[k * N + i]), acc[g][i]);
		}
	} else {
		const int64_t es = T == AAH_DTYPE_F32 ? 4 : 2;
		for (; k < K; k++) {
			__m512 wv[4];
			UNROLL for (int g = 0; g < G; g++) {
				const char *src = w + g * pstride + k * CPU_PANEL * es;
				_mm_prefetch(src + PANEL_PREFETCH, _MM_HINT_T0);
				wv[g] = T == AAH_DTYPE_F32 ? _mm512_load_ps((const void *)src)
				                           : _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)src));
			}
			UNROLL for (int i = 0; i < N; i++)
				UNROLL for (int g = 0; g < G; g++)
					acc[g][i] = _mm512_fmadd_ps(wv[g], _mm512_set1_ps(xt[k * N + i]), acc[g][i]);
		}
	}
	UNROLL for (int g = 0; g < G; g++) {
		const int64_t m = m0 + g * CPU_PANEL;
		if (m >= M)
			break;
		const __mmask16 keep = M - m >= CPU_PANEL ? (__mmask16)0xffff : (__mmask16)((1u << (M - m)) - 1);
		UNROLL for (int i = 0; i < N; i++)
			_mm512_mask_storeu_ps(out + i * ldo + m, keep, acc[g][i]);
	}
}

/* Panels [p0, p1) G at a time (the last few one at a time), for N rows. */
INLINE void panel_rows_typed(float *out, int64_t ldo, const float *xt, const int N, const void *w, const aah_dtype T,
                             const int G, int64_t K, int64_t M, int64_t p0, int64_t p1)
{
	const int64_t pstride = cpu_packed_elems(T, CPU_PANEL, K) * (T == AAH_DTYPE_F32 ? 4 : 2);
	int64_t p = p0;
	for (; p + G <= p1; p += G)
		panel_block(out, ldo, xt, N, (const char *)w + p * pstride, pstride, G, T, K, p * CPU_PANEL, M);
	for (; p < p1; p++)
		panel_block(out, ldo, xt, N, (const char *)w + p * pstride, pstride, 1, T, K, p * CPU_PANEL, M);
}

/* 1–4 rows: four panels at a time (independent sums hide the FMA latency while the weights stream); 5–8: two; 9–16:
 * one panel × N rows, every weight vector feeding 2N FMAs. (24 rows spilled: 95 against 150 GFLOP/s on one core.) */
#define PANEL_CASE(T, n_, g_) case n_: panel_rows_typed(out, ldo, xt, n_, w, T, g_, K, M, p0, p1); return;
#define PANEL_CASES(T) \
	switch (n) { \
	PANEL_CASE(T, 1, 4) PANEL_CASE(T, 2, 4) PANEL_CASE(T, 3, 4) PANEL_CASE(T, 4, 4) \
	PANEL_CASE(T, 5, 2) PANEL_CASE(T, 6, 2) PANEL_CASE(T, 7, 2) PANEL_CASE(T, 8, 2) \
	PANEL_CASE(T, 9, 1) PANEL_CASE(T, 10, 1) PANEL_CASE(T, 11, 1) PANEL_CASE(T, 12, 1) \
	PANEL_CASE(T, 13, 1) PANEL_CASE(T, 14, 1) PANEL_CASE(T, 15, 1) \
	default: panel_rows_typed(out, ldo, xt, 16, w, T, 1, K, M, p0, p1); return; \
	}

static void panel_mm_avx512(float *out, int64_t ldo, const float *xt, int32_t n, const void *w, aah_dtype t,
                            int64_t K, int64_t M, int64_t p0, int64_t p1)
{
	if (t == AAH_DTYPE_BF16)
		PANEL_CASES(AAH_DTYPE_BF16)
	if (t == AAH_DTYPE_F16)
		PANEL_CASES(AAH_DTYPE_F16)
	PANEL_CASES(AAH_DTYPE_F32)
}

static void to_f32_avx512(float *dst, const void *src, aah_dtype t, int64_t count)
{
	if (t == AAH_DTYPE_F32) {
		memcpy(dst, src, (size_t)count * sizeof(float));
		return;
	}
	int64_t i = 0;
	for (; i + 16 <= count; i += 16)
		_mm512_storeu_ps(dst + i, load16(src, t, i));
	if (i < count) {
		__mmask16 m = (__mmask16)((1u << (count - i)) - 1);
		_mm512_mask_storeu_ps(dst + i, m, load16_tail(src, t, i, m));
	}
}

static float dot_avx512(const float *a, const float *b, int64_t n)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
		s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
	}
	for (; i + 16 <= n; i += 16)
		s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
	if (i < n) {
		__mmask16 m = (__mmask16)((1u << (n - i)) - 1);
		s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* exp(x) for x ≤ 0: x = n·ln 2 + r, |r| ≤ ln 2 / 2, exp(r) by Cephes' degree-7 polynomial, times 2^n (scalef).
 * Below -87.3 the result is clamped to about 1e-38 (a probability that vanishes beside the maximum's 1). */
INLINE __m512 exp_le0(__m512 x)
{
	x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
	                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
	__m512 y = _mm512_set1_ps(1.9875691500e-4f);
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
	y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	return _mm512_scalef_ps(y, n);
}

static double exp_sum_avx512(float *s, int64_t n, float mx)
{
	const __m512 m = _mm512_set1_ps(mx);
	__m512 acc = _mm512_setzero_ps();
	int64_t t = 0;
	for (; t + 16 <= n; t += 16) {
		__m512 e = exp_le0(_mm512_sub_ps(_mm512_loadu_ps(s + t), m));
		_mm512_storeu_ps(s + t, e);
		acc = _mm512_add_ps(acc, e);
	}
	if (t < n) {
		__mmask16 k = (__mmask16)((1u << (n - t)) - 1);
		__m512 e = _mm512_maskz_mov_ps(k, exp_le0(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), m)));
		_mm512_mask_storeu_ps(s + t, k, e);
		acc = _mm512_add_ps(acc, e);
	}
	return (double)_mm512_reduce_add_ps(acc);
}

static void axpy_avx512(float *y, float a, const float *x, int64_t n)
{
	__m512 av = _mm512_set1_ps(a);
	int64_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
	if (i < n) {
		__mmask16 m = (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i),
		                                                _mm512_maskz_loadu_ps(m, y + i)));
	}
}

/* Keys against two query heads held in registers (NV = head_dim / 16 vectors each): one key row load feeds both.
 * Four keys at a time, so that their eight sums reduce together (hsum16x4); a key's score is the same in a block of
 * four or alone, so how the keys are split into runs never matters. */
INLINE void qk2(float *scores, int64_t ld, const float *q, const int NV, const float *keys, int64_t ks, int32_t n,
                int32_t hd)
{
	__m512 qa[8], qb[8];   /* NV ≤ 8 */
	UNROLL for (int c = 0; c < NV; c++) {
		qa[c] = _mm512_loadu_ps(q + c * 16);
		qb[c] = _mm512_loadu_ps(q + hd + c * 16);
	}
	int32_t t = 0;
	for (; t + 4 <= n; t += 4) {
		__m512 a[4], b[4];
		UNROLL for (int u = 0; u < 4; u++)
			a[u] = b[u] = _mm512_setzero_ps();
		UNROLL for (int c = 0; c < NV; c++)
			UNROLL for (int u = 0; u < 4; u++) {
				__m512 kv = _mm512_loadu_ps(keys + (t + u) * ks + c * 16);
				a[u] = _mm512_fmadd_ps(qa[c], kv, a[u]);
				b[u] = _mm512_fmadd_ps(qb[c], kv, b[u]);
			}
		_mm_storeu_ps(scores + t, hsum16x4(a[0], a[1], a[2], a[3]));
		_mm_storeu_ps(scores + ld + t, hsum16x4(b[0], b[1], b[2], b[3]));
	}
	for (; t < n; t++) {
		const float *k = keys + t * ks;
		__m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
		UNROLL for (int c = 0; c < NV; c++) {
			__m512 kv = _mm512_loadu_ps(k + c * 16);
			a = _mm512_fmadd_ps(qa[c], kv, a);
			b = _mm512_fmadd_ps(qb[c], kv, b);
		}
		scores[t] = _mm512_reduce_add_ps(a);
		scores[ld + t] = _mm512_reduce_add_ps(b);
	}
}

static void qk_avx512(float *scores, int64_t ld, const float *q, int32_t group, const float *keys, int64_t ks,
                      int32_t n, int32_t hd)
{
	int32_t g = 0;
	for (; g + 2 <= group; g += 2) {
		float *sg = scores + g * ld;
		const float *qg = q + (int64_t)g * hd;
		if (hd == 128)
			qk2(sg, ld, qg, 8, keys, ks, n, hd);
		else if (hd == 64)
			qk2(sg, ld, qg, 4, keys, ks, n, hd);
		else if (hd == 32)
			qk2(sg, ld, qg, 2, keys, ks, n, hd);
		else
			break;
	}
	for (; g < group; g++)
		for (int32_t t = 0; t < n; t++)
			scores[g * ld + t] = dot_avx512(q + (int64_t)g * hd, keys + t * ks, hd);
}

/* NG heads' output rows, NC · 16 dimensions of them, in registers while the value rows stream past. */
INLINE void pv_block(float *out, const float *p, int64_t ld, const int NG, const int NC, const float *values,
                     int64_t vs, int32_t n, int32_t hd)
{
	__m512 acc[4][4];   /* NG, NC ≤ 4 */
	UNROLL for (int g = 0; g < NG; g++)
		UNROLL for (int c = 0; c < NC; c++)
			acc[g][c] = _mm512_loadu_ps(out + (int64_t)g * hd + c * 16);
	for (int32_t t = 0; t < n; t++) {
		const float *v = values + t * vs;
		__m512 vv[4];
		UNROLL for (int c = 0; c < NC; c++)
			vv[c] = _mm512_loadu_ps(v + c * 16);
		UNROLL for (int g = 0; g < NG; g++) {
			__m512 sc = _mm512_set1_ps(p[g * ld + t]);
			UNROLL for (int c = 0; c < NC; c++)
				acc[g][c] = _mm512_fmadd_ps(sc, vv[c], acc[g][c]);
		}
	}
	UNROLL for (int g = 0; g < NG; g++)
		UNROLL for (int c = 0; c < NC; c++)
			_mm512_storeu_ps(out + (int64_t)g * hd + c * 16, acc[g][c]);
}

static void pv_avx512(float *out, const float *p, int64_t ld, int32_t group, const float *values, int64_t vs,
                      int32_t n, int32_t hd)
{
	if (hd == 32) {   /* the same sums as the axpy below (one FMA per value element, keys in order), in registers */
		for (int32_t g0 = 0; g0 < group; g0 += 4) {
			float *o = out + (int64_t)g0 * hd;
			const float *pg = p + g0 * ld;
			switch (group - g0 < 4 ? group - g0 : 4) {
			case 1: pv_block(o, pg, ld, 1, 2, values, vs, n, hd); break;
			case 2: pv_block(o, pg, ld, 2, 2, values, vs, n, hd); break;
			case 3: pv_block(o, pg, ld, 3, 2, values, vs, n, hd); break;
			default: pv_block(o, pg, ld, 4, 2, values, vs, n, hd); break;
			}
		}
		return;
	}
	if (hd % 64 != 0) {
		for (int32_t t = 0; t < n; t++)
			for (int32_t g = 0; g < group; g++)
				axpy_avx512(out + (int64_t)g * hd, p[g * ld + t], values + t * vs, hd);
		return;
	}
	for (int32_t d0 = 0; d0 < hd; d0 += 64)
		for (int32_t g0 = 0; g0 < group; g0 += 4) {
			float *o = out + (int64_t)g0 * hd + d0;
			const float *pg = p + g0 * ld, *v = values + d0;
			switch (group - g0 < 4 ? group - g0 : 4) {
			case 1: pv_block(o, pg, ld, 1, 4, v, vs, n, hd); break;
			case 2: pv_block(o, pg, ld, 2, 4, v, vs, n, hd); break;
			case 3: pv_block(o, pg, ld, 3, 4, v, vs, n, hd); break;
			default: pv_block(o, pg, ld, 4, 4, v, vs, n, hd); break;
			}
		}
}

const cpu_kernels cpu_kernels_avx512 = {
	/* .isa = */ "avx512",
	/* .panel_rows = */ 16,
	/* .panel_mm = */ panel_mm_avx512,
	/* .to_f32 = */ to_f32_avx512,
	/* .dot = */ dot_avx512,
	/* .exp_sum = */ exp_sum_avx512,
	/* .axpy = */ axpy_avx512,
	/* .qk = */ qk_avx512,
	/* .pv = */ pv_avx512,
};
