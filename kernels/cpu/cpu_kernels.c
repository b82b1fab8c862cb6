/* kernels/cpu/cpu_kernels.c — the portable C table (the reference the SIMD tables are tested against)
 * and the run-time choice between tables. */
#include "kernels/cpu/cpu_kernels.h"

#include <stdlib.h>
#include <string.h>

uint16_t cpu_f32_to_f16(float f)
{
	union { float f; uint32_t u; } v = { .f = f };
	uint32_t sign = (v.u >> 16) & 0x8000;
	uint32_t a = v.u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00);                 /* NaN */
	if (a >= 0x477ff000u)
		return (uint16_t)(sign | 0x7c00);                 /* overflow → inf (65520 rounds up) */
	if (a < 0x38800000u) {                                /* subnormal or zero in f16 */
		if (a < 0x33000000u)
			return (uint16_t)sign;
		uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
		/* value = m · 2^(e-150); the f16 subnormal unit is 2^-24, so value = m · 2^(e-126) units */
		uint32_t shift = 126 - e;
		uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	uint32_t r = a - 0x38000000u;                         /* rebias exponent 127 → 15 */
	uint32_t keep = r >> 13, rem = r & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (keep & 1)))
		keep++;
	return (uint16_t)(sign | keep);
}

static float load_elem(const void *w, aah_dtype t, int64_t i)
{
	switch (t) {
	case AAH_DTYPE_F32: return ((const float *)w)[i];
	case AAH_DTYPE_F16: return cpu_f16_to_f32(((const uint16_t *)w)[i]);
	case AAH_DTYPE_BF16: return cpu_bf16_to_f32(((const uint16_t *)w)[i]);
	}
	return 0;
}

static void gemv_generic(float *out, int64_t ldo, const float *x, int32_t n, const void *w, aah_dtype t,
                         int64_t K, int64_t m0, int64_t m1)
{
	for (int64_t m = m0; m < m1; m++)
		for (int32_t i = 0; i < n; i++) {
			float sum = 0;
			for (int64_t kb = 0; kb < K; kb += CPU_KC) {   /* slice by slice, as tile sums (cpu_kernels.h) */
				float s = 0;
				for (int64_t k = kb; k < K && k < kb + CPU_KC; k++)
					s += x[i * K + k] * load_elem(w, t, m * K + k);
				sum = kb > 0 ? sum + s : s;
			}
			out[i * ldo + m] = sum;
		}
}

static void to_f32_generic(float *dst, const void *src, aah_dtype t, int64_t count)
{
	if (t == AAH_DTYPE_F32) {
		memcpy(dst, src, (size_t)count * sizeof(float));
		return;
	}
	for (int64_t i = 0; i < count; i++)
		dst[i] = load_elem(src, t, i);
}

#define GEN_R 2
#define GEN_C 2
static void tile_generic(float *out, int64_t ldo, const float *x, int64_t ldx, const float *panel, int64_t ldp,
                         int64_t kn, int accumulate)
{
	for (int r = 0; r < GEN_R; r++)
		for (int c = 0; c < GEN_C; c++) {
			float s = 0;
			for (int64_t k = 0; k < kn; k++)
				s += x[r * ldx + k] * panel[c * ldp + k];
			out[r * ldo + c] = accumulate ? out[r * ldo + c] + s : s;
		}
}

static float dot_generic(const float *a, const float *b, int64_t n)
{
	float s = 0;
	for (int64_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static void axpy_generic(float *y, float a, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] += a * x[i];
}

static void qk_generic(float *scores, int64_t ld, const float *q, int32_t group, const float *keys, int64_t ks,
                       int32_t n, int32_t hd)
{
	for (int32_t g = 0; g < group; g++)
		for (int32_t t = 0; t < n; t++)
			scores[g * ld + t] = dot_generic(q + (int64_t)g * hd, keys + t * ks, hd);
}

static void pv_generic(float *out, const float *p, int64_t ld, int32_t group, const float *values, int64_t vs,
                       int32_t n, int32_t hd)
{
	for (int32_t t = 0; t < n; t++)
		for (int32_t g = 0; g < group; g++)
			axpy_generic(out + (int64_t)g * hd, p[g * ld + t], values + t * vs, hd);
}

const cpu_kernels cpu_kernels_generic = {
	/* .isa = */ "generic",
	/* .tile_rows = */ GEN_R,
	/* .tile_cols = */ GEN_C,
	/* .gemv = */ gemv_generic,
	/* .to_f32 = */ to_f32_generic,
	/* .tile = */ tile_generic,
	/* .dot = */ dot_generic,
	/* .axpy = */ axpy_generic,
	/* .qk = */ qk_generic,
	/* .pv = */ pv_generic,
};

static int cpu_supports(const char *isa)
{
	if (!strcmp(isa, "generic"))
		return 1;
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (!strcmp(isa, "avx2"))
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
	if (!strcmp(isa, "avx512"))
		return cpu_supports("avx2") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
	return 0;
}

const cpu_kernels *cpu_kernels_by_name(const char *isa)
{
	if (!cpu_supports(isa))
		return NULL;
#if defined(__x86_64__)
	if (!strcmp(isa, "avx512"))
		return &cpu_kernels_avx512;
	if (!strcmp(isa, "avx2"))
		return &cpu_kernels_avx2;
#endif
	return &cpu_kernels_generic;
}

const cpu_kernels *cpu_kernels_select(void)
{
	const char *want = getenv("AAH_CPU_ISA");
	if (want && *want) {
		const cpu_kernels *k = cpu_kernels_by_name(want);
		if (k)
			return k;
	}
	const cpu_kernels *k = cpu_kernels_by_name("avx512");
	if (!k)
		k = cpu_kernels_by_name("avx2");
	return k ? k : &cpu_kernels_generic;
}
