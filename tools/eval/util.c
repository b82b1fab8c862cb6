/* tools/eval/util.c — allocation, strings, hashes, file reads and the clock for aah-eval (see util.h). */
#include "tools/eval/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void out_of_memory(void)
{
	fputs("aah-eval: out of memory\n", stderr);
	exit(1);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		out_of_memory();
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		out_of_memory();
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		out_of_memory();
	return q;
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	strbuf b = {0};
	va_list ap;
	va_start(ap, fmt);
	sb_vaddf(&b, fmt, ap);
	va_end(ap);
	return sb_take(&b);
}

static void sb_grow(strbuf *b, size_t extra)
{
	if (b->len + extra + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < b->len + extra + 1)
		cap *= 2;
	b->s = xrealloc(b->s, cap);
	b->cap = cap;
}

void sb_add(strbuf *b, const char *s, size_t n)
{
	sb_grow(b, n);
	if (n)
		memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = 0;
}

void sb_adds(strbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

void sb_vaddf(strbuf *b, const char *fmt, va_list ap)
{
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return;
	sb_grow(b, (size_t)n);
	vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
}

void sb_addf(strbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	sb_vaddf(b, fmt, ap);
	va_end(ap);
}

char *sb_take(strbuf *b)
{
	char *s = b->s ? b->s : xstrdup("");
	b->s = NULL;
	b->len = b->cap = 0;
	return s;
}

void sb_free(strbuf *b)
{
	free(b->s);
	b->s = NULL;
	b->len = b->cap = 0;
}

uint64_t eval_hash(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

uint64_t eval_hash_str(uint64_t h, const char *s)
{
	return eval_hash(h, s, strlen(s) + 1);
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void eval_hash_hex(const void *data, size_t n, char out[33])
{
	uint64_t a = eval_hash(EVAL_HASH_INIT, data, n);
	/* the second hash: every byte through a different multiplier and a final mix, so the two are independent */
	const unsigned char *p = data;
	uint64_t b = 0x6a09e667f3bcc909ull ^ (uint64_t)n;
	for (size_t i = 0; i < n; i++)
		b = (b ^ p[i]) * 0x9e3779b97f4a7c15ull + (b >> 29);
	b = mix64(b);
	snprintf(out, 33, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
}

char *eval_read_file(const char *path, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return NULL;
	}
	strbuf b = {0};
	char chunk[65536];
	size_t n;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		sb_add(&b, chunk, n);
	if (ferror(f)) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		fclose(f);
		sb_free(&b);
		return NULL;
	}
	fclose(f);
	*len = b.len;
	return sb_take(&b);
}

