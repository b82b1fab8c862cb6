/* tests/engine/check_kv_cache.c — Check suite for engine/kv_cache: initialisation, per-sequence ring sizes, the page
 * accounting of reserve and release as sequences grow past their rings, admission (pages_for), failure without side
 * effects, and rings that the CPU backend's kv_store writes through. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv_cache.h"
#include "kernels/backend.h"

/* ck_assert_msg without Check's per-call bookkeeping (each passing ck_assert writes to the runner): for loops. */
#define CHECK(expr, ...)               \
	do {                               \
		if (!(expr))                   \
			ck_abort_msg(__VA_ARGS__); \
	} while (0)

static aah_backend *be;

static void backend_setup(void)
{
	aah_backend_params p = { .n_threads = 1 };
	be = aah_backend_cpu_init(&p);
	ck_assert_ptr_nonnull(be);
}

static void backend_teardown(void)
{
	be->iface.free(be);
	be = NULL;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* Two layers of three KV heads with capacities 16, 40, 64, 4096 mixed, per sequence; the context is 4096. */
#define N_LAYERS 2
#define N_KV 3
#define MAX_CAP 4096
static const int32_t mixed_caps[3][N_LAYERS * N_KV] = {
	{ 16, 40, 4096, 64, 16, 40 },
	{ 4096, 64, 16, 40, 40, 16 },
	{ 64, 64, 16, 4096, 4096, 40 },
};

static void init_ok(kv_cache *c, int32_t max_cap, int32_t n_layers, int32_t n_kv, int32_t hd, aah_dtype t,
                    int32_t max_seqs, int64_t n_pages)
{
	char err[256] = "";
	ck_assert_msg(kv_cache_init(c, be, n_layers, n_kv, hd, t, max_cap, max_seqs, n_pages, err, sizeof err) == 0, "%s",
	              err);
}

static int32_t slots_of(const kv_cache *c, int32_t seq, int32_t lh)
{
	return kv_cache_slots(c, seq, lh / c->n_kv)[lh % c->n_kv];
}

/* Pages the ring of (seq, layer·n_kv + head) holds. */
static int64_t ring_pages(const kv_cache *c, int32_t seq, int32_t lh)
{
	const int32_t *ring = kv_cache_rings(c, seq, lh / c->n_kv) + (int64_t)(lh % c->n_kv) * c->ring_stride;
	const int32_t slots = slots_of(c, seq, lh);
	int64_t n = 0;
	for (int32_t r = 0; r < c->ring_stride; r++) {
		CHECK(r < slots || ring[r] == -1, "seq %d head %d: ring entry %d past n_slots = %d is set", seq, lh, r, slots);
		n += ring[r] >= 0;
	}
	return n;
}

/* Every page is in exactly one place: a ring of some sequence or the free list; the counters agree with the rings. */
static void check_consistent(const kv_cache *c)
{
	const int64_t n_pages = c->pool.n_pages, heads = (int64_t)c->n_layers * c->n_kv;
	unsigned char *seen = calloc((size_t)n_pages, 1);
	int64_t used = 0;
	for (int32_t s = 0; s < c->max_seqs; s++) {
		int64_t held = 0;
		for (int64_t lh = 0; lh < heads; lh++) {
			const int32_t *ring = c->rings + ((int64_t)s * heads + lh) * c->ring_stride;
			for (int32_t r = 0; r < c->ring_stride; r++) {
				if (ring[r] < 0)
					continue;
				CHECK(ring[r] < n_pages, "seq %d head %lld slot %d: page %d out of range", s, (long long)lh, r, ring[r]);
				CHECK(!seen[ring[r]], "page %d is in two rings (seq %d head %lld slot %d)", ring[r], s, (long long)lh, r);
				seen[ring[r]] = 1;
				held++;
			}
		}
		CHECK(held == c->seq_pages[s], "seq %d holds %lld pages, seq_pages says %lld", s, (long long)held,
		      (long long)c->seq_pages[s]);
		used += held;
	}
	CHECK(used == c->pages_used, "rings hold %lld pages, pages_used says %lld", (long long)used,
	      (long long)c->pages_used);
	CHECK(c->n_free + c->pages_used == n_pages, "n_free %d + pages_used %lld != %lld pages", c->n_free,
	      (long long)c->pages_used, (long long)n_pages);
	for (int32_t i = 0; i < c->n_free; i++) {
		int32_t pg = c->free_pages[i];
		CHECK(pg >= 0 && pg < n_pages, "free page %d out of range", pg);
		CHECK(!seen[pg], "page %d is free and in use", pg);
		seen[pg] = 1;
	}
	free(seen);
}

/* After positions [0, len) of seq are reserved: each head holds min(ceil(len / P), n_slots) pages, and the
 * byte count lies between the exact need (min(len, cap) rows of K and V, rounded up to pages) and a page more. */
static void check_seq_pages(const kv_cache *c, int32_t seq, const int32_t *caps, int64_t len)
{
	const int64_t heads = (int64_t)c->n_layers * c->n_kv;
	const size_t es = aah_dtype_size(c->pool.type);
	int64_t total = 0;
	for (int64_t lh = 0; lh < heads; lh++) {
		const int64_t cap = caps[lh], slots = slots_of(c, seq, (int32_t)lh);
		CHECK(slots == ceil_div(cap, AAH_PAGE_LEN) + 1, "seq %d head %lld: %lld slots for capacity %lld", seq,
		      (long long)lh, (long long)slots, (long long)cap);
		int64_t got = ring_pages(c, seq, (int32_t)lh);
		CHECK(got <= slots, "seq %d head %lld holds %lld pages > n_slots %lld", seq, (long long)lh, (long long)got,
		      (long long)slots);
		CHECK(got == min64(ceil_div(len, AAH_PAGE_LEN), slots), "seq %d head %lld (cap %lld) at len %lld holds %lld pages",
		      seq, (long long)lh, (long long)cap, (long long)len, (long long)got);
		const int64_t exact = min64(len, cap) * c->pool.head_dim * 2 * (int64_t)es;
		const int64_t rounded = ceil_div(exact, (int64_t)c->page_bytes) * (int64_t)c->page_bytes;
		const int64_t bytes = got * (int64_t)c->page_bytes;
		CHECK(bytes >= rounded && bytes <= rounded + (int64_t)c->page_bytes,
		      "seq %d head %lld (cap %lld) at len %lld: %lld bytes, the need is %lld (rounded %lld)", seq, (long long)lh,
		      (long long)cap, (long long)len, (long long)bytes, (long long)exact, (long long)rounded);
		/* the newest min(len, cap) positions all have a page, and distinct logical pages distinct ones */
		const int32_t *ring = kv_cache_rings(c, seq, (int32_t)(lh / c->n_kv)) + (lh % c->n_kv) * c->ring_stride;
		for (int64_t p = len - min64(len, cap); p < len; p += AAH_PAGE_LEN)
			CHECK(ring[(p / AAH_PAGE_LEN) % slots] >= 0, "seq %d head %lld: position %lld has no page", seq, (long long)lh,
			      (long long)p);
		if (len > 0)
			CHECK(ring[((len - 1) / AAH_PAGE_LEN) % slots] >= 0, "seq %d head %lld: the last position has no page", seq,
			      (long long)lh);
		total += got;
	}
	CHECK(total == c->seq_pages[seq], "seq %d: rings hold %lld, seq_pages %lld", seq, (long long)total,
	      (long long)c->seq_pages[seq]);
	CHECK(c->seq_pages[seq] == kv_cache_pages_for(c, caps, len),
	      "seq %d at len %lld holds %lld pages, pages_for says %lld", seq, (long long)len, (long long)c->seq_pages[seq], (long long)kv_cache_pages_for(c, caps, len));
}

/* ---- init ---- */

START_TEST(test_init)
{
	kv_cache c;
	init_ok(&c, MAX_CAP, N_LAYERS, N_KV, 64, AAH_DTYPE_F16, 3, 1000);
	ck_assert_ptr_nonnull(c.pool.data);
	ck_assert_int_eq(c.pool.n_pages, 1000);
	ck_assert_int_eq(c.pool.head_dim, 64);
	ck_assert_int_eq(c.pool.type, AAH_DTYPE_F16);
	ck_assert_uint_eq(c.page_bytes, 2 * AAH_PAGE_LEN * 64 * 2);
	ck_assert_int_eq(c.n_free, 1000);
	ck_assert_int_eq(c.pages_used, 0);
	ck_assert_int_eq(c.n_layers, N_LAYERS);
	ck_assert_int_eq(c.n_kv, N_KV);
	ck_assert_int_eq(c.max_seqs, 3);
	ck_assert_int_eq(c.ring_stride, MAX_CAP / AAH_PAGE_LEN + 1);
	for (int32_t s = 0; s < 3; s++) {
		ck_assert_int_eq(c.seq_pages[s], 0);
		for (int32_t l = 0; l < N_LAYERS; l++) {
			/* before seq_setup every ring is as long as the context needs */
			for (int32_t h = 0; h < N_KV; h++)
				ck_assert_int_eq(kv_cache_slots(&c, s, l)[h], c.ring_stride);
			for (int32_t i = 0; i < N_KV * c.ring_stride; i++)
				ck_assert_int_eq(kv_cache_rings(&c, s, l)[i], -1);
		}
	}
	/* seq_setup sizes one sequence's rings and leaves the others alone */
	kv_cache_seq_setup(&c, 1, mixed_caps[0]);
	for (int32_t lh = 0; lh < N_LAYERS * N_KV; lh++) {
		ck_assert_int_eq(slots_of(&c, 1, lh), (mixed_caps[0][lh] + AAH_PAGE_LEN - 1) / AAH_PAGE_LEN + 1);
		ck_assert_int_eq(slots_of(&c, 0, lh), c.ring_stride);
		ck_assert_int_eq(slots_of(&c, 2, lh), c.ring_stride);
	}
	ck_assert_ptr_eq(kv_cache_slots(&c, 1, 1), c.n_slots + (1 * N_LAYERS + 1) * N_KV);
	ck_assert_ptr_eq(kv_cache_rings(&c, 2, 1), c.rings + (int64_t)(2 * N_LAYERS + 1) * N_KV * c.ring_stride);
	/* capacities of 1, 16, 17 and one above the context (clamped to the ring stride) */
	const int32_t odd_caps[N_LAYERS * N_KV] = { 1, 16, 17, MAX_CAP, MAX_CAP + 1, 100000 };
	kv_cache_seq_setup(&c, 2, odd_caps);
	ck_assert_int_eq(slots_of(&c, 2, 0), 2);
	ck_assert_int_eq(slots_of(&c, 2, 1), 2);
	ck_assert_int_eq(slots_of(&c, 2, 2), 3);
	ck_assert_int_eq(slots_of(&c, 2, 3), c.ring_stride);
	ck_assert_int_eq(slots_of(&c, 2, 4), c.ring_stride);
	ck_assert_int_eq(slots_of(&c, 2, 5), c.ring_stride);
	ck_assert_int_eq(kv_cache_pages_for(&c, odd_caps, 100000), 2 + 2 + 3 + 3 * (int64_t)c.ring_stride);
	check_consistent(&c);
	/* the pool is usable memory of n_pages · page_bytes */
	memset(c.pool.data, 0x5a, (size_t)c.pool.n_pages * c.page_bytes);
	kv_cache_free(&c, be);
	ck_assert_ptr_null(c.pool.data);
	kv_cache_free(&c, be);   /* freeing twice (a zeroed cache) is harmless */

	for (int t = 0; t < 3; t++) {
		init_ok(&c, 1, 1, 1, 128, (aah_dtype)t, 1, 1);
		ck_assert_uint_eq(c.page_bytes, 2 * AAH_PAGE_LEN * 128 * aah_dtype_size((aah_dtype)t));
		ck_assert_int_eq(c.ring_stride, 2);
		ck_assert_int_eq(kv_cache_reserve(&c, 0, 0, 1), 0);
		ck_assert_int_eq(c.n_free, 0);
		kv_cache_free(&c, be);
	}
}
END_TEST

START_TEST(test_init_invalid)
{
	kv_cache c;
	char err[256] = "";
	ck_assert_int_eq(kv_cache_init(&c, be, N_LAYERS, N_KV, 64, AAH_DTYPE_F16, MAX_CAP, 2, 0, err, sizeof err), -1);
	ck_assert_msg(strlen(err) > 0, "no message");
	ck_assert_ptr_null(c.pool.data);
	kv_cache_free(&c, be);
	err[0] = 0;
	ck_assert_int_eq(kv_cache_init(&c, be, N_LAYERS, N_KV, 64, AAH_DTYPE_F16, MAX_CAP, 2, -5, err, sizeof err), -1);
	ck_assert_msg(strlen(err) > 0, "no message");
	err[0] = 0;
	ck_assert_int_eq(kv_cache_init(&c, be, N_LAYERS, N_KV, 64, AAH_DTYPE_F16, MAX_CAP, 2, (int64_t)INT32_MAX + 1, err,
	                               sizeof err),
	                 -1);
	ck_assert_msg(strlen(err) > 0, "no message");
	kv_cache_free(&c, be);
}
END_TEST

/* ---- reserve and release ---- */

static int64_t ring_sum(const int32_t *caps)
{
	int64_t n = 0;
	for (int32_t i = 0; i < N_LAYERS * N_KV; i++)
		n += (caps[i] + AAH_PAGE_LEN - 1) / AAH_PAGE_LEN + 1;
	return n;
}

/* Three sequences with their own capacities grow side by side to 5000 positions in steps of 1, 100 and 37; every
 * step keeps the accounting exact and every head within its ring. */
START_TEST(test_reserve_growth)
{
	kv_cache c;
	const int64_t n_pages = ring_sum(mixed_caps[0]) + ring_sum(mixed_caps[1]) + ring_sum(mixed_caps[2]) + 11;
	init_ok(&c, MAX_CAP, N_LAYERS, N_KV, 8, AAH_DTYPE_BF16, 3, n_pages);
	for (int32_t s = 0; s < 3; s++)
		kv_cache_seq_setup(&c, s, mixed_caps[s]);
	static const int64_t steps[3] = { 1, 100, 37 };
	int64_t len[3] = { 0, 0, 0 };
	const int64_t target = 5000;
	for (int round = 0; len[0] < target || len[1] < target || len[2] < target; round++) {
		for (int32_t s = 0; s < 3; s++) {
			if (len[s] >= target)
				continue;
			int64_t n = min64(steps[s], target - len[s]);
			const int64_t before = c.seq_pages[s], free_before = c.n_free;
			CHECK(kv_cache_reserve(&c, s, len[s], n) == 0, "seq %d: reserve [%lld, +%lld) failed with %d free", s,
			      (long long)len[s], (long long)n, c.n_free);
			CHECK(free_before - c.n_free == c.seq_pages[s] - before, "seq %d: n_free and seq_pages moved apart", s);
			len[s] += n;
			check_seq_pages(&c, s, mixed_caps[s], len[s]);
		}
		if (round % 16 == 0 || len[0] >= target)
			check_consistent(&c);
	}
	check_consistent(&c);
	/* every ring is full: the pool holds exactly the rings plus the spare pages */
	ck_assert_int_eq(c.n_free, 11);
	/* reserving what is already there takes nothing */
	ck_assert_int_eq(kv_cache_reserve(&c, 1, target - 10, 10), 0);
	ck_assert_int_eq(kv_cache_reserve(&c, 1, 0, 0), 0);
	ck_assert_int_eq(kv_cache_reserve(&c, 1, 100, -3), 0);
	ck_assert_int_eq(c.n_free, 11);

	/* release gives every page back, one sequence at a time */
	for (int32_t s = 0; s < 3; s++) {
		const int64_t held = c.seq_pages[s], free_before = c.n_free;
		kv_cache_release(&c, s);
		ck_assert_int_eq(c.n_free, free_before + held);
		ck_assert_int_eq(c.seq_pages[s], 0);
		for (int32_t l = 0; l < N_LAYERS; l++)
			for (int32_t i = 0; i < N_KV * c.ring_stride; i++)
				CHECK(kv_cache_rings(&c, s, l)[i] == -1, "seq %d layer %d: ring entry %d left after release", s, l, i);
		check_consistent(&c);
	}
	ck_assert_int_eq(c.n_free, n_pages);
	ck_assert_int_eq(c.pages_used, 0);
	kv_cache_release(&c, 0);   /* releasing an empty sequence changes nothing */
	ck_assert_int_eq(c.n_free, n_pages);
	check_consistent(&c);

	/* a released slot set up with other capacities grows within its new rings */
	kv_cache_seq_setup(&c, 0, mixed_caps[2]);
	ck_assert_int_eq(kv_cache_reserve(&c, 0, 0, 5000), 0);
	check_seq_pages(&c, 0, mixed_caps[2], 5000);
	kv_cache_seq_setup(&c, 2, mixed_caps[0]);
	for (int64_t p = 0; p < 700; p += 13)
		ck_assert_int_eq(kv_cache_reserve(&c, 2, p, 13), 0);
	check_seq_pages(&c, 2, mixed_caps[0], 702);
	check_consistent(&c);
	kv_cache_free(&c, be);
}
END_TEST

/* A fresh cache hands out the lowest page ids first. */
START_TEST(test_lowest_pages_first)
{
	kv_cache c;
	const int32_t caps[2] = { 64, 64 };
	init_ok(&c, 64, 1, 2, 16, AAH_DTYPE_F32, 2, 100);
	kv_cache_seq_setup(&c, 0, caps);
	ck_assert_int_eq(kv_cache_reserve(&c, 0, 0, 40), 0);   /* 3 pages per head */
	int32_t seen[6], k = 0;
	for (int32_t h = 0; h < 2; h++)
		for (int32_t r = 0; r < 3; r++)
			seen[k++] = kv_cache_rings(&c, 0, 0)[h * c.ring_stride + r];
	for (int32_t i = 0; i < 6; i++) {
		int found = 0;
		for (int32_t j = 0; j < 6; j++)
			found += seen[j] == i;
		ck_assert_msg(found == 1, "page %d taken %d times among the first six", i, found);
	}
	kv_cache_free(&c, be);
}
END_TEST

/* pages_for(caps, len) is exactly what a fresh sequence of len positions with those capacities takes, in one
 * reserve or many. */
START_TEST(test_pages_for)
{
	kv_cache c;
	init_ok(&c, MAX_CAP, N_LAYERS, N_KV, 4, AAH_DTYPE_F32, 2, 2000);
	const int32_t *caps = mixed_caps[_i];
	kv_cache_seq_setup(&c, 0, caps);
	kv_cache_seq_setup(&c, 1, caps);
	ck_assert_int_eq(kv_cache_pages_for(&c, caps, 0), 0);
	int64_t lens[700], n_lens = 0;
	for (int64_t l = 1; l <= 600; l++)
		lens[n_lens++] = l;
	static const int64_t big[] = { 1000, 4095, 4096, 4097, 4111, 4112, 4113, 5000, 20000 };
	for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
		lens[n_lens++] = big[i];
	for (int64_t i = 0; i < n_lens; i++) {
		const int64_t len = lens[i];
		ck_assert_int_eq(kv_cache_reserve(&c, 0, 0, len), 0);
		CHECK(c.seq_pages[0] == kv_cache_pages_for(&c, caps, len), "len %lld: one reserve took %lld, pages_for %lld",
		      (long long)len, (long long)c.seq_pages[0], (long long)kv_cache_pages_for(&c, caps, len));
		check_seq_pages(&c, 0, caps, len);
		kv_cache_release(&c, 0);
		/* the same length in chunks of 7 */
		for (int64_t p = 0; p < len; p += 7)
			ck_assert_int_eq(kv_cache_reserve(&c, 1, p, min64(7, len - p)), 0);
		CHECK(c.seq_pages[1] == kv_cache_pages_for(&c, caps, len), "len %lld: chunks took %lld, pages_for %lld",
		      (long long)len, (long long)c.seq_pages[1], (long long)kv_cache_pages_for(&c, caps, len));
		kv_cache_release(&c, 1);
		ck_assert_int_eq(c.n_free, 2000);
	}
	/* the formula by hand for one length */
	int64_t want = 0;
	for (int32_t i = 0; i < N_LAYERS * N_KV; i++)
		want += min64(ceil_div(300, AAH_PAGE_LEN), ceil_div(caps[i], AAH_PAGE_LEN) + 1);
	ck_assert_int_eq(kv_cache_pages_for(&c, caps, 300), want);
	kv_cache_free(&c, be);
}
END_TEST

/* Snapshot of everything a reserve may change. */
typedef struct kv_snap {
	int32_t *rings;
	int64_t seq_pages[3];
	int32_t n_free;
	int64_t pages_used;
} kv_snap;

static void snap_take(kv_snap *sn, const kv_cache *c, size_t ring_bytes)
{
	memcpy(sn->rings, c->rings, ring_bytes);
	memcpy(sn->seq_pages, c->seq_pages, sizeof sn->seq_pages);
	sn->n_free = c->n_free;
	sn->pages_used = c->pages_used;
}

static void snap_same(const kv_snap *sn, const kv_cache *c, size_t ring_bytes)
{
	ck_assert_mem_eq(c->rings, sn->rings, ring_bytes);
	ck_assert_mem_eq(c->seq_pages, sn->seq_pages, sizeof sn->seq_pages);
	ck_assert_int_eq(c->n_free, sn->n_free);
	ck_assert_int_eq(c->pages_used, sn->pages_used);
}

/* A reserve the pool cannot satisfy fails and takes nothing: counters and rings stay as they were. One that needs
 * exactly the free pages succeeds. */
START_TEST(test_reserve_short_pool)
{
	kv_cache c;
	const int32_t caps[2] = { 64, 64 };   /* 5 slots per head */
	init_ok(&c, 64, 1, 2, 8, AAH_DTYPE_F16, 3, 14);
	for (int32_t s = 0; s < 3; s++)
		kv_cache_seq_setup(&c, s, caps);
	const size_t ring_bytes = (size_t)3 * 2 * c.ring_stride * sizeof(int32_t);
	kv_snap sn = { .rings = malloc(ring_bytes) };

	ck_assert_int_eq(kv_cache_reserve(&c, 0, 0, 48), 0);   /* 3 pages per head: 6 taken, 8 free */
	ck_assert_int_eq(c.n_free, 8);
	snap_take(&sn, &c, ring_bytes);
	ck_assert_int_eq(kv_cache_reserve(&c, 1, 0, 65), -1);   /* 5 per head = 10 > 8 */
	snap_same(&sn, &c, ring_bytes);
	ck_assert_int_eq(kv_cache_reserve(&c, 1, 0, 64), 0);    /* 4 per head = 8: exactly what is free */
	ck_assert_int_eq(c.n_free, 0);
	check_consistent(&c);

	/* an empty pool: growing a sequence that holds pages fails and keeps them */
	snap_take(&sn, &c, ring_bytes);
	ck_assert_int_eq(kv_cache_reserve(&c, 0, 48, 1), -1);
	snap_same(&sn, &c, ring_bytes);
	ck_assert_int_eq(kv_cache_reserve(&c, 2, 0, 1), -1);
	snap_same(&sn, &c, ring_bytes);
	/* a reserve inside pages already held needs nothing and succeeds on an empty pool */
	ck_assert_int_eq(kv_cache_reserve(&c, 0, 20, 28), 0);
	snap_same(&sn, &c, ring_bytes);

	/* after a release: 10 needed, 8 free → fails without a partial grab; 8 needed succeeds */
	kv_cache_release(&c, 1);
	ck_assert_int_eq(c.n_free, 8);
	snap_take(&sn, &c, ring_bytes);
	ck_assert_int_eq(kv_cache_reserve(&c, 2, 0, 80), -1);
	snap_same(&sn, &c, ring_bytes);
	/* a wrapped sequence: seq 0 jumps ahead to [300, 400) → logical pages 18 … 24, the ring keeps 20 … 24 */
	ck_assert_int_eq(kv_cache_reserve(&c, 0, 300, 100), 0);   /* slots 0 … 2 held, 3 and 4 new: 4 pages */
	ck_assert_int_eq(c.n_free, 4);
	check_consistent(&c);
	ck_assert_int_eq(kv_cache_reserve(&c, 2, 0, 40), -1);     /* 3 per head = 6 > 4 */
	ck_assert_int_eq(c.n_free, 4);
	ck_assert_int_eq(kv_cache_reserve(&c, 2, 0, 32), 0);      /* 2 per head */
	ck_assert_int_eq(c.n_free, 0);
	check_consistent(&c);
	kv_cache_release(&c, 0);
	kv_cache_release(&c, 2);
	ck_assert_int_eq(c.n_free, 14);
	check_consistent(&c);
	kv_cache_free(&c, be);
	free(sn.rings);
}
END_TEST

/* ---- rings the backend writes through ---- */

/* Positions stored with the CPU backend's kv_store through the cache's rings read back from their pages for the
 * newest `capacity` positions of every head, however far the sequences have wrapped. */
START_TEST(test_rings_with_kv_store)
{
	kv_cache c;
	const int32_t hd = 4, n_seqs = 2;
	init_ok(&c, MAX_CAP, N_LAYERS, N_KV, hd, AAH_DTYPE_F32, n_seqs, 1000);
	for (int32_t s = 0; s < n_seqs; s++)
		kv_cache_seq_setup(&c, s, mixed_caps[s]);
	static const int32_t chunks[] = { 1, 5, 16, 37, 100, 3, 250 };
	int64_t len[2] = { 0, 0 };
	int step = 0;
	const int64_t target = 4700;
	float *k = malloc((size_t)300 * N_KV * hd * sizeof(float)), *v = malloc((size_t)300 * N_KV * hd * sizeof(float));
	while (len[0] < target) {
		for (int32_t s = 0; s < n_seqs; s++) {
			const int32_t n = chunks[(step + s * 3) % 7];
			ck_assert_int_eq(kv_cache_reserve(&c, s, len[s], n), 0);
			/* value of (seq, layer, head, position, element): exact in f32 */
			for (int32_t l = 0; l < N_LAYERS; l++) {
				for (int32_t i = 0; i < n; i++)
					for (int32_t h = 0; h < N_KV; h++)
						for (int32_t e = 0; e < hd; e++) {
							float val = (float)((len[s] + i) * 64 + s * 16 + l * 4 + h) + 0.125f * (float)e;
							k[((int64_t)i * N_KV + h) * hd + e] = val;
							v[((int64_t)i * N_KV + h) * hd + e] = -val;
						}
				aah_attn_seq a = { .row0 = 0, .n_new = n, .pos0 = (int32_t)len[s], .ring_stride = c.ring_stride,
				                   .rings = kv_cache_rings(&c, s, l), .n_slots = kv_cache_slots(&c, s, l),
				                   .windows = NULL };
				be->iface.kv_store(be, &c.pool, k, v, &a, 1, N_KV);
			}
			len[s] += n;
		}
		step++;
		for (int32_t s = 0; s < n_seqs; s++)
			for (int32_t l = 0; l < N_LAYERS; l++)
				for (int32_t h = 0; h < N_KV; h++) {
					const int64_t cap = mixed_caps[s][l * N_KV + h], slots = kv_cache_slots(&c, s, l)[h];
					const int32_t *ring = kv_cache_rings(&c, s, l) + (int64_t)h * c.ring_stride;
					for (int64_t p = len[s] - min64(len[s], cap); p < len[s]; p++) {
						const int32_t page = ring[(p / AAH_PAGE_LEN) % slots];
						const float *kp = (const float *)c.pool.data +
						                  ((size_t)page * 2 * AAH_PAGE_LEN + (size_t)(p % AAH_PAGE_LEN)) * hd;
						const float *vp = kp + AAH_PAGE_LEN * hd;
						for (int32_t e = 0; e < hd; e++) {
							float val = (float)(p * 64 + s * 16 + l * 4 + h) + 0.125f * (float)e;
							CHECK(kp[e] == val && vp[e] == -val,
							      "seq %d layer %d head %d (cap %lld) at len %lld: position %lld reads k %g v %g, "
							      "want %g",
							      s, l, h, (long long)cap, (long long)len[s], (long long)p, kp[e], vp[e], val);
						}
					}
				}
	}
	check_consistent(&c);
	free(k);
	free(v);
	kv_cache_free(&c, be);
}
END_TEST

static Suite *kv_cache_suite(void)
{
	Suite *s = suite_create("kv_cache");

	TCase *tc = tcase_create("init");
	tcase_add_checked_fixture(tc, backend_setup, backend_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_init);
	tcase_add_test(tc, test_init_invalid);
	suite_add_tcase(s, tc);

	tc = tcase_create("accounting");
	tcase_add_checked_fixture(tc, backend_setup, backend_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_reserve_growth);
	tcase_add_test(tc, test_lowest_pages_first);
	tcase_add_loop_test(tc, test_pages_for, 0, 3);
	tcase_add_test(tc, test_reserve_short_pool);
	suite_add_tcase(s, tc);

	tc = tcase_create("rings");
	tcase_add_checked_fixture(tc, backend_setup, backend_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_rings_with_kv_store);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(kv_cache_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
