/* engine/grammar/grammar_cache.c — grammars by text (grammar_cache.h). A short list searched by hash: the cache
 * holds tens of grammars, and a lookup costs nothing beside a compile. */
#include "engine/grammar/grammar_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
	uint64_t hash;
	char *text;
	size_t len;
	grammar *g;
	uint64_t used;             /* tick of the last lookup */
} entry;

struct grammar_cache {
	pthread_mutex_t mu;
	const grammar_vocab *v;
	entry *e;
	int32_t n, cap;
	uint64_t tick;
	grammar_cache_stats st;
};

static uint64_t text_hash(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

grammar_cache *grammar_cache_new(const grammar_vocab *v, int32_t max_entries)
{
	grammar_cache *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->cap = max_entries > 0 ? max_entries : 64;
	c->e = calloc((size_t)c->cap, sizeof *c->e);
	if (!c->e) {
		free(c);
		return NULL;
	}
	c->v = v;
	pthread_mutex_init(&c->mu, NULL);
	return c;
}

void grammar_cache_free(grammar_cache *c)
{
	if (!c)
		return;
	for (int32_t i = 0; i < c->n; i++) {
		free(c->e[i].text);
		grammar_unref(c->e[i].g);
	}
	free(c->e);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

const grammar_vocab *grammar_cache_vocab(const grammar_cache *c)
{
	return c->v;
}

static grammar *lookup(grammar_cache *c, uint64_t h, const char *s, size_t n)
{
	for (int32_t i = 0; i < c->n; i++)
		if (c->e[i].hash == h && c->e[i].len == n && !memcmp(c->e[i].text, s, n)) {
			c->e[i].used = ++c->tick;
			return grammar_ref(c->e[i].g);
		}
	return NULL;
}

grammar *grammar_cache_get(grammar_cache *c, const char *s, size_t n, bool *hit, char *err, size_t err_len)
{
	uint64_t h = text_hash(s, n);
	pthread_mutex_lock(&c->mu);
	grammar *g = lookup(c, h, s, n);
	if (g)
		c->st.hits++;
	pthread_mutex_unlock(&c->mu);
	*hit = g != NULL;
	if (g)
		return g;
	/* compile outside the lock: another request's lookup need not wait for it */
	grammar *fresh = grammar_compile(c->v, s, n, err, err_len);
	pthread_mutex_lock(&c->mu);
	c->st.misses++;
	if (!fresh) {
		c->st.errors++;
		pthread_mutex_unlock(&c->mu);
		return NULL;
	}
	c->st.compile_s_total += grammar_compile_seconds(fresh);
	g = lookup(c, h, s, n);          /* compiled meanwhile by another request: keep one */
	if (g) {
		pthread_mutex_unlock(&c->mu);
		grammar_unref(fresh);
		return g;
	}
	char *copy = malloc(n ? n : 1);
	if (copy) {
		memcpy(copy, s, n);
		int32_t slot = c->n;
		if (c->n == c->cap) {       /* the least recently used goes */
			slot = 0;
			for (int32_t i = 1; i < c->n; i++)
				if (c->e[i].used < c->e[slot].used)
					slot = i;
			free(c->e[slot].text);
			grammar_unref(c->e[slot].g);
		} else {
			c->n++;
		}
		c->e[slot] = (entry){ h, copy, n, grammar_ref(fresh), ++c->tick };
	}
	c->st.entries = c->n;
	pthread_mutex_unlock(&c->mu);
	return fresh;
}

void grammar_cache_stats_get(grammar_cache *c, grammar_cache_stats *out)
{
	pthread_mutex_lock(&c->mu);
	*out = c->st;
	out->entries = c->n;
	pthread_mutex_unlock(&c->mu);
}
