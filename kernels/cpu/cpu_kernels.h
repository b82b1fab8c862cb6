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
	/* dst[i] = src[i] as type t holds it, count elements: f16 and bf16 rounded to nearest even exactly as
	 * cpu_f32_to_f16 and cpu_f32_to_bf16 round (NaN included), f32 copied. How the KV cache stores a key. */
	void (*from_f32)(void *dst, aah_dtype t, const float *src, int64_t count);
	/* s[t] = exp(s[t] − mx) for t < n (s[t] ≤ mx); returns Σ_t s[t] (a float sum). With ps non-NULL also
	 * *ps = Σ_t exp(s_t − mx)·(s_t − mx) (the entropy's term). The SIMD tables use a polynomial exp (within 2 ulp of
	 * expf); every element's result depends only on its own s and mx, and the sums only on the n values in order of
	 * their blocks, never on where the row sits. */
	double (*exp_sum)(float *s, int64_t n, float mx, double *ps);
	/* max(init, s[0], …, s[n-1]) (n ≥ 0; no NaN in s). */
	float (*max)(const float *s, int64_t n, float init);
	/* Attention tiles: nq query rows of hd floats (row stride ldq) against nk keys or values of type t (row stride ldk,
	 * ldv elements):
	 *   qk_tile: S[i·lds + j] = Σ_d Q[i·ldq + d] · K[j·ldk + d]                              i < nq, j < nk
	 *   pv_tile: O[i·ldo + d] = O[i·ldo + d] · c[i] + Σ_j P[i·ldp + j] · V[j·ldv + d]        i < nq, d < hd
	 * A score is one sum over d in a fixed order and a fixed reduction, an output one multiply by c[i] then one
	 * multiply-add per j in order: neither depends on nq, nk or where its row or key lies in the tile, so that a query's
	 * attention is the same bits whatever rows and keys share its tiles (batch and chunking invariance). The keys and
	 * values are read in their own type and widened in registers. */
	void (*qk_tile)(float *S, int64_t lds, const float *Q, int64_t ldq, int32_t nq, const void *K, aah_dtype t,
	                int64_t ldk, int32_t nk, int32_t hd);
	void (*pv_tile)(float *O, int64_t ldo, const float *c, const float *P, int64_t ldp, int32_t nq, const void *V,
	                aah_dtype t, int64_t ldv, int32_t nk, int32_t hd);
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
