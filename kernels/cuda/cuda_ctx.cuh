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
	size_t stage_asked;             /* bytes handed out since the last sync point: the arena grows to hold them */

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

	/* Measured attention rows (band mass, entropy) come back through this pinned buffer. */
	float *h_meas;
	size_t meas_cap;                /* floats */

	/* Recorded steps (cuda_graph.cu): between step_begin and step_end the ops put their tables in two arenas that
	 * go up in two copies before the step's graph is launched. The fixed arena (h_fix → d_fix) holds what the
	 * graph's kernels find by address (ids, positions, kv_store entries, each attention call's plan header); a step
	 * of one key fills it the same way every time. Its first bytes are the step's root: the device address of the
	 * packed arena (h_pack → d_pack), where the attention tables of varying size lie, so that it may move. */
	bool graphs_on;                 /* AAH_CUDA_GRAPHS is not 0 */
	int step_mode;                  /* STEP_NONE, STEP_CAPTURE, STEP_REPLAY (cuda_graph.cu) */
	bool step_abort;                /* a buffer was too small: the step launches nothing and runs again eagerly */
	struct cuda_graph *graph_cur;   /* the key's entry in `graph_cache` */
	struct cuda_graph *graph_cache; /* GRAPH_CACHE entries */
	uint64_t graph_clock;           /* for least-recently-used eviction */
	uint8_t *h_fix, *d_fix;
	size_t fix_cap, fix_used;
	uint8_t *h_pack, *d_pack;
	size_t pack_cap, pack_used;
	size_t scratch_need;            /* what an aborted step's ops asked of the scratch buffer */
	const int32_t *step_pos;        /* device positions and frequencies already in the fixed arena this step */
	const float *step_freq;
	size_t step_pos_at, step_freq_at;   /* their host copies' offsets in h_fix */
	int32_t step_pos_n, step_freq_n;
	uint64_t work_at_step;          /* work_expected at step_begin: an aborted step's plans never run */
	cudaEvent_t fix_done;           /* after the last step's uploads: the arenas may be written again */
	uint64_t n_captured, n_replayed, n_eager_steps;

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

/* ---- recorded steps (cuda_graph.cu) ---- */
/* Inside step_begin … step_end: ops take their tables from the step arenas, not the staging arena. */
static inline bool step_active(const cuda_ctx *c)
{
	return c->step_mode != 0;
}
/* Whether an op issues its launches now: always outside a step, while capturing unless the step was aborted, never
 * in a replay (the graph holds them). */
bool step_launches(const cuda_ctx *c);
/* `bytes` (16-aligned) of the fixed arena: the host piece to fill, its device twin in *dev. NULL when the arena is
 * too small: the step is aborted and the need recorded for the next one. */
void *step_fixed(cuda_ctx *c, size_t bytes, void **dev);
/* The same in the packed arena; *off is its offset from the root's address. */
void *step_packed(cuda_ctx *c, size_t bytes, size_t *off);
/* The device address of the step root (the pointer to the packed arena). */
const uint8_t *const *step_root(const cuda_ctx *c);
/* Destroys every recorded graph (a buffer they name moved). */
void graphs_drop(cuda_ctx *c);
/* Init and free of the step state; graphs on unless AAH_CUDA_GRAPHS=0. */
bool graphs_init(cuda_ctx *c);
void graphs_free(cuda_ctx *c);
/* The two optional backend.h members. */
int cuda_step_begin(cuda_ctx *c, uint64_t key);
int cuda_step_end(cuda_ctx *c);

static inline size_t align_up(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

#endif
