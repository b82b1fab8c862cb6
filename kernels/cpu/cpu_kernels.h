/* kernels/cpu/cpu_kernels.h — the CPU inner loops, one table per instruction set, picked at run time
 * (cpu_kernels_select) so one binary runs on any x86-64 and uses AVX2/FMA or AVX-512 where present. */
#ifndef AAH_CPU_KERNELS_H
#define AAH_CPU_KERNELS_H

#include <stdint.h>

#include "kernels/backend.h"

/* Weight matrices are packed at import (cpu_backend.c) into panels of CPU_PANEL rows, the last one zero-padded:
 * inside a panel, f32 and f16 weights as [k][CPU_PANEL] and bf16 as [k / 2][CPU_PANEL][2] (a k pair per 32-bit
 * word, so a vector of pairs widens to two f32 vectors with one shift and one mask; K padded to even). Row m's
 * element k is at cpu_packed_index. The kernels then hold CPU_PANEL output rows in one vector and multiply it by a
 * broadcast activation: no conversion pass, no horizontal sums.
 *
 * Every product of a weight row with an activation row is one sum over k in order, one multiply-add per k (fused
 * in the SIMD tables) into a zero-started accumulator. So a row's result never depends on how many rows share the
 * call, how they were grouped or which thread ran them (batch invariance: a request's tokens do not depend on what
 * else the server is running). */
#define CPU_PANEL 16

/* Elements in the packed matrix, and the element offset of row m, column k in it. */
static inline int64_t cpu_packed_cols(aah_dtype t, int64_t cols)
{
	return t == AAH_DTYPE_BF16 ? (cols + 1) & ~(int64_t)1 : cols;
}

static inline int64_t cpu_packed_elems(aah_dtype t, int64_t rows, int64_t cols)
{
	return (rows + CPU_PANEL - 1) / CPU_PANEL * CPU_PANEL * cpu_packed_cols(t, cols);
}

static inline int64_t cpu_packed_index(aah_dtype t, int64_t cols, int64_t m, int64_t k)
{
	int64_t base = m / CPU_PANEL * CPU_PANEL * cpu_packed_cols(t, cols), l = m % CPU_PANEL;
	if (t == AAH_DTYPE_BF16)
		return base + (k / 2) * (2 * CPU_PANEL) + l * 2 + (k & 1);
	return base + k * CPU_PANEL + l;
}

/* Packs panels [p0, p1) of a row-major rows × cols matrix (src) into dst, which holds the whole packed matrix:
 * padding rows and columns are zero. */
void cpu_pack_panels(void *dst, const void *src, aah_dtype t, int64_t rows, int64_t cols, int64_t p0, int64_t p1);

typedef struct cpu_kernels {
	const char *isa;
	int32_t panel_rows;   /* the most activation rows one panel_mm call takes */
	/* out[i·ldo + m] = Σ_k xt[k·n + i] · w(m, k) for i < n (1 ≤ n ≤ panel_rows) and the rows m < M of panels
	 * [p0, p1); w packed (above), of type t, K columns; xt the n activation rows transposed (k-major), so that
	 * the kernel broadcasts them from one pointer. */
	void (*panel_mm)(float *out, int64_t ldo, const float *xt, int32_t n, const void *w, aah_dtype t, int64_t K,
	                 int64_t M, int64_t p0, int64_t p1);
	/* dst[i] = (float)src[i], count elements. */
	void (*to_f32)(float *dst, const void *src, aah_dtype t, int64_t count);
	float (*dot)(const float *a, const float *b, int64_t n);
	/* s[t] = exp(s[t] − mx) for t < n (s[t] ≤ mx); returns Σ_t s[t]. The softmax of attention: the SIMD tables use a
	 * polynomial exp (within 2 ulp of expf), the same for every score whatever the batch. */
	double (*exp_sum)(float *s, int64_t n, float mx);
	/* y[i] += a · x[i] */
	void (*axpy)(float *y, float a, const float *x, int64_t n);
	/* Attention, a block of keys against the query heads that share them:
	 * qk: scores[g·ld + t] = Σ_d q[g·hd + d] · keys[t·ks + d]              for g < group, t < n
	 * pv: out[g·hd + d] += Σ_t p[g·ld + t] · values[t·vs + d]             for g < group, d < hd */
	void (*qk)(float *scores, int64_t ld, const float *q, int32_t group, const float *keys, int64_t ks, int32_t n,
	           int32_t hd);
	void (*pv)(float *out, const float *p, int64_t ld, int32_t group, const float *values, int64_t vs, int32_t n,
	           int32_t hd);
} cpu_kernels;

extern const cpu_kernels cpu_kernels_generic;
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_avx512;

/* The best table this CPU supports; the environment variable AAH_CPU_ISA (generic, avx2, avx512)
 * may ask for a lesser one, which is how the tests run every table on one machine. */
const cpu_kernels *cpu_kernels_select(void);
/* The named table if this CPU can run it, else NULL. */
const cpu_kernels *cpu_kernels_by_name(const char *isa);

/* Scalar conversions, shared by every table. */
static inline float cpu_bf16_to_f32(uint16_t h)
{
	union { uint32_t u; float f; } v = { .u = (uint32_t)h << 16 };
	return v.f;
}

static inline float cpu_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;
	union { uint32_t u; float f; } v;
	if (exp == 0) {
		/* zero or subnormal: man · 2^-24 */
		v.f = (float)man * (1.0f / 16777216.0f);
		v.u |= sign;
		return v.f;
	}
	if (exp == 31)
		v.u = sign | 0x7f800000u | (man << 13);
	else
		v.u = sign | ((exp + 112) << 23) | (man << 13);
	return v.f;
}

static inline uint16_t cpu_f32_to_bf16(float f)
{
	union { float f; uint32_t u; } v = { .f = f };
	if ((v.u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((v.u >> 16) | 0x40);   /* quiet NaN */
	v.u += 0x7fffu + ((v.u >> 16) & 1);          /* round to nearest even */
	return (uint16_t)(v.u >> 16);
}

uint16_t cpu_f32_to_f16(float f);

#endif
