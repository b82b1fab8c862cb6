/* kernels/cpu/cpu_bf16_round_avx512.h — f32 to bf16, round to nearest even, NaN kept quiet (cpu_f32_to_bf16's rule),
 * 16 lanes at a time with AVX-512 F/BW: each 32-bit lane's low half holds the bf16 bits. Included by the files of the
 * AVX-512 variants that round (cpu_kernels_avx512.c's KV stores, cpu_bf16dot_avx512bf16.c's activations). */
#ifndef AAH_CPU_BF16_ROUND_AVX512_H
#define AAH_CPU_BF16_ROUND_AVX512_H

#include <immintrin.h>

static inline __attribute__((always_inline)) __m512i cpu_bf16_bits16(__m512 x)
{
	const __m512i u = _mm512_castps_si512(x);
	__m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
	                                                 _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
	r = _mm512_srli_epi32(r, 16);
	const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
	                                              _mm512_set1_epi32(0x7f800000));
	return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
}

#endif
