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
