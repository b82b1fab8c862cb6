/* tests/gpu/fakecuda/fakecuda.cc — the CPU emulation behind fakecuda.h: a fiber per device thread with a real
 * block barrier and warp barrier, host memory as device memory, a plain cublasGemmEx. One OS thread. */
#include "fakecuda.h"

#include <stdio.h>
#include <stdlib.h>

#include <vector>

extern "C" {
#include "kernels/cpu/cpu_kernels.h"
}

float fakecuda_f16_to_f32(uint16_t h) { return cpu_f16_to_f32(h); }
uint16_t fakecuda_f32_to_f16(float f) { return cpu_f32_to_f16(f); }
uint16_t fakecuda_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return 0x7fff;   /* CUDA's NaN */
	return cpu_f32_to_bf16(f);
}

#define MAX_THREADS 1024
#define STACK_BYTES (256 << 10)
#define SMEM_BYTES (227 << 10)

alignas(16) float sm[SMEM_BYTES / sizeof(float)];
dim3 threadIdx, blockIdx, blockDim, gridDim;

/* ---- fibers ---- */

/* Saves the callee-saved registers and the stack pointer in *save, continues on `to` (System V x86-64). */
extern "C" void fakecuda_switch(void **save, void *to);
asm(".text\n"
    ".globl fakecuda_switch\n"
    ".type fakecuda_switch,@function\n"
    "fakecuda_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size fakecuda_switch, .-fakecuda_switch\n");

namespace fakecuda {

enum fiber_state { RUNNABLE, AT_BLOCK, AT_WARP, DONE };

struct fiber {
	void *sp;
	fiber_state state;
	dim3 idx;   /* its threadIdx */
};

static fiber fibers[MAX_THREADS];
static uint8_t *stacks;
static void *main_sp;
int cur;
uint64_t slots[2][MAX_THREADS];
unsigned shuffles[MAX_THREADS];
static void (*g_body)(void *);
static void *g_ctx;
static cudaError_t last_error = cudaSuccess;

static void fiber_entry()
{
	g_body(g_ctx);
	fibers[cur].state = DONE;
	fakecuda_switch(&fibers[cur].sp, main_sp);
	abort();   /* a finished fiber is never resumed */
}

static void wait_as(fiber_state s)
{
	fibers[cur].state = s;
	fakecuda_switch(&fibers[cur].sp, main_sp);
}

void block_barrier() { wait_as(AT_BLOCK); }
void warp_barrier() { wait_as(AT_WARP); }

static void divergence()
{
	fprintf(stderr, "fakecuda: block (%u, %u): threads wait at different barriers (a __syncthreads or a warp shuffle "
	                "that not every thread reaches)\n", blockIdx.x, blockIdx.y);
	abort();
}

/* Runs one block, a warp at a time: its lanes until each waits at the block barrier or ends, releasing the warp
 * barrier whenever all its live lanes wait there; then the block barrier once every live thread waits at it. */
static void run_block(int n)
{
	for (int i = 0; i < n; i++) {
		void **top = (void **)(stacks + (size_t)(i + 1) * STACK_BYTES - 16);   /* 16-aligned: entry as after a call */
		top[0] = (void *)fiber_entry;
		fibers[i].sp = (void *)(top - 6);                                      /* six callee-saved registers */
		memset(top - 6, 0, 6 * sizeof(void *));
		fibers[i].state = RUNNABLE;
		fibers[i].idx = dim3((unsigned)(i % blockDim.x), (unsigned)(i / blockDim.x % blockDim.y),
		                     (unsigned)(i / (blockDim.x * blockDim.y)));
		shuffles[i] = 0;
	}
	for (;;) {
		int alive = 0;
		for (int w = 0; w * 32 < n; w++) {
			const int lo = w * 32, hi = n < lo + 32 ? n : lo + 32;
			for (;;) {
				for (int i = lo; i < hi; i++)
					if (fibers[i].state == RUNNABLE) {
						cur = i;
						threadIdx = fibers[i].idx;
						fakecuda_switch(&main_sp, fibers[i].sp);
					}
				int live = 0, at_warp = 0;
				for (int i = lo; i < hi; i++) {
					live += fibers[i].state != DONE;
					at_warp += fibers[i].state == AT_WARP;
				}
				if (at_warp == 0) {
					alive += live;
					break;
				}
				if (at_warp != live)
					divergence();
				for (int i = lo; i < hi; i++)
					if (fibers[i].state == AT_WARP)
						fibers[i].state = RUNNABLE;
			}
		}
		if (alive == 0)
			return;
		for (int i = 0; i < n; i++)
			if (fibers[i].state == AT_BLOCK)
				fibers[i].state = RUNNABLE;
	}
}

void run_grid(dim3 grid, dim3 block, size_t smem, void (*body)(void *), void *ctx)
{
	const unsigned threads = block.x * block.y * block.z;
	if (threads == 0 || threads > MAX_THREADS || smem > SMEM_BYTES || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
	    grid.y > 65535 || grid.z > 65535) {
		last_error = cudaErrorInvalidConfiguration;
		return;
	}
	if (!stacks) {
		stacks = (uint8_t *)aligned_alloc(4096, (size_t)MAX_THREADS * STACK_BYTES);
		if (!stacks)
			abort();
	}
	g_body = body;
	g_ctx = ctx;
	blockDim = block;
	gridDim = grid;
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++) {
				blockIdx = dim3(x, y, z);
				memset(sm, 0xff, smem);   /* shared memory starts as NaN: a read before a write shows */
				run_block((int)threads);
			}
}

}   // namespace fakecuda

/* ---- stream capture and graphs ---- */

struct fakecuda_graph {
	std::vector<std::function<void()>> ops;
};
struct fakecuda_graph_exec {
	std::vector<std::function<void()>> ops;
};

namespace fakecuda {
static fakecuda_graph *capture;      /* the open capture, or NULL */
static bool capture_invalid;         /* something it cannot hold was asked for */

bool record(std::function<void()> op)
{
	if (!capture)
		return false;
	capture->ops.push_back(std::move(op));
	return true;
}

/* A call that a capture refuses (a wait, an allocation, a synchronous copy): fails and invalidates the capture. */
static bool refused()
{
	if (!capture)
		return false;
	capture_invalid = true;
	return true;
}
}   // namespace fakecuda

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode)
{
	(void)s;
	(void)mode;
	if (fakecuda::capture)
		return cudaErrorStreamCaptureUnsupported;
	fakecuda::capture = new fakecuda_graph;
	fakecuda::capture_invalid = false;
	return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
	(void)s;
	*g = NULL;
	if (!fakecuda::capture)
		return cudaErrorInvalidValue;
	fakecuda_graph *graph = fakecuda::capture;
	fakecuda::capture = NULL;
	if (fakecuda::capture_invalid) {
		delete graph;
		return cudaErrorStreamCaptureInvalidated;
	}
	*g = graph;
	return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags)
{
	(void)flags;
	if (!g || fakecuda::refused())
		return cudaErrorInvalidValue;
	*x = new fakecuda_graph_exec{ g->ops };
	return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s)
{
	(void)s;
	if (!x || fakecuda::refused())
		return cudaErrorInvalidValue;
	for (auto &op : x->ops)
		op();
	return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
	delete x;
	return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
	delete g;
	return cudaSuccess;
}

/* ---- the runtime ---- */

cudaError_t cudaGetLastError()
{
	cudaError_t e = fakecuda::last_error;
	fakecuda::last_error = cudaSuccess;
	return e;
}

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorNotReady: return "device not ready";
	case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
	case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
	}
	return "unknown error";
}

cudaError_t cudaGetDeviceCount(int *n)
{
	*n = getenv("FAKECUDA_NO_DEVICE") ? 0 : 1;
	return *n ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
	if (d != 0)
		return cudaErrorInvalidValue;
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "fakecuda (CPU emulation)");
	p->major = 9;
	p->minor = 0;
	const char *sms = getenv("FAKECUDA_SMS");   /* how many blocks the planner aims for: 4 per multiprocessor */
	p->multiProcessorCount = sms && atoi(sms) > 0 ? atoi(sms) : 132;
	p->sharedMemPerBlockOptin = SMEM_BYTES;
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
	if (fakecuda::refused())
		return cudaErrorStreamCaptureUnsupported;
	*p = aligned_alloc(256, (bytes + 255) / 256 * 256);
	if (!*p)
		return cudaErrorMemoryAllocation;
	memset(*p, 0xff, bytes);   /* NaN: a read of memory nothing wrote shows */
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	if (fakecuda::refused())
		return cudaErrorStreamCaptureUnsupported;
	free(p);
	return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
	(void)flags;
	if (fakecuda::refused())
		return cudaErrorStreamCaptureUnsupported;
	*p = aligned_alloc(256, (bytes + 255) / 256 * 256);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
	if (fakecuda::refused())
		return cudaErrorStreamCaptureUnsupported;
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k)
{
	(void)k;
	if (fakecuda::refused())
		return cudaErrorStreamCaptureUnsupported;
	memmove(dst, src, bytes);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k, cudaStream_t s)
{
	(void)s;
	(void)k;
	if (fakecuda::record([dst, src, bytes]() { memmove(dst, src, bytes); }))
		return cudaSuccess;
	memmove(dst, src, bytes);
	return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t bytes)
{
	if (fakecuda::refused())
		return cudaErrorStreamCaptureUnsupported;
	memset(p, v, bytes);
	return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s)
{
	(void)s;
	if (fakecuda::record([p, v, bytes]() { memset(p, v, bytes); }))
		return cudaSuccess;
	memset(p, v, bytes);
	return cudaSuccess;
}

static int stream_token, event_token;
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	(void)flags;
	*s = (cudaStream_t)&stream_token;
	return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { (void)s; return cudaSuccess; }
/* everything ran when it was issued: waits return at once, outside a capture */
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	(void)s;
	return fakecuda::refused() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = (cudaEvent_t)&event_token; return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	(void)flags;
	return cudaEventCreate(e);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e; (void)s; return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t e)
{
	(void)e;
	return fakecuda::refused() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	(void)e;
	return fakecuda::refused() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	(void)a;
	(void)b;
	*ms = 1.0f;
	return cudaSuccess;
}

/* ---- cuBLAS ---- */

static int blas_token;
cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = (cublasHandle_t)&blas_token; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t h) { (void)h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { (void)h; (void)s; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
	(void)h;
	(void)ws;
	(void)bytes;
	return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
	return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : s == CUBLAS_STATUS_INVALID_VALUE
	                                                                   ? "CUBLAS_STATUS_INVALID_VALUE"
	                                                                   : "CUBLAS_STATUS_NOT_SUPPORTED";
}

static float elem(const void *p, cudaDataType t, size_t i, bool tf32)
{
	float f;
	switch (t) {
	case CUDA_R_16F: return cpu_f16_to_f32(((const uint16_t *)p)[i]);
	case CUDA_R_16BF: return cpu_bf16_to_f32(((const uint16_t *)p)[i]);
	default: f = ((const float *)p)[i]; break;
	}
	if (tf32) {   /* the tensor cores' f32 mode keeps 10 mantissa bits */
		uint32_t u;
		memcpy(&u, &f, 4);
		u = (u + 0xfffu + ((u >> 13) & 1)) & ~0x1fffu;
		memcpy(&f, &u, 4);
	}
	return f;
}

/* C (m × n, ld ldc) = α · op(A) · op(B) + β · C, column-major, as cuBLAS defines it. */
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
	(void)h;
	(void)algo;
	if (ct != CUDA_R_32F || at != bt || m < 0 || n < 0 || k < 0 || ldc < m ||
	    lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n))
		return CUBLAS_STATUS_INVALID_VALUE;
	const bool f32_compute = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC;
	if (!(f32_compute || (at == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F_FAST_TF32)))
		return CUBLAS_STATUS_NOT_SUPPORTED;   /* the combinations cuBLAS documents for these types */
	/* captured: the scalars by value (host pointer mode), the matrices by address */
	const float al0 = *(const float *)alpha, be0 = *(const float *)beta;
	if (fakecuda::record([=]() {
		    cublasGemmEx(h, ta, tb, m, n, k, &al0, A, at, lda, B, bt, ldb, &be0, C, ct, ldc, compute, algo);
	    }))
		return CUBLAS_STATUS_SUCCESS;
	const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
	const float al = *(const float *)alpha, be = *(const float *)beta;
	float *c = (float *)C;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			float s = 0;
			for (int l = 0; l < k; l++) {
				size_t ai = ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * lda : (size_t)l + (size_t)i * lda;
				size_t bi = tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * ldb : (size_t)j + (size_t)l * ldb;
				s += elem(A, at, ai, tf32) * elem(B, bt, bi, tf32);
			}
			float *o = &c[(size_t)i + (size_t)j * ldc];
			*o = be == 0.0f ? al * s : al * s + be * *o;
		}
	return CUBLAS_STATUS_SUCCESS;
}
