/* base/bits.h — bit sets of 32-bit words: bit i of a set is bit (i & 31) of word i >> 5. A token mask (one bit per
 * logits column), a byte class (256 bits) and a set of seen tokens all use it. */
#ifndef AAH_BASE_BITS_H
#define AAH_BASE_BITS_H

#include <stdbool.h>
#include <stdint.h>

static inline bool bits_get(const uint32_t *bits, int32_t i)
{
	return bits[i >> 5] >> (i & 31) & 1u;
}

static inline void bits_set(uint32_t *bits, int32_t i)
{
	bits[i >> 5] |= 1u << (i & 31);
}

/* Words a set of n bits takes. */
static inline int64_t bits_words(int64_t n)
{
	return (n + 31) / 32;
}

#endif
