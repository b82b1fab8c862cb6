/* kernels/cpu/cpu_peak_avxvnni.c — the int8 peak of AVX-VNNI: vpdpbusd on ymm in its VEX form (8 lanes × 4 u8·s8
 * products), the instruction of cpu_qpack_avxvnni.c. Compiled with the AVX-VNNI flags (Makefile). */
#include <immintrin.h>

#include "kernels/cpu/cpu_peak_loop.h"

double cpu_peak_dpbusd_ymm_vex(int64_t iters, int32_t v)
{
	const __m256i x = _mm256_set1_epi8((char)v), one = _mm256_set1_epi8(1);
	CPU_PEAK_DECLARE(__m256i, _mm256_setzero_si256());
#define STEP(acc) _mm256_dpbusd_avx_epi32(acc, x, one)
#define STORE(p, r) _mm256_store_si256((__m256i *)(p), r)
	CPU_PEAK_LOOP(iters, STEP)
	return CPU_PEAK_SUM(int32_t, 8, STORE);
}
