/* kernels/backend.h — the one interface the engine calls to compute.
 * A backend is an opaque handle over a small vtable (after ggml-backend); it owns its buffers. */
#ifndef AAH_BACKEND_H
#define AAH_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum aah_dtype {
	AAH_DTYPE_F32 = 0,
	AAH_DTYPE_F16 = 1,
	AAH_DTYPE_BF16 = 2,
	/* Block-quantized weights (GGUF's formats; kernels/quant.h has the layouts): only weight_import and matmul
	 * take them, and only where the backend says so. Q8_K quantizes activations and is never a weight. */
	AAH_DTYPE_Q8_0 = 3,
	AAH_DTYPE_Q4_0 = 4,
	AAH_DTYPE_Q4_K = 5,
	AAH_DTYPE_Q5_K = 6,
	AAH_DTYPE_Q6_K = 7,
	AAH_DTYPE_Q8_K = 8,
} aah_dtype;

/* Bytes of one element of a float type; 0 for the block types (kernels/quant.h: aah_dtype_row_bytes). */
size_t aah_dtype_size(aah_dtype t);
const char *aah_dtype_name(aah_dtype t);
/* The type aah_dtype_name calls name ("f32", "f16", "bf16"): 0, or -1 for any other name (*out untouched). */
int aah_dtype_from_name(const char *name, aah_dtype *out);

/* A row-major matrix in a backend's memory: rows × cols elements of `type`.
 * Weights are [out_features, in_features], as PyTorch stores them. */
typedef struct aah_tensor {
	void *data;
	aah_dtype type;
	int64_t rows, cols;
	/* 0: row-major as above. Otherwise a backend's own arrangement of a weight it imported (the CPU backend packs
	 * matrices into panels: kernels/cpu/cpu_kernels.h); only that backend's ops read it. */
	int32_t layout;
} aah_tensor;

/* The KV cache is a pool of pages. One page holds AAH_PAGE_LEN consecutive positions of one KV head:
 * K [AAH_PAGE_LEN][head_dim] followed by V [AAH_PAGE_LEN][head_dim], in the pool's element type.
 * A (sequence, layer, KV head) owns a ring of n_slots page ids: position p lives in page
 * ring[(p / AAH_PAGE_LEN) % n_slots], row p % AAH_PAGE_LEN. n_slots = ceil(capacity / AAH_PAGE_LEN) + 1, so a
 * ring holds the newest `capacity` positions and at most one page more. The engine keeps the rings
 * (engine/kv_cache.c); the backend only reads and writes pages. */
#define AAH_PAGE_LEN 16

typedef struct aah_kv_pool {
	void *data;         /* (n_pages, 2, AAH_PAGE_LEN, head_dim) in backend memory */
	aah_dtype type;
	int32_t n_pages;
	int32_t head_dim;
} aah_kv_pool;

/* One sequence's part of an attention call. Its query rows are q rows [row0, row0 + n_new),
 * at positions pos0 … pos0 + n_new - 1. Positions below pos0 are read from the pages; the new positions'
 * keys and values are read from the k and v matrices of the call (and stored by kv_store afterwards),
 * so a chunk of any length may attend to itself before it is written into a ring that may wrap. */
typedef struct aah_attn_seq {
	int32_t row0;
	int32_t n_new;
	int32_t pos0;
	int32_t ring_stride;      /* distance between two KV heads' rings in `rings` */
	const int32_t *rings;     /* (n_kv_heads, ring_stride) page ids for this layer; host memory */
	const int32_t *n_slots;   /* (n_kv_heads) ring length per KV head for this layer */
	const int32_t *windows;   /* (n_kv_heads) window W per KV head for this layer: keys p-W+1 … p, W ≤ capacity */
	/* Measurements of the attention this call computes, each optional (NULL: not measured), each summed over all of
	 * the sequence's query rows of the call (one row for a decode step, n_new for a prompt chunk):
	 * band_mass (n_heads, n_bands) host floats receive (+=) each query head's attention probability mass by key
	 * distance d = p − t, band b holding band_edges[b-1] ≤ d < band_edges[b] (the last band also takes anything
	 * beyond): the adaptive policy's probe (a decode step) and calibration (prompt chunks, engine_seq_measure).
	 * entropy (n_heads) host doubles receive (+=) each query head's attention entropy −Σ_t p_t ln p_t in nats. */
	float *band_mass;
	const int32_t *band_edges;
	int32_t n_bands;
	double *entropy;
} aah_attn_seq;

typedef struct aah_backend aah_backend;

#define AAH_SPLIT_MAX_PARTS 4
#define AAH_LOGITS_TOP_MAX 256

/* What logits_top returns per row besides its candidates: what engine/sampler.c and the log-probabilities need of the
 * whole row. With T the row's temperature (1 when T ≤ 0):
 *   max = max_i l_i (NaNs ignored; -inf when every entry is NaN or -inf)
 *   sum = Σ_i expf((l_i − max) / T), each term a float, summed in double — sampler.c's softmax denominator
 *   lse = max + log Σ_i exp((double)l_i − max), all in double — the log-softmax normaliser at T = 1
 * The CPU backend sums in index order, exactly as sampler.c and the scheduler's logprobs do, so a host result computed
 * from it equals theirs bit for bit; a device sums in a tree and its expf may differ in the last place, so its sum and
 * lse agree to about 1e-6 relative (the candidates' ids and logits are exact on every backend). */
typedef struct aah_logits_stats {
	float max;
	double sum;
	double lse;
} aah_logits_stats;

/* Every op writes its output first. Activations are f32 in backend memory. Optional members may be NULL. */
typedef struct aah_backend_iface {
	const char *name;
	void (*free)(aah_backend *b);

	/* Memory. buf_alloc returns NULL on failure; the caller frees with buf_free. */
	void *(*buf_alloc)(aah_backend *b, size_t bytes);
	void (*buf_free)(aah_backend *b, void *p);
	void (*buf_write)(aah_backend *b, void *dst, const void *src_host, size_t bytes);
	void (*buf_read)(aah_backend *b, void *dst_host, const void *src, size_t bytes);
	/* dst = src, both in this backend's memory, not overlapping (a forked sequence's KV pages). */
	void (*buf_copy)(aah_backend *b, void *dst, const void *src, size_t bytes);

	/* Makes a host weight (e.g. memory-mapped) usable by this backend: a copy in the backend's own layout (the CPU
	 * backend packs matrices into panels and uses vectors in place; the CUDA backend copies to the device). The host
	 * memory of a matrix may be freed once imported; a vector's must stay on the CPU. Returns 0, or -1 when out of
	 * memory. Release with weight_release (once per import). */
	int (*weight_import)(aah_backend *b, aah_tensor *out, const void *host, aah_dtype type,
	                     int64_t rows, int64_t cols);
	void (*weight_release)(aah_backend *b, aah_tensor *t);

	/* out[i, :] = table[ids[i], :] as f32; ids in host memory, each in [0, table.rows). */
	void (*get_rows)(aah_backend *b, float *out, const aah_tensor *table, const int32_t *ids, int32_t n);
	/* out[i, :] = x[i, :] / rms(x[i, :]) * w;  x, out (n_rows, dim); w (1, dim). out may equal x. */
	void (*rmsnorm)(aah_backend *b, float *out, const float *x, const aah_tensor *w, int32_t n_rows, float eps);
	/* out (n, w.rows) = x (n, w.cols) · wᵀ, f32 accumulation. */
	void (*matmul)(aah_backend *b, float *out, const float *x, int32_t n, const aah_tensor *w);
	/* NEOX rotary embedding in place: x (n_rows, n_heads, head_dim); row i at position pos[i] (host);
	 * for j < head_dim/2: θ = pos·inv_freq[j] (host, head_dim/2 values), (x_j, x_{j+d/2}) rotated by θ. */
	void (*rope)(aah_backend *b, float *x, int32_t n_rows, int32_t n_heads, int32_t head_dim,
	             const int32_t *pos, const float *inv_freq);
	/* out[i] = silu(gate[i]) · up[i], n elements. out may equal gate. */
	void (*swiglu)(aah_backend *b, float *out, const float *gate, const float *up, int64_t n);
	/* x[i] += y[i], n elements. */
	void (*add)(aah_backend *b, float *x, const float *y, int64_t n);

	/* Windowed causal attention (grouped-query): q, out (rows, n_heads·head_dim); k, v (rows, n_kv·head_dim)
	 * for the new positions. Query head h reads KV head h / (n_heads / n_kv). Counts the query·key products it
	 * computes (the work counter): adds each sequence's to seq_work[i] (host, n_seqs; may be NULL) and returns
	 * the total. scale = 1/sqrt(head_dim) normally. */
	uint64_t (*attention)(aah_backend *b, float *out, const float *q, const float *k, const float *v,
	                      const aah_kv_pool *pool, const aah_attn_seq *seqs, int32_t n_seqs,
	                      int32_t n_heads, int32_t n_kv, float scale, uint64_t *seq_work);
	/* Writes the new positions' k, v rows into the pages. Positions older than a ring can hold are
	 * skipped (the ring keeps the newest n_slots pages), and so are positions whose ring slot is -1 (the engine's
	 * second call for the pages a prompt spills to the prefix cache passes rings with only those). */
	void (*kv_store)(aah_backend *b, const aah_kv_pool *pool, const float *k, const float *v,
	                 const aah_attn_seq *seqs, int32_t n_seqs, int32_t n_kv);

	/* Waits until all queued work is done (no-op on the CPU). */
	void (*synchronize)(aah_backend *b);
	/* Optional: the first error this backend met (a failed device call, a work counter that disagrees), or NULL.
	 * Ops return nothing, so a backend that can fail records it here; after one, results are undefined. */
	const char *(*last_error)(aah_backend *b);

	/* 1: the engine should concatenate each layer's [wq; wk; wv] and [w_gate; w_up] rows into one weight, so that a
	 * step runs one product per fused projection and split_cols its output (fewer, larger launches on a device). The
	 * CPU backend says 0: its products gain little from it (AAH_FUSE=1 forces it there, for the tests). */
	int32_t fuse_projections;
	/* dst[p] (n_rows, widths[p]) = columns [Σ_{q<p} widths[q], … + widths[p]) of src (n_rows, Σ widths): one fused
	 * projection's output split into its parts. dst and widths are host arrays of n_parts ≤ AAH_SPLIT_MAX_PARTS
	 * backend pointers and widths; no dst overlaps src. */
	void (*split_cols)(aah_backend *b, float *const *dst, const int32_t *widths, int32_t n_parts, const float *src,
	                   int32_t n_rows);
	/* Optional: logits post-processing where the logits are, so a step brings back a short list per row instead of
	 * n_cols floats (see aah_logits_stats). For each row r of logits (row stride ld floats; its first n_cols entries l):
	 * stats[r] as described there at temperature[r], and top_ids / top_logits[r·n_top …) the n_top largest l, largest
	 * first, the lower id first among equals, NaN below everything (-0 equals +0). stats, top_ids, top_logits and
	 * temperature are host memory; n_top ≤ min(n_cols, AAH_LOGITS_TOP_MAX). Waits for the result. */
	void (*logits_top)(aah_backend *b, aah_logits_stats *stats, int32_t *top_ids, float *top_logits,
	                   const float *logits, int64_t ld, int32_t n_rows, int32_t n_cols, const float *temperature,
	                   int32_t n_top);

	/* Optional: a step that the backend may record once and replay (CUDA graphs). The engine brackets the layers of a
	 * decode step — every item one new token, no probe — with step_begin(key) … step_end; `key` (the number of rows)
	 * names the step's launch sequence: the same key, the same ops with the same shapes and buffers, only table
	 * contents (ids, positions, page lists, windows) differ. step_begin returns 1 when the backend takes the step, 0
	 * when the ops run as usual (then step_end is not called). Between the two no op waits for the device; step_end
	 * returns 0 when the step is queued, or 1 when nothing of it ran (a buffer had to grow first): the caller then
	 * calls the same ops again, outside any step, and keeps only that second pass's host results (the attention
	 * counts). The ops' host outputs are final only after step_end. */
	int (*step_begin)(aah_backend *b, uint64_t key);
	int (*step_end)(aah_backend *b);

	/* 1: this backend's buffers are host memory (the CPU backend): the engine may hand them to the caller directly. */
	int32_t host_memory;
	/* Optional: ids[r] = aah_argmax(rows[r], n_cols) (kernels/argmax.h) for r < n_rows, rows in this backend's
	 * memory, ids in host memory, the rows spread over the backend's workers: the greedy tokens of a decode step. */
	void (*argmax_rows)(aah_backend *b, int32_t *ids, const float *const *rows, int32_t n_rows, int32_t n_cols);
} aah_backend_iface;

struct aah_backend {
	aah_backend_iface iface;
	void *context;
};

typedef struct aah_backend_params {
	int32_t n_threads;   /* CPU: 0 = number of online cores */
	int32_t device;      /* CUDA: device index */
} aah_backend_params;

/* Creates the CPU backend; NULL when out of memory. Free with b->iface.free(b). Products with block-quantized weights
 * quantize the activations to 8 bits (kernels/cpu/cpu_quant.h); AAH_CPU_QUANT_MATMUL=f32 makes them exact f32
 * references instead (the weights dequantized, the activations as they are: slow, for the tests). */
aah_backend *aah_backend_cpu_init(const aah_backend_params *p);
/* The instruction set the CPU backend's kernels use: "avx512", "avx2" or "generic". */
const char *aah_backend_cpu_isa(const aah_backend *b);
/* The paths its products take, in words, as chosen at run time (CPUID, the kernel's grant of AMX tile state, AAH_AMX,
 * AAH_CPU_BF16): e.g. "AMX-INT8 tiles for q8_0/q4_0, bf16 exact" or "AVX2 packed products, bf16 exact". */
const char *aah_backend_cpu_paths(const aah_backend *b);

/* The instruction that does a CPU product's multiply-adds, by the path the backend chose (CPUID, the kernel's AMX
 * grant, AAH_CPU_ISA, AAH_CPU_QPACK, AAH_AMX, AAH_CPU_BF16): what aah-bench holds prefill against, each with a measured
 * peak (kernels/cpu/cpu_peak.h). */
typedef enum aah_cpu_product {
	AAH_CPU_PRODUCT_OTHER = 0,    /* scalar C, or AVX2's vpmaddubsw + vpmaddwd without VNNI: no peak loop */
	AAH_CPU_PRODUCT_FMA_YMM,      /* vfmadd231ps ymm: float weights widened to f32 on the AVX2 table */
	AAH_CPU_PRODUCT_FMA_ZMM,      /* vfmadd231ps zmm: the same on the AVX-512 table (bf16 exact) */
	AAH_CPU_PRODUCT_DPBUSD_YMM,   /* vpdpbusd ymm: AVX-VNNI packed products, the vnni256 twin, the row-major dots */
	AAH_CPU_PRODUCT_DPBUSD_ZMM,   /* vpdpbusd zmm: AVX-512 VNNI packed products */
	AAH_CPU_PRODUCT_DPBF16_ZMM,   /* vdpbf16ps zmm: bf16 weights, activations rounded to bf16 */
	AAH_CPU_PRODUCT_AMX_INT8,     /* AMX-INT8 tile products (tdpbssd / tdpbsud, tdpbusd's throughput) */
	AAH_CPU_PRODUCT_AMX_BF16,     /* AMX-BF16 tile products (tdpbf16ps) */
	AAH_CPU_PRODUCT_COUNT
} aah_cpu_product;
/* The instruction the CPU backend b multiplies a weight of type w (cols in_features) by n_rows activation rows with:
 * e.g. q8_0 at 512 rows is AMX_INT8 where the tiles are on, and DPBUSD_ZMM at 1 row (CPU_AMX_MIN_ROWS). */
aah_cpu_product aah_backend_cpu_product(const aah_backend *b, aah_dtype w, int64_t cols, int32_t n_rows);

/* The CUDA backend (kernels/cuda/). Weights are copied to the device once, in their dtype; every op runs there on
 * one stream, and only buf_read, synchronize and probe attention calls (band_mass) wait for the device.
 * Environment: AAH_CUDA_MATMUL=f32 makes every projection an f32 product (f32 activations, weights widened
 * exactly), for the reference tests; by default products of more than a few rows run on the tensor cores with the
 * activations rounded to the weights' 16-bit type and f32 accumulation. It implements step_begin/step_end with CUDA
 * graphs (one per key, replayed); AAH_CUDA_GRAPHS=0 launches every step op by op instead. In a build without nvcc
 * these are stubs: available() is 0 and init() fails with "built without CUDA". Block-quantized weights stay as their
 * blocks on the device; a product dequantizes them a tile at a time (kernels/cuda/cuda_quant.cu) into f32 (decode rows,
 * f32 mode) or bf16 tiles (prefill) for cuBLAS. */
/* 1 when the CUDA runtime sees at least one device. */
int aah_backend_cuda_available(void);
/* Creates the CUDA backend on device p->device; NULL with a message in err. Free with b->iface.free(b). */
aah_backend *aah_backend_cuda_init(const aah_backend_params *p, char *err, size_t err_len);
/* The device, e.g. "NVIDIA H200, 132 SMs, bf16 tensor-core matmul". */
const char *aah_backend_cuda_device(const aah_backend *b);
/* Query·key products the attention kernels counted on the device since init (waits for the device). The attention
 * op returns the counts its plan prescribes without waiting; every synchronisation compares the two (last_error). */
uint64_t aah_backend_cuda_work_measured(aah_backend *b);
/* Decode steps recorded as CUDA graphs (AAH_CUDA_GRAPHS=0 turns them off): whether they are on, graphs captured,
 * steps replayed from one, and steps that ran eagerly again because a buffer had to grow (warm-up). */
typedef struct aah_cuda_graph_stats {
	int32_t enabled;
	uint64_t captured, replayed, eager;
} aah_cuda_graph_stats;
void aah_backend_cuda_graph_stats(const aah_backend *b, aah_cuda_graph_stats *out);
/* Device-to-device copy bandwidth of device `device` in GB/s, counting bytes read plus bytes written (a copy of
 * `bytes`, best of several), or 0 when there is no device. For benchmarks: the ceiling for memory-bound steps. */
double aah_cuda_copy_bandwidth(int32_t device, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
