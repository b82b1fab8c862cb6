/* kernels/quant.h — block-quantized weight formats, bit for bit those of GGUF files (ggml's block layouts), and the
 * scalar reference code every SIMD kernel and every writer is tested against.
 *
 * A quantized row of n values is n / block_len blocks laid end to end; a matrix is rows of blocks. Every block
 * holds its own scale(s) as IEEE half floats (stored as bits: aah_half) and small integers:
 *   Q8_0  32 values: d, 32 × int8              x = d·q
 *   Q4_0  32 values: d, 16 bytes of nibbles    x = d·(q − 8); byte j holds value j (low) and j + 16 (high)
 *   Q4_K 256 values: d, dmin, 12 bytes of 6-bit scales and mins (8 sub-blocks of 32), 128 bytes of nibbles
 *                    x = d·sc_j·q − dmin·m_j
 *   Q5_K 256 values: as Q4_K plus 32 bytes of fifth bits (qh)
 *   Q6_K 256 values: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales (sub-blocks of 16), d
 *                    x = d·sc_j·(q − 32)
 *   Q8_K 256 values: f32 d, 256 × int8, 16 sums of 16 (activations only; never in a file)
 * The layouts and the order of the bits inside each block are ggml's (ggml-common.h); the reference
 * dequantizers below reproduce its dequantize_row_* exactly (the same float operations in the same order). */
#ifndef AAH_QUANT_H
#define AAH_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AAH_QK8_0 32
#define AAH_QK4_0 32
#define AAH_QK_K 256
#define AAH_K_SCALE_SIZE 12

typedef uint16_t aah_half;   /* IEEE 754 binary16 bits */

typedef struct aah_block_q8_0 {
	aah_half d;
	int8_t qs[AAH_QK8_0];
} aah_block_q8_0;

typedef struct aah_block_q4_0 {
	aah_half d;
	uint8_t qs[AAH_QK4_0 / 2];
} aah_block_q4_0;

typedef struct aah_block_q4_K {
	aah_half d;                          /* super-block scale of the quantized scales */
	aah_half dmin;                       /* super-block scale of the quantized mins */
	uint8_t scales[AAH_K_SCALE_SIZE];    /* 8 scales and 8 mins, 6 bits each */
	uint8_t qs[AAH_QK_K / 2];            /* 4-bit quants */
} aah_block_q4_K;

typedef struct aah_block_q5_K {
	aah_half d;
	aah_half dmin;
	uint8_t scales[AAH_K_SCALE_SIZE];
	uint8_t qh[AAH_QK_K / 8];            /* the fifth bit of each quant */
	uint8_t qs[AAH_QK_K / 2];            /* its low 4 bits */
} aah_block_q5_K;

typedef struct aah_block_q6_K {
	uint8_t ql[AAH_QK_K / 2];            /* low 4 bits */
	uint8_t qh[AAH_QK_K / 4];            /* high 2 bits */
	int8_t scales[AAH_QK_K / 16];        /* 8-bit scales of 16 sub-blocks */
	aah_half d;
} aah_block_q6_K;

typedef struct aah_block_q8_K {
	float d;
	int8_t qs[AAH_QK_K];
	int16_t bsums[AAH_QK_K / 16];        /* sums of the quants in groups of 16 */
} aah_block_q8_K;

#ifndef __cplusplus
_Static_assert(sizeof(aah_block_q8_0) == 34, "block_q8_0 is 34 bytes");
_Static_assert(sizeof(aah_block_q4_0) == 18, "block_q4_0 is 18 bytes");
_Static_assert(sizeof(aah_block_q4_K) == 144, "block_q4_K is 144 bytes");
_Static_assert(sizeof(aah_block_q5_K) == 176, "block_q5_K is 176 bytes");
_Static_assert(sizeof(aah_block_q6_K) == 210, "block_q6_K is 210 bytes");
_Static_assert(sizeof(aah_block_q8_K) == 292, "block_q8_K is 292 bytes");
#endif

/* 1 for the block types (Q8_0 … Q8_K), 0 for F32/F16/BF16. */
int aah_dtype_is_quantized(aah_dtype t);
/* Values per block: 32 or 256 for the block types, 1 for the float types. */
int64_t aah_dtype_block_len(aah_dtype t);
/* Bytes per block (the element size for the float types). */
size_t aah_dtype_block_bytes(aah_dtype t);
/* Bytes of a row of n values; 0 when n is not a whole number of blocks (or the type unknown). */
size_t aah_dtype_row_bytes(aah_dtype t, int64_t n);

/* out[0 … n) = the values of the row of blocks `src` (n a multiple of the block length); any aah_dtype, the float
 * types widened exactly. The reference: ggml's dequantize_row_* bit for bit. */
void aah_dequantize_row(aah_dtype t, float *out, const void *src, int64_t n);
/* dst = the blocks of x[0 … n) (n a multiple of the block length), by the reference quantizer of type t (ggml's
 * quantize_row_*_ref: the same blocks llama.cpp's `llama-quantize` writes without an importance matrix). Every block
 * type; Q8_K is for activations. */
void aah_quantize_row_ref(aah_dtype t, void *dst, const float *x, int64_t n);

/* IEEE half ↔ float, exact widening and round-to-nearest-even narrowing. */
float aah_half_to_float(aah_half h);
aah_half aah_float_to_half(float f);

#ifdef __cplusplus
}
#endif
#endif
