/* kernels/cpu/cpu_kernels.h — the CPU inner loops, one table per instruction set, picked at run time
 * (cpu_kernels_select) so one binary runs on any x86-64 and uses AVX2/FMA or AVX-512 where present. */
#ifndef AAH_CPU_KERNELS_H
#define AAH_CPU_KERNELS_H

#include <stdint.h>

#include "kernels/backend.h"

/* Every dot product over K — in gemv and in tile alike — is summed the same way: K in slices of CPU_KC, each
 * slice a vector sum from its start (then a fixed horizontal reduction), the slices' sums added in order. So a
 * row's result never depends on how many rows share the call or which path ran it (batch invariance: a
 * request's tokens do not depend on what else the server is running). */
#define CPU_KC 256

/* Prefill micro-tile sizes are the table's tile_rows × tile_cols. */
typedef struct cpu_kernels {
	const char *isa;
	int32_t tile_rows;   /* R: activation rows per tile */
	int32_t tile_cols;   /* C: weight rows per tile */
	/* out[i·ldo + m] = Σ_k x[i·K + k] · w[m·K + k] for i < n (n ≤ 4), m ∈ [m0, m1). w in its stored dtype.
	 * Streams w once: the decode path, memory-bound. */
	void (*gemv)(float *out, int64_t ldo, const float *x, int32_t n, const void *w, aah_dtype t, int64_t K,
	             int64_t m0, int64_t m1);
	/* dst[i] = (float)src[i], count elements. */
	void (*to_f32)(float *dst, const void *src, aah_dtype t, int64_t count);
	/* out[r·ldo + c] (+)= Σ_{k<kn} x[r·ldx + k] · panel[c·ldp + k] for the full R × C tile; all f32.
	 * accumulate: add to out instead of overwriting it (the matmul walks K in L1-sized slices). */
	void (*tile)(float *out, int64_t ldo, const float *x, int64_t ldx, const float *panel, int64_t ldp, int64_t kn,
	             int accumulate);
	float (*dot)(const float *a, const float *b, int64_t n);
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
