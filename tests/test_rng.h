/* tests/test_rng.h — the Check suites' seeded generator (splitmix64): the same numbers for the same seed on every
 * machine, so a failing case can be replayed. One state per suite (each includes this once). */
#ifndef AAH_TEST_RNG_H
#define AAH_TEST_RNG_H

#include <stdint.h>

static uint64_t rng_state;

static inline uint64_t rng_u64(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static inline float rng_f(void)
{
	return (float)((double)(rng_u64() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* p[0 … n) a uniformly shuffled permutation of 0 … n-1 (Fisher–Yates) */
static inline void rng_perm(int32_t *p, int32_t n)
{
	for (int32_t i = 0; i < n; i++)
		p[i] = i;
	for (int32_t i = n - 1; i > 0; i--) {
		int32_t j = (int32_t)(rng_u64() % (uint64_t)(i + 1)), tmp = p[i];
		p[i] = p[j];
		p[j] = tmp;
	}
}

#endif
