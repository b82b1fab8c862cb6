/* server/http_front_burst.h — the front's connection limit (http_front.c), told once per burst instead of once per
 * connection: while clients wait for a slot or are refused at the limit, counts of what became of them, and one log
 * line when the burst ends (BURST_QUIET_S without a sign of it) or again every BURST_REPEAT_S while it lasts. The
 * front thread's own: no lock. */
#ifndef AAH_SERVER_HTTP_FRONT_BURST_H
#define AAH_SERVER_HTTP_FRONT_BURST_H

#include <stdbool.h>
#include <stdint.h>

#define BURST_QUIET_S 1.0                /* a burst over the limit ends after this long without one */
#define BURST_REPEAT_S 60.0              /* a lasting burst is logged again this often */

/* The front increments the counters itself; http_front_burst_note zeroes them when a burst starts. */
typedef struct http_front_burst {
	bool on;                          /* a burst is going on */
	double t0, last, logged;          /* its start, its latest sign, its latest line */
	double longest;                   /* the longest wait for a slot in it */
	uint64_t waited;                  /* connections that waited for a slot and got it */
	uint64_t idle_closed;             /* idle connections closed for them */
	uint64_t n_503, n_429;            /* answered 503 after request_timeout; 429 over per_ip_connections */
	uint64_t probes;                  /* probes served beyond the limit */
	uint64_t evicted;                 /* FRESH connections closed for newer ones (over the cap, or out of fds) */
} http_front_burst;

/* A sign of the limit (a connection held, refused or evicted): starts a burst, its counters from 0, or keeps it on. */
void http_front_burst_note(http_front_burst *b, double now);
/* Once per loop of the front: at_limit (connections held, or every slot taken) keeps the burst on; a quiet one ends
 * with its line, a lasting one is told again. The limits only go into the line. */
void http_front_burst_tick(http_front_burst *b, double now, bool at_limit, int32_t max_connections,
                           int32_t per_ip_connections);

#endif
