/* tests/test_env.h — what several Check suites share: where the test data and the build are (AAH_TESTDATA and
 * AAH_BUILD, as tests/run_tests.sh sets them; the defaults are the source tree's), and, for a suite that defines
 * TEST_TMPDIR as its name before including this, a fresh directory per test under /tmp, removed with all it holds
 * after the test (tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown)), and a program run with its output into
 * that directory (tool_run). */
#ifndef AAH_TEST_ENV_H
#define AAH_TEST_ENV_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline const char *testdata(void)
{
	const char *d = getenv("AAH_TESTDATA");
	return d && *d ? d : "tests/data";
}

/* The number of random rounds a suite runs: n as built, a quarter (at least 1) under AddressSanitizer, which makes a
 * round 5-20x slower and finds what it finds in the first rounds as well as in the last (the sanitizer pass is for
 * memory errors; the plain pass keeps every round for the results). */
static inline int test_rounds(int n)
{
#if defined(__SANITIZE_ADDRESS__)
	return n / 4 > 1 ? n / 4 : 1;
#else
	return n;
#endif
}

static inline const char *build_dir(void)
{
	const char *b = getenv("AAH_BUILD");
	return b && *b ? b : "build";
}

/* The whole of a file, NUL-terminated (the NUL not counted in *len); fails the test when it cannot be read. */
static inline unsigned char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *buf = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* A fresh /tmp directory (named after `tag`) holding the files of test model `model` (under testdata()) as links,
 * and, unless NULL, aah_json as its aah.json: a model with regimes of a test's own. Remove it with remove_model_dir. */
static inline void make_model_dir(char *dir, size_t n, const char *tag, const char *model, const char *aah_json)
{
	snprintf(dir, n, "/tmp/aah-%s-XXXXXX", tag);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	const char *files[] = { "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json" };
	for (size_t i = 0; i < 4; i++) {
		char src[2048], dst[2048], abs_src[4096];
		snprintf(src, sizeof src, "%s/%s/%s", testdata(), model, files[i]);
		ck_assert_ptr_nonnull(realpath(src, abs_src));
		snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
		ck_assert_int_eq(symlink(abs_src, dst), 0);
	}
	if (aah_json) {
		char p[2048];
		snprintf(p, sizeof p, "%s/aah.json", dir);
		FILE *f = fopen(p, "w");
		ck_assert_ptr_nonnull(f);
		fputs(aah_json, f);
		fclose(f);
	}
}

static inline void remove_model_dir(const char *dir)
{
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

#ifdef TEST_TMPDIR
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* Runs argv (NULL-terminated) with stdout and stderr into tmpdir/log; returns the exit status, -1 when it did not exit
 * normally. The log's text (its first 64 KiB) is in log_text afterwards; AAH_TEST_VERBOSE=1 prints it. */
static char log_text[1 << 16];

static inline int tool_run(const char *const *argv)
{
	char log[600];
	snprintf(log, sizeof log, "%s/log", tmpdir);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		FILE *f = freopen(log, "w", stdout);
		if (!f || dup2(fileno(stdout), 2) < 0)
			_exit(127);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	FILE *f = fopen(log, "r");
	size_t n = f ? fread(log_text, 1, sizeof log_text - 1, f) : 0;
	log_text[n] = 0;
	if (f)
		fclose(f);
	if (getenv("AAH_TEST_VERBOSE"))
		fputs(log_text, stderr);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
#endif
#endif
