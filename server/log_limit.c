/* server/log_limit.c — see log_limit.h. A small table under one lock: a flood's messages are few distinct formats
 * repeated, so a linear look-up over 32 rows costs less than the formatting the caller already did. */
#include "server/log_limit.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"

void log_limit_init(log_limit *l)
{
	memset(l, 0, sizeof *l);
	pthread_mutex_init(&l->mu, NULL);
}

void log_limit_free(log_limit *l) { pthread_mutex_destroy(&l->mu); }

/* With mu held: the count's line of a burst with messages not yet told. */
static void tell(log_limit_burst *b, double now, bool ended)
{
	if (b->more > 0)
		log_msg(b->lvl, NULL, "%s (%llu more like it in %.1fs%s)", b->text, (unsigned long long)b->more,
		        now - b->first, ended ? "" : "; it goes on");
	b->more = 0;
	b->told = now;
}

void log_limit_msg(log_limit *l, const void *key, log_level lvl, const char *prefix, const char *msg)
{
	if (!log_enabled(lvl))
		return;
	const double now = aah_now_s();
	pthread_mutex_lock(&l->mu);
	log_limit_burst *b = NULL, *free_row = NULL;
	for (int i = 0; i < LOG_LIMIT_KEYS && !b; i++) {
		if (l->b[i].key == key)
			b = &l->b[i];
		else if (!l->b[i].key && !free_row)
			free_row = &l->b[i];
	}
	if (b && now - b->last < LOG_LIMIT_QUIET_S) {   /* within its burst: counted */
		b->more++;
		b->last = now;
		if (now - b->told >= LOG_LIMIT_REPEAT_S)
			tell(b, now, false);
		pthread_mutex_unlock(&l->mu);
		return;
	}
	if (b)   /* an old burst, quiet long enough: its count first */
		tell(b, now, true);
	else
		b = free_row;
	if (b) {
		b->key = key;
		b->lvl = lvl;
		b->first = b->last = b->told = now;
		b->more = 0;
		snprintf(b->text, sizeof b->text, "%s%s", prefix, msg);
		/* libmicrohttpd's messages end with a line feed: the count's line goes on the same line */
		size_t n = strlen(b->text);
		while (n > 0 && (b->text[n - 1] == '\n' || b->text[n - 1] == ' '))
			b->text[--n] = 0;
	}
	log_msg(lvl, NULL, "%s%s", prefix, msg);
	pthread_mutex_unlock(&l->mu);
}

void log_limit_flush(log_limit *l, bool all)
{
	const double now = aah_now_s();
	pthread_mutex_lock(&l->mu);
	for (int i = 0; i < LOG_LIMIT_KEYS; i++) {
		log_limit_burst *b = &l->b[i];
		if (b->key && (all || now - b->last >= LOG_LIMIT_QUIET_S)) {
			tell(b, now, true);
			b->key = NULL;
		}
	}
	pthread_mutex_unlock(&l->mu);
}
