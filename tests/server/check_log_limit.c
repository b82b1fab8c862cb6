/* tests/server/check_log_limit.c — Check suite for server/log_limit: a message repeated within a burst is written once, and
 * its count once the burst ends (flushed, or quiet for a second); distinct keys keep distinct bursts; a burst that
 * ends without repeats adds no line; keys past the table are written plainly; a level the log skips is not counted.
 * The lines are read back from stderr, redirected into a file. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/log_limit.h"

static char path[] = "/tmp/check_log_limit_XXXXXX";
static int fd = -1, saved = -1;
static log_limit lim;

static void setup(void)
{
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	saved = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	log_set_level(LOG_INFO);
	log_limit_init(&lim);
}

static void teardown(void)
{
	log_limit_free(&lim);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(fd);
	unlink(path);
	strcpy(path, "/tmp/check_log_limit_XXXXXX");
}

/* The log so far (static buffer) and its number of lines. */
static const char *written(int *lines)
{
	static char buf[1 << 16];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	buf[n > 0 ? n : 0] = 0;
	*lines = 0;
	for (const char *p = buf; *p; p++)
		*lines += *p == '\n';
	return buf;
}

START_TEST(test_burst_once_with_count)
{
	for (int i = 0; i < 1000; i++)
		log_limit_msg(&lim, "k", LOG_WARN, "http: ", "Server reached connection limit.\n");
	int lines;
	const char *s = written(&lines);
	ck_assert_int_eq(lines, 1);
	ck_assert_ptr_nonnull(strstr(s, "warn http: Server reached connection limit."));
	log_limit_flush(&lim, false);   /* the burst is not quiet yet: nothing */
	written(&lines);
	ck_assert_int_eq(lines, 1);
	log_limit_flush(&lim, true);
	s = written(&lines);
	ck_assert_int_eq(lines, 2);
	ck_assert_ptr_nonnull(strstr(s, "http: Server reached connection limit. (999 more like it in "));
}
END_TEST

START_TEST(test_quiet_second_ends_burst)
{
	for (int i = 0; i < 5; i++)
		log_limit_msg(&lim, "k", LOG_WARN, "", "again");
	struct timespec ts = { 1, 100 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	log_limit_flush(&lim, false);
	int lines;
	const char *s = written(&lines);
	ck_assert_int_eq(lines, 2);
	ck_assert_ptr_nonnull(strstr(s, "again (4 more like it in "));
	/* a new burst starts with its first message written again */
	log_limit_msg(&lim, "k", LOG_WARN, "", "again");
	written(&lines);
	ck_assert_int_eq(lines, 3);
}
END_TEST

START_TEST(test_keys_apart_and_no_count_without_repeats)
{
	log_limit_msg(&lim, "a", LOG_WARN, "", "first a");
	log_limit_msg(&lim, "b", LOG_WARN, "", "first b");
	log_limit_msg(&lim, "a", LOG_WARN, "", "first a");
	log_limit_flush(&lim, true);
	int lines;
	const char *s = written(&lines);
	ck_assert_int_eq(lines, 3);   /* a, b, and a's count; b had no repeat */
	ck_assert_ptr_nonnull(strstr(s, "first a (1 more like it in "));
	ck_assert_ptr_null(strstr(s, "first b ("));
}
END_TEST

START_TEST(test_past_the_table_plain)
{
	static char keys[LOG_LIMIT_KEYS + 3];
	for (int i = 0; i < LOG_LIMIT_KEYS + 3; i++)
		log_limit_msg(&lim, &keys[i], LOG_WARN, "", "distinct");
	for (int i = 0; i < 3; i++)   /* the table is full: those past it are written each time */
		log_limit_msg(&lim, &keys[LOG_LIMIT_KEYS + i], LOG_WARN, "", "distinct");
	int lines;
	written(&lines);
	ck_assert_int_eq(lines, LOG_LIMIT_KEYS + 6);
}
END_TEST

START_TEST(test_skipped_level_not_counted)
{
	log_set_level(LOG_WARN);
	for (int i = 0; i < 10; i++)
		log_limit_msg(&lim, "d", LOG_DEBUG, "", "quiet");
	log_limit_flush(&lim, true);
	int lines;
	written(&lines);
	ck_assert_int_eq(lines, 0);
}
END_TEST

static Suite *log_limit_suite(void)
{
	Suite *s = suite_create("log_limit");
	TCase *t = tcase_create("bursts");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, test_burst_once_with_count);
	tcase_add_test(t, test_quiet_second_ends_burst);
	tcase_add_test(t, test_keys_apart_and_no_count_without_repeats);
	tcase_add_test(t, test_past_the_table_plain);
	tcase_add_test(t, test_skipped_level_not_counted);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(log_limit_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
