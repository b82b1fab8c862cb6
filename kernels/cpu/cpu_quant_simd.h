/* kernels/cpu/cpu_quant_simd.h — the body of the AVX2 and AVX-512 VNNI dots of cpu_quant.h, included by
 * cpu_quant_avx2.c and cpu_quant_avx512vnni.c (which set QSIMD_TABLE, QSIMD_ISA and, for the VNNI form, QSIMD_VNNI).
 * 256-bit vectors throughout: a block of 32 quants is one vector, so a sub-block's scale is one broadcast. The only
 * difference between the two tables is how the integer products are summed: AVX2 multiplies u8·s8 pairs into int16
 * (vpmaddubsw, never saturating here: |w| ≤ 128 and |a| ≤ 127, or w ≤ 63) and pairs of int16 into int32 (vpmaddwd);
 * VNNI sums four u8·s8 products straight into int32 (vpdpbusd) and int16 pairs with a scale (vpdpwssd). Integer
 * sums are exact either way, so both tables give the same integers and differ from the generic table only in
 * the float rounding of the per-block scaling.
 *
 * Each dot runs over nc activation rows at once (the weight's blocks unpacked once for all of them); a row's
 * operations are the same for every nc, so its result is the same bits whatever rows share the call. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_quant.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

/* acc += Σ of 4 adjacent u·s products (u unsigned, s signed bytes) in each int32 lane */
INLINE __m256i mad_u8s8(__m256i acc, __m256i u, __m256i s)
{
#ifdef QSIMD_VNNI
	return _mm256_dpbusd_epi32(acc, u, s);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* acc += Σ of 2 adjacent a·b products (int16) in each int32 lane */
INLINE __m256i mad_s16(__m256i acc, __m256i a, __m256i b)
{
#ifdef QSIMD_VNNI
	return _mm256_dpwssd_epi32(acc, a, b);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

INLINE float h2f(aah_half h)
{
	return _cvtsh_ss(h);
}

/* Σ of 8 lanes: (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then 0+1. */
INLINE float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

INLINE float hsum4(__m128 s)
{
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* Q8_0 and Q4_0 (as signed q − 8) weights against Q8_0 activations: |w| as unsigned times a with w's sign, so one
 * u8·s8 product per value. */
INLINE __m256i q4_0_quants(const aah_block_q4_0 *w)
{
	const __m128i t = _mm_loadu_si128((const __m128i *)w->qs);   /* byte j: value j low, value j + 16 high */
	const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
	return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
}

/* The NC rows' activation scales of block b as floats, lane c row c (lanes from NC on repeat row 0): one gather of
 * the blocks' first 4 bytes (d, then 2 quants) and one conversion for all rows, instead of one conversion per row. */
INLINE __m256 act_scales_q8_0(const int NC, const char *a, size_t as, int64_t b, __m256i idx)
{
	const __m256i g = _mm256_i32gather_epi32((const int *)(const void *)(a + (size_t)b * sizeof(aah_block_q8_0)), idx, 1);
#ifdef QSIMD_VNNI
	const __m128i h = _mm256_cvtepi32_epi16(g);   /* the low half of each lane: d */
#else
	const __m256i p = _mm256_packus_epi32(_mm256_and_si256(g, _mm256_set1_epi32(0xFFFF)), _mm256_setzero_si256());
	const __m128i h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));   /* 64-bit lanes 0, 2 */
#endif
	return _mm256_cvtph_ps(h);
}

INLINE void dot_8bit_n(const int NC, const int Q4, int64_t nb, float *s, const void *vw, const char *a, size_t as)
{
	__m256 acc[CPU_QDOT_COLS];
	UNROLL for (int c = 0; c < NC; c++)
		acc[c] = _mm256_setzero_ps();
	/* byte offsets of the rows' blocks for the scale gather: (NC − 1)·as < 2^31 for any row under 2^30 values */
	int32_t off[8] = { 0 };
	for (int c = 0; c < NC; c++)
		off[c] = (int32_t)((size_t)c * as);
	const __m256i idx = _mm256_loadu_si256((const __m256i *)off);
	for (int64_t b = 0; b < nb; b++) {
		__m256i qw;
		float dw;
		if (Q4) {
			const aah_block_q4_0 *w = (const aah_block_q4_0 *)vw + b;
			qw = q4_0_quants(w);
			dw = h2f(w->d);
		} else {
			const aah_block_q8_0 *w = (const aah_block_q8_0 *)vw + b;
			qw = _mm256_loadu_si256((const __m256i *)w->qs);
			dw = h2f(w->d);
		}
		const __m256i ax = _mm256_sign_epi8(qw, qw);   /* |w|; −128 stays 0x80, which is 128 unsigned */
		/* row c's block scale dw · d_c, the same product whatever NC: for more than 4 rows from one gather (for
		 * fewer the gather costs more than it saves) */
		float sc[8];
		if (NC > 4)
			_mm256_storeu_ps(sc, _mm256_mul_ps(_mm256_set1_ps(dw), act_scales_q8_0(NC, a, as, b, idx)));
		else
			UNROLL for (int c = 0; c < NC; c++)
				sc[c] = dw * h2f(((const aah_block_q8_0 *)(a + c * as) + b)->d);
		UNROLL for (int c = 0; c < NC; c++) {
			const aah_block_q8_0 *y = (const aah_block_q8_0 *)(a + c * as) + b;
			const __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y->qs), qw);
			const __m256i p = mad_u8s8(_mm256_setzero_si256(), ax, sy);
			acc[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[c]), _mm256_cvtepi32_ps(p), acc[c]);
		}
	}
	UNROLL for (int c = 0; c < NC; c++)
		s[c] = hsum8(acc[c]);
}

/* Q4_K / Q5_K against Q8_K: per 64 values (two sub-blocks) one vector of quants for each, the u8·s8 pair sums
 * (int16) multiplied by the sub-block's scale into int32; the mins from the activations' sums of 16. */
INLINE void dot_k4_n(const int NC, const int Q5, int64_t nb, float *s, const void *vw, const char *a, size_t as)
{
	__m256 acc[CPU_QDOT_COLS];
	__m128 accm[CPU_QDOT_COLS];
	UNROLL for (int c = 0; c < NC; c++) {
		acc[c] = _mm256_setzero_ps();
		accm[c] = _mm_setzero_ps();
	}
	const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1);
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *scales, *qs, *qh = NULL;
		float dw, dmw;
		if (Q5) {
			const aah_block_q5_K *w = (const aah_block_q5_K *)vw + b;
			scales = w->scales, qs = w->qs, qh = w->qh, dw = h2f(w->d), dmw = h2f(w->dmin);
		} else {
			const aah_block_q4_K *w = (const aah_block_q4_K *)vw + b;
			scales = w->scales, qs = w->qs, dw = h2f(w->d), dmw = h2f(w->dmin);
		}
		/* the 8 six-bit scales and mins as int16 (ggml's get_scale_min_k4 for all j at once, on 32-bit words) */
		uint32_t u[4];
		memcpy(u, scales, 12);
		u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
		const uint32_t u1 = u[1] & 0x3f3f3f3f;
		u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
		u[2] = u1;
		u[0] &= 0x3f3f3f3f;
		const __m128i sm = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)u)),
		              mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(u + 2)));
		const __m256i scb = _mm256_broadcastsi128_si256(sm);
		__m256i isum[CPU_QDOT_COLS];
		UNROLL for (int c = 0; c < NC; c++)
			isum[c] = _mm256_setzero_si256();
		__m256i hb = Q5 ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
		for (int j = 0; j < 4; j++) {
			const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
			__m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			if (Q5) {   /* bit 2j of qh[l] is the fifth bit of value l of sub-block 2j, bit 2j + 1 of sub-block 2j + 1 */
				lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4));
				hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), m1), 4));
				hb = _mm256_srli_epi16(hb, 2);
			}
			const __m256i s_lo = _mm256_shuffle_epi8(scb, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * j)))),
			              s_hi = _mm256_shuffle_epi8(scb, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * j + 1))));
			UNROLL for (int c = 0; c < NC; c++) {
				const int8_t *y = ((const aah_block_q8_K *)(a + c * as) + b)->qs + 64 * j;
				const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)y));
				const __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y + 32)));
				isum[c] = mad_s16(mad_s16(isum[c], p_lo, s_lo), p_hi, s_hi);
			}
		}
		UNROLL for (int c = 0; c < NC; c++) {
			const aah_block_q8_K *y = (const aah_block_q8_K *)(a + c * as) + b;
			const __m128i bs0 = _mm_loadu_si128((const __m128i *)y->bsums),
			              bs1 = _mm_loadu_si128((const __m128i *)(y->bsums + 8));
			const __m128i pm = _mm_madd_epi16(mins, _mm_hadd_epi16(bs0, bs1));   /* Σ m_j · (sums of sub-block j) */
			acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dw), _mm256_cvtepi32_ps(isum[c]), acc[c]);
			accm[c] = _mm_fmadd_ps(_mm_set1_ps(y->d * dmw), _mm_cvtepi32_ps(pm), accm[c]);
		}
	}
	UNROLL for (int c = 0; c < NC; c++)
		s[c] = hsum8(acc[c]) - hsum4(accm[c]);
}

/* Q6_K against Q8_K: the 6-bit quants q (0 … 63) as unsigned, their scale per 16 values, and the −32 of every
 * quant taken off once per block as 32 · Σ_j sc_j · bsum_j. */
INLINE void dot_q6_K_n(const int NC, int64_t nb, float *s, const void *vw, const char *a, size_t as)
{
	__m256 acc[CPU_QDOT_COLS];
	UNROLL for (int c = 0; c < NC; c++)
		acc[c] = _mm256_setzero_ps();
	const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
	/* per pair of sub-blocks p: the low 128 bits repeat scale 2p, the high scale 2p + 1 (int16 of 8 in a lane) */
	const __m256i pick[4] = {
		_mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3),
		_mm256_setr_epi8(4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7),
		_mm256_setr_epi8(8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10,
		                 11, 10, 11, 10, 11),
		_mm256_setr_epi8(12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14,
		                 15, 14, 15, 14, 15, 14, 15, 14, 15),
	};
	for (int64_t b = 0; b < nb; b++) {
		const aah_block_q6_K *w = (const aah_block_q6_K *)vw + b;
		const __m128i sc8 = _mm_loadu_si128((const __m128i *)w->scales);
		const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
		const float dw = h2f(w->d);
		__m256i isum[CPU_QDOT_COLS];
		UNROLL for (int c = 0; c < NC; c++)
			isum[c] = _mm256_setzero_si256();
		for (int h = 0; h < 2; h++) {
			const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h)),
			              ql1 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h + 32)),
			              qh = _mm256_loadu_si256((const __m256i *)(w->qh + 32 * h));
			const __m256i q[4] = {
				_mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4)),
				_mm256_or_si256(_mm256_and_si256(ql1, m4),
				                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4)),
				_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
				                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4)),
				_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
				                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4)),
			};
			/* this half's 8 scales as int16, in both 128-bit lanes */
			const __m256i sch = _mm256_broadcastsi128_si256(h ? _mm256_extracti128_si256(sc16, 1)
			                                                  : _mm256_castsi256_si128(sc16));
			for (int p = 0; p < 4; p++) {
				const __m256i scv = _mm256_shuffle_epi8(sch, pick[p]);
				UNROLL for (int c = 0; c < NC; c++) {
					const int8_t *y = ((const aah_block_q8_K *)(a + c * as) + b)->qs + 128 * h + 32 * p;
					const __m256i pr = _mm256_maddubs_epi16(q[p], _mm256_loadu_si256((const __m256i *)y));
					isum[c] = mad_s16(isum[c], pr, scv);
				}
			}
		}
		UNROLL for (int c = 0; c < NC; c++) {
			const aah_block_q8_K *y = (const aah_block_q8_K *)(a + c * as) + b;
			const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
			const __m256i t = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(off, 5));
			acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dw), _mm256_cvtepi32_ps(t), acc[c]);
		}
	}
	UNROLL for (int c = 0; c < NC; c++)
		s[c] = hsum8(acc[c]);
}

/* One entry point per type: nc as a compile-time constant, so the per-row accumulators stay in registers. Where a
 * table's registers cannot hold `wide` rows' accumulators, the rows run in groups of `wide` (a row's operations are
 * the same in any group, so this changes no result). */
#define QSIMD_DISPATCH(name, call, wide)                                                                         \
	static void name(int64_t nb, int32_t nc, float *s, const void *w, const void *a, size_t as)                  \
	{                                                                                                            \
		const char *ac = a;                                                                                      \
		for (; nc > (wide); nc -= (wide), s += (wide), ac += (size_t)(wide) * as)                                \
			call(wide);                                                                                          \
		switch (nc) {                                                                                            \
		case 1: call(1); break;                                                                                  \
		case 2: call(2); break;                                                                                  \
		case 3: call(3); break;                                                                                  \
		case 4: call(4); break;                                                                                  \
		case 5: if ((wide) >= 5) call(5); break;                                                                 \
		case 6: if ((wide) >= 6) call(6); break;                                                                 \
		case 7: if ((wide) >= 7) call(7); break;                                                                 \
		default: if ((wide) >= 8) call(8); break;                                                                \
		}                                                                                                        \
	}

/* rows per unpack for the K types: 8 with AVX-512's 32 registers, 4 with AVX2's 16 (8 rows' int32 and float
 * accumulators alone would fill them) */
#ifdef QSIMD_VNNI
#define QSIMD_WIDE_K 8
#else
#define QSIMD_WIDE_K 4
#endif

#define CALL_Q8_0(n) dot_8bit_n(n, 0, nb, s, w, ac, as)
#define CALL_Q4_0(n) dot_8bit_n(n, 1, nb, s, w, ac, as)
#define CALL_Q4_K(n) dot_k4_n(n, 0, nb, s, w, ac, as)
#define CALL_Q5_K(n) dot_k4_n(n, 1, nb, s, w, ac, as)
#define CALL_Q6_K(n) dot_q6_K_n(n, nb, s, w, ac, as)
QSIMD_DISPATCH(qdot_q8_0, CALL_Q8_0, 8)
QSIMD_DISPATCH(qdot_q4_0, CALL_Q4_0, 8)
QSIMD_DISPATCH(qdot_q4_K, CALL_Q4_K, QSIMD_WIDE_K)
QSIMD_DISPATCH(qdot_q5_K, CALL_Q5_K, QSIMD_WIDE_K)
QSIMD_DISPATCH(qdot_q6_K, CALL_Q6_K, QSIMD_WIDE_K)

const cpu_qkernels QSIMD_TABLE = {
	.isa = QSIMD_ISA,
	.dot = {
		[AAH_DTYPE_Q8_0] = qdot_q8_0,
		[AAH_DTYPE_Q4_0] = qdot_q4_0,
		[AAH_DTYPE_Q4_K] = qdot_q4_K,
		[AAH_DTYPE_Q5_K] = qdot_q5_K,
		[AAH_DTYPE_Q6_K] = qdot_q6_K,
	},
};
