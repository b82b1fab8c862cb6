/* server/http.h — the HTTP plumbing on libmicrohttpd: one thread per connection, behind the front that listens,
 * limits connections and checks framing (http_front.h); the route table, request bodies gathered piecewise, API-key
 * check, and the reply helpers every handler uses (JSON, the OpenAI error object). */
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
	int status;                       /* the status answered, for the log and the metrics */
	char note[160];                   /* a handler's summary for the log line */
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
/* Closes everything: waits for every connection thread. */
void http_server_stop(http_server *h);

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
 * (a client that only half-closed is still there; see http_front.h). A poll, no read: a handler waiting for the
 * engine calls it now and then, because a blocked connection thread does not notice a disconnect by itself. */
bool http_client_gone(http_request *req);

/* UTF-8 validity (no overlongs, no surrogates, nothing above U+10FFFF). */
bool http_utf8_valid(const char *s, size_t n);

#endif
