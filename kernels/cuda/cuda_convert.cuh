/* kernels/cuda/cuda_convert.cuh — device helpers of the CUDA backend: element types (f32, f16 and bf16 loads widened
 * to f32, f32 rounded to nearest-even into the 16-bit types exactly as the CPU backend rounds), warp reductions, and
 * the one spelling of a kernel launch. */
#ifndef AAH_CUDA_CONVERT_CUH
#define AAH_CUDA_CONVERT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* A kernel launch, the kernel last (its template arguments may hold commas):
 *   LAUNCH(grid, block, smem, stream, kernel<T, N>)(args…)
 * tests/gpu/fakecuda/ defines it otherwise, to run the same kernels on the CPU (make test-gpu-emulated). */
#ifndef LAUNCH
#define LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#endif

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/* x as a T would hold it: what a key or value becomes once it is stored in a pool of element type T. */
template <typename T> __device__ __forceinline__ float round_to(float x) { return to_f32(from_f32<T>(x)); }
template <typename T> __device__ __forceinline__ float4 round_to4(float4 v)
{
	return make_float4(round_to<T>(v.x), round_to<T>(v.y), round_to<T>(v.z), round_to<T>(v.w));
}

/* Four consecutive elements from p (aligned to four elements) as f32. */
__device__ __forceinline__ float4 load4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ float4 load4(const __half *p)
{
	uint2 u = *reinterpret_cast<const uint2 *>(p);
	float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&u.x));
	float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&u.y));
	return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float4 load4(const __nv_bfloat16 *p)
{
	uint2 u = *reinterpret_cast<const uint2 *>(p);   /* bf16 is the high half of an f32 */
	return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
	                   __uint_as_float(u.y & 0xffff0000u));
}

/* Eight consecutive elements from p (aligned to 16 bytes for the 16-bit types, 32 for f32) as f32. */
__device__ __forceinline__ void load8(const float *p, float *o)
{
	float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
	o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w; o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16 *p, float *o)
{
	uint4 u = *reinterpret_cast<const uint4 *>(p);
	const uint32_t w[4] = { u.x, u.y, u.z, u.w };
#pragma unroll
	for (int i = 0; i < 4; i++) {
		o[2 * i] = __uint_as_float(w[i] << 16);
		o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
	}
}
__device__ __forceinline__ void load8(const __half *p, float *o)
{
	uint4 u = *reinterpret_cast<const uint4 *>(p);
	const uint32_t w[4] = { u.x, u.y, u.z, u.w };
#pragma unroll
	for (int i = 0; i < 4; i++) {
		float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&w[i]));
		o[2 * i] = f.x;
		o[2 * i + 1] = f.y;
	}
}

/* float, double or unsigned long long: every lane gets the warp's sum. */
template <typename T> __device__ __forceinline__ T warp_sum(T v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

#endif
