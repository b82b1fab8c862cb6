/* kernels/cpu/cpu_peak_avx512.c — the f32 peak of the AVX-512 table: vfmadd231ps on zmm (16 multiply-adds), the
 * instruction of the exact float products (cpu_kernels_avx512.c's panel_mm). Compiled with the AVX-512 flags. */
#include <immintrin.h>

#include "kernels/cpu/cpu_peak_loop.h"

double cpu_peak_fma_zmm(int64_t iters, int32_t v)
{
	const __m512 x = _mm512_set1_ps((float)v), one = _mm512_set1_ps(1.0f);
	CPU_PEAK_DECLARE(__m512, _mm512_setzero_ps());
#define STEP(acc) _mm512_fmadd_ps(x, one, acc)
	CPU_PEAK_LOOP(iters, STEP)
#undef STEP
	return CPU_PEAK_SUM(float, 16, _mm512_store_ps);
}
