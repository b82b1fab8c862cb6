/* tools/eval/client.c — libcurl easy handle per client, kept alive across requests (see client.h). */
#include "tools/eval/client.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "tools/eval/util.h"

struct eval_client {
	CURL *curl;
	char *base;
	char *auth;   /* "Authorization: Bearer …" or NULL */
	double timeout_s;
	const atomic_int *stop;
	eval_client_stats *stats;
	strbuf body;
	double retry_after;   /* seconds from the last answer's Retry-After, or -1 */
};

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	eval_client *c = ud;
	sb_add(&c->body, p, size * n);
	return size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
	eval_client *c = ud;
	size_t len = size * n;
	static const char name[] = "retry-after:";
	if (len > sizeof name - 1 && !strncasecmp(p, name, sizeof name - 1)) {
		char v[32];
		size_t k = len - (sizeof name - 1);
		if (k >= sizeof v)
			k = sizeof v - 1;
		memcpy(v, p + sizeof name - 1, k);
		v[k] = 0;
		char *end;
		double s = strtod(v, &end);
		c->retry_after = end != v && s >= 0 ? s : 1;   /* an HTTP date: wait a second and ask again */
	}
	return len;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t cc, curl_off_t d)
{
	eval_client *c = ud;
	return c->stop && atomic_load(c->stop) ? 1 : 0;
}

eval_client *eval_client_init(const char *base_url, const char *api_key, double timeout_s, const atomic_int *stop,
                              eval_client_stats *stats)
{
	eval_client *c = xcalloc(1, sizeof *c);
	c->curl = curl_easy_init();
	if (!c->curl) {
		free(c);
		return NULL;
	}
	size_t n = strlen(base_url);
	while (n && base_url[n - 1] == '/')
		n--;
	if (n >= 3 && !strncmp(base_url + n - 3, "/v1", 3))
		n -= 3;
	c->base = xstrndup(base_url, n);
	c->auth = api_key && *api_key ? xasprintf("Authorization: Bearer %s", api_key) : NULL;
	c->timeout_s = timeout_s;
	c->stop = stop;
	c->stats = stats;
	return c;
}

void eval_client_free(eval_client *c)
{
	if (!c)
		return;
	curl_easy_cleanup(c->curl);
	free(c->base);
	free(c->auth);
	sb_free(&c->body);
	free(c);
}

const char *eval_client_url(const eval_client *c)
{
	return c->base;
}

/* Sleeps s seconds in slices, returning early (false) when stopped. */
static bool wait_for(const eval_client *c, double s)
{
	while (s > 0) {
		if (c->stop && atomic_load(c->stop))
			return false;
		double slice = s < 0.1 ? s : 0.1;
		struct timespec ts = {0, (long)(slice * 1e9)};
		nanosleep(&ts, NULL);
		s -= slice;
	}
	return !(c->stop && atomic_load(c->stop));
}

/* The server's error object {"error": {"message", "param", "code"}} in one line, else the body's start. */
static void error_text(const char *body, char *out, size_t n)
{
	json_t *j = json_loads(body, 0, NULL);
	json_t *e = json_object_get(j, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	if (!msg && json_is_string(e))
		msg = json_string_value(e);
	if (msg) {
		const char *param = json_string_value(json_object_get(e, "param"));
		const char *code = json_string_value(json_object_get(e, "code"));
		snprintf(out, n, "%s%s%s%s%s%s", msg, param || code ? " (" : "", param ? "param " : "", param ? param : "",
		         code ? (param ? ", code " : "code ") : "", code ? code : "");
		if (param || code)
			snprintf(out + strlen(out), n - strlen(out), ")");
	} else {
		snprintf(out, n, "%.300s", body && *body ? body : "(empty body)");
	}
	json_decref(j);
}

static eval_client_status request(eval_client *c, const char *path, const char *payload, json_t **out,
                                  eval_client_error *e)
{
	*out = NULL;
	memset(e, 0, sizeof *e);
	char *url = xasprintf("%s%s", c->base, path);
	int drops = 0, unavailable = 0;
	eval_client_status st;
	for (;;) {
		if (c->stop && atomic_load(c->stop)) {
			st = EVAL_CLIENT_STOPPED;
			snprintf(e->message, sizeof e->message, "stopped");
			break;
		}
		sb_free(&c->body);
		c->retry_after = -1;
		struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
		h = curl_slist_append(h, "Expect:");
		if (c->auth)
			h = curl_slist_append(h, c->auth);
		CURL *k = c->curl;
		curl_easy_reset(k);
		curl_easy_setopt(k, CURLOPT_URL, url);
		curl_easy_setopt(k, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(k, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(k, CURLOPT_WRITEDATA, c);
		curl_easy_setopt(k, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(k, CURLOPT_HEADERDATA, c);
		curl_easy_setopt(k, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(k, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(k, CURLOPT_XFERINFODATA, c);
		curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(k, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
		if (c->timeout_s > 0)
			curl_easy_setopt(k, CURLOPT_TIMEOUT_MS, (long)(c->timeout_s * 1000));
		if (payload) {
			curl_easy_setopt(k, CURLOPT_POSTFIELDS, payload);
			curl_easy_setopt(k, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(payload));
		}
		if (c->stats)
			atomic_fetch_add(&c->stats->requests, 1);
		CURLcode rc = curl_easy_perform(k);
		curl_slist_free_all(h);
		long status = 0;
		curl_easy_getinfo(k, CURLINFO_RESPONSE_CODE, &status);
		if (rc == CURLE_ABORTED_BY_CALLBACK) {
			st = EVAL_CLIENT_STOPPED;
			snprintf(e->message, sizeof e->message, "stopped");
			break;
		}
		curl_off_t connected = 0;
		curl_easy_getinfo(k, CURLINFO_CONNECT_TIME_T, &connected);
		if (rc == CURLE_OPERATION_TIMEDOUT && connected > 0) {
			st = EVAL_CLIENT_TIMEOUT;
			snprintf(e->message, sizeof e->message, "%s%s: no answer within %.0f s (--timeout)", c->base, path,
			         c->timeout_s);
			break;
		}
		if (rc != CURLE_OK) {
			/* refused, reset, nothing received: the server may be restarting; three tries over 3.5 s */
			if (drops < 3) {
				if (c->stats)
					atomic_fetch_add(&c->stats->retries, 1);
				wait_for(c, 0.5 * (1 << drops++));
				continue;
			}
			st = EVAL_CLIENT_UNREACHABLE;
			snprintf(e->message, sizeof e->message, "cannot reach %s (%s%s): %s", c->base, c->base, path,
			         curl_easy_strerror(rc));
			break;
		}
		e->http_status = status;
		if (status == 429 || (status == 503 && c->retry_after >= 0 && unavailable < 30)) {
			/* queue full (or draining with a hint): wait as long as the server says, then ask again */
			if (status == 503)
				unavailable++;
			if (c->stats)
				atomic_fetch_add(&c->stats->waits_429, 1);
			double s = c->retry_after >= 0 ? c->retry_after : 1;
			wait_for(c, s > 60 ? 60 : s);
			continue;
		}
		if (status < 200 || status >= 300) {
			char msg[800];
			error_text(c->body.s ? c->body.s : "", msg, sizeof msg);
			st = EVAL_CLIENT_HTTP_ERROR;
			snprintf(e->message, sizeof e->message, "%s%s answered HTTP %ld: %s", c->base, path, status, msg);
			break;
		}
		json_error_t je;
		*out = json_loadb(c->body.s ? c->body.s : "", c->body.len, JSON_ALLOW_NUL, &je);   /* a model may emit U+0000 */
		if (!*out) {
			st = EVAL_CLIENT_BAD_RESPONSE;
			snprintf(e->message, sizeof e->message, "%s%s answered HTTP %ld with a body that is not JSON (%s): %.200s",
			         c->base, path, status, je.text, c->body.s ? c->body.s : "");
			break;
		}
		st = EVAL_CLIENT_OK;
		break;
	}
	e->status = st;
	free(url);
	return st;
}

eval_client_status eval_client_get(eval_client *c, const char *path, json_t **out, eval_client_error *e)
{
	return request(c, path, NULL, out, e);
}

eval_client_status eval_client_post(eval_client *c, const char *path, json_t *body, json_t **out, eval_client_error *e)
{
	char *payload = json_dumps(body, JSON_COMPACT);
	if (!payload) {
		memset(e, 0, sizeof *e);
		e->status = EVAL_CLIENT_BAD_RESPONSE;
		snprintf(e->message, sizeof e->message, "cannot encode the request");
		*out = NULL;
		return e->status;
	}
	eval_client_status st = request(c, path, payload, out, e);
	free(payload);
	return st;
}

eval_client_status eval_client_tokenize(eval_client *c, const char *text, size_t len, bool add_special, int32_t **ids,
                                        int64_t *n, eval_client_error *e)
{
	*ids = NULL;
	*n = 0;
	json_t *body = json_pack("{s:s%,s:b}", "content", text, len, "add_special", add_special);
	json_t *out;
	eval_client_status st = eval_client_post(c, "/tokenize", body, &out, e);
	json_decref(body);
	if (st != EVAL_CLIENT_OK)
		return st;
	json_t *t = json_object_get(out, "tokens");
	if (!json_is_array(t)) {
		json_decref(out);
		e->status = EVAL_CLIENT_BAD_RESPONSE;
		snprintf(e->message, sizeof e->message, "%s/tokenize: the answer has no \"tokens\" array", c->base);
		return e->status;
	}
	size_t m = json_array_size(t);
	*ids = xmalloc((m ? m : 1) * sizeof **ids);
	for (size_t i = 0; i < m; i++) {
		json_t *v = json_array_get(t, i);
		if (json_is_object(v))   /* llama.cpp's with_pieces form: {"id", "piece"} */
			v = json_object_get(v, "id");
		if (!json_is_integer(v)) {
			free(*ids);
			*ids = NULL;
			json_decref(out);
			e->status = EVAL_CLIENT_BAD_RESPONSE;
			snprintf(e->message, sizeof e->message, "%s/tokenize: tokens[%zu] is not a token id", c->base, i);
			return e->status;
		}
		(*ids)[i] = (int32_t)json_integer_value(v);
	}
	*n = (int64_t)m;
	json_decref(out);
	return EVAL_CLIENT_OK;
}
