/* tests/test_env.h — what several Check suites share: where the test data and the build are (AAH_TESTDATA and
 * AAH_BUILD, as tests/run_tests.sh sets them; the defaults are the source tree's), and, for a suite that defines
 * TEST_TMPDIR as its name before including this, a fresh directory per test under /tmp, removed with all it holds
 * after the test (tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown)). */
#ifndef AAH_TEST_ENV_H
#define AAH_TEST_ENV_H

#include <stdlib.h>

static inline const char *testdata(void)
{
	const char *d = getenv("AAH_TESTDATA");
	return d && *d ? d : "tests/data";
}

static inline const char *build_dir(void)
{
	const char *b = getenv("AAH_BUILD");
	return b && *b ? b : "build";
}

#ifdef TEST_TMPDIR
#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static char tmpdir[256];

static void tmp_setup(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/aah-check-%s-XXXXXX", TEST_TMPDIR);
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static int tmp_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(path);
}

static void tmp_teardown(void)
{
	nftw(tmpdir, tmp_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
#endif
#endif
