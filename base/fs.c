/* base/fs.c — see fs.h. */
#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* err may be NULL or err_len 0 (then nothing is written), as everywhere (models/errf.h) */
static void fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t err_len, const char *fmt, ...)
{
	if (!err || !err_len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}

bool aah_path_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

bool aah_is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool aah_is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int aah_copy_file(const char *from, const char *to, char *err, size_t err_len)
{
	int in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		fail(err, err_len, "%s: %s", from, strerror(errno));
		return -1;
	}
	int outfd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (outfd < 0) {
		fail(err, err_len, "%s: %s", to, strerror(errno));
		close(in);
		return -1;
	}
	static __thread char buf[1 << 16];
	ssize_t n;
	int rc = 0;
	while ((n = read(in, buf, sizeof buf)) > 0) {
		for (ssize_t done = 0; done < n;) {
			ssize_t w = write(outfd, buf + done, (size_t)(n - done));
			if (w <= 0) {
				rc = -1;
				break;
			}
			done += w;
		}
		if (rc)
			break;
	}
	if (n < 0)
		rc = -1;
	if (close(outfd))
		rc = -1;
	close(in);
	if (rc)
		fail(err, err_len, "%s: cannot copy to %s", from, to);
	return rc;
}
