/* server/log.c — the event log (see log.h): formats a line into a stack buffer and writes it with one write(2),
 * so that lines from many threads never interleave. */
#include "server/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_threshold = LOG_INFO;
static const char *const level_names[] = { "error", "warn", "info", "debug" };
static const int syslog_priority[] = { 3, 4, 6, 7 };   /* err, warning, info, debug */

int log_level_parse(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, level_names[i]))
			return i;
	if (!strcmp(s, "warning"))
		return LOG_WARN;
	return -1;
}

void log_set_level(log_level level) { atomic_store(&log_threshold, (int)level); }
bool log_enabled(log_level level) { return (int)level <= atomic_load(&log_threshold); }

void log_msg(log_level level, const char *req, const char *fmt, ...)
{
	if (!log_enabled(level))
		return;
	char line[2048];
	size_t n = 0;
	/* journald sets JOURNAL_STREAM for the services whose stderr it reads; it keeps its own timestamps */
	if (getenv("JOURNAL_STREAM")) {
		n = (size_t)snprintf(line, sizeof line, "<%d>%s ", syslog_priority[level], level_names[level]);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		struct tm tm;
		gmtime_r(&ts.tv_sec, &tm);
		n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
		n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %s ", ts.tv_nsec / 1000000, level_names[level]);
	}
	if (req && *req)
		n += (size_t)snprintf(line + n, sizeof line - n, "req=%s ", req);
	size_t msg0 = n;
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
	va_end(ap);
	if (m > 0)
		n += (size_t)m < sizeof line - n ? (size_t)m : sizeof line - n - 1;
	for (size_t i = msg0; i < n; i++)
		if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
			line[i] = ' ';
	if (n > sizeof line - 2)
		n = sizeof line - 2;
	line[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, n);
	(void)w;
}
