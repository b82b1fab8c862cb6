/* tests/base/check_base.c — Check suite for base/: the command-line number parsers (whole arguments only, ranges,
 * overflow, suffixes, both list grammars), the path predicates and aah_copy_file (bytes equal, never overwriting),
 * the monotonic clock, and the growing byte buffer (bytes kept through every growth, an impossible size refused and
 * the refusal sticky). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytebuf.h"
#include "base/clock.h"
#include "base/fs.h"
#include "base/parse_num.h"

START_TEST(test_parse_i64)
{
	int64_t v = 7;
	ck_assert(aah_parse_i64("42", 0, 100, &v) && v == 42);
	ck_assert(aah_parse_i64("-5", -10, 10, &v) && v == -5);
	ck_assert(aah_parse_i64("9223372036854775807", 0, INT64_MAX, &v) && v == INT64_MAX);
	v = 7;
	ck_assert(!aah_parse_i64("", 0, 100, &v));
	ck_assert(!aah_parse_i64("12x", 0, 100, &v));
	ck_assert(!aah_parse_i64("1.5", 0, 100, &v));
	ck_assert(!aah_parse_i64("101", 0, 100, &v));
	ck_assert(!aah_parse_i64("-1", 0, 100, &v));
	ck_assert(!aah_parse_i64("9223372036854775808", 0, INT64_MAX, &v));   /* overflow, not clamped */
	ck_assert_int_eq(v, 7);                                                 /* untouched on failure */
}
END_TEST

START_TEST(test_parse_unsigned_and_float)
{
	uint64_t u;
	ck_assert(aah_parse_u64("0x10", 0, &u) && u == 16);
	ck_assert(aah_parse_u64("18446744073709551615", 10, &u) && u == UINT64_MAX);
	ck_assert(!aah_parse_u64("-1", 0, &u));             /* strtoull would wrap it */
	ck_assert(!aah_parse_u64("18446744073709551616", 10, &u));
	ck_assert(aah_parse_size("64M", &u) && u == 64u << 20);
	ck_assert(aah_parse_size("2g", &u) && u == 2ull << 30);
	ck_assert(aah_parse_size("1000", &u) && u == 1000);
	ck_assert(!aah_parse_size("1T", &u));
	ck_assert(!aah_parse_size("1MB", &u));
	ck_assert(!aah_parse_size("-1K", &u));
	ck_assert(!aah_parse_size("17179869184G", &u));     /* 2^34 G does not fit */
	double d;
	ck_assert(aah_parse_f64("1e-6", &d) && d == 1e-6);
	ck_assert(aah_parse_f64("-2.5", &d) && d == -2.5);
	ck_assert(!aah_parse_f64("inf", &d));
	ck_assert(!aah_parse_f64("nan", &d));
	ck_assert(!aah_parse_f64("1e999", &d));
	ck_assert(!aah_parse_f64("0.5x", &d));
	ck_assert(!aah_parse_f64("", &d));
}
END_TEST

START_TEST(test_parse_lists)
{
	int32_t v[8];
	ck_assert_int_eq(aah_parse_int_list("512,1024,2048", true, 1, 1 << 24, v, 8), 3);
	ck_assert_int_eq(v[0], 512);
	ck_assert_int_eq(v[2], 2048);
	ck_assert_int_eq(aah_parse_int_list("512,", true, 1, 1 << 24, v, 8), 1);   /* a trailing comma */
	ck_assert_int_eq(aah_parse_int_list("", true, 1, 1 << 24, v, 8), 0);
	ck_assert_int_eq(aah_parse_int_list("512,,1024", true, 1, 1 << 24, v, 8), -1);
	ck_assert_int_eq(aah_parse_int_list(",512", true, 1, 1 << 24, v, 8), -1);
	ck_assert_int_eq(aah_parse_int_list("512 1024", true, 1, 1 << 24, v, 8), -1);
	ck_assert_int_eq(aah_parse_int_list("0,1", true, 1, 1 << 24, v, 8), -1);    /* below the range */
	ck_assert_int_eq(aah_parse_int_list("1,2,3,4,5,6,7,8,9,10", true, 1, 100, v, 8), 10);   /* counted past cap */
	ck_assert_int_eq(v[7], 8);
	ck_assert_int_eq(aah_parse_int_list("[1, 2,\n3]", false, 0, INT32_MAX, v, 8), 3);
	ck_assert_int_eq(v[2], 3);
	ck_assert_int_eq(aah_parse_int_list("1 2 3", false, 0, INT32_MAX, NULL, 0), 3);
	ck_assert_int_eq(aah_parse_int_list("1,2x", false, 0, INT32_MAX, v, 8), -1);
	ck_assert_int_eq(aah_parse_int_list("2147483648", false, 0, INT32_MAX, v, 8), -1);
	ck_assert_int_eq(aah_parse_int_list("-1", false, 0, INT32_MAX, v, 8), -1);
}
END_TEST

START_TEST(test_fs)
{
	char dir[] = "/tmp/aah-check-base-XXXXXX", a[256], b[256], err[512];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(a, sizeof a, "%s/a", dir);
	snprintf(b, sizeof b, "%s/b", dir);
	ck_assert(aah_is_dir(dir) && aah_path_exists(dir) && !aah_is_file(dir));
	ck_assert(!aah_path_exists(a) && !aah_is_file(a) && !aah_is_dir(a));
	FILE *f = fopen(a, "wb");
	ck_assert_ptr_nonnull(f);
	for (int i = 0; i < 200000; i++)
		fputc(i * 7 & 0xff, f);
	fclose(f);
	ck_assert(aah_is_file(a) && !aah_is_dir(a));
	ck_assert_int_eq(aah_copy_file(a, b, err, sizeof err), 0);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
	ck_assert_int_eq(system(cmd), 0);
	/* never over an existing file, and the message names it */
	ck_assert_int_eq(aah_copy_file(a, b, err, sizeof err), -1);
	ck_assert_ptr_nonnull(strstr(err, b));
	snprintf(cmd, sizeof cmd, "%s/none", dir);
	ck_assert_int_eq(aah_copy_file(cmd, a, err, sizeof err), -1);
	ck_assert_ptr_nonnull(strstr(err, "none"));
	ck_assert_int_eq(aah_copy_file(cmd, a, NULL, 0), -1);   /* no room for a message is fine */
	unlink(a);
	unlink(b);
	rmdir(dir);
}
END_TEST

START_TEST(test_clock)
{
	double t0 = aah_now_s();
	usleep(20000);
	double t1 = aah_now_s();
	ck_assert(t1 - t0 >= 0.019);
}
END_TEST

START_TEST(test_bytebuf)
{
	aah_bytebuf b = { 0 };
	ck_assert_int_eq(aah_bytebuf_put(&b, "", 0), 0);
	ck_assert_uint_eq(b.n, 0);
	unsigned char want[20000];
	for (size_t i = 0; i < sizeof want; i++)
		want[i] = (unsigned char)(i * 7 + i / 256);
	for (size_t at = 0; at < sizeof want;) {   /* appends of 1 … 1000 bytes across several doublings */
		size_t n = at % 1000 + 1 < sizeof want - at ? at % 1000 + 1 : sizeof want - at;
		ck_assert_int_eq(aah_bytebuf_put(&b, want + at, n), 0);
		at += n;
		ck_assert_uint_eq(b.n, at);
		ck_assert(b.cap >= b.n);
	}
	ck_assert_mem_eq(b.p, want, sizeof want);
	ck_assert_int_eq(aah_bytebuf_put(&b, want, SIZE_MAX - 8), -1);   /* no allocation can hold it */
	ck_assert(b.oom);
	ck_assert_int_eq(aah_bytebuf_put(&b, "x", 1), -1);               /* sticky: nothing after a failure */
	ck_assert_uint_eq(b.n, sizeof want);
	ck_assert_mem_eq(b.p, want, sizeof want);                        /* what came before is kept */
	aah_bytebuf_free(&b);
	ck_assert(!b.p && !b.n && !b.cap && !b.oom);
}
END_TEST

static Suite *base_suite(void)
{
	Suite *s = suite_create("base");
	TCase *t = tcase_create("base");
	tcase_add_test(t, test_parse_i64);
	tcase_add_test(t, test_parse_unsigned_and_float);
	tcase_add_test(t, test_parse_lists);
	tcase_add_test(t, test_fs);
	tcase_add_test(t, test_clock);
	tcase_add_test(t, test_bytebuf);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(base_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
