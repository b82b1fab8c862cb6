/* kernels/cpu/cpu_qpack.h — block-quantized weights repacked for the AVX-512 VNNI products: 16 rows interleaved, so
 * that one vpdpbusd multiplies 4 quants of each of the 16 rows by the same 4 activation quants (broadcast) and its 16
 * int32 lanes are the 16 rows' sums — no horizontal sums, and every weight byte unpacked once for all the activation
 * rows of a call. This is the layout llama.cpp's CPU "repack" buffers use for the same reason; ours is our own.
 *
 * A matrix of M rows is ceil(M / 16) groups; a group holds its 16 rows' blocks, block by block (the rows past M are
 * zeros). Within a group-block the 16 rows' scales come first, then their quants as "dword columns": 64 bytes holding
 * dword i of each row's quant bytes (lane r = row r), so the rows' bytes are those of the GGUF block, moved only.
 * Per group-block, r the row, i a dword column, t its byte (offsets in bytes):
 *
 *   Q8_0 (544):  d[16] f16 at 0;  qs[8][16][4] at 32, the int8 quant + 128 (vpdpbusd's unsigned operand)
 *   Q4_0 (288):  d[16] f16 at 0;  qs[4][16][4] at 32: the block's own nibble bytes (low: value 4i+t, high: 16+4i+t)
 *   Q4_K (2368): d[16], dmin[16] f16 at 0, 32;  sc[8][16] at 64 and mn[4][16][2] at 192 (the six-bit scales of the
 *                8 sub-blocks, the mins as pairs 2p, 2p+1 per row);  qs[4][8][16][4] at 320: the bytes
 *                qs[32p + 4i + t] (low nibble: sub-block 2p, high: 2p + 1)
 *   Q5_K (2880): Q4_K's, then qh[8][16][4] at 2368: the bytes qh[4i + t] (bit j: the fifth bit of sub-block j)
 *   Q6_K (3360): d[16] f16 at 0;  sc[16][16] int8 at 32;  ql[2][16][16][4] at 288: ql[64n + 4i + t];
 *                qh[2][8][16][4] at 2336: qh[32n + 4i + t]
 *
 * The activations are quantized exactly as for the row-major dots (cpu_quant.h: Q8_0 / Q8_K, ggml's quantizers),
 * then written with the sums these kernels fold in (cpu_qa8, cpu_qak). */
#ifndef AAH_CPU_QPACK_H
#define AAH_CPU_QPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"

#define CPU_QPACK_ROWS 16
/* The most activation rows one kernel call takes (each row's accumulators in registers). */
#define CPU_QPACK_COLS 8

/* An activation block for Q8_0 / Q4_0 weights: the Q8_0 quants, their scale as a float, and the sum the weights' offset
 * (+128 for Q8_0, the −8 of Q4_0) contributes: bias = −128·Σq or −8·Σq. */
typedef struct cpu_qa8 {
	float d;
	int32_t bias;
	int8_t qs[32];
} cpu_qa8;

/* An activation block for the K types: the Q8_K quants and scale, −32 × each 16-quant sum (Q6_K's offset) and the
 * sums of 32 quants (Q4_K / Q5_K's mins). */
typedef struct cpu_qak {
	int8_t qs[256];
	int32_t b32[16];
	int16_t bs32[8];
	float d;
} cpu_qak;

/* true when type t has a packed form. */
bool cpu_qpack_has(aah_dtype t);
/* Bytes of one group-block of t (the numbers above), and of one group of a matrix of `cols` columns. */
size_t cpu_qpack_block_bytes(aah_dtype t);
size_t cpu_qpack_group_bytes(aah_dtype t, int64_t cols);
/* Packs rows [0, n) (n ≤ 16) of src (row-major blocks, row_bytes apart) into one group at dst; rows n … 15 zeros. */
void cpu_qpack_group(aah_dtype t, void *dst, const void *src, size_t row_bytes, int n, int64_t cols);
/* Row r (< 16) of a group, back as its blocks in GGUF order (exactly the bytes that were packed). */
void cpu_qpack_unpack_row(aah_dtype t, void *dst, const void *group, int r, int64_t cols);

/* Bytes of one activation row of n values for weights of type t, and the row quantized into that form (n a multiple
 * of t's block length): the quants, scales and sums exactly as cpu_quantize_act's. */
size_t cpu_qpack_act_row_bytes(aah_dtype t, int64_t n);
void cpu_qpack_quantize_act(aah_dtype t, void *dst, const float *x, int64_t n);
/* The same bits, Q8_0 / Q4_0's rows vectorized (AVX-512, AVX2: only where their packed kernels run). */
void cpu_qpack_quantize_act_avx512(aah_dtype t, void *dst, const float *x, int64_t n);
void cpu_qpack_quantize_act_avx2(aah_dtype t, void *dst, const float *x, int64_t n);

/* out[c·ldo + r] = Σ over the nb blocks of the dot of group row r with activation row c (at (char *)a + c·as) for
 * c < nc ≤ CPU_QPACK_COLS and r < nr ≤ 16. Each row's operations (the exact integer sums of a block, then one float
 * multiply-add per block into its own lane) are the same for any nc, nr or group: batch-invariant. prefetch: bytes
 * ahead of the block being read to prefetch (0: none). The AVX-512 VNNI table (cpu_qpack_avx512vnni.c). */
typedef void (*cpu_qpack_fn)(int64_t nb, int nc, int nr, float *out, int64_t ldo, const void *group, const void *a,
                             size_t as, size_t prefetch);
cpu_qpack_fn cpu_qpack_kernel_avx512(aah_dtype t);
/* The same products with AVX2 (cpu_qpack_avx2.c), for CPUs without AVX-512 VNNI: the same bits. */
cpu_qpack_fn cpu_qpack_kernel_avx2(aah_dtype t);
/* And with a 256-bit vpdpbusd: AVX-VNNI's VEX form (CPUs with it and no AVX-512), and the EVEX form of AVX-512 VNNI
 * (the same code, for the tests and for comparison). The same bits again. */
cpu_qpack_fn cpu_qpack_kernel_avxvnni(aah_dtype t);
cpu_qpack_fn cpu_qpack_kernel_vnni256(aah_dtype t);

#endif
