/* kernels/cpu/cpu_attention.c — windowed causal attention over the paged KV pool, in tiles, and the store of new rows
 * into the pages: the CPU backend's attention and kv_store (backend.h), the reference the CUDA backend is tested against.
 *
 * A work unit is a tile of up to R query rows of one sequence with the G query heads of one KV head (R·G rows that share
 * every key load). It walks the keys of the union of its rows' windows in blocks of ATT_BK positions aligned to absolute
 * positions, so blocks wholly outside every row's window are never read: a long prompt costs its in-window products.
 * Per block: the scores S = Q·Kᵀ of every row (the table's qk_tile), then each row's online softmax over its own keys of
 * the block (running max m, sum l, and the accumulators rescaled by e^(m_old − m_new) as P·V is added by pv_tile).
 * Keys and values are read in the pool's type and widened inside the tile kernels; the call's own new rows are first
 * rounded to that type once (a query then sees the keys the pages will hold, so chunking never changes a result).
 *
 * Invariance: a row's result depends only on its query, its position, its window and the key values — never on the
 * rows that share its tile, the chunking of the prompt or which worker ran it: the blocks are aligned to absolute
 * positions, a row's softmax runs over its own keys of each block, and every score and accumulator is computed in a
 * fixed order (cpu_kernels.h). Measurements (band mass, entropy; backend.h) ride in the same state — per row the band
 * sums Σ e^(s−m) and E = Σ e^(s−m)(s − m), rescaled with the max — and each row's result goes to a call-wide table that
 * is summed in row order at the end, so they are deterministic too. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ctx.h"

/* Query-head rows a tile aims for: R = ATT_QROWS / G query rows (at least one), so that each block of keys, fetched once
 * from L3 or memory, serves that many rows (a prompt chunk of 512 rows at 3072 positions, one thread: 32 rows took
 * 266 ms, 64 took 222, 128 took 193, 256 took 190). But a tile reads the union of its rows' windows, W + R − 1 keys
 * for W in-window ones, so R stays ≤ W / 16 (at most 6% more products than the windows hold). */
#define ATT_QROWS 128
#define ATT_R_PER_WINDOW 16
/* Keys per block: eight pages (the chunk above with 64: 197 ms, 128: 178, 256: 177; a decode row at head_dim 32
 * 0.27, 0.25, 0.26 ms): fewer softmax updates per key, the same products. */
#define ATT_BK 128

typedef struct attn_unit {
	int32_t seq, i0, n, kvh;   /* rows [i0, i0 + n) of sequence seq, KV head kvh */
} attn_unit;

typedef struct attn_job {
	float *out;
	const float *q;
	const void *k, *v;          /* the call's new rows (rows, n_kv, hd) in the pool's type */
	const aah_kv_pool *pool;
	const aah_attn_seq *seqs;
	int32_t n_heads, n_kv, hd, group;
	float scale;
	size_t es;                  /* element size of the pool */
	const attn_unit *units;
	int64_t unit_lo[MAX_THREADS + 1];   /* worker i takes units [unit_lo[i], unit_lo[i + 1]) */
	float *meas;                /* (rows, n_heads, nbm + 1) measured rows: band masses, then the entropy; or NULL */
	int32_t nbm;
	cpu_ctx *c;
} attn_job;

/* Keys (which = 0) or values (1) of KV head kvh from position t on, contiguous in memory, up to position `last`: up to
 * the page's end in the cache, or to `last` among the call's new rows. Returns their count; *rows and *stride
 * (elements) say where they lie. */
static int64_t kv_run(const attn_job *j, const aah_attn_seq *s, int32_t kvh, int64_t t, int64_t last, int which,
                      const void **rows, int64_t *stride)
{
	const int32_t hd = j->hd;
	if (t >= s->pos0) {
		const char *m = which ? j->v : j->k;
		*rows = m + ((size_t)(s->row0 + t - s->pos0) * (size_t)j->n_kv + (size_t)kvh) * (size_t)hd * j->es;
		*stride = (int64_t)j->n_kv * hd;
		return last - t + 1;
	}
	int64_t end = (t / AAH_PAGE_LEN + 1) * AAH_PAGE_LEN - 1;   /* the page's last position */
	if (end > s->pos0 - 1)
		end = s->pos0 - 1;
	if (end > last)
		end = last;
	const int32_t page = s->rings[(int64_t)kvh * s->ring_stride + (t / AAH_PAGE_LEN) % s->n_slots[kvh]];
	const size_t off = (((size_t)page * 2 + (size_t)which) * AAH_PAGE_LEN + (size_t)(t % AAH_PAGE_LEN)) * (size_t)hd;
	*rows = (const char *)j->pool->data + off * j->es;
	*stride = hd;
	return end - t + 1;
}

/* Asks for the cached keys and values of positions [t0, t1] of KV head kvh ahead of their use: a ring's pages lie
 * anywhere in the pool, so no hardware prefetcher finds the next one (decode attention at a few thousand positions
 * waited on memory at every page). */
static void kv_prefetch(const attn_job *j, const aah_attn_seq *s, int32_t kvh, int64_t t0, int64_t t1)
{
	if (t1 >= s->pos0)
		t1 = s->pos0 - 1;
	for (int64_t t = t0; t <= t1;) {
		const int64_t end = (t / AAH_PAGE_LEN + 1) * AAH_PAGE_LEN - 1 < t1 ? (t / AAH_PAGE_LEN + 1) * AAH_PAGE_LEN - 1
		                                                                    : t1;
		const int32_t page = s->rings[(int64_t)kvh * s->ring_stride + (t / AAH_PAGE_LEN) % s->n_slots[kvh]];
		const size_t row = (size_t)j->hd * j->es, bytes = (size_t)(end - t + 1) * row;
		for (int which = 0; which < 2; which++) {
			const char *base = (const char *)j->pool->data +
			                   (((size_t)page * 2 + (size_t)which) * AAH_PAGE_LEN + (size_t)(t % AAH_PAGE_LEN)) * row;
			for (size_t o = 0; o < bytes; o += 64)
				__builtin_prefetch(base + o, 0, 2);   /* into L2: into L1, a page at once stalled on its fill buffers */
		}
		t = end + 1;
	}
}

/* The band of key distance d: band b holds edges[b-1] ≤ d < edges[b]. */
static int32_t band_of(const aah_attn_seq *s, int64_t d)
{
	int32_t b = 0;
	while (b < s->n_bands - 1 && d >= s->band_edges[b])
		b++;
	return b;
}

/* One tile (the header comment). Scratch: Q, the accumulators (nr × hd each), S (nr × ATT_BK), then per row max, sum,
 * rescale, E and nbm band sums. */
static void attn_unit_run(const attn_job *j, const attn_unit *u, float *scratch)
{
	const cpu_kernels *k = j->c->k;
	const aah_attn_seq *s = &j->seqs[u->seq];
	const int32_t hd = j->hd, G = j->group, nr = u->n * G, nbm = j->nbm, kvh = u->kvh;
	const bool measure = j->meas && (s->band_mass || s->entropy);
	const int32_t nb = s->band_mass ? s->n_bands : 0;   /* bands to carry (none when only the entropy is asked for) */
	const int64_t W = s->windows[kvh], pos_lo = (int64_t)s->pos0 + u->i0, pos_hi = pos_lo + u->n - 1;
	const int64_t q_stride = (int64_t)j->n_heads * hd;
	float *Q = scratch, *acc = Q + (size_t)nr * hd, *S = acc + (size_t)nr * hd, *m = S + (size_t)nr * ATT_BK;
	float *l = m + nr, *corr = l + nr, *E = corr + nr, *B = E + nr;   /* B: (nr, nbm) */
	for (int32_t r = 0; r < u->n; r++) {
		const float *qv = j->q + (int64_t)(s->row0 + u->i0 + r) * q_stride + (int64_t)kvh * G * hd;
		for (int32_t d = 0; d < G * hd; d++)
			Q[(int64_t)r * G * hd + d] = qv[d] * j->scale;
	}
	memset(acc, 0, (size_t)nr * hd * sizeof *acc);
	for (int32_t r = 0; r < nr; r++) {
		m[r] = -INFINITY;
		l[r] = E[r] = 0;
	}
	if (measure)
		memset(B, 0, (size_t)nr * nbm * sizeof *B);
	const int64_t lo = pos_lo - W + 1 > 0 ? pos_lo - W + 1 : 0;   /* the first key any row reads */
	const void *rows;
	int64_t stride, n;
	/* One or two query rows (decode) read each key once and wait on memory; a prompt's tile reuses each block for its
	 * rows, and there the prefetches cost a fifth of the time (perf) for nothing. */
	const bool prefetch = u->n <= 2;
	if (prefetch)
		kv_prefetch(j, s, kvh, lo, (lo / ATT_BK + 1) * ATT_BK - 1 < pos_hi ? (lo / ATT_BK + 1) * ATT_BK - 1 : pos_hi);
	for (int64_t b0 = lo / ATT_BK * ATT_BK; b0 <= pos_hi; b0 += ATT_BK) {
		const int64_t kb_lo = b0 > lo ? b0 : lo, kb_hi = b0 + ATT_BK - 1 < pos_hi ? b0 + ATT_BK - 1 : pos_hi;
		if (prefetch && b0 + ATT_BK <= pos_hi)
			kv_prefetch(j, s, kvh, b0 + ATT_BK, b0 + 2 * ATT_BK - 1 < pos_hi ? b0 + 2 * ATT_BK - 1 : pos_hi);
		for (int64_t t = kb_lo; t <= kb_hi; t += n) {
			n = kv_run(j, s, kvh, t, kb_hi, 0, &rows, &stride);
			k->qk_tile(S + (t - kb_lo), ATT_BK, Q, hd, nr, rows, j->pool->type, stride, (int32_t)n, hd);
		}
		/* each row's softmax over its own keys of the block: [first, p] ∩ [kb_lo, kb_hi] = columns [a, e) */
		const int64_t nk = kb_hi - kb_lo + 1;
		for (int32_t r = 0; r < nr; r++) {
			const int64_t p = pos_lo + r / G, first = p - W + 1 > 0 ? p - W + 1 : 0;
			const int64_t a = (first > kb_lo ? first : kb_lo) - kb_lo, e = (p < kb_hi ? p : kb_hi) - kb_lo + 1;
			float *sr = S + (int64_t)r * ATT_BK;
			if (a >= e) {   /* none of its keys here */
				memset(sr, 0, (size_t)nk * sizeof *sr);
				corr[r] = 1;
				continue;
			}
			const float mx = k->max(sr + a, e - a, m[r]);
			const float c = m[r] == -INFINITY ? 0.0f : expf(m[r] - mx);
			double pe = 0;
			const float sum = (float)k->exp_sum(sr + a, e - a, mx, measure ? &pe : NULL);
			memset(sr, 0, (size_t)a * sizeof *sr);
			memset(sr + e, 0, (size_t)(nk - e) * sizeof *sr);
			if (measure) {   /* E ← c·(E + (m_old − m_new)·l_old) + Σ p·(s − m_new); bands ← c·bands + Σ of their p */
				E[r] = (l[r] > 0 ? c * (E[r] + (m[r] - mx) * l[r]) : 0.0f) + (float)pe;
				float *br = B + (int64_t)r * nbm;
				for (int32_t bb = 0; bb < nb; bb++)
					br[bb] *= c;
				const int32_t b_near = nb ? band_of(s, p - (kb_lo + e - 1)) : 0, b_far = nb ? band_of(s, p - (kb_lo + a)) : 0;
				if (nb && b_near == b_far) {
					br[b_near] += sum;
				} else if (nb) {   /* the block crosses a band edge: its keys one by one */
					for (int64_t t = a; t < e; t++)
						br[band_of(s, p - (kb_lo + t))] += sr[t];
				}
			}
			l[r] = l[r] * c + sum;
			m[r] = mx;
			corr[r] = c;
		}
		const float *cr = corr;   /* the rescale goes with the block's first run; later runs only add */
		for (int64_t t = kb_lo; t <= kb_hi; t += n, cr = NULL) {
			n = kv_run(j, s, kvh, t, kb_hi, 1, &rows, &stride);
			k->pv_tile(acc, hd, cr, S + (t - kb_lo), ATT_BK, nr, rows, j->pool->type, stride, (int32_t)n, hd);
		}
	}
	for (int32_t r = 0; r < nr; r++) {
		const int32_t row = s->row0 + u->i0 + r / G, h = kvh * G + r % G;
		float *o = j->out + (int64_t)row * q_stride + (int64_t)h * hd;
		const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
		for (int32_t d = 0; d < hd; d++)
			o[d] = acc[(int64_t)r * hd + d] * inv;
		if (measure) {
			float *mr = j->meas + ((int64_t)row * j->n_heads + h) * (nbm + 1);
			for (int32_t bb = 0; bb < nb; bb++)
				mr[bb] = B[(int64_t)r * nbm + bb] * inv;
			mr[nbm] = l[r] > 0 ? logf(l[r]) - E[r] * inv : 0.0f;
		}
	}
}

/* Query rows per tile for window w: up to r_max, at most w / ATT_R_PER_WINDOW, at least one. */
static int32_t tile_rows(int32_t r_max, int64_t w)
{
	const int64_t r = w / ATT_R_PER_WINDOW;
	return r < 1 ? 1 : r < r_max ? (int32_t)r : r_max;
}

static void attn_worker(void *p, int32_t ti, int32_t nt)
{
	attn_job *j = p;
	float *scratch = j->c->scratch[ti].buf;
	for (int64_t ui = j->unit_lo[ti]; ui < j->unit_lo[ti + 1]; ui++)
		attn_unit_run(j, &j->units[ui], scratch);
}

uint64_t cpu_attention(aah_backend *b, float *out, const float *q, const float *k, const float *v,
                       const aah_kv_pool *pool, const aah_attn_seq *seqs, int32_t n_seqs, int32_t n_heads,
                       int32_t n_kv, float scale, uint64_t *seq_work)
{
	cpu_ctx *c = b->context;
	const int32_t hd = pool->head_dim, G = n_heads / n_kv;
	if (G > MAX_GROUP)
		abort();   /* the engine refuses models with larger groups */
	const int32_t R = ATT_QROWS / G > 1 ? ATT_QROWS / G : 1;   /* the most rows of a tile */
	attn_job j = { .out = out, .q = q, .k = k, .v = v, .pool = pool, .seqs = seqs, .n_heads = n_heads, .n_kv = n_kv,
	               .hd = hd, .group = G, .scale = scale, .es = aah_dtype_size(pool->type), .c = c };
	int64_t rows = 0, n_units = 0;
	for (int32_t si = 0; si < n_seqs; si++) {
		const aah_attn_seq *s = &seqs[si];
		if (s->n_new <= 0)
			continue;
		rows = s->row0 + s->n_new > rows ? s->row0 + s->n_new : rows;
		for (int32_t h = 0; h < n_kv; h++) {
			const int32_t r = tile_rows(R, s->windows[h]);
			n_units += (int64_t)(s->n_new + r - 1) / r;
		}
		if (s->band_mass || s->entropy) {
			const int32_t nb = s->band_mass ? s->n_bands : 1;
			j.nbm = nb > j.nbm ? nb : j.nbm;
		}
	}
	if (n_units == 0)
		return 0;
	/* the call's new rows in the pool's type, rounded once (an f32 pool reads k and v as they are) */
	if (pool->type != AAH_DTYPE_F32) {
		const size_t elems = (size_t)rows * (size_t)n_kv * (size_t)hd;
		if (!cpu_buf_reserve(&c->att_k, elems * j.es) || !cpu_buf_reserve(&c->att_v, elems * j.es))
			abort();   /* the size of the call's k and v: out of memory here is not recoverable */
		c->k->from_f32(c->att_k.p, pool->type, k, (int64_t)elems);
		c->k->from_f32(c->att_v.p, pool->type, v, (int64_t)elems);
		j.k = c->att_k.p;
		j.v = c->att_v.p;
	}
	const size_t nr = (size_t)R * (size_t)G;
	const size_t scratch = nr * (2 * (size_t)hd + ATT_BK + 4 + (size_t)j.nbm);
	if (!cpu_scratch_reserve(c, scratch) || !cpu_buf_reserve(&c->att_units, (size_t)n_units * sizeof(attn_unit)) ||
	    (j.nbm > 0 && !cpu_buf_reserve(&c->att_meas, (size_t)rows * n_heads * (size_t)(j.nbm + 1) * sizeof(float))))
		abort();   /* a few MB at most */
	j.meas = j.nbm > 0 ? c->att_meas.p : NULL;

	/* the units, and each worker's share of them by cost (the keys its rows read, plus a little per row) */
	attn_unit *units = c->att_units.p;
	int64_t ui = 0;
	uint64_t total = 0, cost_total = 0;
	for (int32_t si = 0; si < n_seqs; si++) {
		const aah_attn_seq *s = &seqs[si];
		uint64_t sw = 0;
		for (int32_t h = 0; h < n_kv; h++) {
			const int32_t r = tile_rows(R, s->windows[h]);
			for (int32_t i0 = 0; i0 < s->n_new; i0 += r) {
				units[ui++] = (attn_unit){ si, i0, s->n_new - i0 < r ? s->n_new - i0 : r, h };
				for (int32_t i = i0; i < i0 + r && i < s->n_new; i++) {
					const int64_t p = (int64_t)s->pos0 + i, w = s->windows[h];
					sw += (uint64_t)(p + 1 < w ? p + 1 : w) * (uint64_t)G;
				}
			}
		}
		if (seq_work)
			seq_work[si] += sw;
		total += sw;
	}
	cost_total = total / (uint64_t)G + (uint64_t)rows * (uint64_t)n_kv * 64;
	j.units = units;
	/* Only a tiny call runs alone: the workers spin between a step's products, so handing them work costs far less
	 * than a decode row's attention. (Alone below 4096, a row up to 448 positions at 8 KV heads, the other thread sat
	 * idle for 1.4 ms of a 20 ms Q8_0 step of the 0.6B shape at 256 positions.) */
	int32_t nt = n_units < 2 || cost_total < 256 ? 1 : c->n_threads;
	if (nt > n_units)
		nt = (int32_t)n_units;
	{
		uint64_t acc = 0;
		int32_t w = 1;
		j.unit_lo[0] = 0;
		for (int64_t x = 0; x < n_units && w < nt; x++) {
			const attn_unit *u = &units[x];
			const aah_attn_seq *s = &seqs[u->seq];
			for (int32_t i = u->i0; i < u->i0 + u->n; i++) {
				const int64_t p = (int64_t)s->pos0 + i, wd = s->windows[u->kvh];
				acc += (uint64_t)(p + 1 < wd ? p + 1 : wd) + 64;
			}
			while (w < nt && acc * (uint64_t)nt >= cost_total * (uint64_t)w)
				j.unit_lo[w++] = x + 1;
		}
		while (w <= nt)
			j.unit_lo[w++] = n_units;
	}
	if (nt == 1)
		attn_worker(&j, 0, 1);
	else if (nt == c->n_threads)
		threadpool_run(c->tp, attn_worker, &j);
	else {   /* fewer units than workers: the idle ones get empty ranges */
		for (int32_t w = nt + 1; w <= c->n_threads; w++)
			j.unit_lo[w] = n_units;
		threadpool_run(c->tp, attn_worker, &j);
	}

	/* the measured rows, summed in row order */
	for (int32_t si = 0; si < n_seqs && j.meas; si++) {
		const aah_attn_seq *s = &seqs[si];
		if (s->n_new <= 0 || (!s->band_mass && !s->entropy))
			continue;
		for (int32_t i = 0; i < s->n_new; i++)
			for (int32_t h = 0; h < n_heads; h++) {
				const float *mr = j.meas + ((int64_t)(s->row0 + i) * n_heads + h) * (j.nbm + 1);
				for (int32_t bb = 0; s->band_mass && bb < s->n_bands; bb++)
					s->band_mass[(int64_t)h * s->n_bands + bb] += mr[bb];
				if (s->entropy)
					s->entropy[h] += mr[j.nbm];
			}
	}
	return total;
}

static void store_rows(const cpu_kernels *k, const aah_kv_pool *pool, int32_t page, int which, int64_t row,
                       const float *src, int32_t hd)
{
	const size_t off = (((size_t)page * 2 + (size_t)which) * AAH_PAGE_LEN + (size_t)row) * (size_t)hd;
	k->from_f32((char *)pool->data + off * aah_dtype_size(pool->type), pool->type, src, hd);
}

void cpu_kv_store(aah_backend *b, const aah_kv_pool *pool, const float *k, const float *v, const aah_attn_seq *seqs,
                  int32_t n_seqs, int32_t n_kv)
{
	const cpu_kernels *kt = ((cpu_ctx *)b->context)->k;
	const int32_t hd = pool->head_dim;
	const int64_t stride = (int64_t)n_kv * hd;
	for (int32_t si = 0; si < n_seqs; si++) {
		const aah_attn_seq *s = &seqs[si];
		if (s->n_new <= 0)
			continue;
		const int64_t last = (int64_t)s->pos0 + s->n_new - 1;
		for (int32_t h = 0; h < n_kv; h++) {
			const int64_t slots = s->n_slots[h];
			const int64_t keep_from = (last / AAH_PAGE_LEN - slots + 1) * AAH_PAGE_LEN;   /* oldest page the ring keeps */
			for (int32_t i = 0; i < s->n_new; i++) {
				const int64_t pos = (int64_t)s->pos0 + i;
				if (pos < keep_from)
					continue;
				const int32_t page = s->rings[(int64_t)h * s->ring_stride + (pos / AAH_PAGE_LEN) % slots];
				if (page < 0)
					continue;
				store_rows(kt, pool, page, 0, pos % AAH_PAGE_LEN, k + (int64_t)(s->row0 + i) * stride + (int64_t)h * hd,
				           hd);
				store_rows(kt, pool, page, 1, pos % AAH_PAGE_LEN, v + (int64_t)(s->row0 + i) * stride + (int64_t)h * hd,
				           hd);
			}
		}
	}
}
