/* kernels/cpu/cpu_quant.h — products of f32 activations with block-quantized weights (kernels/quant.h), the way
 * llama.cpp's CPU path computes them: each activation row is first quantized to 8-bit blocks (Q8_0 for Q8_0 and
 * Q4_0 weights, Q8_K for the K types), then every block product is an exact integer dot product, scaled by the two
 * blocks' scales in float. One table per instruction set, picked beside cpu_kernels_select.
 *
 * Batch invariance: out(i, m) = dot(weight row m, quantized activation row i), and both the quantization of a row and
 * a dot's operations (the integer sums, then one float multiply-add per block into a fixed set of lanes, then one
 * fixed reduction) never depend on how many rows share a call, which thread runs them or where a row sits. */
#ifndef AAH_CPU_QUANT_H
#define AAH_CPU_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/quant.h"

/* The most activation rows one dot call takes: the weight's blocks are unpacked once for all of them. 8 fits the
 * AVX-512 table's per-row accumulators in its 32 vector registers (the AVX2 table, with 16, runs the K types' rows
 * in groups of 4 within a call); 4 left the prefill at half BF16's speed (docs/bench/2026-12-01-quantized.md). */
#define CPU_QDOT_COLS 8

/* s[c] = Σ_b dot(block b of the weight row w, block b of activation row c) for c < nc (1 ≤ nc ≤ CPU_QDOT_COLS),
 * nb blocks each; activation row c at (const char *)a + c·a_stride, of the weight type's activation type. */
typedef void (*cpu_qdot_fn)(int64_t nb, int32_t nc, float *s, const void *w, const void *a, size_t a_stride);

typedef struct cpu_qkernels {
	const char *isa;
	cpu_qdot_fn dot[AAH_DTYPE_Q8_K + 1];   /* by weight type; NULL for the float types and Q8_K */
} cpu_qkernels;

extern const cpu_qkernels cpu_qkernels_generic;
extern const cpu_qkernels cpu_qkernels_avx2;
extern const cpu_qkernels cpu_qkernels_avx512;

/* The table for the instruction set `isa` (cpu_kernels.h's names): "avx512" needs AVX-512 VNNI besides the float
 * table's AVX-512 (without it the avx2 table serves); NULL when the CPU cannot run it. */
const cpu_qkernels *cpu_qkernels_for(const char *isa);

/* The activation type of weight type t: Q8_0 for Q8_0 and Q4_0, Q8_K for Q4_K, Q5_K and Q6_K. */
aah_dtype cpu_quant_act_type(aah_dtype t);

/* dst = x[0 … n) as blocks of type t (Q8_0 or Q8_K, n a multiple of its block length): exactly ggml's
 * quantize_row_q8_0_ref / quantize_row_q8_K_ref (aah_quantize_row_ref), except that a NaN becomes 0 and an
 * infinity is clamped rather than being undefined behaviour; a Q8_K block of zeros has zero sums too. */
void cpu_quantize_act(aah_dtype t, void *dst, const float *x, int64_t n);

/* The 8 six-bit scales (sc) and mins (m) of a Q4_K / Q5_K block's 12 scale bytes, in sub-block order
 * (ggml's get_scale_min_k4 for j = 0 … 7). */
static inline void cpu_unpack_scales_k4(const uint8_t *q, uint8_t sc[8], uint8_t m[8])
{
	for (int j = 0; j < 4; j++) {
		sc[j] = q[j] & 63;
		m[j] = q[j + 4] & 63;
	}
	for (int j = 4; j < 8; j++) {
		sc[j] = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		m[j] = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

#endif
