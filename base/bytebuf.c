/* base/bytebuf.c — the growing byte buffer of bytebuf.h. */
#include "base/bytebuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int aah_bytebuf_put(aah_bytebuf *b, const void *s, size_t n)
{
	if (b->oom)
		return -1;
	if (n > b->cap - b->n) {
		if (n > SIZE_MAX / 2 - b->n) {   /* no capacity could hold it: doubling would wrap */
			b->oom = true;
			return -1;
		}
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n)
			cap *= 2;
		unsigned char *q = realloc(b->p, cap);
		if (!q) {
			b->oom = true;
			return -1;
		}
		b->p = q;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

void aah_bytebuf_free(aah_bytebuf *b)
{
	free(b->p);
	*b = (aah_bytebuf){ 0 };
}
