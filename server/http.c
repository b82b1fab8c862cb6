/* server/http.c — libmicrohttpd plumbing (see http.h): its internal epoll threads with a small pool, so that a
 * connection costs memory and no thread; a handler that waits for the engine parks its request (suspend), and the
 * engine, the front (a client gone) or the stop wakes it (resume); the route table; bodies; API key; reply helpers.
 * The connections come from the front (http_front.h), which listens, limits them and checks every request's framing
 * first. libmicrohttpd's own messages pass through a rate limiter (log_limit.h). */
#include "server/http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "models/utf8.h"
#include "server/api.h"
#include "server/http_credentials.h"
#include "server/http_front.h"
#include "server/log.h"
#include "server/log_limit.h"

/* libmicrohttpd's epoll threads: each serves its share of the connections (handlers are short; the engine's work is
 * on its own thread), so a few cover 2 to 16 cores. */
#define HTTP_POOL_THREADS 4

struct http_server {
	struct MHD_Daemon *d;
	server_ctx *srv;
	http_front *front;
	log_limit mhd_log;                /* libmicrohttpd's messages, once per burst with a count */
	pthread_mutex_t park_mu;          /* parked, stopping, and every request's parked/woken */
	http_request *parked;             /* suspended connections' requests */
	bool stopping;
	pthread_t stopper;                /* runs MHD_stop_daemon */
	bool stopper_started;
	atomic_bool stopped;
	atomic_int live;                  /* requests between on_access's first call and on_completed */
	atomic_int mhd_connections;       /* handed to libmicrohttpd and not yet notified closed (front_admit) */
	atomic_int resuming;              /* wakes between their unlink and their MHD_resume_connection */
	unsigned mhd_room;
};

typedef struct route {
	const char *method;
	const char *path;
	http_handler_fn fn;
	bool open;                        /* no API key needed */
} route;

static const route routes[] = {
	{ "POST", "/v1/completions", api_completions, false },
	{ "POST", "/v1/chat/completions", api_chat_completions, false },
	{ "GET", "/v1/models", api_models, false },
	{ "GET", "/health", api_health, true },
	{ "GET", "/metrics", api_metrics, false },
	{ "GET", "/v1/stats", api_stats, false },
	{ "GET", "/dashboard", api_dashboard, false },
	{ "POST", "/tokenize", api_tokenize, false },
	{ "POST", "/detokenize", api_detokenize, false },
	{ "GET", "/tokenizer_info", api_tokenizer_info, false },
};
#define N_ROUTES ((int)(sizeof routes / sizeof routes[0]))

bool http_utf8_valid(const char *str, size_t n) { return aah_utf8_check(str, n) == 0; }

/* ---- replies ---- */

enum MHD_Result http_reply_response(http_request *req, unsigned status, struct MHD_Response *resp)
{
	MHD_add_response_header(resp, "X-Request-Id", req->id);
	/* a probe slot serves one request; while draining every connection closes after its answer */
	if (atomic_load(&req->srv->draining) || (req->link && http_front_link_probe(req->link)))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	if (req->link)
		http_front_link_answered(req->link, true);
	req->status = (int)status;
	enum MHD_Result rc = MHD_queue_response(req->conn, status, resp);
	MHD_destroy_response(resp);
	if (rc != MHD_YES) {   /* libmicrohttpd will close without it: the front answers instead */
		req->status = 0;
		if (req->link)
			http_front_link_answered(req->link, false);
	}
	return rc;
}

static enum MHD_Result reply_with(http_request *req, unsigned status, const char *content_type, const char *body,
                                  size_t len, const char *h1, const char *v1)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	if (h1)
		MHD_add_response_header(resp, h1, v1);
	return http_reply_response(req, status, resp);
}

enum MHD_Result http_reply(http_request *req, unsigned status, const char *content_type, const char *body, size_t len)
{
	return reply_with(req, status, content_type, body, len, NULL, NULL);
}

enum MHD_Result http_reply_json(http_request *req, unsigned status, json_t *json)
{
	char *text = json ? json_dumps(json, HTTP_JSON_FLAGS) : NULL;
	json_decref(json);
	if (!text)   /* json_pack refuses a NULL member, e.g. json_real of a NaN, as well as a failed allocation */
		return http_reply_error(req, 500, "server_error", NULL, NULL,
		                        "the response could not be built (out of memory, or a value JSON cannot hold)");
	enum MHD_Result rc = http_reply(req, status, "application/json", text, strlen(text));
	free(text);
	return rc;
}

static enum MHD_Result reply_error_v(http_request *req, unsigned status, const char *type, const char *param,
                                     const char *code, const char *h1, const char *v1, const char *fmt, va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof msg, fmt, ap);
	/* the message may quote a client's bytes: keep it valid UTF-8 for the JSON encoder */
	if (!http_utf8_valid(msg, strlen(msg)))
		for (char *p = msg; *p; p++)
			if ((unsigned char)*p >= 0x80)
				*p = '?';
	json_t *e = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", msg, "type", type, "param",
	                      param ? json_string(param) : json_null(), "code", code ? json_string(code) : json_null());
	char *text = e ? json_dumps(e, HTTP_JSON_FLAGS) : NULL;
	json_decref(e);
	const char *body = text ? text : "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}";
	log_msg(status >= 500 ? LOG_WARN : LOG_DEBUG, req->id, "%s %s: %u %s", req->method, req->path, status, msg);
	enum MHD_Result rc = reply_with(req, status, "application/json", body, strlen(body), h1, v1);
	free(text);
	return rc;
}

enum MHD_Result http_reply_error(http_request *req, unsigned status, const char *type, const char *param,
                                 const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	enum MHD_Result rc = reply_error_v(req, status, type, param, code, NULL, NULL, fmt, ap);
	va_end(ap);
	return rc;
}

enum MHD_Result http_reply_error_header(http_request *req, unsigned status, const char *type, const char *param,
                                        const char *code, const char *h1, const char *v1, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	enum MHD_Result rc = reply_error_v(req, status, type, param, code, h1, v1, fmt, ap);
	va_end(ap);
	return rc;
}

json_t *http_body_json(http_request *req, enum MHD_Result *answered)
{
	if (!http_utf8_valid(req->body, req->body_len)) {
		*answered = http_reply_error(req, 400, "invalid_request_error", NULL, "invalid_utf8",
		                             "the request body is not valid UTF-8");
		return NULL;
	}
	json_error_t jerr;
	json_t *j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		*answered = http_reply_error(req, 400, "invalid_request_error", NULL, "invalid_json",
		                             "the request body is not valid JSON: %s (line %d, column %d)", jerr.text,
		                             jerr.line, jerr.column);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		*answered = http_reply_error(req, 400, "invalid_request_error", NULL, "invalid_json",
		                             "the request body must be a JSON object");
		return NULL;
	}
	return j;
}

bool http_client_gone(http_request *req)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return false;
	struct pollfd p = { .fd = ci->connect_fd, .events = POLLRDHUP };
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* ---- the wake trace: an opt-in timestamp for the streaming-latency benchmark ----
 * With AAHD_WAKE_TRACE=FILE in the environment, every http_request_wake (the engine's notification, on the engine
 * thread right after it published a step's token: one wake per generated token of a one-choice request, except the
 * tokens made before its handler attached to the job, which nobody is notified of) records the request's id and
 * CLOCK_REALTIME in nanoseconds in a table allocated at the start (48 MiB), written to FILE as "id ns" lines once
 * the server has stopped (http_server_free: no wake can come then, and no deadline runs; nothing is written when
 * libmicrohttpd hung and the process exits without it). tools/stream_latency.py joins them with the kernel's
 * receive timestamps of the client's socket (SO_TIMESTAMPNS, also CLOCK_REALTIME): one clock, one machine.
 * Without the variable it costs one predicted branch per wake. */

#define WAKE_TRACE_MAX (1u << 20)

typedef struct wake_mark {
	uint64_t ns;
	char id[40];
} wake_mark;

static wake_mark *wake_trace;          /* WAKE_TRACE_MAX marks, or NULL: tracing off */
static atomic_uint wake_trace_n;
static char wake_trace_path[512];

static void wake_trace_init(void)
{
	const char *p = getenv("AAHD_WAKE_TRACE");
	if (!p || !*p || wake_trace || strlen(p) >= sizeof wake_trace_path)
		return;
	snprintf(wake_trace_path, sizeof wake_trace_path, "%s", p);
	wake_trace = calloc(WAKE_TRACE_MAX, sizeof *wake_trace);   /* freed by the exit */
}

static void wake_trace_mark(const http_request *req)
{
	if (__builtin_expect(!wake_trace, 1))
		return;
	unsigned i = atomic_fetch_add(&wake_trace_n, 1);
	if (i >= WAKE_TRACE_MAX)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	wake_trace[i].ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	memcpy(wake_trace[i].id, req->id, sizeof wake_trace[i].id);
}

static void wake_trace_write(void)
{
	if (!wake_trace)
		return;
	FILE *f = fopen(wake_trace_path, "w");
	if (!f) {
		log_msg(LOG_WARN, NULL, "cannot write the wake trace to %s", wake_trace_path);
		return;
	}
	unsigned n = atomic_load(&wake_trace_n);
	for (unsigned i = 0; i < n && i < WAKE_TRACE_MAX; i++)
		fprintf(f, "%s %llu\n", wake_trace[i].id, (unsigned long long)wake_trace[i].ns);
	fclose(f);
}

/* ---- parking: a request that waits holds no thread ---- */

static void park_unlink(http_server *h, http_request *req)
{
	if (req->park_prev)
		req->park_prev->park_next = req->park_next;
	else
		h->parked = req->park_next;
	if (req->park_next)
		req->park_next->park_prev = req->park_prev;
	req->park_prev = req->park_next = NULL;
	req->parked = false;
}

bool http_request_park(http_request *req)
{
	http_server *h = req->http;
	pthread_mutex_lock(&h->park_mu);
	/* a wake since the last look, a front that closed the client's side, or the stop: nothing to wait for. (The
	 * front sets its flag before it takes this lock to wake, so one of the two sees the other.) */
	bool wait = !req->woken && !h->stopping && !(req->link && http_front_link_closed(req->link));
	req->woken = false;
	if (wait) {
		MHD_suspend_connection(req->conn);
		req->parked = true;
		req->park_prev = NULL;
		req->park_next = h->parked;
		if (h->parked)
			h->parked->park_prev = req;
		h->parked = req;
	}
	pthread_mutex_unlock(&h->park_mu);
	return wait;
}

/* With park_mu held: the connection to resume (outside every lock: MHD_resume_connection takes libmicrohttpd's own,
 * and a lock of ours around it could close a cycle), or NULL. Once unlinked here nobody else resumes it, and it stays
 * suspended (so it cannot be freed) until the caller does. */
static http_wake wake_locked(http_server *h, http_request *req)
{
	if (!req->parked) {
		req->woken = true;
		return (http_wake){ h, NULL };
	}
	park_unlink(h, req);
	atomic_fetch_add(&h->resuming, 1);   /* until http_resume: MHD_stop_daemon must not see it suspended */
	return (http_wake){ h, req->conn };
}

http_wake http_request_wake(http_request *req)
{
	http_server *h = req->http;
	wake_trace_mark(req);
	pthread_mutex_lock(&h->park_mu);
	http_wake w = wake_locked(h, req);
	pthread_mutex_unlock(&h->park_mu);
	return w;
}

void http_resume(http_wake w)
{
	if (!w.conn)
		return;
	MHD_resume_connection(w.conn);
	atomic_fetch_sub(&w.h->resuming, 1);
}

bool http_request_stopping(const http_request *req)
{
	http_server *h = req->http;
	pthread_mutex_lock(&h->park_mu);
	bool s = h->stopping;
	pthread_mutex_unlock(&h->park_mu);
	return s;
}

/* The front's thread: it closed the socketpair of l (the client went, or the connection ended). A request parked on
 * it wakes to find its client gone: a suspended connection would not notice by itself. */
static void front_link_closed(void *ctx, http_front_link *l)
{
	http_server *h = ctx;
	http_wake w = { h, NULL };   /* a link carries one request at a time */
	pthread_mutex_lock(&h->park_mu);
	for (http_request *r = h->parked; r && !w.conn; r = r->park_next)
		if (r->link == l)
			w = wake_locked(h, r);
	pthread_mutex_unlock(&h->park_mu);
	http_resume(w);
}

/* ---- the request's life ---- */

static void request_id(char *out, size_t n)
{
	static atomic_uint_fast64_t counter;
	uint64_t c = atomic_fetch_add(&counter, 1);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	/* time and a counter: unique per process, sortable, and no secret to leak */
	snprintf(out, n, "%010llx%06llx", (unsigned long long)ts.tv_sec, (unsigned long long)(c & 0xffffff));
}

/* A client's X-Request-Id (nginx's $request_id, a tracing id) is taken as ours when it is 1 to 39 characters of
 * [A-Za-z0-9._:-]: the same id then runs through the proxy's log, ours, and the response. */
static bool request_id_acceptable(const char *s)
{
	size_t n = 0;
	for (; s[n]; n++) {
		char c = s[n];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == ':' || c == '-') || n >= 39)
			return false;
	}
	return n > 0;
}

/* The key as `Authorization: Bearer KEY`, or as the password of `Basic` credentials (http_credentials.h). */
static bool authorized(http_request *req)
{
	if (req->srv->keys.n == 0)
		return true;
	req->key_name = api_keys_match(&req->srv->keys, MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
	                                                                            MHD_HTTP_HEADER_AUTHORIZATION));
	return req->key_name != NULL;
}

/* The first call for a request: key, route, method. Answers at once when any is wrong. The key comes first, so that
 * a client without it learns nothing of the routes (404 and 405 only to those with the key); an open path (/health)
 * needs none. */
static enum MHD_Result request_begin(http_request *req, const route **out)
{
	const route *match = NULL;
	bool path_known = false, open = false;
	char allow[64] = "";
	for (int i = 0; i < N_ROUTES; i++)
		if (!strcmp(routes[i].path, req->path)) {
			path_known = true;
			open |= routes[i].open;
			snprintf(allow + strlen(allow), sizeof allow - strlen(allow), "%s%s", *allow ? ", " : "",
			         routes[i].method);
			if (!strcmp(routes[i].method, req->method))
				match = &routes[i];
		}
	*out = match;
	if (!open && !authorized(req))
		/* the dashboard's challenge is Basic, so that a browser asks for the key (as the password) */
		return http_reply_error_header(req, 401, "invalid_request_error", NULL, "invalid_api_key",
		                               MHD_HTTP_HEADER_WWW_AUTHENTICATE,
		                               !strcmp(req->path, "/dashboard") ? "Basic realm=\"aahd\", charset=\"UTF-8\""
		                                                                 : "Bearer",
		                               "a valid API key is required: 'Authorization: Bearer KEY'");
	if (!path_known)
		return http_reply_error(req, 404, "invalid_request_error", NULL, "not_found", "no such endpoint: %s %s",
		                        req->method, req->path);
	if (!match)
		return http_reply_error_header(req, 405, "invalid_request_error", NULL, "method_not_allowed", MHD_HTTP_HEADER_ALLOW,
		                          allow, "%s does not take %s (allowed: %s)", req->path, req->method, allow);
	return MHD_YES;   /* the body's size and framing were checked by the front */
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_data_size,
                                 void **req_cls)
{
	http_server *h = cls;
	server_ctx *srv = h->srv;
	http_request *req = *req_cls;
	if (!req) {
		req = calloc(1, sizeof *req);
		if (!req)
			return MHD_NO;
		req->srv = srv;
		req->http = h;
		atomic_fetch_add(&h->live, 1);
		req->conn = conn;
		req->t_start = aah_now_s();
		const char *rid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");
		if (rid && request_id_acceptable(rid))
			snprintf(req->id, sizeof req->id, "%s", rid);
		else
			request_id(req->id, sizeof req->id);
		snprintf(req->method, sizeof req->method, "%s", method);
		snprintf(req->path, sizeof req->path, "%s", url);
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		req->link = ci ? ci->socket_context : NULL;
		*req_cls = req;
		const route *r;
		enum MHD_Result rc = request_begin(req, &r);
		return rc;
	}
	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		const size_t max = (size_t)srv->cfg->max_body_bytes;
		if (req->body_len + n > max)
			return MHD_NO;   /* the front refuses such a body before it comes (413): never reached */
		if (req->body_len + n + 1 > req->body_cap) {
			size_t cap = req->body_cap ? req->body_cap : 4096;
			while (cap < req->body_len + n + 1)
				cap *= 2;
			if (cap > max + 1)
				cap = max + 1;
			char *grown = realloc(req->body, cap);
			if (!grown)
				return MHD_NO;
			req->body = grown;
			req->body_cap = cap;
		}
		memcpy(req->body + req->body_len, upload_data, n);
		req->body_len += n;
		return MHD_YES;
	}
	if (!req->body) {
		req->body = strdup("");
		if (!req->body)
			return MHD_NO;
	}
	req->body[req->body_len] = 0;
	for (int i = 0; i < N_ROUTES; i++)
		if (!strcmp(routes[i].path, req->path) && !strcmp(routes[i].method, req->method))
			return routes[i].fn(req);
	return MHD_NO;   /* request_begin answered already */
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls, enum MHD_RequestTerminationCode toe)
{
	http_server *h = cls;
	server_ctx *srv = h->srv;
	http_request *req = *req_cls;
	if (!req)
		return;
	*req_cls = NULL;
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && req->state_abort)
		req->state_abort(req->state);
	/* read before the front is let go: once it passes on the next request, a refusal of that one would show here.
	 * Only a request libmicrohttpd did not answer can have been answered by the front. */
	int refused = req->link && req->status == 0 ? http_front_link_refused(req->link) : 0;
	if (req->link)   /* the front may pass on the connection's next request */
		http_front_link_completed(req->link);
	static const char *const why[] = { "", " (connection error)", " (timeout)", " (server shutdown)",
	                                   " (read error)", " (client aborted)" };
	const char *how = (unsigned)toe < sizeof why / sizeof why[0] ? why[toe] : " (terminated)";
	if (refused) {   /* the front cut its body short with an answer it counted and logged */
		req->status = refused;
		how = " (answered by the front)";
	}
	if (req->state_free)   /* may leave a note for the log line */
		req->state_free(req->state);
	/* monitoring (a load balancer's health checks, Prometheus, the dashboard's polls) is not traffic */
	bool probe = !strcmp(req->path, "/health") || !strcmp(req->path, "/metrics") || !strcmp(req->path, "/v1/stats") ||
	             !strcmp(req->path, "/dashboard");
	if (!probe && !refused)
		server_metrics_count(&srv->metrics, req->status);
	if (!strcmp(req->path, "/v1/chat/completions"))   /* the front counted a refusal in the total only */
		server_metrics_count_chat(&srv->metrics, req->status);
	log_msg(probe || refused ? LOG_DEBUG : LOG_INFO, req->id, "%s %s %d %.3fs%s%s%s", req->method, req->path, req->status,
	        aah_now_s() - req->t_start, *req->note ? " " : "", req->note, how);
	free(req->body);
	free(req);
	atomic_fetch_sub(&h->live, 1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	http_server *h = cls;
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	/* Not warnings here: libmicrohttpd tries TCP options on the front's AF_UNIX socketpairs (and says so), and a
	 * socketpair that closes mid-request is the front cutting it (its own log line says why) or a client gone. */
	static const char *const debug_only[] = { "Setting TCP_", "Failed to push the data from buffers",
	                                          "Connection socket is closed when reading request" };
	log_level lvl = LOG_WARN;
	for (size_t i = 0; i < sizeof debug_only / sizeof debug_only[0]; i++)
		if (!strncmp(msg, debug_only[i], strlen(debug_only[i])))
			lvl = LOG_DEBUG;
	/* keyed by the format: a message that repeats (a limit reached on every connection) is one line per burst */
	log_limit_msg(&h->mhd_log, fmt, lvl, "http: ", msg);
}

/* A connection of the front's comes in (its link, found by the socket's number) or goes. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
	http_server *h = cls;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		*socket_context = ci ? http_front_link_take(h->front, ci->connect_fd) : NULL;
		return;
	}
	if (atomic_fetch_sub(&h->mhd_connections, 1) >= (int)h->mhd_room)   /* (libmicrohttpd has counted it out too) */
		http_front_wake(h->front);   /* room again for one that waits */
	if (*socket_context) {
		http_front_link_release(*socket_context);
		*socket_context = NULL;
	}
}

/* libmicrohttpd 0.9.75 must never meet its connection limit: the path that refuses a connection over it returns
 * with the worker's cleanup mutex still locked, and that worker (and with it MHD_stop_daemon) is stuck for good
 * (the wedge of issue 21). Its limit is split evenly among the pool's workers, and it places a connection by the
 * socket's number, so one worker may get them all: the limit is the pool times (mhd_room + 64), and the front admits
 * no connection while libmicrohttpd holds mhd_room in all, closed-but-not-yet-cleaned ones included (counted from
 * front_admit to MHD_CONNECTION_NOTIFY_CLOSED): a worker held up (a log write to a full pipe) makes clients wait for
 * a slot, never wedges it. */
static bool front_room(void *ctx)
{
	http_server *h = ctx;
	return atomic_load(&h->mhd_connections) < (int)h->mhd_room;
}

static int front_admit(void *ctx, int fd, const struct sockaddr *addr, socklen_t addr_len)
{
	http_server *h = ctx;
	if (atomic_fetch_add(&h->mhd_connections, 1) >= (int)h->mhd_room) {
		int n = atomic_fetch_sub(&h->mhd_connections, 1) - 1;
		char msg[160];
		snprintf(msg, sizeof msg, "the HTTP library holds %d connections (room for %u): refusing one", n, h->mhd_room);
		log_limit_msg(&h->mhd_log, "room", LOG_WARN, "http: ", msg);
		close(fd);
		return -1;
	}
	if (MHD_add_connection(h->d, fd, addr, addr_len) != MHD_YES) {   /* MHD closes fd when it refuses */
		atomic_fetch_sub(&h->mhd_connections, 1);
		return -1;
	}
	return 0;
}

static void front_answered(void *ctx, int status)
{
	http_server *h = ctx;
	server_metrics_count(&h->srv->metrics, status);
}

/* The front's thread, about once a second: the end of a burst of libmicrohttpd's messages gets its count. */
static void front_tick(void *ctx)
{
	http_server *h = ctx;
	log_limit_flush(&h->mhd_log, false);
}

/* ---- the daemon ---- */

static int resolve(const char *host, uint16_t port, struct sockaddr_storage *out, socklen_t *len, char *err,
                   size_t err_len)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM }, *res;
	char ports[8];
	snprintf(ports, sizeof ports, "%u", port);
	int rc = getaddrinfo(host, ports, &hints, &res);
	if (rc != 0) {
		snprintf(err, err_len, "host '%s': %s", host, gai_strerror(rc));
		return -1;
	}
	memcpy(out, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

http_server *http_server_start(server_ctx *srv, char *err, size_t err_len)
{
	const aahd_config *cfg = srv->cfg;
	http_server *h = calloc(1, sizeof *h);
	if (!h) {
		snprintf(err, err_len, "out of memory");
		return NULL;
	}
	h->srv = srv;
	wake_trace_init();
	pthread_mutex_init(&h->park_mu, NULL);
	atomic_init(&h->stopped, false);
	atomic_init(&h->live, 0);
	atomic_init(&h->mhd_connections, 0);
	atomic_init(&h->resuming, 0);
	log_limit_init(&h->mhd_log);
	struct sockaddr_storage addr;
	socklen_t alen;
	if (resolve(cfg->host, (uint16_t)cfg->port, &addr, &alen, err, err_len) != 0) {
		http_server_free(h);
		return NULL;
	}
	/* libmicrohttpd listens on nothing: the front hands it each connection, and its epoll threads notice at once
	 * when the front closes one. Its own limits are a backstop the front keeps it from reaching (front_admit): room
	 * for every slot twice and some on any one worker, and a timeout past both of the front's. */
	const unsigned slots = (unsigned)(cfg->max_connections + cfg->probe_connections);
	h->mhd_room = 2 * slots + 64;
	unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
	                 MHD_USE_NO_LISTEN_SOCKET;
	h->d = MHD_start_daemon(
	        flags, 0, NULL, NULL, on_access, h,
	        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,   /* first, so that every message goes through it */
	        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTP_POOL_THREADS,
	        MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_POOL_THREADS * (h->mhd_room + 64),
	        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(cfg->connection_timeout + cfg->request_timeout),
	        /* headers and one upload chunk live in this; bodies are copied out piecewise */
	        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
	        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
	        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
	        MHD_OPTION_END);
	if (!h->d) {
		snprintf(err, err_len, "cannot start the HTTP library's threads");
		http_server_free(h);
		return NULL;
	}
	http_front_params fp = {
		.addr = (const struct sockaddr *)&addr,
		.addr_len = alen,
		.max_connections = (int32_t)cfg->max_connections,
		.probe_connections = (int32_t)cfg->probe_connections,
		.per_ip_connections = (int32_t)cfg->per_ip_connections,
		.idle_timeout_s = (double)cfg->connection_timeout,
		.request_timeout_s = (double)cfg->request_timeout,
		.max_body_bytes = (uint64_t)cfg->max_body_bytes,
		.admit = front_admit,
		.answered = front_answered,
		.link_closed = front_link_closed,
		.room = front_room,
		.tick = front_tick,
		.ctx = h,
	};
	char why[256];
	h->front = http_front_start(&fp, why, sizeof why);
	if (!h->front) {
		snprintf(err, err_len, "cannot listen on %s port %lld: %s", cfg->host, (long long)cfg->port, why);
		http_server_stop(h);
		return NULL;
	}
	return h;
}

uint16_t http_server_port(const http_server *h) { return http_front_port(h->front); }

void http_server_quiesce(http_server *h)
{
	http_front_quiesce(h->front);
}

static void *stopper_main(void *arg)
{
	http_server *h = arg;
	MHD_stop_daemon(h->d);
	h->d = NULL;
	atomic_store(&h->stopped, true);
	return NULL;
}

void http_server_stop_begin(http_server *h)
{
	if (!h || h->stopper_started)
		return;
	http_front_stop(h->front);   /* every socketpair closes; each parked request on one is woken */
	/* whatever is still parked (a stream between two tokens) is woken and ends; none parks again */
	pthread_mutex_lock(&h->park_mu);
	h->stopping = true;
	while (h->parked) {
		http_wake w = wake_locked(h, h->parked);
		pthread_mutex_unlock(&h->park_mu);
		http_resume(w);
		pthread_mutex_lock(&h->park_mu);
	}
	pthread_mutex_unlock(&h->park_mu);
	/* a wake of another thread's may be between its unlink and its resume: a moment */
	while (atomic_load(&h->resuming) > 0)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	if (!h->d || pthread_create(&h->stopper, NULL, stopper_main, h) != 0) {
		if (h->d)
			MHD_stop_daemon(h->d);
		h->d = NULL;
		atomic_store(&h->stopped, true);
		return;
	}
	h->stopper_started = true;
}

int http_server_busy(http_server *h) { return atomic_load(&h->live) + http_front_busy(h->front); }

bool http_server_stopped(http_server *h) { return !h || atomic_load(&h->stopped); }

void http_server_free(http_server *h)
{
	if (!h)
		return;
	if (h->stopper_started)
		pthread_join(h->stopper, NULL);
	wake_trace_write();   /* every request has completed: no wake can come any more, and no deadline runs */
	http_front_free(h->front);   /* after the last of its links is released */
	log_limit_flush(&h->mhd_log, true);
	log_limit_free(&h->mhd_log);
	pthread_mutex_destroy(&h->park_mu);
	free(h);
}

void http_server_stop(http_server *h)
{
	if (!h)
		return;
	http_server_stop_begin(h);
	http_server_free(h);
}
