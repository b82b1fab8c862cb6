/* tools/eval/pyrandom.h — CPython's random.Random (MT19937 seeded by init_by_array from an int seed), with the
 * methods lm-evaluation-harness draws from: shuffle (GPQA's answer order) and sample (few-shot examples,
 * random.Random(1234).sample(docs, k)). Same seed, same calls, same numbers as Python 3.11. */
#ifndef AAH_EVAL_PYRANDOM_H
#define AAH_EVAL_PYRANDOM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct py_random {
	uint32_t mt[624];
	int index;
} py_random;

void py_random_seed(py_random *r, uint64_t seed);   /* random.seed(seed) for 0 <= seed < 2^64 */
uint32_t py_random_u32(py_random *r);                /* genrand_uint32 */
uint32_t py_random_below(py_random *r, uint32_t n);  /* _randbelow(n), n >= 1 */
/* random.shuffle of n items by index: perm[0..n) is permuted in place. */
void py_random_shuffle(py_random *r, int32_t *perm, int32_t n);
/* random.sample(range(n), k): out[0..k) gets the chosen indices in the order drawn. 0 on success, -1 when k > n. */
int py_random_sample(py_random *r, int32_t n, int32_t k, int32_t *out);

#ifdef __cplusplus
}
#endif
#endif
