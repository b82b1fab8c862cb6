/* kernels/cuda/cuda_ctx.cuh — the CUDA backend's state and the helpers its .cu files share: checked calls, the
 * pinned staging arena for host tables, and the device scratch and table buffers. Internal to kernels/cuda/. */
#ifndef AAH_CUDA_CTX_CUH
#define AAH_CUDA_CTX_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* Lifetimes: the handles and the staging, scratch and table buffers live as long as the backend; scratch and
 * tables grow (never shrink) when a call needs more, so a steady stream of decode steps allocates nothing. */
typedef struct cuda_ctx {
	int device;
	cudaStream_t stream;            /* every op runs on this one stream, in order */
	cublasHandle_t blas;
	void *blas_ws;                  /* cuBLAS workspace, set once so that cuBLAS allocates nothing per call */
	int n_sm;
	size_t smem_optin;              /* the most dynamic shared memory a block may ask for */
	bool matmul_f32;                /* AAH_CUDA_MATMUL=f32: exact f32 products (the reference tests) */
	char desc[192];

	/* Host tables (ids, positions, page lists) go up through pinned memory: stage_host hands out pieces of
	 * h_stage; a piece may be reused only after the stream has drained (every sync point resets stage_used). */
	uint8_t *h_stage;
	size_t stage_cap, stage_used;

	/* Device twins of the tables an op uploads; overwritten by the next op's copy, which the stream orders after
	 * the kernels that read them. */
	uint8_t *d_tab;
	size_t tab_cap;

	/* Device scratch for one op at a time (bf16 activations, widened weights, attention partials). */
	uint8_t *d_scratch;
	size_t scratch_cap;

	/* RoPE positions and frequencies: the engine passes the same host arrays to the q and k calls of every
	 * layer, so they are uploaded once per step and compared on the host afterwards. */
	int32_t *d_pos;
	float *d_freq;
	int32_t *h_pos_last;            /* host copies of what d_pos / d_freq hold */
	float *h_freq_last;
	int32_t pos_cap, pos_n, freq_cap, freq_n;

	/* The attention work counter: kernels add what they computed into d_work; the op returns the count its plan
	 * prescribes (work_expected accumulates it) and every sync point checks that the two agree. */
	unsigned long long *d_work;
	uint64_t *h_work;               /* pinned, one value */
	uint64_t work_expected;

	/* Probe output (band mass) comes back through this pinned buffer. */
	float *h_band;
	size_t band_cap;                /* floats */

	bool failed;
	char err[512];
} cuda_ctx;

/* Records the first failure (file, line, the call and the runtime's message) and prints it once on stderr; the
 * request path never exits. Returns true when the call succeeded. */
bool cuda_check_impl(cuda_ctx *c, cudaError_t e, const char *what, const char *file, int line);
bool blas_check_impl(cuda_ctx *c, cublasStatus_t s, const char *what, const char *file, int line);
void cuda_fail(cuda_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define CUDA_CHECK(c, call) cuda_check_impl((c), (call), #call, __FILE__, __LINE__)
#define BLAS_CHECK(c, call) blas_check_impl((c), (call), #call, __FILE__, __LINE__)
/* After every launch: the launch's own error (bad configuration, too much shared memory). */
#define LAUNCH_CHECK(c, what) cuda_check_impl((c), cudaGetLastError(), (what), __FILE__, __LINE__)

/* A pinned host piece of `bytes` (256-aligned) for a table that is about to be copied up; NULL after a failure.
 * When the arena is full it waits for the stream and starts over, growing it when one piece needs more. */
void *stage_host(cuda_ctx *c, size_t bytes);
/* The device table buffer, at least `bytes`; NULL after a failure. */
void *tab_reserve(cuda_ctx *c, size_t bytes);
/* The device scratch buffer, at least `bytes`; NULL after a failure. */
void *scratch_reserve(cuda_ctx *c, size_t bytes);
/* Waits for the stream, checks the work counter, and frees the staging arena for reuse. */
void ctx_sync(cuda_ctx *c);

static inline size_t align_up(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

#endif
