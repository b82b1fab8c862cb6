/* kernels/cuda/cuda_quant.cu — the device twin of kernels/quant.c's dequantizers (cuda_quant.cuh): one thread per
 * block of 32 or 256 values, the products and differences through __fmul_rn / __fsub_rn so that nvcc never fuses
 * them (a fused d·q − m rounds once, the reference twice), so every value is the reference's bits; and the decode
 * product that dequantizes the same way in registers. */
#include "kernels/cuda/cuda_convert.cuh"
#include "kernels/cuda/cuda_ops.cuh"
#include "kernels/cuda/cuda_quant.cuh"
#include "kernels/quant.h"

#define NT 256

/* IEEE half bits → float, exactly (kernels/cpu/cpu_kernels.h's cpu_f16_to_f32). */
__device__ __forceinline__ float dq_half(uint16_t h)
{
	const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	if (exp == 0)   /* zero or subnormal: man · 2^-24, exact */
		return __uint_as_float(__float_as_uint(__fmul_rn((float)man, 1.0f / 16777216.0f)) | sign);
	if (exp == 31)
		return __uint_as_float(sign | 0x7f800000u | (man << 13));
	return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
}

__device__ __forceinline__ void dq_scale_min(int j, const uint8_t *q, float *d, float *m)
{
	if (j < 4) {
		*d = (float)(q[j] & 63);
		*m = (float)(q[j + 4] & 63);
	} else {
		*d = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

template <typename TO>
__device__ void dq_block(aah_dtype t, const uint8_t *b, TO *y)
{
	switch (t) {
	case AAH_DTYPE_Q8_0: {
		const aah_block_q8_0 *x = (const aah_block_q8_0 *)b;
		const float d = dq_half(x->d);
		for (int j = 0; j < AAH_QK8_0; j++)
			y[j] = from_f32<TO>(__fmul_rn((float)x->qs[j], d));
		break;
	}
	case AAH_DTYPE_Q4_0: {
		const aah_block_q4_0 *x = (const aah_block_q4_0 *)b;
		const float d = dq_half(x->d);
		for (int j = 0; j < AAH_QK4_0 / 2; j++) {
			y[j] = from_f32<TO>(__fmul_rn((float)((x->qs[j] & 0x0F) - 8), d));
			y[j + AAH_QK4_0 / 2] = from_f32<TO>(__fmul_rn((float)((x->qs[j] >> 4) - 8), d));
		}
		break;
	}
	case AAH_DTYPE_Q4_K: case AAH_DTYPE_Q5_K: {
		const bool q5 = t == AAH_DTYPE_Q5_K;
		const aah_block_q4_K *x4 = (const aah_block_q4_K *)b;
		const aah_block_q5_K *x5 = (const aah_block_q5_K *)b;
		const uint8_t *scales = q5 ? x5->scales : x4->scales, *q = q5 ? x5->qs : x4->qs;
		const float d = dq_half(q5 ? x5->d : x4->d), min = dq_half(q5 ? x5->dmin : x4->dmin);
		for (int j = 0; j < 4; j++, q += 32) {
			float sc, m;
			dq_scale_min(2 * j, scales, &sc, &m);
			const float d1 = __fmul_rn(d, sc), m1 = __fmul_rn(min, m);
			dq_scale_min(2 * j + 1, scales, &sc, &m);
			const float d2 = __fmul_rn(d, sc), m2 = __fmul_rn(min, m);
			for (int l = 0; l < 32; l++) {
				const int h1 = q5 ? ((x5->qh[l] >> (2 * j)) & 1) * 16 : 0, h2 = q5 ? ((x5->qh[l] >> (2 * j + 1)) & 1) * 16 : 0;
				y[64 * j + l] = from_f32<TO>(__fsub_rn(__fmul_rn(d1, (float)((q[l] & 0xF) + h1)), m1));
				y[64 * j + 32 + l] = from_f32<TO>(__fsub_rn(__fmul_rn(d2, (float)((q[l] >> 4) + h2)), m2));
			}
		}
		break;
	}
	case AAH_DTYPE_Q6_K: {
		const aah_block_q6_K *x = (const aah_block_q6_K *)b;
		const float d = dq_half(x->d);
		for (int n = 0; n < 2; n++) {
			const uint8_t *ql = x->ql + 64 * n, *qh = x->qh + 32 * n;
			const int8_t *sc = x->scales + 8 * n;
			for (int l = 0; l < 32; l++) {
				const int is = l / 16;
				const int q1 = (int8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
				const int q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
				const int q3 = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
				const int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
				y[128 * n + l] = from_f32<TO>(__fmul_rn(__fmul_rn(d, (float)sc[is + 0]), (float)q1));
				y[128 * n + l + 32] = from_f32<TO>(__fmul_rn(__fmul_rn(d, (float)sc[is + 2]), (float)q2));
				y[128 * n + l + 64] = from_f32<TO>(__fmul_rn(__fmul_rn(d, (float)sc[is + 4]), (float)q3));
				y[128 * n + l + 96] = from_f32<TO>(__fmul_rn(__fmul_rn(d, (float)sc[is + 6]), (float)q4));
			}
		}
		break;
	}
	default: break;
	}
}

template <typename TO>
__global__ void dequant_kernel(TO *__restrict__ out, const uint8_t *__restrict__ w, aah_dtype t, int64_t nb, int bl,
                               int64_t bb)
{
	for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x)
		dq_block<TO>(t, w + b * bb, out + b * bl);
}

__global__ void get_rows_quant_kernel(float *__restrict__ out, const uint8_t *__restrict__ table, aah_dtype t,
                                      int64_t cols, const int32_t *__restrict__ ids, int32_t n, int bl, int64_t bb)
{
	const int64_t per_row = cols / bl;
	for (int32_t i = blockIdx.y; i < n; i += gridDim.y)
		for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < per_row; b += (int64_t)gridDim.x * blockDim.x)
			dq_block<float>(t, table + ((int64_t)ids[i] * per_row + b) * bb, out + (int64_t)i * cols + b * bl);
}

/* ---- decode gemv: a warp per weight row, the blocks dequantized in registers ----
 * A decode step reads each weight byte once: the blocks go from memory straight into registers, never through a
 * dequantized tile. The unit is a chunk of 32 values (a Q8_0 / Q4_0 block, or one of a K-quant block's 8 sub-blocks
 * of 32 under one scale and min); lane l takes chunks l, l + 32, …, of the row, dequantizes its 32 values exactly as
 * dq_block does (the same roundings) and adds their products with each of the N activation rows (f32), then the warp
 * adds up. Every block type's fields are 2-byte aligned in a row (block sizes 34, 18, 144, 176, 210 bytes), so the
 * quants come in 16-bit loads. */
__device__ __forceinline__ void ld_bytes(const uint8_t *p, int n, uint8_t *o)   /* p even, n even */
{
	const uint16_t *h = (const uint16_t *)p;
	for (int i = 0; i < n / 2; i++) {
		const uint16_t v = h[i];
		o[2 * i] = (uint8_t)v;
		o[2 * i + 1] = (uint8_t)(v >> 8);
	}
}

/* The 32 values of chunk c of block b (type T), as dq_block computes them. */
template <int T> __device__ __forceinline__ void dq_chunk(const uint8_t *b, int c, float *w)
{
	uint8_t q[32];
	if (T == AAH_DTYPE_Q8_0) {
		const float d = dq_half(*(const uint16_t *)b);
		ld_bytes(b + 2, 32, q);
#pragma unroll
		for (int l = 0; l < 32; l++)
			w[l] = __fmul_rn((float)(int8_t)q[l], d);
	} else if (T == AAH_DTYPE_Q4_0) {
		const float d = dq_half(*(const uint16_t *)b);
		ld_bytes(b + 2, 16, q);
#pragma unroll
		for (int l = 0; l < 16; l++) {
			w[l] = __fmul_rn((float)((q[l] & 0x0F) - 8), d);
			w[l + 16] = __fmul_rn((float)((q[l] >> 4) - 8), d);
		}
	} else if (T == AAH_DTYPE_Q4_K || T == AAH_DTYPE_Q5_K) {
		const bool q5 = T == AAH_DTYPE_Q5_K;
		const aah_block_q4_K *x4 = (const aah_block_q4_K *)b;
		const aah_block_q5_K *x5 = (const aah_block_q5_K *)b;
		uint8_t scales[12], qh[32];
		ld_bytes(q5 ? x5->scales : x4->scales, 12, scales);
		ld_bytes((q5 ? x5->qs : x4->qs) + 32 * (c / 2), 32, q);
		if (q5)
			ld_bytes(x5->qh, 32, qh);
		const float d = dq_half(q5 ? x5->d : x4->d), min = dq_half(q5 ? x5->dmin : x4->dmin);
		float sc, m;
		dq_scale_min(c, scales, &sc, &m);
		const float d1 = __fmul_rn(d, sc), m1 = __fmul_rn(min, m);
		const int shift = 4 * (c & 1);
#pragma unroll
		for (int l = 0; l < 32; l++) {
			const int h = q5 ? ((qh[l] >> c) & 1) * 16 : 0;
			w[l] = __fsub_rn(__fmul_rn(d1, (float)(((q[l] >> shift) & 0xF) + h)), m1);
		}
	} else if (T == AAH_DTYPE_Q6_K) {
		const aah_block_q6_K *x = (const aah_block_q6_K *)b;
		const int n = c / 4, k = c % 4;   /* half n, quarter k: ql[l + 32·(k & 1)] nibble k >> 1, qh bits 2k */
		uint8_t qh[32], sc[2];
		ld_bytes(x->ql + 64 * n + 32 * (k & 1), 32, q);
		ld_bytes(x->qh + 32 * n, 32, qh);
		const uint16_t s2 = *(const uint16_t *)(x->scales + 8 * n + 2 * k);   /* sub-blocks l < 16 and l ≥ 16 */
		sc[0] = (uint8_t)s2;
		sc[1] = (uint8_t)(s2 >> 8);
		const float d = dq_half(x->d);
		const float d0 = __fmul_rn(d, (float)(int8_t)sc[0]), d1 = __fmul_rn(d, (float)(int8_t)sc[1]);
		const int shift = 4 * (k >> 1);
#pragma unroll
		for (int l = 0; l < 32; l++) {
			const int v = (int8_t)(((q[l] >> shift) & 0xF) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
			w[l] = __fmul_rn(l < 16 ? d0 : d1, (float)v);
		}
	}
}

template <int T, int N, bool VEC>
__global__ void __launch_bounds__(NT) gemv_quant_kernel(float *__restrict__ out, const float *__restrict__ x,
                                                        const uint8_t *__restrict__ w, int64_t M, int64_t K, int bl,
                                                        int64_t bb)
{
	const int lane = threadIdx.x & 31;
	const int64_t m = (int64_t)blockIdx.x * (NT / 32) + threadIdx.x / 32;
	if (m >= M)
		return;
	const int per_block = bl / 32;
	const int64_t chunks = K / 32;
	const uint8_t *wr = w + m * (K / bl) * bb;
	float acc[N];
#pragma unroll
	for (int i = 0; i < N; i++)
		acc[i] = 0.0f;
	for (int64_t ch = lane; ch < chunks; ch += 32) {
		float wv[32];
		dq_chunk<T>(wr + (ch / per_block) * bb, (int)(ch % per_block), wv);
#pragma unroll
		for (int i = 0; i < N; i++) {
			const float *xr = x + (int64_t)i * K + ch * 32;
			float s = acc[i];
			if (VEC) {
#pragma unroll
				for (int e = 0; e < 32; e += 8) {
					float xf[8];
					load8(xr + e, xf);
#pragma unroll
					for (int j = 0; j < 8; j++)
						s += wv[e + j] * xf[j];
				}
			} else {
#pragma unroll
				for (int e = 0; e < 32; e++)
					s += wv[e] * xr[e];
			}
			acc[i] = s;
		}
	}
#pragma unroll
	for (int i = 0; i < N; i++) {
		const float s = warp_sum(acc[i]);
		if (lane == 0)
			out[(int64_t)i * M + m] = s;
	}
}

template <int T, int N>
static void gemv_quant_launch(cudaStream_t st, float *out, const float *x, const uint8_t *w, int64_t M, int64_t K)
{
	const unsigned grid = (unsigned)((M + NT / 32 - 1) / (NT / 32));
	const int bl = (int)aah_dtype_block_len((aah_dtype)T);
	const int64_t bb = (int64_t)aah_dtype_block_bytes((aah_dtype)T);
	if ((uintptr_t)x % 16 == 0)
		LAUNCH(grid, NT, 0, st, gemv_quant_kernel<T, N, true>)(out, x, w, M, K, bl, bb);
	else
		LAUNCH(grid, NT, 0, st, gemv_quant_kernel<T, N, false>)(out, x, w, M, K, bl, bb);
}

template <int T>
static void gemv_quant_dispatch(cudaStream_t st, float *out, const float *x, int32_t n, const uint8_t *w, int64_t M,
                                int64_t K)
{
	with_gemv_rows(n, [&](auto N) { gemv_quant_launch<T, decltype(N)::value>(st, out, x, w, M, K); });
}

cudaError_t launch_gemv_quant(cudaStream_t st, float *out, const float *x, int32_t n, const void *w, aah_dtype t,
                              int64_t M, int64_t K)
{
	if (n <= 0 || M <= 0)
		return cudaSuccess;
	const int64_t bl = aah_dtype_is_quantized(t) ? aah_dtype_block_len(t) : 0;
	if (n > GEMV_MAX_N || M > (int64_t)65535 * 65535 || !bl || K % bl || (uintptr_t)w % 2)
		return cudaErrorInvalidValue;
	const uint8_t *wb = (const uint8_t *)w;
	switch (t) {
	case AAH_DTYPE_Q8_0: gemv_quant_dispatch<AAH_DTYPE_Q8_0>(st, out, x, n, wb, M, K); break;
	case AAH_DTYPE_Q4_0: gemv_quant_dispatch<AAH_DTYPE_Q4_0>(st, out, x, n, wb, M, K); break;
	case AAH_DTYPE_Q4_K: gemv_quant_dispatch<AAH_DTYPE_Q4_K>(st, out, x, n, wb, M, K); break;
	case AAH_DTYPE_Q5_K: gemv_quant_dispatch<AAH_DTYPE_Q5_K>(st, out, x, n, wb, M, K); break;
	case AAH_DTYPE_Q6_K: gemv_quant_dispatch<AAH_DTYPE_Q6_K>(st, out, x, n, wb, M, K); break;
	default: return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

static unsigned blocks_for(int64_t n)
{
	int64_t g = (n + NT - 1) / NT;
	return g < 1 ? 1u : g > 65535 ? 65535u : (unsigned)g;
}

cudaError_t launch_dequant(cudaStream_t st, void *dst, aah_dtype to, const void *w, aah_dtype t, int64_t rows,
                           int64_t cols)
{
	const int bl = (int)aah_dtype_block_len(t);
	const int64_t bb = (int64_t)aah_dtype_block_bytes(t), nb = rows * (cols / bl);
	if (!aah_dtype_is_quantized(t) || t == AAH_DTYPE_Q8_K || cols % bl)
		return cudaErrorInvalidValue;
	if (to == AAH_DTYPE_F32)
		LAUNCH(blocks_for(nb), NT, 0, st, dequant_kernel<float>)((float *)dst, (const uint8_t *)w, t, nb, bl, bb);
	else if (to == AAH_DTYPE_BF16)
		LAUNCH(blocks_for(nb), NT, 0, st, dequant_kernel<__nv_bfloat16>)((__nv_bfloat16 *)dst, (const uint8_t *)w, t,
		                                                                   nb, bl, bb);
	else
		return cudaErrorInvalidValue;
	return cudaGetLastError();
}

cudaError_t launch_get_rows_quant(cudaStream_t st, float *out, const void *table, aah_dtype t, int64_t cols,
                                  const int32_t *ids, int32_t n)
{
	const int bl = (int)aah_dtype_block_len(t);
	if (n <= 0)
		return cudaSuccess;
	if (!aah_dtype_is_quantized(t) || t == AAH_DTYPE_Q8_K || cols % bl)
		return cudaErrorInvalidValue;
	dim3 grid(blocks_for(cols / bl), n < 65535 ? (unsigned)n : 65535u);
	LAUNCH(grid, NT, 0, st, get_rows_quant_kernel)(out, (const uint8_t *)table, t, cols, ids, n, bl,
	                                              (int64_t)aah_dtype_block_bytes(t));
	return cudaGetLastError();
}
