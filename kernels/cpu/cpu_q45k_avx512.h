/* kernels/cpu/cpu_q45k_avx512.h — one 64-byte step of a packed Q4_K/Q5_K group-block as bytes, with AVX-512 F/BW: the
 * low and high nibbles of dword column step i of quarter p (lo: sub-block 2p, hi: 2p + 1), and for Q5_K their fifth
 * bits from the qh bytes. Included by the two kernels that read those weights (cpu_qpack_avx512vnni.c's vpdpbusd
 * product, cpu_amx.c's tile preparation); the group layout is cpu_qpack.h's. */
#ifndef AAH_CPU_Q45K_AVX512_H
#define AAH_CPU_Q45K_AVX512_H

#include <immintrin.h>
#include <stdbool.h>

static inline __attribute__((always_inline)) void cpu_q45k_unpack(const char *wb, bool q5, int p, int i,
                                                                  __m512i *lo, __m512i *hi)
{
	const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
	const __m512i v = _mm512_loadu_si512((const void *)(wb + 320 + 64 * (8 * p + i)));
	*lo = _mm512_and_si512(v, m4);
	*hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
	if (q5) {   /* bit 2p of the qh byte is lo's fifth bit, 2p + 1 hi's: moved to bit 4 */
		const __m512i h = _mm512_loadu_si512((const void *)(wb + 2368 + 64 * i));
		const __m512i hl = p == 0 ? _mm512_slli_epi16(h, 4) : p == 1 ? _mm512_slli_epi16(h, 2)
		                   : p == 2 ? h : _mm512_srli_epi16(h, 2);
		const __m512i hh = p == 0 ? _mm512_slli_epi16(h, 3) : p == 1 ? _mm512_slli_epi16(h, 1)
		                   : p == 2 ? _mm512_srli_epi16(h, 1) : _mm512_srli_epi16(h, 3);
		*lo = _mm512_or_si512(*lo, _mm512_and_si512(hl, b4));
		*hi = _mm512_or_si512(*hi, _mm512_and_si512(hh, b4));
	}
}

#endif
