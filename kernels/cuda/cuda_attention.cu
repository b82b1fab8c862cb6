/* kernels/cuda/cuda_attention.cu — windowed GQA attention over the paged KV pool (flash-decoding style) with its
 * measurements (band mass, entropy), and the store of new rows into the pages; the device twin of cpu_attention /
 * cpu_kv_store.
 *
 * The host plans each call. A *work item* is one block: a tile of up to bq query rows of one sequence × up to gb
 * query heads of one KV head (the heads that share its keys, so each key is read once for all of them) × a range
 * of keys. Its keys are the union of its rows' windows [p − W + 1, p], walked in tiles of BK = 32 positions
 * (two pages) aligned to pages: tiles wholly outside every row's window are never visited, and a key outside one
 * row's window is masked for that row only. Keys older than the call come from the pages through a compact page
 * list (the ring slots that cover the window, in position order); the call's own keys come from the k, v matrices,
 * rounded to the pool's type as the CPU does, so chunking never changes a result. Softmax is online (running max
 * and sum per row). When there are fewer items than about four per multiprocessor (decode at small batch), the key
 * range of each item is split into pieces whose partial (max, sum, Σp·v) a combine kernel merges (flash-decoding).
 *
 * Work: every block counts the in-window products it computed and adds them to a device counter; the host's plan
 * prescribes the same count, which the op returns at once, and every sync point compares the two (cuda_ctx.cuh).
 * Measurements (backend.h: a probe's or calibration's band mass and entropy): carried in the online-softmax state of
 * each row beside its sum, Σ e^(s−m) per distance band and E = Σ e^(s−m)·(s − m), rescaled with the running max (and
 * merged by the combine like the sums); at the end each row's bands / l and entropy ln l − E / l go to a per-row
 * table that comes back with a wait and is summed on the host in row order (measured calls only). */
#include <algorithm>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_attention.cuh"
#include "kernels/cuda/cuda_convert.cuh"

#define BK 32          /* keys per tile: one per lane of a warp */
#define ATT_NT 256     /* threads per attention block */
#define R_TARGET 64    /* query-head rows per prefill block */
#define BQ_MAX 16      /* query rows per prefill block */
#define PAGE AAH_PAGE_LEN

typedef struct att_span {
	int32_t row0, n_new, pos0;
	int32_t meas;        /* index into meas, or -1: not measured */
} att_span;

typedef struct att_head {          /* per (span, KV head) */
	int32_t window;
	int32_t first_page;            /* position / PAGE of the first cached page listed */
	int32_t list_off;              /* its page id in pages[list_off] */
	int32_t pad;
} att_head;

typedef struct att_item {
	int32_t span, kvh;
	int32_t q_lo, q_n;             /* query rows [q_lo, q_lo + q_n) of the span */
	int32_t g0, gn;                /* query heads kvh·group + [g0, g0 + gn) */
	int32_t k_lo, k_hi;            /* key positions [k_lo, k_hi) */
	int32_t part;                  /* partial slot, or -1: this item writes the output itself */
	int32_t pad;
} att_item;

typedef struct att_comb {          /* merges the n_split partials part0 … of one tile */
	int32_t span, kvh, q_lo, q_n, g0, gn, part0, n_split;
} att_comb;

typedef struct att_meas {          /* a measured span: its band edges */
	int32_t edges_off, n_bands;
} att_meas;

/* Where one call's tables lie and how many blocks of each kernel have work, read by every block: a recorded step's
 * launches (cuda_graph.cu) have grids sized by a bound of their key, and take the plan of each replay from here. */
typedef struct att_plan {
	const uint8_t *const *base;    /* where the tables' address lies: the step root, or `own` for an eager call */
	const uint8_t *own;
	int64_t spans, heads, pages, items, combs, meas, edges;   /* byte offsets from *base */
	int32_t n_items, n_comb;
} att_plan;

typedef struct att_tabs {
	const att_span *spans;
	const att_head *heads;         /* (spans, n_kv) */
	const int32_t *pages;
	const att_item *items;
	const att_comb *combs;
	const att_meas *meas;
	const int32_t *edges;
} att_tabs;

typedef struct att_args {
	float *out;
	const float *q, *k, *v;
	const void *pool;
	float *part;                   /* (slots, part_stride): max[rmax], sum[rmax], acc[rmax][hd], E[rmax],
	                                * bands[rmax][nbm] */
	float *meas;                   /* (rows, n_heads, nbm + 1) measured rows: band masses, then the entropy */
	unsigned long long *work;
	const att_plan *plan;
	int32_t n_heads, n_kv, hd, group, rmax;
	int32_t nbm;                   /* the most bands of a measured span of the call; 0: nothing measured */
	float scale;
} att_args;

/* Shared memory of an attention block of r rows (floats): Q and the accumulators (r × hd each), one K or V tile
 * (BK rows padded to hd + 1, so that lanes reading different keys hit different banks), the tile's
 * probabilities (r × BK), three per-row values (max, sum, the rescale of this tile) and, when the call measures,
 * E and nbm band sums per row. */
static size_t att_smem(int32_t r, int32_t hd, int32_t nbm)
{
	return ((size_t)2 * r * hd + (size_t)BK * (hd + 1) + (size_t)r * BK + 3 * (size_t)r +
	        (nbm > 0 ? (size_t)r * (nbm + 1) : 0)) * sizeof(float);
}

/* Floats of one partial slot. */
__host__ __device__ __forceinline__ size_t part_stride(int32_t rmax, int32_t hd, int32_t nbm)
{
	return (size_t)rmax * (hd + 2) + (nbm > 0 ? (size_t)rmax * (nbm + 1) : 0);
}

__device__ __forceinline__ att_tabs plan_tabs(const att_plan *p)
{
	const uint8_t *b = *p->base;
	return att_tabs{ (const att_span *)(b + p->spans), (const att_head *)(b + p->heads),
	                 (const int32_t *)(b + p->pages),  (const att_item *)(b + p->items),
	                 (const att_comb *)(b + p->combs), (const att_meas *)(b + p->meas),
	                 (const int32_t *)(b + p->edges) };
}

__device__ __forceinline__ int32_t warp_min_i(int32_t v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

__device__ __forceinline__ int32_t warp_max_i(int32_t v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Four elements d … d+3 of the key (which = 0) or value (1) of KV head kvh at position t. */
template <typename KT>
__device__ __forceinline__ float4 kv_load4(const att_args &a, const int32_t *pages, const att_span &s,
                                           const att_head &hh, int32_t kvh, int32_t t, int32_t d, int which)
{
	if (t < s.pos0) {
		const int32_t page = pages[hh.list_off + t / PAGE - hh.first_page];
		const size_t off = (((size_t)page * 2 + (size_t)which) * PAGE + (size_t)(t % PAGE)) * (size_t)a.hd + (size_t)d;
		return load4(reinterpret_cast<const KT *>(a.pool) + off);
	}
	const float *m = which ? a.v : a.k;
	const float4 x = load4(m + ((size_t)(s.row0 + t - s.pos0) * a.n_kv + (size_t)kvh) * a.hd + (size_t)d);
	return round_to4<KT>(x);   /* as the pool will hold it */
}

/* tile[j][d] (row stride hd + 1) = key or value at position t0 + j, zero outside [k_lo, k_hi). */
template <typename KT>
__device__ __forceinline__ void load_tile(float *tile, const att_args &a, const int32_t *pages, const att_span &s,
                                          const att_head &hh, int32_t kvh, int32_t t0, int32_t k_lo, int32_t k_hi,
                                          int which)
{
	const int32_t hd = a.hd, hd4 = hd / 4;
	for (int32_t idx = threadIdx.x; idx < BK * hd4; idx += blockDim.x) {
		const int32_t j = idx / hd4, d = (idx - j * hd4) * 4, t = t0 + j;
		float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
		if (t >= k_lo && t < k_hi)
			x = kv_load4<KT>(a, pages, s, hh, kvh, t, d, which);
		float *r = tile + j * (hd + 1) + d;
		r[0] = x.x;
		r[1] = x.y;
		r[2] = x.z;
		r[3] = x.w;
	}
}

template <typename KT>
__global__ void __launch_bounds__(ATT_NT) att_kernel(att_args a)
{
	extern __shared__ float sm[];
	if ((int32_t)blockIdx.x >= a.plan->n_items)
		return;   /* a recorded launch's grid is a bound: this call has fewer items */
	const att_tabs tb = plan_tabs(a.plan);
	const att_item it = tb.items[blockIdx.x];
	const att_span s = tb.spans[it.span];
	const att_head hh = tb.heads[it.span * a.n_kv + it.kvh];
	const int32_t hd = a.hd, R = it.q_n * it.gn, ld = hd + 1;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
	float *Qs = sm;                        /* [R][hd] scaled queries */
	float *Acc = Qs + a.rmax * hd;         /* [R][hd] Σ p·v */
	float *T = Acc + a.rmax * hd;          /* [BK][hd + 1] the K tile, then the V tile */
	float *P = T + BK * ld;                /* [R][BK] probabilities of the tile */
	float *Mx = P + a.rmax * BK;           /* [R] running max */
	float *Ls = Mx + a.rmax;               /* [R] running sum */
	float *Cr = Ls + a.rmax;               /* [R] rescale of the accumulators for this tile */
	float *Es = Cr + a.rmax;               /* [R] measured: E = Σ e^(s−m)·(s − m) */
	float *Bm = Es + a.rmax;               /* [R][nbm] measured: Σ e^(s−m) per distance band */
	const int32_t nbm = a.nbm;
	const att_meas ms = s.meas >= 0 ? tb.meas[s.meas] : att_meas{ 0, 0 };
	const int32_t nb = ms.n_bands;         /* 0: this span is not measured */
	const int32_t *edges = tb.edges + ms.edges_off;

	/* row r of the block: query row q_lo + r / gn of the span, query head kvh·group + g0 + r % gn */
	for (int32_t idx = threadIdx.x; idx < R * hd; idx += blockDim.x) {
		const int32_t r = idx / hd, d = idx - r * hd;
		const int32_t row = s.row0 + it.q_lo + r / it.gn, h = it.kvh * a.group + it.g0 + r % it.gn;
		Qs[idx] = a.q[((size_t)row * a.n_heads + h) * hd + d] * a.scale;
		Acc[idx] = 0.f;
	}
	for (int32_t r = threadIdx.x; r < R; r += blockDim.x) {
		Mx[r] = -INFINITY;
		Ls[r] = 0.f;
		if (nb > 0) {
			Es[r] = 0.f;
			for (int32_t b = 0; b < nb; b++)
				Bm[r * nbm + b] = 0.f;
		}
	}
	__syncthreads();

	unsigned long long my_work = 0;   /* in-window products this thread computed */
	for (int32_t t0 = it.k_lo / PAGE * PAGE; t0 < it.k_hi; t0 += BK) {
		load_tile<KT>(T, a, tb.pages, s, hh, it.kvh, t0, it.k_lo, it.k_hi, 0);
		__syncthreads();
		/* scores and the online softmax: warp w owns rows w, w + n_warps, …; lane j scores key t0 + j */
		for (int32_t r = warp; r < R; r += n_warps) {
			const int32_t pos = s.pos0 + it.q_lo + r / it.gn;
			const int32_t first = max(0, pos - hh.window + 1);
			const int32_t t = t0 + lane;
			const bool valid = t >= first && t <= pos && t >= it.k_lo && t < it.k_hi;
			float sc = -INFINITY;
			if (valid) {
				const float *qr = Qs + r * hd, *kr = T + lane * ld;
				float acc = 0.f;
				for (int32_t d = 0; d < hd; d++)
					acc += qr[d] * kr[d];
				sc = acc;
				my_work++;
			}
			const float m_old = Mx[r];
			const float m_new = fmaxf(m_old, warp_max(sc));
			const float p = valid ? expf(sc - m_new) : 0.f;
			const float corr = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
			const float psum = warp_sum(p);
			P[r * BK + lane] = p;
			if (nb > 0) {
				/* E ← corr·(E + (m_old − m_new)·l_old) + Σ p·(s − m_new); each band ← corr·band + Σ of its p */
				const float esum = warp_sum(valid ? p * (sc - m_new) : 0.f);
				int32_t b = 0;
				while (b < nb - 1 && pos - t >= edges[b])
					b++;
				const int32_t b_lo = warp_min_i(valid ? b : nb), b_hi = warp_max_i(valid ? b : -1);
				for (int32_t bb = lane; bb < nb; bb += 32)
					Bm[r * nbm + bb] *= corr;
				__syncwarp();
				for (int32_t bb = b_lo; bb <= b_hi; bb++) {
					const float bs = warp_sum(valid && b == bb ? p : 0.f);
					if (lane == 0)
						Bm[r * nbm + bb] += bs;
				}
				if (lane == 0) {
					const float l_old = Ls[r];
					Es[r] = (l_old > 0.f ? corr * (Es[r] + (m_old - m_new) * l_old) : 0.f) + esum;
				}
				__syncwarp();   /* lane 0 reads Ls[r] above before it writes it below */
			}
			if (lane == 0) {
				Mx[r] = m_new;
				Ls[r] = Ls[r] * corr + psum;
				Cr[r] = corr;
			}
		}
		__syncthreads();
		load_tile<KT>(T, a, tb.pages, s, hh, it.kvh, t0, it.k_lo, it.k_hi, 1);
		__syncthreads();
		for (int32_t idx = threadIdx.x; idx < R * hd; idx += blockDim.x) {
			const int32_t r = idx / hd, d = idx - r * hd;
			const float *pr = P + r * BK;
			float acc = Acc[idx] * Cr[r];
#pragma unroll 8
			for (int32_t j = 0; j < BK; j++)
				acc += pr[j] * T[j * ld + d];
			Acc[idx] = acc;
		}
		__syncthreads();
	}

	/* the work counter: a warp sum, one atomic per warp */
	my_work = warp_sum(my_work);
	if (lane == 0 && my_work > 0)
		atomicAdd(a.work, my_work);
	if (it.part < 0) {
		for (int32_t idx = threadIdx.x; idx < R * hd; idx += blockDim.x) {
			const int32_t r = idx / hd, d = idx - r * hd;
			const int32_t row = s.row0 + it.q_lo + r / it.gn, h = it.kvh * a.group + it.g0 + r % it.gn;
			const float l = Ls[r];
			a.out[((size_t)row * a.n_heads + h) * hd + d] = l > 0.f ? Acc[idx] / l : 0.f;
		}
		for (int32_t r = threadIdx.x; r < R && nb > 0; r += blockDim.x) {
			const int32_t row = s.row0 + it.q_lo + r / it.gn, h = it.kvh * a.group + it.g0 + r % it.gn;
			const float l = Ls[r];
			float *m = a.meas + ((size_t)row * a.n_heads + h) * (nbm + 1);
			for (int32_t b = 0; b < nb; b++)
				m[b] = l > 0.f ? Bm[r * nbm + b] / l : 0.f;
			m[nbm] = l > 0.f ? logf(l) - Es[r] / l : 0.f;
		}
	} else {
		float *pb = a.part + (size_t)it.part * part_stride(a.rmax, hd, nbm);
		for (int32_t r = threadIdx.x; r < R; r += blockDim.x) {
			pb[r] = Mx[r];
			pb[a.rmax + r] = Ls[r];
			if (nb > 0) {
				float *pm = pb + (size_t)a.rmax * (hd + 2);
				pm[r] = Es[r];
				for (int32_t b = 0; b < nb; b++)
					pm[a.rmax + r * nbm + b] = Bm[r * nbm + b];
			}
		}
		for (int32_t idx = threadIdx.x; idx < R * hd; idx += blockDim.x)
			pb[2 * a.rmax + idx] = Acc[idx];
	}
}

/* Merges the pieces of one split tile: out = Σ_s acc_s·e^(m_s − M) / Σ_s l_s·e^(m_s − M), M = max_s m_s. */
__global__ void __launch_bounds__(ATT_NT) att_combine_kernel(att_args a)
{
	if ((int32_t)blockIdx.x >= a.plan->n_comb)
		return;
	const att_tabs tb = plan_tabs(a.plan);
	const att_comb cb = tb.combs[blockIdx.x];
	const att_span s = tb.spans[cb.span];
	const int32_t hd = a.hd, R = cb.q_n * cb.gn, nbm = a.nbm;
	const int32_t nb = s.meas >= 0 ? tb.meas[s.meas].n_bands : 0;
	const size_t stride = part_stride(a.rmax, hd, nbm);
	for (int32_t idx = threadIdx.x; idx < R * hd; idx += blockDim.x) {
		const int32_t r = idx / hd, d = idx - r * hd;
		const float *p0 = a.part + (size_t)cb.part0 * stride;
		float M = -INFINITY;
		for (int32_t sp = 0; sp < cb.n_split; sp++)
			M = fmaxf(M, p0[sp * stride + r]);
		float L = 0.f, A = 0.f;
		for (int32_t sp = 0; sp < cb.n_split; sp++) {
			const float *pb = p0 + sp * stride;
			const float m = pb[r];
			if (m == -INFINITY)
				continue;   /* a piece with none of this row's keys */
			const float w = expf(m - M);
			L += pb[a.rmax + r] * w;
			A += pb[2 * a.rmax + idx] * w;
		}
		const int32_t row = s.row0 + cb.q_lo + r / cb.gn, h = cb.kvh * a.group + cb.g0 + r % cb.gn;
		a.out[((size_t)row * a.n_heads + h) * hd + d] = L > 0.f ? A / L : 0.f;
		if (d == 0 && nb > 0) {   /* E = Σ_s w_s·(E_s + (m_s − M)·l_s); bands Σ_s w_s·band_s */
			float E = 0.f;
			float *m = a.meas + ((size_t)row * a.n_heads + h) * (nbm + 1);
			for (int32_t b = 0; b < nb; b++)
				m[b] = 0.f;
			for (int32_t sp = 0; sp < cb.n_split; sp++) {
				const float *pb = p0 + sp * stride, *pm = pb + (size_t)a.rmax * (hd + 2);
				const float ms = pb[r];
				if (ms == -INFINITY)
					continue;
				const float w = expf(ms - M);
				E += w * (pm[r] + (ms - M) * pb[a.rmax + r]);
				for (int32_t b = 0; b < nb; b++)
					m[b] += w * pm[a.rmax + r * nbm + b];
			}
			for (int32_t b = 0; b < nb; b++)
				m[b] = L > 0.f ? m[b] / L : 0.f;
			m[nbm] = L > 0.f ? logf(L) - E / L : 0.f;
		}
	}
}

/* ---- kv_store: a warp per (new row, KV head) that the ring keeps ---- */

typedef struct kv_entry {
	int32_t src_row, kvh, page, prow;
} kv_entry;

/* entries (*n_entries) on the device: a recorded launch's grid covers the key's bound, the count is this call's */
template <typename KT>
__global__ void kv_store_kernel(void *pool, const float *__restrict__ k, const float *__restrict__ v,
                                const kv_entry *__restrict__ entries, const int32_t *n_entries, int32_t n_kv,
                                int32_t hd)
{
	const int lane = threadIdx.x & 31;
	const int64_t e = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	if (e >= *n_entries)
		return;
	const kv_entry en = entries[e];
	KT *kd = reinterpret_cast<KT *>(pool) + ((size_t)en.page * 2 * PAGE + (size_t)en.prow) * hd;
	KT *vd = kd + (size_t)PAGE * hd;
	const size_t src = ((size_t)en.src_row * n_kv + (size_t)en.kvh) * hd;
	for (int32_t d = lane; d < hd; d += 32) {
		kd[d] = from_f32<KT>(k[src + d]);
		vd[d] = from_f32<KT>(v[src + d]);
	}
}

/* ---- host side ---- */

bool cuda_attention_setup(cuda_ctx *c)
{
	const int smem = (int)c->smem_optin;
	return CUDA_CHECK(c, cudaFuncSetAttribute(att_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) &&
	       CUDA_CHECK(c, cudaFuncSetAttribute(att_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) &&
	       CUDA_CHECK(c, cudaFuncSetAttribute(att_kernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
	                                          smem));
}

/* Calls f(span, kvh, q_lo, q_n, k_lo, k_hi, tiles) for every (span, KV head, tile of bq query rows): the keys that
 * tile needs are [k_lo, k_hi), walked in `tiles` page-aligned tiles of BK. */
template <typename F>
static void for_each_tile(const aah_attn_seq *seqs, int32_t n_seqs, int32_t n_kv, int32_t bq, F f)
{
	for (int32_t si = 0; si < n_seqs; si++) {
		const aah_attn_seq *s = &seqs[si];
		for (int32_t h = 0; h < n_kv && s->n_new > 0; h++) {
			const int64_t w = s->windows[h];
			for (int32_t q_lo = 0; q_lo < s->n_new; q_lo += bq) {
				const int32_t q_n = std::min(bq, s->n_new - q_lo);
				const int64_t k_lo = std::max<int64_t>(0, (int64_t)s->pos0 + q_lo - w + 1);
				const int64_t k_hi = (int64_t)s->pos0 + q_lo + q_n;
				const int64_t tiles = (k_hi - k_lo / PAGE * PAGE + BK - 1) / BK;
				f(si, h, q_lo, q_n, (int32_t)k_lo, (int32_t)k_hi, tiles);
			}
		}
	}
}

/* Offsets of the tables of one call inside its one upload. */
typedef struct att_layout {
	size_t plan, spans, heads, pages, items, combs, meas, edges, total;
} att_layout;

/* Grids of n_items and n_comb blocks (a recorded step: the key's bounds; the plan says how many work). */
template <typename KT>
static void att_launch(cuda_ctx *c, const att_args &a, int64_t n_items, int64_t n_comb, size_t smem)
{
	LAUNCH((unsigned)n_items, ATT_NT, smem, c->stream, att_kernel<KT>)(a);
	LAUNCH_CHECK(c, "att_kernel");
	if (n_comb > 0) {
		LAUNCH((unsigned)n_comb, ATT_NT, 0, c->stream, att_combine_kernel)(a);
		LAUNCH_CHECK(c, "att_combine_kernel");
	}
}

uint64_t cuda_attention_run(cuda_ctx *c, float *out, const float *q, const float *k, const float *v,
                            const aah_kv_pool *pool, const aah_attn_seq *seqs, int32_t n_seqs, int32_t n_heads,
                            int32_t n_kv, float scale, uint64_t *seq_work)
{
	const int32_t hd = pool->head_dim;
	if (n_seqs <= 0)
		return 0;
	if (n_kv <= 0 || n_heads % n_kv != 0 || hd <= 0 || hd % 4 != 0 || hd > 1024) {
		cuda_fail(c, "attention: %d query heads over %d KV heads with head_dim %d (the CUDA kernels need a whole "
		          "group per KV head and head_dim a multiple of 4, at most 1024)", n_heads, n_kv, hd);
		return 0;
	}
	const int32_t G = n_heads / n_kv;
	/* Measured spans (band mass or entropy): each gets its bands in the kernel's state (one band when only the
	 * entropy is asked for); nbm is the most of them. */
	int32_t nbm = 0;
	int64_t n_meas = 0, n_edges = 0;
	for (int32_t si = 0; si < n_seqs; si++) {
		const aah_attn_seq *s = &seqs[si];
		if (s->n_new <= 0 || (!s->band_mass && !s->entropy))
			continue;
		const int32_t nb = s->band_mass ? s->n_bands : 1;
		if (nb < 1) {
			cuda_fail(c, "attention: a band-mass measurement with %d bands", nb);
			return 0;
		}
		nbm = std::max(nbm, nb);
		n_meas++;
		n_edges += nb;
	}

	/* Block shape: the whole group of query heads when it fits in shared memory, and for prompt chunks up to
	 * BQ_MAX query rows so that each key tile serves about R_TARGET rows. */
	int32_t gb = G;
	while (gb > 1 && att_smem(gb, hd, nbm) > c->smem_optin)
		gb = (gb + 1) / 2;
	bool multi = false;
	for (int32_t si = 0; si < n_seqs; si++)
		multi |= seqs[si].n_new > 1;
	int32_t bq = 1;
	if (multi) {
		bq = std::max(1, std::min(BQ_MAX, R_TARGET / gb));
		while (bq > 1 && att_smem(bq * gb, hd, nbm) > c->smem_optin)
			bq--;
	}
	const int32_t rmax = bq * gb, n_sub = (G + gb - 1) / gb;
	const size_t smem = att_smem(rmax, hd, nbm);
	if (smem > c->smem_optin) {
		cuda_fail(c, "attention: head_dim %d (with %d measured bands) needs %zu bytes of shared memory, the device has "
		          "%zu", hd, nbm, smem, c->smem_optin);
		return 0;
	}

	/* Pass 1: the work each sequence must do (returned), page lists, tiles. */
	int64_t n_pages = 0, n_base = 0, total_tiles = 0;
	int32_t max_row = 0;
	uint64_t total = 0;
	for (int32_t si = 0; si < n_seqs; si++) {
		const aah_attn_seq *s = &seqs[si];
		if (s->n_new <= 0)
			continue;
		max_row = std::max(max_row, s->row0 + s->n_new);
		uint64_t sw = 0;
		for (int32_t h = 0; h < n_kv; h++) {
			const int64_t w = s->windows[h];
			const int64_t f0 = std::max<int64_t>(0, (int64_t)s->pos0 - w + 1);
			if (f0 < s->pos0)
				n_pages += (s->pos0 - 1) / PAGE - f0 / PAGE + 1;
			for (int32_t i = 0; i < s->n_new; i++) {   /* the CPU's count: min(W, p + 1) keys per query head */
				const int64_t p = (int64_t)s->pos0 + i;
				sw += (uint64_t)std::max<int64_t>(0, std::min(w, p + 1)) * (uint64_t)G;
			}
		}
		if (seq_work)
			seq_work[si] += sw;
		total += sw;
	}
	for_each_tile(seqs, n_seqs, n_kv, bq, [&](int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int64_t tiles) {
		n_base += n_sub;
		total_tiles += tiles * n_sub;
	});
	if (n_base == 0)
		return total;

	/* Split keys when there are too few items to fill the device: pieces of `chunk` tiles. */
	const int64_t target = 4 * (int64_t)c->n_sm;
	const int64_t chunk = n_base >= target ? (int64_t)1 << 40   /* no split */
	                                       : std::max<int64_t>(1, (total_tiles + target - 1) / target);
	int64_t n_items = 0, n_part = 0, n_comb = 0;
	for_each_tile(seqs, n_seqs, n_kv, bq, [&](int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int64_t tiles) {
		const int64_t pieces = (tiles + chunk - 1) / chunk;
		n_items += pieces * n_sub;
		if (pieces > 1) {
			n_part += pieces * n_sub;
			n_comb += n_sub;
		}
	});
	/* A recorded step launches grids sized by bounds of its key (whatever the positions): every split makes at most
	 * n_base + target items, since Σ ⌈tiles/chunk⌉ ≤ Σ tiles/chunk + tile groups and chunk ≥ total_tiles/target;
	 * at most n_base of them are combined. Measured calls (which wait for their results) run eagerly. */
	const bool rec = step_active(c);
	if (rec && n_meas > 0) {
		c->step_abort = true;
		return total;
	}
	const int64_t items_grid = rec ? n_base + target : n_items, comb_grid = rec ? n_base : n_comb;
	const int64_t part_slots = rec ? items_grid : n_part;
	if (items_grid > INT32_MAX || n_items > items_grid || n_comb > comb_grid) {
		cuda_fail(c, "attention: %lld blocks (at most %lld) is more than one launch takes", (long long)n_items,
		          (long long)items_grid);
		return 0;
	}

	/* One upload holds the plan and every table (a recorded step: the plan in the fixed arena, the tables packed). */
	att_layout L;
	size_t at = 0;
	L.plan = at; at = align_up(at + sizeof(att_plan), 16);
	L.spans = at; at = align_up(at + (size_t)n_seqs * sizeof(att_span), 16);
	L.heads = at; at = align_up(at + (size_t)n_seqs * n_kv * sizeof(att_head), 16);
	L.pages = at; at = align_up(at + (size_t)n_pages * sizeof(int32_t), 16);
	L.items = at; at = align_up(at + (size_t)n_items * sizeof(att_item), 16);
	L.combs = at; at = align_up(at + (size_t)n_comb * sizeof(att_comb), 16);
	L.meas = at; at = align_up(at + (size_t)n_meas * sizeof(att_meas), 16);
	L.edges = at; at = align_up(at + (size_t)n_edges * sizeof(int32_t), 16);
	L.total = at;
	const size_t part_bytes = align_up((size_t)part_slots * part_stride(rmax, hd, nbm) * sizeof(float), 256);
	const size_t meas_floats = nbm > 0 ? (size_t)max_row * n_heads * (nbm + 1) : 0;
	const size_t scratch_bytes = part_bytes + meas_floats * sizeof(float);
	uint8_t *h = NULL, *scratch = NULL;
	att_plan *plan = NULL;
	const att_plan *plan_dev = NULL;
	size_t tab_off = 0;   /* of the tables from the plan's base */
	if (rec) {
		void *pd = NULL;
		plan = (att_plan *)step_fixed(c, sizeof(att_plan), &pd);
		h = (uint8_t *)step_packed(c, L.total, &tab_off);
		scratch = (uint8_t *)scratch_reserve(c, scratch_bytes);   /* asked for even after a failure: the need */
		if (!plan || !h || !scratch)
			return total;
		plan_dev = (const att_plan *)pd;
		plan->base = step_root(c);
		plan->own = NULL;
	} else {
		h = (uint8_t *)stage_host(c, L.total);
		if (!h)
			return total;
		plan = (att_plan *)(h + L.plan);
	}
	att_span *spans = (att_span *)(h + L.spans);
	att_head *heads = (att_head *)(h + L.heads);
	int32_t *pages = (int32_t *)(h + L.pages);
	att_item *items = (att_item *)(h + L.items);
	att_comb *combs = (att_comb *)(h + L.combs);
	att_meas *meas = (att_meas *)(h + L.meas);
	int32_t *edges = (int32_t *)(h + L.edges);

	int64_t pi = 0, ei = 0, mi = 0;
	for (int32_t si = 0; si < n_seqs; si++) {
		const aah_attn_seq *s = &seqs[si];
		spans[si] = att_span{ s->row0, s->n_new, s->pos0, -1 };
		for (int32_t kh = 0; kh < n_kv; kh++) {
			att_head *hh = &heads[(size_t)si * n_kv + kh];
			*hh = att_head{ 0, 0, 0, 0 };
			if (s->n_new <= 0)
				continue;
			const int64_t w = s->windows[kh];
			const int64_t f0 = std::max<int64_t>(0, (int64_t)s->pos0 - w + 1);
			hh->window = (int32_t)w;
			hh->first_page = (int32_t)(f0 / PAGE);
			hh->list_off = (int32_t)pi;
			if (f0 < s->pos0) {   /* the ring slots of the cached positions the window reaches, oldest first */
				const int32_t *ring = s->rings + (int64_t)kh * s->ring_stride;
				for (int64_t pg = f0 / PAGE; pg <= (s->pos0 - 1) / PAGE; pg++)
					pages[pi++] = ring[pg % s->n_slots[kh]];
			}
		}
		if (s->n_new > 0 && (s->band_mass || s->entropy)) {   /* edges: n_bands − 1 of them (and one unused) */
			const int32_t nb = s->band_mass ? s->n_bands : 1;
			spans[si].meas = (int32_t)mi;
			meas[mi++] = att_meas{ (int32_t)ei, nb };
			for (int32_t b = 0; b < nb; b++)
				edges[ei++] = b < nb - 1 ? s->band_edges[b] : 0;
		}
	}
	int64_t ii = 0, part = 0, ci = 0;
	for_each_tile(seqs, n_seqs, n_kv, bq,
	              [&](int32_t si, int32_t kh, int32_t q_lo, int32_t q_n, int32_t k_lo, int32_t k_hi, int64_t tiles) {
		const int64_t pieces = (tiles + chunk - 1) / chunk;
		const int32_t t_start = k_lo / PAGE * PAGE;
		for (int32_t g0 = 0; g0 < G; g0 += gb) {
			const int32_t gn = std::min(gb, G - g0);
			if (pieces > 1)
				combs[ci++] = att_comb{ si, kh, q_lo, q_n, g0, gn, (int32_t)part, (int32_t)pieces };
			for (int64_t p = 0; p < pieces; p++) {
				const int64_t lo = std::max<int64_t>(k_lo, t_start + p * chunk * BK);
				const int64_t hi = std::min<int64_t>(k_hi, t_start + (p + 1) * chunk * BK);
				items[ii++] = att_item{ si, kh, q_lo, q_n, g0, gn, (int32_t)lo, (int32_t)hi,
				                        pieces > 1 ? (int32_t)(part + p) : -1, 0 };
			}
			if (pieces > 1)
				part += pieces;
		}
	});

	plan->spans = (int64_t)(tab_off + L.spans);
	plan->heads = (int64_t)(tab_off + L.heads);
	plan->pages = (int64_t)(tab_off + L.pages);
	plan->items = (int64_t)(tab_off + L.items);
	plan->combs = (int64_t)(tab_off + L.combs);
	plan->meas = (int64_t)(tab_off + L.meas);
	plan->edges = (int64_t)(tab_off + L.edges);
	plan->n_items = (int32_t)n_items;
	plan->n_comb = (int32_t)n_comb;
	if (!rec) {
		uint8_t *d = (uint8_t *)tab_reserve(c, L.total);
		scratch = (uint8_t *)scratch_reserve(c, scratch_bytes);
		if (!d || !scratch)
			return total;
		plan->own = d;
		plan->base = (const uint8_t *const *)(d + L.plan + offsetof(att_plan, own));
		plan_dev = (const att_plan *)(d + L.plan);
		if (!CUDA_CHECK(c, cudaMemcpyAsync(d, h, L.total, cudaMemcpyHostToDevice, c->stream)))
			return total;
	}
	c->work_expected += total;
	if (!step_launches(c))
		return total;   /* a replay: the graph launches the kernels, on this plan */

	att_args a;
	a.out = out;
	a.q = q;
	a.k = k;
	a.v = v;
	a.pool = pool->data;
	a.part = (float *)scratch;
	a.meas = (float *)(scratch + part_bytes);
	a.work = c->d_work;
	a.plan = plan_dev;
	a.n_heads = n_heads;
	a.n_kv = n_kv;
	a.hd = hd;
	a.group = G;
	a.rmax = rmax;
	a.nbm = nbm;
	a.scale = scale;
	switch (pool->type) {
	case AAH_DTYPE_F32: att_launch<float>(c, a, items_grid, comb_grid, smem); break;
	case AAH_DTYPE_F16: att_launch<__half>(c, a, items_grid, comb_grid, smem); break;
	case AAH_DTYPE_BF16: att_launch<__nv_bfloat16>(c, a, items_grid, comb_grid, smem); break;
	default: cuda_fail(c, "attention: unknown KV element type %d", (int)pool->type); return total;
	}

	/* The measured rows go back to the host now (the one wait of a measured call) and are summed there, row by row in
	 * order, so that a measurement never depends on how the device scheduled its blocks. */
	if (n_meas > 0) {
		if (meas_floats > c->meas_cap) {
			cudaFreeHost(c->h_meas);
			c->h_meas = NULL;
			c->meas_cap = 0;
			if (!CUDA_CHECK(c, cudaHostAlloc((void **)&c->h_meas, meas_floats * sizeof(float), cudaHostAllocDefault)))
				return total;
			c->meas_cap = meas_floats;
		}
		if (!CUDA_CHECK(c, cudaMemcpyAsync(c->h_meas, a.meas, meas_floats * sizeof(float), cudaMemcpyDeviceToHost,
		                                   c->stream)))
			return total;
		ctx_sync(c);   /* may move the staging arena: the tables above are not read after it */
		if (c->failed)
			return total;
		for (int32_t si = 0; si < n_seqs; si++) {
			const aah_attn_seq *s = &seqs[si];
			if (s->n_new <= 0 || (!s->band_mass && !s->entropy))
				continue;
			for (int32_t i = 0; i < s->n_new; i++)
				for (int32_t hq = 0; hq < n_heads; hq++) {
					const float *m = c->h_meas + ((size_t)(s->row0 + i) * n_heads + hq) * (nbm + 1);
					for (int32_t b = 0; s->band_mass && b < s->n_bands; b++)
						s->band_mass[(int64_t)hq * s->n_bands + b] += m[b];
					if (s->entropy)
						s->entropy[hq] += m[nbm];
				}
		}
	}
	return total;
}

void cuda_kv_store_run(cuda_ctx *c, const aah_kv_pool *pool, const float *k, const float *v, const aah_attn_seq *seqs,
                       int32_t n_seqs, int32_t n_kv)
{
	const int32_t hd = pool->head_dim;
	int64_t n = 0;
	for (int32_t si = 0; si < n_seqs; si++)
		n += seqs[si].n_new > 0 ? (int64_t)seqs[si].n_new * n_kv : 0;
	if (n == 0)
		return;
	/* one table: the count (16 bytes) then up to n entries; a recorded step's lies in the fixed arena and its launch
	 * covers all n (the key's bound), the count saying how many are this step's */
	const size_t bytes = 16 + (size_t)n * sizeof(kv_entry);
	const bool rec = step_active(c);
	void *d = NULL;
	uint8_t *hb = rec ? (uint8_t *)step_fixed(c, bytes, &d) : (uint8_t *)stage_host(c, bytes);
	if (!hb)
		return;
	kv_entry *h = (kv_entry *)(hb + 16);
	int64_t e = 0;
	for (int32_t si = 0; si < n_seqs; si++) {
		const aah_attn_seq *s = &seqs[si];
		if (s->n_new <= 0)
			continue;
		const int64_t last = (int64_t)s->pos0 + s->n_new - 1;
		for (int32_t kh = 0; kh < n_kv; kh++) {
			const int64_t slots = s->n_slots[kh];
			const int64_t keep_from = (last / PAGE - slots + 1) * PAGE;   /* the oldest page the ring keeps */
			const int32_t *ring = s->rings + (int64_t)kh * s->ring_stride;
			for (int32_t i = 0; i < s->n_new; i++) {
				const int64_t pos = (int64_t)s->pos0 + i;
				if (pos < keep_from)
					continue;
				const int32_t page = ring[(pos / PAGE) % slots];
				if (page < 0)
					continue;   /* backend.h: a slot of -1 is not written */
				h[e++] = kv_entry{ s->row0 + i, kh, page, (int32_t)(pos % PAGE) };
			}
		}
	}
	*(int32_t *)hb = (int32_t)e;
	if (!rec) {
		if (e == 0)
			return;
		d = tab_reserve(c, bytes);
		if (!d || !CUDA_CHECK(c, cudaMemcpyAsync(d, hb, 16 + (size_t)e * sizeof(kv_entry), cudaMemcpyHostToDevice,
		                                         c->stream)))
			return;
	}
	if (!step_launches(c))
		return;
	const int64_t blocks = rec ? n : e;
	const unsigned grid = (unsigned)((blocks + ATT_NT / 32 - 1) / (ATT_NT / 32));
	const int32_t *dn = (const int32_t *)d;
	const kv_entry *de = (const kv_entry *)((const uint8_t *)d + 16);
	switch (pool->type) {
	case AAH_DTYPE_F32:
		LAUNCH(grid, ATT_NT, 0, c->stream, kv_store_kernel<float>)(pool->data, k, v, de, dn, n_kv, hd);
		break;
	case AAH_DTYPE_F16:
		LAUNCH(grid, ATT_NT, 0, c->stream, kv_store_kernel<__half>)(pool->data, k, v, de, dn, n_kv, hd);
		break;
	case AAH_DTYPE_BF16:
		LAUNCH(grid, ATT_NT, 0, c->stream, kv_store_kernel<__nv_bfloat16>)(pool->data, k, v, de, dn, n_kv, hd);
		break;
	default: cuda_fail(c, "kv_store: unknown KV element type %d", (int)pool->type); return;
	}
	LAUNCH_CHECK(c, "kv_store_kernel");
}
