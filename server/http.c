/* server/http.c — libmicrohttpd plumbing (see http.h): one thread per connection, so that a handler may wait for
 * the engine without stalling anyone else; the route table; bodies; API key; reply helpers. The connections come
 * from the front (http_front.h), which listens, limits them and checks every request's framing first. */
#include "server/http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/api.h"
#include "server/http_credentials.h"
#include "server/http_front.h"
#include "server/log.h"

struct http_server {
	struct MHD_Daemon *d;
	server_ctx *srv;
	http_front *front;
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

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool http_utf8_valid(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;
	while (i < n) {
		unsigned char c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		int len;
		unsigned char lo = 0x80, hi = 0xbf;
		if (c >= 0xc2 && c <= 0xdf)
			len = 2;
		else if (c >= 0xe0 && c <= 0xef) {
			len = 3;
			if (c == 0xe0) lo = 0xa0;        /* overlong */
			if (c == 0xed) hi = 0x9f;        /* surrogates */
		} else if (c >= 0xf0 && c <= 0xf4) {
			len = 4;
			if (c == 0xf0) lo = 0x90;        /* overlong */
			if (c == 0xf4) hi = 0x8f;        /* above U+10FFFF */
		} else
			return false;
		if (i + (size_t)len > n || s[i + 1] < lo || s[i + 1] > hi)
			return false;
		for (int k = 2; k < len; k++)
			if (s[i + (size_t)k] < 0x80 || s[i + (size_t)k] > 0xbf)
				return false;
		i += (size_t)len;
	}
	return true;
}

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
	const char *key = req->srv->api_key;
	if (!key)
		return true;
	return http_credentials_match(
	        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION), key);
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
	server_ctx *srv = cls;
	http_request *req = *req_cls;
	if (!req) {
		req = calloc(1, sizeof *req);
		if (!req)
			return MHD_NO;
		req->srv = srv;
		req->conn = conn;
		req->t_start = now_s();
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
	server_ctx *srv = cls;
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
	        now_s() - req->t_start, *req->note ? " " : "", req->note, how);
	free(req->body);
	free(req);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
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
	log_msg(lvl, NULL, "http: %s", msg);
}

/* A connection of the front's comes in (its link, found by the socket's number) or goes. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
	http_server *h = cls;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		*socket_context = ci ? http_front_link_take(h->front, ci->connect_fd) : NULL;
	} else if (*socket_context) {
		http_front_link_release(*socket_context);
		*socket_context = NULL;
	}
}

static int front_admit(void *ctx, int fd, const struct sockaddr *addr, socklen_t addr_len)
{
	http_server *h = ctx;
	return MHD_add_connection(h->d, fd, addr, addr_len) == MHD_YES ? 0 : -1;   /* MHD closes fd when it refuses */
}

static void front_answered(void *ctx, int status)
{
	http_server *h = ctx;
	server_metrics_count(&h->srv->metrics, status);
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
	struct sockaddr_storage addr;
	socklen_t alen;
	if (resolve(cfg->host, (uint16_t)cfg->port, &addr, &alen, err, err_len) != 0) {
		free(h);
		return NULL;
	}
	/* libmicrohttpd listens on nothing: the front hands it each connection. Its own limits are a backstop the front
	 * keeps it from reaching: room for every slot twice (a closed connection is counted until its thread is
	 * joined), and a timeout past both of the front's. */
	const unsigned slots = (unsigned)(cfg->max_connections + cfg->probe_connections);
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC |
	                 MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET;
	h->d = MHD_start_daemon(
	        flags, 0, NULL, NULL, on_access, srv,
	        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,   /* first, so that every message goes through it */
	        MHD_OPTION_CONNECTION_LIMIT, 2 * slots + 64,
	        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(cfg->connection_timeout + cfg->request_timeout),
	        /* headers and one upload chunk live in this; bodies are copied out piecewise */
	        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
	        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
	        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
	        MHD_OPTION_END);
	if (!h->d) {
		snprintf(err, err_len, "cannot start the HTTP library's threads");
		free(h);
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
		.ctx = h,
	};
	char why[256];
	h->front = http_front_start(&fp, why, sizeof why);
	if (!h->front) {
		snprintf(err, err_len, "cannot listen on %s port %lld: %s", cfg->host, (long long)cfg->port, why);
		MHD_stop_daemon(h->d);
		free(h);
		return NULL;
	}
	return h;
}

uint16_t http_server_port(const http_server *h) { return http_front_port(h->front); }

void http_server_quiesce(http_server *h)
{
	http_front_quiesce(h->front);
}

void http_server_stop(http_server *h)
{
	if (!h)
		return;
	http_front_stop(h->front);   /* every socketpair closes: libmicrohttpd's threads end */
	MHD_stop_daemon(h->d);
	http_front_free(h->front);   /* after the last of its links is released */
	free(h);
}
