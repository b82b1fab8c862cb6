/* kernels/cpu/cpu_bf16dot_avx512bf16.c — packed bf16 weights times bf16-rounded activations on vdpbf16ps
 * (cpu_bf16dot.h). Compiled with -mavx512bf16 (Makefile); called only where cpu_bf16dot_available(). */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_bf16_round_avx512.h"
#include "kernels/cpu/cpu_bf16dot.h"
#include "kernels/cpu/cpu_kernels.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* A row 32 values at a time: the even k (lanes 0, 2, …) and odd k of the 32 gathered by permutes, rounded, and joined
 * as 16 pair words, written nr apart (k-major). */
void cpu_bf16dot_pairs(uint32_t *dst, const float *x, int32_t nr, int64_t K)
{
	const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
	              od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
	const int64_t KP = (K + 1) / 2;
	for (int32_t i = 0; i < nr; i++) {
		const float *xi = x + (int64_t)i * K;
		int64_t k = 0;
		for (; k + 32 <= K; k += 32) {
			const __m512 a = _mm512_loadu_ps(xi + k), b = _mm512_loadu_ps(xi + k + 16);
			const __m512i e = cpu_bf16_bits16(_mm512_permutex2var_ps(a, ev, b)), o = cpu_bf16_bits16(_mm512_permutex2var_ps(a, od, b));
			_Alignas(64) uint32_t w[16];
			_mm512_store_si512((void *)w, _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
			if (nr == 1)
				memcpy(dst + k / 2, w, sizeof w);
			else
				UNROLL for (int t = 0; t < 16; t++)
					dst[(k / 2 + t) * nr + i] = w[t];
		}
		for (int64_t kp = k / 2; kp < KP; kp++) {
			const uint32_t lo = cpu_f32_to_bf16(xi[2 * kp]), hi = 2 * kp + 1 < K ? cpu_f32_to_bf16(xi[2 * kp + 1]) : 0;
			dst[kp * nr + i] = lo | hi << 16;
		}
	}
}

void cpu_bf16dot_round(uint16_t *dst, const float *x, int64_t count)
{
	int64_t i = 0;
	for (; i + 16 <= count; i += 16)
		_mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm512_cvtepi32_epi16(cpu_bf16_bits16(_mm512_loadu_ps(x + i))));
	for (; i < count; i++)
		dst[i] = cpu_f32_to_bf16(x[i]);
}

/* G panels against N activation rows, as the exact path's panel_block (cpu_kernels_avx512.c) with one vdpbf16ps per k
 * pair in place of its two FMAs: G·N accumulators, each weight vector loaded once for the N rows, each activation pair
 * broadcast from xp. */
#define PANEL_PREFETCH 2048   /* bytes ahead in each panel's stream */

INLINE void panel_block(float *out, int64_t ldo, const uint32_t *xp, const int N, const char *w, int64_t pstride,
                        const int G, int64_t KP, int64_t m0, int64_t M)
{
	__m512 acc[4][16];   /* G·N ≤ 16 */
	UNROLL for (int g = 0; g < G; g++)
		UNROLL for (int i = 0; i < N; i++)
			acc[g][i] = _mm512_setzero_ps();
	for (int64_t kp = 0; kp < KP; kp++) {
		__m512bh wv[4];
		UNROLL for (int g = 0; g < G; g++) {
			const char *src = w + g * pstride + kp * 64;
			_mm_prefetch(src + PANEL_PREFETCH, _MM_HINT_T0);
			wv[g] = (__m512bh)_mm512_load_si512((const void *)src);
		}
		const uint32_t *x = xp + kp * N;
		UNROLL for (int i = 0; i < N; i++) {
			const __m512bh xv = (__m512bh)_mm512_set1_epi32((int)x[i]);
			UNROLL for (int g = 0; g < G; g++)
				acc[g][i] = _mm512_dpbf16_ps(acc[g][i], wv[g], xv);
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

INLINE void panel_rows(float *out, int64_t ldo, const uint32_t *xp, const int N, const void *w, const int G, int64_t K,
                       int64_t M, int64_t p0, int64_t p1)
{
	const int64_t pstride = cpu_packed_elems(AAH_DTYPE_BF16, CPU_PANEL, K) * 2, KP = (K + 1) / 2;
	int64_t p = p0;
	for (; p + G <= p1; p += G)
		panel_block(out, ldo, xp, N, (const char *)w + p * pstride, pstride, G, KP, p * CPU_PANEL, M);
	for (; p < p1; p++)
		panel_block(out, ldo, xp, N, (const char *)w + p * pstride, pstride, 1, KP, p * CPU_PANEL, M);
}

/* 1–4 rows: four panels at a time; 5–8: two; 9–16: one (the exact path's choice, for its reasons). */
#define BF_CASE(n_, g_) case n_: panel_rows(out, ldo, xp, n_, w, g_, K, M, p0, p1); return;

void cpu_bf16dot_panel_mm(float *out, int64_t ldo, const uint32_t *xp, int32_t n, const void *w, int64_t K, int64_t M,
                          int64_t p0, int64_t p1)
{
	switch (n) {
	BF_CASE(1, 4) BF_CASE(2, 4) BF_CASE(3, 4) BF_CASE(4, 4)
	BF_CASE(5, 2) BF_CASE(6, 2) BF_CASE(7, 2) BF_CASE(8, 2)
	BF_CASE(9, 1) BF_CASE(10, 1) BF_CASE(11, 1) BF_CASE(12, 1)
	BF_CASE(13, 1) BF_CASE(14, 1) BF_CASE(15, 1)
	default: panel_rows(out, ldo, xp, 16, w, 1, K, M, p0, p1); return;
	}
}
