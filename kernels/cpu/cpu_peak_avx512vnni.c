/* kernels/cpu/cpu_peak_avx512vnni.c — the int8 peaks of AVX-512 VNNI: vpdpbusd on zmm (16 lanes × 4 u8·s8 products,
 * cpu_qpack_avx512vnni.c's packed products) and on ymm (the EVEX 256-bit form of cpu_quant_avx512vnni.c's row-major
 * dots and of the vnni256 twin). Compiled with the AVX-512 VNNI flags (Makefile). */
#include <immintrin.h>

#include "kernels/cpu/cpu_peak_loop.h"

double cpu_peak_dpbusd_zmm(int64_t iters, int32_t v)
{
	const __m512i x = _mm512_set1_epi8((char)v), one = _mm512_set1_epi8(1);
	CPU_PEAK_DECLARE(__m512i, _mm512_setzero_si512());
#define STEP(acc) _mm512_dpbusd_epi32(acc, x, one)
#define STORE(p, r) _mm512_store_si512((void *)(p), r)
	CPU_PEAK_LOOP(iters, STEP)
	return CPU_PEAK_SUM(int32_t, 16, STORE);
#undef STEP
#undef STORE
}

double cpu_peak_dpbusd_ymm_evex(int64_t iters, int32_t v)
{
	const __m256i x = _mm256_set1_epi8((char)v), one = _mm256_set1_epi8(1);
	CPU_PEAK_DECLARE(__m256i, _mm256_setzero_si256());
#define STEP(acc) _mm256_dpbusd_epi32(acc, x, one)
#define STORE(p, r) _mm256_store_si256((__m256i *)(p), r)
	CPU_PEAK_LOOP(iters, STEP)
	return CPU_PEAK_SUM(int32_t, 8, STORE);
#undef STEP
#undef STORE
}
