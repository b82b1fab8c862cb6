/* kernels/cpu/cpu_amx.h — the packed products of cpu_qpack.h on AMX-INT8 tiles (Sapphire Rapids and later), for the
 * many activation rows of a prefill or a batched decode step; and the run-time check that CPU and kernel allow them.
 * Also the bf16 panels' product on AMX-BF16 tiles (at the end), an option (AAH_CPU_BF16=amx).
 *
 * The same bits as the AVX-512 VNNI kernels (cpu_qpack_avx512vnni.c), for every row count: a tile product gives each
 * block's (or sub-block's) exact int32 sums, the same integers vpdpbusd gives, and every lane then takes the same float
 * operations in the same order (a product, then a sum, per block). So a row's result does not depend on whether it was
 * multiplied on tiles beside 15 others or alone with vpdpbusd (batch invariance, tests/kernels/check_amx_bf16.c). */
#ifndef AAH_CPU_AMX_H
#define AAH_CPU_AMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/cpu_qpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tile's rows: the activation rows of one chunk of the tiles' layout below. */
#define CPU_AMX_COLS 16
/* The most activation rows one AMX kernel call takes: two chunks, so that the K types' unpacked and scaled weights
 * (their costly part) serve two A tiles. */
#define CPU_AMX_CALL_COLS 32

/* true when this CPU has AMX-TILE and AMX-INT8 (CPUID leaf 7) and the kernel granted this process the tile data
 * state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); asked once per process, the answer kept. */
bool cpu_amx_available(void);

/* The activation quants of up to CPU_AMX_COLS rows laid out as the tiles read them, each tile row aligned and in one
 * cache line (the rows' own cpu_qa8 / cpu_qak blocks are 40 and 340 bytes, which splits lines): block b's quants of
 * row c at aq + b·cpu_amx_act_block_bytes(t) + c·Q, Q = 32 (Q8_0, Q4_0) or 256 (the K types); for Q8_0 and Q4_0 the
 * 16 rows' scales d follow as floats (at + 512). */
#define CPU_AMX_Q8_BLOCK (16 * 32 + 16 * 4)
static inline size_t cpu_amx_act_block_bytes(aah_dtype t)
{
	return t == AAH_DTYPE_Q8_0 || t == AAH_DTYPE_Q4_0 ? CPU_AMX_Q8_BLOCK : 16 * 256;
}
/* Copies the quants of one activation row (its nb blocks as cpu_qpack_quantize_act wrote them) into slot c of aq. */
void cpu_amx_act_put(aah_dtype t, void *aq, int c, const void *row, int64_t nb);

/* out[c·ldo + 16·i + r] = the dot of row r of group i (at (char *)group + i·gstride) with activation row c, for
 * i < ng, r < min(16, rows − 16·i), c < nc ≤ CPU_AMX_CALL_COLS: as cpu_qpack_fn's for each group, the rows' scales
 * and sums read from a (rows `as` apart), their quants from aq (the layout above: rows 16 … 31 in the chunk after,
 * nb · cpu_amx_act_block_bytes(t) bytes on). */
typedef void (*cpu_amx_fn)(int64_t nb, int nc, int64_t rows, int ng, size_t gstride, float *out, int64_t ldo,
                           const void *group, const void *a, size_t as, const void *aq, const void *prep,
                           size_t prefetch);

/* The AMX kernel for packed type t, or NULL where t has none. Only to be called where cpu_amx_available() said true. */
cpu_amx_fn cpu_amx_kernel(aah_dtype t);

/* The K types: their weights made ready for the tiles once for a run of ng groups (unpacked to bytes and multiplied by
 * their scales: Q4_K and Q5_K two B tiles a 64 k, Q6_K four), cpu_amx_prep_bytes(t) bytes a group-block, into prep
 * (ng · nb of them, 64-byte aligned); every kernel call over those groups then reads them from prep (Q8_0's and
 * Q4_0's kernels ignore it and read the groups). The function for packed type t, or NULL where there is none;
 * cpu_amx_prep_bytes 0 there. Only where cpu_amx_available(). */
size_t cpu_amx_prep_bytes(aah_dtype t);
typedef void (*cpu_amx_prep_fn)(void *prep, int64_t nb, int ng, size_t gstride, const void *group, size_t prefetch);
cpu_amx_prep_fn cpu_amx_prep(aah_dtype t);

/* Loads this thread's tile configuration with every tile full, 16 rows of 64 bytes (tmm0 … tmm7), through the same
 * code and per-thread record as the kernels above, so that their next call loads their own again. For the peak loops
 * (cpu_peak_amx.c); only where cpu_amx_available(). */
void cpu_amx_tiles_full(void);

/* From this many activation rows on (a call's, and a 16-row chunk's), the packed products run on AMX tiles where the
 * CPU has them (the same bits as the VNNI kernels, so the choice is speed only). Measured on an Emerald Rapids Xeon,
 * Q8_0 3072 × 1024: the tiles 0.93x vpdpbusd at 4 rows, 0.91x at 8, 1.12x at 12, 1.22x at 16 (Q4_0: 0.71x, 1.08x,
 * 1.39x, 1.44x); so fewer rows, a decode step's included, stay on vpdpbusd (cpu_quant_matmul.c; and
 * aah_backend_cpu_product says so). */
#define CPU_AMX_MIN_ROWS 12
/* The K types, whose weights are made ready once per run of groups (cpu_amx_prep), pay for it over the rows of a call:
 * on that Xeon, 3072 × 1024 (aah-bench --products, docs/bench/2026-12-07-amx-kquants.md), Q4_K on tiles against
 * vpdpbusd was 0.99x at 16 rows, 1.10x at 32, 1.42x at 64 and 1.84x at 512; Q6_K (four B tiles a 64 k) 0.64x at 16,
 * 0.83x at 32, 1.12x at 64, 1.58x at 512. So their products take the tiles from 32 (Q6_K: 64) rows a call (a token
 * block of cpu_quant_matmul.c), and within one, each chunk from CPU_AMX_MIN_ROWS. */
#define CPU_AMX_PREP_MIN_ROWS 32
#define CPU_AMX_Q6_MIN_ROWS 64
static inline int cpu_amx_min_rows(aah_dtype t)
{
	return t == AAH_DTYPE_Q4_K || t == AAH_DTYPE_Q5_K ? CPU_AMX_PREP_MIN_ROWS
	       : t == AAH_DTYPE_Q6_K                     ? CPU_AMX_Q6_MIN_ROWS
	                                                 : CPU_AMX_MIN_ROWS;
}

/* AMX-BF16 (CPUID leaf 7 also; the same grant): true where the bf16 tile product below may run. */
bool cpu_amx_bf16_available(void);
/* out[i·ldo + m] = Σ_k bf16(x[i][k]) · w(m, k) for i < n (any n) and the rows m < M of panels [p0, p1) of a packed bf16
 * matrix w (cpu_kernels.h) of K columns, K a multiple of 32; xb the n activation rows rounded to bf16, row-major (K
 * apart). One tile product per 32 k into fp32 tiles: each result depends only on its own row and weight row, never on
 * n, the panels or the threads (batch-invariant), but its rounding is the tile unit's, not vdpbf16ps's. */
void cpu_amx_bf16_panel_mm(float *out, int64_t ldo, const uint16_t *xb, int32_t n, const void *w, int64_t K, int64_t M,
                           int64_t p0, int64_t p1);

#ifdef __cplusplus
}
#endif

#endif
