/* tools/eval/subset.h — which items of a task file an evaluation takes: the first N (--limit N), or a seeded sample
 * (--sample N --seed S) drawn with a generator of our own (splitmix64, integer arithmetic only), so that the same
 * arguments select the same items on any machine, whatever its C library. */
#ifndef AAH_EVAL_SUBSET_H
#define AAH_EVAL_SUBSET_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eval_subset_spec {
	int64_t limit;    /* first N items; -1: no limit */
	int64_t sample;   /* a seeded sample of N items; -1: none (limit and sample never both) */
	uint64_t seed;
} eval_subset_spec;

uint64_t eval_rng_next(uint64_t *state);                  /* splitmix64 */
uint64_t eval_rng_below(uint64_t *state, uint64_t n);     /* uniform in [0, n), n >= 1, by rejection */

/* The selected item indices of a file of n items, ascending (the file's order), into *out (the caller frees);
 * returns their count. A sample of N >= n items is all of them. The seed is mixed with the task's name, so that two
 * tasks of the same size do not get the same positions. */
int64_t eval_subset_select(const eval_subset_spec *spec, const char *task, int64_t n, int64_t **out);

#ifdef __cplusplus
}
#endif
#endif
