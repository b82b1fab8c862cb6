/* kernels/cuda/cuda_sample.cuh — the CUDA backend's logits post-processing (cuda_sample.cu), the logits_top member of
 * its vtable. Internal to kernels/cuda/. */
#ifndef AAH_CUDA_SAMPLE_CUH
#define AAH_CUDA_SAMPLE_CUH

#include <stdint.h>

#include "kernels/backend.h"

/* backend.h logits_top: a block per row; stats and candidates come back to the host (it waits for the stream). */
void cuda_logits_top(aah_backend *b, aah_logits_stats *stats, int32_t *top_ids, float *top_logits,
                     const float *logits, int64_t ld, int32_t n_rows, int32_t n_cols, const float *temperature,
                     int32_t n_top);

#endif
