/* tests/fuzz/fuzz_parse_num.c — libFuzzer target for base/parse_num: any bytes (up to the first NUL) through every
 * parser; what each accepts must print back to the same value, a list's count must not depend on the room given,
 * and a strict list must be a lenient one too. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse_num.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/parse_num";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = 0;
	int64_t i;
	if (aah_parse_i64(s, -1000, 1000, &i)) {
		if (i < -1000 || i > 1000) abort();
		int64_t again;
		char buf[32];
		snprintf(buf, sizeof buf, "%" PRId64, i);
		if (!aah_parse_i64(buf, -1000, 1000, &again) || again != i) abort();
	}
	uint64_t u;
	if (aah_parse_u64(s, 0, &u) && strchr(s, '-')) abort();
	if (aah_parse_size(s, &u) && strchr(s, '-')) abort();
	double d;
	if (aah_parse_f64(s, &d) && (d != d || d - d != 0)) abort();   /* finite: not NaN, not ±inf */
	int32_t few[4], many[256];
	for (int strict = 0; strict < 2; strict++) {
		int64_t n = aah_parse_int_list(s, strict, 0, 1 << 24, NULL, 0);
		int64_t m = aah_parse_int_list(s, strict, 0, 1 << 24, few, 4);
		int64_t k = aah_parse_int_list(s, strict, 0, 1 << 24, many, 256);
		if (n != m || n != k) abort();
		for (int64_t j = 0; j < n && j < 4; j++)
			if (few[j] != many[j] || few[j] < 0 || few[j] > (1 << 24)) abort();
		if (strict && n >= 0 && aah_parse_int_list(s, false, 0, 1 << 24, NULL, 0) != n) abort();
	}
	free(s);
	return 0;
}
