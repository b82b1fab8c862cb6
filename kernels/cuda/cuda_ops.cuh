/* kernels/cuda/cuda_ops.cuh — launchers of the row and element-wise kernels (cuda_ops.cu): embedding rows,
 * RMSNorm, RoPE, SwiGLU, residual add, the small-batch weight product (gemv) and type conversions. Each takes
 * device pointers and the stream, and returns the launch's error. Internal to kernels/cuda/. */
#ifndef AAH_CUDA_OPS_CUH
#define AAH_CUDA_OPS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/backend.h"

/* out[i, :] = table[ids[i], :] as f32; table (rows, cols) of type t; ids (n) on the device. */
cudaError_t launch_get_rows(cudaStream_t st, float *out, const void *table, aah_dtype t, int64_t cols,
                            const int32_t *ids, int32_t n);
/* out[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) · w, the sum of squares in double as on the CPU; out may be x. */
cudaError_t launch_rmsnorm(cudaStream_t st, float *out, const float *x, const void *w, aah_dtype t, int32_t n_rows,
                           int64_t dim, float eps);
/* NEOX RoPE in place on x (n_rows, n_heads, hd); pos (n_rows) and inv_freq (hd/2) on the device; θ in double. */
cudaError_t launch_rope(cudaStream_t st, float *x, int32_t n_rows, int32_t n_heads, int32_t hd, const int32_t *pos,
                        const float *inv_freq);
/* out[i] = gate[i] / (1 + exp(-gate[i])) · up[i]; out may be gate. */
cudaError_t launch_swiglu(cudaStream_t st, float *out, const float *gate, const float *up, int64_t n);
/* x[i] += y[i]. */
cudaError_t launch_add(cudaStream_t st, float *x, const float *y, int64_t n);
/* dst[p] (n_rows, widths[p]) = src (n_rows, Σ widths) columns of part p; n_parts ≤ AAH_SPLIT_MAX_PARTS, dst and
 * widths host arrays of device pointers and widths (passed by value to the kernel). */
cudaError_t launch_split_cols(cudaStream_t st, float *const *dst, const int32_t *widths, int32_t n_parts,
                              const float *src, int32_t n_rows);
/* out (n, M) = x (n, K) · wᵀ for n ≤ GEMV_MAX_N rows: w (M, K) of type t streamed once, f32 accumulation. */
#define GEMV_MAX_N 4
cudaError_t launch_gemv(cudaStream_t st, float *out, const float *x, int32_t n, const void *w, aah_dtype t, int64_t M,
                        int64_t K);
/* f(std::integral_constant<int, N>()) with N = n, the row count of a gemv (1 … GEMV_MAX_N): the one place that turns
 * a decode product's row count into the template argument its kernels unroll by. */
template <typename F> static inline void with_gemv_rows(int32_t n, F &&f)
{
	static_assert(GEMV_MAX_N == 4, "one case per row count");
	switch (n) {
	case 1: f(std::integral_constant<int, 1>()); break;
	case 2: f(std::integral_constant<int, 2>()); break;
	case 3: f(std::integral_constant<int, 3>()); break;
	default: f(std::integral_constant<int, 4>()); break;
	}
}
/* dst[i] = src[i] rounded to nearest-even into t (bf16 or f16), n elements. */
cudaError_t launch_f32_to_half(cudaStream_t st, void *dst, aah_dtype t, const float *src, int64_t n);
/* dst[i] = (float)src[i], n elements of type t. */
cudaError_t launch_to_f32(cudaStream_t st, float *dst, const void *src, aah_dtype t, int64_t n);

#endif
