/* kernels/argmax.h — the first index of a row's maximum, shared by the sampler (engine/sampler.c) and the backends'
 * batched argmax_rows, so that a greedy token is the same whichever of them picked it. */
#ifndef AAH_ARGMAX_H
#define AAH_ARGMAX_H

#include <math.h>
#include <stdint.h>

/* The first index of the maximum of x[0 … n) (n ≥ 1; NaNs are never greater, as in a plain scan from index 0). One
 * pass in blocks of 64: each block's maximum in 16 lanes (vector max instructions), kept when it beats the best so
 * far; the first index is then sought from the start of the block where the best was first reached. Over a 152k
 * vocabulary (600 KB, read from L3 or memory) this is several times faster than a branchy scan. */
static inline int32_t aah_argmax(const float *x, int32_t n)
{
	float m = x[0];
	int32_t best = 0, i = 0;
	for (; i + 64 <= n; i += 64) {
		float lane[16];
		for (int32_t j = 0; j < 16; j++)
			lane[j] = -INFINITY;
		for (int32_t k = 0; k < 64; k += 16)
			for (int32_t j = 0; j < 16; j++)
				lane[j] = x[i + k + j] > lane[j] ? x[i + k + j] : lane[j];
		float bm = lane[0];
		for (int32_t j = 1; j < 16; j++)
			bm = lane[j] > bm ? lane[j] : bm;
		if (bm > m) {
			m = bm;
			best = i;
		}
	}
	for (; i < n; i++)
		if (x[i] > m) {
			m = x[i];
			best = i;
		}
	for (i = best; i < n; i++)
		if (x[i] == m)
			return i;
	return 0;   /* x[0] is NaN and nothing is greater: the scan's answer */
}

#endif
