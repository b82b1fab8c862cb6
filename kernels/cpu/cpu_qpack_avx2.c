/* kernels/cpu/cpu_qpack_avx2.c — the packed products (cpu_qpack.h) for CPUs with AVX2 but not AVX-512 VNNI. The
 * 16-row groups are those of the VNNI kernels; a 64-byte dword column is two 256-bit vectors, rows 0 … 7 and 8 … 15,
 * each multiplied by one dword of activation quants broadcast, so a vector's 8 int32 lanes are 8 rows' sums and
 * no sum is horizontal. Without vpdpbusd, four u8·s8 products are summed as vpmaddubsw (pairs into int16) then
 * vpmaddwd by ones (pairs into int32); the int16 pairs never saturate: |u| ≤ 128 and |s| ≤ 127 (Q8_0, taken as
 * |w| and a with w's sign), or u ≤ 63 (the nibbles and six-bit quants). A block's integer sums are exact, and each
 * lane adds its block's sum times the two scales' product rounded as the VNNI kernels and the portable dots round
 * it (a product, then a sum, never fused: -std=c11 contracts nothing), so every result has the generic dots' bits.
 *
 * Against the row-major AVX2 dots (cpu_quant_simd.h) a decode step's weight byte costs about half the
 * instructions: one vector of a column serves 8 rows, where a row-major block pays its scales, its conversion and
 * its multiply-add alone. At most 4 activation rows a pass keep the accumulators of both halves in the 16
 * registers; more rows are more passes over the group (from L1/L2, streamed from memory once). */
/* The same source builds the 256-bit VNNI kernels (cpu_qpack_avxvnni.c: AVX-VNNI, the VEX vpdpbusd of CPUs
 * without AVX-512; cpu_qpack_vnni256_avx512vnni.c: its EVEX twin, which AVX-512 VNNI machines run so that the tests check
 * this code): with QP_VNNI defined, a 4-product step is one vpdpbusd (QP_DPBUSD), and Q8_0's stored quants + 128
 * are its unsigned operand as they are for the 512-bit kernels, the −128·Σa of cpu_qa8.bias taking the offset back
 * out. QP_NAME gives the entry point's name. */
#ifndef QP_VNNI
#define QP_VNNI 0
#define QP_NAME cpu_qpack_kernel_avx2
#endif

#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_qpack.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* Activation rows one pass takes. */
#define NCMAX 4

INLINE __m256i bcast32(const void *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

INLINE __m256 h8(const void *p)   /* 8 f16 scales as floats */
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

INLINE __m256i ld(const char *p)
{
	return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* acc + the 8 lanes' sums of 4 adjacent u·s products (u unsigned, s signed: pairs never saturating, above) */
INLINE __m256i mad_u8s8(__m256i acc, __m256i u, __m256i s)
{
#if QP_VNNI
	return QP_DPBUSD(acc, u, s);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* Each line asked for into L1 pf bytes ahead (the caller's, 2 KiB), and no further: unlike the VNNI machine's, this
 * one's (AMD Zen 3, 2 cores) decode ran slower with the VNNI kernels' second prefetch into L2 8 KiB ahead. A streaming
 * loop over 535 MB of Q8_0 groups, variants interleaved 16 times in one process: 12.3–12.8 GB/s a thread with L1 alone
 * against 9.9–10.2 with both; L1 alone 1, 2, 3 and 4 KiB ahead: 12.7, 13.1, 12.5, 12.1. */
INLINE void prefetch_block(const char *p, size_t bytes)
{
	for (size_t o = 0; o < bytes; o += 64)
		_mm_prefetch(p + o, _MM_HINT_T0);
}

/* Rows 8h … 8h + 7 of the NC activation rows' results, those under nr. */
INLINE void store_half(const int NC, float *out, int64_t ldo, int nr, int h, const __m256 *acc)
{
	const int n = nr - 8 * h >= 8 ? 8 : nr - 8 * h;
	UNROLL for (int c = 0; c < NC; c++) {
		float t[8];
		_mm256_storeu_ps(t, acc[c]);
		memcpy(out + c * ldo + 8 * h, t, (size_t)n * sizeof *t);
	}
}

/* Q8_0 (quants + 128: xor 0x80 gives them back signed) and Q4_0 (nibbles, with the −8·Σa bias) against cpu_qa8.
 * The NH halves of the group (2, or 1 when nr ≤ 8) go through each dword column together, so each activation dword is
 * broadcast once for both: the broadcast costs a vector instruction, and sharing it took Q8_0 prefill with these
 * kernels from 0.90–0.95x bf16's to 1.00–1.22x (docs/bench/2026-12-03-avx2-q8_0.md). Per lane, the block's exact
 * integer sum, then one float multiply-add: the same operations whatever NH, NC or nr. */
INLINE void k_8bit(const int NC, const int Q4, const int NH, int64_t nb, int nr, float *out, int64_t ldo,
                   const char *g, const char *a, size_t as, size_t pf)
{
	const size_t GB = Q4 ? 288 : 544;
	const int NI = Q4 ? 4 : 8;   /* dword columns */
	const __m256i m4 = _mm256_set1_epi8(0x0F), x80 = _mm256_set1_epi8((char)0x80);
	__m256 acc[2][NCMAX];
	UNROLL for (int h = 0; h < NH; h++)
		UNROLL for (int c = 0; c < NC; c++)
			acc[h][c] = _mm256_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		const char *wb = g + (size_t)b * GB;
		if (pf)
			prefetch_block(wb + pf, GB);
		__m256i s[2][NCMAX];
		UNROLL for (int c = 0; c < NC; c++) {
			const cpu_qa8 *y = (const cpu_qa8 *)(const void *)(a + c * as) + b;
			UNROLL for (int h = 0; h < NH; h++)
				s[h][c] = Q4 || QP_VNNI ? _mm256_set1_epi32(y->bias) : _mm256_setzero_si256();
		}
		UNROLL for (int i = 0; i < NI; i++) {
			/* Q4_0: the low and high nibbles. Q8_0: with VNNI the stored bytes (quant + 128) both times, against the
			 * activations as they are; without, the signed quants and their magnitudes (−128: 128 unsigned), the
			 * magnitudes against the activations given the quants' signs, so no int16 pair saturates */
			__m256i v[2], lo[2], hi[2];
			UNROLL for (int h = 0; h < NH; h++) {
				v[h] = ld(wb + 32 + 64 * i + 32 * h);
				if (Q4) {
					lo[h] = _mm256_and_si256(v[h], m4);
					hi[h] = _mm256_and_si256(_mm256_srli_epi16(v[h], 4), m4);
				} else {
					lo[h] = QP_VNNI ? v[h] : _mm256_xor_si256(v[h], x80);
					hi[h] = QP_VNNI ? v[h] : _mm256_abs_epi8(lo[h]);
				}
			}
			UNROLL for (int c = 0; c < NC; c++) {
				const cpu_qa8 *y = (const cpu_qa8 *)(const void *)(a + c * as) + b;
				const __m256i y0 = bcast32(y->qs + 4 * i);
				if (Q4) {
					const __m256i y1 = bcast32(y->qs + 16 + 4 * i);
					UNROLL for (int h = 0; h < NH; h++)
						s[h][c] = mad_u8s8(mad_u8s8(s[h][c], lo[h], y0), hi[h], y1);
				} else {
					UNROLL for (int h = 0; h < NH; h++)
						s[h][c] = mad_u8s8(s[h][c], hi[h], QP_VNNI ? y0 : _mm256_sign_epi8(y0, lo[h]));
				}
			}
		}
		UNROLL for (int h = 0; h < NH; h++) {
			const __m256 dw = h8(wb + 16 * h);
			UNROLL for (int c = 0; c < NC; c++) {
				const cpu_qa8 *y = (const cpu_qa8 *)(const void *)(a + c * as) + b;
				const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(y->d));
				acc[h][c] = _mm256_add_ps(acc[h][c], _mm256_mul_ps(_mm256_cvtepi32_ps(s[h][c]), sc));
			}
		}
	}
	for (int h = 0; h < NH; h++)
		store_half(NC, out, ldo, nr, h, acc[h]);
}

/* Q4_K / Q5_K against cpu_qak: per pair p of sub-blocks the low nibbles (sub-block 2p) and the high (2p + 1), each
 * summed exactly, times its six-bit scale; the mins against the activations' sums of 32. */
INLINE void k_k4(const int NC, const int Q5, int64_t nb, int nr, float *out, int64_t ldo, const char *g,
                 const char *a, size_t as, size_t pf)
{
	const size_t GB = Q5 ? 2880 : 2368;
	const int NH = nr > 8 ? 2 : 1;
	const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
	__m256 acc[2][NCMAX];
	UNROLL for (int h = 0; h < 2; h++)
		UNROLL for (int c = 0; c < NC; c++)
			acc[h][c] = _mm256_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		const char *wb = g + (size_t)b * GB;
		for (int h = 0; h < NH; h++) {
			__m256i isum[NCMAX], msum[NCMAX];
			UNROLL for (int c = 0; c < NC; c++)
				isum[c] = msum[c] = _mm256_setzero_si256();
			for (int p = 0; p < 4; p++) {
				if (pf && h == 0)   /* a quarter of the block at a time, as the VNNI kernel */
					prefetch_block(wb + pf + p * (GB / 4), GB / 4);
				__m256i slo[NCMAX], shi[NCMAX];
				UNROLL for (int c = 0; c < NC; c++)
					slo[c] = shi[c] = _mm256_setzero_si256();
				UNROLL for (int i = 0; i < 8; i++) {
					const __m256i v = ld(wb + 320 + 64 * (8 * p + i) + 32 * h);
					__m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
					if (Q5) {   /* bit 2p of the qh byte is lo's fifth bit, 2p + 1 hi's: moved to bit 4 */
						const __m256i q = ld(wb + 2368 + 64 * i + 32 * h);
						const __m256i hl = p == 0 ? _mm256_slli_epi16(q, 4) : p == 1 ? _mm256_slli_epi16(q, 2)
						                   : p == 2 ? q : _mm256_srli_epi16(q, 2);
						const __m256i hh = p == 0 ? _mm256_slli_epi16(q, 3) : p == 1 ? _mm256_slli_epi16(q, 1)
						                   : p == 2 ? _mm256_srli_epi16(q, 1) : _mm256_srli_epi16(q, 3);
						lo = _mm256_or_si256(lo, _mm256_and_si256(hl, b4));
						hi = _mm256_or_si256(hi, _mm256_and_si256(hh, b4));
					}
					UNROLL for (int c = 0; c < NC; c++) {
						const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
						slo[c] = mad_u8s8(slo[c], lo, bcast32(y->qs + 64 * p + 4 * i));
						shi[c] = mad_u8s8(shi[c], hi, bcast32(y->qs + 64 * p + 32 + 4 * i));
					}
				}
				const __m256i sc_lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(wb + 64 + 16 * (2 * p) + 8 * h))),
				              sc_hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(wb + 64 + 16 * (2 * p + 1) + 8 * h))),
				              mn = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(wb + 192 + 32 * p + 16 * h)));
				UNROLL for (int c = 0; c < NC; c++) {
					const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
					isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_mullo_epi32(slo[c], sc_lo),
					                                                     _mm256_mullo_epi32(shi[c], sc_hi)));
					msum[c] = _mm256_add_epi32(msum[c], _mm256_madd_epi16(mn, bcast32(y->bs32 + 2 * p)));
				}
			}
			const __m256 dd = h8(wb + 16 * h), dm = h8(wb + 32 + 16 * h);
			UNROLL for (int c = 0; c < NC; c++) {
				const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
				const __m256 ya = _mm256_set1_ps(y->d);
				acc[h][c] = _mm256_add_ps(acc[h][c], _mm256_mul_ps(_mm256_mul_ps(dd, ya), _mm256_cvtepi32_ps(isum[c])));
				acc[h][c] = _mm256_sub_ps(acc[h][c], _mm256_mul_ps(_mm256_mul_ps(dm, ya), _mm256_cvtepi32_ps(msum[c])));
			}
		}
	}
	for (int h = 0; h < NH; h++)
		store_half(NC, out, ldo, nr, h, acc[h]);
}

/* Q6_K against cpu_qak: sub-block j (16 values: 4 dword columns) summed from −32 × its activation sum, times its
 * int8 scale; the columns read as the VNNI kernel reads them (cpu_qpack_avx512vnni.c). */
INLINE void k_q6_K(const int NC, int64_t nb, int nr, float *out, int64_t ldo, const char *g, const char *a, size_t as,
                   size_t pf)
{
	const size_t GB = 3360;
	const int NH = nr > 8 ? 2 : 1;
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	__m256 acc[2][NCMAX];
	UNROLL for (int h = 0; h < 2; h++)
		UNROLL for (int c = 0; c < NC; c++)
			acc[h][c] = _mm256_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		const char *wb = g + (size_t)b * GB;
		for (int h = 0; h < NH; h++) {
			__m256i isum[NCMAX];
			UNROLL for (int c = 0; c < NC; c++)
				isum[c] = _mm256_setzero_si256();
			for (int n = 0; n < 2; n++)
				UNROLL for (int s = 0; s < 8; s++) {
					const int q = s / 2, j = 8 * n + s;
					if (pf && h == 0)
						prefetch_block(wb + pf + (size_t)j * (GB / 16), GB / 16);
					__m256i ss[NCMAX];
					UNROLL for (int c = 0; c < NC; c++)
						ss[c] = _mm256_set1_epi32(((const cpu_qak *)(const void *)(a + c * as) + b)->b32[j]);
					UNROLL for (int ii = 0; ii < 4; ii++) {
						const int i = 4 * (s & 1) + ii;
						const __m256i L = ld(wb + 288 + 64 * (16 * n + i + 8 * (q & 1)) + 32 * h),
						              H = ld(wb + 2336 + 64 * (8 * n + i) + 32 * h);
						const __m256i hm = _mm256_and_si256(H, _mm256_set1_epi8((char)(3 << (2 * q))));
						const __m256i hs = q == 0 ? _mm256_slli_epi16(hm, 4) : q == 1 ? _mm256_slli_epi16(hm, 2)
						                   : q == 2 ? hm : _mm256_srli_epi16(hm, 2);
						const __m256i v = _mm256_or_si256(_mm256_and_si256(q < 2 ? L : _mm256_srli_epi16(L, 4), m4), hs);
						UNROLL for (int c = 0; c < NC; c++) {
							const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
							ss[c] = mad_u8s8(ss[c], v, bcast32(y->qs + 128 * n + 32 * q + 4 * i));
						}
					}
					const __m256i scv = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(wb + 32 + 16 * j + 8 * h)));
					UNROLL for (int c = 0; c < NC; c++)
						isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(ss[c], scv));
				}
			const __m256 dd = h8(wb + 16 * h);
			UNROLL for (int c = 0; c < NC; c++) {
				const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
				acc[h][c] = _mm256_add_ps(acc[h][c],
				                          _mm256_mul_ps(_mm256_mul_ps(dd, _mm256_set1_ps(y->d)), _mm256_cvtepi32_ps(isum[c])));
			}
		}
	}
	for (int h = 0; h < NH; h++)
		store_half(NC, out, ldo, nr, h, acc[h]);
}

/* nc activation rows NCMAX at a time; only the first pass over the group prefetches (the later ones read it from
 * L1/L2). Each row's operations are those of any pass: the same bits whatever nc. */
#define QP_DISPATCH(name, call)                                                                                \
	static void name(int64_t nb, int nc, int nr, float *out, int64_t ldo, const void *gv, const void *av,     \
	                 size_t as, size_t pf)                                                                     \
	{                                                                                                          \
		const char *g = gv;                                                                                    \
		for (int c0 = 0; c0 < nc; c0 += NCMAX, pf = 0) {                                                       \
			const char *a = (const char *)av + (size_t)c0 * as;                                                \
			float *o = out + c0 * ldo;                                                                         \
			switch (nc - c0) {                                                                                 \
			case 1: call(1); break;                                                                            \
			case 2: call(2); break;                                                                            \
			case 3: call(3); break;                                                                            \
			default: call(4); break;                                                                           \
			}                                                                                                  \
		}                                                                                                      \
	}

#define CALL_Q8_0(n) (nr > 8 ? k_8bit(n, 0, 2, nb, nr, o, ldo, g, a, as, pf) : k_8bit(n, 0, 1, nb, nr, o, ldo, g, a, as, pf))
#define CALL_Q4_0(n) (nr > 8 ? k_8bit(n, 1, 2, nb, nr, o, ldo, g, a, as, pf) : k_8bit(n, 1, 1, nb, nr, o, ldo, g, a, as, pf))
#define CALL_Q4_K(n) k_k4(n, 0, nb, nr, o, ldo, g, a, as, pf)
#define CALL_Q5_K(n) k_k4(n, 1, nb, nr, o, ldo, g, a, as, pf)
#define CALL_Q6_K(n) k_q6_K(n, nb, nr, o, ldo, g, a, as, pf)
QP_DISPATCH(qp_q8_0, CALL_Q8_0)
QP_DISPATCH(qp_q4_0, CALL_Q4_0)
QP_DISPATCH(qp_q4_K, CALL_Q4_K)
QP_DISPATCH(qp_q5_K, CALL_Q5_K)
QP_DISPATCH(qp_q6_K, CALL_Q6_K)

#if !QP_VNNI   /* the activation quantizer is the same for the VNNI variants: built once */
INLINE float hmax8(__m256 v)
{
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

/* cpu_qpack_quantize_act for Q8_0 / Q4_0 weights, a block of 32 values in four vectors: the AVX-512 quantizer's
 * steps (cpu_qpack_avx512vnni.c), so the portable quantizer's bits (llama.cpp's x86 rounding): NaN left out of the
 * maximum and quantized to 0, times 127 / amax, clamped, rounded to nearest with ties to even. */
void cpu_qpack_quantize_act_avx2(aah_dtype t, void *dst, const float *x, int64_t n)
{
	if (t != AAH_DTYPE_Q8_0 && t != AAH_DTYPE_Q4_0) {
		cpu_qpack_quantize_act(t, dst, x, n);
		return;
	}
	const int32_t off = t == AAH_DTYPE_Q8_0 ? 128 : 8;
	const __m256 lo = _mm256_set1_ps(-128.f), hi = _mm256_set1_ps(127.f),
	             nosign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	/* packs_epi32 then packs_epi16 leave the 32 bytes in the 32-bit order 0 2 4 6 1 3 5 7 of their lanes */
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	cpu_qa8 *y = dst;
	for (int64_t b = 0; b < n / 32; b++) {
		__m256 v[4], m = _mm256_setzero_ps();
		UNROLL for (int h = 0; h < 4; h++) {
			v[h] = _mm256_loadu_ps(x + 32 * b + 8 * h);
			m = _mm256_max_ps(m, _mm256_and_ps(_mm256_and_ps(v[h], nosign), _mm256_cmp_ps(v[h], v[h], _CMP_ORD_Q)));
		}
		const float amax = hmax8(m);
		const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
		y[b].d = aah_half_to_float(aah_float_to_half(amax / 127.0f));
		__m256i q[4], sum = _mm256_setzero_si256();
		UNROLL for (int h = 0; h < 4; h++) {
			__m256 c = _mm256_mul_ps(v[h], _mm256_set1_ps(id));
			c = _mm256_and_ps(c, _mm256_cmp_ps(c, c, _CMP_ORD_Q));   /* NaN → 0 */
			c = _mm256_min_ps(_mm256_max_ps(c, lo), hi);
			q[h] = _mm256_cvtps_epi32(_mm256_round_ps(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
			sum = _mm256_add_epi32(sum, q[h]);
		}
		const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
		_mm256_storeu_si256((__m256i *)(void *)y[b].qs, _mm256_permutevar8x32_epi32(p, order));
		__m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
		y[b].bias = -off * _mm_cvtsi128_si32(s4);
	}
}

#endif

cpu_qpack_fn QP_NAME(aah_dtype t)
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
