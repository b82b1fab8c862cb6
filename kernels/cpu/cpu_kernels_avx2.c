/* kernels/cpu/cpu_kernels_avx2.c — the AVX2/FMA/F16C table. Compiled with -mavx2 -mfma -mf16c and used
 * only when the CPU has them (cpu_kernels_select). */
#include "kernels/cpu/cpu_kernels.h"

#include <immintrin.h>
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

static float dot_avx2(const float *a, const float *b, int64_t n)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
	}
	for (; i + 8 <= n; i += 8)
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
	float s = hsum8(_mm256_add_ps(s0, s1));
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
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

static double exp_sum_avx2(float *s, int64_t n, float mx)
{
	const __m256 m = _mm256_set1_ps(mx);
	__m256 acc = _mm256_setzero_ps();
	int64_t t = 0;
	for (; t + 8 <= n; t += 8) {
		__m256 e = exp_le0(_mm256_sub_ps(_mm256_loadu_ps(s + t), m));
		_mm256_storeu_ps(s + t, e);
		acc = _mm256_add_ps(acc, e);
	}
	if (t < n) {
		float tail[8] = { 0 };
		memcpy(tail, s + t, (size_t)(n - t) * sizeof(float));
		__m256 e = exp_le0(_mm256_sub_ps(_mm256_loadu_ps(tail), m));
		_mm256_storeu_ps(tail, e);
		memcpy(s + t, tail, (size_t)(n - t) * sizeof(float));
		for (int64_t i = t; i < n; i++)
			acc = _mm256_add_ps(acc, _mm256_setr_ps(s[i], 0, 0, 0, 0, 0, 0, 0));
	}
	return (double)hsum8(acc);
}

static void axpy_avx2(float *y, float a, const float *x, int64_t n)
{
	__m256 av = _mm256_set1_ps(a);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += a * x[i];
}

static void qk_avx2(float *scores, int64_t ld, const float *q, int32_t group, const float *keys, int64_t ks,
                    int32_t n, int32_t hd)
{
	for (int32_t t = 0; t < n; t++)
		for (int32_t g = 0; g < group; g++)
			scores[g * ld + t] = dot_avx2(q + (int64_t)g * hd, keys + t * ks, hd);
}

static void pv_avx2(float *out, const float *p, int64_t ld, int32_t group, const float *values, int64_t vs, int32_t n,
                    int32_t hd)
{
	for (int32_t t = 0; t < n; t++)
		for (int32_t g = 0; g < group; g++)
			axpy_avx2(out + (int64_t)g * hd, p[g * ld + t], values + t * vs, hd);
}

const cpu_kernels cpu_kernels_avx2 = {
	/* .isa = */ "avx2",
	/* .panel_rows = */ 4,
	/* .panel_mm = */ panel_mm_avx2,
	/* .to_f32 = */ to_f32_avx2,
	/* .dot = */ dot_avx2,
	/* .exp_sum = */ exp_sum_avx2,
	/* .axpy = */ axpy_avx2,
	/* .qk = */ qk_avx2,
	/* .pv = */ pv_avx2,
};
