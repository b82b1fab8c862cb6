/* kernels/cpu/cpu_kernels.c — the portable C table (the reference the SIMD tables are tested against)
 * and the run-time choice between tables. */
#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
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
	default: break;   /* the block types are never loaded an element at a time */
	}
	return 0;
}

/* A panel at a time, row by row: each row's elements (bf16: its k pairs as 32-bit words) go CPU_PANEL apart, into a
 * panel that stays in L2 while its 16 rows are written. */
void cpu_pack_panels(void *dst, const void *src, aah_dtype t, int64_t rows, int64_t cols, int64_t p0, int64_t p1)
{
	const int64_t pe = cpu_packed_elems(t, CPU_PANEL, cols), K = cols;
	const size_t es = aah_dtype_size(t);
	for (int64_t p = p0; p < p1; p++) {
		if ((p + 1) * CPU_PANEL > rows)   /* the last panel's padding rows are zero */
			memset((char *)dst + (size_t)(p * pe) * es, 0, (size_t)pe * es);
		for (int64_t l = 0; l < CPU_PANEL && p * CPU_PANEL + l < rows; l++) {
			const int64_t m = p * CPU_PANEL + l;
			if (t == AAH_DTYPE_BF16) {
				const uint16_t *s = (const uint16_t *)src + m * K;
				uint32_t *d = (uint32_t *)dst + p * (pe / 2) + l;
				int64_t kp = 0;
				for (; 2 * kp + 1 < K; kp++) {
					uint32_t w;
					memcpy(&w, s + 2 * kp, 4);   /* the pair as a word: even k low (little-endian) */
					d[kp * CPU_PANEL] = w;
				}
				if (2 * kp < K)
					d[kp * CPU_PANEL] = s[2 * kp];   /* odd K: the padding k is zero */
			} else if (t == AAH_DTYPE_F16) {
				const uint16_t *s = (const uint16_t *)src + m * K;
				uint16_t *d = (uint16_t *)dst + p * pe + l;
				for (int64_t k = 0; k < K; k++)
					d[k * CPU_PANEL] = s[k];
			} else {
				const float *s = (const float *)src + m * K;
				float *d = (float *)dst + p * pe + l;
				for (int64_t k = 0; k < K; k++)
					d[k * CPU_PANEL] = s[k];
			}
		}
	}
}

/* A panel's CPU_PANEL sums at a time, k in order (cpu_kernels.h), a multiply and an add per k: the reference the
 * SIMD tables are tested against to rounding, never bit for bit (they fuse the two). */
static void panel_mm_generic(float *out, int64_t ldo, const float *xt, int32_t n, const void *w, aah_dtype t,
                             int64_t K, int64_t M, int64_t p0, int64_t p1)
{
	const int64_t pe = cpu_packed_elems(t, CPU_PANEL, K);   /* elements per panel */
	for (int64_t p = p0; p < p1; p++) {
		const int64_t m0 = p * CPU_PANEL, rows = M - m0 < CPU_PANEL ? M - m0 : CPU_PANEL;
		for (int32_t i = 0; i < n; i++) {
			float acc[CPU_PANEL] = { 0 };
			for (int64_t k = 0; k < K; k++) {
				const float xk = xt[k * n + i];
				for (int l = 0; l < CPU_PANEL; l++)
					acc[l] += load_elem(w, t, p * pe + cpu_packed_index(t, K, l, k)) * xk;
			}
			memcpy(out + i * ldo + m0, acc, (size_t)rows * sizeof(float));
		}
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

static void from_f32_generic(void *dst, aah_dtype t, const float *src, int64_t count)
{
	switch (t) {
	case AAH_DTYPE_F32: memcpy(dst, src, (size_t)count * sizeof(float)); return;
	case AAH_DTYPE_F16:
		for (int64_t i = 0; i < count; i++)
			((uint16_t *)dst)[i] = cpu_f32_to_f16(src[i]);
		return;
	case AAH_DTYPE_BF16:
		for (int64_t i = 0; i < count; i++)
			((uint16_t *)dst)[i] = cpu_f32_to_bf16(src[i]);
		return;
	default: return;  /* the block types are never converted an element at a time */
	}
}

static double exp_sum_generic(float *s, int64_t n, float mx, double *ps)
{
	float sum = 0, pe = 0;
	for (int64_t t = 0; t < n; t++) {
		const float x = s[t] - mx;
		s[t] = expf(x);
		sum += s[t];
		pe += s[t] * x;
	}
	if (ps)
		*ps = pe;
	return sum;
}

static float max_generic(const float *s, int64_t n, float init)
{
	for (int64_t t = 0; t < n; t++)
		init = s[t] > init ? s[t] : init;
	return init;
}

static void qk_tile_generic(float *S, int64_t lds, const float *Q, int64_t ldq, int32_t nq, const void *K, aah_dtype t,
                            int64_t ldk, int32_t nk, int32_t hd)
{
	for (int32_t i = 0; i < nq; i++)
		for (int32_t j = 0; j < nk; j++) {
			float acc = 0;
			for (int32_t d = 0; d < hd; d++)
				acc += Q[i * ldq + d] * load_elem(K, t, j * ldk + d);
			S[i * lds + j] = acc;
		}
}

static void pv_tile_generic(float *O, int64_t ldo, const float *c, const float *P, int64_t ldp, int32_t nq,
                            const void *V, aah_dtype t, int64_t ldv, int32_t nk, int32_t hd)
{
	for (int32_t i = 0; i < nq; i++) {
		float *o = O + i * ldo;
		if (c)
			for (int32_t d = 0; d < hd; d++)
				o[d] *= c[i];
		for (int32_t j = 0; j < nk; j++) {
			const float p = P[i * ldp + j];
			for (int32_t d = 0; d < hd; d++)
				o[d] += p * load_elem(V, t, j * ldv + d);
		}
	}
}

const cpu_kernels cpu_kernels_generic = {
	/* .isa = */ "generic",
	/* .panel_rows = */ 64,
	/* .panel_mm = */ panel_mm_generic,
	/* .to_f32 = */ to_f32_generic,
	/* .from_f32 = */ from_f32_generic,
	/* .exp_sum = */ exp_sum_generic,
	/* .max = */ max_generic,
	/* .qk_tile = */ qk_tile_generic,
	/* .pv_tile = */ pv_tile_generic,
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
