/* kernels/cpu/cpu_bf16dot.h — products with packed bf16 weights (cpu_kernels.h) on AVX-512 BF16's vdpbf16ps, the
 * activations rounded to bf16 as llama.cpp rounds them: twice the products per instruction of the exact path, which
 * widens the weights to f32 and multiplies f32 activations (the panel_mm of cpu_kernels_avx512.c).
 *
 * Batch invariance holds as on the exact path: a row's activations are rounded alone, and each output lane is one
 * vdpbf16ps per k pair, in k order, into a zero-started accumulator, whatever the rows, panels or threads of the call. */
#ifndef AAH_CPU_BF16DOT_H
#define AAH_CPU_BF16DOT_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most activation rows one cpu_bf16dot_panel_mm call takes. */
#define CPU_BF16DOT_ROWS 16

/* true when the CPU has AVX-512 BF16 (and the AVX-512 the rest of the file needs). */
bool cpu_bf16dot_available(void);

/* The activation pairs of nr ≤ CPU_BF16DOT_ROWS rows x (row-major, K floats each, rows K apart), k-major:
 * dst[kp·nr + i] = bf16(x[i][2kp]) | bf16(x[i][2kp + 1]) << 16 for kp < (K + 1) / 2 (odd K: the missing half 0), each
 * value rounded to nearest even as cpu_f32_to_bf16 rounds it (a NaN quieted). */
void cpu_bf16dot_pairs(uint32_t *dst, const float *x, int32_t nr, int64_t K);

/* dst[i] = bf16(x[i]) for i < count, rounded as cpu_f32_to_bf16 rounds (the row-major activations of the AMX-BF16
 * product, cpu_amx.h). */
void cpu_bf16dot_round(uint16_t *dst, const float *x, int64_t count);

/* out[i·ldo + m] = Σ_kp dot2(xp pair (kp, i), weight pair (m, kp)) for i < n ≤ CPU_BF16DOT_ROWS and the rows m < M of
 * panels [p0, p1) of a packed bf16 matrix w of K columns; xp as cpu_bf16dot_pairs writes it for n rows. Each dot2 is
 * one vdpbf16ps step: the odd k's product, then the even k's, added to the lane, each rounded (the products are exact;
 * denormals are flushed). */
void cpu_bf16dot_panel_mm(float *out, int64_t ldo, const uint32_t *xp, int32_t n, const void *w, int64_t K, int64_t M,
                          int64_t p0, int64_t p1);

#ifdef __cplusplus
}
#endif

#endif
