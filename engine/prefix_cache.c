/* engine/prefix_cache.c — blocks, their hash chains and their eviction (see prefix_cache.h).
 * Runs on the engine thread only; a block is allocated when a prompt is through, never on the decode path. */
#include "engine/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t h, uint64_t v)
{
	/* splitmix64's finaliser over h ^ v: every input bit moves every output bit */
	uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A root's seed: the tenant's bytes, so two tenants' chains land in different buckets (the string is compared too). */
static uint64_t tenant_hash(const char *tenant)
{
	uint64_t h = 0x5851f42d4c957f2dull;
	for (const unsigned char *p = (const unsigned char *)(tenant ? tenant : ""); *p; p++)
		h = mix(h, *p);
	return h;
}

static uint64_t block_hash(const prefix_block *parent, int32_t regime, const char *tenant, const int32_t *tokens)
{
	uint64_t h = mix(parent ? parent->hash : tenant_hash(tenant), (uint64_t)(uint32_t)regime);
	for (int32_t i = 0; i < AAH_PAGE_LEN; i++)
		h = mix(h, (uint64_t)(uint32_t)tokens[i]);
	return h;
}

int prefix_cache_init(prefix_cache *pc, kv_cache *kv, int64_t max_bytes)
{
	memset(pc, 0, sizeof *pc);
	pc->kv = kv;
	pc->n_heads = kv->n_layers * kv->n_kv;
	int64_t pool = kv->pool.n_pages;
	pc->max_pages = max_bytes > 0 ? max_bytes / (int64_t)kv->page_bytes : pool;
	if (pc->max_pages > pool)
		pc->max_pages = pool;
	/* about one bucket per block the pool could hold (a block holds at least one page of each full head) */
	int64_t want = pool / (pc->n_heads > 0 ? pc->n_heads : 1) + 64;
	pc->n_buckets = 64;
	while (pc->n_buckets < want && pc->n_buckets < (1 << 22))
		pc->n_buckets <<= 1;
	pc->buckets = calloc((size_t)pc->n_buckets, sizeof *pc->buckets);
	return pc->buckets ? 0 : -1;
}

static void block_free(prefix_block *b)
{
	free(b->tenant);
	free(b->pages);
	free(b->lp);
	free(b->lp_ids);
	free(b->lp_vals);
	free(b);
}

/* Unlinks b (a leaf) from its bucket, the list and its parent, and drops its pages. */
static void block_remove(prefix_cache *pc, prefix_block *b)
{
	prefix_block **p = &pc->buckets[b->hash & (uint64_t)(pc->n_buckets - 1)];
	while (*p != b)
		p = &(*p)->hnext;
	*p = b->hnext;
	pc->all[b->at] = pc->all[--pc->n_blocks];
	pc->all[b->at]->at = b->at;
	if (b->parent)
		b->parent->n_children--;
	for (int32_t h = 0; h < pc->n_heads; h++)
		if (b->pages[h] >= 0)
			kv_cache_page_unref(pc->kv, b->pages[h]);
	pc->pages -= b->n_pages;
	block_free(b);
}

void prefix_cache_free(prefix_cache *pc)
{
	/* leaves first, so that every removal is of a leaf; a parent comes after its children in no fixed order, so
	 * sweep until empty */
	while (pc->n_blocks > 0) {
		for (int32_t i = pc->n_blocks - 1; i >= 0; i--)
			if (i < pc->n_blocks && pc->all[i]->n_children == 0)
				block_remove(pc, pc->all[i]);
	}
	free(pc->buckets);
	free(pc->all);
	memset(pc, 0, sizeof *pc);
}

static bool same_tenant(const char *a, const char *b)
{
	return !strcmp(a ? a : "", b ? b : "");
}

static prefix_block *find(const prefix_cache *pc, const prefix_block *parent, int32_t regime, const char *tenant,
                          const int32_t *tokens, uint64_t h)
{
	for (prefix_block *b = pc->buckets[h & (uint64_t)(pc->n_buckets - 1)]; b; b = b->hnext)
		if (b->hash == h && b->parent == parent && b->regime == regime &&
		    !memcmp(b->tokens, tokens, sizeof b->tokens) && (parent || same_tenant(b->tenant, tenant)))
			return b;
	return NULL;
}

int32_t prefix_cache_lookup(const prefix_cache *pc, int32_t regime, const char *tenant, const int32_t *tokens,
                            int32_t n_blocks, prefix_block **out)
{
	const prefix_block *parent = NULL;
	int32_t k = 0;
	while (k < n_blocks) {
		const int32_t *t = tokens + (int64_t)k * AAH_PAGE_LEN;
		prefix_block *b = find(pc, parent, regime, tenant, t, block_hash(parent, regime, tenant, t));
		if (!b)
			break;
		out[k++] = b;
		parent = b;
	}
	return k;
}

prefix_block *prefix_cache_child(prefix_cache *pc, prefix_block *parent, int32_t regime, const char *tenant,
                                 const int32_t *tokens)
{
	uint64_t h = block_hash(parent, regime, tenant, tokens);
	prefix_block *b = find(pc, parent, regime, tenant, tokens, h);
	if (b)
		return b;
	if (pc->n_blocks == pc->cap_blocks) {
		int32_t cap = pc->cap_blocks ? pc->cap_blocks * 2 : 256;
		prefix_block **all = realloc(pc->all, (size_t)cap * sizeof *all);
		if (!all)
			return NULL;
		pc->all = all;
		pc->cap_blocks = cap;
	}
	b = calloc(1, sizeof *b);
	if (!b)
		return NULL;
	b->pages = malloc((size_t)pc->n_heads * sizeof *b->pages);
	if (!parent && tenant && *tenant)
		b->tenant = strdup(tenant);
	if (!b->pages || (!parent && tenant && *tenant && !b->tenant)) {
		free(b->pages);
		free(b->tenant);
		free(b);
		return NULL;
	}
	for (int32_t i = 0; i < pc->n_heads; i++)
		b->pages[i] = -1;
	b->parent = parent;
	b->hash = h;
	b->regime = regime;
	b->depth = parent ? parent->depth + 1 : 0;
	b->lp_top = -1;
	b->last_used = pc->tick;
	memcpy(b->tokens, tokens, sizeof b->tokens);
	prefix_block **bucket = &pc->buckets[h & (uint64_t)(pc->n_buckets - 1)];
	b->hnext = *bucket;
	*bucket = b;
	b->at = pc->n_blocks;
	pc->all[pc->n_blocks++] = b;
	if (parent)
		parent->n_children++;
	return b;
}

void prefix_cache_block_hold(prefix_cache *pc, prefix_block *b, int32_t h, int32_t page)
{
	kv_cache_page_ref(pc->kv, page);
	b->pages[h] = page;
	b->n_pages++;
	pc->pages++;
}

void prefix_cache_touch(prefix_cache *pc, prefix_block *const *chain, int32_t n)
{
	pc->tick++;
	for (int32_t i = 0; i < n; i++)
		chain[i]->last_used = pc->tick;
}

bool prefix_cache_evict_before(prefix_cache *pc, uint64_t tick)
{
	/* the least recently used leaf; among equals the deepest (a chain's ticks are equal after a touch, and its tail
	 * must go before its beginning). A linear scan: blocks are few (each holds a page of every head) and an eviction
	 * happens only when the pool runs short. */
	prefix_block *victim = NULL;
	for (int32_t i = 0; i < pc->n_blocks; i++) {
		prefix_block *b = pc->all[i];
		if (b->n_children == 0 && b->last_used < tick &&
		    (!victim || b->last_used < victim->last_used ||
		     (b->last_used == victim->last_used && b->depth > victim->depth)))
			victim = b;
	}
	if (!victim)
		return false;
	block_remove(pc, victim);
	pc->evictions++;
	return true;
}

bool prefix_cache_evict_one(prefix_cache *pc)
{
	return prefix_cache_evict_before(pc, UINT64_MAX);
}

void prefix_cache_trim(prefix_cache *pc)
{
	while (pc->pages > pc->max_pages && prefix_cache_evict_one(pc))
		;
}
