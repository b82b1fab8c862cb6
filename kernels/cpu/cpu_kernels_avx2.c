/* kernels/cpu/cpu_kernels_avx2.c — the AVX2/FMA/F16C table. Compiled with -mavx2 -mfma -mf16c and used
 * only when the CPU has them (cpu_kernels_select). */
#include "kernels/cpu/cpu_kernels.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
#define PREFETCH_ELEMS 512

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

#define GR 2   /* weight rows per gemv pass: 2 rows × 4 activation rows = 8 of the 16 registers */

/* GR weight rows (of type T) against N activation rows, the weights read once. Loops have constant bounds
 * and are unrolled so that the accumulators stay in registers. */
INLINE void gemv_block(float *out, int64_t ldo, const float *x, const int N, const void *w, const aah_dtype T,
                       int64_t K, int64_t m, int rows)
{
	const size_t es = T == AAH_DTYPE_F32 ? 4 : 2;
	const char *wr[GR];
	UNROLL for (int j = 0; j < GR; j++)
		wr[j] = (const char *)w + (size_t)(m + (j < rows ? j : 0)) * (size_t)K * es;
	float sum[GR][4] = { { 0 } };   /* set by the first slice (K ≥ 1) */
	for (int64_t kb = 0; kb < K; kb += CPU_KC) {   /* the slices of CPU_KC (cpu_kernels.h) */
		const int64_t ke = K - kb < CPU_KC ? K : kb + CPU_KC;
		const int64_t ke8 = kb + ((ke - kb) & ~(int64_t)7);
		__m256 acc[GR][4];
		UNROLL for (int j = 0; j < GR; j++)
			UNROLL for (int i = 0; i < 4; i++)
				acc[j][i] = _mm256_setzero_ps();
		for (int64_t k = kb; k < ke8; k += 8) {
			__m256 wv[GR];
			UNROLL for (int j = 0; j < GR; j++) {
				_mm_prefetch(wr[j] + (size_t)(k + PREFETCH_ELEMS) * es, _MM_HINT_T0);
				wv[j] = load8(wr[j], T, k);
			}
			UNROLL for (int i = 0; i < N; i++) {
				__m256 xv = _mm256_loadu_ps(x + i * K + k);
				UNROLL for (int j = 0; j < GR; j++)
					acc[j][i] = _mm256_fmadd_ps(wv[j], xv, acc[j][i]);
			}
		}
		UNROLL for (int i = 0; i < N; i++)
			UNROLL for (int j = 0; j < GR; j++) {
				float v = hsum8(acc[j][i]);
				for (int64_t k = ke8; k < ke; k++)
					v += x[i * K + k] * load1(wr[j], T, k);
				sum[j][i] = kb > 0 ? sum[j][i] + v : v;
			}
	}
	UNROLL for (int i = 0; i < N; i++)
		UNROLL for (int j = 0; j < GR; j++)
			if (j < rows)
				out[i * ldo + m + j] = sum[j][i];
}

INLINE void gemv_typed(float *out, int64_t ldo, const float *x, const int N, const void *w, const aah_dtype T,
                       int64_t K, int64_t m0, int64_t m1)
{
	for (int64_t m = m0; m < m1; m += GR)
		gemv_block(out, ldo, x, N, w, T, K, m, m1 - m < GR ? (int)(m1 - m) : GR);
}

#define GEMV_CASES(T) \
	switch (n) { \
	case 1: gemv_typed(out, ldo, x, 1, w, T, K, m0, m1); return; \
	case 2: gemv_typed(out, ldo, x, 2, w, T, K, m0, m1); return; \
	case 3: gemv_typed(out, ldo, x, 3, w, T, K, m0, m1); return; \
	default: gemv_typed(out, ldo, x, 4, w, T, K, m0, m1); return; \
	}

static void gemv_avx2(float *out, int64_t ldo, const float *x, int32_t n, const void *w, aah_dtype t, int64_t K,
                      int64_t m0, int64_t m1)
{
	if (t == AAH_DTYPE_BF16)
		GEMV_CASES(AAH_DTYPE_BF16)
	if (t == AAH_DTYPE_F16)
		GEMV_CASES(AAH_DTYPE_F16)
	GEMV_CASES(AAH_DTYPE_F32)
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

#define R 2
#define C 4
/* R × C dot products over K; K need not be a multiple of 8. */
static void tile_avx2(float *out, int64_t ldo, const float *x, int64_t ldx, const float *panel, int64_t ldp,
                      int64_t K, int accumulate)
{
	__m256 acc[R][C];
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int c = 0; c < C; c++)
			acc[r][c] = _mm256_setzero_ps();
	const int64_t K8 = K & ~(int64_t)7;
	for (int64_t k = 0; k < K8; k += 8) {
		__m256 p[C];
		UNROLL for (int c = 0; c < C; c++)
			p[c] = _mm256_loadu_ps(panel + c * ldp + k);
		UNROLL for (int r = 0; r < R; r++) {
			__m256 xv = _mm256_loadu_ps(x + r * ldx + k);
			UNROLL for (int c = 0; c < C; c++)
				acc[r][c] = _mm256_fmadd_ps(xv, p[c], acc[r][c]);
		}
	}
	UNROLL for (int r = 0; r < R; r++)
		UNROLL for (int c = 0; c < C; c++) {
			float s = hsum8(acc[r][c]);
			for (int64_t k = K8; k < K; k++)
				s += x[r * ldx + k] * panel[c * ldp + k];
			out[r * ldo + c] = accumulate ? out[r * ldo + c] + s : s;
		}
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
	/* .tile_rows = */ R,
	/* .tile_cols = */ C,
	/* .gemv = */ gemv_avx2,
	/* .to_f32 = */ to_f32_avx2,
	/* .tile = */ tile_avx2,
	/* .dot = */ dot_avx2,
	/* .axpy = */ axpy_avx2,
	/* .qk = */ qk_avx2,
	/* .pv = */ pv_avx2,
};
