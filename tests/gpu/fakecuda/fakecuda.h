/* tests/gpu/fakecuda/fakecuda.h — a CPU stand-in for the part of the CUDA runtime, of cuBLAS and of the device
 * intrinsics that kernels/cuda/ uses, so that the CUDA backend's own code (its host-side planning and its kernels,
 * unchanged) runs through the GPU suites on a machine without a GPU: `make test-gpu-emulated`.
 *
 * Device threads are fibers on one OS thread, one block at a time; __syncthreads and every warp shuffle are real
 * barriers (a fiber waits until its block, or its warp, has arrived), so a barrier that only some threads reach
 * stops the run with a message. Device memory is host memory, filled with NaN when allocated. cublasGemmEx is a
 * plain loop (bf16/f16 inputs widened exactly, tf32 rounded, f32 sums). What this cannot show: speed, races
 * between blocks or warps (nothing runs concurrently), the memory model, and the real cuBLAS or compiler.
 * Force-included (-include) before each kernels/cuda/ .cu file compiled as C++ with this folder first on the include
 * path, so its cuda_runtime.h, cublas_v2.h, cuda_fp16.h and cuda_bf16.h stand in for the toolkit's. x86-64 only. */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <tuple>
#include <type_traits>

/* ---- language ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__   /* `extern __shared__ float sm[]` names the one shared buffer below: blocks run one at a time */
extern float sm[];

struct dim3 {
	unsigned x, y, z;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{ x, y, z, w }; }
static inline float2 make_float2(float x, float y) { return float2{ x, y }; }
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
/* round-to-nearest products and differences that the compiler never fuses (the host build contracts nothing) */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }

/* ---- 16-bit types: the CPU backend's own round-to-nearest-even conversions ---- */
struct __half { uint16_t x; };
struct __half2 { __half lo, hi; };
struct __nv_bfloat16 { uint16_t x; };
float fakecuda_f16_to_f32(uint16_t h);
uint16_t fakecuda_f32_to_f16(float f);
uint16_t fakecuda_f32_to_bf16(float f);
static inline float __half2float(__half h) { return fakecuda_f16_to_f32(h.x); }
static inline __half __float2half_rn(float f) { return __half{ fakecuda_f32_to_f16(f) }; }
static inline float2 __half22float2(__half2 h) { return float2{ __half2float(h.lo), __half2float(h.hi) }; }
static inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((uint32_t)b.x << 16); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{ fakecuda_f32_to_bf16(f) }; }

/* ---- threads, barriers, shuffles, atomics ---- */
namespace fakecuda {
extern int cur;                    /* the running device thread, linear in its block */
extern uint64_t slots[2][1024];    /* shuffle slots, two banks used in turn */
extern unsigned shuffles[1024];    /* shuffles each thread has made: its bank */
void block_barrier();
void warp_barrier();
static inline int lane() { return cur % 32; }
}
static inline void __syncthreads() { fakecuda::block_barrier(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)mask; fakecuda::warp_barrier(); }
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask)
{
	static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
	(void)mask;
	/* One barrier per shuffle: a lane writes the next shuffle into the other bank, and cannot write this bank again
	 * before every lane has passed the next barrier, that is, has read this one. */
	const int me = fakecuda::cur, warp0 = me / 32 * 32;
	uint64_t *bank = fakecuda::slots[fakecuda::shuffles[me]++ & 1];
	memcpy(&bank[me], &v, sizeof v);
	fakecuda::warp_barrier();   /* every lane has written */
	T r;
	memcpy(&r, &bank[warp0 + (fakecuda::lane() ^ lane_mask)], sizeof r);
	return r;
}
/* one OS thread: a read-modify-write is atomic */
static inline float atomicAdd(float *p, float v) { float o = *p; *p = o + v; return o; }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
	unsigned long long o = *p;
	*p = o + v;
	return o;
}

/* ---- the runtime ---- */
enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorNoDevice = 100,
	cudaErrorNotReady = 600,
	cudaErrorStreamCaptureUnsupported = 900,
	cudaErrorStreamCaptureInvalidated = 901,
};
typedef enum cudaError cudaError_t;
typedef struct fakecuda_stream *cudaStream_t;
typedef struct fakecuda_event *cudaEvent_t;
enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
#define cudaStreamNonBlocking 0x01
#define cudaHostAllocDefault 0x00
#define cudaEventDisableTiming 0x02
enum cudaStreamCaptureMode {
	cudaStreamCaptureModeGlobal = 0,
	cudaStreamCaptureModeThreadLocal = 1,
	cudaStreamCaptureModeRelaxed = 2,
};
typedef struct fakecuda_graph *cudaGraph_t;
typedef struct fakecuda_graph_exec *cudaGraphExec_t;
struct cudaDeviceProp {
	char name[256];
	int major, minor, multiProcessorCount;
	size_t sharedMemPerBlockOptin;
};

cudaError_t cudaGetLastError();
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k, cudaStream_t s);
cudaError_t cudaMemset(void *p, int v, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int)
{
	return cudaSuccess;
}

/* Stream capture and graphs. Between cudaStreamBeginCapture and cudaStreamEndCapture every launch, cudaMemcpyAsync,
 * cudaMemsetAsync and cublasGemmEx is recorded (a kernel with its arguments by value, a copy with its pointers) instead
 * of run; cudaGraphLaunch runs the records in order, reading memory as it is then, as a real graph does. What a real
 * capture refuses fails here too: a synchronous copy or memset, an allocation or free, a stream or event wait; it
 * returns cudaErrorStreamCaptureUnsupported and invalidates the capture (cudaStreamEndCapture then fails). */
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

/* ---- launches: LAUNCH(grid, block, smem, stream, kernel)(args…) runs every block, one after another ---- */
namespace fakecuda {
void run_grid(dim3 grid, dim3 block, size_t smem, void (*body)(void *), void *ctx);
/* While a capture is open: keeps `op` (run later by cudaGraphLaunch) and returns true; else false. */
bool record(std::function<void()> op);
template <typename... P> struct launcher {
	void (*k)(P...);
	dim3 grid, block;
	size_t smem;
	template <typename... A> void operator()(A &&...a) const
	{
		/* the arguments by value, converted to the kernel's parameter types as a real launch does */
		auto call = [k = k, args = std::tuple<std::decay_t<P>...>(static_cast<P>(a)...)]() mutable {
			std::apply(k, args);
		};
		const dim3 g = grid, b = block;
		const size_t sm_bytes = smem;
		if (record([call, g, b, sm_bytes]() mutable {
			    run_grid(g, b, sm_bytes, [](void *c) { (*static_cast<decltype(call) *>(c))(); }, &call);
		    }))
			return;
		run_grid(grid, block, smem, [](void *c) { (*static_cast<decltype(call) *>(c))(); }, &call);
	}
};
template <typename... P> launcher<P...> launch(dim3 g, dim3 b, size_t smem, void (*k)(P...))
{
	return launcher<P...>{ k, g, b, smem };
}
}
#define LAUNCH(grid, block, smem, stream, ...) fakecuda::launch((grid), (block), (smem), __VA_ARGS__)

/* ---- cuBLAS ---- */
typedef struct fakecuda_blas *cublasHandle_t;
typedef enum {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_INVALID_VALUE = 7,
	CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef enum {
	CUBLAS_COMPUTE_32F = 68,
	CUBLAS_COMPUTE_32F_PEDANTIC = 69,
	CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);

#endif
