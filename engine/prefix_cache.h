/* engine/prefix_cache.h — the prefix cache's blocks: a tree of 16-token blocks (one KV page long) per regime and tenant,
 * each holding references on the KV pages its positions left in the pool, per (layer, KV head). Only bookkeeping lives
 * here: engine.c decides what a hit needs, spills the pages a windowed ring drops during a prompt, and restores a hit
 * into a sequence (docs/prefix_cache.md has the design).
 *
 * A block is found by a hash chained from its parent's (so a match is always a whole prefix) over its tokens, the
 * regime and, at the root, the tenant (cache salt); the tokens, the parent and the root's tenant are compared too, so a
 * hash collision can never give a wrong hit nor a hit across tenants. Every head's page of every block is kept, a
 * windowed head's too: a page its ring dropped during the prompt was spilled to a page of the cache's own, so a hit is
 * possible at every boundary in every regime.
 *
 * Eviction, when the pool or the byte cap runs short: the least recently used leaf block, whole; among equals the
 * deepest. A hit or an insert marks its whole chain used, so a parent is never older than its children: a prefix's
 * tail (its out-of-window pages with it) goes before the beginning other prompts share, and a beginning goes only
 * once no cached prompt through it is newer. A page spilled for a prompt in progress takes the pool only by evicting
 * blocks older than the prompt's own (prefix_cache_evict_before), never the running sequences' pages (they are not
 * free to take). docs/prefix_cache.md has the alternatives measured. */
#ifndef AAH_PREFIX_CACHE_H
#define AAH_PREFIX_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/kv_cache.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct prefix_block {
	struct prefix_block *parent;   /* the block before it; NULL at position 0 */
	struct prefix_block *hnext;    /* the next in its hash bucket */
	uint64_t hash;                 /* chained: hash(parent's hash, regime, tokens) */
	int32_t regime;
	char *tenant;                  /* the root's: the cache salt it was made under (NULL: none); children inherit it */
	int32_t depth;                 /* block index: positions [16·depth, 16·depth + 16) */
	int32_t n_children;
	int32_t at;                    /* index in prefix_cache.all */
	uint64_t last_used;            /* prefix_cache.tick when last inserted or hit */
	int32_t tokens[AAH_PAGE_LEN];
	int32_t n_pages;               /* pages it holds (≥ 0 entries of pages) */
	int32_t *pages;                /* (n_layers · n_kv) page id holding these positions of that head, or -1 */
	/* Prompt log-probabilities of the block's tokens (echo requests), when a request computed them: logprob
	 * (AAH_PAGE_LEN) of token 16·depth + j given the tokens before it (NaN for token 0), and its lp_top best
	 * (lp_ids, lp_vals: (AAH_PAGE_LEN, lp_top)). lp_top -1: none. */
	int32_t lp_top;
	float *lp;
	int32_t *lp_ids;
	float *lp_vals;
} prefix_block;

typedef struct prefix_cache {
	kv_cache *kv;                  /* borrowed: the pool the pages are in */
	int32_t n_heads;               /* n_layers · n_kv */
	int64_t max_pages;             /* pages the blocks may hold at most (the byte cap) */
	prefix_block **buckets;        /* (n_buckets) hash chains */
	int32_t n_buckets;             /* a power of two */
	prefix_block **all;            /* (cap_blocks) every block, for eviction */
	int32_t n_blocks, cap_blocks;
	uint64_t tick;
	int64_t pages;                 /* pages the blocks hold (some shared with running sequences) */
	uint64_t evictions;            /* blocks evicted */
} prefix_cache;

/* max_bytes: the most the blocks may hold (0: the whole pool). Returns 0, or -1 when out of memory. Free with
 * prefix_cache_free, which drops every block's pages. */
int prefix_cache_init(prefix_cache *pc, kv_cache *kv, int64_t max_bytes);
void prefix_cache_free(prefix_cache *pc);

/* The chain of blocks that holds tokens [0, 16·n_blocks) under regime and tenant (NULL or "": none): out[0 … k-1];
 * returns k ≤ n_blocks, the blocks found one after another from position 0. */
int32_t prefix_cache_lookup(const prefix_cache *pc, int32_t regime, const char *tenant, const int32_t *tokens,
                            int32_t n_blocks, prefix_block **out);
/* The child of parent (NULL: position 0, under tenant) with these AAH_PAGE_LEN tokens, made (holding no pages) when
 * there is none. NULL when out of memory. */
prefix_block *prefix_cache_child(prefix_cache *pc, prefix_block *parent, int32_t regime, const char *tenant,
                                 const int32_t *tokens);
/* Gives block b a reference on page for head h (it holds none there yet). */
void prefix_cache_block_hold(prefix_cache *pc, prefix_block *b, int32_t h, int32_t page);
/* Marks blocks [0, n) of a chain as just used. */
void prefix_cache_touch(prefix_cache *pc, prefix_block *const *chain, int32_t n);
/* Evicts the least recently used leaf block (its references go; pages nobody else holds return to the pool).
 * Returns false when there is nothing to evict. */
bool prefix_cache_evict_one(prefix_cache *pc);
/* The same, among the blocks last used before tick (a prompt in progress passes the tick of its last insert, so that
 * it never evicts its own blocks nor newer prompts' to spill more). False when there is none. */
bool prefix_cache_evict_before(prefix_cache *pc, uint64_t tick);
/* Evicts least recently used leaves while the blocks hold more than the cap. */
void prefix_cache_trim(prefix_cache *pc);

#ifdef __cplusplus
}
#endif
#endif
