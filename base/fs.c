/* base/fs.c — see fs.h. */
#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
		snprintf(err, err_len, "%s: %s", from, strerror(errno));
		return -1;
	}
	int outfd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (outfd < 0) {
		snprintf(err, err_len, "%s: %s", to, strerror(errno));
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
		snprintf(err, err_len, "%s: cannot copy to %s", from, to);
	return rc;
}
