/* kernels/cpu/cpu_peak_avx2.c — the f32 peak of the AVX2 table: vfmadd231ps on ymm (8 multiply-adds), the instruction
 * of the exact float products (cpu_kernels_avx2.c's panel_mm). Compiled with the AVX2 flags (Makefile). */
#include <immintrin.h>

#include "kernels/cpu/cpu_peak_loop.h"

double cpu_peak_fma_ymm(int64_t iters, int32_t v)
{
	const __m256 x = _mm256_set1_ps((float)v), one = _mm256_set1_ps(1.0f);
	CPU_PEAK_DECLARE(__m256, _mm256_setzero_ps());
#define STEP(acc) _mm256_fmadd_ps(x, one, acc)
	CPU_PEAK_LOOP(iters, STEP)
#undef STEP
	return CPU_PEAK_SUM(float, 8, _mm256_store_ps);
}
