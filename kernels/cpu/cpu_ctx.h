/* kernels/cpu/cpu_ctx.h — the CPU backend's context, shared by its files (cpu_backend.c: memory, weights, element-wise
 * ops, products; cpu_attention.c: attention and the KV store). Internal to kernels/cpu/. */
#ifndef AAH_CPU_CTX_H
#define AAH_CPU_CTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_qpack.h"
#include "kernels/cpu/cpu_quant.h"
#include "kernels/cpu/threadpool.h"

#define MAX_THREADS 256
#define MAX_GROUP 64   /* query heads per KV head */

#define CPU_LAYOUT_PANELS 1   /* aah_tensor.layout of a packed float matrix (cpu_kernels.h) */
#define CPU_LAYOUT_BLOCKS 2   /* a block-quantized matrix: the backend's aligned copy of its rows of blocks */
#define CPU_LAYOUT_QPACK 3    /* a block-quantized matrix in groups of 16 interleaved rows (cpu_qpack.h) */

/* Per-worker scratch, grown (never shrunk) when a call needs more; steady-state steps allocate nothing. */
typedef struct cpu_scratch {
	float *buf;
	size_t cap;   /* floats */
} cpu_scratch;

/* A call-wide buffer of the same kind (grown, never shrunk). */
typedef struct cpu_buf {
	void *p;
	size_t cap;   /* bytes */
} cpu_buf;

typedef struct cpu_ctx {
	threadpool *tp;
	const cpu_kernels *k;
	const cpu_qkernels *qk;   /* the products with block-quantized weights (cpu_quant.h), of the same ISA as k */
	int32_t n_threads;
	cpu_scratch scratch[MAX_THREADS];
	float *xt;          /* matmul's activations, transposed a group of rows at a time (grown, never shrunk) */
	size_t xt_cap;      /* floats */
	/* attention (cpu_attention.c): the call's new keys and values rounded to the pool's type, its work units, and
	 * its measured rows */
	cpu_buf att_k, att_v, att_units, att_meas;
	cpu_buf qact;       /* matmul's activations quantized for a block-quantized weight (cpu_quant_matmul.c) */
	bool quant_f32;     /* AAH_CPU_QUANT_MATMUL=f32: those products as exact f32 references instead */
	/* Block-quantized matrices packed 16 rows at a time (cpu_qpack.h): the packed products of this CPU (AVX-512 VNNI,
	 * else AVX2), and the activation quantizer they read; NULL (the row-major dots) without AVX2, with quant_f32, or
	 * with AAH_CPU_QPACK=0 (for comparison) */
	cpu_qpack_fn (*qpack_kernel)(aah_dtype t);
	void (*qpack_act)(aah_dtype t, void *dst, const float *x, int64_t n);
	/* The same products on AMX-INT8 tiles for calls of many activation rows (cpu_amx.h: the same bits); NULL without
	 * AMX, without the packed AVX-512 VNNI kernels, or with AAH_AMX=0 */
	cpu_amx_fn (*amx_kernel)(aah_dtype t);
	cpu_buf amx_act;    /* the activation quants as the tiles read them (cpu_amx.h), 16 rows a chunk */
	cpu_buf amx_prep;   /* Q4_K / Q5_K weights made ready for the tiles, a run of groups per worker (cpu_amx_prep) */
	/* bf16 weights on vdpbf16ps, the activations rounded to bf16 (cpu_bf16dot.h; AAH_CPU_BF16); false: the exact path,
	 * f32 activations times the widened weights */
	bool bf16dot;
	bool bf16tile;      /* or on AMX-BF16 tiles (cpu_amx.h; AAH_CPU_BF16=amx), where K is a multiple of 32 */
	char paths[96];     /* what cpu_fast_select chose, in words (aah_backend_cpu_paths) */
	cpu_buf xbf;        /* matmul's activations as bf16 pairs, a group of rows at a time (cpu_bf16dot_pairs) */
	cpu_buf qrow;       /* get_rows: a packed row's blocks */
} cpu_ctx;

/* Makes every worker's scratch at least n floats. Returns false when out of memory. */
bool cpu_scratch_reserve(cpu_ctx *c, size_t n);
/* Makes b at least `bytes` (64-byte aligned; the contents are not kept). Returns false when out of memory. */
bool cpu_buf_reserve(cpu_buf *b, size_t bytes);
/* [lo, hi) of n items for worker i of nt, in multiples of `align`. */
void cpu_split_range(int64_t n, int64_t align, int32_t i, int32_t nt, int64_t *lo, int64_t *hi);

/* backend.h's matmul with a block-quantized weight w (layout CPU_LAYOUT_BLOCKS: its rows of blocks as in the file;
 * CPU_LAYOUT_QPACK: packed). */
void cpu_matmul_quant(cpu_ctx *c, float *out, const float *x, int32_t n, const aah_tensor *w);

/* backend.h's attention and kv_store (cpu_attention.c). */
uint64_t cpu_attention(aah_backend *b, float *out, const float *q, const float *k, const float *v,
                       const aah_kv_pool *pool, const aah_attn_seq *seqs, int32_t n_seqs, int32_t n_heads,
                       int32_t n_kv, float scale, uint64_t *seq_work);
void cpu_kv_store(aah_backend *b, const aah_kv_pool *pool, const float *k, const float *v, const aah_attn_seq *seqs,
                  int32_t n_seqs, int32_t n_kv);

#endif
