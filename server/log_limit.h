/* server/log_limit.h — a log line that could repeat without bound (a library's message for every connection of a
 * flood) written once per burst: the first at once, then, once none like it has come for a second, one line that
 * says how many more came and over how long (the front does the same for its own connection limit). */
#ifndef AAH_SERVER_LOG_LIMIT_H
#define AAH_SERVER_LOG_LIMIT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/log.h"

#define LOG_LIMIT_KEYS 32          /* distinct messages tracked at once; past them a message is written plainly */
#define LOG_LIMIT_QUIET_S 1.0      /* a burst ends after this long without its message */
#define LOG_LIMIT_REPEAT_S 60.0    /* a burst that lasts says so again this often */

typedef struct log_limit_burst {
	const void *key;                  /* what makes two messages alike (a format string); NULL: a free row */
	log_level lvl;
	double first, last, told;         /* the burst's first message, its latest, its latest line */
	uint64_t more;                    /* messages since the latest line */
	char text[240];                   /* the first message's text, for the count's line */
} log_limit_burst;

typedef struct log_limit {
	pthread_mutex_t mu;
	log_limit_burst b[LOG_LIMIT_KEYS];
} log_limit;

void log_limit_init(log_limit *l);
void log_limit_free(log_limit *l);
/* Any thread: writes prefix+msg at lvl unless a message with this key was written within the current burst, in
 * which case it is only counted. */
void log_limit_msg(log_limit *l, const void *key, log_level lvl, const char *prefix, const char *msg);
/* Ends the bursts quiet for LOG_LIMIT_QUIET_S (all: every burst, at the end), each with its count's line; call it
 * about once a second. */
void log_limit_flush(log_limit *l, bool all);

#endif
