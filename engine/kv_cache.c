/* engine/kv_cache.c — page rings and the free list of the paged KV cache (see kv_cache.h).
 * Only bookkeeping lives here; the backend reads and writes the pages themselves. */
#include "engine/kv_cache.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t slots_for(int32_t capacity)
{
	return (capacity + AAH_PAGE_LEN - 1) / AAH_PAGE_LEN + 1;
}

int kv_cache_init(kv_cache *c, aah_backend *b, int32_t n_layers, int32_t n_kv, int32_t head_dim, aah_dtype type,
                  int32_t max_capacity, int32_t max_seqs, int64_t n_pages, char *err, size_t err_len)
{
	memset(c, 0, sizeof *c);
	if (n_pages < 1 || n_pages > INT32_MAX) {
		snprintf(err, err_len, "KV cache: %lld pages is out of range", (long long)n_pages);
		return -1;
	}
	c->n_layers = n_layers;
	c->n_kv = n_kv;
	c->max_seqs = max_seqs;
	c->page_bytes = (size_t)2 * AAH_PAGE_LEN * (size_t)head_dim * aah_dtype_size(type);
	size_t heads = (size_t)n_layers * (size_t)n_kv;
	c->ring_stride = slots_for(max_capacity);
	c->n_slots = malloc((size_t)max_seqs * heads * sizeof *c->n_slots);
	c->seq_pages = calloc((size_t)max_seqs, sizeof *c->seq_pages);
	c->free_pages = malloc((size_t)n_pages * sizeof *c->free_pages);
	c->page_refs = calloc((size_t)n_pages, sizeof *c->page_refs);
	c->ring_refs = calloc((size_t)n_pages, sizeof *c->ring_refs);
	c->page_dec = calloc((size_t)n_pages, sizeof *c->page_dec);
	c->be = b;
	if (!c->n_slots || !c->seq_pages || !c->free_pages || !c->page_refs || !c->ring_refs || !c->page_dec)
		goto oom;
	for (size_t i = 0; i < (size_t)max_seqs * heads; i++)
		c->n_slots[i] = c->ring_stride;
	size_t n_ring = (size_t)max_seqs * heads * (size_t)c->ring_stride;
	c->rings = malloc(n_ring * sizeof *c->rings);
	if (!c->rings)
		goto oom;
	memset(c->rings, 0xff, n_ring * sizeof *c->rings);   /* -1 */
	c->n_free = (int32_t)n_pages;
	for (int32_t i = 0; i < c->n_free; i++)
		c->free_pages[i] = c->n_free - 1 - i;
	c->pool.type = type;
	c->pool.head_dim = head_dim;
	c->pool.n_pages = (int32_t)n_pages;
	c->pool.data = b->iface.buf_alloc(b, (size_t)n_pages * c->page_bytes);
	if (!c->pool.data) {
		snprintf(err, err_len, "KV cache: cannot allocate %lld pages (%.1f MiB)", (long long)n_pages,
		         (double)n_pages * (double)c->page_bytes / (1 << 20));
		kv_cache_free(c, b);
		return -1;
	}
	return 0;
oom:
	snprintf(err, err_len, "KV cache: out of memory for the page tables");
	kv_cache_free(c, b);
	return -1;
}

void kv_cache_free(kv_cache *c, aah_backend *b)
{
	if (c->pool.data)
		b->iface.buf_free(b, c->pool.data);
	free(c->n_slots);
	free(c->rings);
	free(c->seq_pages);
	free(c->free_pages);
	free(c->page_refs);
	free(c->ring_refs);
	free(c->page_dec);
	memset(c, 0, sizeof *c);
}

void kv_cache_seq_setup(kv_cache *c, int32_t seq, const int32_t *capacity)
{
	int32_t *slots = c->n_slots + (int64_t)seq * c->n_layers * c->n_kv;
	for (int64_t i = 0; i < (int64_t)c->n_layers * c->n_kv; i++) {
		int32_t n = slots_for(capacity[i]);
		slots[i] = n < c->ring_stride ? n : c->ring_stride;
	}
}

int64_t kv_cache_pages_for(const kv_cache *c, const int32_t *capacity, int64_t len)
{
	int64_t pages = 0;
	/* positions [0, len) touch ceil(len / P) logical pages; the ring keeps at most n_slots of them */
	int64_t lp = (len + AAH_PAGE_LEN - 1) / AAH_PAGE_LEN;
	for (int64_t i = 0; i < (int64_t)c->n_layers * c->n_kv; i++) {
		int64_t slots = slots_for(capacity[i]) < c->ring_stride ? slots_for(capacity[i]) : c->ring_stride;
		pages += lp < slots ? lp : slots;
	}
	return pages;
}

/* The logical pages of [pos0, pos0 + n) that a ring of `slots` keeps after the write: [lo, hi]. */
static void kept_pages(int64_t pos0, int64_t n, int64_t slots, int64_t *lo, int64_t *hi)
{
	*hi = (pos0 + n - 1) / AAH_PAGE_LEN;
	*lo = pos0 / AAH_PAGE_LEN;
	if (*lo < *hi - slots + 1)
		*lo = *hi - slots + 1;
}

/* A free page, for a ring slot. */
static int32_t page_take(kv_cache *c)
{
	int32_t p = c->free_pages[--c->n_free];
	c->page_refs[p] = 1;
	c->ring_refs[p] = 1;
	c->pages_used++;
	c->pages_in_rings++;
	return p;
}

/* One ring slot more / fewer holds page. */
static void ring_hold(kv_cache *c, int32_t page)
{
	if (c->ring_refs[page]++ == 0)
		c->pages_in_rings++;
	c->page_refs[page]++;
}

static void ring_drop(kv_cache *c, int32_t page)
{
	if (--c->ring_refs[page] == 0)
		c->pages_in_rings--;
	kv_cache_page_unref(c, page);
}

int32_t kv_cache_page_alloc(kv_cache *c)
{
	if (c->n_free == 0)
		return -1;
	int32_t p = c->free_pages[--c->n_free];
	c->page_refs[p] = 1;
	c->pages_used++;
	return p;
}

void kv_cache_page_ref(kv_cache *c, int32_t page)
{
	c->page_refs[page]++;
}

void kv_cache_page_unref(kv_cache *c, int32_t page)
{
	if (--c->page_refs[page] == 0) {
		c->free_pages[c->n_free++] = page;
		c->pages_used--;
	}
}

int64_t kv_cache_reserve_need(const kv_cache *c, int32_t seq, int64_t pos0, int64_t n)
{
	if (n <= 0)
		return 0;
	const int32_t *rings = c->rings + (int64_t)seq * c->n_layers * c->n_kv * c->ring_stride;
	const int32_t *n_slots = c->n_slots + (int64_t)seq * c->n_layers * c->n_kv;
	int64_t need = 0;
	for (int64_t h = 0; h < (int64_t)c->n_layers * c->n_kv; h++) {
		int64_t lo, hi, slots = n_slots[h];
		kept_pages(pos0, n, slots, &lo, &hi);
		for (int64_t lp = lo; lp <= hi; lp++) {
			int32_t page = rings[h * c->ring_stride + lp % slots];
			need += page < 0 || c->page_refs[page] > 1;
		}
	}
	return need;
}

/* Visits the slots kv_cache_reserve(seq, pos0, n) fills: mark counts those that take a page, as if the earlier marks'
 * copies had been made (page_dec), and marks its own; clear resets the marks of its pages. */
static int64_t need_walk(kv_cache *c, int32_t seq, int64_t pos0, int64_t n, bool mark)
{
	if (n <= 0)
		return 0;
	const int32_t *rings = c->rings + (int64_t)seq * c->n_layers * c->n_kv * c->ring_stride;
	const int32_t *n_slots = c->n_slots + (int64_t)seq * c->n_layers * c->n_kv;
	int64_t need = 0;
	for (int64_t h = 0; h < (int64_t)c->n_layers * c->n_kv; h++) {
		int64_t lo, hi, slots = n_slots[h];
		kept_pages(pos0, n, slots, &lo, &hi);
		for (int64_t lp = lo; lp <= hi; lp++) {
			int32_t page = rings[h * c->ring_stride + lp % slots];
			if (page < 0)
				need += mark;
			else if (!mark)
				c->page_dec[page] = 0;
			else if (c->page_refs[page] - c->page_dec[page] > 1) {
				need++;
				c->page_dec[page]++;   /* this copy leaves the page one holder fewer for the writers after it */
			}
		}
	}
	return need;
}

int64_t kv_cache_need_mark(kv_cache *c, int32_t seq, int64_t pos0, int64_t n)
{
	return need_walk(c, seq, pos0, n, true);
}

void kv_cache_need_clear(kv_cache *c, int32_t seq, int64_t pos0, int64_t n)
{
	need_walk(c, seq, pos0, n, false);
}

int kv_cache_reserve(kv_cache *c, int32_t seq, int64_t pos0, int64_t n)
{
	if (n <= 0)
		return 0;
	if (kv_cache_reserve_need(c, seq, pos0, n) > c->n_free)
		return -1;
	int32_t *rings = c->rings + (int64_t)seq * c->n_layers * c->n_kv * c->ring_stride;
	const int32_t *n_slots = c->n_slots + (int64_t)seq * c->n_layers * c->n_kv;
	char *pages = c->pool.data;
	for (int64_t h = 0; h < (int64_t)c->n_layers * c->n_kv; h++) {
		int64_t lo, hi, slots = n_slots[h];
		kept_pages(pos0, n, slots, &lo, &hi);
		for (int64_t lp = lo; lp <= hi; lp++) {
			int32_t *slot = &rings[h * c->ring_stride + lp % slots];
			if (*slot < 0) {
				*slot = page_take(c);
				c->seq_pages[seq]++;
			} else if (c->page_refs[*slot] > 1) {
				/* shared (a fork, the prefix cache): this sequence writes its own copy. The whole page is copied —
				 * the rows this write keeps (a partly written page), and the rows of an older logical page that the
				 * ring overwrites, which this step's attention reads before kv_store replaces them */
				int32_t fresh = page_take(c);
				c->be->iface.buf_copy(c->be, pages + (size_t)fresh * c->page_bytes,
				                      pages + (size_t)*slot * c->page_bytes, c->page_bytes);
				ring_drop(c, *slot);
				*slot = fresh;
			}
		}
	}
	return 0;
}

void kv_cache_release(kv_cache *c, int32_t seq)
{
	int64_t n = (int64_t)c->n_layers * c->n_kv * c->ring_stride;
	int32_t *rings = c->rings + (int64_t)seq * n;
	for (int64_t i = 0; i < n; i++)
		if (rings[i] >= 0) {
			ring_drop(c, rings[i]);
			rings[i] = -1;
		}
	c->seq_pages[seq] = 0;
}

int kv_cache_fork(kv_cache *c, aah_backend *b, int32_t dst, int32_t src)
{
	(void)b;
	const int64_t heads = (int64_t)c->n_layers * c->n_kv, n = heads * c->ring_stride;
	memcpy(c->n_slots + (int64_t)dst * heads, c->n_slots + (int64_t)src * heads, (size_t)heads * sizeof *c->n_slots);
	const int32_t *from = c->rings + (int64_t)src * n;
	int32_t *to = c->rings + (int64_t)dst * n;
	for (int64_t i = 0; i < n; i++) {
		to[i] = from[i];
		if (from[i] >= 0)
			ring_hold(c, from[i]);
	}
	c->seq_pages[dst] = c->seq_pages[src];
	return 0;
}

void kv_cache_seq_adopt(kv_cache *c, int32_t seq, int32_t layer, int32_t head, int32_t slot, int32_t page)
{
	int32_t *r = c->rings + (((int64_t)seq * c->n_layers + layer) * c->n_kv + head) * c->ring_stride + slot;
	ring_hold(c, page);
	*r = page;
	c->seq_pages[seq]++;
}
