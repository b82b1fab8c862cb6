/* engine/grammar/grammar_cache.h — compiled grammars kept by their GBNF text, so that the requests of one schema
 * compile it once and share its mask caches (grammar.h). Least recently used out past a count; a grammar still
 * held by a request stays alive (references) when the cache drops it. Thread-safe. */
#ifndef AAH_ENGINE_GRAMMAR_GRAMMAR_CACHE_H
#define AAH_ENGINE_GRAMMAR_GRAMMAR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/grammar/grammar.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct grammar_cache grammar_cache;

typedef struct grammar_cache_stats {
	uint64_t hits, misses;     /* lookups that found the grammar / compiled it (a failed compile is a miss) */
	uint64_t errors;           /* compiles refused */
	int32_t entries;
	double compile_s_total;    /* wall time of every compile */
} grammar_cache_stats;

/* A cache of at most max_entries grammars (0 = 64) compiled against v (borrowed). NULL when out of memory. */
grammar_cache *grammar_cache_new(const grammar_vocab *v, int32_t max_entries);
void grammar_cache_free(grammar_cache *c);
/* The grammar of the text, compiled now or found: a new reference (grammar_unref it), with *hit telling which. NULL
 * with err when the text does not compile. */
grammar *grammar_cache_get(grammar_cache *c, const char *gbnf, size_t len, bool *hit, char *err, size_t err_len);
void grammar_cache_stats_get(grammar_cache *c, grammar_cache_stats *out);
const grammar_vocab *grammar_cache_vocab(const grammar_cache *c);

#ifdef __cplusplus
}
#endif
#endif
