/* kernels/cuda/cuda_ops.cu — the row and element-wise kernels of the CUDA backend, each the device twin of a loop
 * in kernels/cpu/cpu_backend.c (same formula, same order of the operations that matter: double sums of squares,
 * θ in double), and the small-batch weight product that decode steps run instead of a GEMM. */
#include "kernels/cuda/cuda_convert.cuh"
#include "kernels/cuda/cuda_ops.cuh"

#define NT 256   /* threads per block */

static unsigned grid_for(int64_t n, int64_t per_block, unsigned cap)
{
	int64_t g = (n + per_block - 1) / per_block;
	return g < 1 ? 1u : g > (int64_t)cap ? cap : (unsigned)g;
}

/* ---- embedding rows ---- */

template <typename T>
__global__ void get_rows_kernel(float *__restrict__ out, const T *__restrict__ table, int64_t cols,
                                const int32_t *__restrict__ ids, int32_t n)
{
	for (int32_t i = blockIdx.y; i < n; i += gridDim.y) {
		const T *row = table + (int64_t)ids[i] * cols;
		float *o = out + (int64_t)i * cols;
		for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x)
			o[c] = to_f32(row[c]);
	}
}

cudaError_t launch_get_rows(cudaStream_t st, float *out, const void *table, aah_dtype t, int64_t cols,
                            const int32_t *ids, int32_t n)
{
	if (n <= 0)
		return cudaSuccess;
	dim3 grid(grid_for(cols, NT, 64), n < 65535 ? (unsigned)n : 65535u);
	switch (t) {
	case AAH_DTYPE_F32: LAUNCH(grid, NT, 0, st, get_rows_kernel<float>)(out, (const float *)table, cols, ids, n); break;
	case AAH_DTYPE_F16: LAUNCH(grid, NT, 0, st, get_rows_kernel<__half>)(out, (const __half *)table, cols, ids, n); break;
	case AAH_DTYPE_BF16:
		LAUNCH(grid, NT, 0, st, get_rows_kernel<__nv_bfloat16>)(out, (const __nv_bfloat16 *)table, cols, ids, n);
		break;
	default: return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

/* ---- RMSNorm: a warp per row ---- */

template <typename T>
__global__ void rmsnorm_kernel(float *out, const float *x, const T *__restrict__ w, int32_t n_rows, int64_t d,
                               float eps)
{
	const int lane = threadIdx.x & 31;
	const int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	if (r >= n_rows)
		return;
	const float *xr = x + r * d;
	float *o = out + r * d;
	double ss = 0;   /* in double, as the CPU sums it: long rows stay exact to float rounding */
	for (int64_t i = lane; i < d; i += 32)
		ss += (double)xr[i] * xr[i];
	ss = warp_sum(ss);
	const float inv = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
	for (int64_t i = lane; i < d; i += 32)   /* each lane rewrites only what it read: out may be x */
		o[i] = xr[i] * inv * to_f32(w[i]);
}

cudaError_t launch_rmsnorm(cudaStream_t st, float *out, const float *x, const void *w, aah_dtype t, int32_t n_rows,
                           int64_t dim, float eps)
{
	if (n_rows <= 0)
		return cudaSuccess;
	unsigned grid = (unsigned)((n_rows + NT / 32 - 1) / (NT / 32));
	switch (t) {
	case AAH_DTYPE_F32: LAUNCH(grid, NT, 0, st, rmsnorm_kernel<float>)(out, x, (const float *)w, n_rows, dim, eps); break;
	case AAH_DTYPE_F16: LAUNCH(grid, NT, 0, st, rmsnorm_kernel<__half>)(out, x, (const __half *)w, n_rows, dim, eps); break;
	case AAH_DTYPE_BF16:
		LAUNCH(grid, NT, 0, st, rmsnorm_kernel<__nv_bfloat16>)(out, x, (const __nv_bfloat16 *)w, n_rows, dim, eps);
		break;
	default: return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

/* ---- RoPE: a thread per (row, frequency), every head of the row ---- */

__global__ void rope_kernel(float *x, int32_t n_rows, int32_t n_heads, int32_t hd, const int32_t *__restrict__ pos,
                            const float *__restrict__ inv_freq)
{
	const int32_t half = hd / 2;
	const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= (int64_t)n_rows * half)
		return;
	const int64_t r = idx / half;
	const int32_t j = (int32_t)(idx - r * half);
	double s, c;
	sincos((double)pos[r] * (double)inv_freq[j], &s, &c);   /* θ in double, then f32, as the CPU does */
	const float cs = (float)c, sn = (float)s;
	for (int32_t h = 0; h < n_heads; h++) {
		float *v = x + (r * n_heads + h) * hd;
		const float a = v[j], b = v[j + half];
		v[j] = a * cs - b * sn;
		v[j + half] = a * sn + b * cs;
	}
}

cudaError_t launch_rope(cudaStream_t st, float *x, int32_t n_rows, int32_t n_heads, int32_t hd, const int32_t *pos,
                        const float *inv_freq)
{
	int64_t n = (int64_t)n_rows * (hd / 2);
	if (n <= 0)
		return cudaSuccess;
	LAUNCH((unsigned)((n + NT - 1) / NT), NT, 0, st, rope_kernel)(x, n_rows, n_heads, hd, pos, inv_freq);
	return cudaGetLastError();
}

/* ---- element-wise ---- */

__global__ void swiglu_kernel(float *out, const float *gate, const float *__restrict__ up, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		const float g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

cudaError_t launch_swiglu(cudaStream_t st, float *out, const float *gate, const float *up, int64_t n)
{
	if (n <= 0)
		return cudaSuccess;
	LAUNCH(grid_for(n, NT, 65535), NT, 0, st, swiglu_kernel)(out, gate, up, n);
	return cudaGetLastError();
}

__global__ void add_kernel(float *x, const float *__restrict__ y, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		x[i] += y[i];
}

cudaError_t launch_add(cudaStream_t st, float *x, const float *y, int64_t n)
{
	if (n <= 0)
		return cudaSuccess;
	LAUNCH(grid_for(n, NT, 65535), NT, 0, st, add_kernel)(x, y, n);
	return cudaGetLastError();
}

/* ---- a fused projection's output split into its parts: a thread per source element, reads coalesced ---- */

struct split_args {
	float *dst[AAH_SPLIT_MAX_PARTS];
	int32_t width[AAH_SPLIT_MAX_PARTS];
	int32_t n_parts;
	int32_t total;   /* Σ width */
};

__global__ void split_cols_kernel(split_args a, const float *__restrict__ src, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = i / a.total;
		int32_t c = (int32_t)(i - r * a.total), w = a.width[0];
		float *d = a.dst[0];
#pragma unroll
		for (int p = 1; p < AAH_SPLIT_MAX_PARTS; p++)   /* constant indices: the arguments stay in registers */
			if (p < a.n_parts && c >= w) {
				c -= w;
				w = a.width[p];
				d = a.dst[p];
			}
		d[r * w + c] = src[i];
	}
}

cudaError_t launch_split_cols(cudaStream_t st, float *const *dst, const int32_t *widths, int32_t n_parts,
                              const float *src, int32_t n_rows)
{
	if (n_parts < 1 || n_parts > AAH_SPLIT_MAX_PARTS)
		return cudaErrorInvalidValue;
	split_args a = {};
	a.n_parts = n_parts;
	for (int32_t p = 0; p < n_parts; p++) {
		a.dst[p] = dst[p];
		a.width[p] = widths[p];
		a.total += widths[p];
	}
	const int64_t n = (int64_t)n_rows * a.total;
	if (n <= 0)
		return cudaSuccess;
	LAUNCH(grid_for(n, NT, 65535), NT, 0, st, split_cols_kernel)(a, src, n);
	return cudaGetLastError();
}

/* ---- gemv: a warp per weight row, all N activation rows at once ----
 * Decode is memory-bound: each weight byte is read once, 16 bytes per lane per load (VEC, K a multiple of 8), the
 * activation rows (a few KB) come from L1/L2. Lane l sums k ≡ l (mod 32) in blocks of 8, then the warp adds up. */
template <typename T, int N, bool VEC>
__global__ void __launch_bounds__(NT) gemv_kernel(float *__restrict__ out, const float *__restrict__ x,
                                                  const T *__restrict__ w, int64_t M, int64_t K)
{
	const int lane = threadIdx.x & 31;
	const int64_t m = (int64_t)blockIdx.x * (NT / 32) + threadIdx.x / 32;
	if (m >= M)
		return;
	const T *wr = w + m * K;
	float acc[N];
#pragma unroll
	for (int i = 0; i < N; i++)
		acc[i] = 0.0f;
	if (VEC) {
#pragma unroll 4
		for (int64_t k = (int64_t)lane * 8; k < K; k += 32 * 8) {
			float wf[8];
			load8(wr + k, wf);
#pragma unroll
			for (int i = 0; i < N; i++) {
				float xf[8];
				load8(x + (int64_t)i * K + k, xf);
				float s = acc[i];
#pragma unroll
				for (int e = 0; e < 8; e++)
					s += wf[e] * xf[e];
				acc[i] = s;
			}
		}
	} else {
		for (int64_t k = lane; k < K; k += 32) {
			const float wv = to_f32(wr[k]);
#pragma unroll
			for (int i = 0; i < N; i++)
				acc[i] += wv * x[(int64_t)i * K + k];
		}
	}
#pragma unroll
	for (int i = 0; i < N; i++) {
		const float s = warp_sum(acc[i]);
		if (lane == 0)
			out[(int64_t)i * M + m] = s;
	}
}

template <typename T, int N>
static void gemv_launch(cudaStream_t st, float *out, const float *x, const void *w, int64_t M, int64_t K)
{
	const unsigned grid = (unsigned)((M + NT / 32 - 1) / (NT / 32));
	const bool aligned = (uintptr_t)x % 16 == 0 && (uintptr_t)w % 16 == 0;   /* buffers are; offsets might not be */
	if (K % 8 == 0 && aligned)
		LAUNCH(grid, NT, 0, st, gemv_kernel<T, N, true>)(out, x, (const T *)w, M, K);
	else
		LAUNCH(grid, NT, 0, st, gemv_kernel<T, N, false>)(out, x, (const T *)w, M, K);
}

template <typename T>
static void gemv_dispatch(cudaStream_t st, float *out, const float *x, int32_t n, const void *w, int64_t M, int64_t K)
{
	with_gemv_rows(n, [&](auto N) { gemv_launch<T, decltype(N)::value>(st, out, x, w, M, K); });
}

cudaError_t launch_gemv(cudaStream_t st, float *out, const float *x, int32_t n, const void *w, aah_dtype t, int64_t M,
                        int64_t K)
{
	if (n <= 0 || M <= 0)
		return cudaSuccess;
	if (n > GEMV_MAX_N || M > (int64_t)65535 * 65535)
		return cudaErrorInvalidValue;
	switch (t) {
	case AAH_DTYPE_F32: gemv_dispatch<float>(st, out, x, n, w, M, K); break;
	case AAH_DTYPE_F16: gemv_dispatch<__half>(st, out, x, n, w, M, K); break;
	case AAH_DTYPE_BF16: gemv_dispatch<__nv_bfloat16>(st, out, x, n, w, M, K); break;
	default: return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

/* ---- conversions ---- */

template <typename T> __global__ void from_f32_kernel(T *__restrict__ dst, const float *__restrict__ src, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		dst[i] = from_f32<T>(src[i]);
}

template <typename T> __global__ void to_f32_kernel(float *__restrict__ dst, const T *__restrict__ src, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		dst[i] = to_f32(src[i]);
}

cudaError_t launch_f32_to_half(cudaStream_t st, void *dst, aah_dtype t, const float *src, int64_t n)
{
	if (n <= 0)
		return cudaSuccess;
	const unsigned grid = grid_for(n, NT, 65535);
	switch (t) {
	case AAH_DTYPE_F16: LAUNCH(grid, NT, 0, st, from_f32_kernel<__half>)((__half *)dst, src, n); break;
	case AAH_DTYPE_BF16: LAUNCH(grid, NT, 0, st, from_f32_kernel<__nv_bfloat16>)((__nv_bfloat16 *)dst, src, n); break;
	default: return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

cudaError_t launch_to_f32(cudaStream_t st, float *dst, const void *src, aah_dtype t, int64_t n)
{
	if (n <= 0)
		return cudaSuccess;
	const unsigned grid = grid_for(n, NT, 65535);
	switch (t) {
	case AAH_DTYPE_F32: return cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, st);
	case AAH_DTYPE_F16: LAUNCH(grid, NT, 0, st, to_f32_kernel<__half>)(dst, (const __half *)src, n); break;
	case AAH_DTYPE_BF16: LAUNCH(grid, NT, 0, st, to_f32_kernel<__nv_bfloat16>)(dst, (const __nv_bfloat16 *)src, n); break;
	default: return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}
