/* kernels/cpu/cpu_kernels_avx512.c — the AVX-512 table (F, BW, VL, DQ). Compiled with AVX-512 flags and used
 * only when the CPU has them (cpu_kernels_select); a panel × 16 rows of sums in registers.
 * Loops over tile shapes are unrolled at compile time (always_inline + constant bounds) so that every
 * accumulator lives in a register: a spilled accumulator costs a store-to-load round trip per FMA. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_bf16_round_avx512.h"

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

/* f16: the hardware's round-to-nearest-even (which is cpu_f32_to_f16's for every non-NaN input), a NaN made
 * sign | 0x7e00 as cpu_f32_to_f16 makes it; bf16: cpu_f32_to_bf16's integer rounding, 16 lanes at a time. */
INLINE __m256i f16_of16(__m512 x)
{
	__m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
	if (nan) {
		__m512i sign = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 16), _mm512_set1_epi32(0x8000));
		__m256i q = _mm512_cvtepi32_epi16(_mm512_or_si512(sign, _mm512_set1_epi32(0x7e00)));
		h = _mm256_mask_blend_epi16(nan, h, q);
	}
	return h;
}

INLINE __m256i bf16_of16(__m512 x)
{
	return _mm512_cvtepi32_epi16(cpu_bf16_bits16(x));
}

static void from_f32_avx512(void *dst, aah_dtype t, const float *src, int64_t count)
{
	if (t == AAH_DTYPE_F32) {
		memcpy(dst, src, (size_t)count * sizeof(float));
		return;
	}
	uint16_t *d = dst;
	int64_t i = 0;
	for (; i + 16 <= count; i += 16) {
		const __m512 x = _mm512_loadu_ps(src + i);
		_mm256_storeu_si256((__m256i *)(d + i), t == AAH_DTYPE_F16 ? f16_of16(x) : bf16_of16(x));
	}
	if (i < count) {
		const __mmask16 m = (__mmask16)((1u << (count - i)) - 1);
		const __m512 x = _mm512_maskz_loadu_ps(m, src + i);
		_mm256_mask_storeu_epi16(d + i, m, t == AAH_DTYPE_F16 ? f16_of16(x) : bf16_of16(x));
	}
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

static double exp_sum_avx512(float *s, int64_t n, float mx, double *ps)
{
	const __m512 m = _mm512_set1_ps(mx);
	__m512 acc = _mm512_setzero_ps(), pacc = _mm512_setzero_ps();
	int64_t t = 0;
	for (; t + 16 <= n; t += 16) {
		const __m512 x = _mm512_sub_ps(_mm512_loadu_ps(s + t), m), e = exp_le0(x);
		_mm512_storeu_ps(s + t, e);
		acc = _mm512_add_ps(acc, e);
		if (ps)
			pacc = _mm512_fmadd_ps(e, x, pacc);
	}
	if (t < n) {
		__mmask16 k = (__mmask16)((1u << (n - t)) - 1);
		const __m512 x = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, s + t), m);
		const __m512 e = _mm512_maskz_mov_ps(k, exp_le0(x));
		_mm512_mask_storeu_ps(s + t, k, e);
		acc = _mm512_add_ps(acc, e);
		if (ps)
			pacc = _mm512_fmadd_ps(e, x, pacc);
	}
	if (ps)
		*ps = (double)_mm512_reduce_add_ps(pacc);
	return (double)_mm512_reduce_add_ps(acc);
}

static float max_avx512(const float *s, int64_t n, float init)
{
	__m512 m = _mm512_set1_ps(init);
	int64_t t = 0;
	for (; t + 16 <= n; t += 16)
		m = _mm512_max_ps(m, _mm512_loadu_ps(s + t));
	if (t < n)
		m = _mm512_mask_max_ps(m, (__mmask16)((1u << (n - t)) - 1), m, _mm512_maskz_loadu_ps((__mmask16)((1u << (n - t)) - 1), s + t));
	return _mm512_reduce_max_ps(m);
}

/* NR query rows × NK keys of the score tile: NR·NK sums over d, 16 dimensions at a time (the last chunk masked), each
 * into its own accumulator from zero, then reduced exactly as _mm512_reduce_add_ps reduces (hsum16x4 for four keys):
 * a score's bits depend only on its query row and key. */
INLINE void qk_block(float *S, int64_t lds, const float *Q, int64_t ldq, const int NR, const void *K, const aah_dtype T,
                     int64_t ldk, const int NK, int32_t hd)
{
	__m512 acc[4][4];
	UNROLL for (int i = 0; i < NR; i++)
		UNROLL for (int u = 0; u < NK; u++)
			acc[i][u] = _mm512_setzero_ps();
	int32_t d = 0;
	for (; d + 16 <= hd; d += 16) {
		__m512 kv[4];
		UNROLL for (int u = 0; u < NK; u++)
			kv[u] = load16(K, T, u * ldk + d);
		UNROLL for (int i = 0; i < NR; i++) {
			const __m512 qv = _mm512_loadu_ps(Q + i * ldq + d);
			UNROLL for (int u = 0; u < NK; u++)
				acc[i][u] = _mm512_fmadd_ps(qv, kv[u], acc[i][u]);
		}
	}
	if (d < hd) {
		const __mmask16 m = (__mmask16)((1u << (hd - d)) - 1);
		__m512 kv[4];
		UNROLL for (int u = 0; u < NK; u++)
			kv[u] = load16_tail(K, T, u * ldk + d, m);
		UNROLL for (int i = 0; i < NR; i++) {
			const __m512 qv = _mm512_maskz_loadu_ps(m, Q + i * ldq + d);
			UNROLL for (int u = 0; u < NK; u++)
				acc[i][u] = _mm512_fmadd_ps(qv, kv[u], acc[i][u]);
		}
	}
	UNROLL for (int i = 0; i < NR; i++) {
		if (NK == 4)
			_mm_storeu_ps(S + i * lds, hsum16x4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
		else
			UNROLL for (int u = 0; u < NK; u++)
				S[i * lds + u] = _mm512_reduce_add_ps(acc[i][u]);
	}
}

INLINE void qk_rows(float *S, int64_t lds, const float *Q, int64_t ldq, const int NR, const void *K, const aah_dtype T,
                    int64_t ldk, int32_t nk, int32_t hd)
{
	int32_t j = 0;
	for (; j + 4 <= nk; j += 4)
		qk_block(S + j, lds, Q, ldq, NR, (const char *)K + (size_t)(j * ldk) * (T == AAH_DTYPE_F32 ? 4 : 2), T, ldk, 4,
		         hd);
	for (; j < nk; j++)
		qk_block(S + j, lds, Q, ldq, NR, (const char *)K + (size_t)(j * ldk) * (T == AAH_DTYPE_F32 ? 4 : 2), T, ldk, 1,
		         hd);
}

INLINE void qk_typed(float *S, int64_t lds, const float *Q, int64_t ldq, int32_t nq, const void *K, const aah_dtype T,
                     int64_t ldk, int32_t nk, int32_t hd)
{
	int32_t i = 0;
	for (; i + 4 <= nq; i += 4)
		qk_rows(S + i * lds, lds, Q + i * ldq, ldq, 4, K, T, ldk, nk, hd);
	switch (nq - i) {
	case 3: qk_rows(S + i * lds, lds, Q + i * ldq, ldq, 3, K, T, ldk, nk, hd); break;
	case 2: qk_rows(S + i * lds, lds, Q + i * ldq, ldq, 2, K, T, ldk, nk, hd); break;
	case 1: qk_rows(S + i * lds, lds, Q + i * ldq, ldq, 1, K, T, ldk, nk, hd); break;
	default: break;
	}
}

static void qk_tile_avx512(float *S, int64_t lds, const float *Q, int64_t ldq, int32_t nq, const void *K, aah_dtype t,
                           int64_t ldk, int32_t nk, int32_t hd)
{
	if (t == AAH_DTYPE_BF16)
		qk_typed(S, lds, Q, ldq, nq, K, AAH_DTYPE_BF16, ldk, nk, hd);
	else if (t == AAH_DTYPE_F16)
		qk_typed(S, lds, Q, ldq, nq, K, AAH_DTYPE_F16, ldk, nk, hd);
	else
		qk_typed(S, lds, Q, ldq, nq, K, AAH_DTYPE_F32, ldk, nk, hd);
}

/* NR output rows × NC vectors of 16 dimensions (from d0; the last one masked by `last`) in registers while the value
 * rows stream past: each loaded and widened once for the NR rows. */
INLINE void pv_block(float *O, int64_t ldo, const float *c, const float *P, int64_t ldp, const int NR, const void *V,
                     const aah_dtype T, int64_t ldv, int32_t nk, const int NC, __mmask16 last, int32_t d0)
{
	__m512 acc[4][4];
	UNROLL for (int i = 0; i < NR; i++) {
		const __m512 ci = _mm512_set1_ps(c ? c[i] : 1.0f);
		UNROLL for (int v = 0; v < NC; v++) {
			const __mmask16 m = v == NC - 1 ? last : (__mmask16)0xffff;
			acc[i][v] = _mm512_maskz_loadu_ps(m, O + i * ldo + d0 + v * 16);
			if (c)
				acc[i][v] = _mm512_mul_ps(acc[i][v], ci);
		}
	}
	for (int32_t j = 0; j < nk; j++) {
		__m512 vv[4];
		UNROLL for (int v = 0; v < NC; v++)
			vv[v] = v == NC - 1 ? load16_tail(V, T, j * ldv + d0 + v * 16, last) : load16(V, T, j * ldv + d0 + v * 16);
		UNROLL for (int i = 0; i < NR; i++) {
			const __m512 p = _mm512_set1_ps(P[i * ldp + j]);
			UNROLL for (int v = 0; v < NC; v++)
				acc[i][v] = _mm512_fmadd_ps(p, vv[v], acc[i][v]);
		}
	}
	UNROLL for (int i = 0; i < NR; i++)
		UNROLL for (int v = 0; v < NC; v++)
			_mm512_mask_storeu_ps(O + i * ldo + d0 + v * 16, v == NC - 1 ? last : (__mmask16)0xffff, acc[i][v]);
}

#define PV_NC(NR_, T_) \
	switch (nc) { \
	case 1: pv_block(O, ldo, c, P, ldp, NR_, V, T_, ldv, nk, 1, last, d0); break; \
	case 2: pv_block(O, ldo, c, P, ldp, NR_, V, T_, ldv, nk, 2, last, d0); break; \
	case 3: pv_block(O, ldo, c, P, ldp, NR_, V, T_, ldv, nk, 3, last, d0); break; \
	default: pv_block(O, ldo, c, P, ldp, NR_, V, T_, ldv, nk, 4, last, d0); break; \
	}

INLINE void pv_typed(float *O, int64_t ldo, const float *c, const float *P, int64_t ldp, int32_t nq, const void *V,
                     const aah_dtype T, int64_t ldv, int32_t nk, int32_t hd)
{
	const int32_t nv = (hd + 15) / 16;
	for (int32_t i = 0; i < nq; i += 4, O += 4 * ldo, P += 4 * ldp, c = c ? c + 4 : NULL)
		for (int32_t v0 = 0; v0 < nv; v0 += 4) {
			const int32_t nc = nv - v0 < 4 ? nv - v0 : 4, d0 = v0 * 16, rest = hd - (d0 + (nc - 1) * 16);
			const __mmask16 last = rest >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rest) - 1);
			switch (nq - i < 4 ? nq - i : 4) {
			case 1: PV_NC(1, T) break;
			case 2: PV_NC(2, T) break;
			case 3: PV_NC(3, T) break;
			default: PV_NC(4, T) break;
			}
		}
}

static void pv_tile_avx512(float *O, int64_t ldo, const float *c, const float *P, int64_t ldp, int32_t nq,
                           const void *V, aah_dtype t, int64_t ldv, int32_t nk, int32_t hd)
{
	if (t == AAH_DTYPE_BF16)
		pv_typed(O, ldo, c, P, ldp, nq, V, AAH_DTYPE_BF16, ldv, nk, hd);
	else if (t == AAH_DTYPE_F16)
		pv_typed(O, ldo, c, P, ldp, nq, V, AAH_DTYPE_F16, ldv, nk, hd);
	else
		pv_typed(O, ldo, c, P, ldp, nq, V, AAH_DTYPE_F32, ldv, nk, hd);
}

const cpu_kernels cpu_kernels_avx512 = {
	/* .isa = */ "avx512",
	/* .panel_rows = */ 16,
	/* .panel_mm = */ panel_mm_avx512,
	/* .to_f32 = */ to_f32_avx512,
	/* .from_f32 = */ from_f32_avx512,
	/* .exp_sum = */ exp_sum_avx512,
	/* .max = */ max_avx512,
	/* .qk_tile = */ qk_tile_avx512,
	/* .pv_tile = */ pv_tile_avx512,
};
