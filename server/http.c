/* server/http.c — libmicrohttpd plumbing (see http.h): one thread per connection, so that a handler may wait for
 * the engine without stalling anyone else; the route table; bodies and their limit; API key; reply helpers. */
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
#include "server/log.h"

struct http_server {
	struct MHD_Daemon *d;
	server_ctx *srv;
	uint16_t port;
	struct sockaddr_storage addr;
};

typedef struct route {
	const char *method;
	const char *path;
	http_handler_fn fn;
	bool open;                        /* no API key needed */
} route;

static const route routes[] = {
	{ "POST", "/v1/completions", api_completions, false },
	{ "GET", "/v1/models", api_models, false },
	{ "GET", "/health", api_health, true },
	{ "GET", "/metrics", api_metrics, false },
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
	if (atomic_load(&req->srv->draining))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	req->status = (int)status;
	enum MHD_Result rc = MHD_queue_response(req->conn, status, resp);
	MHD_destroy_response(resp);
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
	char *text = json ? json_dumps(json, JSON_COMPACT) : NULL;
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
	char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
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

/* Constant-time comparison, so that the key cannot be guessed byte by byte from response times. */
static bool key_equal(const char *a, size_t an, const char *b, size_t bn)
{
	unsigned char d = an != bn;
	for (size_t i = 0; i < an; i++)
		d |= (unsigned char)(a[i] ^ b[i % (bn ? bn : 1)]);
	return d == 0;
}

static bool authorized(http_request *req)
{
	const char *key = req->srv->api_key;
	if (!key)
		return true;
	const char *h = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	h += 7;
	while (*h == ' ')
		h++;
	return key_equal(h, strlen(h), key, strlen(key));
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
		return http_reply_error_header(req, 401, "invalid_request_error", NULL, "invalid_api_key",
		                               MHD_HTTP_HEADER_WWW_AUTHENTICATE,
		                          "Bearer", "a valid API key is required: 'Authorization: Bearer KEY'");
	if (!path_known)
		return http_reply_error(req, 404, "invalid_request_error", NULL, "not_found", "no such endpoint: %s %s",
		                        req->method, req->path);
	if (!match)
		return http_reply_error_header(req, 405, "invalid_request_error", NULL, "method_not_allowed", MHD_HTTP_HEADER_ALLOW,
		                          allow, "%s does not take %s (allowed: %s)", req->path, req->method, allow);
	const char *cl = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl) {
		char *end;
		unsigned long long n = strtoull(cl, &end, 10);
		if (end == cl || n > (unsigned long long)req->srv->cfg->max_body_bytes)
			return http_reply_error(req, 413, "invalid_request_error", NULL, "request_too_large",
			                        "the body (Content-Length %s) exceeds max_body_bytes %lld", cl,
			                        (long long)req->srv->cfg->max_body_bytes);
	}
	return MHD_YES;
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
		request_id(req->id, sizeof req->id);
		snprintf(req->method, sizeof req->method, "%s", method);
		snprintf(req->path, sizeof req->path, "%s", url);
		*req_cls = req;
		const route *r;
		enum MHD_Result rc = request_begin(req, &r);
		return rc;
	}
	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		const size_t max = (size_t)srv->cfg->max_body_bytes;
		if (!req->too_large && req->body_len + n > max) {
			/* no Content-Length (chunked): the answer can only come after the body, so drop what comes */
			req->too_large = true;
			free(req->body);
			req->body = NULL;
		}
		if (req->too_large) {
			/* MHD lets a handler answer only before the body or after it: read on (keeping nothing) to answer 413,
			 * up to a bound past which it is a flood and the connection is closed instead */
			req->discarded += n;
			size_t flood = 16 * max > ((size_t)64 << 20) ? 16 * max : ((size_t)64 << 20);
			return req->discarded > flood ? MHD_NO : MHD_YES;
		}
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
	if (req->too_large)
		return http_reply_error(req, 413, "invalid_request_error", NULL, "request_too_large",
		                        "the body exceeds max_body_bytes %lld", (long long)srv->cfg->max_body_bytes);
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
	static const char *const why[] = { "", " (connection error)", " (timeout)", " (server shutdown)",
	                                   " (read error)", " (client aborted)" };
	const char *how = (unsigned)toe < sizeof why / sizeof why[0] ? why[toe] : " (terminated)";
	if (req->state_free)   /* may leave a note for the log line */
		req->state_free(req->state);
	bool probe = !strcmp(req->path, "/health") || !strcmp(req->path, "/metrics");
	if (!probe)
		server_metrics_count(&srv->metrics, req->status);
	log_msg(probe ? LOG_DEBUG : LOG_INFO, req->id, "%s %s %d %.3fs%s%s%s", req->method, req->path, req->status,
	        now_s() - req->t_start, *req->note ? " " : "", req->note, how);
	free(req->body);
	free(req);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	log_msg(LOG_WARN, NULL, "http: %s", msg);
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
	socklen_t alen;
	if (resolve(cfg->host, (uint16_t)cfg->port, &h->addr, &alen, err, err_len) != 0) {
		free(h);
		return NULL;
	}
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC |
	                 MHD_USE_ERROR_LOG;
	if (h->addr.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	h->d = MHD_start_daemon(
	        flags, (uint16_t)cfg->port, NULL, NULL, on_access, srv,
	        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,   /* first, so that every message goes through it */
	        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&h->addr,
	        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
	        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->per_ip_connections,
	        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->connection_timeout,
	        /* headers and one upload chunk live in this; bodies are copied out piecewise */
	        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
	        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
	        MHD_OPTION_END);
	if (!h->d) {
		snprintf(err, err_len, "cannot listen on %s port %lld (in use, or not an address of this machine?)", cfg->host,
		         (long long)cfg->port);
		free(h);
		return NULL;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	h->port = di ? di->port : (uint16_t)cfg->port;
	return h;
}

uint16_t http_server_port(const http_server *h) { return h->port; }

void http_server_quiesce(http_server *h)
{
	MHD_socket fd = MHD_quiesce_daemon(h->d);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
}

void http_server_stop(http_server *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->d);
	free(h);
}
