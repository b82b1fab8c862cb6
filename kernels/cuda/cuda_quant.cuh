/* kernels/cuda/cuda_quant.cuh — block-quantized weights (kernels/quant.h) on the device: rows dequantized exactly as
 * aah_dequantize_row does (the same float operations, never contracted into FMAs), into f32 or bf16 tiles for cuBLAS
 * and into embedding rows; and the decode product that dequantizes in registers. Internal to kernels/cuda/. */
#ifndef AAH_CUDA_QUANT_CUH
#define AAH_CUDA_QUANT_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/backend.h"

/* dst (rows × cols of type to: F32 or BF16) = the rows of blocks w (type t, rows × aah_dtype_row_bytes(t, cols)). */
cudaError_t launch_dequant(cudaStream_t st, void *dst, aah_dtype to, const void *w, aah_dtype t, int64_t rows,
                           int64_t cols);
/* out[i, :] = row ids[i] of the block table (type t, cols values a row), dequantized; ids (n) on the device. */
cudaError_t launch_get_rows_quant(cudaStream_t st, float *out, const void *table, aah_dtype t, int64_t cols,
                                  const int32_t *ids, int32_t n);

/* out (n, M) = x (n, K) · wᵀ for n ≤ GEMV_MAX_N rows, w the rows of blocks (type t, M × K): each block read once and
 * dequantized in registers (the same values as launch_dequant's), f32 products and sums. */
cudaError_t launch_gemv_quant(cudaStream_t st, float *out, const float *x, int32_t n, const void *w, aah_dtype t,
                              int64_t M, int64_t K);

#endif
