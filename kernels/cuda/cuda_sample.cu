/* kernels/cuda/cuda_sample.cu — logits post-processing on the device (backend.h logits_top): per row the maximum, the
 * sampler's softmax denominator, the log-softmax normaliser and the n_top largest logits, so that a step brings back
 * a few hundred numbers per row instead of the whole vocabulary. The twin of cpu_logits_top in kernels/cpu/. */
#include <math.h>
#include <string.h>

#include "kernels/cuda/cuda_convert.cuh"
#include "kernels/cuda/cuda_ctx.cuh"
#include "kernels/cuda/cuda_sample.cuh"

#define TOP_NT 256                 /* threads per row; also the sort's width, so AAH_LOGITS_TOP_MAX ≤ TOP_NT */
#define TOP_WARPS (TOP_NT / 32)
#define RADIX_BITS 4
#define RADIX (1 << RADIX_BITS)

static_assert(AAH_LOGITS_TOP_MAX <= TOP_NT, "the bitonic sort holds one candidate per thread");

/* Shared memory of one block, carved from the dynamic buffer (the emulator has no static __shared__). */
struct top_smem {
	unsigned long long sorted[TOP_NT];             /* candidates packed so that ascending order is the answer's */
	unsigned long long counts[TOP_WARPS][RADIX];   /* per-warp digit counts */
	double red_d[TOP_WARPS][2];
	float red_f[TOP_WARPS];
	int32_t gt[TOP_NT], eq[TOP_NT];                /* per-thread counts, then their exclusive prefix sums */
};

/* An order-preserving unsigned key: larger floats get larger keys, every NaN the smallest (0), -0 the key of +0. */
__device__ __forceinline__ uint32_t logit_key(float x)
{
	uint32_t u = 0;
	if (x != 0.0f)
		memcpy(&u, &x, sizeof u);
	if (x != x)
		return 0;
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Candidates sort ascending by (~key, id): the larger logit first, the lower id first among equals. */
__device__ __forceinline__ unsigned long long pack_candidate(uint32_t key, int32_t id)
{
	return ((unsigned long long)(~key) << 32) | (uint32_t)id;
}

/* One block per row: max, the two sums, a radix select of the n_top-th largest key (RADIX_BITS a pass, most
 * significant first), an ordered gather of everything above it and of the lowest ids equal to it, a bitonic sort. */
__global__ void __launch_bounds__(TOP_NT) logits_top_kernel(aah_logits_stats *stats, int32_t *top_ids,
                                                            float *top_logits, const float *__restrict__ logits,
                                                            int64_t ld, int32_t n, const float *__restrict__ temp,
                                                            int32_t k)
{
	extern __shared__ float sm[];
	top_smem *s = reinterpret_cast<top_smem *>(sm);
	const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
	const int64_t row = blockIdx.x;
	const float *l = logits + row * ld;
	const float t = temp[row] > 0 ? temp[row] : 1.0f;

	/* max: a thread's own maximum is never NaN (only a larger value replaces it), so neither is the block's */
	float m = -INFINITY;
	for (int32_t i = tid; i < n; i += TOP_NT)
		if (l[i] > m)
			m = l[i];
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		const float w = __shfl_xor_sync(0xffffffffu, m, o);
		m = w > m ? w : m;
	}
	if (lane == 0)
		s->red_f[warp] = m;
	__syncthreads();
	m = s->red_f[0];
	for (int w = 1; w < TOP_WARPS; w++)
		m = s->red_f[w] > m ? s->red_f[w] : m;

	/* the sampler's denominator (f32 terms, f64 sum) and the log-softmax sum (all f64), in a tree */
	const double md = m;
	double sum = 0, sum1 = 0;
	for (int32_t i = tid; i < n; i += TOP_NT) {
		sum += expf((l[i] - m) / t);
		sum1 += exp((double)l[i] - md);
	}
	sum = warp_sum(sum);
	sum1 = warp_sum(sum1);
	if (lane == 0) {
		s->red_d[warp][0] = sum;
		s->red_d[warp][1] = sum1;
	}
	__syncthreads();
	if (tid == 0) {
		double a = 0, b = 0;
		for (int w = 0; w < TOP_WARPS; w++) {
			a += s->red_d[w][0];
			b += s->red_d[w][1];
		}
		stats[row].max = m;
		stats[row].sum = a;
		stats[row].lse = md + log(b);
	}

	/* radix select: after the passes, `prefix` is the key of the k-th largest and `want` how many entries equal to it
	 * belong to the answer (the ones with the lowest ids); k − want entries lie strictly above it */
	uint32_t prefix = 0, mask = 0;
	int32_t want = k;
	for (int shift = 32 - RADIX_BITS; shift >= 0; shift -= RADIX_BITS) {
		uint32_t cnt[RADIX];
#pragma unroll
		for (int d = 0; d < RADIX; d++)
			cnt[d] = 0;
		for (int32_t i = tid; i < n; i += TOP_NT) {
			const uint32_t key = logit_key(l[i]);
			if ((key & mask) == prefix) {
				const uint32_t digit = (key >> shift) & (RADIX - 1);
#pragma unroll
				for (int d = 0; d < RADIX; d++)
					cnt[d] += digit == (uint32_t)d;
			}
		}
		__syncthreads();   /* the previous pass's counts have been read by everyone */
#pragma unroll
		for (int d = 0; d < RADIX; d++) {
			const unsigned long long c = warp_sum((unsigned long long)cnt[d]);
			if (lane == 0)
				s->counts[warp][d] = c;
		}
		__syncthreads();
		int d = RADIX - 1;
		for (;; d--) {
			long long c = 0;
			for (int w = 0; w < TOP_WARPS; w++)
				c += (long long)s->counts[w][d];
			if (c >= want || d == 0)
				break;
			want -= (int32_t)c;
		}
		prefix |= (uint32_t)d << shift;
		mask |= (uint32_t)(RADIX - 1) << shift;
	}
	const int32_t above = k - want;

	/* ordered gather: thread t owns the contiguous ids [t·chunk, (t+1)·chunk), so prefix sums over threads keep the
	 * entries equal to the threshold in id order */
	const int32_t chunk = (n + TOP_NT - 1) / TOP_NT;
	const int32_t i0 = tid * chunk < n ? tid * chunk : n, i1 = i0 + chunk < n ? i0 + chunk : n;
	int32_t gt = 0, eq = 0;
	for (int32_t i = i0; i < i1; i++) {
		const uint32_t key = logit_key(l[i]);
		gt += key > prefix;
		eq += key == prefix;
	}
	s->gt[tid] = gt;
	s->eq[tid] = eq;
	s->sorted[tid] = ~0ull;   /* padding sorts last */
	__syncthreads();
	if (tid == 0) {
		int32_t a = 0, b = 0;
		for (int i = 0; i < TOP_NT; i++) {
			const int32_t x = s->gt[i], y = s->eq[i];
			s->gt[i] = a;
			s->eq[i] = b;
			a += x;
			b += y;
		}
	}
	__syncthreads();
	gt = s->gt[tid];
	eq = s->eq[tid];
	for (int32_t i = i0; i < i1; i++) {
		const uint32_t key = logit_key(l[i]);
		if (key > prefix)
			s->sorted[gt++] = pack_candidate(key, i);
		else if (key == prefix && eq < want)
			s->sorted[above + eq++] = pack_candidate(key, i);
	}
	__syncthreads();

	/* bitonic sort, ascending, one entry per thread */
	for (int size = 2; size <= TOP_NT; size <<= 1)
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			const int j = tid ^ stride;
			if (j > tid) {
				const unsigned long long a = s->sorted[tid], b = s->sorted[j];
				const bool up = (tid & size) == 0;
				if (up ? a > b : a < b) {
					s->sorted[tid] = b;
					s->sorted[j] = a;
				}
			}
			__syncthreads();
		}
	if (tid < k) {
		const int32_t id = (int32_t)(uint32_t)(s->sorted[tid] & 0xffffffffu);
		top_ids[row * k + tid] = id;
		top_logits[row * k + tid] = l[id];
	}
}

void cuda_logits_top(aah_backend *b, aah_logits_stats *stats, int32_t *top_ids, float *top_logits,
                     const float *logits, int64_t ld, int32_t n_rows, int32_t n_cols, const float *temperature,
                     int32_t n_top)
{
	cuda_ctx *c = (cuda_ctx *)b->context;
	if (c->device != 0)   /* as ctx_of in cuda_backend.cu: the current device is per thread */
		cudaSetDevice(c->device);
	if (n_rows <= 0)
		return;
	if (n_top < 1 || n_top > AAH_LOGITS_TOP_MAX || n_top > n_cols) {
		cuda_fail(c, "logits_top: %d candidates of %d columns (at most %d)", n_top, n_cols, AAH_LOGITS_TOP_MAX);
		return;
	}
	const size_t t_bytes = (size_t)n_rows * sizeof(float), s_bytes = align_up((size_t)n_rows * sizeof *stats, 256),
	             c_bytes = align_up((size_t)n_rows * (size_t)n_top * sizeof(int32_t), 256);
	float *h_t = (float *)stage_host(c, t_bytes);
	float *d_t = (float *)tab_reserve(c, t_bytes);
	uint8_t *d_out = (uint8_t *)scratch_reserve(c, s_bytes + 2 * c_bytes);
	if (!h_t || !d_t || !d_out)
		return;
	aah_logits_stats *d_stats = (aah_logits_stats *)d_out;
	int32_t *d_ids = (int32_t *)(d_out + s_bytes);
	float *d_vals = (float *)(d_out + s_bytes + c_bytes);
	memcpy(h_t, temperature, t_bytes);
	if (!CUDA_CHECK(c, cudaMemcpyAsync(d_t, h_t, t_bytes, cudaMemcpyHostToDevice, c->stream)))
		return;
	LAUNCH((unsigned)n_rows, TOP_NT, sizeof(top_smem), c->stream, logits_top_kernel)(d_stats, d_ids, d_vals, logits,
	                                                                                 ld, n_cols, d_t, n_top);
	if (!LAUNCH_CHECK(c, "logits_top_kernel"))
		return;
	const size_t n_c = (size_t)n_rows * (size_t)n_top;
	CUDA_CHECK(c, cudaMemcpyAsync(stats, d_stats, (size_t)n_rows * sizeof *stats, cudaMemcpyDeviceToHost, c->stream));
	CUDA_CHECK(c, cudaMemcpyAsync(top_ids, d_ids, n_c * sizeof *top_ids, cudaMemcpyDeviceToHost, c->stream));
	CUDA_CHECK(c, cudaMemcpyAsync(top_logits, d_vals, n_c * sizeof *top_logits, cudaMemcpyDeviceToHost, c->stream));
	ctx_sync(c);
	if (c->failed) {   /* a failed backend never hands out plausible numbers */
		memset(stats, 0xff, (size_t)n_rows * sizeof *stats);
		memset(top_ids, 0xff, n_c * sizeof *top_ids);
		memset(top_logits, 0xff, n_c * sizeof *top_logits);
	}
}
