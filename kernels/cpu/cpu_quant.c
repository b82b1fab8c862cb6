/* kernels/cpu/cpu_quant.c — the activation quantizers, the portable C dots of cpu_quant.h (the reference the SIMD
 * tables are tested against, beside the dequantize-then-multiply reference of the tests) and the choice of table. */
#include "kernels/cpu/cpu_quant.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

aah_dtype cpu_quant_act_type(aah_dtype t)
{
	return t == AAH_DTYPE_Q8_0 || t == AAH_DTYPE_Q4_0 ? AAH_DTYPE_Q8_0 : AAH_DTYPE_Q8_K;
}

/* ggml's nearest_int: round to nearest, ties to even, for |v| ≤ 2^22 (the callers' values are within ±127.5). */
static inline int quant_nearest_int(float v)
{
	float f = v + 12582912.f;
	int32_t i;
	memcpy(&i, &f, 4);
	return (i & 0x007fffff) - 0x00400000;
}

/* Q8_0 activation blocks as llama.cpp's x86 CPU path quantizes them (quantize_row_q8_0 in ggml-cpu/arch/x86/quants.c,
 * ggml_quantize_mat_q8_0_4x8 in its repack.cpp): d = amax / 127, each value times 127 / amax rounded to nearest, ties
 * to even — not ggml's reference quantize_row_q8_0_ref (times 1 / d, ties away from zero), whose quants differ from
 * these at about one value in 500 000 (normally distributed values): the point is computing what llama.cpp computes.
 * NaN is left out of the maximum and quantized to 0; the scaled value is clamped first, so no conversion is
 * undefined. Inline: a decode step quantizes every matrix's input on one thread while the others wait. */
static void quantize_q8_0(aah_block_q8_0 *y, const float *x, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += AAH_QK8_0) {
		float amax = 0.0f;
		for (int j = 0; j < AAH_QK8_0; j++) {
			const float a = fabsf(x[j]);
			amax = a > amax ? a : amax;   /* as fmaxf(amax, a): a NaN never becomes the maximum, as in ggml's MAX */
		}
		const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
		y[i].d = aah_float_to_half(amax / 127.0f);
		for (int j = 0; j < AAH_QK8_0; j++) {
			float v = x[j] * id;
			v = v > 127.f ? 127.f : v < -128.f ? -128.f : v;
			y[i].qs[j] = (int8_t)(v == v ? quant_nearest_int(v) : 0);
		}
	}
}

static void quantize_q8_K(aah_block_q8_K *y, const float *x, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += AAH_QK_K) {
		float max = 0, amax = 0;
		for (int j = 0; j < AAH_QK_K; j++) {
			float ax = fabsf(x[j]);
			if (ax > amax) {
				amax = ax;
				max = x[j];
			}
		}
		if (!amax || isinf(amax)) {   /* ggml leaves the sums unset here; zeros are what they would sum to */
			memset(&y[i], 0, sizeof y[i]);
			continue;
		}
		const float iscale = -127.f / max;
		for (int j = 0; j < AAH_QK_K; j++) {
			float v = iscale * x[j];
			int q = v == v ? quant_nearest_int(v) : 0;   /* |v| ≤ 127 (a NaN: 0) */
			y[i].qs[j] = (int8_t)(q < 127 ? q : 127);
		}
		for (int j = 0; j < AAH_QK_K / 16; j++) {
			int sum = 0;
			for (int ii = 0; ii < 16; ++ii)
				sum += y[i].qs[j * 16 + ii];
			y[i].bsums[j] = (int16_t)sum;
		}
		y[i].d = 1 / iscale;
	}
}

void cpu_quantize_act(aah_dtype t, void *dst, const float *x, int64_t n)
{
	if (t == AAH_DTYPE_Q8_0)
		quantize_q8_0(dst, x, n / AAH_QK8_0);
	else
		quantize_q8_K(dst, x, n / AAH_QK_K);
}

/* ---- the portable dots: each block's integer sum exact, then one float multiply-add per block in block order ---- */

static void dot_q8_0(int64_t nb, int32_t nc, float *s, const void *vw, const void *va, size_t as)
{
	const aah_block_q8_0 *w = vw;
	for (int32_t c = 0; c < nc; c++) {
		const aah_block_q8_0 *a = (const aah_block_q8_0 *)((const char *)va + c * as);
		float sum = 0;
		for (int64_t b = 0; b < nb; b++) {
			int isum = 0;
			for (int j = 0; j < AAH_QK8_0; j++)
				isum += w[b].qs[j] * a[b].qs[j];
			sum += (float)isum * (aah_half_to_float(w[b].d) * aah_half_to_float(a[b].d));
		}
		s[c] = sum;
	}
}

static void dot_q4_0(int64_t nb, int32_t nc, float *s, const void *vw, const void *va, size_t as)
{
	const aah_block_q4_0 *w = vw;
	for (int32_t c = 0; c < nc; c++) {
		const aah_block_q8_0 *a = (const aah_block_q8_0 *)((const char *)va + c * as);
		float sum = 0;
		for (int64_t b = 0; b < nb; b++) {
			int isum = 0;
			for (int j = 0; j < AAH_QK4_0 / 2; j++)
				isum += ((w[b].qs[j] & 0xF) - 8) * a[b].qs[j] + ((w[b].qs[j] >> 4) - 8) * a[b].qs[j + 16];
			sum += (float)isum * (aah_half_to_float(w[b].d) * aah_half_to_float(a[b].d));
		}
		s[c] = sum;
	}
}

/* The K types: isum = Σ_j sc_j · Σ_{l in sub-block j} q_l · a_l, imin = Σ_j m_j · (sum of sub-block j's
 * activations, from bsums); the block adds d·isum − dmin·imin with d = d_a·d_w, dmin = d_a·dmin_w. */
static void dot_q4_K(int64_t nb, int32_t nc, float *s, const void *vw, const void *va, size_t as)
{
	const aah_block_q4_K *w = vw;
	for (int32_t c = 0; c < nc; c++) {
		const aah_block_q8_K *a = (const aah_block_q8_K *)((const char *)va + c * as);
		float sum = 0;
		for (int64_t b = 0; b < nb; b++) {
			uint8_t sc[8], m[8];
			cpu_unpack_scales_k4(w[b].scales, sc, m);
			int isum = 0, imin = 0;
			for (int j = 0; j < 8; j++) {
				const uint8_t *q = w[b].qs + (j / 2) * 32;
				const int8_t *y = a[b].qs + j * 32;
				int sub = 0;
				for (int l = 0; l < 32; l++)
					sub += (j & 1 ? q[l] >> 4 : q[l] & 0xF) * y[l];
				isum += sc[j] * sub;
				imin += m[j] * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
			}
			const float d = a[b].d * aah_half_to_float(w[b].d), dmin = a[b].d * aah_half_to_float(w[b].dmin);
			sum += d * (float)isum;
			sum -= dmin * (float)imin;
		}
		s[c] = sum;
	}
}

static void dot_q5_K(int64_t nb, int32_t nc, float *s, const void *vw, const void *va, size_t as)
{
	const aah_block_q5_K *w = vw;
	for (int32_t c = 0; c < nc; c++) {
		const aah_block_q8_K *a = (const aah_block_q8_K *)((const char *)va + c * as);
		float sum = 0;
		for (int64_t b = 0; b < nb; b++) {
			uint8_t sc[8], m[8];
			cpu_unpack_scales_k4(w[b].scales, sc, m);
			int isum = 0, imin = 0;
			for (int j = 0; j < 8; j++) {
				const uint8_t *q = w[b].qs + (j / 2) * 32;
				const int8_t *y = a[b].qs + j * 32;
				int sub = 0;
				for (int l = 0; l < 32; l++) {
					int v = (j & 1 ? q[l] >> 4 : q[l] & 0xF) + ((w[b].qh[l] >> j) & 1) * 16;
					sub += v * y[l];
				}
				isum += sc[j] * sub;
				imin += m[j] * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
			}
			const float d = a[b].d * aah_half_to_float(w[b].d), dmin = a[b].d * aah_half_to_float(w[b].dmin);
			sum += d * (float)isum;
			sum -= dmin * (float)imin;
		}
		s[c] = sum;
	}
}

/* Q6_K: isum = Σ_j sc_j · Σ_{l in sub-block j of 16} (q_l − 32) · a_l, the −32 taken from bsums. */
static void dot_q6_K(int64_t nb, int32_t nc, float *s, const void *vw, const void *va, size_t as)
{
	const aah_block_q6_K *w = vw;
	for (int32_t c = 0; c < nc; c++) {
		const aah_block_q8_K *a = (const aah_block_q8_K *)((const char *)va + c * as);
		float sum = 0;
		for (int64_t b = 0; b < nb; b++) {
			int8_t q[AAH_QK_K];   /* q − 32 in value order, as dequantize_row_q6_K lays them */
			for (int h = 0; h < 2; h++) {
				const uint8_t *ql = w[b].ql + 64 * h, *qh = w[b].qh + 32 * h;
				int8_t *o = q + 128 * h;
				for (int l = 0; l < 32; l++) {
					o[l + 0] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
					o[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
					o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
					o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
				}
			}
			int isum = 0;
			for (int j = 0; j < 16; j++) {
				int sub = 0;
				for (int l = 0; l < 16; l++)
					sub += q[j * 16 + l] * a[b].qs[j * 16 + l];
				isum += w[b].scales[j] * sub;
			}
			sum += (a[b].d * aah_half_to_float(w[b].d)) * (float)isum;
		}
		s[c] = sum;
	}
}

const cpu_qkernels cpu_qkernels_generic = {
	.isa = "generic",
	.dot = {
		[AAH_DTYPE_Q8_0] = dot_q8_0,
		[AAH_DTYPE_Q4_0] = dot_q4_0,
		[AAH_DTYPE_Q4_K] = dot_q4_K,
		[AAH_DTYPE_Q5_K] = dot_q5_K,
		[AAH_DTYPE_Q6_K] = dot_q6_K,
	},
};

const cpu_qkernels *cpu_qkernels_for(const char *isa)
{
	if (!strcmp(isa, "generic"))
		return &cpu_qkernels_generic;
	if (!cpu_kernels_by_name(isa))
		return NULL;
	if (!strcmp(isa, "avx2"))
		return &cpu_qkernels_avx2;
	if (!strcmp(isa, "avx512")) {
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx512vnni") ? &cpu_qkernels_avx512 : &cpu_qkernels_avx2;
	}
	return NULL;
}
