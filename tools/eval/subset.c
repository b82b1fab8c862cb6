/* tools/eval/subset.c — --limit and --sample selections (see subset.h): a partial Fisher–Yates shuffle of the item
 * indices driven by splitmix64, then the chosen indices sorted back into file order. */
#include "tools/eval/subset.h"

#include <stdlib.h>

#include "tools/eval/util.h"

uint64_t eval_rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t eval_rng_below(uint64_t *state, uint64_t n)
{
	/* reject the top partial block of 2^64 so every value is equally likely */
	uint64_t limit = UINT64_MAX - UINT64_MAX % n;
	for (;;) {
		uint64_t x = eval_rng_next(state);
		if (x < limit)
			return x % n;
	}
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int64_t eval_subset_select(const eval_subset_spec *spec, const char *task, int64_t n, int64_t **out)
{
	int64_t *idx = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
	for (int64_t i = 0; i < n; i++)
		idx[i] = i;
	int64_t k = n;
	if (spec->sample >= 0 && spec->sample < n) {
		k = spec->sample;
		uint64_t state = spec->seed ^ eval_hash_str(EVAL_HASH_INIT, task);
		for (int64_t i = 0; i < k; i++) {
			int64_t j = i + (int64_t)eval_rng_below(&state, (uint64_t)(n - i));
			int64_t t = idx[i];
			idx[i] = idx[j];
			idx[j] = t;
		}
		qsort(idx, (size_t)k, sizeof *idx, cmp_i64);
	} else if (spec->sample < 0 && spec->limit >= 0 && spec->limit < n) {
		k = spec->limit;
	}
	*out = idx;
	return k;
}
