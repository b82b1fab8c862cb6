/* engine/kv_cache.h — the paged KV cache: one page pool in backend memory and, for every sequence, layer and
 * KV head, a ring of page ids sized by that head's capacity. Pages enter on first use and leave when the
 * sequence closes; a ring that wraps overwrites its oldest page in place, so memory stays ≤ capacity + a page.
 * Pages are reference-counted: a forked sequence and the prefix cache (engine/prefix_cache.h) share them, and a
 * shared page is never written: a write to it first copies it to a fresh page of the writer's own (copy-on-write). */
#ifndef AAH_KV_CACHE_H
#define AAH_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kv_cache {
	aah_kv_pool pool;          /* pages in backend memory */
	size_t page_bytes;         /* 2 · AAH_PAGE_LEN · head_dim · element size */
	int32_t n_layers, n_kv;
	int32_t max_seqs;
	int32_t ring_stride;       /* the largest n_slots: each (seq, layer, head) ring is this long in `rings` */
	int32_t *n_slots;          /* (max_seqs, n_layers, n_kv) ceil(capacity / AAH_PAGE_LEN) + 1, set per sequence */
	int32_t *rings;            /* (max_seqs, n_layers, n_kv, ring_stride) page id, -1 = none */
	int64_t *seq_pages;        /* (max_seqs) pages each sequence holds */
	int32_t *free_pages;       /* stack of free page ids; the lowest ids on top, so few pages get touched */
	int32_t n_free;
	int64_t pages_used;        /* pages not free: n_pages − n_free */
	int32_t *page_refs;        /* (n_pages) ring slots and prefix-cache blocks holding each page; 0 = free */
	int32_t *ring_refs;        /* (n_pages) the ring slots among them */
	int32_t *page_dec;         /* (n_pages) scratch of kv_cache_need_mark: copies a batch's earlier writers made; 0 */
	int64_t pages_in_rings;    /* pages some ring holds (what the sequences hold, each shared page once) */
	aah_backend *be;           /* the pool's backend (copy-on-write copies through its buf_copy); borrowed */
} kv_cache;

/* max_capacity: the largest capacity any head may have (the context length). n_pages: the pool size. Allocates the
 * pool through the backend (the CPU's memory is committed by the OS only as pages are written). Returns 0, or -1
 * with a message. */
int kv_cache_init(kv_cache *c, aah_backend *b, int32_t n_layers, int32_t n_kv, int32_t head_dim, aah_dtype type,
                  int32_t max_capacity, int32_t max_seqs, int64_t n_pages, char *err, size_t err_len);
void kv_cache_free(kv_cache *c, aah_backend *b);

/* Sizes seq's rings: capacity (n_layers, n_kv), each ≤ max_capacity. The sequence must hold no pages. */
void kv_cache_seq_setup(kv_cache *c, int32_t seq, const int32_t *capacity);

/* Pages a sequence of `len` positions with these capacities (n_layers, n_kv) holds at most (admission control). */
int64_t kv_cache_pages_for(const kv_cache *c, const int32_t *capacity, int64_t len);

/* Gives seq the pages that positions [pos0, pos0 + n) will be written to (those its rings keep): a fresh page for an
 * empty slot, and a fresh copy for a slot whose page is shared (its reference moves to the copy; the copy keeps the
 * old rows, which this step's attention may still read before kv_store overwrites them).
 * Returns 0, or -1 when the pool has too few free pages (then nothing is taken). */
int kv_cache_reserve(kv_cache *c, int32_t seq, int64_t pos0, int64_t n);
/* Free pages kv_cache_reserve(c, seq, pos0, n) takes. */
int64_t kv_cache_reserve_need(const kv_cache *c, int32_t seq, int64_t pos0, int64_t n);
/* The same for a batch of reservations made one after another (engine_forward's items): call mark for each in order
 * — the sum of its returns is what they take together (a page two of them share is copied by the first only; the
 * second then holds it alone) — then clear for each, which undoes the marks. */
int64_t kv_cache_need_mark(kv_cache *c, int32_t seq, int64_t pos0, int64_t n);
void kv_cache_need_clear(kv_cache *c, int32_t seq, int64_t pos0, int64_t n);
/* Drops seq's reference on every page of its rings (a page nobody else holds returns to the pool). */
void kv_cache_release(kv_cache *c, int32_t seq);
/* Makes dst, which holds no pages, a copy of src: the same ring sizes and the same pages, shared (copy-on-write), so
 * that dst continues exactly where src stands. Takes no free page. Returns 0. */
int kv_cache_fork(kv_cache *c, aah_backend *b, int32_t dst, int32_t src);
/* A free page with one holder, the caller (no ring): a prefix cache's spilled page (engine.c). -1 when none is free. */
int32_t kv_cache_page_alloc(kv_cache *c);
/* One more holder of page (a prefix-cache block). */
void kv_cache_page_ref(kv_cache *c, int32_t page);
/* One holder fewer; the page returns to the pool when none is left. */
void kv_cache_page_unref(kv_cache *c, int32_t page);
/* Puts page into seq's ring of (layer, head) at slot `slot` (empty), with a reference of its own: a restored prefix. */
void kv_cache_seq_adopt(kv_cache *c, int32_t seq, int32_t layer, int32_t head, int32_t slot, int32_t page);

/* (n_kv, ring_stride) page ids of seq at layer; n_slots of layer. */
static inline const int32_t *kv_cache_rings(const kv_cache *c, int32_t seq, int32_t layer)
{
	return c->rings + (((int64_t)seq * c->n_layers + layer) * c->n_kv) * c->ring_stride;
}
static inline const int32_t *kv_cache_slots(const kv_cache *c, int32_t seq, int32_t layer)
{
	return c->n_slots + ((int64_t)seq * c->n_layers + layer) * c->n_kv;
}

#ifdef __cplusplus
}
#endif
#endif
