/* kernels/cpu/cpu_kernels_avx2.c — the AVX2/FMA/F16C table. Compiled with -mavx2 -mfma -mf16c and used
 * only when the CPU has them (cpu_kernels_select). */
#include "kernels/cpu/cpu_kernels.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* 8 stored elements at w + i → 8 floats. */
INLINE __m256 load8(const void *w, aah_dtype t, int64_t i)
{
	if (t == AAH_DTYPE_BF16) {
		__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	}
	if (t == AAH_DTYPE_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
	return _mm256_loadu_ps((const float *)w + i);
}

INLINE float load1(const void *w, aah_dtype t, int64_t i)
{
	if (t == AAH_DTYPE_BF16)
		return cpu_bf16_to_f32(((const uint16_t *)w)[i]);
	if (t == AAH_DTYPE_F16)
		return cpu_f16_to_f32(((const uint16_t *)w)[i]);
	return ((const float *)w)[i];
}

static inline float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* GP panels (two 8-lane halves each) against N activation rows, k in order, one FMA per k (cpu_kernels.h): the
 * AVX-512 table's scheme in 8-lane halves. bf16 pairs: even k = word << 16, odd k = word with its low half cleared. */
#define PANEL_PREFETCH 2048   /* bytes ahead in each panel's stream */

INLINE void panel_block(float *out, int64_t ldo, const float *xt, const int N, const char *w, int64_t pstride,
                        const int GP, const aah_dtype T, int64_t K, int64_t m0, int64_t M)
{
	enum { H = 2 };          /* halves per panel */
	__m256 acc[4][4];        /* GP·H ≤ 4, N ≤ 4 */
	UNROLL for (int g = 0; g < GP * H; g++)
		UNROLL for (int i = 0; i < N; i++)
			acc[g][i] = _mm256_setzero_ps();
	int64_t k = 0;
	if (T == AAH_DTYPE_BF16) {
		const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
		for (; k + 2 <= K; k += 2) {
			__m256 we[4], wo[4];
			UNROLL for (int g = 0; g < GP * H; g++) {
				const char *src = w + (g / H) * pstride + k * 32 + (g % H) * 32;
				if (g % H == 0)
					_mm_prefetch(src + PANEL_PREFETCH, _MM_HINT_T0);
				__m256i v = _mm256_load_si256((const __m256i *)src);
				we[g] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
				wo[g] = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
			}
			UNROLL for (int i = 0; i < N; i++) {
				__m256 xe = _mm256_set1_ps(xt[k * N + i]), xo = _mm256_set1_ps(xt[(k + 1) * N + i]);
				UNROLL for (int g = 0; g < GP * H; g++) {
					acc[g][i] = _mm256_fmadd_ps(we[g], xe, acc[g][i]);
					acc[g][i] = _mm256_fmadd_ps(wo[g], xo, acc[g][i]);
				}
			}
		}
		if (k < K) {   /* odd K: the last pair's even half */
			UNROLL for (int g = 0; g < GP * H; g++) {
				__m256i v = _mm256_load_si256((const __m256i *)(w + (g / H) * pstride + k * 32 + (g % H) * 32));
				__m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
				UNROLL for (int i = 0; i < N; i++)
					acc[g][i] = _mm256_fmadd_ps(we, _mm256_set1_ps(xt[k * N + i]), acc[g][i]);
			}
		}
	} else {
		const int64_t es = T == AAH_DTYPE_F32 ? 4 : 2;
		for (; k < K; k++) {
			__m256 wv[4];
			UNROLL for (int g = 0; g < GP * H; g++) {
				const char *src = w + (g / H) * pstride + (k * CPU_PANEL + (g % H) * 8) * es;
				if (g % H == 0)
					_mm_prefetch(src + PANEL_PREFETCH, _MM_HINT_T0);
				wv[g] = T == AAH_DTYPE_F32 ? _mm256_load_ps((const float *)src)
				                           : _mm256_cvtph_ps(_mm_load_si128((const __m128i *)src));
			}
			UNROLL for (int i = 0; i < N; i++) {
				__m256 xv = _mm256_set1_ps(xt[k * N + i]);
				UNROLL for (int g = 0; g < GP * H; g++)
					acc[g][i] = _mm256_fmadd_ps(wv[g], xv, acc[g][i]);
			}
		}
	}
	UNROLL for (int g = 0; g < GP * H; g++) {
		const int64_t m = m0 + g * 8;
		if (m >= M)
			break;
		UNROLL for (int i = 0; i < N; i++) {
			if (M - m >= 8) {
				_mm256_storeu_ps(out + i * ldo + m, acc[g][i]);
			} else {
				float tmp[8];
				_mm256_storeu_ps(tmp, acc[g][i]);
				memcpy(out + i * ldo + m, tmp, (size_t)(M - m) * sizeof(float));
			}
		}
	}
}

INLINE void panel_rows_typed(float *out, int64_t ldo, const float *xt, const int N, const void *w, const aah_dtype T,
                             const int GP, int64_t K, int64_t M, int64_t p0, int64_t p1)
{
	const int64_t pstride = cpu_packed_elems(T, CPU_PANEL, K) * (T == AAH_DTYPE_F32 ? 4 : 2);
	int64_t p = p0;
	for (; p + GP <= p1; p += GP)
		panel_block(out, ldo, xt, N, (const char *)w + p * pstride, pstride, GP, T, K, p * CPU_PANEL, M);
	for (; p < p1; p++)
		panel_block(out, ldo, xt, N, (const char *)w + p * pstride, pstride, 1, T, K, p * CPU_PANEL, M);
}

/* One row: two panels (four independent sums hide the FMA latency); 2–4 rows: one panel, 8 of the 16 registers. */
#define PANEL_CASES(T) \
	switch (n) { \
	case 1: panel_rows_typed(out, ldo, xt, 1, w, T, 2, K, M, p0, p1); return; \
	case 2: panel_rows_typed(out, ldo, xt, 2, w, T, 1, K, M, p0, p1); return; \
	case 3: panel_rows_typed(out, ldo, xt, 3, w, T, 1, K, M, p0, p1); return; \
	default: panel_rows_typed(out, ldo, xt, 4, w, T, 1, K, M, p0, p1); return; \
	}

static void panel_mm_avx2(float *out, int64_t ldo, const float *xt, int32_t n, const void *w, aah_dtype t,
                          int64_t K, int64_t M, int64_t p0, int64_t p1)
{
	if (t == AAH_DTYPE_BF16)
		PANEL_CASES(AAH_DTYPE_BF16)
	if (t == AAH_DTYPE_F16)
		PANEL_CASES(AAH_DTYPE_F16)
	PANEL_CASES(AAH_DTYPE_F32)
}

static void to_f32_avx2(float *dst, const void *src, aah_dtype t, int64_t count)
{
	if (t == AAH_DTYPE_F32) {
		memcpy(dst, src, (size_t)count * sizeof(float));
		return;
	}
	int64_t i = 0;
	for (; i + 8 <= count; i += 8)
		_mm256_storeu_ps(dst + i, load8(src, t, i));
	for (; i < count; i++)
		dst[i] = load1(src, t, i);
}

/* The sums of a, b, c and d's 8 lanes in lanes 0 … 3, each exactly as hsum8 sums it: (v0+v4 + v2+v6) + (v1+v5 + v3+v7)
 * (float addition commutes, so the pairing alone fixes the result). */
INLINE __m128 hsum8x4(__m256 a, __m256 b, __m256 c, __m256 d)
{
	const __m128 ta = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	const __m128 tb = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
	const __m128 tc = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
	const __m128 td = _mm_add_ps(_mm256_castps256_ps128(d), _mm256_extractf128_ps(d, 1));
	/* [x0 + x2, x1 + x3] for x = a, b and c, d, then the two halves of each added */
	const __m128 ab = _mm_add_ps(_mm_shuffle_ps(ta, tb, 0x44), _mm_shuffle_ps(ta, tb, 0xee));
	const __m128 cd = _mm_add_ps(_mm_shuffle_ps(tc, td, 0x44), _mm_shuffle_ps(tc, td, 0xee));
	return _mm_hadd_ps(ab, cd);
}

/* Up to 8 stored elements at w + i (n of them, 0 < n ≤ 8) → 8 floats, zeros beyond n. */
INLINE __m256 load8_part(const void *w, aah_dtype t, int64_t i, int32_t n)
{
	float tmp[8] = { 0 };
	for (int32_t k = 0; k < n; k++)
		tmp[k] = load1(w, t, i + k);
	return _mm256_loadu_ps(tmp);
}

/* f16: F16C's round-to-nearest-even (cpu_f32_to_f16's for every non-NaN input), a NaN made sign | 0x7e00 as
 * cpu_f32_to_f16 makes it; bf16: cpu_f32_to_bf16's integer rounding; 8 lanes at a time. */
INLINE __m128i f16_of8(__m256 x)
{
	__m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
	if (_mm256_movemask_ps(nan)) {
		const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 16), _mm256_set1_epi32(0x8000));
		const __m256i q = _mm256_or_si256(sign, _mm256_set1_epi32(0x7e00));
		const __m256i nm = _mm256_castps_si256(nan);
		const __m128i q16 = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
		const __m128i m16 = _mm_packs_epi32(_mm256_castsi256_si128(nm), _mm256_extracti128_si256(nm, 1));
		h = _mm_blendv_epi8(h, q16, m16);
	}
	return h;
}

INLINE __m128i bf16_of8(__m256 x)
{
	const __m256i u = _mm256_castps_si256(x);
	__m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
	                                                 _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
	r = _mm256_srli_epi32(r, 16);
	/* NaN: |u| > 0x7f800000, as signed integers (both sides are below 2^31) */
	const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
	                                       _mm256_set1_epi32(0x7f800000));
	r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
	return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

static void from_f32_avx2(void *dst, aah_dtype t, const float *src, int64_t count)
{
	if (t == AAH_DTYPE_F32) {
		memcpy(dst, src, (size_t)count * sizeof(float));
		return;
	}
	uint16_t *d = dst;
	int64_t i = 0;
	for (; i + 8 <= count; i += 8) {
		const __m256 x = _mm256_loadu_ps(src + i);
		_mm_storeu_si128((__m128i *)(d + i), t == AAH_DTYPE_F16 ? f16_of8(x) : bf16_of8(x));
	}
	for (; i < count; i++)
		d[i] = t == AAH_DTYPE_F16 ? cpu_f32_to_f16(src[i]) : cpu_f32_to_bf16(src[i]);
}

/* exp(x) for x ≤ 0 as in the AVX-512 table; 2^n built in the exponent bits (n ≥ -126 after the clamp). */
INLINE __m256 exp_le0(__m256 x)
{
	x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
	                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 y = _mm256_set1_ps(1.9875691500e-4f);
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
	y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

static double exp_sum_avx2(float *s, int64_t n, float mx, double *ps)
{
	const __m256 m = _mm256_set1_ps(mx);
	__m256 acc = _mm256_setzero_ps(), pacc = _mm256_setzero_ps();
	int64_t t = 0;
	for (; t + 8 <= n; t += 8) {
		const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + t), m), e = exp_le0(x);
		_mm256_storeu_ps(s + t, e);
		acc = _mm256_add_ps(acc, e);
		if (ps)
			pacc = _mm256_fmadd_ps(e, x, pacc);
	}
	if (t < n) {   /* the tail through a buffer, padded with mx: its lanes then give exp(0) = 1, masked away */
		float tail[8];
		for (int i = 0; i < 8; i++)
			tail[i] = t + i < n ? s[t + i] : mx;
		const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - t)),
		                                                           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
		const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(tail), m), e = _mm256_and_ps(exp_le0(x), keep);
		_mm256_storeu_ps(tail, e);
		memcpy(s + t, tail, (size_t)(n - t) * sizeof(float));
		acc = _mm256_add_ps(acc, e);
		if (ps)
			pacc = _mm256_fmadd_ps(e, x, pacc);
	}
	if (ps)
		*ps = (double)hsum8(pacc);
	return (double)hsum8(acc);
}

static float max_avx2(const float *s, int64_t n, float init)
{
	__m256 m = _mm256_set1_ps(init);
	int64_t t = 0;
	for (; t + 8 <= n; t += 8)
		m = _mm256_max_ps(m, _mm256_loadu_ps(s + t));
	__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	h = _mm_max_ss(h, _mm_movehdup_ps(h));
	float r = _mm_cvtss_f32(h);
	for (; t < n; t++)
		r = s[t] > r ? s[t] : r;
	return r;
}

/* NR query rows × NK keys: sums over d 8 dimensions at a time (the last chunk zero-padded), each into its own
 * accumulator from zero, reduced as hsum8 reduces (hsum8x4 for four keys): a score's bits depend only on its query row
 * and key. */
INLINE void qk_block(float *S, int64_t lds, const float *Q, int64_t ldq, const int NR, const void *K, const aah_dtype T,
                     int64_t ldk, const int NK, int32_t hd)
{
	__m256 acc[2][4];
	UNROLL for (int i = 0; i < NR; i++)
		UNROLL for (int u = 0; u < NK; u++)
			acc[i][u] = _mm256_setzero_ps();
	int32_t d = 0;
	for (; d + 8 <= hd; d += 8) {
		__m256 kv[4];
		UNROLL for (int u = 0; u < NK; u++)
			kv[u] = load8(K, T, u * ldk + d);
		UNROLL for (int i = 0; i < NR; i++) {
			const __m256 qv = _mm256_loadu_ps(Q + i * ldq + d);
			UNROLL for (int u = 0; u < NK; u++)
				acc[i][u] = _mm256_fmadd_ps(qv, kv[u], acc[i][u]);
		}
	}
	if (d < hd) {
		__m256 kv[4];
		UNROLL for (int u = 0; u < NK; u++)
			kv[u] = load8_part(K, T, u * ldk + d, hd - d);
		UNROLL for (int i = 0; i < NR; i++) {
			const __m256 qv = load8_part(Q, AAH_DTYPE_F32, i * ldq + d, hd - d);
			UNROLL for (int u = 0; u < NK; u++)
				acc[i][u] = _mm256_fmadd_ps(qv, kv[u], acc[i][u]);
		}
	}
	UNROLL for (int i = 0; i < NR; i++) {
		if (NK == 4)
			_mm_storeu_ps(S + i * lds, hsum8x4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
		else
			UNROLL for (int u = 0; u < NK; u++)
				S[i * lds + u] = hsum8(acc[i][u]);
	}
}

INLINE void qk_rows(float *S, int64_t lds, const float *Q, int64_t ldq, const int NR, const void *K, const aah_dtype T,
                    int64_t ldk, int32_t nk, int32_t hd)
{
	const size_t es = T == AAH_DTYPE_F32 ? 4 : 2;
	int32_t j = 0;
	for (; j + 4 <= nk; j += 4)
		qk_block(S + j, lds, Q, ldq, NR, (const char *)K + (size_t)(j * ldk) * es, T, ldk, 4, hd);
	for (; j < nk; j++)
		qk_block(S + j, lds, Q, ldq, NR, (const char *)K + (size_t)(j * ldk) * es, T, ldk, 1, hd);
}

INLINE void qk_typed(float *S, int64_t lds, const float *Q, int64_t ldq, int32_t nq, const void *K, const aah_dtype T,
                     int64_t ldk, int32_t nk, int32_t hd)
{
	int32_t i = 0;
	for (; i + 2 <= nq; i += 2)
		qk_rows(S + i * lds, lds, Q + i * ldq, ldq, 2, K, T, ldk, nk, hd);
	if (i < nq)
		qk_rows(S + i * lds, lds, Q + i * ldq, ldq, 1, K, T, ldk, nk, hd);
}

static void qk_tile_avx2(float *S, int64_t lds, const float *Q, int64_t ldq, int32_t nq, const void *K, aah_dtype t,
                         int64_t ldk, int32_t nk, int32_t hd)
{
	if (t == AAH_DTYPE_BF16)
		qk_typed(S, lds, Q, ldq, nq, K, AAH_DTYPE_BF16, ldk, nk, hd);
	else if (t == AAH_DTYPE_F16)
		qk_typed(S, lds, Q, ldq, nq, K, AAH_DTYPE_F16, ldk, nk, hd);
	else
		qk_typed(S, lds, Q, ldq, nq, K, AAH_DTYPE_F32, ldk, nk, hd);
}

/* NR output rows × NC vectors of 8 dimensions from d0 in registers while the value rows stream past. */
INLINE void pv_block(float *O, int64_t ldo, const float *c, const float *P, int64_t ldp, const int NR, const void *V,
                     const aah_dtype T, int64_t ldv, int32_t nk, const int NC, int32_t d0)
{
	__m256 acc[2][4];
	UNROLL for (int i = 0; i < NR; i++) {
		const __m256 ci = _mm256_set1_ps(c ? c[i] : 1.0f);
		UNROLL for (int v = 0; v < NC; v++) {
			acc[i][v] = _mm256_loadu_ps(O + i * ldo + d0 + v * 8);
			if (c)
				acc[i][v] = _mm256_mul_ps(acc[i][v], ci);
		}
	}
	for (int32_t j = 0; j < nk; j++) {
		__m256 vv[4];
		UNROLL for (int v = 0; v < NC; v++)
			vv[v] = load8(V, T, j * ldv + d0 + v * 8);
		UNROLL for (int i = 0; i < NR; i++) {
			const __m256 p = _mm256_broadcast_ss(P + i * ldp + j);
			UNROLL for (int v = 0; v < NC; v++)
				acc[i][v] = _mm256_fmadd_ps(p, vv[v], acc[i][v]);
		}
	}
	UNROLL for (int i = 0; i < NR; i++)
		UNROLL for (int v = 0; v < NC; v++)
			_mm256_storeu_ps(O + i * ldo + d0 + v * 8, acc[i][v]);
}

#define PV_NC(NR_, T_) \
	switch (nc) { \
	case 1: pv_block(O, ldo, c, P, ldp, NR_, V, T_, ldv, nk, 1, d0); break; \
	case 2: pv_block(O, ldo, c, P, ldp, NR_, V, T_, ldv, nk, 2, d0); break; \
	case 3: pv_block(O, ldo, c, P, ldp, NR_, V, T_, ldv, nk, 3, d0); break; \
	default: pv_block(O, ldo, c, P, ldp, NR_, V, T_, ldv, nk, 4, d0); break; \
	}

INLINE void pv_typed(float *O, int64_t ldo, const float *c, const float *P, int64_t ldp, int32_t nq, const void *V,
                     const aah_dtype T, int64_t ldv, int32_t nk, int32_t hd)
{
	const int32_t nv = hd / 8;   /* whole vectors; the last hd % 8 dimensions one by one below */
	for (int32_t i = 0; i < nq; i += 2, O += 2 * ldo, P += 2 * ldp, c = c ? c + 2 : NULL) {
		for (int32_t v0 = 0; v0 < nv; v0 += 4) {
			const int32_t nc = nv - v0 < 4 ? nv - v0 : 4, d0 = v0 * 8;
			if (nq - i >= 2)
				PV_NC(2, T)
			else
				PV_NC(1, T)
		}
		for (int32_t r = 0; r < 2 && i + r < nq; r++)
			for (int32_t d = nv * 8; d < hd; d++) {   /* the same arithmetic: a multiply by c, then fused multiply-adds */
				float o = O[r * ldo + d];
				if (c)
					o *= c[r];
				for (int32_t j = 0; j < nk; j++)
					o = fmaf(P[r * ldp + j], load1(V, T, j * ldv + d), o);
				O[r * ldo + d] = o;
			}
	}
}

static void pv_tile_avx2(float *O, int64_t ldo, const float *c, const float *P, int64_t ldp, int32_t nq,
                         const void *V, aah_dtype t, int64_t ldv, int32_t nk, int32_t hd)
{
	if (t == AAH_DTYPE_BF16)
		pv_typed(O, ldo, c, P, ldp, nq, V, AAH_DTYPE_BF16, ldv, nk, hd);
	else if (t == AAH_DTYPE_F16)
		pv_typed(O, ldo, c, P, ldp, nq, V, AAH_DTYPE_F16, ldv, nk, hd);
	else
		pv_typed(O, ldo, c, P, ldp, nq, V, AAH_DTYPE_F32, ldv, nk, hd);
}

const cpu_kernels cpu_kernels_avx2 = {
	/* .isa = */ "avx2",
	/* .panel_rows = */ 4,
	/* .panel_mm = */ panel_mm_avx2,
	/* .to_f32 = */ to_f32_avx2,
	/* .from_f32 = */ from_f32_avx2,
	/* .exp_sum = */ exp_sum_avx2,
	/* .max = */ max_avx2,
	/* .qk_tile = */ qk_tile_avx2,
	/* .pv_tile = */ pv_tile_avx2,
};
