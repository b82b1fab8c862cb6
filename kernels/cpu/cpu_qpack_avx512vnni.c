/* kernels/cpu/cpu_qpack_avx512vnni.c — the AVX-512 VNNI products with 16-row packed weights (cpu_qpack.h). Each 512-bit
 * vpdpbusd takes a dword column of the group (4 unsigned quants of each of the 16 rows) and one dword of activation
 * quants broadcast, and adds the 16 rows' 4-product sums into its 16 lanes; a block's integer sums are exact, then
 * each lane (one weight row) adds its block's sum times the two scales' product — rounded as the portable dots of
 * cpu_quant.c round them (a product, then a sum, never fused), so each result is those dots' bits: the same for every
 * activation row whatever the others, and the same as the generic table's. Used only when the CPU has AVX-512 VNNI
 * (cpu_backend.c). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_q45k_avx512.h"
#include "kernels/cpu/cpu_qpack.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

INLINE __m512i bcast32(const void *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

INLINE __m512 h16(const void *p)   /* 16 f16 scales as floats */
{
	return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* A decode step is bound by how many of its weight lines are in flight from memory per core, not by the kernels
 * (from L3 one thread multiplies Q4_K at 27 GB/s, from memory at 12): each line is asked for into L1 pf bytes ahead
 * (the caller's pf, 2 KiB) and into L2 PF_L2 bytes further, which keeps the L2's deeper queue busy too. Measured on
 * the 0.6B shape's 28 layers, 2 threads (docs/bench/2026-12-02-prefetch-l2.md): the L2 prefetch took Q6_K from
 * 18–23 to 26–28 GB/s and the others a few percent; 2 KiB into L1 rather than 1 gave Q8_0 +9%, Q6_K and Q4_K
 * +3–4% (Q4_0 −4%); 16 KiB into L2 was no better than 8. */
#define PF_L2 8192

INLINE void prefetch_block(const char *p, size_t bytes)
{
	for (size_t o = 0; o < bytes; o += 64) {
		_mm_prefetch(p + o, _MM_HINT_T0);
		_mm_prefetch(p + o + PF_L2, _MM_HINT_T1);
	}
}

INLINE void store_rows(const int NC, float *out, int64_t ldo, int nr, const __m512 *acc)
{
	const __mmask16 keep = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
	UNROLL for (int c = 0; c < NC; c++)
		_mm512_mask_storeu_ps(out + c * ldo, keep, acc[c]);
}

/* Q8_0 (quants + 128) and Q4_0 (nibbles) against cpu_qa8 rows: the bias −128·Σa or −8·Σa starts each block's sum. */
INLINE void k_8bit(const int NC, const int Q4, int64_t nb, int nr, float *out, int64_t ldo, const char *g,
                   const char *a, size_t as, size_t pf)
{
	const size_t GB = Q4 ? 288 : 544;
	const __m512i m4 = _mm512_set1_epi8(0x0F);
	__m512 acc[CPU_QPACK_COLS];
	UNROLL for (int c = 0; c < NC; c++)
		acc[c] = _mm512_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		const char *wb = g + (size_t)b * GB;
		if (pf)
			prefetch_block(wb + pf, GB);
		__m512i w[8];
		if (Q4) {
			UNROLL for (int i = 0; i < 4; i++) {
				const __m512i v = _mm512_loadu_si512((const void *)(wb + 32 + 64 * i));
				w[i] = _mm512_and_si512(v, m4);
				w[4 + i] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
			}
		} else {
			UNROLL for (int i = 0; i < 8; i++)
				w[i] = _mm512_loadu_si512((const void *)(wb + 32 + 64 * i));
		}
		const __m512 dw = h16(wb);
		UNROLL for (int c = 0; c < NC; c++) {
			const cpu_qa8 *y = (const cpu_qa8 *)(const void *)(a + c * as) + b;
			__m512i s0 = _mm512_set1_epi32(y->bias), s1 = _mm512_setzero_si512();
			UNROLL for (int i = 0; i < 8; i += 2) {
				s0 = _mm512_dpbusd_epi32(s0, w[i], bcast32(y->qs + 4 * i));
				s1 = _mm512_dpbusd_epi32(s1, w[i + 1], bcast32(y->qs + 4 * i + 4));
			}
			const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(y->d));
			acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), sc));
		}
	}
	store_rows(NC, out, ldo, nr, acc);
}

/* acc + vpdpbusd / vpdpwssd of w with the dword at p broadcast, for a kernel of NC activation rows. GCC keeps
 * _mm512_set1_epi32 of a load as a separate vpbroadcastd; with three rows or more those extra uops (one per product)
 * limit the issue rate, and the broadcast memory operand ({1to16}) took a five-row Q6_K product from 119 to 108 ns
 * per group-block (L2-resident). With one or two rows, bound by memory, the separate load was 2% faster (Q4_K). */
INLINE __m512i dpbusd_rows(const int NC, __m512i acc, __m512i w, const void *p)
{
	if (NC < 3)
		return _mm512_dpbusd_epi32(acc, w, bcast32(p));
	__asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
	return acc;
}

INLINE __m512i dpwssd_rows(const int NC, __m512i acc, __m512i w, const void *p)
{
	if (NC < 3)
		return _mm512_dpwssd_epi32(acc, w, bcast32(p));
	__asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
	return acc;
}

/* Q4_K / Q5_K against cpu_qak rows: per pair of sub-blocks the low nibbles (sub-block 2p) and high (2p + 1), each
 * summed exactly, times its six-bit scale (int32); the mins against the activations' sums of 32 (int16 pairs).
 * Q4_K sums a sub-block as two halves of 16 values: |Σ nibble·a| ≤ 16·15·128 < 2^15, so each half is an int16 in
 * its dword and one vpdpwssd against the scale (low word; high word 0) multiplies and adds it — two ops where
 * vpmulld (two) and vpaddd took three per sub-block and activation row, which is what binds a verify pass of five
 * rows (83 to 78 ns per group-block for five, L2-resident). The sum is the same exact integer. Q5_K's fifth bit
 * doubles the bound: its halves would not fit. */
INLINE void k_k4(const int NC, const int Q5, int64_t nb, int nr, float *out, int64_t ldo, const char *g,
                 const char *a, size_t as, size_t pf)
{
	const size_t GB = Q5 ? 2880 : 2368;
	const int HALF = Q5 ? 8 : 4;   /* columns per chain */
	__m512 acc[CPU_QPACK_COLS];
	UNROLL for (int c = 0; c < NC; c++)
		acc[c] = _mm512_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		const char *wb = g + (size_t)b * GB;
		__m512i isum[CPU_QPACK_COLS], msum[CPU_QPACK_COLS];
		UNROLL for (int c = 0; c < NC; c++)
			isum[c] = msum[c] = _mm512_setzero_si512();
		for (int p = 0; p < 4; p++) {
			if (pf)   /* a quarter of the block at a time: a burst of prefetches stalls on the fill buffers */
				prefetch_block(wb + pf + p * (GB / 4), GB / 4);
			const __m512i sc_lo = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(wb + 64 + 16 * (2 * p)))),
			              sc_hi = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(wb + 64 + 16 * (2 * p + 1))));
			UNROLL for (int i0 = 0; i0 < 8; i0 += HALF) {
				__m512i slo[CPU_QPACK_COLS], shi[CPU_QPACK_COLS];
				UNROLL for (int c = 0; c < NC; c++)
					slo[c] = shi[c] = _mm512_setzero_si512();
				UNROLL for (int i = i0; i < i0 + HALF; i++) {
					__m512i lo, hi;
					cpu_q45k_unpack(wb, Q5, p, i, &lo, &hi);
					UNROLL for (int c = 0; c < NC; c++) {
						const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
						slo[c] = dpbusd_rows(NC, slo[c], lo, y->qs + 64 * p + 4 * i);
						shi[c] = dpbusd_rows(NC, shi[c], hi, y->qs + 64 * p + 32 + 4 * i);
					}
				}
				UNROLL for (int c = 0; c < NC; c++) {
					if (Q5) {
						isum[c] = _mm512_add_epi32(isum[c], _mm512_add_epi32(_mm512_mullo_epi32(slo[c], sc_lo),
						                                                     _mm512_mullo_epi32(shi[c], sc_hi)));
					} else {
						isum[c] = _mm512_dpwssd_epi32(isum[c], slo[c], sc_lo);
						isum[c] = _mm512_dpwssd_epi32(isum[c], shi[c], sc_hi);
					}
				}
			}
			const __m512i mn = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(wb + 192 + 32 * p)));
			UNROLL for (int c = 0; c < NC; c++) {
				const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
				msum[c] = dpwssd_rows(NC, msum[c], mn, y->bs32 + 2 * p);
			}
		}
		const __m512 dd = h16(wb), dm = h16(wb + 32);
		UNROLL for (int c = 0; c < NC; c++) {
			const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
			const __m512 ya = _mm512_set1_ps(y->d);
			acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dd, ya), _mm512_cvtepi32_ps(isum[c])));
			acc[c] = _mm512_sub_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dm, ya), _mm512_cvtepi32_ps(msum[c])));
		}
	}
	store_rows(NC, out, ldo, nr, acc);
}

/* Q6_K against cpu_qak rows: sub-block j (16 values: 4 dword columns) summed from −32 × its activation sum (the
 * quants' offset), times its int8 scale. Half n of the block: ql columns L0 … L15, qh columns H0 … H7; values
 * 128n + 32·q + 4i + t (quarter q, i < 8) are L[i + 8·(q & 1)]'s low (q < 2) or high nibble with bits 2q, 2q + 1 of
 * H[i] above them. Quarters q and q + 2 share their L column and H's mask, so they are summed together: with
 * m = H & 0x33 (or (H >> 2) & 0x33 for q = 1, 3), quarter q's bytes are L's low nibble below m's low two bits moved
 * up by 4, and quarter q + 2's L's high nibble below m's bits 4, 5 where they are — each a select by 0x0F whatever
 * the 16-bit shifts bring into the other half of the byte: 11 ops per column and half where unpacking each quarter
 * alone took 13 (five rows: 123 to 116 ns per group-block, L2-resident). */
INLINE void k_q6_K(const int NC, int64_t nb, int nr, float *out, int64_t ldo, const char *g, const char *a, size_t as,
                   size_t pf)
{
	const size_t GB = 3360;
	const __m512i m4 = _mm512_set1_epi8(0x0F), m33 = _mm512_set1_epi8(0x33), mcc = _mm512_set1_epi8((char)0xCC);
	__m512 acc[CPU_QPACK_COLS];
	UNROLL for (int c = 0; c < NC; c++)
		acc[c] = _mm512_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		const char *wb = g + (size_t)b * GB;
		__m512i isum[CPU_QPACK_COLS];
		UNROLL for (int c = 0; c < NC; c++)
			isum[c] = _mm512_setzero_si512();
		for (int n = 0; n < 2; n++)
			UNROLL for (int k = 0; k < 4; k++) {   /* quarters e and e + 2, columns i = 4h … 4h + 3 */
				const int e = k >> 1, h = k & 1, jl = 8 * n + 2 * e + h, jh = jl + 4;
				if (pf)   /* an eighth of the block at a time */
					prefetch_block(wb + pf + (size_t)(4 * n + k) * (GB / 8), GB / 8);
				__m512i sl[CPU_QPACK_COLS], sh[CPU_QPACK_COLS];
				UNROLL for (int c = 0; c < NC; c++) {
					const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
					sl[c] = _mm512_set1_epi32(y->b32[jl]);
					sh[c] = _mm512_set1_epi32(y->b32[jh]);
				}
				UNROLL for (int ii = 0; ii < 4; ii++) {
					const int i = 4 * h + ii;
					const __m512i L = _mm512_loadu_si512((const void *)(wb + 288 + 64 * (16 * n + i + 8 * e))),
					              H = _mm512_loadu_si512((const void *)(wb + 2336 + 64 * (8 * n + i)));
					const __m512i m = e ? _mm512_srli_epi16(_mm512_and_si512(H, mcc), 2) : _mm512_and_si512(H, m33);
					/* 0xE4: C ? A : B */
					const __m512i vl = _mm512_ternarylogic_epi32(L, _mm512_slli_epi16(m, 4), m4, 0xE4),
					              vh = _mm512_ternarylogic_epi32(_mm512_srli_epi16(L, 4), m, m4, 0xE4);
					UNROLL for (int c = 0; c < NC; c++) {
						const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
						sl[c] = dpbusd_rows(NC, sl[c], vl, y->qs + 128 * n + 32 * e + 4 * i);
						sh[c] = dpbusd_rows(NC, sh[c], vh, y->qs + 128 * n + 32 * (e + 2) + 4 * i);
					}
				}
				const __m512i scl = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(wb + 32 + 16 * jl))),
				              sch = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(wb + 32 + 16 * jh)));
				UNROLL for (int c = 0; c < NC; c++)
					isum[c] = _mm512_add_epi32(isum[c], _mm512_add_epi32(_mm512_mullo_epi32(sl[c], scl),
					                                                     _mm512_mullo_epi32(sh[c], sch)));
			}
		const __m512 dd = h16(wb);
		UNROLL for (int c = 0; c < NC; c++) {
			const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
			acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dd, _mm512_set1_ps(y->d)), _mm512_cvtepi32_ps(isum[c])));
		}
	}
	store_rows(NC, out, ldo, nr, acc);
}

#define QP_DISPATCH(name, call)                                                                                \
	static void name(int64_t nb, int nc, int nr, float *out, int64_t ldo, const void *gv, const void *av,     \
	                 size_t as, size_t pf)                                                                     \
	{                                                                                                          \
		const char *g = gv, *a = av;                                                                           \
		switch (nc) {                                                                                          \
		case 1: call(1); break;                                                                                \
		case 2: call(2); break;                                                                                \
		case 3: call(3); break;                                                                                \
		case 4: call(4); break;                                                                                \
		case 5: call(5); break;                                                                                \
		case 6: call(6); break;                                                                                \
		case 7: call(7); break;                                                                                \
		default: call(8); break;                                                                               \
		}                                                                                                      \
	}

#define CALL_Q8_0(n) k_8bit(n, 0, nb, nr, out, ldo, g, a, as, pf)
#define CALL_Q4_0(n) k_8bit(n, 1, nb, nr, out, ldo, g, a, as, pf)
#define CALL_Q4_K(n) k_k4(n, 0, nb, nr, out, ldo, g, a, as, pf)
#define CALL_Q5_K(n) k_k4(n, 1, nb, nr, out, ldo, g, a, as, pf)
#define CALL_Q6_K(n) k_q6_K(n, nb, nr, out, ldo, g, a, as, pf)
QP_DISPATCH(qp_q8_0, CALL_Q8_0)
QP_DISPATCH(qp_q4_0, CALL_Q4_0)
QP_DISPATCH(qp_q4_K, CALL_Q4_K)
QP_DISPATCH(qp_q5_K, CALL_Q5_K)
QP_DISPATCH(qp_q6_K, CALL_Q6_K)

/* The K types' rows (cpu_qak: the Q8_K quants of cpu_quant.c's quantize_q8_K and the sums the kernels fold in), 256
 * values a block, the same bits: the scale from the first value of the largest magnitude (NaN left out), each value
 * times −127 / that value rounded to nearest with ties to even (NaN: 0), the sums of 16 by vpsadbw. A prefill on
 * q4_k_m spent a tenth of its time in the portable loop, and a verify pass of five rows five times a step's share. */
static void quantize_qak_avx512(cpu_qak *y, const float *x, int64_t nb)
{
	const __m512i x80 = _mm512_set1_epi8((char)0x80);
	for (int64_t b = 0; b < nb; b++, x += 256) {
		__m512 ab[16], m = _mm512_setzero_ps();
		UNROLL for (int v = 0; v < 16; v++) {
			const __m512 xv = _mm512_loadu_ps(x + 16 * v);
			ab[v] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(xv, xv, _CMP_ORD_Q), _mm512_abs_ps(xv));
			m = _mm512_max_ps(m, ab[v]);
		}
		const float amax = _mm512_reduce_max_ps(m);
		if (amax == 0.0f || isinf(amax)) {   /* as quantize_q8_K: zeros */
			memset(&y[b], 0, sizeof y[b]);
			continue;
		}
		float max = 0.0f;
		for (int v = 0; v < 16; v++) {   /* the first value of magnitude amax: the portable loop's strict > keeps it */
			const __mmask16 hit = _mm512_cmp_ps_mask(ab[v], _mm512_set1_ps(amax), _CMP_EQ_OQ);
			if (hit) {
				max = x[16 * v + __builtin_ctz(hit)];
				break;
			}
		}
		const float iscale = -127.f / max;
		const __m512 is = _mm512_set1_ps(iscale);
		__m128i q8[16];
		UNROLL for (int v = 0; v < 16; v++) {
			__m512 c = _mm512_mul_ps(is, _mm512_loadu_ps(x + 16 * v));
			c = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(c, c, _CMP_ORD_Q), c);   /* NaN → 0 */
			__m512i q = _mm512_cvt_roundps_epi32(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
			q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
			q8[v] = _mm512_cvtepi32_epi8(q);
		}
		_Alignas(64) uint64_t sad[4][8];
		UNROLL for (int v = 0; v < 4; v++) {
			__m512i z = _mm512_castsi128_si512(q8[4 * v]);
			z = _mm512_inserti32x4(z, q8[4 * v + 1], 1);
			z = _mm512_inserti32x4(z, q8[4 * v + 2], 2);
			z = _mm512_inserti32x4(z, q8[4 * v + 3], 3);
			_mm512_storeu_si512((void *)(y[b].qs + 64 * v), z);
			/* sums of 8 bytes made unsigned (+128 each): qword pairs are the 16-value sums, less 16 · 128 */
			_mm512_store_si512((void *)sad[v], _mm512_sad_epu8(_mm512_xor_si512(z, x80), _mm512_setzero_si512()));
		}
		int32_t s16[16];
		for (int j = 0; j < 16; j++)
			s16[j] = (int32_t)(sad[j / 4][2 * (j % 4)] + sad[j / 4][2 * (j % 4) + 1]) - 2048;
		for (int j = 0; j < 16; j++)
			y[b].b32[j] = -32 * s16[j];
		for (int j = 0; j < 8; j++)
			y[b].bs32[j] = (int16_t)(s16[2 * j] + s16[2 * j + 1]);
		y[b].d = 1 / iscale;
	}
}

/* cpu_qpack_quantize_act: the K types' rows as above; for Q8_0 / Q4_0 weights, 32 values a vector pair, the same bits
 * as the portable quantizer (cpu_quant.c's quantize_q8_0, llama.cpp's x86 rounding: NaN ignored by the maximum and
 * quantized to 0, times 127 / amax, clamped, rounded to nearest with ties to even). A decode step quantizes each
 * matrix's input on one thread while the others wait; the portable loop was 2% of a Q8_0 step there. */
void cpu_qpack_quantize_act_avx512(aah_dtype t, void *dst, const float *x, int64_t n)
{
	if (t != AAH_DTYPE_Q8_0 && t != AAH_DTYPE_Q4_0) {
		quantize_qak_avx512(dst, x, n / 256);
		return;
	}
	const int32_t off = t == AAH_DTYPE_Q8_0 ? 128 : 8;
	const __m512 lo = _mm512_set1_ps(-128.f), hi = _mm512_set1_ps(127.f);
	cpu_qa8 *y = dst;
	for (int64_t b = 0; b < n / 32; b++) {
		__m512 v[2];
		float amax = 0.f;
		UNROLL for (int h = 0; h < 2; h++) {
			v[h] = _mm512_loadu_ps(x + 32 * b + 16 * h);
			const __m512 a = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v[h], v[h], _CMP_ORD_Q), _mm512_abs_ps(v[h]));
			const float m = _mm512_reduce_max_ps(a);
			amax = m > amax ? m : amax;
		}
		const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
		y[b].d = aah_half_to_float(aah_float_to_half(amax / 127.0f));
		__m512i sum = _mm512_setzero_si512();
		UNROLL for (int h = 0; h < 2; h++) {
			__m512 c = _mm512_mul_ps(v[h], _mm512_set1_ps(id));
			c = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(c, c, _CMP_ORD_Q), c);   /* NaN → 0 */
			c = _mm512_min_ps(_mm512_max_ps(c, lo), hi);
			const __m512i q = _mm512_cvtps_epi32(
				_mm512_roundscale_ps(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));   /* ties to even */
			sum = _mm512_add_epi32(sum, q);
			_mm_storeu_si128((__m128i *)(void *)(y[b].qs + 16 * h), _mm512_cvtepi32_epi8(q));
		}
		y[b].bias = -off * _mm512_reduce_add_epi32(sum);
	}
}

cpu_qpack_fn cpu_qpack_kernel_avx512(aah_dtype t)
{
	switch (t) {
	case AAH_DTYPE_Q8_0: return qp_q8_0;
	case AAH_DTYPE_Q4_0: return qp_q4_0;
	case AAH_DTYPE_Q4_K: return qp_q4_K;
	case AAH_DTYPE_Q5_K: return qp_q5_K;
	case AAH_DTYPE_Q6_K: return qp_q6_K;
	default: return NULL;
	}
}
