/* server/completion_request.c — parses and validates a /v1/completions body (see completion_request.h).
 * Absent and null fields take their defaults; a present field of the wrong type or range is an error. */
#include "server/completion_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/request_fields.h"

typedef struct parse_ctx {
	json_t *body;
	char *err;
	size_t err_len;
	const char **param;
} parse_ctx;

static int fail(parse_ctx *c, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(parse_ctx *c, const char *param, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, c->err_len, fmt, ap);
	va_end(ap);
	*c->param = param;
	return -1;
}

/* The field, or NULL when absent or null. */
static json_t *field(parse_ctx *c, const char *name)
{
	json_t *v = json_object_get(c->body, name);
	return json_is_null(v) ? NULL : v;
}

static int get_number(parse_ctx *c, const char *name, double lo, double hi, bool lo_open, double *out)
{
	json_t *v = field(c, name);
	if (!v)
		return 0;
	if (!json_is_number(v))
		return fail(c, name, "'%s' must be a number", name);
	double x = json_number_value(v);
	if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
		return fail(c, name, "'%s' must be in %s%g, %g]", name, lo_open ? "(" : "[", lo, hi);
	*out = x;
	return 0;
}

/* An integer; a real with an integral value (16.0) is taken too, as JavaScript clients may send one. */
static int get_int(parse_ctx *c, const char *name, int64_t lo, int64_t hi, bool *present, int64_t *out)
{
	json_t *v = field(c, name);
	if (!v)
		return 0;
	int64_t x;
	if (json_is_integer(v)) {
		x = json_integer_value(v);
	} else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
	           fabs(json_real_value(v)) < 9.0e15) {
		x = (int64_t)json_real_value(v);
	} else {
		return fail(c, name, "'%s' must be an integer", name);
	}
	if (x < lo || x > hi)
		return fail(c, name, "'%s' must be an integer in [%lld, %lld]", name, (long long)lo, (long long)hi);
	if (present)
		*present = true;
	*out = x;
	return 0;
}

static int get_bool(parse_ctx *c, const char *name, bool *out)
{
	json_t *v = field(c, name);
	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return fail(c, name, "'%s' must be true or false", name);
	*out = json_is_true(v);
	return 0;
}

static int get_string(parse_ctx *c, const char *name, const char **out)
{
	json_t *v = field(c, name);
	if (!v)
		return 0;
	if (!json_is_string(v))
		return fail(c, name, "'%s' must be a string", name);
	*out = json_string_value(v);
	return 0;
}

/* An array of token ids into p->ids. */
static int ids_parse(parse_ctx *c, json_t *arr, completion_prompt *p)
{
	size_t n = json_array_size(arr);
	if (n == 0)
		return fail(c, "prompt", "a prompt of token ids must not be empty");
	if (n > INT32_MAX / 2)
		return fail(c, "prompt", "the prompt is too long");
	p->ids = malloc(n * sizeof *p->ids);
	if (!p->ids)
		return fail(c, "prompt", "out of memory");
	p->n_ids = (int32_t)n;
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(arr, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
			return fail(c, "prompt", "prompt[%zu] is not a token id (a non-negative integer)", i);
		p->ids[i] = (int32_t)json_integer_value(v);
	}
	return 0;
}

static int prompts_parse(parse_ctx *c, completion_request *r, int32_t max_prompts)
{
	json_t *v = field(c, "prompt");
	if (!v)
		return fail(c, "prompt", "'prompt' is required");
	if (json_is_string(v)) {
		r->prompts = calloc(1, sizeof *r->prompts);
		if (!r->prompts)
			return fail(c, "prompt", "out of memory");
		r->n_prompts = 1;
		r->prompts[0].text = json_string_value(v);
		r->prompts[0].text_len = json_string_length(v);
		return 0;
	}
	if (!json_is_array(v))
		return fail(c, "prompt", "'prompt' must be a string, an array of strings, an array of token ids or an "
		                         "array of arrays of token ids");
	size_t n = json_array_size(v);
	if (n == 0)
		return fail(c, "prompt", "'prompt' must not be empty");
	json_t *first = json_array_get(v, 0);
	if (json_is_integer(first)) {   /* one prompt of ids */
		r->prompts = calloc(1, sizeof *r->prompts);
		if (!r->prompts)
			return fail(c, "prompt", "out of memory");
		r->n_prompts = 1;
		return ids_parse(c, v, &r->prompts[0]);
	}
	if (n > (size_t)max_prompts)
		return fail(c, "prompt", "%zu prompts: at most %d in one request", n, max_prompts);
	r->prompts = calloc(n, sizeof *r->prompts);
	if (!r->prompts)
		return fail(c, "prompt", "out of memory");
	r->n_prompts = (int32_t)n;
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(v, i);
		if (json_is_string(first) && json_is_string(e)) {
			r->prompts[i].text = json_string_value(e);
			r->prompts[i].text_len = json_string_length(e);
		} else if (json_is_array(first) && json_is_array(e)) {
			if (ids_parse(c, e, &r->prompts[i]) != 0)
				return -1;
		} else {
			return fail(c, "prompt", "prompt[%zu]: an array of prompts holds only strings or only arrays of token ids",
			            i);
		}
	}
	return 0;
}

static int stop_parse(parse_ctx *c, completion_request *r)
{
	json_t *v = field(c, "stop");
	if (!v)
		return 0;
	if (!json_is_array(v) && !json_is_string(v))
		return fail(c, "stop", "'stop' must be a string or an array of strings");
	size_t n = json_is_array(v) ? json_array_size(v) : 1;
	if (n > COMPLETION_MAX_STOP)
		return fail(c, "stop", "at most %d stop strings", COMPLETION_MAX_STOP);
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
		if (!json_is_string(s))
			return fail(c, "stop", "'stop' must be a string or an array of strings");
		size_t len = json_string_length(s);
		if (len == 0 || len > COMPLETION_MAX_STOP_BYTES)
			return fail(c, "stop", "a stop string must have 1 to %d bytes", COMPLETION_MAX_STOP_BYTES);
		r->stop[r->n_stop] = json_string_value(s);
		r->stop_len[r->n_stop++] = len;
	}
	return 0;
}

static int unsupported(parse_ctx *c, completion_request *r)
{
	json_t *v;
	if ((v = field(c, "suffix")) && !(json_is_string(v) && json_string_length(v) == 0))
		return fail(c, "suffix", "'suffix' is not supported");
	if ((v = field(c, "logit_bias")) && !(json_is_object(v) && json_object_size(v) == 0))
		return fail(c, "logit_bias", "'logit_bias' is not supported");
	if ((v = field(c, "best_of")) && !(json_is_integer(v) && json_integer_value(v) == r->n))
		return fail(c, "best_of", "'best_of' other than n is not supported");
	return 0;
}

void completion_request_defaults(completion_request *r)
{
	memset(r, 0, sizeof *r);
	r->max_tokens = -1;
	r->temperature = 1.0;   /* OpenAI's default */
	r->top_p = 1.0;
	r->logprobs = -1;
	r->n = 1;
}

int completion_request_load(completion_request *r, const char *body, size_t len, char *err, size_t err_len,
                            const char **param)
{
	completion_request_defaults(r);
	*param = NULL;
	json_error_t jerr;
	/* jansson refuses invalid UTF-8 and "\u0000" in strings, duplicate keys with this flag, and numbers beyond
	 * int64 or double */
	r->json = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	parse_ctx c = { r->json, err, err_len, param };
	if (!r->json)
		return fail(&c, NULL, "the request body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
		            jerr.column);
	if (!json_is_object(r->json))
		return fail(&c, NULL, "the request body must be a JSON object");
	return 0;
}

int completion_request_parse_shared(completion_request *r, const completion_limits *lim, char *err, size_t err_len,
                                    const char **param)
{
	parse_ctx c = { r->json, err, err_len, param };
	int64_t v;
	bool present = false;
	if (get_string(&c, "model", &r->model) || get_string(&c, "aah_regime", &r->regime) ||
	    get_string(&c, "cache_salt", &r->cache_salt))
		return -1;
	if (r->cache_salt && (!*r->cache_salt || strlen(r->cache_salt) > COMPLETION_MAX_SALT))
		return fail(&c, "cache_salt", "'cache_salt' must be a string of 1 to %d bytes", COMPLETION_MAX_SALT);
	v = 1;
	if (get_int(&c, "n", 1, lim->max_n, NULL, &v))
		return -1;
	r->n = (int32_t)v;
	if (get_int(&c, "max_tokens", 0, lim->max_tokens, &present, &v))
		return -1;
	if (present)
		r->max_tokens = v;
	if (get_number(&c, "temperature", 0, 2, false, &r->temperature) ||
	    get_number(&c, "top_p", 0, 1, true, &r->top_p) || get_number(&c, "min_p", 0, 1, false, &r->min_p) ||
	    get_number(&c, "presence_penalty", -2, 2, false, &r->presence_penalty) ||
	    get_number(&c, "frequency_penalty", -2, 2, false, &r->frequency_penalty))
		return -1;
	v = 0;
	if (get_int(&c, "top_k", -1, INT32_MAX, NULL, &v))   /* -1 = off, as vLLM */
		return -1;
	r->top_k = v < 0 ? 0 : (int32_t)v;
	if (get_int(&c, "seed", INT64_MIN, INT64_MAX, &r->seed_set, &v))
		return -1;
	r->seed = (uint64_t)v;
	if (get_bool(&c, "stream", &r->stream) || stop_parse(&c, r))
		return -1;
	json_t *so = field(&c, "stream_options");
	if (so) {
		json_t *iu = json_object_get(so, "include_usage");
		if (!json_is_object(so) || (iu && !json_is_boolean(iu) && !json_is_null(iu)))
			return fail(&c, "stream_options", "'stream_options' must be an object {\"include_usage\": bool}");
		r->include_usage = json_is_true(iu);
	}
	return 0;
}

int completion_request_parse(completion_request *r, const char *body, size_t len, const completion_limits *lim,
                             char *err, size_t err_len, const char **param)
{
	if (completion_request_load(r, body, len, err, err_len, param) != 0 ||
	    request_fields_check(r->json, REQUEST_COMPLETIONS, err, err_len, param) != 0 ||
	    completion_request_parse_shared(r, lim, err, err_len, param) != 0)
		return -1;
	parse_ctx c = { r->json, err, err_len, param };
	if (prompts_parse(&c, r, lim->max_n) != 0)
		return -1;
	if ((int64_t)r->n * r->n_prompts > lim->max_n)
		return fail(&c, "n", "n × prompts = %d: at most %d choices in one request", r->n * r->n_prompts, lim->max_n);
	int64_t v = -1;
	if (get_int(&c, "logprobs", 0, COMPLETION_MAX_LOGPROBS, NULL, &v))
		return -1;
	r->logprobs = (int32_t)v;
	if (get_bool(&c, "echo", &r->echo) || unsupported(&c, r))
		return -1;
	return 0;
}

void completion_request_free(completion_request *r)
{
	for (int32_t i = 0; i < r->n_prompts; i++)
		free(r->prompts[i].ids);
	free(r->prompts);
	json_decref(r->json);
	memset(r, 0, sizeof *r);
}
