/* kernels/cpu/cpu_peak_avx512bf16.c — the bf16 peak of AVX-512 BF16: vdpbf16ps on zmm (16 f32 lanes × 2 bf16
 * products), the instruction of cpu_bf16dot_avx512bf16.c. Compiled with the AVX-512 BF16 flags (Makefile). */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_peak_loop.h"

double cpu_peak_dpbf16_zmm(int64_t iters, int32_t v)
{
	/* a small integer's bf16 is its f32's upper half, exactly */
	const float fv = (float)v, f1 = 1.0f;
	uint32_t bv, b1;
	memcpy(&bv, &fv, 4);
	memcpy(&b1, &f1, 4);
	const __m512bh x = (__m512bh)_mm512_set1_epi16((short)(bv >> 16)),
	               one = (__m512bh)_mm512_set1_epi16((short)(b1 >> 16));
	CPU_PEAK_DECLARE(__m512, _mm512_setzero_ps());
#define STEP(acc) _mm512_dpbf16_ps(acc, x, one)
	CPU_PEAK_LOOP(iters, STEP)
#undef STEP
	return CPU_PEAK_SUM(float, 16, _mm512_store_ps);
}
