/* tools/eval/pyrandom.c — MT19937 and CPython 3.11's shuffle/sample algorithms (see pyrandom.h). The generator is
 * Matsumoto and Nishimura's reference; the seeding follows CPython's random_seed (the absolute value of the int as
 * 32-bit words, least significant first, into init_by_array); _randbelow draws n.bit_length() bits and rejects. */
#include "tools/eval/pyrandom.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "tools/eval/util.h"

#define MT_N 624
#define MT_M 397

static void init_genrand(py_random *r, uint32_t s)
{
	r->mt[0] = s;
	for (int i = 1; i < MT_N; i++)
		r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
	r->index = MT_N;
}

static void init_by_array(py_random *r, const uint32_t *key, int len)
{
	init_genrand(r, 19650218u);
	int i = 1, j = 0;
	for (int k = MT_N > len ? MT_N : len; k; k--) {
		r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
		i++;
		j++;
		if (i >= MT_N) {
			r->mt[0] = r->mt[MT_N - 1];
			i = 1;
		}
		if (j >= len)
			j = 0;
	}
	for (int k = MT_N - 1; k; k--) {
		r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
		i++;
		if (i >= MT_N) {
			r->mt[0] = r->mt[MT_N - 1];
			i = 1;
		}
	}
	r->mt[0] = 0x80000000u;
	r->index = MT_N;
}

void py_random_seed(py_random *r, uint64_t seed)
{
	uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
	init_by_array(r, key, key[1] ? 2 : 1);   /* seed 0 is the one word 0, as CPython */
}

uint32_t py_random_u32(py_random *r)
{
	static const uint32_t mag01[2] = {0, 0x9908b0dfu};
	if (r->index >= MT_N) {
		int k;
		for (k = 0; k < MT_N - MT_M; k++) {
			uint32_t y = (r->mt[k] & 0x80000000u) | (r->mt[k + 1] & 0x7fffffffu);
			r->mt[k] = r->mt[k + MT_M] ^ (y >> 1) ^ mag01[y & 1];
		}
		for (; k < MT_N - 1; k++) {
			uint32_t y = (r->mt[k] & 0x80000000u) | (r->mt[k + 1] & 0x7fffffffu);
			r->mt[k] = r->mt[k + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 1];
		}
		uint32_t y = (r->mt[MT_N - 1] & 0x80000000u) | (r->mt[0] & 0x7fffffffu);
		r->mt[MT_N - 1] = r->mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 1];
		r->index = 0;
	}
	uint32_t y = r->mt[r->index++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	y ^= y >> 18;
	return y;
}

uint32_t py_random_below(py_random *r, uint32_t n)
{
	int k = 0;   /* n.bit_length() */
	for (uint32_t v = n; v; v >>= 1)
		k++;
	for (;;) {
		uint32_t x = py_random_u32(r) >> (32 - k);   /* getrandbits(k), k <= 32 */
		if (x < n)
			return x;
	}
}

void py_random_shuffle(py_random *r, int32_t *perm, int32_t n)
{
	for (int32_t i = n - 1; i > 0; i--) {
		int32_t j = (int32_t)py_random_below(r, (uint32_t)i + 1);
		int32_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
}

int py_random_sample(py_random *r, int32_t n, int32_t k, int32_t *out)
{
	if (k < 0 || k > n)
		return -1;
	/* CPython: a pool when n is small against k (setsize), else rejection through a set */
	int64_t setsize = 21;
	if (k > 5)
		setsize += (int64_t)pow(4.0, ceil(log((double)k * 3) / log(4.0)));
	if (n <= setsize) {
		int32_t *pool = xmalloc((size_t)(n ? n : 1) * sizeof *pool);
		for (int32_t i = 0; i < n; i++)
			pool[i] = i;
		for (int32_t i = 0; i < k; i++) {
			int32_t j = (int32_t)py_random_below(r, (uint32_t)(n - i));
			out[i] = pool[j];
			pool[j] = pool[n - i - 1];
		}
		free(pool);
	} else {
		bool *taken = xcalloc((size_t)n, sizeof *taken);
		for (int32_t i = 0; i < k; i++) {
			int32_t j;
			do
				j = (int32_t)py_random_below(r, (uint32_t)n);
			while (taken[j]);
			taken[j] = true;
			out[i] = j;
		}
		free(taken);
	}
	return 0;
}
