/* server/http_front_burst.c — see http_front_burst.h. */
#include "server/http_front_burst.h"

#include <stddef.h>

#include "server/log.h"

void http_front_burst_note(http_front_burst *b, double now)
{
	if (!b->on) {
		b->on = true;
		b->t0 = b->logged = now;
		b->longest = 0;
		b->waited = b->n_503 = b->n_429 = b->probes = b->idle_closed = b->evicted = 0;
	}
	b->last = now;
}

static void burst_log(const http_front_burst *b, double now, bool ended, int32_t max_connections,
                      int32_t per_ip_connections)
{
	log_msg(LOG_WARN, NULL,
	        "connections: the limit of %d %s %.1fs: %llu waited for a slot and got it (longest %.2fs; %llu idle "
	        "connections closed for them), %llu answered 503 after request_timeout, %llu answered 429 "
	        "(per_ip_connections %d), %llu probes served beyond it, %llu connections that sent nothing closed for "
	        "newer ones",
	        max_connections, ended ? "was reached for" : "has been reached for", now - b->t0,
	        (unsigned long long)b->waited, b->longest, (unsigned long long)b->idle_closed,
	        (unsigned long long)b->n_503, (unsigned long long)b->n_429, per_ip_connections,
	        (unsigned long long)b->probes, (unsigned long long)b->evicted);
}

void http_front_burst_tick(http_front_burst *b, double now, bool at_limit, int32_t max_connections,
                           int32_t per_ip_connections)
{
	if (!b->on)
		return;
	if (at_limit)
		b->last = now;
	if (now - b->last >= BURST_QUIET_S) {
		burst_log(b, now, true, max_connections, per_ip_connections);
		b->on = false;
	} else if (now - b->logged >= BURST_REPEAT_S) {
		burst_log(b, now, false, max_connections, per_ip_connections);
		b->logged = now;
	}
}
