/* server/log.h — one line per event on stderr, with a level and a request id: timestamps on a terminal,
 * syslog priority prefixes ("<6>") when stderr is journald's, so `journalctl -p warning` works. */
#ifndef AAH_SERVER_LOG_H
#define AAH_SERVER_LOG_H

#include <stdbool.h>

typedef enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG } log_level;

/* Parses "error", "warn", "info", "debug"; returns -1 for anything else. */
int log_level_parse(const char *s);
void log_set_level(log_level level);
bool log_enabled(log_level level);
/* Writes one line; req may be NULL. Control characters in the message (a client's text) become spaces, so an
 * event never spans two lines. The level is checked before anything is formatted. */
void log_msg(log_level level, const char *req, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
