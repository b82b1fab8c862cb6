/* tests/fuzz/fuzz_reasoning.c — libFuzzer target for the reasoning/content split (server/reasoning.h): any answer,
 * any start, cut into pieces where the input says; the pieces must stay within the room the interface promises, never
 * put reasoning after content, and join to what the whole answer gives in one feed; the token count stays in bounds.
 * Input: byte 0 picks the start (mod 3), byte 1 the piece length seed, the rest is the answer. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/reasoning.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/reasoning";

/* Splits text whole (cut == 0) or in pieces of 1 … cut bytes (lengths drawn from a seeded sequence); out's buffers
 * take the joined result. Aborts on a broken promise. */
static void split(const uint8_t *text, size_t len, reasoning_start start, unsigned cut, reasoning_split *s, char *r,
                  size_t *rn, char *c, size_t *cn)
{
	reasoning_init(s, start);
	*rn = *cn = 0;
	char *rb = malloc(len + REASONING_MAX_HELD + 1), *cb = malloc(len + REASONING_MAX_HELD + 1);
	if (!rb || !cb)
		abort();
	uint32_t x = cut * 2654435761u + 1;
	size_t at = 0;
	do {
		size_t n = len - at;
		if (cut) {
			x ^= x << 13, x ^= x >> 17, x ^= x << 5;
			size_t want = 1 + x % cut;
			n = want < n ? want : n;
		}
		reasoning_out o = { rb, cb, 0, 0 };
		reasoning_feed(s, (const char *)text + at, n, &o);
		at += n;
		if (at == len)
			reasoning_finish(s, &o);
		if (o.reasoning_len + o.content_len > n + REASONING_MAX_HELD || (*cn > 0 && o.reasoning_len > 0))
			abort();
		memcpy(r + *rn, rb, o.reasoning_len);
		*rn += o.reasoning_len;
		memcpy(c + *cn, cb, o.content_len);
		*cn += o.content_len;
	} while (at < len);
	free(rb);
	free(cb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	const reasoning_start start = (reasoning_start)(data[0] % 3);
	const unsigned cut = data[1];
	const uint8_t *text = data + 2;
	const size_t len = size - 2;
	char *r1 = malloc(len + 1), *c1 = malloc(len + 1), *r2 = malloc(len + 1), *c2 = malloc(len + 1);
	size_t *off = malloc((len + 1) * sizeof *off);
	if (!r1 || !c1 || !r2 || !c2 || !off)
		abort();
	reasoning_split whole, pieces;
	size_t rn1, cn1, rn2, cn2;
	split(text, len, start, 0, &whole, r1, &rn1, c1, &cn1);
	split(text, len, start, cut, &pieces, r2, &rn2, c2, &cn2);
	if (rn1 != rn2 || cn1 != cn2 || memcmp(r1, r2, rn1) || memcmp(c1, c2, cn1) || whole.block != pieces.block ||
	    whole.content_from != pieces.content_from)
		abort();
	/* tags are dropped, nothing else: the parts never hold more than the answer, and with no block all is content */
	if (rn1 + cn1 > len || (!whole.block && (rn1 != 0 || cn1 != len || memcmp(c1, text, len))) ||
	    (start == REASONING_START_OFF && whole.block))
		abort();
	/* one token per byte: the count is the bytes before the content (all of them while the block is open) */
	for (size_t i = 0; i < len; i++)
		off[i] = i;
	int32_t n = (int32_t)(len < 100000 ? len : 100000);
	int32_t k = reasoning_count_tokens(&whole, off, n, 1);
	int32_t want = !whole.block ? 0
	             : whole.content_from == SIZE_MAX ? n + 1
	             : (int32_t)(whole.content_from < (size_t)n ? whole.content_from : (size_t)n);
	if (k != want)
		abort();
	free(r1);
	free(c1);
	free(r2);
	free(c2);
	free(off);
	return 0;
}
