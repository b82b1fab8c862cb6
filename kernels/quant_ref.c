/* kernels/quant_ref.c — the reference quantizers of kernels/quant.h: the blocks llama.cpp's `llama-quantize` writes
 * without an importance matrix (ggml's quantize_row_*_ref), the same float operations in the same order, so that a
 * GGUF written by aah-convert holds the bytes llama.cpp would have written, and Q8_0/Q8_K activations as its CPU path
 * quantizes them. The algorithms are ggml's (ggml-quants.c); the code is ours. */
#include "kernels/quant.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

#define QREF_GROUP_MAX_EPS 1e-15f

static inline int qref_min(int a, int b) { return a < b ? a : b; }
static inline int qref_max(int a, int b) { return a > b ? a : b; }

/* Round to nearest, ties to even, for |v| ≤ 2^22 (ggml's nearest_int: adding 1.5·2^23 leaves the integer in the low
 * mantissa bits, so the rounding is the FPU's, not roundf's ties-away). */
static inline int qref_nearest_int(float v)
{
	float t = v + 12582912.f;
	int32_t i;
	memcpy(&i, &t, sizeof i);
	return (i & 0x007fffff) - 0x00400000;
}

/* Q8_0, per 32: d = amax / 127, q = round(x / d) (roundf: ties away from zero, as ggml). */
static void qref_q8_0(aah_block_q8_0 *y, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n / AAH_QK8_0; i++, x += AAH_QK8_0) {
		float amax = 0.0f;
		for (int j = 0; j < AAH_QK8_0; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		const float d = amax / 127.0f;
		const float id = d != 0.0f ? 1.0f / d : 0.0f;
		y[i].d = aah_float_to_half(d);
		for (int j = 0; j < AAH_QK8_0; j++)
			y[i].qs[j] = (int8_t)roundf(x[j] * id);
	}
}

/* Q4_0, per 32: d = max / −8 where max is the value of largest magnitude (its sign kept, so that it lands on −8
 * exactly), q = min(15, (int8)(x / d + 8.5)). */
static void qref_q4_0(aah_block_q4_0 *y, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n / AAH_QK4_0; i++, x += AAH_QK4_0) {
		float amax = 0.0f, max = 0.0f;
		for (int j = 0; j < AAH_QK4_0; j++) {
			if (amax < fabsf(x[j])) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		}
		const float d = max / -8.0f;
		const float id = d != 0.0f ? 1.0f / d : 0.0f;
		y[i].d = aah_float_to_half(d);
		for (int j = 0; j < AAH_QK4_0 / 2; j++) {
			const float x0 = x[j] * id;
			const float x1 = x[AAH_QK4_0 / 2 + j] * id;
			const uint8_t q0 = (uint8_t)qref_min(15, (int8_t)(x0 + 8.5f));
			const uint8_t q1 = (uint8_t)qref_min(15, (int8_t)(x1 + 8.5f));
			y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
		}
	}
}

/* Q8_K, per 256: scale from the value of largest magnitude, q = nearest(−127/max · x) capped at 127, and the sums of
 * each 16 quants (the K-quant dot products subtract min·bsum with them). */
static void qref_q8_K(aah_block_q8_K *y, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n / AAH_QK_K; i++, x += AAH_QK_K) {
		float max = 0.0f, amax = 0.0f;
		for (int j = 0; j < AAH_QK_K; j++) {
			const float ax = fabsf(x[j]);
			if (ax > amax) {
				amax = ax;
				max = x[j];
			}
		}
		if (amax == 0.0f) {
			memset(&y[i], 0, sizeof y[i]);
			continue;
		}
		const float iscale = -127.0f / max;
		for (int j = 0; j < AAH_QK_K; j++)
			y[i].qs[j] = (int8_t)qref_min(127, qref_nearest_int(iscale * x[j]));
		for (int j = 0; j < AAH_QK_K / 16; j++) {
			int sum = 0;
			for (int k = 0; k < 16; k++)
				sum += y[i].qs[j * 16 + k];
			y[i].bsums[j] = (int16_t)sum;
		}
		y[i].d = 1.0f / iscale;
	}
}

/* The scale and (negated) min of n values as nmax-level unsigned quants, minimising the weighted squared error: a
 * first guess from the range, then nstep + 1 trial scales (rmin + rdelta·is + nmax) / range, each followed by the
 * least-squares scale and min of its levels. L gets the best levels, *the_min the (positive) min; Laux is scratch of
 * n. ggml's make_qkx2_quants with use_mad false. */
static float qref_make_qkx2_quants(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
				   uint8_t *Laux, float rmin, float rdelta, int nstep)
{
	float min = x[0], max = x[0];
	float sum_w = w[0];
	float sum_x = sum_w * x[0];
	for (int i = 1; i < n; i++) {
		if (x[i] < min)
			min = x[i];
		if (x[i] > max)
			max = x[i];
		sum_w += w[i];
		sum_x += w[i] * x[i];
	}
	if (min > 0)
		min = 0;
	if (max == min) {
		memset(L, 0, (size_t)n);
		*the_min = -min;
		return 0.0f;
	}
	float iscale = nmax / (max - min);
	float scale = 1 / iscale;
	float best_mad = 0;
	for (int i = 0; i < n; i++) {
		const int l = qref_nearest_int(iscale * (x[i] - min));
		L[i] = (uint8_t)qref_max(0, qref_min(nmax, l));
		const float diff = scale * L[i] + min - x[i];
		best_mad += w[i] * (diff * diff);
	}
	if (nstep < 1) {
		*the_min = -min;
		return scale;
	}
	for (int is = 0; is <= nstep; is++) {
		iscale = (rmin + rdelta * is + nmax) / (max - min);
		float sum_l = 0, sum_l2 = 0, sum_xl = 0;
		for (int i = 0; i < n; i++) {
			int l = qref_nearest_int(iscale * (x[i] - min));
			l = qref_max(0, qref_min(nmax, l));
			Laux[i] = (uint8_t)l;
			sum_l += w[i] * l;
			sum_l2 += w[i] * l * l;
			sum_xl += w[i] * l * x[i];
		}
		const float D = sum_w * sum_l2 - sum_l * sum_l;
		if (D > 0) {
			float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
			float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
			if (this_min > 0) {
				this_min = 0;
				this_scale = sum_xl / sum_l2;
			}
			float mad = 0;
			for (int i = 0; i < n; i++) {
				const float diff = this_scale * Laux[i] + this_min - x[i];
				mad += w[i] * (diff * diff);
			}
			if (mad < best_mad) {
				memcpy(L, Laux, (size_t)n);
				best_mad = mad;
				scale = this_scale;
				min = this_min;
			}
		}
	}
	*the_min = -min;
	return scale;
}

/* The scale of n values as signed quants in [−nmax, nmax) stored as L = q + nmax, weighting each value by x² (ggml's
 * make_qx_quants with rmse_type 1 and no importance weights): 19 trial scales around nmax / max, the one with the
 * best least-squares fit kept. */
static float qref_make_qx_quants(int n, int nmax, const float *x, int8_t *L)
{
	float max = 0, amax = 0;
	for (int i = 0; i < n; i++) {
		const float ax = fabsf(x[i]);
		if (ax > amax) {
			amax = ax;
			max = x[i];
		}
	}
	if (amax < QREF_GROUP_MAX_EPS) {
		memset(L, 0, (size_t)n);
		return 0.0f;
	}
	float iscale = -nmax / max;
	float sumlx = 0, suml2 = 0;
	for (int i = 0; i < n; i++) {
		int l = qref_nearest_int(iscale * x[i]);
		l = qref_max(-nmax, qref_min(nmax - 1, l));
		L[i] = (int8_t)(l + nmax);
		const float w = x[i] * x[i];
		sumlx += w * x[i] * l;
		suml2 += w * l * l;
	}
	float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
	float best = scale * sumlx;
	for (int is = -9; is <= 9; is++) {
		if (is == 0)
			continue;
		iscale = -(nmax + 0.1f * is) / max;
		sumlx = suml2 = 0;
		for (int i = 0; i < n; i++) {
			int l = qref_nearest_int(iscale * x[i]);
			l = qref_max(-nmax, qref_min(nmax - 1, l));
			const float w = x[i] * x[i];
			sumlx += w * x[i] * l;
			suml2 += w * l * l;
		}
		if (suml2 > 0 && sumlx * sumlx > best * suml2) {
			for (int i = 0; i < n; i++) {
				const int l = qref_nearest_int(iscale * x[i]);
				L[i] = (int8_t)(nmax + qref_max(-nmax, qref_min(nmax - 1, l)));
			}
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

/* The 6-bit scale and min of sub-block j from the 12 packed bytes (ggml's get_scale_min_k4): sub-blocks 0–3 in the
 * low 6 bits of bytes 0–7, 4–7 split into a nibble of bytes 8–11 and the top 2 bits of bytes 0–7. */
static void qref_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

/* The shared part of Q4_K and Q5_K: 8 sub-blocks of 32 get an asymmetric scale and min each by make_qkx2_quants
 * (weights sqrt(mean x²) + |x|), both quantized to 6 bits against the super-block maxima; then every value is
 * re-quantized against the rounded scales. Writes d, dmin and the 12 scale bytes of the block; L gets the levels
 * 0 … nmax of the 256 values. */
static void qref_k_scales(const float *x, int nmax, float rmin, int nstep, aah_half *d_out, aah_half *dmin_out,
			  uint8_t scales_out[AAH_K_SCALE_SIZE], uint8_t L[AAH_QK_K])
{
	uint8_t Laux[32];
	float weights[32], mins[AAH_QK_K / 32], scales[AAH_QK_K / 32];
	float max_scale = 0, max_min = 0;
	for (int j = 0; j < AAH_QK_K / 32; j++) {
		float sum_x2 = 0;
		for (int l = 0; l < 32; l++)
			sum_x2 += x[32 * j + l] * x[32 * j + l];
		const float av_x = sqrtf(sum_x2 / 32);
		for (int l = 0; l < 32; l++)
			weights[l] = av_x + fabsf(x[32 * j + l]);
		scales[j] = qref_make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f,
						  nstep);
		if (scales[j] > max_scale)
			max_scale = scales[j];
		if (mins[j] > max_min)
			max_min = mins[j];
	}
	const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
	const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
	memset(scales_out, 0, AAH_K_SCALE_SIZE);
	for (int j = 0; j < AAH_QK_K / 32; j++) {
		uint8_t ls = (uint8_t)qref_nearest_int(inv_scale * scales[j]);
		uint8_t lm = (uint8_t)qref_nearest_int(inv_min * mins[j]);
		ls = (uint8_t)qref_min(63, ls);
		lm = (uint8_t)qref_min(63, lm);
		if (j < 4) {
			scales_out[j] = ls;
			scales_out[j + 4] = lm;
		} else {
			scales_out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
			scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
			scales_out[j - 0] |= (uint8_t)((lm >> 4) << 6);
		}
	}
	*d_out = aah_float_to_half(max_scale / 63.f);
	*dmin_out = aah_float_to_half(max_min / 63.f);
	for (int j = 0; j < AAH_QK_K / 32; j++) {
		uint8_t sc, m;
		qref_scale_min_k4(j, scales_out, &sc, &m);
		const float d = aah_half_to_float(*d_out) * sc;
		if (d == 0.0f)
			continue;
		const float dm = aah_half_to_float(*dmin_out) * m;
		for (int ii = 0; ii < 32; ii++) {
			const int l = qref_nearest_int((x[32 * j + ii] + dm) / d);
			L[32 * j + ii] = (uint8_t)qref_max(0, qref_min(nmax, l));
		}
	}
}

static void qref_q4_K(aah_block_q4_K *y, const float *x, int64_t n)
{
	uint8_t L[AAH_QK_K];
	for (int64_t i = 0; i < n / AAH_QK_K; i++, x += AAH_QK_K) {
		qref_k_scales(x, 15, -1.0f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
		/* each 64 values: byte l holds value l (low nibble) and l + 32 (high) */
		uint8_t *q = y[i].qs;
		for (int j = 0; j < AAH_QK_K; j += 64, q += 32)
			for (int l = 0; l < 32; l++)
				q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
	}
}

static void qref_q5_K(aah_block_q5_K *y, const float *x, int64_t n)
{
	uint8_t L[AAH_QK_K];
	for (int64_t i = 0; i < n / AAH_QK_K; i++, x += AAH_QK_K) {
		qref_k_scales(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
		/* as Q4_K for the low 4 bits; the fifth bit of value n + j (n a multiple of 64) in bit 2·(n/64) of qh[j],
		 * that of n + j + 32 in the bit above */
		uint8_t *qh = y[i].qh, *ql = y[i].qs;
		memset(qh, 0, AAH_QK_K / 8);
		uint8_t m1 = 1, m2 = 2;
		for (int b = 0; b < AAH_QK_K; b += 64, ql += 32) {
			for (int j = 0; j < 32; j++) {
				int l1 = L[b + j];
				if (l1 > 15) {
					l1 -= 16;
					qh[j] |= m1;
				}
				int l2 = L[b + j + 32];
				if (l2 > 15) {
					l2 -= 16;
					qh[j] |= m2;
				}
				ql[j] = (uint8_t)(l1 | (l2 << 4));
			}
			m1 = (uint8_t)(m1 << 2);
			m2 = (uint8_t)(m2 << 2);
		}
	}
}

static void qref_q6_K(aah_block_q6_K *y, const float *x, int64_t n)
{
	int8_t L[AAH_QK_K];
	float scales[AAH_QK_K / 16];
	for (int64_t i = 0; i < n / AAH_QK_K; i++, x += AAH_QK_K) {
		float max_scale = 0, max_abs_scale = 0;
		for (int ib = 0; ib < AAH_QK_K / 16; ib++) {
			const float scale = qref_make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
			scales[ib] = scale;
			if (fabsf(scale) > max_abs_scale) {
				max_abs_scale = fabsf(scale);
				max_scale = scale;
			}
		}
		if (max_abs_scale < QREF_GROUP_MAX_EPS) {
			memset(&y[i], 0, sizeof y[i]);
			continue;
		}
		const float iscale = -128.f / max_scale;
		y[i].d = aah_float_to_half(1 / iscale);
		for (int ib = 0; ib < AAH_QK_K / 16; ib++)
			y[i].scales[ib] = (int8_t)qref_min(127, qref_nearest_int(iscale * scales[ib]));
		for (int j = 0; j < AAH_QK_K / 16; j++) {
			const float d = aah_half_to_float(y[i].d) * y[i].scales[j];
			if (d == 0.0f)
				continue;
			for (int ii = 0; ii < 16; ii++) {
				const int l = qref_nearest_int(x[16 * j + ii] / d);
				L[16 * j + ii] = (int8_t)(qref_max(-32, qref_min(31, l)) + 32);
			}
		}
		/* each 128 values: ql[l] holds l (low) and l + 64 (high), ql[l + 32] holds l + 32 and l + 96; qh[l] the
		 * top 2 bits of l, l + 32, l + 64, l + 96 from its low bits up */
		uint8_t *ql = y[i].ql, *qh = y[i].qh;
		for (int j = 0; j < AAH_QK_K; j += 128, ql += 64, qh += 32) {
			for (int l = 0; l < 32; l++) {
				const uint8_t q1 = L[j + l + 0] & 0xF;
				const uint8_t q2 = L[j + l + 32] & 0xF;
				const uint8_t q3 = L[j + l + 64] & 0xF;
				const uint8_t q4 = L[j + l + 96] & 0xF;
				ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
				ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
				qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
						  ((L[j + l + 96] >> 4) << 6));
			}
		}
	}
}

void aah_quantize_row_ref(aah_dtype t, void *dst, const float *x, int64_t n)
{
	switch (t) {
	case AAH_DTYPE_F32:
		memcpy(dst, x, (size_t)n * sizeof(float));
		return;
	case AAH_DTYPE_F16:
		for (int64_t i = 0; i < n; i++)
			((uint16_t *)dst)[i] = cpu_f32_to_f16(x[i]);
		return;
	case AAH_DTYPE_BF16:
		for (int64_t i = 0; i < n; i++)
			((uint16_t *)dst)[i] = cpu_f32_to_bf16(x[i]);
		return;
	case AAH_DTYPE_Q8_0: qref_q8_0(dst, x, n); return;
	case AAH_DTYPE_Q4_0: qref_q4_0(dst, x, n); return;
	case AAH_DTYPE_Q4_K: qref_q4_K(dst, x, n); return;
	case AAH_DTYPE_Q5_K: qref_q5_K(dst, x, n); return;
	case AAH_DTYPE_Q6_K: qref_q6_K(dst, x, n); return;
	case AAH_DTYPE_Q8_K: qref_q8_K(dst, x, n); return;
	}
}
