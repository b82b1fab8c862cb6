/* server/http.h — the HTTP plumbing on libmicrohttpd: its internal epoll threads (a small pool, no thread per
 * connection) behind the front that listens, limits connections and checks framing (http_front.h); a handler that
 * waits for the engine parks its request (MHD suspends the connection) and is woken by the engine, by the front when
 * the client goes, or by the stop; the route table, request bodies gathered piecewise, API-key check, and the reply
 * helpers every handler uses (JSON, the OpenAI error object). */
#ifndef AAH_SERVER_HTTP_H
#define AAH_SERVER_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/server.h"

/* How every JSON body and SSE event is written: compact, reals with 16 significant digits. jansson's default, 17,
 * spells a figure rounded to four decimals (ACR) as 0.46879999999999999; 16 writes 0.4688, and a float (a
 * log-probability) still reads back to the same float. */
#define HTTP_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(16))

typedef struct http_server http_server;

/* One HTTP request, from its headers to its completion (MHD's *req_cls). */
typedef struct http_request {
	server_ctx *srv;
	struct MHD_Connection *conn;
	char id[40];                      /* "req-…": in the log, in X-Request-Id; completions use it as their id */
	char method[16];
	char path[256];
	double t_start;
	char *body;                       /* the whole body, NUL-terminated (body_len bytes) */
	size_t body_len, body_cap;
	struct http_front_link *link;     /* the front's connection (http_front.h); NULL outside it */
	http_server *http;
	/* parking (http_request_park): guarded by the server's park lock */
	bool parked;                      /* its connection is suspended, on the server's parked list */
	bool woken;                       /* a wake came while it was not parked: the next park returns false */
	struct http_request *park_prev, *park_next;
	int status;                       /* the status answered, for the log and the metrics */
	char note[160];                   /* a handler's summary for the log line */
	const char *key_name;             /* the name of the API key it carried (server_ctx.keys); NULL: none needed */
	/* a handler's state that outlives its call (a stream); freed when the request completes. on_abort runs first
	 * when the client went away before the end. */
	void *state;
	void (*state_abort)(void *state);
	void (*state_free)(void *state);
} http_request;

typedef enum MHD_Result (*http_handler_fn)(http_request *req);

/* Starts listening (cfg host, port). Returns NULL with a message in err. */
http_server *http_server_start(server_ctx *srv, char *err, size_t err_len);
uint16_t http_server_port(const http_server *h);
/* Stops accepting new connections (those open finish their current request). */
void http_server_quiesce(http_server *h);
/* Begins the stop: closes every connection (the front), wakes every parked request (each ends, none parks again:
 * libmicrohttpd may not stop while one is suspended), and stops libmicrohttpd on a thread of its own, so that the
 * caller can wait with a deadline (http_server_stopped) and exit anyway when libmicrohttpd hangs. */
void http_server_stop_begin(http_server *h);
/* Requests libmicrohttpd holds, and connections of the front with an answer still leaving: the drain waits for 0. */
int http_server_busy(http_server *h);
/* True once libmicrohttpd has stopped; then http_server_free may follow. */
bool http_server_stopped(http_server *h);
/* Frees what is left; only after http_server_stopped (a server that never stopped is left to the exit). */
void http_server_free(http_server *h);
/* stop_begin, waiting without a deadline, free: for the start-up's error paths (nothing can be stuck yet). */
void http_server_stop(http_server *h);

/* Parks req until http_request_wake: libmicrohttpd suspends its connection, so that waiting costs no thread. Only
 * from req's own callbacks (the access handler, a content reader), which then return (MHD_YES, or 0 bytes) and are
 * called again once woken. Returns false, parking nothing, when a wake came since the last park, the client is gone
 * or the server stops: the caller looks at once at what changed (http_client_gone, http_request_stopping). */
bool http_request_park(http_request *req);
/* Any thread (the engine's notification): makes req's next park return false, or, when it is parked, returns what
 * http_resume needs to resume it, which the caller calls once it holds no lock of its own (a conn of NULL: nothing to
 * resume). Every wake that returns a connection must be followed by its http_resume: the stop waits for them. */
typedef struct http_wake {
	http_server *h;
	struct MHD_Connection *conn;
} http_wake;
http_wake http_request_wake(http_request *req);
void http_resume(http_wake w);
/* True once the server stops: a handler that still waits for the engine ends its request instead. */
bool http_request_stopping(const http_request *req);

/* Replies; the body is copied. Adds X-Request-Id, and Connection: close while draining. */
enum MHD_Result http_reply(http_request *req, unsigned status, const char *content_type, const char *body,
                           size_t len);
/* Replies with json (compact); steals the reference. */
enum MHD_Result http_reply_json(http_request *req, unsigned status, json_t *json);
/* The OpenAI error object {"error": {"message", "type", "param", "code"}}; param and code may be NULL. */
enum MHD_Result http_reply_error(http_request *req, unsigned status, const char *type, const char *param,
                                 const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The same with one extra header (Retry-After with a 429, …). */
enum MHD_Result http_reply_error_header(http_request *req, unsigned status, const char *type, const char *param,
                                        const char *code, const char *header, const char *value, const char *fmt, ...)
	__attribute__((format(printf, 8, 9)));
/* Queues a response made by the caller (a stream), recording its status. */
enum MHD_Result http_reply_response(http_request *req, unsigned status, struct MHD_Response *resp);

/* Parses the body as a JSON object: 400 answered (and NULL returned) for invalid UTF-8, bad JSON, or another type. */
json_t *http_body_json(http_request *req, enum MHD_Result *answered);

/* True when the client is gone: the front closed this connection's socketpair after a reset or a failed write
 * (a client that only half-closed is still there; see http_front.h). A poll, no read: a parked handler calls it
 * when woken, because a suspended connection does not notice a disconnect by itself (the front wakes it). */
bool http_client_gone(http_request *req);

/* UTF-8 validity (no overlongs, no surrogates, nothing above U+10FFFF). */
bool http_utf8_valid(const char *s, size_t n);

#endif
