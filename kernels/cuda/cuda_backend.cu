/* kernels/cuda/cuda_backend.cu — the CUDA backend behind kernels/backend.h: device memory, weights uploaded once in
 * their dtype, projections through cuBLAS (or a streaming gemv for decode), the other ops as kernels of
 * cuda_ops.cu and cuda_attention.cu, all on one stream. Only buf_read, synchronize and a probe's band mass wait. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "kernels/cuda/cuda_attention.cuh"
#include "kernels/cuda/cuda_ctx.cuh"
#include "kernels/cuda/cuda_ops.cuh"
#include "kernels/cuda/cuda_quant.cuh"
#include "kernels/quant.h"
#include "kernels/cuda/cuda_sample.cuh"

#define BLAS_WORKSPACE ((size_t)32 << 20)   /* what cuBLAS asks for on Hopper */
#define WIDEN_BYTES ((size_t)64 << 20)      /* f32 mode: weight rows widened to f32 per cuBLAS call */

/* ---- errors ---- */

static bool quiet_init;   /* init reports through its err argument, not stderr */

static void record(cuda_ctx *c, const char *msg)
{
	if (c->failed)
		return;
	c->failed = true;
	snprintf(c->err, sizeof c->err, "%s", msg);
	if (!quiet_init)
		fprintf(stderr, "aah cuda: %s\n", c->err);
}

bool cuda_check_impl(cuda_ctx *c, cudaError_t e, const char *what, const char *file, int line)
{
	if (e == cudaSuccess)
		return true;
	char msg[512];
	snprintf(msg, sizeof msg, "%s:%d: %s: %s", file, line, what, cudaGetErrorString(e));
	record(c, msg);
	return false;
}

bool blas_check_impl(cuda_ctx *c, cublasStatus_t s, const char *what, const char *file, int line)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return true;
	char msg[512];
	snprintf(msg, sizeof msg, "%s:%d: %s: %s", file, line, what, cublasGetStatusString(s));
	record(c, msg);
	return false;
}

void cuda_fail(cuda_ctx *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	record(c, msg);
}

/* ---- staging, tables, scratch ---- */

void *stage_host(cuda_ctx *c, size_t bytes)
{
	if (step_active(c)) {   /* a recorded step's ops use the step arenas; this would wait */
		cuda_fail(c, "stage_host inside a recorded step");
		return NULL;
	}
	bytes = align_up(bytes ? bytes : 1, 256);
	if (c->stage_used + bytes > c->stage_cap) {
		/* every copy out of the arena so far must be done before any of it is written again */
		if (!CUDA_CHECK(c, cudaStreamSynchronize(c->stream)))
			return NULL;
		c->stage_used = 0;
		if (bytes > c->stage_cap) {
			size_t cap = std::max(bytes, 2 * c->stage_cap);
			if (c->h_stage)
				CUDA_CHECK(c, cudaFreeHost(c->h_stage));
			c->h_stage = NULL;
			c->stage_cap = 0;
			if (!CUDA_CHECK(c, cudaHostAlloc((void **)&c->h_stage, cap, cudaHostAllocDefault)))
				return NULL;
			c->stage_cap = cap;
		}
	}
	void *p = c->h_stage + c->stage_used;
	c->stage_used += bytes;
	c->stage_asked += bytes;
	return p;
}

/* Grows a device buffer to at least `bytes` (contents are not kept). Waits for the stream first: a kernel may
 * still read the old one. Inside a recorded step nothing may wait or allocate: the step is aborted instead, with
 * the need recorded, and runs again eagerly (cuda_graph.cu). A buffer that recorded graphs name (`named`) drops
 * them when it moves. */
static void *grow_device(cuda_ctx *c, uint8_t **buf, size_t *cap, size_t bytes, bool named = false)
{
	if (bytes <= *cap && *buf)
		return *buf;
	if (step_active(c)) {
		if (named)
			c->scratch_need = std::max(c->scratch_need, bytes);
		c->step_abort = true;
		return NULL;
	}
	size_t n = align_up(std::max(bytes, *cap + *cap / 2), (size_t)1 << 20);
	if (!CUDA_CHECK(c, cudaStreamSynchronize(c->stream)))
		return NULL;
	if (named)
		graphs_drop(c);
	if (*buf)
		CUDA_CHECK(c, cudaFree(*buf));
	*buf = NULL;
	*cap = 0;
	if (!CUDA_CHECK(c, cudaMalloc((void **)buf, n)))
		return NULL;
	*cap = n;
	return *buf;
}

void *tab_reserve(cuda_ctx *c, size_t bytes)
{
	return grow_device(c, &c->d_tab, &c->tab_cap, bytes);
}

void *scratch_reserve(cuda_ctx *c, size_t bytes)
{
	return grow_device(c, &c->d_scratch, &c->scratch_cap, bytes, true);
}

void ctx_sync(cuda_ctx *c)
{
	if (step_active(c)) {
		cuda_fail(c, "a wait for the device inside a recorded step");
		return;
	}
	CUDA_CHECK(c, cudaMemcpyAsync(c->h_work, c->d_work, sizeof *c->h_work, cudaMemcpyDeviceToHost, c->stream));
	if (!CUDA_CHECK(c, cudaStreamSynchronize(c->stream)))
		return;
	c->stage_used = 0;
	/* The arena wrapped since the last sync point (a wait inside the step): size it for all that was asked, now that
	 * nothing reads it, so that the same steps never wait again. */
	if (c->stage_asked > c->stage_cap) {
		const size_t cap = align_up(c->stage_asked + c->stage_asked / 4, (size_t)1 << 20);
		CUDA_CHECK(c, cudaFreeHost(c->h_stage));
		c->h_stage = NULL;
		c->stage_cap = 0;
		if (CUDA_CHECK(c, cudaHostAlloc((void **)&c->h_stage, cap, cudaHostAllocDefault)))
			c->stage_cap = cap;
	}
	c->stage_asked = 0;
	if (*c->h_work != c->work_expected)
		cuda_fail(c, "attention work counter: the kernels computed %llu query-key products, their plan %llu",
		          (unsigned long long)*c->h_work, (unsigned long long)c->work_expected);
}

static cuda_ctx *ctx_of(aah_backend *b)
{
	cuda_ctx *c = (cuda_ctx *)b->context;
	if (c->device != 0)   /* the current device is per thread, and the engine thread is not the one that made us */
		cudaSetDevice(c->device);
	return c;
}

/* ---- memory ---- */

static void *cuda_buf_alloc(aah_backend *b, size_t bytes)
{
	ctx_of(b);
	void *p = NULL;
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
		cudaGetLastError();   /* out of memory is the caller's to report, and not sticky */
		return NULL;
	}
	return p;
}

static void cuda_buf_free(aah_backend *b, void *p)
{
	cuda_ctx *c = ctx_of(b);
	if (p)
		CUDA_CHECK(c, cudaFree(p));
}

static void cuda_buf_write(aah_backend *b, void *dst, const void *src_host, size_t bytes)
{
	cuda_ctx *c = ctx_of(b);
	/* from pageable memory the runtime stages the bytes before it returns, so src may be reused at once */
	CUDA_CHECK(c, cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, c->stream));
}

static void cuda_buf_read(aah_backend *b, void *dst_host, const void *src, size_t bytes)
{
	cuda_ctx *c = ctx_of(b);
	CUDA_CHECK(c, cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, c->stream));
	ctx_sync(c);
	if (c->failed)
		memset(dst_host, 0xff, bytes);   /* NaN: a failed backend never hands out plausible numbers */
}

static void cuda_buf_copy(aah_backend *b, void *dst, const void *src, size_t bytes)
{
	cuda_ctx *c = ctx_of(b);
	CUDA_CHECK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

static int cuda_weight_import(aah_backend *b, aah_tensor *out, const void *host, aah_dtype type, int64_t rows,
                              int64_t cols)
{
	cuda_ctx *c = ctx_of(b);
	/* block types: matrices of whole blocks per row, kept as the file's blocks (dequantized by the ops); never Q8_K */
	const bool blocks = aah_dtype_is_quantized(type);
	if (blocks && (rows <= 1 || type == AAH_DTYPE_Q8_K || !aah_dtype_row_bytes(type, cols)))
		return -1;
	const size_t bytes = blocks ? (size_t)rows * aah_dtype_row_bytes(type, cols)
	                            : (size_t)rows * (size_t)cols * aah_dtype_size(type);
	void *d = NULL;
	if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) {
		cudaGetLastError();
		return -1;
	}
	/* on our stream, so that every kernel after it sees the weight: the legacy stream's cudaMemcpy would not order
	 * itself with a non-blocking stream, and from pageable memory it may return before the bytes land */
	if (!CUDA_CHECK(c, cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, c->stream))) {
		cudaFree(d);
		return -1;
	}
	out->data = d;
	out->type = type;
	out->rows = rows;
	out->cols = cols;
	return 0;
}

static void cuda_weight_release(aah_backend *b, aah_tensor *t)
{
	cuda_ctx *c = ctx_of(b);
	if (t->data)
		CUDA_CHECK(c, cudaFree(t->data));
	t->data = NULL;
}

static void cuda_synchronize(aah_backend *b)
{
	ctx_sync(ctx_of(b));
}

static const char *cuda_last_error(aah_backend *b)
{
	cuda_ctx *c = (cuda_ctx *)b->context;
	return c->failed ? c->err : NULL;
}

/* ---- row and element-wise ops ---- */

static void cuda_get_rows(aah_backend *b, float *out, const aah_tensor *table, const int32_t *ids, int32_t n)
{
	cuda_ctx *c = ctx_of(b);
	if (n <= 0)
		return;
	if (step_active(c)) {   /* a recorded step: the ids lie in the fixed arena, uploaded before the graph runs */
		void *d = NULL;
		int32_t *h = (int32_t *)step_fixed(c, (size_t)n * sizeof *ids, &d);
		if (!h)
			return;
		memcpy(h, ids, (size_t)n * sizeof *ids);
		if (step_launches(c))
			CUDA_CHECK(c, aah_dtype_is_quantized(table->type)
			                  ? launch_get_rows_quant(c->stream, out, table->data, table->type, table->cols,
			                                          (const int32_t *)d, n)
			                  : launch_get_rows(c->stream, out, table->data, table->type, table->cols, (const int32_t *)d,
			                                    n));
		return;
	}
	int32_t *h = (int32_t *)stage_host(c, (size_t)n * sizeof *ids);
	int32_t *d = (int32_t *)tab_reserve(c, (size_t)n * sizeof *ids);
	if (!h || !d)
		return;
	memcpy(h, ids, (size_t)n * sizeof *ids);
	if (CUDA_CHECK(c, cudaMemcpyAsync(d, h, (size_t)n * sizeof *ids, cudaMemcpyHostToDevice, c->stream)))
		CUDA_CHECK(c, aah_dtype_is_quantized(table->type)
		                  ? launch_get_rows_quant(c->stream, out, table->data, table->type, table->cols, d, n)
		                  : launch_get_rows(c->stream, out, table->data, table->type, table->cols, d, n));
}

static void cuda_rmsnorm(aah_backend *b, float *out, const float *x, const aah_tensor *w, int32_t n_rows, float eps)
{
	cuda_ctx *c = ctx_of(b);
	if (step_launches(c))
		CUDA_CHECK(c, launch_rmsnorm(c->stream, out, x, w->data, w->type, n_rows, w->cols, eps));
}

/* Uploads host[0..n) into *dev unless it already holds exactly that (last[0..*held)). */
template <typename T>
static bool upload_cached(cuda_ctx *c, T **dev, T **last, int32_t *cap, int32_t *held, const T *host, int32_t n)
{
	if (n > *cap) {
		int32_t nc = std::max(n, 2 * *cap);
		uint8_t *d = (uint8_t *)*dev;
		size_t dcap = (size_t)*cap * sizeof(T);
		if (!grow_device(c, &d, &dcap, (size_t)nc * sizeof(T)))
			return false;
		*dev = (T *)d;
		T *l = (T *)realloc(*last, (size_t)nc * sizeof(T));
		if (!l) {
			cuda_fail(c, "out of host memory");
			return false;
		}
		*last = l;
		*cap = nc;
		*held = -1;
	}
	if (*held == n && memcmp(*last, host, (size_t)n * sizeof(T)) == 0)
		return true;
	T *h = (T *)stage_host(c, (size_t)n * sizeof(T));
	if (!h)
		return false;
	memcpy(h, host, (size_t)n * sizeof(T));
	if (!CUDA_CHECK(c, cudaMemcpyAsync(*dev, h, (size_t)n * sizeof(T), cudaMemcpyHostToDevice, c->stream)))
		return false;
	memcpy(*last, host, (size_t)n * sizeof(T));
	*held = n;
	return true;
}

/* In a recorded step: host[0..n) in the fixed arena, once per step while the engine passes the same values (the q
 * and k calls of every layer); returns its device address, NULL when the step was aborted. */
template <typename T>
static const T *step_table(cuda_ctx *c, const T **dev, size_t *at, int32_t *held, const T *host, int32_t n)
{
	if (*dev && *held == n && memcmp(c->h_fix + *at, host, (size_t)n * sizeof(T)) == 0)
		return *dev;
	void *d = NULL;
	T *h = (T *)step_fixed(c, (size_t)n * sizeof(T), &d);
	if (!h)
		return NULL;
	memcpy(h, host, (size_t)n * sizeof(T));
	*dev = (const T *)d;
	*at = (size_t)((uint8_t *)h - c->h_fix);
	*held = n;
	return *dev;
}

static void cuda_rope(aah_backend *b, float *x, int32_t n_rows, int32_t n_heads, int32_t head_dim, const int32_t *pos,
                      const float *inv_freq)
{
	cuda_ctx *c = ctx_of(b);
	if (n_rows <= 0)
		return;
	if (step_active(c)) {
		const int32_t *dp = step_table(c, &c->step_pos, &c->step_pos_at, &c->step_pos_n, pos, n_rows);
		const float *df = step_table(c, &c->step_freq, &c->step_freq_at, &c->step_freq_n, inv_freq, head_dim / 2);
		if (dp && df && step_launches(c))
			CUDA_CHECK(c, launch_rope(c->stream, x, n_rows, n_heads, head_dim, dp, df));
		return;
	}
	if (upload_cached(c, &c->d_pos, &c->h_pos_last, &c->pos_cap, &c->pos_n, pos, n_rows) &&
	    upload_cached(c, &c->d_freq, &c->h_freq_last, &c->freq_cap, &c->freq_n, inv_freq, head_dim / 2))
		CUDA_CHECK(c, launch_rope(c->stream, x, n_rows, n_heads, head_dim, c->d_pos, c->d_freq));
}

static void cuda_swiglu(aah_backend *b, float *out, const float *gate, const float *up, int64_t n)
{
	cuda_ctx *c = ctx_of(b);
	if (step_launches(c))
		CUDA_CHECK(c, launch_swiglu(c->stream, out, gate, up, n));
}

static void cuda_add(aah_backend *b, float *x, const float *y, int64_t n)
{
	cuda_ctx *c = ctx_of(b);
	if (step_launches(c))
		CUDA_CHECK(c, launch_add(c->stream, x, y, n));
}

static void cuda_split_cols(aah_backend *b, float *const *dst, const int32_t *widths, int32_t n_parts,
                            const float *src, int32_t n_rows)
{
	cuda_ctx *c = ctx_of(b);
	if (step_launches(c))   /* the pointers and widths go into the launch by value: a graph keeps them */
		CUDA_CHECK(c, launch_split_cols(c->stream, dst, widths, n_parts, src, n_rows));
}

/* ---- matmul ----
 * out (n, M) = x (n, K) · wᵀ with w (M, K) row-major. In cuBLAS's column-major terms: w is a K × M matrix (ld K),
 * x a K × n matrix (ld K), out an M × n matrix (ld M), so out = op_T(w) · x. Up to GEMV_MAX_N rows (decode) a
 * streaming gemv reads each weight once with f32 activations. Beyond, the default rounds the activations to the
 * weights' 16-bit type and runs cublasGemmEx on the tensor cores with f32 accumulation; AAH_CUDA_MATMUL=f32
 * widens the weights to f32 instead (exactly) and multiplies in plain f32, for the reference tests. */
/* A block-quantized weight. Decode rows (n ≤ GEMV_MAX_N): the gemv that dequantizes each block in registers, f32
 * products, each weight byte read once. Beyond: its rows dequantized a tile at a time (at most WIDEN_BYTES) and
 * multiplied by cuBLAS; in f32 mode the tiles are f32 and the product exact f32, otherwise the tiles are bf16 and the
 * activations rounded to bf16, on the tensor cores with f32 accumulation (as for bf16 weights). */
static void matmul_quant(cuda_ctx *c, float *out, const float *x, int32_t n, const aah_tensor *w)
{
	const int64_t M = w->rows, K = w->cols;
	if (n <= GEMV_MAX_N) {
		if (step_launches(c))
			CUDA_CHECK(c, launch_gemv_quant(c->stream, out, x, n, w->data, w->type, M, K));
		return;
	}
	const bool f32 = c->matmul_f32;
	const size_t es = f32 ? sizeof(float) : 2, xh_bytes = f32 ? 0 : ((size_t)n * (size_t)K * 2 + 255) / 256 * 256;
	const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(M, (int64_t)(WIDEN_BYTES / es) / K));
	uint8_t *s = (uint8_t *)scratch_reserve(c, xh_bytes + (size_t)rows * (size_t)K * es);
	if (!s || !step_launches(c))   /* a replayed step asks for the same scratch and launches nothing */
		return;
	void *xh = s, *wt = s + xh_bytes;
	if (!f32 && !CUDA_CHECK(c, launch_f32_to_half(c->stream, xh, AAH_DTYPE_BF16, x, (int64_t)n * K)))
		return;
	const float one = 1.0f, zero = 0.0f;
	const size_t row_bytes = aah_dtype_row_bytes(w->type, K);
	for (int64_t m0 = 0; m0 < M; m0 += rows) {
		const int64_t mc = std::min(rows, M - m0);
		const void *src = (const uint8_t *)w->data + (size_t)m0 * row_bytes;
		if (!CUDA_CHECK(c, launch_dequant(c->stream, wt, f32 ? AAH_DTYPE_F32 : AAH_DTYPE_BF16, src, w->type, mc, K)))
			return;
		if (f32 ? !BLAS_CHECK(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)mc, n, (int)K, &one, wt,
		                                      CUDA_R_32F, (int)K, x, CUDA_R_32F, (int)K, &zero, out + m0, CUDA_R_32F,
		                                      (int)M, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT))
		        : !BLAS_CHECK(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)mc, n, (int)K, &one, wt,
		                                      CUDA_R_16BF, (int)K, xh, CUDA_R_16BF, (int)K, &zero, out + m0, CUDA_R_32F,
		                                      (int)M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)))
			return;
	}
}

static void cuda_matmul(aah_backend *b, float *out, const float *x, int32_t n, const aah_tensor *w)
{
	cuda_ctx *c = ctx_of(b);
	const int64_t M = w->rows, K = w->cols;
	if (n <= 0 || M <= 0)
		return;
	if (M > INT_MAX || K > INT_MAX) {
		cuda_fail(c, "matmul: a %lld x %lld weight is beyond cuBLAS's int dimensions", (long long)M, (long long)K);
		return;
	}
	if (aah_dtype_is_quantized(w->type)) {
		matmul_quant(c, out, x, n, w);
		return;
	}
	if (n <= GEMV_MAX_N) {
		if (step_launches(c))
			CUDA_CHECK(c, launch_gemv(c->stream, out, x, n, w->data, w->type, M, K));
		return;
	}
	const float one = 1.0f, zero = 0.0f;
	/* a replayed step launches nothing, but asks for the same scratch (an aborted one records the need) */
	if (w->type == AAH_DTYPE_F32 && !step_launches(c))
		return;
	if (w->type == AAH_DTYPE_F32) {
		BLAS_CHECK(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, n, (int)K, &one, w->data, CUDA_R_32F,
		                           (int)K, x, CUDA_R_32F, (int)K, &zero, out, CUDA_R_32F, (int)M,
		                           c->matmul_f32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F_FAST_TF32,
		                           CUBLAS_GEMM_DEFAULT));
		return;
	}
	const cudaDataType wt = w->type == AAH_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
	if (!c->matmul_f32) {
		void *xh = scratch_reserve(c, (size_t)n * (size_t)K * 2);
		if (!xh || !step_launches(c) || !CUDA_CHECK(c, launch_f32_to_half(c->stream, xh, w->type, x, (int64_t)n * K)))
			return;
		BLAS_CHECK(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, n, (int)K, &one, w->data, wt, (int)K, xh,
		                           wt, (int)K, &zero, out, CUDA_R_32F, (int)M, CUBLAS_COMPUTE_32F,
		                           CUBLAS_GEMM_DEFAULT));
		return;
	}
	const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(M, (int64_t)(WIDEN_BYTES / sizeof(float)) / K));
	float *wf = (float *)scratch_reserve(c, (size_t)rows * (size_t)K * sizeof(float));
	if (!wf || !step_launches(c))
		return;
	for (int64_t m0 = 0; m0 < M; m0 += rows) {
		const int64_t mc = std::min(rows, M - m0);
		const void *src = (const uint8_t *)w->data + (size_t)m0 * (size_t)K * 2;
		if (!CUDA_CHECK(c, launch_to_f32(c->stream, wf, src, w->type, mc * K)) ||
		    !BLAS_CHECK(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)mc, n, (int)K, &one, wf, CUDA_R_32F,
		                                (int)K, x, CUDA_R_32F, (int)K, &zero, out + m0, CUDA_R_32F, (int)M,
		                                CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT)))
			return;
	}
}

/* ---- attention ---- */

static uint64_t cuda_attention(aah_backend *b, float *out, const float *q, const float *k, const float *v,
                               const aah_kv_pool *pool, const aah_attn_seq *seqs, int32_t n_seqs, int32_t n_heads,
                               int32_t n_kv, float scale, uint64_t *seq_work)
{
	return cuda_attention_run(ctx_of(b), out, q, k, v, pool, seqs, n_seqs, n_heads, n_kv, scale, seq_work);
}

static void cuda_kv_store(aah_backend *b, const aah_kv_pool *pool, const float *k, const float *v,
                          const aah_attn_seq *seqs, int32_t n_seqs, int32_t n_kv)
{
	cuda_kv_store_run(ctx_of(b), pool, k, v, seqs, n_seqs, n_kv);
}

/* ---- recorded steps (cuda_graph.cu) ---- */

static int cuda_step_begin_op(aah_backend *b, uint64_t key)
{
	return cuda_step_begin(ctx_of(b), key);
}

static int cuda_step_end_op(aah_backend *b)
{
	return cuda_step_end(ctx_of(b));
}

/* ---- life cycle ---- */

static void ctx_free(cuda_ctx *c)
{
	if (c->stream)
		cudaStreamSynchronize(c->stream);
	graphs_free(c);
	if (c->blas)
		cublasDestroy(c->blas);
	cudaFree(c->blas_ws);
	cudaFree(c->d_tab);
	cudaFree(c->d_scratch);
	cudaFree(c->d_pos);
	cudaFree(c->d_freq);
	cudaFree(c->d_work);
	cudaFreeHost(c->h_stage);
	cudaFreeHost(c->h_work);
	cudaFreeHost(c->h_meas);
	free(c->h_pos_last);
	free(c->h_freq_last);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	cudaGetLastError();
	free(c);
}

static void cuda_free(aah_backend *b)
{
	if (!b)
		return;
	if (b->context) {
		ctx_of(b);
		ctx_free((cuda_ctx *)b->context);
	}
	free(b);
}

static const aah_backend_iface cuda_iface = {
	/* .name = */ "cuda",
	/* .free = */ cuda_free,
	/* .buf_alloc = */ cuda_buf_alloc,
	/* .buf_free = */ cuda_buf_free,
	/* .buf_write = */ cuda_buf_write,
	/* .buf_read = */ cuda_buf_read,
	/* .buf_copy = */ cuda_buf_copy,
	/* .weight_import = */ cuda_weight_import,
	/* .weight_release = */ cuda_weight_release,
	/* .get_rows = */ cuda_get_rows,
	/* .rmsnorm = */ cuda_rmsnorm,
	/* .matmul = */ cuda_matmul,
	/* .rope = */ cuda_rope,
	/* .swiglu = */ cuda_swiglu,
	/* .add = */ cuda_add,
	/* .attention = */ cuda_attention,
	/* .kv_store = */ cuda_kv_store,
	/* .synchronize = */ cuda_synchronize,
	/* .last_error = */ cuda_last_error,
	/* .fuse_projections = */ 1,
	/* .split_cols = */ cuda_split_cols,
	/* .logits_top = */ cuda_logits_top,
	/* .step_begin = */ cuda_step_begin_op,
	/* .step_end = */ cuda_step_end_op,
	/* .host_memory = */ 0,
	/* .argmax_rows = */ NULL,   /* the engine reads logits back to the host and picks there */
};

extern "C" int aah_backend_cuda_available(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n > 0;
}

extern "C" aah_backend *aah_backend_cuda_init(const aah_backend_params *p, char *err, size_t err_len)
{
	const int dev = p ? p->device : 0;
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0) {
		snprintf(err, err_len, "no CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		cudaGetLastError();
		return NULL;
	}
	if (dev < 0 || dev >= count) {
		snprintf(err, err_len, "CUDA device %d does not exist (%d found)", dev, count);
		return NULL;
	}
	cudaDeviceProp prop;
	if (cudaSetDevice(dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
		snprintf(err, err_len, "CUDA device %d: %s", dev, cudaGetErrorString(cudaGetLastError()));
		return NULL;
	}
	if (prop.major < 9) {   /* the build holds sm_90a code and compute_90 PTX only */
		snprintf(err, err_len, "CUDA device %d (%s) has compute capability %d.%d; this build targets 9.0 (Hopper)", dev,
		         prop.name, prop.major, prop.minor);
		return NULL;
	}
	aah_backend *b = (aah_backend *)calloc(1, sizeof *b);
	cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
	if (!b || !c) {
		free(b);
		free(c);
		snprintf(err, err_len, "out of memory");
		return NULL;
	}
	c->device = dev;
	c->n_sm = prop.multiProcessorCount;
	c->smem_optin = prop.sharedMemPerBlockOptin;
	const char *mm = getenv("AAH_CUDA_MATMUL");
	c->matmul_f32 = mm && !strcmp(mm, "f32");
	const char *gr = getenv("AAH_CUDA_GRAPHS");
	snprintf(c->desc, sizeof c->desc, "%.120s, %d SMs, %s matmul, decode graphs %s", prop.name,
	         prop.multiProcessorCount, c->matmul_f32 ? "f32" : "bf16 tensor-core", gr && !strcmp(gr, "0") ? "off" : "on");
	quiet_init = true;
	const bool ok =
		CUDA_CHECK(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) &&
		BLAS_CHECK(c, cublasCreate(&c->blas)) && BLAS_CHECK(c, cublasSetStream(c->blas, c->stream)) &&
		CUDA_CHECK(c, cudaMalloc(&c->blas_ws, BLAS_WORKSPACE)) &&
		BLAS_CHECK(c, cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WORKSPACE)) &&
		CUDA_CHECK(c, cudaMalloc((void **)&c->d_work, sizeof *c->d_work)) &&
		CUDA_CHECK(c, cudaMemsetAsync(c->d_work, 0, sizeof *c->d_work, c->stream)) &&
		CUDA_CHECK(c, cudaHostAlloc((void **)&c->h_work, sizeof *c->h_work, cudaHostAllocDefault)) &&
		stage_host(c, (size_t)4 << 20) != NULL && tab_reserve(c, (size_t)1 << 20) != NULL &&
		scratch_reserve(c, (size_t)16 << 20) != NULL && cuda_attention_setup(c) && graphs_init(c) &&
		CUDA_CHECK(c, cudaStreamSynchronize(c->stream));
	quiet_init = false;
	c->stage_used = c->stage_asked = 0;
	c->pos_n = c->freq_n = -1;
	if (!ok) {
		snprintf(err, err_len, "CUDA device %d (%s): %s", dev, prop.name, c->err);
		ctx_free(c);
		free(b);
		return NULL;
	}
	b->iface = cuda_iface;
	b->context = c;
	return b;
}

extern "C" const char *aah_backend_cuda_device(const aah_backend *b)
{
	return ((const cuda_ctx *)b->context)->desc;
}

extern "C" void aah_backend_cuda_graph_stats(const aah_backend *b, aah_cuda_graph_stats *out)
{
	const cuda_ctx *c = (const cuda_ctx *)b->context;
	out->enabled = c->graphs_on;
	out->captured = c->n_captured;
	out->replayed = c->n_replayed;
	out->eager = c->n_eager_steps;
}

extern "C" uint64_t aah_backend_cuda_work_measured(aah_backend *b)
{
	cuda_ctx *c = ctx_of(b);
	ctx_sync(c);
	return *c->h_work;
}

extern "C" double aah_cuda_copy_bandwidth(int32_t device, size_t bytes)
{
	if (!aah_backend_cuda_available() || cudaSetDevice(device) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	void *a = NULL, *d = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	double result = 0;
	if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&d, bytes) == cudaSuccess &&
	    cudaMemset(a, 0x5a, bytes) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
	    cudaEventCreate(&e1) == cudaSuccess) {
		float ms[11];
		int n = 0;
		cudaMemcpy(d, a, bytes, cudaMemcpyDeviceToDevice);   /* warm-up */
		for (int r = 0; r < 11; r++) {
			cudaEventRecord(e0, 0);
			cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, 0);
			cudaEventRecord(e1, 0);
			if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms[n], e0, e1) != cudaSuccess)
				break;
			n++;
		}
		if (n > 0) {
			std::sort(ms, ms + n);
			result = 2.0 * (double)bytes / (ms[n / 2] * 1e-3) / 1e9;   /* median; bytes read + bytes written */
		}
	}
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	cudaFree(a);
	cudaFree(d);
	cudaGetLastError();
	return result;
}
