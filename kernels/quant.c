/* kernels/quant.c — the block types' sizes and the half-float conversions of kernels/quant.h. The reference
 * dequantizers and quantizers live beside it (their tables and bit orders are ggml's). */
#include "kernels/quant.h"

#include "kernels/cpu/cpu_kernels.h"

int aah_dtype_is_quantized(aah_dtype t)
{
	return t >= AAH_DTYPE_Q8_0 && t <= AAH_DTYPE_Q8_K;
}

int64_t aah_dtype_block_len(aah_dtype t)
{
	switch (t) {
	case AAH_DTYPE_F32: case AAH_DTYPE_F16: case AAH_DTYPE_BF16: return 1;
	case AAH_DTYPE_Q8_0: return AAH_QK8_0;
	case AAH_DTYPE_Q4_0: return AAH_QK4_0;
	case AAH_DTYPE_Q4_K: case AAH_DTYPE_Q5_K: case AAH_DTYPE_Q6_K: case AAH_DTYPE_Q8_K: return AAH_QK_K;
	}
	return 0;
}

size_t aah_dtype_block_bytes(aah_dtype t)
{
	switch (t) {
	case AAH_DTYPE_F32: return 4;
	case AAH_DTYPE_F16: case AAH_DTYPE_BF16: return 2;
	case AAH_DTYPE_Q8_0: return sizeof(aah_block_q8_0);
	case AAH_DTYPE_Q4_0: return sizeof(aah_block_q4_0);
	case AAH_DTYPE_Q4_K: return sizeof(aah_block_q4_K);
	case AAH_DTYPE_Q5_K: return sizeof(aah_block_q5_K);
	case AAH_DTYPE_Q6_K: return sizeof(aah_block_q6_K);
	case AAH_DTYPE_Q8_K: return sizeof(aah_block_q8_K);
	}
	return 0;
}

size_t aah_dtype_row_bytes(aah_dtype t, int64_t n)
{
	int64_t bl = aah_dtype_block_len(t);
	if (bl <= 0 || n < 0 || n % bl)
		return 0;
	return (size_t)(n / bl) * aah_dtype_block_bytes(t);
}

float aah_half_to_float(aah_half h)
{
	return cpu_f16_to_f32(h);
}

aah_half aah_float_to_half(float f)
{
	return cpu_f32_to_f16(f);
}

/* The 6-bit scale and min of sub-block j (0 … 7) of a Q4_K / Q5_K block: the first four in the low 6 bits of bytes
 * j and j + 4, the last four split between the low or high nibble of byte j + 4 and the top 2 bits of bytes j − 4
 * and j (ggml's get_scale_min_k4). */
static inline void quant_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
	}
}

/* Each dequantizer below performs ggml's float operations in ggml's order: one product per value, the scale
 * products formed per sub-block first (d·sc, dmin·m), so y = (d·sc)·q − (dmin·m) for the K types, (d·sc)·q for Q6_K. */
static void dequant_q8_0(float *y, const aah_block_q8_0 *x, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		const float d = aah_half_to_float(x[i].d);
		for (int j = 0; j < AAH_QK8_0; j++)
			y[i * AAH_QK8_0 + j] = (float)x[i].qs[j] * d;
	}
}

static void dequant_q4_0(float *y, const aah_block_q4_0 *x, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		const float d = aah_half_to_float(x[i].d);
		for (int j = 0; j < AAH_QK4_0 / 2; j++) {
			const int x0 = (x[i].qs[j] & 0x0F) - 8;
			const int x1 = (x[i].qs[j] >> 4) - 8;
			y[i * AAH_QK4_0 + j] = (float)x0 * d;
			y[i * AAH_QK4_0 + j + AAH_QK4_0 / 2] = (float)x1 * d;
		}
	}
}

static void dequant_q4_K(float *y, const aah_block_q4_K *x, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *q = x[i].qs;
		const float d = aah_half_to_float(x[i].d);
		const float min = aah_half_to_float(x[i].dmin);
		uint8_t sc, m;
		for (int j = 0, is = 0; j < AAH_QK_K; j += 64, is += 2, q += 32) {
			quant_scale_min_k4(is + 0, x[i].scales, &sc, &m);
			const float d1 = d * (float)sc, m1 = min * (float)m;
			quant_scale_min_k4(is + 1, x[i].scales, &sc, &m);
			const float d2 = d * (float)sc, m2 = min * (float)m;
			for (int l = 0; l < 32; l++) {
				const float p = d1 * (float)(q[l] & 0xF);
				*y++ = p - m1;
			}
			for (int l = 0; l < 32; l++) {
				const float p = d2 * (float)(q[l] >> 4);
				*y++ = p - m2;
			}
		}
	}
}

static void dequant_q5_K(float *y, const aah_block_q5_K *x, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		const uint8_t *ql = x[i].qs, *qh = x[i].qh;
		const float d = aah_half_to_float(x[i].d);
		const float min = aah_half_to_float(x[i].dmin);
		uint8_t sc, m, u1 = 1, u2 = 2;
		for (int j = 0, is = 0; j < AAH_QK_K; j += 64, is += 2, ql += 32) {
			quant_scale_min_k4(is + 0, x[i].scales, &sc, &m);
			const float d1 = d * (float)sc, m1 = min * (float)m;
			quant_scale_min_k4(is + 1, x[i].scales, &sc, &m);
			const float d2 = d * (float)sc, m2 = min * (float)m;
			for (int l = 0; l < 32; l++) {
				const float p = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0));
				*y++ = p - m1;
			}
			for (int l = 0; l < 32; l++) {
				const float p = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0));
				*y++ = p - m2;
			}
			u1 = (uint8_t)(u1 << 2);
			u2 = (uint8_t)(u2 << 2);
		}
	}
}

static void dequant_q6_K(float *y, const aah_block_q6_K *x, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		const float d = aah_half_to_float(x[i].d);
		const uint8_t *ql = x[i].ql, *qh = x[i].qh;
		const int8_t *sc = x[i].scales;
		for (int n = 0; n < AAH_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
			for (int l = 0; l < 32; l++) {
				const int is = l / 16;
				const int q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
				const int q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
				const int q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
				const int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
				y[l + 0] = d * (float)sc[is + 0] * (float)q1;
				y[l + 32] = d * (float)sc[is + 2] * (float)q2;
				y[l + 64] = d * (float)sc[is + 4] * (float)q3;
				y[l + 96] = d * (float)sc[is + 6] * (float)q4;
			}
		}
	}
}

static void dequant_q8_K(float *y, const aah_block_q8_K *x, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++)
		for (int j = 0; j < AAH_QK_K; j++)
			y[i * AAH_QK_K + j] = x[i].d * (float)x[i].qs[j];
}

void aah_dequantize_row(aah_dtype t, float *out, const void *src, int64_t n)
{
	const int64_t nb = n / aah_dtype_block_len(t);
	switch (t) {
	case AAH_DTYPE_F32:
		for (int64_t i = 0; i < n; i++)
			out[i] = ((const float *)src)[i];
		return;
	case AAH_DTYPE_F16:
		for (int64_t i = 0; i < n; i++)
			out[i] = aah_half_to_float(((const uint16_t *)src)[i]);
		return;
	case AAH_DTYPE_BF16:
		for (int64_t i = 0; i < n; i++)
			out[i] = cpu_bf16_to_f32(((const uint16_t *)src)[i]);
		return;
	case AAH_DTYPE_Q8_0: dequant_q8_0(out, src, nb); return;
	case AAH_DTYPE_Q4_0: dequant_q4_0(out, src, nb); return;
	case AAH_DTYPE_Q4_K: dequant_q4_K(out, src, nb); return;
	case AAH_DTYPE_Q5_K: dequant_q5_K(out, src, nb); return;
	case AAH_DTYPE_Q6_K: dequant_q6_K(out, src, nb); return;
	case AAH_DTYPE_Q8_K: dequant_q8_K(out, src, nb); return;
	}
}
