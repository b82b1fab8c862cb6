/* kernels/cuda/cuda_attention.cuh — windowed attention over the paged, per-head trimmed KV pool, and the store of
 * new keys and values into it, on the device (cuda_attention.cu). Internal to kernels/cuda/: the backend's
 * attention and kv_store ops (backend.h) call these with the same arguments. */
#ifndef AAH_CUDA_ATTENTION_CUH
#define AAH_CUDA_ATTENTION_CUH

#include "kernels/cuda/cuda_ctx.cuh"

/* Lets the attention kernels ask for the device's whole shared memory; at init. Returns false on failure. */
bool cuda_attention_setup(cuda_ctx *c);

/* backend.h's attention: returns the products its plan computes (the device counts them too; see cuda_ctx). */
uint64_t cuda_attention_run(cuda_ctx *c, float *out, const float *q, const float *k, const float *v,
                            const aah_kv_pool *pool, const aah_attn_seq *seqs, int32_t n_seqs, int32_t n_heads,
                            int32_t n_kv, float scale, uint64_t *seq_work);

/* backend.h's kv_store. */
void cuda_kv_store_run(cuda_ctx *c, const aah_kv_pool *pool, const float *k, const float *v, const aah_attn_seq *seqs,
                       int32_t n_seqs, int32_t n_kv);

#endif
