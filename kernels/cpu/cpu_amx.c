/* kernels/cpu/cpu_amx.c — the packed products (cpu_qpack.h) on AMX-INT8 tiles: up to 32 activation rows a call against
 * groups of 16 weight rows; and the bf16 panels on AMX-BF16 tiles (the end). Compiled with the AMX and AVX-512 flags
 * (Makefile); called only where cpu_amx_available() (cpu_amx_bf16_available()).
 *
 * The packed group's dword columns (dword i of each of the 16 rows) are exactly AMX's "VNNI" layout of a B tile: B row
 * k/4 holds for each of 16 columns (our weight rows) 4 consecutive k. The activation quants of a block, 16 rows in
 * the tiles' layout (cpu_amx_act_put), are an A tile. So tdpbsud (A signed: activations; B unsigned) or tdpbssd (both
 * signed) gives C[c][r] an exact integer sum, lane r of row c, and each lane then runs cpu_qpack_avx512vnni.c's float
 * operations in its order on the same integer the VNNI kernel has: the same bits (cpu_amx.h). Q8_0 and Q4_0: one tile
 * product per block (K = 32: each block has its own float scale), the weights copied to bytes in a small buffer first.
 * The K types: their integer scales folded into the weights, split so that every product fits a byte, whole blocks
 * summed at K = 64, and those weights made ready once per run of groups for every call (k4_prep, q6_prep).
 *
 * What this machine taught (docs/bench/2026-12-07-amx-kquants.md): the tile products do not overlap with vector work
 * that keeps the ports busy (the time of the two adds up), and a tile store issued while its products still run holds
 * back everything after it; so the vector work per product is what decides, and each kernel stores a unit's sums only
 * after its products are done. */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_q45k_avx512.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* ldtilecfg's 64-byte operand. Written whole (memset, then the fields): reserved bytes that are not zero, or a
 * palette left at 0, make ldtilecfg fault, and a half-written config is what crashes other projects' builds. */
typedef struct tile_config {
	uint8_t palette_id;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
} tile_config;
_Static_assert(sizeof(tile_config) == 64, "ldtilecfg reads 64 bytes");

/* The configurations, by the activation rows nc and the kind of kernel (below); Q8_0 and Q4_0's (kind 0):
 *   tmm0 … tmm3  C: nc × 16 int32 (a lane per weight row), used in turn so that products do not wait on each other
 *   tmm4, tmm6   A: nc × 32 activation quants
 *   tmm5, tmm7   B: 8 × 64 bytes, 32 k of 16 weight rows
 * The configuration is thread state: each thread loads it when the one it needs changes. */
static __thread int tile_key;

/* kind 0: the int8 tiles above, K = 32; 1: Q6_K at K = 64 (k_q6): C tiles 0 … 2, A 3 (nc × 64), B 4 … 7; 2: bf16
 * (cpu_amx_bf16_panel_mm): tmm0 … tmm3 C (nc × 16 floats), tmm4 A (nc × 32 bf16), tmm5, tmm6 B (16 k pairs × 16
 * weight rows); 3: every tile full, 16 rows of 64 bytes (cpu_amx_tiles_full: the peak loops of cpu_peak_amx.c); 4:
 * int8 at K = 64 for up to 32 rows (k_k4): C tiles 0, 1 and A tile 4 for rows 0 … 15, C 2, 3 and A 5 for the rest, B
 * 16 × 64 in tmm6 and tmm7. */
static void tiles_configure(int nc, int kind)
{
	const int key = nc << 3 | kind;
	if (tile_key == key)
		return;
	tile_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.palette_id = 1;
	for (int t = 0; t < 4; t++) {
		cfg.rows[t] = (uint8_t)nc;
		cfg.colsb[t] = 64;
	}
	if (kind == 4) {   /* nc ≤ 32 rows at K = 64: C tiles 0, 1 and A tile 4 the first 16, 2, 3 and 5 the rest */
		const int n0 = nc < CPU_AMX_COLS ? nc : CPU_AMX_COLS, n1 = nc - n0;
		for (int t = 0; t < 8; t++) {
			const int r = t == 6 || t == 7 ? 16 : t == 2 || t == 3 || t == 5 ? n1 : n0;
			cfg.rows[t] = (uint8_t)r;
			cfg.colsb[t] = r ? 64 : 0;   /* a tile of no rows is unconfigured: both fields zero */
		}
	} else if (kind == 3) {
		for (int t = 4; t < 8; t++) {
			cfg.rows[t] = 16;
			cfg.colsb[t] = 64;
		}
	} else if (kind == 2) {
		cfg.rows[4] = (uint8_t)nc;
		cfg.colsb[4] = 64;
		cfg.rows[5] = cfg.rows[6] = 16;
		cfg.colsb[5] = cfg.colsb[6] = 64;
	} else if (kind == 1) {   /* Q6_K at K = 64: C tiles 0 … 2 and A 3 as above, B 4 … 7 */
		for (int t = 4; t < 8; t++) {
			cfg.rows[t] = 16;
			cfg.colsb[t] = 64;
		}
	} else {
		for (int t = 4; t < 8; t += 2) {
			cfg.rows[t] = (uint8_t)nc;
			cfg.colsb[t] = 32;
			cfg.rows[t + 1] = 8;
			cfg.colsb[t + 1] = 64;
		}
	}
	/* ldtilecfg as asm with the whole struct as its input: GCC 12's _tile_loadconfig does not tell the compiler that it
	 * reads the 64 bytes, and its dead-store elimination then drops every field written after the memset (seen here:
	 * a config of palette 1 and nothing else, which faults) */
	__asm__ volatile("ldtilecfg %0" : : "m"(cfg));
	tile_key = key;
}

void cpu_amx_tiles_full(void)
{
	tiles_configure(16, 3);
}

/* One tile product: C = A (activations, rows `as` apart) · B (64-byte rows), stored to sums (16 int32 a row). */
#define TILE_DOT(C, A, B, a_ptr, as, b_ptr, sums)                                                                     \
	do {                                                                                                              \
		_tile_zero(C);                                                                                                \
		_tile_loadd(A, a_ptr, (long)(as));                                                                            \
		_tile_loadd(B, b_ptr, 64);                                                                                    \
		_tile_dpbsud(C, A, B);                                                                                        \
		_tile_stored(C, sums, 64);                                                                                    \
	} while (0)

/* The same with both operands signed (tdpbssd). */
#define TILE_DOT_SS(C, A, B, a_ptr, as, b_ptr, sums)                                                                  \
	do {                                                                                                              \
		_tile_zero(C);                                                                                                \
		_tile_loadd(A, a_ptr, (long)(as));                                                                            \
		_tile_loadd(B, b_ptr, 64);                                                                                    \
		_tile_dpbssd(C, A, B);                                                                                        \
		_tile_stored(C, sums, 64);                                                                                    \
	} while (0)

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

INLINE void prefetch_block(const char *p, size_t bytes)
{
	for (size_t o = 0; o < bytes; o += 64)
		_mm_prefetch(p + o, _MM_HINT_T0);
}

INLINE void store_rows(const int NC, int nc, float *out, int64_t ldo, int nr, const __m512 *acc)
{
	const __mmask16 keep = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
	UNROLL for (int c = 0; c < NC; c++)
		if (c < nc)
			_mm512_mask_storeu_ps(out + c * ldo, keep, acc[c]);
}

/* The tiles' sums leave through memory (a tile store, then vector loads), and a load that follows its tile store
 * closely waits for it; so each kernel is a two-stage pipeline: the tile products of the next blocks (or half-blocks)
 * run into one set of buffers while the float steps read the last ones from the other, interleaved so that the tile
 * unit and the vector units work at once. Every lane still takes its blocks' float steps in block order. */

/* Q8_0 and Q4_0 against cpu_qa8 rows, 4 blocks a round: the weights copied to bq as signed bytes (Q8_0: the stored
 * quant + 128, less 128; Q4_0: B row i the low nibbles of column i, row 4 + i the high, less 8), so that tdpbssd gives
 * the VNNI kernel's sum with its bias (−128·Σa, −8·Σa) already in; then each block's float step, the scales d of the
 * 16 rows read from the block's tile layout (cpu_amx_act_put). */
INLINE void k_8bit(const int NC, int nc, const int Q4, int64_t nb, int nr, float *out, int64_t ldo, const char *g,
                   const char *a, size_t as, const uint8_t *aq, size_t pf)
{
	const size_t GB = Q4 ? 288 : 544;
	const __m512i m4 = _mm512_set1_epi8(0x0F), x80 = _mm512_set1_epi8((char)0x80), e8 = _mm512_set1_epi8(8);
	_Alignas(64) int32_t sum[2][4][CPU_AMX_COLS][16];
	_Alignas(64) uint8_t bq[3][4][8][64];   /* a ring of 3: written two rounds before the tiles read it */
	__m512 acc[CPU_AMX_COLS];
	UNROLL for (int c = 0; c < NC; c++)
		acc[c] = _mm512_setzero_ps();
	/* the weights of round r's blocks as B tiles, in bq[set] (Q4_0: unpacked) */
#define K8_PREP(r, set)                                                                                               \
	do {                                                                                                              \
		for (int q = 0; q < 4 && 4 * (r) + q < nb; q++) {                                                             \
			const char *wb = g + (size_t)(4 * (r) + q) * GB;                                                          \
			if (pf)                                                                                                   \
				prefetch_block(wb + pf, GB);                                                                          \
			if (!Q4) {   /* copied: in the group its rows start 32 bytes into a line, and a tile load of split     \
			              * rows is slow */                                                                           \
				UNROLL for (int i = 0; i < 8; i++)                                                                    \
					_mm512_store_si512((void *)bq[set][q][i],                                                         \
					                   _mm512_xor_si512(_mm512_loadu_si512((const void *)(wb + 32 + 64 * i)), x80));      \
			} else {                                                                                                  \
				UNROLL for (int i = 0; i < 4; i++) {                                                                  \
					const __m512i v = _mm512_loadu_si512((const void *)(wb + 32 + 64 * i));                           \
					_mm512_store_si512((void *)bq[set][q][i], _mm512_sub_epi8(_mm512_and_si512(v, m4), e8));          \
					_mm512_store_si512((void *)bq[set][q][4 + i],                                                     \
					                   _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), e8));               \
				}                                                                                                     \
			}                                                                                                         \
		}                                                                                                             \
	} while (0)
#define K8_TILE(r, bs, set, Q, TC, TA, TB)                                                                            \
	do {                                                                                                              \
		if (4 * (r) + (Q) < nb)                                                                                       \
			TILE_DOT_SS(TC, TA, TB, aq + (size_t)(4 * (r) + (Q)) * CPU_AMX_Q8_BLOCK, 32, bq[bs][Q], sum[set][Q]);     \
	} while (0)
#define K8_POST(r, set, Q)                                                                                            \
	do {                                                                                                              \
		const int64_t b = 4 * (r) + (Q);                                                                              \
		if (b < nb) {                                                                                                 \
			const __m512 dw = h16(g + (size_t)b * GB);                                                                \
			const float *yd = (const float *)(const void *)(aq + (size_t)b * CPU_AMX_Q8_BLOCK + 512);                 \
			UNROLL for (int c = 0; c < NC; c++) {                                                                     \
				if (c >= nc)                                                                                          \
					continue;                                                                                         \
				const __m512i s = _mm512_load_si512((const void *)sum[set][Q][c]);                                    \
				const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(yd[c]));                                           \
				acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_cvtepi32_ps(s), sc));                             \
			}                                                                                                         \
		}                                                                                                             \
	} while (0)
	const int64_t rounds = (nb + 3) / 4;
	/* a tile load of bytes just stored by vector stores waits for them to leave the store buffer: the weights are
	 * made ready two rounds ahead, the sums read one round behind */
	K8_PREP(0, 0);
	if (rounds > 1)
		K8_PREP(1, 1);
	K8_TILE(0, 0, 0, 0, 0, 4, 5);
	K8_TILE(0, 0, 0, 1, 1, 6, 7);
	K8_TILE(0, 0, 0, 2, 2, 4, 5);
	K8_TILE(0, 0, 0, 3, 3, 6, 7);
	for (int64_t r = 0; r < rounds; r++) {
		const int set = (int)(r & 1), nx = set ^ 1, bn = (int)((r + 1) % 3);
		if (r + 2 < rounds)
			K8_PREP(r + 2, (int)((r + 2) % 3));
		if (r + 1 < rounds) {
			K8_TILE(r + 1, bn, nx, 0, 0, 4, 5);
			K8_POST(r, set, 0);
			K8_TILE(r + 1, bn, nx, 1, 1, 6, 7);
			K8_POST(r, set, 1);
			K8_TILE(r + 1, bn, nx, 2, 2, 4, 5);
			K8_POST(r, set, 2);
			K8_TILE(r + 1, bn, nx, 3, 3, 6, 7);
			K8_POST(r, set, 3);
		} else {
			K8_POST(r, set, 0);
			K8_POST(r, set, 1);
			K8_POST(r, set, 2);
			K8_POST(r, set, 3);
		}
	}
#undef K8_PREP
#undef K8_TILE
#undef K8_POST
	store_rows(NC, nc, out, ldo, nr, acc);
}

/* Q4_K / Q5_K on the tiles. A block's integer sum Σ_j sc_j·Σ_{k∈j} a_k·q_k has a six-bit scale per sub-block j and
 * weight row. A tile product per sub-block (K = 32, half a tile product) scaled per activation row with vpmulld costs
 * more vector work than the tile saves, so the scale goes into the weights instead, split so that each part times a
 * quant is a byte: sc = 2^S·h + l (S = 4 for Q4_K: q·l ≤ 15·15, q·h ≤ 15·3; S = 3 for Q5_K's five-bit quants: ≤ 31·7),
 * two B tiles per 64 k holding q·l and q·h. The tiles then sum a whole block at the full K = 64, C_l = Σ a·q·l and
 * C_h = Σ a·q·h, and per activation row the exact sum is C_l + 2^S·C_h: the integer the VNNI kernel gets. The mins
 * (against the activations' sums of 32) stay on vpdpwssd, and the two float steps are the VNNI kernel's, in its order.
 *
 * Making those B tiles (unpacking, scaling, storing 8 KiB a group-block) costs more than the tile products that read
 * them, so it is done once for a run of groups (k4_prep) and read by every call over those groups: by each chunk of
 * 32 activation rows of a prefill. */

/* Pair p (sub-blocks 2p, 2p + 1: 64 k) of the group-block at wb into bv[0] (q·l) and bv[1] (q·h): B row i the low
 * nibbles of dword column i (sub-block 2p), row 8 + i the high (2p + 1), times the l (h) part of the row's scale, as
 * words (the scale of dword lane r in both its words; one vpmullw per 64 bytes, as a word's high byte cannot carry). */
INLINE void k4_prep_pair(const int Q5, uint8_t (*bv)[16][64], const char *wb, const int p, size_t pf)
{
	const int S = Q5 ? 3 : 4;
	const size_t GB = Q5 ? 2880 : 2368;
	const __m512i lmask = _mm512_set1_epi32((1 << S) - 1);
	if (pf)
		prefetch_block(wb + pf + p * (GB / 4), GB / 4);
	const __m512i s0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(wb + 64 + 32 * p))),
	              s1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(wb + 80 + 32 * p)));
	const __m512i l0 = _mm512_and_si512(s0, lmask), h0 = _mm512_srli_epi32(s0, S),
	              l1 = _mm512_and_si512(s1, lmask), h1 = _mm512_srli_epi32(s1, S);
	const __m512i ml0 = _mm512_or_si512(l0, _mm512_slli_epi32(l0, 16)), mh0 = _mm512_or_si512(h0, _mm512_slli_epi32(h0, 16)),
	              ml1 = _mm512_or_si512(l1, _mm512_slli_epi32(l1, 16)), mh1 = _mm512_or_si512(h1, _mm512_slli_epi32(h1, 16));
	UNROLL for (int i = 0; i < 8; i++) {
		__m512i lo, hi;
		cpu_q45k_unpack(wb, Q5, p, i, &lo, &hi);
		_mm512_store_si512((void *)bv[0][i], _mm512_mullo_epi16(lo, ml0));
		_mm512_store_si512((void *)bv[0][8 + i], _mm512_mullo_epi16(hi, ml1));
		_mm512_store_si512((void *)bv[1][i], _mm512_mullo_epi16(lo, mh0));
		_mm512_store_si512((void *)bv[1][8 + i], _mm512_mullo_epi16(hi, mh1));
	}
}

/* The B tiles of a run of ng groups (gstride bytes apart), unit u = block u % nb of group u / nb at
 * prep + 8192·u: pair p's q·l tile at + 2048·p, its q·h tile 1024 further. */
INLINE void k4_prep(const int Q5, void *prep, int64_t nb, int ng, size_t gstride, const char *g, size_t pf)
{
	const size_t GB = Q5 ? 2880 : 2368;
	for (int64_t u = 0; u < (int64_t)ng * nb; u++) {
		uint8_t (*bv)[2][16][64] = (uint8_t (*)[2][16][64])((uint8_t *)prep + (size_t)u * 8192);
		const char *wb = g + (size_t)(u / nb) * gstride + (size_t)(u % nb) * GB;
		UNROLL for (int p = 0; p < 4; p++)
			k4_prep_pair(Q5, bv[p], wb, p, pf);
	}
}

/* The products of up to 32 activation rows (two A tiles: rows 0 … 15 in aq, 16 … 31 in the next chunk of the tiles'
 * layout) with a run of ng groups made ready by k4_prep, in one pipeline of units (block u % nb of group u / nb). Each
 * B tile serves both A tiles, and the four C tiles are four independent chains of products. */
INLINE void k_k4(int nc, const int Q5, int64_t nb, int64_t rows, int ng, size_t gstride, float *out, int64_t ldo,
                 const char *g, const char *a, size_t as, const uint8_t *aq, const uint8_t *prep)
{
	const size_t GB = Q5 ? 2880 : 2368;
	const int S = Q5 ? 3 : 4, two = nc > CPU_AMX_COLS;
	const uint8_t *aq1 = aq + (size_t)nb * 4096;   /* rows 16 … 31 */
	_Alignas(64) int32_t sums[2][4][CPU_AMX_COLS][16];   /* [set][l and h of rows 0 … 15, l and h of 16 … 31] */
	_Alignas(64) float acc[CPU_AMX_CALL_COLS][16];
	memset(acc, 0, sizeof acc);
	/* pair p of unit u: activations k = 64p … 64p + 63 (at + b·4096 + 64p, rows 256 apart; A tiles 4 and 5) against
	 * both B tiles (6, 7), into C tiles 0, 1 (rows 0 … 15) and 2, 3 (16 … 31), zeroed at p = 0 */
#define K4_TILES(u, p)                                                                                                \
	do {                                                                                                              \
		const size_t ao_ = (size_t)((u) % nb) * 4096 + 64 * (p);                                                      \
		const uint8_t *bt_ = prep + (size_t)(u) * 8192 + 2048 * (p);                                     \
		if ((p) == 0) {                                                                                               \
			_tile_zero(0);                                                                                            \
			_tile_zero(1);                                                                                            \
			if (two) {                                                                                                \
				_tile_zero(2);                                                                                        \
				_tile_zero(3);                                                                                        \
			}                                                                                                         \
		}                                                                                                             \
		_tile_loadd(4, aq + ao_, 256);                                                                                \
		_tile_loadd(6, bt_, 64);                                                                                      \
		_tile_dpbsud(0, 4, 6);                                                                                        \
		_tile_loadd(7, bt_ + 1024, 64);                                                                               \
		_tile_dpbsud(1, 4, 7);                                                                                        \
		if (two) {                                                                                                    \
			_tile_loadd(5, aq1 + ao_, 256);                                                                           \
			_tile_dpbsud(2, 5, 6);                                                                                    \
			_tile_dpbsud(3, 5, 7);                                                                                    \
		}                                                                                                             \
	} while (0)
	/* the C tiles to sums[set]: issued only once their products are done (a tile store issued while its products
	 * run holds back everything after it, the vector work included) */
#define K4_STORE(set)                                                                                                 \
	do {                                                                                                              \
		_tile_stored(0, sums[set][0], 64);                                                                            \
		_tile_stored(1, sums[set][1], 64);                                                                            \
		if (two) {                                                                                                    \
			_tile_stored(2, sums[set][2], 64);                                                                        \
			_tile_stored(3, sums[set][3], 64);                                                                        \
		}                                                                                                             \
	} while (0)
	/* unit u's float steps for rows [C0, C1) */
#define K4_POST(u, set, C0, C1)                                                                                       \
	do {                                                                                                              \
		const int64_t b_ = (u) % nb;                                                                                  \
		UNROLL for (int c = (C0); c < (C1); c++) {                                                                    \
			if (c >= nc)                                                                                              \
				break;                                                                                                \
			const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b_;                                      \
			const int h_ = c / CPU_AMX_COLS, r_ = c % CPU_AMX_COLS;                                                   \
			const __m512i l_ = _mm512_load_si512((const void *)sums[set][2 * h_][r_]),                                \
			              is = _mm512_add_epi32(l_, _mm512_slli_epi32(_mm512_load_si512((const void *)sums[set][2 * h_ + 1][r_]), S)); \
			__m512i ms = _mm512_setzero_si512();                                                                      \
			UNROLL for (int q = 0; q < 4; q++)                                                                        \
				ms = _mm512_dpwssd_epi32(ms, mnv[q], bcast32(y->bs32 + 2 * q));                                       \
			const __m512 ya = _mm512_set1_ps(y->d);                                                                   \
			__m512 s_ = _mm512_load_ps(acc[c]);                                                                       \
			s_ = _mm512_add_ps(s_, _mm512_mul_ps(_mm512_mul_ps(dd, ya), _mm512_cvtepi32_ps(is)));                     \
			s_ = _mm512_sub_ps(s_, _mm512_mul_ps(_mm512_mul_ps(dm, ya), _mm512_cvtepi32_ps(ms)));                     \
			_mm512_store_ps(acc[c], s_);                                                                              \
		}                                                                                                             \
	} while (0)
	const int64_t units = (int64_t)ng * nb;
	/* A pipeline over units: a unit's products are issued in iteration u - 2, stored at the start of iteration u - 1
	 * (done by then) and taken through the float steps in iteration u, a quarter at a time between the next unit's
	 * tile products. */
	for (int p = 0; p < 4; p++)
		K4_TILES(0, p);
	K4_STORE(0);
	if (units > 1)
		for (int p = 0; p < 4; p++)
			K4_TILES(1, p);
	for (int64_t u = 0; u < units; u++) {
		const int set = (int)(u & 1);
		const char *wb = g + (size_t)(u / nb) * gstride + (size_t)(u % nb) * GB;
		__m512i mnv[4];   /* the mins of the 16 weight rows (int16 pairs) */
		UNROLL for (int p = 0; p < 4; p++)
			mnv[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(wb + 192 + 32 * p)));
		const __m512 dd = h16(wb), dm = h16(wb + 32);
		if (u + 1 < units)
			K4_STORE(set ^ 1);
		UNROLL for (int p = 0; p < 4; p++) {
			if (u + 2 < units)
				K4_TILES(u + 2, p);
			K4_POST(u, set, 8 * p, 8 * p + 8);
		}
		if (u % nb == nb - 1) {   /* the group's last block: its 16 columns are done */
			const int64_t gi = u / nb, left = rows - 16 * gi;
			const __mmask16 keep = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
			for (int c = 0; c < nc; c++)
				_mm512_mask_storeu_ps(out + c * ldo + 16 * gi, keep, _mm512_load_ps(acc[c]));
			memset(acc, 0, sizeof acc);
		}
	}
#undef K4_TILES
#undef K4_STORE
#undef K4_POST
}

/* Q6_K on the tiles. Its scales are signed bytes per sub-block of 16 values and its quants six bits, so no split of
 * the scale keeps a quant times a part in a byte; both are split instead. With v = q − 32 = 16·vh + ql (ql = q & 15,
 * vh = (q >> 4) − 2 ∈ [−2, 1]) and sc = 16·sh + sl (sl = sc & 15, sh = sc >> 4 ∈ [−8, 7]):
 *   v·sc = ql·sl + 16·(ql·sh + vh·sl) + 256·vh·sh,
 * four products that each fit a byte (ql·sl ∈ [0, 225] unsigned; ql·sh ∈ [−120, 105], vh·sl ∈ [−30, 15] and
 * vh·sh ∈ [−14, 16] signed), so four B tiles a 64 k, multiplied into three C tiles (tdpbsud for the first, tdpbssd for
 * the others; the two middle ones into one), and per activation row the exact block sum is C1 + 16·C16 + 256·C256:
 * Σ_j sc_j·(Σ_{k∈j} a_k·q_k − 32·Σ a_k), the integer the VNNI kernel gets. Then the VNNI kernel's float step. The
 * q − 32 is in the weights, so the activations' sums are not needed. Made ready once per run of groups (q6_prep, 16
 * KiB a group-block) like the Q4_K tiles; 16 activation rows at a time (three C tiles, one A and four B fill the
 * eight). */

/* Pair P (sub-blocks 4P … 4P + 3: 64 k) of the group-block at wb into bt[0 … 3] (ql·sl, ql·sh, vh·sl, vh·sh): B rows
 * 0 … 7 quarter q0 = 2·(P & 1) of half P >> 1, rows 8 … 15 quarter q0 + 1 (cpu_qpack.h's columns: values
 * 128n + 32q + 4i + t are L[i + 8·(q & 1)]'s low (q < 2) or high nibble, with bits 2q, 2q + 1 of H[i] above them).
 * Products by vpmullw on words holding two bytes, with unsigned factors that cannot carry into the high byte: a signed
 * factor s is taken as (s + 8) and 8·x taken off after, and vh·y as q_h·y − 2y, all byte arithmetic modulo 256. */
INLINE void q6_prep_pair(uint8_t (*bt)[16][64], const char *wb, const int P, size_t pf)
{
	const size_t GB = 3360;
	const int n = P >> 1, q0 = 2 * (P & 1);
	const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03), mlo = _mm512_set1_epi32(0xFF);
	if (pf)
		prefetch_block(wb + pf + P * (GB / 4), GB / 4);
	/* per sub-block 4P + s: sl and sh + 8 in both words of each row's dword, 2·sl and 2·sh in its four bytes */
	__m512i msl[4], msh[4], tsl[4], tsh[4];
	UNROLL for (int s = 0; s < 4; s++) {
		const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(wb + 32 + 16 * (4 * P + s))));
		const __m512i sl = _mm512_and_si512(sc, _mm512_set1_epi32(15)), sh = _mm512_srai_epi32(sc, 4),
		              sh8 = _mm512_add_epi32(sh, _mm512_set1_epi32(8));
		msl[s] = _mm512_or_si512(sl, _mm512_slli_epi32(sl, 16));
		msh[s] = _mm512_or_si512(sh8, _mm512_slli_epi32(sh8, 16));
		__m512i a2 = _mm512_slli_epi32(sl, 1), b2 = _mm512_and_si512(_mm512_slli_epi32(sh, 1), mlo);
		a2 = _mm512_or_si512(a2, _mm512_slli_epi32(a2, 8));
		b2 = _mm512_or_si512(b2, _mm512_slli_epi32(b2, 8));
		tsl[s] = _mm512_or_si512(a2, _mm512_slli_epi32(a2, 16));
		tsh[s] = _mm512_or_si512(b2, _mm512_slli_epi32(b2, 16));
	}
	UNROLL for (int e = 0; e < 2; e++) {
		const int q = q0 + e;
		UNROLL for (int i = 0; i < 8; i++) {
			const int s = 2 * e + (i >> 2);   /* sub-block 8n + 2q + i / 4 = 4P + s */
			const __m512i L = _mm512_loadu_si512((const void *)(wb + 288 + 64 * (16 * n + i + 8 * e))),
			              H = _mm512_loadu_si512((const void *)(wb + 2336 + 64 * (8 * n + i)));
			const __m512i ql = q < 2 ? _mm512_and_si512(L, m4) : _mm512_and_si512(_mm512_srli_epi16(L, 4), m4);
			const __m512i qh = _mm512_and_si512(q ? _mm512_srli_epi16(H, 2 * q) : H, m3);
			const int r = 8 * e + i;
			_mm512_store_si512((void *)bt[0][r], _mm512_mullo_epi16(ql, msl[s]));
			_mm512_store_si512((void *)bt[1][r], _mm512_sub_epi8(_mm512_mullo_epi16(ql, msh[s]), _mm512_slli_epi16(ql, 3)));
			_mm512_store_si512((void *)bt[2][r], _mm512_sub_epi8(_mm512_mullo_epi16(qh, msl[s]), tsl[s]));
			_mm512_store_si512((void *)bt[3][r], _mm512_sub_epi8(_mm512_sub_epi8(_mm512_mullo_epi16(qh, msh[s]),
			                                                                      _mm512_slli_epi16(qh, 3)), tsh[s]));
		}
	}
}

/* The B tiles of a run of ng groups: unit u (block u % nb of group u / nb) at prep + 16384·u, pair P's four at
 * + 4096·P. */
INLINE void q6_prep(void *prep, int64_t nb, int ng, size_t gstride, const char *g, size_t pf)
{
	const size_t GB = 3360;
	for (int64_t u = 0; u < (int64_t)ng * nb; u++) {
		uint8_t (*bt)[4][16][64] = (uint8_t (*)[4][16][64])((uint8_t *)prep + (size_t)u * 16384);
		const char *wb = g + (size_t)(u / nb) * gstride + (size_t)(u % nb) * GB;
		UNROLL for (int P = 0; P < 4; P++)
			q6_prep_pair(bt[P], wb, P, pf);
	}
}

/* The products of up to 16 activation rows (aq: one chunk of the tiles' layout) with a run of ng groups made ready by
 * q6_prep. Iteration u stores unit u − 1's C tiles, issues unit u's sixteen tile products and then takes unit u − 1
 * through its float step while they run. */
INLINE void k_q6(const int NC, int nc, int64_t nb, int64_t rows, int ng, size_t gstride, float *out, int64_t ldo,
                 const char *g, const char *a, size_t as, const uint8_t *aq, const uint8_t *prep)
{
	const size_t GB = 3360;
	_Alignas(64) int32_t sums[3][CPU_AMX_COLS][16];   /* C1, C16, C256 */
	__m512 acc[CPU_AMX_COLS];
	UNROLL for (int c = 0; c < NC; c++)
		acc[c] = _mm512_setzero_ps();
	const int64_t units = (int64_t)ng * nb;
	for (int64_t u = 0; u <= units; u++) {
		if (u > 0) {
			_tile_stored(0, sums[0], 64);
			_tile_stored(1, sums[1], 64);
			_tile_stored(2, sums[2], 64);
		}
		if (u < units) {
			const uint8_t *bt = prep + (size_t)u * 16384, *ab = aq + (size_t)(u % nb) * 4096;
			_tile_zero(0);
			_tile_zero(1);
			_tile_zero(2);
			UNROLL for (int P = 0; P < 4; P++) {
				_tile_loadd(3, ab + 64 * P, 256);
				_tile_loadd(4, bt + 4096 * P, 64);
				_tile_dpbsud(0, 3, 4);
				_tile_loadd(5, bt + 4096 * P + 1024, 64);
				_tile_dpbssd(1, 3, 5);
				_tile_loadd(6, bt + 4096 * P + 2048, 64);
				_tile_dpbssd(1, 3, 6);
				_tile_loadd(7, bt + 4096 * P + 3072, 64);
				_tile_dpbssd(2, 3, 7);
			}
		}
		if (u > 0) {   /* unit u − 1's float step */
			const int64_t v = u - 1, b = v % nb;
			const __m512 dd = h16(g + (size_t)(v / nb) * gstride + (size_t)b * GB);
			UNROLL for (int c = 0; c < NC; c++) {
				if (c >= nc)
					continue;
				const cpu_qak *y = (const cpu_qak *)(const void *)(a + c * as) + b;
				const __m512i is = _mm512_add_epi32(
					_mm512_add_epi32(_mm512_load_si512((const void *)sums[0][c]),
				                     _mm512_slli_epi32(_mm512_load_si512((const void *)sums[1][c]), 4)),
					_mm512_slli_epi32(_mm512_load_si512((const void *)sums[2][c]), 8));
				acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dd, _mm512_set1_ps(y->d)),
				                                             _mm512_cvtepi32_ps(is)));
			}
			if (b == nb - 1) {   /* the group's last block: its 16 columns are done */
				const int64_t gi = v / nb, left = rows - 16 * gi;
				store_rows(NC, nc, out + 16 * gi, ldo, left < 16 ? (int)left : 16, acc);
				UNROLL for (int c = 0; c < NC; c++)
					acc[c] = _mm512_setzero_ps();
			}
		}
	}
}

/* cpu_amx_act_put: row c's quants, block by block, into their tile rows. */
void cpu_amx_act_put(aah_dtype t, void *aq, int c, const void *row, int64_t nb)
{
	if (t == AAH_DTYPE_Q8_0 || t == AAH_DTYPE_Q4_0) {
		const cpu_qa8 *y = row;
		for (int64_t b = 0; b < nb; b++) {
			uint8_t *blk = (uint8_t *)aq + (size_t)b * CPU_AMX_Q8_BLOCK;
			memcpy(blk + (size_t)c * 32, y[b].qs, 32);
			memcpy(blk + 512 + (size_t)c * 4, &y[b].d, 4);
		}
	} else {
		const cpu_qak *y = row;
		for (int64_t b = 0; b < nb; b++)
			memcpy((uint8_t *)aq + (size_t)b * 4096 + (size_t)c * 256, y[b].qs, 256);
	}
}

/* One instantiation per type, for a whole tile of rows (NC = 16: the accumulators in registers, the loops unrolled);
 * fewer rows nc only skip the rows past nc (the tiles are configured for nc rows). 16 instantiations per type, one per
 * row count, took minutes to compile under the sanitizers for no speed: the backend uses the tiles from the row count
 * cpu_amx_min_rows gives (12 for Q8_0 and Q4_0, 32 for Q4_K and Q5_K, 64 for Q6_K).
 * Q8_0, Q4_0 and Q6_K take a call's up to 32 rows 16 at a time (their chunks of the tiles' layout are BB bytes a block),
 * one group at a time (their pipelines run within a group, of 32 or more stages at 1024 columns). */
#define AMX_HALVES(name, KIND, BB, k)                                                                          \
	static void name(int64_t nb, int nc, int64_t rows, int ng, size_t gstride, float *out, int64_t ldo,        \
	                 const void *gv, const void *av, size_t as, const void *aqv, const void *prep, size_t pf)  \
	{                                                                                                          \
		(void)prep;                                                                                            \
		for (int h = 0; CPU_AMX_COLS * h < nc; h++) {                                                          \
			const int n = nc - CPU_AMX_COLS * h < CPU_AMX_COLS ? nc - CPU_AMX_COLS * h : CPU_AMX_COLS;         \
			const char *g = gv, *a = (const char *)av + (size_t)(CPU_AMX_COLS * h) * as;                       \
			const uint8_t *aq = (const uint8_t *)aqv + (size_t)h * (size_t)nb * (BB);                          \
			tiles_configure(n, KIND);                                                                          \
			for (int gi = 0; gi < ng; gi++) {                                                                  \
				const int64_t left = rows - 16 * gi;                                                           \
				const int nr = left < 16 ? (int)left : 16;                                                     \
				float *o = out + (int64_t)(CPU_AMX_COLS * h) * ldo + 16 * gi;                                  \
				k;                                                                                             \
			}                                                                                                  \
		}                                                                                                      \
	}
AMX_HALVES(amx_q8_0, 0, CPU_AMX_Q8_BLOCK, k_8bit(CPU_AMX_COLS, n, 0, nb, nr, o, ldo, g + gi * gstride, a, as, aq, pf))
AMX_HALVES(amx_q4_0, 0, CPU_AMX_Q8_BLOCK, k_8bit(CPU_AMX_COLS, n, 1, nb, nr, o, ldo, g + gi * gstride, a, as, aq, pf))


/* Q4_K and Q5_K: all 32 rows at once, every group in one pipeline, from their weights made ready for the tiles
 * (k4_prep). */
#define AMX_K4(name, prep_name, Q5)                                                                            \
	static void name(int64_t nb, int nc, int64_t rows, int ng, size_t gstride, float *out, int64_t ldo,        \
	                 const void *gv, const void *av, size_t as, const void *aqv, const void *prep, size_t pf)  \
	{                                                                                                          \
		(void)pf;   /* the weights were read (and prefetched) by the preparation */                          \
		tiles_configure(nc, 4);                                                                                \
		k_k4(nc, Q5, nb, rows, ng, gstride, out, ldo, gv, av, as, aqv, prep);                                  \
	}                                                                                                          \
	static void prep_name(void *prep, int64_t nb, int ng, size_t gstride, const void *gv, size_t pf)           \
	{                                                                                                          \
		k4_prep(Q5, prep, nb, ng, gstride, gv, pf);                                                            \
	}
AMX_K4(amx_q4_K, prep_q4_K, 0)
AMX_K4(amx_q5_K, prep_q5_K, 1)

/* Q6_K: 16 rows at a time (k_q6), every group in one pipeline, from its weights made ready (q6_prep). */
static void amx_q6_K(int64_t nb, int nc, int64_t rows, int ng, size_t gstride, float *out, int64_t ldo, const void *gv,
                     const void *av, size_t as, const void *aqv, const void *prep, size_t pf)
{
	(void)pf;   /* the weights were read (and prefetched) by the preparation */
	for (int h = 0; CPU_AMX_COLS * h < nc; h++) {
		const int n = nc - CPU_AMX_COLS * h < CPU_AMX_COLS ? nc - CPU_AMX_COLS * h : CPU_AMX_COLS;
		tiles_configure(n, 1);
		k_q6(CPU_AMX_COLS, n, nb, rows, ng, gstride, out + (int64_t)(CPU_AMX_COLS * h) * ldo, ldo, gv,
		     (const char *)av + (size_t)(CPU_AMX_COLS * h) * as, as, (const uint8_t *)aqv + (size_t)h * (size_t)nb * 4096,
		     prep);
	}
}

static void prep_q6_K(void *prep, int64_t nb, int ng, size_t gstride, const void *gv, size_t pf)
{
	q6_prep(prep, nb, ng, gstride, gv, pf);
}

size_t cpu_amx_prep_bytes(aah_dtype t)
{
	return t == AAH_DTYPE_Q4_K || t == AAH_DTYPE_Q5_K ? 8192 : t == AAH_DTYPE_Q6_K ? 16384 : 0;
}

cpu_amx_prep_fn cpu_amx_prep(aah_dtype t)
{
	return t == AAH_DTYPE_Q4_K ? prep_q4_K : t == AAH_DTYPE_Q5_K ? prep_q5_K : t == AAH_DTYPE_Q6_K ? prep_q6_K : NULL;
}

cpu_amx_fn cpu_amx_kernel(aah_dtype t)
{
	switch (t) {
	case AAH_DTYPE_Q8_0: return amx_q8_0;
	case AAH_DTYPE_Q4_0: return amx_q4_0;
	case AAH_DTYPE_Q4_K: return amx_q4_K;
	case AAH_DTYPE_Q5_K: return amx_q5_K;
	case AAH_DTYPE_Q6_K: return amx_q6_K;
	default: return NULL;
	}
}

/* ---- AMX-BF16: packed bf16 weights (cpu_kernels.h) times bf16-rounded activations ----
 * A panel's 32 k (16 k pairs × 16 rows × 2) are 1024 contiguous bytes, exactly a B tile; 16 activation rows of 32 bf16
 * each an A tile (rows K·2 bytes apart). The products accumulate in the C tiles over all of K and leave once: no
 * per-block scales here. G panels share each A tile. */
INLINE void bf16_block(float *out, int64_t ldo, const uint16_t *xb, int nc, const char *w, int64_t pstride, const int G,
                       int64_t K, int64_t m0, int64_t M)
{
	_Alignas(64) float c[4][CPU_AMX_COLS][16];
	_tile_zero(0);
	if (G > 1) {
		_tile_zero(1);
		_tile_zero(2);
		_tile_zero(3);
	}
	for (int64_t kb = 0; kb < K / 32; kb++) {
		const char *wk = w + kb * 1024;
		_tile_loadd(4, xb + kb * 32, (long)(K * 2));
		_tile_loadd(5, wk, 64);
		_tile_dpbf16ps(0, 4, 5);
		if (G > 1) {
			_tile_loadd(6, wk + pstride, 64);
			_tile_dpbf16ps(1, 4, 6);
			_tile_loadd(5, wk + 2 * pstride, 64);
			_tile_dpbf16ps(2, 4, 5);
			_tile_loadd(6, wk + 3 * pstride, 64);
			_tile_dpbf16ps(3, 4, 6);
		}
	}
	_tile_stored(0, c[0], 64);
	if (G > 1) {
		_tile_stored(1, c[1], 64);
		_tile_stored(2, c[2], 64);
		_tile_stored(3, c[3], 64);
	}
	for (int g = 0; g < G; g++) {
		const int64_t m = m0 + 16 * g;
		if (m >= M)
			break;
		const __mmask16 keep = M - m >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (M - m)) - 1);
		for (int i = 0; i < nc; i++)
			_mm512_mask_storeu_ps(out + i * ldo + m, keep, _mm512_load_ps(c[g][i]));
	}
}

void cpu_amx_bf16_panel_mm(float *out, int64_t ldo, const uint16_t *xb, int32_t n, const void *w, int64_t K, int64_t M,
                           int64_t p0, int64_t p1)
{
	const int64_t pstride = K * 16 * 2;   /* K even: a multiple of 32 */
	for (int32_t i0 = 0; i0 < n; i0 += CPU_AMX_COLS) {
		const int nc = n - i0 < CPU_AMX_COLS ? n - i0 : CPU_AMX_COLS;
		tiles_configure(nc, 2);
		int64_t p = p0;
		for (; p + 4 <= p1; p += 4)
			bf16_block(out + i0 * ldo, ldo, xb + i0 * K, nc, (const char *)w + p * pstride, pstride, 4, K, p * 16, M);
		for (; p < p1; p++)
			bf16_block(out + i0 * ldo, ldo, xb + i0 * K, nc, (const char *)w + p * pstride, pstride, 1, K, p * 16, M);
	}
}
