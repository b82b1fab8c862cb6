/* tests/fuzz/fuzz_tokenizer.c — libFuzzer target for the tokenizer: any bytes are encoded (refused or tokenized,
 * then checked to round-trip), read as id sequences to decode, and streamed token by token. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "models/tokenizer.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/tokenizer";

/* The real Qwen3 tokenizer from the cache when it is there, else the small one shipped in tests/data;
 * loaded once and never freed (the process ends with the fuzzer). */
static const tokenizer *fuzz_tokenizer(void)
{
	static tokenizer *t;
	if (t) return t;
	const char *cache = getenv("AAH_CACHE"), *data = getenv("AAH_TESTDATA");
	char dir[1024], err[512] = "";
	snprintf(dir, sizeof dir, "%s/qwen3-tokenizer", cache && *cache ? cache : ".cache");
	t = tokenizer_load(dir, err, sizeof err);
	if (!t) {
		snprintf(dir, sizeof dir, "%s/qwen3-small-a", data && *data ? data : "tests/data");
		t = tokenizer_load(dir, err, sizeof err);
	}
	if (!t) {
		fprintf(stderr, "fuzz_tokenizer: no tokenizer: %s\n", err);
		abort();
	}
	return t;
}

static int utf8_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
		if (l <= 0) return 0;
		i += (size_t)l;
	}
	return 1;
}

/* Streams ids one by one; every chunk must be whole UTF-8 and all of it must equal decode's output. */
static void check_stream(const tokenizer *t, const int32_t *ids, int64_t n, const char *want, int64_t want_n)
{
	tokenizer_stream st;
	tokenizer_stream_init(&st, t, false);
	char chunk[1024];
	int64_t at = 0;
	for (int64_t i = 0; i < n; i++) {
		int64_t w = tokenizer_stream_push(&st, ids[i], chunk, sizeof chunk);
		if (w < 0) {
			if (ids[i] >= 0 && ids[i] < tokenizer_vocab_size(t)) abort();   /* 1 KiB holds any token's text */
			continue;
		}
		if (!utf8_ok(chunk, (size_t)w)) abort();
		if (want && (at + w > want_n || memcmp(want + at, chunk, (size_t)w) != 0)) abort();
		at += w;
	}
	int64_t w = tokenizer_stream_flush(&st, chunk, sizeof chunk);
	if (w < 0 || !utf8_ok(chunk, (size_t)w)) abort();
	if (want && (at + w != want_n || memcmp(want + at, chunk, (size_t)w) != 0)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const tokenizer *t = fuzz_tokenizer();
	const char *text = (const char *)data;
	char err[256];

	/* 1. encode: invalid UTF-8 is refused; valid text decodes back to its NFC form */
	int64_t n = tokenizer_encode(t, text, size, false, NULL, 0, err, sizeof err);
	if (n >= 0) {
		int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
		if (tokenizer_encode(t, text, size, false, ids, n, err, sizeof err) != n) abort();
		int64_t len = tokenizer_decode(t, ids, n, false, NULL, 0);
		if (len < 0) abort();
		char *out = malloc((size_t)len + 1);
		if (tokenizer_decode(t, ids, n, false, out, len + 1) != len || !utf8_ok(out, (size_t)len)) abort();
		/* without '<' no added token can occur, so the whole text is normalized at once */
		if (!memchr(data, '<', size)) {
			utf8proc_uint8_t *norm = NULL;
			utf8proc_ssize_t nn = utf8proc_map(data, (utf8proc_ssize_t)size, &norm, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
			if (nn < 0 || nn != len || memcmp(norm, out, (size_t)len) != 0) abort();
			free(norm);
		}
		check_stream(t, ids, n, out, len);
		free(out);
		free(ids);
	}

	/* 2. the bytes as ids, some out of range: decode refuses those, streaming skips them, nothing crashes */
	int64_t m = (int64_t)(size / 3);
	int32_t *ids = malloc(((size_t)m + 1) * sizeof *ids);
	int32_t range = tokenizer_vocab_size(t) + 16;
	for (int64_t i = 0; i < m; i++) {
		uint32_t v = (uint32_t)data[3 * i] | (uint32_t)data[3 * i + 1] << 8 | (uint32_t)data[3 * i + 2] << 16;
		ids[i] = (v & 0x800000) ? (int32_t)(v % 300) - 20 : (int32_t)(v % (uint32_t)range);   /* bytes, negatives */
	}
	int64_t len = tokenizer_decode(t, ids, m, false, NULL, 0);
	if (len >= 0) {
		char *out = malloc((size_t)len + 1);
		if (tokenizer_decode(t, ids, m, false, out, len + 1) != len || !utf8_ok(out, (size_t)len)) abort();
		check_stream(t, ids, m, out, len);
		free(out);
	} else {
		check_stream(t, ids, m, NULL, 0);
	}
	char small[7];   /* a short buffer: the size is still reported, nothing is written past it */
	int64_t skipped = tokenizer_decode(t, ids, m, true, small, sizeof small);
	if (skipped > len) abort();
	free(ids);
	return 0;
}
