/* tests/kernels/check_attention.c — Check suite for the CPU attention (kernels/cpu/cpu_attention.c): the tile kernels of every
 * table (qk_tile, pv_tile) for every KV element type against a naive double-precision reference, with the bitwise
 * independence of a score or output from its tile that batch and chunking invariance rest on; then the paged,
 * windowed attention op against dense masked attention (float64), its measurements (band mass, entropy), and its
 * outputs bit for bit whatever the chunking and the other sequences of a call. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/kernels/kernels_test.h"

/* ---- tile kernels ---- */

static const int32_t tile_nq[] = { 1, 2, 3, 4, 5, 7, 8, 33 };
static const int32_t tile_nk[] = { 1, 3, 4, 5, 16, 17 };
static const int32_t tile_hd[] = { 8, 16, 24, 32, 40, 64, 128, 192 };

/* qk_tile: S = Q·Kᵀ for keys stored in each type (strides above hd, lds above nk), within 1e-5 of float64 over the
 * exact stored values; nothing outside the tile written; each score the same bits as the 1 × 1 tile of its row and
 * key (so that a score never depends on what shares its tile). */
START_TEST(test_qk_tile)
{
	const cpu_kernels *k = table_or_skip(_i);
	if (!k)
		return;
	rng_seed(500 + (uint64_t)_i);
	for (int di = 0; di < 3; di++)
		for (size_t hi = 0; hi < sizeof tile_hd / sizeof tile_hd[0]; hi++)
			for (size_t qi = 0; qi < sizeof tile_nq / sizeof tile_nq[0]; qi++)
				for (size_t ki = 0; ki < sizeof tile_nk / sizeof tile_nk[0]; ki++) {
					const int32_t hd = tile_hd[hi], nq = tile_nq[qi], nk = tile_nk[ki], pad = (int32_t)((qi + ki) % 2);
					const int64_t ldq = hd + 5 * pad, ldk = hd + 3 * pad, lds = nk + 7 * pad;
					float *Q = rand_floats((int64_t)(nq - 1) * ldq + hd, 1.0f);
					wmat K;   /* exactly what nk strided rows span */
					wmat_init(&K, dtypes[di], 1, (int64_t)(nk - 1) * ldk + hd, 1.0f);
					float *S = malloc((size_t)(nq * lds + 16) * sizeof(float));
					for (int64_t e = 0; e < nq * lds + 16; e++)
						S[e] = SENTINEL;
					k->qk_tile(S, lds, Q, ldq, nq, K.data, K.type, ldk, nk, hd);
					for (int32_t i = 0; i < nq; i++)
						for (int64_t j = 0; j < lds; j++) {
							const float got = S[i * lds + j];
							if (j >= nk) {
								CHECK(got == SENTINEL, "%s qk_tile wrote S[%d][%lld]", k->isa, i, (long long)j);
								continue;
							}
							double sum = 0, mag = 0;
							for (int32_t d = 0; d < hd; d++) {
								const double pr = (double)Q[i * ldq + d] * K.deq[j * ldk + d];
								sum += pr;
								mag += fabs(pr);
							}
							CHECK(close_to(got, sum, mag, 1e-5), "%s qk_tile %s hd=%d nq=%d nk=%d [%d][%lld] = %.9g, want %.9g",
							      k->isa, aah_dtype_name(K.type), hd, nq, nk, i, (long long)j, got, sum);
							float one;
							k->qk_tile(&one, 1, Q + i * ldq, ldq, 1, (const char *)K.data + (size_t)(j * ldk) *
							           aah_dtype_size(K.type), K.type, ldk, 1, hd);
							CHECK(f2u(one) == f2u(got), "%s qk_tile %s hd=%d nq=%d nk=%d [%d][%lld]: %a in the tile, %a alone",
							      k->isa, aah_dtype_name(K.type), hd, nq, nk, i, (long long)j, got, one);
						}
					CHECK(S[nq * lds] == SENTINEL, "%s qk_tile wrote past the tile", k->isa);
					free(Q);
					free(S);
					wmat_free(&K);
				}
}
END_TEST

/* pv_tile: O = O·c + P·V (c given or NULL) for values stored in each type, within 1e-5 of float64; nothing outside the
 * rows' hd columns written; each row the same bits alone as in the tile, and the keys in two calls (the rescale with
 * the first) the same bits as in one. */
START_TEST(test_pv_tile)
{
	const cpu_kernels *k = table_or_skip(_i);
	if (!k)
		return;
	rng_seed(600 + (uint64_t)_i);
	for (int di = 0; di < 3; di++)
		for (size_t hi = 0; hi < sizeof tile_hd / sizeof tile_hd[0]; hi++)
			for (size_t qi = 0; qi < sizeof tile_nq / sizeof tile_nq[0]; qi++)
				for (size_t ki = 0; ki < sizeof tile_nk / sizeof tile_nk[0]; ki++) {
					const int32_t hd = tile_hd[hi], nq = tile_nq[qi], nk = tile_nk[ki], pad = (int32_t)((qi + ki) % 2);
					const int with_c = (int)((hi + qi + ki) % 2);
					const int64_t ldo = hd + 3 * pad, ldp = nk + 5 * pad, ldv = hd + 7 * pad;
					float *P = malloc((size_t)(nq * ldp) * sizeof(float)), c[64];
					for (int64_t e = 0; e < nq * ldp; e++)
						P[e] = (float)((rng_u64() >> 40) * (1.0 / 16777216.0));
					for (int32_t i = 0; i < nq; i++)
						c[i] = (float)((rng_u64() >> 40) * (1.0 / 16777216.0));
					wmat V;
					wmat_init(&V, dtypes[di], 1, (int64_t)(nk - 1) * ldv + hd, 1.0f);
					const int64_t on = (int64_t)nq * ldo;
					float *O = malloc((size_t)on * sizeof(float)), *O0 = malloc((size_t)on * sizeof(float));
					float *A = malloc((size_t)on * sizeof(float)), *B = malloc((size_t)on * sizeof(float));
					for (int64_t e = 0; e < on; e++)
						O0[e] = e % ldo < hd ? 2.0f * rng_f() : SENTINEL;
					memcpy(O, O0, (size_t)on * sizeof(float));
					k->pv_tile(O, ldo, with_c ? c : NULL, P, ldp, nq, V.data, V.type, ldv, nk, hd);
					/* alone, row by row; and the keys split in two calls */
					memcpy(A, O0, (size_t)on * sizeof(float));
					memcpy(B, O0, (size_t)on * sizeof(float));
					for (int32_t i = 0; i < nq; i++)
						k->pv_tile(A + i * ldo, ldo, with_c ? c + i : NULL, P + i * ldp, ldp, 1, V.data, V.type, ldv, nk, hd);
					const int32_t half = nk / 2;
					k->pv_tile(B, ldo, with_c ? c : NULL, P, ldp, nq, V.data, V.type, ldv, half, hd);
					k->pv_tile(B, ldo, NULL, P + half, ldp, nq, (const char *)V.data + (size_t)(half * ldv) *
					           aah_dtype_size(V.type), V.type, ldv, nk - half, hd);
					for (int32_t i = 0; i < nq; i++)
						for (int64_t d = 0; d < ldo; d++) {
							const int64_t e = i * ldo + d;
							if (d >= hd) {
								CHECK(O[e] == SENTINEL, "%s pv_tile wrote O[%d][%lld]", k->isa, i, (long long)d);
								continue;
							}
							double sum = (double)O0[e] * (with_c ? c[i] : 1.0), mag = fabs(sum);
							for (int32_t j = 0; j < nk; j++) {
								const double pr = (double)P[i * ldp + j] * V.deq[j * ldv + d];
								sum += pr;
								mag += fabs(pr);
							}
							CHECK(close_to(O[e], sum, mag, 1e-5), "%s pv_tile %s hd=%d nq=%d nk=%d c=%d O[%d][%lld] = %.9g, want %.9g",
							      k->isa, aah_dtype_name(V.type), hd, nq, nk, with_c, i, (long long)d, O[e], sum);
							CHECK(f2u(A[e]) == f2u(O[e]) && f2u(B[e]) == f2u(O[e]),
							      "%s pv_tile %s hd=%d nq=%d nk=%d O[%d][%lld]: %a in the tile, %a alone, %a in two calls",
							      k->isa, aah_dtype_name(V.type), hd, nq, nk, i, (long long)d, O[e], A[e], B[e]);
						}
					free(P);
					free(O);
					free(O0);
					free(A);
					free(B);
					wmat_free(&V);
				}
}
END_TEST

/* ---- attention over paged rings against dense masked attention ---- */

#define MAX_SEQS 4
#define MAX_KV 8
#define MAX_HEADS 8

/* The probe's distance bands: the reference keeps the mass of fine bands split at every edge any test uses, and
 * a test's coarser bands (edges a subset of these) sum them. */
#define N_FINE 7
static const int32_t fine_edges[N_FINE - 1] = { 1, 4, 8, 16, 20, 64 };

static int fine_band(int64_t d)
{
	int b = 0;
	while (b < N_FINE - 1 && d >= fine_edges[b])
		b++;
	return b;
}

/* Band configurations by sequence: 5 bands, 1 band, no probe, 3 bands. */
static const int32_t band_edges_5[4] = { 1, 4, 16, 64 }, band_edges_3[2] = { 8, 20 }, band_edges_1[1] = { 0 };
static const int32_t band_n[4] = { 5, 1, 0, 3 };
static const int32_t *const band_edges_of[4] = { band_edges_5, band_edges_1, NULL, band_edges_3 };

/* One sequence of an attention scenario: its whole history (q, k, v), the reference output and work, the
 * windows, capacities and hand-built rings of its KV heads, and the chunk sizes it is fed in. */
typedef struct attn_seq_data {
	int32_t len;
	int32_t chunks[5];            /* chunk sizes, cycled */
	int32_t windows[MAX_KV], caps[MAX_KV], n_slots[MAX_KV];
	int32_t *rings;               /* (n_kv, ring_stride) */
	float *q;                     /* (len, n_heads, hd) */
	float *k, *v;                 /* (len, n_kv, hd) */
	double *ref;                  /* (len, n_heads, hd) */
	uint64_t *ref_work;           /* (len) keys attended by all heads of the query at that position */
	double *ref_band;             /* (len, n_heads, N_FINE) attention mass by key distance */
	double *ref_ent;              /* (len, n_heads) attention entropy, nats */
	int32_t done;                 /* positions fed so far */
	int32_t next_chunk;
} attn_seq_data;

typedef struct attn_scenario {
	int32_t n_heads, n_kv, hd;
	aah_dtype pool_type;
	int32_t n_seqs;
	int32_t ring_stride;
	attn_seq_data s[MAX_SEQS];
	aah_kv_pool pool;
	unsigned char *pool_init;     /* the pool's bytes before the run */
	size_t pool_bytes;
} attn_scenario;

/* Dense reference: query at p, head h attends keys max(0, p-W+1) … p of KV head h / group, softmax(q·k·scale). */
static void attn_reference(attn_scenario *sc, attn_seq_data *d, float scale)
{
	const int32_t nh = sc->n_heads, nkv = sc->n_kv, hd = sc->hd, group = nh / nkv;
	double *w = malloc((size_t)d->len * sizeof(double));
	for (int32_t p = 0; p < d->len; p++) {
		uint64_t work = 0;
		for (int32_t h = 0; h < nh; h++) {
			const int32_t kvh = h / group, W = d->windows[kvh];
			const int32_t first = p - W + 1 > 0 ? p - W + 1 : 0;
			const float *q = d->q + ((int64_t)p * nh + h) * hd;
			double mx = -INFINITY, sum = 0;
			for (int32_t t = first; t <= p; t++) {
				const float *k = d->k + ((int64_t)t * nkv + kvh) * hd;
				double s = 0;
				for (int32_t i = 0; i < hd; i++)
					s += (double)q[i] * k[i];
				w[t] = s * scale;
				if (w[t] > mx)
					mx = w[t];
			}
			for (int32_t t = first; t <= p; t++) {
				w[t] = exp(w[t] - mx);
				sum += w[t];
			}
			double *o = d->ref + ((int64_t)p * nh + h) * hd;
			for (int32_t i = 0; i < hd; i++)
				o[i] = 0;
			double *band = d->ref_band + ((int64_t)p * nh + h) * N_FINE, ent = 0;
			for (int32_t f = 0; f < N_FINE; f++)
				band[f] = 0;
			for (int32_t t = first; t <= p; t++) {
				const float *v = d->v + ((int64_t)t * nkv + kvh) * hd;
				for (int32_t i = 0; i < hd; i++)
					o[i] += w[t] / sum * v[i];
				band[fine_band(p - t)] += w[t] / sum;
				if (w[t] > 0)
					ent -= w[t] / sum * log(w[t] / sum);
			}
			d->ref_ent[(int64_t)p * nh + h] = ent;
			work += (uint64_t)(p - first + 1);
		}
		d->ref_work[p] = work;
	}
	free(w);
}

static void pool_fill_nan(aah_kv_pool *pool, size_t elems)
{
	for (size_t i = 0; i < elems; i++) {
		if (pool->type == AAH_DTYPE_F32)
			((float *)pool->data)[i] = NAN;
		else
			((uint16_t *)pool->data)[i] = pool->type == AAH_DTYPE_F16 ? 0x7e00 : 0x7fc0;
	}
}

/* Builds rings of distinct pages (a shuffled pool with a few spare pages), the data and the reference. */
static void scenario_init(attn_scenario *sc, int32_t nh, int32_t nkv, int32_t hd, aah_dtype type, int32_t n_seqs,
                          const int32_t *lens, const int32_t (*chunks)[5], const int32_t (*windows)[MAX_KV],
                          const int32_t (*caps)[MAX_KV])
{
	memset(sc, 0, sizeof *sc);
	sc->n_heads = nh;
	sc->n_kv = nkv;
	sc->hd = hd;
	sc->pool_type = type;
	sc->n_seqs = n_seqs;
	int32_t total_slots = 0, max_slots = 0;
	for (int32_t si = 0; si < n_seqs; si++) {
		attn_seq_data *d = &sc->s[si];
		d->len = lens[si];
		memcpy(d->chunks, chunks[si], sizeof d->chunks);
		for (int32_t h = 0; h < nkv; h++) {
			d->windows[h] = windows[si][h];
			d->caps[h] = caps[si][h];
			ck_assert_int_ge(d->caps[h], d->windows[h]);
			d->n_slots[h] = (d->caps[h] + AAH_PAGE_LEN - 1) / AAH_PAGE_LEN + 1;
			total_slots += d->n_slots[h];
			if (d->n_slots[h] > max_slots)
				max_slots = d->n_slots[h];
		}
	}
	sc->ring_stride = max_slots + 3;   /* rings need not be packed */
	const int32_t n_pages = total_slots + 7;
	int32_t *perm = malloc((size_t)n_pages * sizeof *perm);
	rng_perm(perm, n_pages);
	int32_t used = 0;
	for (int32_t si = 0; si < n_seqs; si++) {
		attn_seq_data *d = &sc->s[si];
		d->rings = malloc((size_t)nkv * (size_t)sc->ring_stride * sizeof *d->rings);
		for (int32_t h = 0; h < nkv; h++)
			for (int32_t r = 0; r < sc->ring_stride; r++)
				d->rings[h * sc->ring_stride + r] = r < d->n_slots[h] ? perm[used++] : -1;
	}
	free(perm);

	sc->pool.type = type;
	sc->pool.head_dim = hd;
	sc->pool.n_pages = n_pages;
	const size_t elems = (size_t)n_pages * 2 * AAH_PAGE_LEN * (size_t)hd;
	sc->pool_bytes = elems * aah_dtype_size(type);
	sc->pool.data = malloc(sc->pool_bytes);
	sc->pool_init = malloc(sc->pool_bytes);
	pool_fill_nan(&sc->pool, elems);   /* a read of a page never written turns the output into NaN */
	memcpy(sc->pool_init, sc->pool.data, sc->pool_bytes);

	const float scale = 1.0f / sqrtf((float)hd);
	for (int32_t si = 0; si < n_seqs; si++) {
		attn_seq_data *d = &sc->s[si];
		d->q = rand_floats((int64_t)d->len * nh * hd, 3.0f);
		d->k = rand_floats((int64_t)d->len * nkv * hd, 1.0f);
		d->v = rand_floats((int64_t)d->len * nkv * hd, 1.0f);
		d->ref = malloc((size_t)d->len * (size_t)nh * (size_t)hd * sizeof(double));
		d->ref_work = malloc((size_t)d->len * sizeof(uint64_t));
		d->ref_band = malloc((size_t)d->len * (size_t)nh * N_FINE * sizeof(double));
		d->ref_ent = malloc((size_t)d->len * (size_t)nh * sizeof(double));
		attn_reference(sc, d, scale);
	}
}

static void scenario_free(attn_scenario *sc)
{
	for (int32_t si = 0; si < sc->n_seqs; si++) {
		attn_seq_data *d = &sc->s[si];
		free(d->rings);
		free(d->q);
		free(d->k);
		free(d->v);
		free(d->ref);
		free(d->ref_work);
		free(d->ref_band);
		free(d->ref_ent);
	}
	free(sc->pool.data);
	free(sc->pool_init);
}

/* Feeds every sequence chunk by chunk through attention then kv_store, as the engine does, and compares each
 * step's output and work count with the reference. Finished sequences stay in the call with n_new = 0. */
static void scenario_run(attn_scenario *sc, aah_backend *b, const char *label, double tol)
{
	const int32_t nh = sc->n_heads, nkv = sc->n_kv, hd = sc->hd;
	const float scale = 1.0f / sqrtf((float)hd);
	memcpy(sc->pool.data, sc->pool_init, sc->pool_bytes);
	int32_t max_rows = 0;   /* Σ of each sequence's largest chunk */
	for (int32_t si = 0; si < sc->n_seqs; si++) {
		sc->s[si].done = 0;
		sc->s[si].next_chunk = 0;
		int32_t mx = 0;
		for (int c = 0; c < 5; c++)
			mx = sc->s[si].chunks[c] > mx ? sc->s[si].chunks[c] : mx;
		max_rows += mx;
	}
	float *q = malloc((size_t)max_rows * nh * hd * sizeof(float));
	float *k = malloc((size_t)max_rows * nkv * hd * sizeof(float));
	float *v = malloc((size_t)max_rows * nkv * hd * sizeof(float));
	float *out = malloc((size_t)max_rows * nh * hd * sizeof(float));
	aah_attn_seq seqs[MAX_SEQS];
	float band_mass[MAX_SEQS][MAX_HEADS * 5];
	double entropy[MAX_SEQS][MAX_HEADS];
	ck_assert_int_le(nh, MAX_HEADS);
	for (int step = 0;; step++) {
		memset(seqs, 0, sizeof seqs);
		int32_t rows = 0, active = 0;
		for (int32_t j = 0; j < sc->n_seqs; j++) {
			const int32_t si = (j + step) % sc->n_seqs;   /* vary which sequence comes first in the rows */
			attn_seq_data *d = &sc->s[si];
			int32_t n = d->len - d->done;
			int32_t want = d->chunks[d->next_chunk % 5];
			if (n > want)
				n = want;
			aah_attn_seq *s = &seqs[j];
			s->row0 = rows;
			s->n_new = n;
			s->pos0 = d->done;
			s->ring_stride = sc->ring_stride;
			s->rings = d->rings;
			s->n_slots = d->n_slots;
			s->windows = d->windows;
			/* the probe, by sequence (5, 1, no or 3 bands), off every fourth step; band_mass starts nonzero */
			if (band_n[si % 4] > 0 && step % 4 != 3) {
				s->n_bands = band_n[si % 4];
				s->band_edges = band_edges_of[si % 4];
				s->band_mass = band_mass[j];
				for (int32_t e = 0; e < nh * s->n_bands; e++)
					band_mass[j][e] = 0.25f * (float)(e + 1);
			}
			/* the entropy, on its own pattern (with and without bands), starting nonzero */
			if (si % 4 != 1 && step % 5 != 2) {
				s->entropy = entropy[j];
				for (int32_t h = 0; h < nh; h++)
					entropy[j][h] = 0.5 * (h + 1);
			}
			memcpy(q + (int64_t)rows * nh * hd, d->q + (int64_t)d->done * nh * hd, (size_t)n * nh * hd * sizeof(float));
			memcpy(k + (int64_t)rows * nkv * hd, d->k + (int64_t)d->done * nkv * hd,
			       (size_t)n * nkv * hd * sizeof(float));
			memcpy(v + (int64_t)rows * nkv * hd, d->v + (int64_t)d->done * nkv * hd,
			       (size_t)n * nkv * hd * sizeof(float));
			rows += n;
			active += n > 0;
		}
		if (!active)
			break;
		for (int64_t e = 0; e < (int64_t)rows * nh * hd; e++)
			out[e] = SENTINEL;
		/* per-sequence work is added to what seq_work holds; every third step passes NULL */
		uint64_t seq_work[MAX_SEQS], seq_work0[MAX_SEQS];
		for (int32_t j = 0; j < sc->n_seqs; j++)
			seq_work[j] = seq_work0[j] = 1000003ull * (uint64_t)(j + step);
		uint64_t work = b->iface.attention(b, out, q, k, v, &sc->pool, seqs, sc->n_seqs, nh, nkv, scale,
		                                   step % 3 == 2 ? NULL : seq_work);
		uint64_t want_work = 0;
		for (int32_t j = 0; j < sc->n_seqs; j++) {
			const aah_attn_seq *s = &seqs[j];
			const attn_seq_data *d = NULL;
			for (int32_t si = 0; si < sc->n_seqs; si++)
				if (sc->s[si].rings == s->rings)
					d = &sc->s[si];
			uint64_t want_seq = 0;
			for (int32_t i = 0; i < s->n_new; i++)
				want_seq += d->ref_work[s->pos0 + i];
			want_work += want_seq;
			if (step % 3 == 2)
				CHECK(seq_work[j] == seq_work0[j], "%s attention step %d wrote seq_work", label, step);
			else
				CHECK(seq_work[j] - seq_work0[j] == want_seq, "%s attention step %d: seq_work[%d] += %llu, want %llu",
				      label, step, j, (unsigned long long)(seq_work[j] - seq_work0[j]), (unsigned long long)want_seq);
			/* the probe: Σ over this chunk's rows of each head's mass per band, on top of what was there */
			for (int32_t h = 0; h < nh && s->band_mass; h++) {
				double want_band[5] = { 0 };
				for (int32_t i = 0; i < s->n_new; i++)
					for (int32_t f = 0; f < N_FINE; f++) {
						int32_t lower = f == 0 ? 0 : fine_edges[f - 1], cb = 0;
						while (cb < s->n_bands - 1 && lower >= s->band_edges[cb])
							cb++;
						want_band[cb] += d->ref_band[((int64_t)(s->pos0 + i) * nh + h) * N_FINE + f];
					}
				for (int32_t b2 = 0; b2 < s->n_bands; b2++) {
					const int32_t e = h * s->n_bands + b2;
					double got = (double)s->band_mass[e] - 0.25 * (e + 1);
					CHECK(fabs(got - want_band[b2]) <= tol * (1.0 + want_band[b2]),
					      "%s attention step %d: pos %d n_new %d head %d band %d of %d: mass %.7g, want %.7g", label, step,
					      s->pos0, s->n_new, h, b2, s->n_bands, got, want_band[b2]);
				}
			}
			/* the entropy: Σ over this chunk's rows of each head's, on top of what was there */
			for (int32_t h = 0; h < nh && s->entropy; h++) {
				double want_ent = 0;
				for (int32_t i = 0; i < s->n_new; i++)
					want_ent += d->ref_ent[(int64_t)(s->pos0 + i) * nh + h];
				double got = s->entropy[h] - 0.5 * (h + 1);
				CHECK(fabs(got - want_ent) <= tol * (1.0 + want_ent),
				      "%s attention step %d: pos %d n_new %d head %d: entropy %.9g, want %.9g", label, step, s->pos0,
				      s->n_new, h, got, want_ent);
			}
			for (int32_t i = 0; i < s->n_new; i++) {
				const int32_t p = s->pos0 + i;
				for (int32_t h = 0; h < nh; h++)
					for (int32_t e = 0; e < hd; e++) {
						float got = out[((int64_t)(s->row0 + i) * nh + h) * hd + e];
						double ref = d->ref[((int64_t)p * nh + h) * hd + e];
						CHECK(close_to(got, ref, 1.0 + fabs(ref), tol),
						      "%s attention %s nh=%d nkv=%d hd=%d step %d: seq pos %d (chunk at %d, n_new %d) "
						      "head %d [%d] = %.9g, want %.9g",
						      label, aah_dtype_name(sc->pool_type), nh, nkv, hd, step, p, s->pos0, s->n_new, h,
						      e, got, ref);
					}
			}
		}
		CHECK(work == want_work, "%s attention step %d: work %llu, want %llu", label, step,
		      (unsigned long long)work, (unsigned long long)want_work);
		b->iface.kv_store(b, &sc->pool, k, v, seqs, sc->n_seqs, nkv);
		for (int32_t si = 0; si < sc->n_seqs; si++) {
			attn_seq_data *d = &sc->s[si];
			if (d->done < d->len) {
				int32_t n = d->len - d->done, want = d->chunks[d->next_chunk % 5];
				d->done += n < want ? n : want;
				d->next_chunk++;
			}
		}
	}
	/* pages outside every ring were never written */
	const size_t page_bytes = 2 * AAH_PAGE_LEN * (size_t)hd * aah_dtype_size(sc->pool_type);
	char *in_ring = calloc((size_t)sc->pool.n_pages, 1);
	for (int32_t si = 0; si < sc->n_seqs; si++)
		for (int32_t h = 0; h < nkv; h++)
			for (int32_t r = 0; r < sc->s[si].n_slots[h]; r++)
				in_ring[sc->s[si].rings[h * sc->ring_stride + r]] = 1;
	for (int32_t pg = 0; pg < sc->pool.n_pages; pg++)
		if (!in_ring[pg])
			CHECK(!memcmp((char *)sc->pool.data + pg * page_bytes, sc->pool_init + pg * page_bytes, page_bytes),
			      "%s kv_store wrote page %d, which is in no ring", label, pg);
	free(in_ring);
	free(q);
	free(k);
	free(v);
	free(out);
}

typedef struct head_cfg {
	int32_t nh, nkv, hd;
} head_cfg;

/* group sizes 1, 2, 3, 4 and MQA (4, 8); head_dim 40 and 16 exercise the SIMD tails, 32, 64 and 128 the
 * register-blocked attention paths */
static const head_cfg head_cfgs[] = { { 4, 4, 64 }, { 4, 2, 40 }, { 8, 2, 64 }, { 4, 1, 40 },
	                                  { 6, 3, 16 }, { 6, 2, 128 }, { 8, 1, 32 } };

static const int32_t attn_lens[MAX_SEQS] = { 330, 317, 301, 310 };
static const int32_t attn_chunks[MAX_SEQS][5] = {
	{ 1, 5, 16, 37, 100 }, { 100, 37, 16, 5, 1 }, { 5, 1, 37, 16, 100 }, { 250, 1, 16, 5, 37 },
};

/* Windows 8, 20, 64 per KV head, rotated per sequence; capacities equal to the window or above it. */
static void windowed_params(int32_t nkv, int32_t (*windows)[MAX_KV], int32_t (*caps)[MAX_KV])
{
	static const int32_t w3[3] = { 8, 20, 64 }, extra[3] = { 0, 20, 3 };
	for (int32_t si = 0; si < MAX_SEQS; si++)
		for (int32_t h = 0; h < nkv; h++) {
			windows[si][h] = w3[(h + si) % 3];
			caps[si][h] = windows[si][h] + (si == 1 ? 0 : si == 2 ? windows[si][h] : extra[(h + si) % 3]);
		}
}

START_TEST(test_attention_windowed)
{
	const head_cfg *hc = &head_cfgs[_i];
	rng_seed(1000 + (uint64_t)_i);
	int32_t windows[MAX_SEQS][MAX_KV], caps[MAX_SEQS][MAX_KV];
	windowed_params(hc->nkv, windows, caps);
	attn_scenario sc;
	scenario_init(&sc, hc->nh, hc->nkv, hc->hd, AAH_DTYPE_F32, MAX_SEQS, attn_lens, attn_chunks,
	              (const int32_t(*)[MAX_KV])windows, (const int32_t(*)[MAX_KV])caps);
	backend_set bs;
	backends_open(&bs, 7);
	for (int bi = 0; bi < bs.n; bi++)
		scenario_run(&sc, bs.b[bi], bs.label[bi], 1e-4);
	backends_close(&bs);
	scenario_free(&sc);
}
END_TEST

/* f16 and bf16 pools: the history read back from the pages is rounded, so the tolerance is looser. */
START_TEST(test_attention_pool_types)
{
	const aah_dtype t = _i < 2 ? AAH_DTYPE_F16 : AAH_DTYPE_BF16;
	const head_cfg *hc = &head_cfgs[_i % 2 ? 3 : 2];
	rng_seed(1100 + (uint64_t)_i);
	int32_t windows[MAX_SEQS][MAX_KV], caps[MAX_SEQS][MAX_KV];
	windowed_params(hc->nkv, windows, caps);
	attn_scenario sc;
	scenario_init(&sc, hc->nh, hc->nkv, hc->hd, t, MAX_SEQS, attn_lens, attn_chunks,
	              (const int32_t(*)[MAX_KV])windows, (const int32_t(*)[MAX_KV])caps);
	backend_set bs;
	backends_open(&bs, 2 | 4);
	for (int bi = 0; bi < bs.n; bi++)
		scenario_run(&sc, bs.b[bi], bs.label[bi], 1e-2);
	backends_close(&bs);
	scenario_free(&sc);
}
END_TEST

/* Every window ≥ the sequence: the reference is plain causal attention over the whole history. */
START_TEST(test_attention_full_causal)
{
	const head_cfg *hc = &head_cfgs[_i];
	rng_seed(1200 + (uint64_t)_i);
	int32_t windows[MAX_SEQS][MAX_KV], caps[MAX_SEQS][MAX_KV];
	for (int32_t si = 0; si < MAX_SEQS; si++)
		for (int32_t h = 0; h < hc->nkv; h++) {
			windows[si][h] = si == 3 ? attn_lens[si] : 1000;   /* equal to the length, or above it */
			caps[si][h] = windows[si][h] + (h % 2) * 16;
		}
	attn_scenario sc;
	scenario_init(&sc, hc->nh, hc->nkv, hc->hd, AAH_DTYPE_F32, MAX_SEQS, attn_lens, attn_chunks,
	              (const int32_t(*)[MAX_KV])windows, (const int32_t(*)[MAX_KV])caps);
	/* the reference built with these windows is the causal one: every key 0 … p */
	for (int32_t si = 0; si < MAX_SEQS; si++)
		for (int32_t p = 0; p < sc.s[si].len; p++)
			CHECK(sc.s[si].ref_work[p] == (uint64_t)(p + 1) * (uint64_t)hc->nh, "reference work at %d", p);
	backend_set bs;
	backends_open(&bs, 1 | 2);
	for (int bi = 0; bi < bs.n; bi++)
		scenario_run(&sc, bs.b[bi], bs.label[bi], 1e-4);
	backends_close(&bs);
	scenario_free(&sc);
}
END_TEST

/* A single query row with one key (position 0) returns v exactly; the work count is n_heads. */
START_TEST(test_attention_first_token)
{
	backend_set bs;
	backends_open(&bs, 1);
	rng_seed(1300);
	const int32_t nh = 4, nkv = 2, hd = 32;
	float *q = rand_floats(nh * hd, 1.0f), *k = rand_floats(nkv * hd, 1.0f), *v = rand_floats(nkv * hd, 1.0f);
	float out[4 * 32];
	int32_t rings[2] = { 0, 1 }, slots[2] = { 1, 1 }, win[2] = { 16, 16 };
	aah_kv_pool pool = { malloc(2 * 2 * AAH_PAGE_LEN * hd * sizeof(float)), AAH_DTYPE_F32, 2, hd };
	aah_attn_seq s = { .row0 = 0, .n_new = 1, .pos0 = 0, .ring_stride = 1, .rings = rings, .n_slots = slots,
	                   .windows = win };
	for (int bi = 0; bi < bs.n; bi++) {
		aah_backend *b = bs.b[bi];
		uint64_t sw = 5;
		ck_assert_uint_eq(b->iface.attention(b, out, q, k, v, &pool, &s, 1, nh, nkv, 0.125f, &sw), (uint64_t)nh);
		ck_assert_uint_eq(sw, 5 + (uint64_t)nh);
		for (int32_t h = 0; h < nh; h++)
			for (int32_t e = 0; e < hd; e++)
				CHECK(out[h * hd + e] == v[(h / 2) * hd + e], "%s first token head %d [%d]", bs.label[bi], h, e);
		/* kv_store writes row 0 of each head's page */
		b->iface.kv_store(b, &pool, k, v, &s, 1, nkv);
		for (int32_t h = 0; h < nkv; h++) {
			const float *pg = (const float *)pool.data + (size_t)rings[h] * 2 * AAH_PAGE_LEN * hd;
			ck_assert_mem_eq(pg, k + h * hd, hd * sizeof(float));
			ck_assert_mem_eq(pg + AAH_PAGE_LEN * hd, v + h * hd, hd * sizeof(float));
		}
	}
	free(pool.data);
	free(q);
	free(k);
	free(v);
	backends_close(&bs);
}
END_TEST

/* The probe with one band per key distance 0 … 18 and a last band for 19 and beyond: every band gets its own
 * mass, however many bands there are (backend.h sets no limit). */
START_TEST(test_attention_many_bands)
{
	enum { NH = 2, HD = 16, N = 40, NB = 20 };
	backend_set bs;
	backends_open(&bs, 1 | 2);
	rng_seed(1350);
	float *q = rand_floats(N * NH * HD, 3.0f), *k = rand_floats(N * HD, 1.0f), *v = rand_floats(N * HD, 1.0f);
	float *out = malloc(N * NH * HD * sizeof(float));
	int32_t edges[NB - 1];
	for (int32_t b = 0; b < NB - 1; b++)
		edges[b] = b + 1;
	double want[NH][NB] = { { 0 } };
	for (int32_t p = 0; p < N; p++)
		for (int32_t h = 0; h < NH; h++) {
			double w[N], mx = -INFINITY, sum = 0;
			for (int32_t t = 0; t <= p; t++) {
				double d = 0;
				for (int32_t e = 0; e < HD; e++)
					d += (double)q[(p * NH + h) * HD + e] * k[t * HD + e];
				w[t] = d * 0.25;
				mx = w[t] > mx ? w[t] : mx;
			}
			for (int32_t t = 0; t <= p; t++)
				sum += (w[t] = exp(w[t] - mx));
			for (int32_t t = 0; t <= p; t++)
				want[h][p - t < NB - 1 ? p - t : NB - 1] += w[t] / sum;
		}
	int32_t ring[4] = { 0, 1, 2, 3 }, slots[1] = { 4 }, win[1] = { 64 };
	aah_kv_pool pool = { NULL, AAH_DTYPE_F32, 4, HD };
	for (int bi = 0; bi < bs.n; bi++) {
		float mass[NH * NB] = { 0 };
		aah_attn_seq s = { .row0 = 0, .n_new = N, .pos0 = 0, .ring_stride = 4, .rings = ring, .n_slots = slots,
		                   .windows = win, .band_mass = mass, .band_edges = edges, .n_bands = NB };
		bs.b[bi]->iface.attention(bs.b[bi], out, q, k, v, &pool, &s, 1, NH, 1, 0.25f, NULL);
		for (int32_t h = 0; h < NH; h++)
			for (int32_t b = 0; b < NB; b++)
				CHECK(fabs(mass[h * NB + b] - want[h][b]) <= 1e-4 * (1 + want[h][b]),
				      "%s %d bands: head %d band %d mass %.7g, want %.7g", bs.label[bi], NB, h, b, mass[h * NB + b],
				      want[h][b]);
	}
	free(q);
	free(k);
	free(v);
	free(out);
	backends_close(&bs);
}
END_TEST


/* ---- bit for bit, whatever the chunking and the company ---- */

/* One sequence's whole history through attention + kv_store in chunks of `chunk` rows (0: all at once), alone or with
 * a second sequence before it in every call; returns its outputs (len, nh, hd), malloc'd. */
static float *attn_outputs(aah_backend *b, aah_dtype type, int32_t nh, int32_t nkv, int32_t hd, int32_t len,
                           const float *q, const float *k, const float *v, const int32_t *windows, int32_t chunk,
                           int with_other, const float *oq, const float *ok, const float *ov)
{
	const int32_t slots = 64 / AAH_PAGE_LEN + 1 + len / AAH_PAGE_LEN, stride = slots;
	int32_t rings[2][MAX_KV * 64], n_slots[MAX_KV], owin[MAX_KV];
	for (int32_t h = 0; h < nkv; h++) {
		n_slots[h] = slots;
		owin[h] = 48;
	}
	ck_assert_int_le(nkv * stride, MAX_KV * 64);
	int32_t pages = 0;
	for (int s = 0; s < 2; s++)
		for (int32_t h = 0; h < nkv; h++)
			for (int32_t r = 0; r < stride; r++)
				rings[s][h * stride + r] = pages++;
	aah_kv_pool pool = { malloc((size_t)pages * 2 * AAH_PAGE_LEN * hd * aah_dtype_size(type)), type, pages, hd };
	pool_fill_nan(&pool, (size_t)pages * 2 * AAH_PAGE_LEN * hd);
	float *res = malloc((size_t)len * nh * hd * sizeof(float));
	const int32_t step = chunk > 0 ? chunk : len, orows = with_other ? 7 : 0;
	float *Q = malloc((size_t)(step + orows) * nh * hd * sizeof(float)), *out = malloc((size_t)(step + orows) * nh * hd * sizeof(float));
	float *K = malloc((size_t)(step + orows) * nkv * hd * sizeof(float)), *V = malloc((size_t)(step + orows) * nkv * hd * sizeof(float));
	int32_t odone = 0;
	for (int32_t done = 0; done < len; done += step) {
		const int32_t n = len - done < step ? len - done : step;
		aah_attn_seq s[2];
		int32_t ns = 0;
		if (with_other) {   /* 7 rows of another sequence first, at its own positions */
			s[ns++] = (aah_attn_seq){ .row0 = 0, .n_new = orows, .pos0 = odone, .ring_stride = stride,
			                          .rings = rings[1], .n_slots = n_slots, .windows = owin };
			memcpy(Q, oq + (size_t)odone * nh * hd, (size_t)orows * nh * hd * sizeof(float));
			memcpy(K, ok + (size_t)odone * nkv * hd, (size_t)orows * nkv * hd * sizeof(float));
			memcpy(V, ov + (size_t)odone * nkv * hd, (size_t)orows * nkv * hd * sizeof(float));
		}
		s[ns++] = (aah_attn_seq){ .row0 = orows, .n_new = n, .pos0 = done, .ring_stride = stride, .rings = rings[0],
		                          .n_slots = n_slots, .windows = windows };
		memcpy(Q + (size_t)orows * nh * hd, q + (size_t)done * nh * hd, (size_t)n * nh * hd * sizeof(float));
		memcpy(K + (size_t)orows * nkv * hd, k + (size_t)done * nkv * hd, (size_t)n * nkv * hd * sizeof(float));
		memcpy(V + (size_t)orows * nkv * hd, v + (size_t)done * nkv * hd, (size_t)n * nkv * hd * sizeof(float));
		b->iface.attention(b, out, Q, K, V, &pool, s, ns, nh, nkv, 1.0f / sqrtf((float)hd), NULL);
		b->iface.kv_store(b, &pool, K, V, s, ns, nkv);
		memcpy(res + (size_t)done * nh * hd, out + (size_t)orows * nh * hd, (size_t)n * nh * hd * sizeof(float));
		odone += orows;
	}
	free(pool.data);
	free(Q);
	free(out);
	free(K);
	free(V);
	return res;
}

/* Every table and thread count, every KV type: a sequence's attention outputs are the same bits fed at once, in chunks
 * of 37, of 5 and one row at a time, alone or after another sequence's rows in every call. */
START_TEST(test_attention_bitwise_invariant)
{
	const aah_dtype type = dtypes[_i];
	enum { NH = 6, NKV = 2, HD = 40, LEN = 300, OLEN = 7 * 300 };
	rng_seed(1500 + (uint64_t)_i);
	float *q = rand_floats(LEN * NH * HD, 3.0f), *k = rand_floats(LEN * NKV * HD, 1.0f), *v = rand_floats(LEN * NKV * HD, 1.0f);
	float *oq = rand_floats(OLEN * NH * HD, 3.0f), *ok = rand_floats(OLEN * NKV * HD, 1.0f);
	float *ov = rand_floats(OLEN * NKV * HD, 1.0f);
	const int32_t windows[NKV] = { 100, 1000 }, chunks[4] = { 0, 37, 5, 1 };
	backend_set bs;
	backends_open(&bs, 1 | 2);
	for (int bi = 0; bi < bs.n; bi++) {
		float *base = attn_outputs(bs.b[bi], type, NH, NKV, HD, LEN, q, k, v, windows, 0, 0, oq, ok, ov);
		for (int ci = 0; ci < 4; ci++)
			for (int other = 0; other < 2; other++) {
				if (ci == 0 && !other)
					continue;
				float *got = attn_outputs(bs.b[bi], type, NH, NKV, HD, LEN, q, k, v, windows, chunks[ci], other, oq, ok, ov);
				for (int64_t e = 0; e < (int64_t)LEN * NH * HD; e++)
					CHECK(f2u(got[e]) == f2u(base[e]), "%s kv %s: chunks of %d%s: output %lld is %a, at once %a",
					      bs.label[bi], aah_dtype_name(type), chunks[ci], other ? " after another sequence" : "",
					      (long long)e, got[e], base[e]);
				free(got);
			}
		free(base);
	}
	backends_close(&bs);
	free(q); free(k); free(v); free(oq); free(ok); free(ov);
}
END_TEST

static Suite *attention_suite(void)
{
	Suite *s = suite_create("attention");
	TCase *tc = tcase_create("tiles");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_qk_tile, 0, 3);
	tcase_add_loop_test(tc, test_pv_tile, 0, 3);
	suite_add_tcase(s, tc);

	tc = tcase_create("paged");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_attention_first_token);
	tcase_add_loop_test(tc, test_attention_windowed, 0, (int)(sizeof head_cfgs / sizeof head_cfgs[0]));
	tcase_add_loop_test(tc, test_attention_pool_types, 0, 4);
	tcase_add_loop_test(tc, test_attention_full_causal, 0, 2);
	tcase_add_test(tc, test_attention_many_bands);
	tcase_add_loop_test(tc, test_attention_bitwise_invariant, 0, 3);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(attention_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
