/* tests/fuzz/fuzz_regex.c — libFuzzer target for engine/grammar/regex: any bytes as a pattern, and split at newlines
 * as choices. An accepted pattern gives the same GBNF twice, printable ASCII lines `name ::= …` under the size bound,
 * appended after what the buffer held; a refusal says why; choices are refused exactly when one is not UTF-8. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/regex.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/regex";

/* the output bound of regex.h (about 1 MB) with room for the rule's name */
#define GBNF_BOUND ((1u << 20) + 64)

static bool utf8_ok(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t b = s[i];
		size_t len = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
		if (!len || i + len > n)
			return false;
		uint32_t cp = len == 1 ? b : (uint32_t)(b & (0x7F >> len));
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3F);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		i += len;
	}
	return true;
}

static void check_gbnf(const char *g, size_t n)
{
	if (n == 0 || n > GBNF_BOUND || g[n - 1] != '\n' || strncmp(g, "root ::= ", 9) != 0)
		abort();
	for (size_t i = 0; i < n; i++)
		if (g[i] != '\n' && (g[i] < 0x20 || g[i] > 0x7E))   /* everything past ASCII is written escaped */
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512], err2[512];
	err[0] = 0;
	char *g = regex_to_gbnf((const char *)data, size, err, sizeof err);
	if (g) {
		size_t n = strlen(g);
		check_gbnf(g, n);
		char *again = regex_to_gbnf((const char *)data, size, err2, sizeof err2);
		if (!again || strcmp(g, again) != 0)
			abort();
		free(again);
		/* appended under another name after other rules: those stay, and the new rules carry the name */
		aah_bytebuf b = { 0 };
		if (aah_bytebuf_put(&b, "root ::= x\n", 11) != 0)
			abort();
		if (regex_gbnf(&b, "x", (const char *)data, size, err2, sizeof err2) != 0)
			abort();
		if (memcmp(b.p, "root ::= x\nx ::= ", 17) != 0)
			abort();
		aah_bytebuf_free(&b);
		free(g);
	} else if (!err[0]) {
		abort();   /* every refusal says why */
	}

	/* the same bytes as choices, one a line */
	enum { MAX_CHOICES = 64 };
	const char *s[MAX_CHOICES];
	size_t len[MAX_CHOICES], n = 0;
	bool all_utf8 = true;
	for (size_t at = 0; at <= size && n < MAX_CHOICES;) {
		const uint8_t *nl = memchr(data + at, '\n', size - at);
		size_t end = nl ? (size_t)(nl - data) : size;
		s[n] = (const char *)data + at;
		len[n] = end - at;
		all_utf8 = all_utf8 && utf8_ok(data + at, len[n]);
		n++;
		at = end + 1;
	}
	char *c = choice_to_gbnf(s, len, n, err, sizeof err);
	if ((c != NULL) != all_utf8 || (!c && !err[0]))
		abort();
	if (c) {
		check_gbnf(c, strlen(c));
		free(c);
	}
	return 0;
}
