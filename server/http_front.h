/* server/http_front.h — the front of the HTTP server: it owns the listening socket and every client connection and
 * hands libmicrohttpd each admitted one through a socketpair, request by request, in canonical form (http_framing.h).
 * It decides what libmicrohttpd cannot: how many connections are served at once (beyond that a connection waits for a
 * slot, then gets 503 with Retry-After: never a reset), a few more slots for GET /health and /metrics alone, a
 * deadline for each request's head and body, framing refusals answered with the API's error object, a lingering close
 * after every answer that leaves a body unread, and a response for a client that half-closes after its request.
 * One thread, epoll; libmicrohttpd's threads talk to it only through a link per connection. */
#ifndef AAH_SERVER_HTTP_FRONT_H
#define AAH_SERVER_HTTP_FRONT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct http_front http_front;
typedef struct http_front_link http_front_link;

typedef struct http_front_params {
	const struct sockaddr *addr;      /* where to listen (copied) */
	socklen_t addr_len;
	int32_t max_connections;          /* served at once; more wait for a slot */
	int32_t probe_connections;        /* beyond max_connections, for GET /health and GET /metrics only */
	int32_t per_ip_connections;       /* per client address, served and waiting; 0: no limit */
	double idle_timeout_s;            /* a connection between requests, or a client not reading its response */
	double request_timeout_s;         /* a request's head and body, from its first byte; also the longest wait */
	uint64_t max_body_bytes;
	/* Front thread: gives fd (a socketpair end: the callee owns it from now on, and closes it on failure) to
	 * libmicrohttpd as a connection of the client at addr. Returns 0, or -1. */
	int (*admit)(void *ctx, int fd, const struct sockaddr *addr, socklen_t addr_len);
	/* Front thread: the front answered a request itself, with this status (for the request counters). May be
	 * NULL. */
	void (*answered)(void *ctx, int status);
	/* Front thread: it has closed the socketpair of l (http_front_link_closed is true from now on): a request
	 * libmicrohttpd suspended on it is to be woken, since a suspended connection notices nothing. May be NULL. */
	void (*link_closed)(void *ctx, http_front_link *l);
	/* Front thread: whether the admit side can take another connection now; while it cannot, connections wait for
	 * a slot as when every slot is held (http_front_wake when it can again). May be NULL. */
	bool (*room)(void *ctx);
	/* Front thread, about once a second. May be NULL. */
	void (*tick)(void *ctx);
	void *ctx;
} http_front_params;

/* Listens and starts the front's thread. Returns NULL with a message in err. */
http_front *http_front_start(const http_front_params *p, char *err, size_t err_len);
uint16_t http_front_port(const http_front *f);
/* Connections with a request in progress or an answer still leaving (as of the front's last turn). */
int32_t http_front_busy(http_front *f);
/* Stops listening (new connections are refused by the kernel), answers waiting ones 503, closes idle ones, and
 * closes the others after their current request. */
void http_front_quiesce(http_front *f);
/* Closes every connection and joins the thread (libmicrohttpd's side sees each socketpair close). Links may still be
 * used until http_front_free, which comes after libmicrohttpd has stopped. */
void http_front_stop(http_front *f);
void http_front_free(http_front *f);

/* libmicrohttpd's side, from its callbacks on any thread. */
/* At MHD_CONNECTION_NOTIFY_STARTED: the link of the connection whose socket is fd (NULL when the front does not know
 * it). The caller holds a reference until http_front_link_release (MHD_CONNECTION_NOTIFY_CLOSED). */
http_front_link *http_front_link_take(http_front *f, int fd);
void http_front_link_release(http_front_link *l);
/* Any thread: the front looks again at what waits (the admit side has room again). */
void http_front_wake(http_front *f);
/* A response is being queued for the current request (true: before any of it is written), or its queueing failed
 * after all (false: the front answers it when libmicrohttpd closes). */
void http_front_link_answered(http_front_link *l, bool answered);
/* The current request is over (libmicrohttpd's completion callback): the front may pass on the next. */
void http_front_link_completed(http_front_link *l);
/* The front has closed this connection's socketpair (its client is gone, or the front cut it). */
bool http_front_link_closed(const http_front_link *l);
/* Admitted into a probe slot: it answers GET /health or /metrics once, with Connection: close. */
bool http_front_link_probe(const http_front_link *l);
/* The status the front answered the current request with (a deadline or a framing error in its body: the
 * socketpair closes then), or 0. The front has counted and logged it. */
int http_front_link_refused(http_front_link *l);

#endif
