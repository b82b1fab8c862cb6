/* kernels/cpu/cpu_kernels_avx512.c — the AVX-512 table (F, BW, VL, DQ). Compiled with AVX-512 flags and used
 * only when the CPU has them (cpu_kernels_select); 32 vector registers allow a 6 × 4 prefill tile. */
#include "kernels/cpu/cpu_kernels.h"

#include <immintrin.h>
#include <string.h>

static inline __m512 load16(const void *w, aah_dtype t, int64_t i)
{
	switch (t) {
	case AAH_DTYPE_BF16: {
		__m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	}
	case AAH_DTYPE_F16:
		return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
	default:
		return _mm512_loadu_ps((const float *)w + i);
	}
}

/* The tail of a row (fewer than 16 elements) through a mask: zeros beyond n. */
static inline __m512 load16_tail(const void *w, aah_dtype t, int64_t i, int64_t n)
{
	__mmask16 m = (__mmask16)((1u << n) - 1);
	switch (t) {
	case AAH_DTYPE_BF16: {
		__m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	}
	case AAH_DTYPE_F16:
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i));
	default:
		return _mm512_maskz_loadu_ps(m, (const float *)w + i);
	}
}

static inline __m512 loadx(const float *x, int64_t k, int64_t K)
{
	return k + 16 <= K ? _mm512_loadu_ps(x + k) : _mm512_maskz_loadu_ps((__mmask16)((1u << (K - k)) - 1), x + k);
}

static inline __m512 loadw(const void *w, aah_dtype t, int64_t k, int64_t K)
{
	return k + 16 <= K ? load16(w, t, k) : load16_tail(w, t, k, K - k);
}

#define GR 4   /* weight rows per gemv pass */
/* Four weight rows against up to four activation rows: 16 accumulators, w read once. */
static void gemv_avx512(float *out, int64_t ldo, const float *x, int32_t n, const void *w, aah_dtype t,
                        int64_t K, int64_t m0, int64_t m1)
{
	const size_t es = aah_dtype_size(t);
	int64_t m = m0;
	for (; m < m1; m += GR) {
		int rows = m1 - m < GR ? (int)(m1 - m) : GR;
		const char *wr[GR];
		for (int j = 0; j < GR; j++)
			wr[j] = (const char *)w + (size_t)(m + (j < rows ? j : 0)) * (size_t)K * es;
		__m512 acc[GR][4];
		for (int j = 0; j < GR; j++)
			for (int i = 0; i < 4; i++)
				acc[j][i] = _mm512_setzero_ps();
		for (int64_t k = 0; k < K; k += 16) {
			__m512 wv[GR];
			for (int j = 0; j < GR; j++)
				wv[j] = loadw(wr[j], t, k, K);
			for (int32_t i = 0; i < n; i++) {
				__m512 xv = loadx(x + i * K, k, K);
				for (int j = 0; j < GR; j++)
					acc[j][i] = _mm512_fmadd_ps(wv[j], xv, acc[j][i]);
			}
		}
		for (int32_t i = 0; i < n; i++)
			for (int j = 0; j < rows; j++)
				out[i * ldo + m + j] = _mm512_reduce_add_ps(acc[j][i]);
	}
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
	if (i < count)
		_mm512_mask_storeu_ps(dst + i, (__mmask16)((1u << (count - i)) - 1), load16_tail(src, t, i, count - i));
}

#define R 6
#define C 4
static void tile_avx512(float *out, int64_t ldo, const float *x, int64_t ldx, const float *panel, int64_t K)
{
	__m512 acc[R][C];
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			acc[r][c] = _mm512_setzero_ps();
	for (int64_t k = 0; k < K; k += 16) {
		__m512 p[C];
		for (int c = 0; c < C; c++)
			p[c] = loadx(panel + c * K, k, K);
		for (int r = 0; r < R; r++) {
			__m512 xv = loadx(x + r * ldx, k, K);
			for (int c = 0; c < C; c++)
				acc[r][c] = _mm512_fmadd_ps(xv, p[c], acc[r][c]);
		}
	}
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			out[r * ldo + c] = _mm512_reduce_add_ps(acc[r][c]);
}

static float dot_avx512(const float *a, const float *b, int64_t n)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
		s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
	}
	for (; i < n; i += 16)
		s0 = _mm512_fmadd_ps(loadx(a, i, n), loadx(b, i, n), s0);
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
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

const cpu_kernels cpu_kernels_avx512 = {
	/* .isa = */ "avx512",
	/* .tile_rows = */ R,
	/* .tile_cols = */ C,
	/* .gemv = */ gemv_avx512,
	/* .to_f32 = */ to_f32_avx512,
	/* .tile = */ tile_avx512,
	/* .dot = */ dot_avx512,
	/* .axpy = */ axpy_avx512,
};
