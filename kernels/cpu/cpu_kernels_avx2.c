/* kernels/cpu/cpu_kernels_avx2.c — the AVX2/FMA/F16C table. Compiled with -mavx2 -mfma -mf16c and used
 * only when the CPU has them (cpu_kernels_select). */
#include "kernels/cpu/cpu_kernels.h"

#include <immintrin.h>
#include <string.h>

/* 8 stored elements at w + i → 8 floats. */
static inline __m256 load8(const void *w, aah_dtype t, int64_t i)
{
	switch (t) {
	case AAH_DTYPE_BF16: {
		__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	}
	case AAH_DTYPE_F16:
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
	default:
		return _mm256_loadu_ps((const float *)w + i);
	}
}

static inline float load1(const void *w, aah_dtype t, int64_t i)
{
	switch (t) {
	case AAH_DTYPE_BF16: return cpu_bf16_to_f32(((const uint16_t *)w)[i]);
	case AAH_DTYPE_F16: return cpu_f16_to_f32(((const uint16_t *)w)[i]);
	default: return ((const float *)w)[i];
	}
}

static inline float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* Two weight rows against up to four activation rows at once: 8 accumulators, w read once. */
static void gemv_avx2(float *out, int64_t ldo, const float *x, int32_t n, const void *w, aah_dtype t, int64_t K,
                      int64_t m0, int64_t m1)
{
	const size_t es = aah_dtype_size(t);
	const int64_t K8 = K & ~(int64_t)7;
	int64_t m = m0;
	for (; m + 2 <= m1; m += 2) {
		const char *w0 = (const char *)w + (size_t)m * (size_t)K * es;
		const char *w1 = w0 + (size_t)K * es;
		__m256 acc[2][4];
		for (int i = 0; i < 4; i++)
			acc[0][i] = acc[1][i] = _mm256_setzero_ps();
		for (int64_t k = 0; k < K8; k += 8) {
			__m256 a = load8(w0, t, k), b = load8(w1, t, k);
			for (int32_t i = 0; i < n; i++) {
				__m256 xv = _mm256_loadu_ps(x + i * K + k);
				acc[0][i] = _mm256_fmadd_ps(a, xv, acc[0][i]);
				acc[1][i] = _mm256_fmadd_ps(b, xv, acc[1][i]);
			}
		}
		for (int32_t i = 0; i < n; i++) {
			float s0 = hsum8(acc[0][i]), s1 = hsum8(acc[1][i]);
			for (int64_t k = K8; k < K; k++) {
				s0 += x[i * K + k] * load1(w0, t, k);
				s1 += x[i * K + k] * load1(w1, t, k);
			}
			out[i * ldo + m] = s0;
			out[i * ldo + m + 1] = s1;
		}
	}
	for (; m < m1; m++) {
		const char *w0 = (const char *)w + (size_t)m * (size_t)K * es;
		for (int32_t i = 0; i < n; i++) {
			__m256 acc = _mm256_setzero_ps();
			for (int64_t k = 0; k < K8; k += 8)
				acc = _mm256_fmadd_ps(load8(w0, t, k), _mm256_loadu_ps(x + i * K + k), acc);
			float s = hsum8(acc);
			for (int64_t k = K8; k < K; k++)
				s += x[i * K + k] * load1(w0, t, k);
			out[i * ldo + m] = s;
		}
	}
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
static void tile_avx2(float *out, int64_t ldo, const float *x, int64_t ldx, const float *panel, int64_t K)
{
	__m256 acc[R][C];
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			acc[r][c] = _mm256_setzero_ps();
	const int64_t K8 = K & ~(int64_t)7;
	for (int64_t k = 0; k < K8; k += 8) {
		__m256 p[C];
		for (int c = 0; c < C; c++)
			p[c] = _mm256_loadu_ps(panel + c * K + k);
		for (int r = 0; r < R; r++) {
			__m256 xv = _mm256_loadu_ps(x + r * ldx + k);
			for (int c = 0; c < C; c++)
				acc[r][c] = _mm256_fmadd_ps(xv, p[c], acc[r][c]);
		}
	}
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			float s = hsum8(acc[r][c]);
			for (int64_t k = K8; k < K; k++)
				s += x[r * ldx + k] * panel[c * K + k];
			out[r * ldo + c] = s;
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

const cpu_kernels cpu_kernels_avx2 = {
	/* .isa = */ "avx2",
	/* .tile_rows = */ R,
	/* .tile_cols = */ C,
	/* .gemv = */ gemv_avx2,
	/* .to_f32 = */ to_f32_avx2,
	/* .tile = */ tile_avx2,
	/* .dot = */ dot_avx2,
	/* .axpy = */ axpy_avx2,
};
