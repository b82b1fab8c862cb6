/* tests/models/check_utf8.c — Check suite for models/utf8: aah_utf8_check and aah_utf8_next (utf8proc underneath) against a
 * reference written out from Unicode's table 3-7 (well-formed byte sequences) over every sequence of one to three
 * bytes and every four-byte sequence whose bytes come from each range's edges, then offsets inside longer text. */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "models/utf8.h"

/* Table 3-7, row by row: the length of the well-formed sequence at s (n bytes left), else 0; its code point in *cp. */
static int ref_len(const unsigned char *s, size_t n, uint32_t *cp)
{
	static const struct { unsigned char lo[4], hi[4]; int len; } rows[] = {
		{{0x00}, {0x7F}, 1},
		{{0xC2, 0x80}, {0xDF, 0xBF}, 2},
		{{0xE0, 0xA0, 0x80}, {0xE0, 0xBF, 0xBF}, 3},
		{{0xE1, 0x80, 0x80}, {0xEC, 0xBF, 0xBF}, 3},
		{{0xED, 0x80, 0x80}, {0xED, 0x9F, 0xBF}, 3},
		{{0xEE, 0x80, 0x80}, {0xEF, 0xBF, 0xBF}, 3},
		{{0xF0, 0x90, 0x80, 0x80}, {0xF0, 0xBF, 0xBF, 0xBF}, 4},
		{{0xF1, 0x80, 0x80, 0x80}, {0xF3, 0xBF, 0xBF, 0xBF}, 4},
		{{0xF4, 0x80, 0x80, 0x80}, {0xF4, 0x8F, 0xBF, 0xBF}, 4},
	};
	for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
		int len = rows[r].len;
		if ((size_t)len > n) continue;
		int k = 0;
		while (k < len && s[k] >= rows[r].lo[k] && s[k] <= rows[r].hi[k]) k++;
		if (k < len) continue;
		uint32_t c = len == 1 ? s[0] : s[0] & (0x7F >> len);
		for (k = 1; k < len; k++) c = c << 6 | (s[k] & 0x3F);
		*cp = c;
		return len;
	}
	return 0;
}

/* The reference check: 0 or the 1-based offset where the first ill-formed sequence starts. */
static size_t ref_check(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		int len = ref_len(s + i, n - i, &cp);
		if (!len) return i + 1;
		i += (size_t)len;
	}
	return 0;
}

/* 0 when aah_utf8_check, aah_utf8_next and aah_utf8_seq_len agree with the table on s; else 1 (the first such s is
 * kept in *first for the message). Check's assertions record every pass, so the loops below count and assert once. */
static unsigned char first[4];
static size_t first_n;
static int agree(const unsigned char *s, size_t n)
{
	uint32_t cp_ref = 0, cp = 0;
	int len_ref = ref_len(s, n, &cp_ref);
	int len = aah_utf8_next(s, n, &cp);
	bool bad = aah_utf8_check(s, n) != ref_check(s, n) ||
	           (len_ref ? len != len_ref || cp != cp_ref || aah_utf8_seq_len(s[0]) != len_ref
	                    : len != 1 || cp != s[0]);
	if (bad && !first_n) {
		memcpy(first, s, n);
		first_n = n;
	}
	return bad;
}

static void assert_none(long bad)
{
	ck_assert_msg(bad == 0, "%ld sequences disagree with the table, the first %02x %02x %02x %02x (n %zu)", bad,
	              first[0], first_n > 1 ? first[1] : 0, first_n > 2 ? first[2] : 0, first_n > 3 ? first[3] : 0,
	              first_n);
}

START_TEST(test_every_short_sequence)
{
	unsigned char s[3];
	long bad = 0;
	for (int a = 0; a < 256; a++) {
		s[0] = (unsigned char)a;
		bad += agree(s, 1);
		for (int b = 0; b < 256; b++) {
			s[1] = (unsigned char)b;
			bad += agree(s, 2);
			for (int c = 0; c < 256; c++) {
				s[2] = (unsigned char)c;
				bad += agree(s, 3);
			}
		}
	}
	assert_none(bad);
}
END_TEST

START_TEST(test_four_byte_edges)
{
	/* each range's edges and a byte either side of them */
	static const unsigned char v[] = {0x00, 0x41, 0x7F, 0x80, 0x81, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2,
	                                  0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF};
	const size_t nv = sizeof v;
	unsigned char s[4];
	long bad = 0;
	for (size_t a = 0; a < nv; a++)
		for (size_t b = 0; b < nv; b++)
			for (size_t c = 0; c < nv; c++)
				for (size_t d = 0; d < nv; d++) {
					s[0] = v[a], s[1] = v[b], s[2] = v[c], s[3] = v[d];
					bad += agree(s, 4);
				}
	assert_none(bad);
}
END_TEST

START_TEST(test_second_range)
{
	/* the second byte's bounds are the table's: a lead and a second byte inside them start a well-formed prefix */
	for (int a = 0xC2; a <= 0xF4; a++) {
		unsigned char lo, hi, s[4] = {(unsigned char)a, 0, 0x80, 0x80};
		aah_utf8_second_range((unsigned char)a, &lo, &hi);
		long bad = 0;
		for (int b = 0; b < 256; b++) {
			s[1] = (unsigned char)b;
			uint32_t cp;
			int len = aah_utf8_seq_len(s[0]);
			bad += (ref_len(s, (size_t)len, &cp) != 0) != (b >= lo && b <= hi);
		}
		ck_assert_msg(bad == 0, "lead %02x: %ld second bytes judged otherwise than the table", a, bad);
	}
}
END_TEST

START_TEST(test_offsets_in_text)
{
	const char *ok = "plain ASCII, caf\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x98\x80 and more";
	ck_assert_uint_eq(aah_utf8_check(ok, strlen(ok)), 0);
	ck_assert_uint_eq(aah_utf8_check("", 0), 0);
	ck_assert_uint_eq(aah_utf8_check("abc\xC0\xAF", 5), 4);          /* overlong '/' */
	ck_assert_uint_eq(aah_utf8_check("ab\xED\xA0\x80", 5), 3);       /* a surrogate */
	ck_assert_uint_eq(aah_utf8_check("a\xF4\x90\x80\x80", 5), 2);     /* past U+10FFFF */
	ck_assert_uint_eq(aah_utf8_check("\xE2\x82\xAC\xE2\x82", 5), 4); /* truncated at the end */
	ck_assert_uint_eq(aah_utf8_check("x\x80", 2), 2);                 /* a lone continuation byte */
	/* a NUL is a character like any other */
	ck_assert_uint_eq(aah_utf8_check("a\0b", 3), 0);
}
END_TEST

static Suite *utf8_suite(void)
{
	Suite *s = suite_create("utf8");
	TCase *t = tcase_create("utf8");
	/* every 1- to 3-byte sequence: the four tests took 4.9 s under the sanitizers on a quiet 2-core machine, and the
	 * first alone passed Check's default 4 s with both cores busy (2026-12-02); the limit is for a hang, not speed */
	tcase_set_timeout(t, 120);
	tcase_add_test(t, test_every_short_sequence);
	tcase_add_test(t, test_four_byte_edges);
	tcase_add_test(t, test_second_range);
	tcase_add_test(t, test_offsets_in_text);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(utf8_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
