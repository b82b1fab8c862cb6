/* server/completion_request.c — parses and validates a /v1/completions body (see completion_request.h).
 * Absent and null fields take their defaults; a present field of the wrong type or range is an error. */
#include "server/completion_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/scheduler.h"
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

/* A token id as a logit_bias key is written: decimal digits, no sign, no leading zero (so that no two keys name one
 * id), below limit (0: INT32_MAX). -1 when it is not one. */
static int64_t key_token_id(const char *k, int32_t limit)
{
	size_t n = strlen(k);
	if (n == 0 || n > 10 || (n > 1 && k[0] == '0'))
		return -1;
	int64_t id = 0;
	for (size_t i = 0; i < n; i++) {
		if (k[i] < '0' || k[i] > '9')
			return -1;
		id = id * 10 + (k[i] - '0');
	}
	return id <= INT32_MAX && (limit <= 0 || id < limit) ? id : -1;
}

/* logit_bias, as OpenAI: {"token id": bias in [-100, 100]}, at most SAMPLER_MAX_BIAS entries; an id must be one of the
 * model's tokens (lim->vocab). */
static int bias_parse(parse_ctx *c, completion_request *r, const completion_limits *lim)
{
	json_t *v = field(c, "logit_bias");
	if (!v)
		return 0;
	if (!json_is_object(v))
		return fail(c, "logit_bias", "'logit_bias' must be an object mapping token ids (\"50256\") to biases in "
		                             "[-100, 100]");
	size_t n = json_object_size(v);
	if (n > SAMPLER_MAX_BIAS)
		return fail(c, "logit_bias", "'logit_bias' has %zu entries: at most %d", n, SAMPLER_MAX_BIAS);
	if (n == 0)
		return 0;
	r->bias = malloc(n * sizeof *r->bias);
	if (!r->bias)
		return fail(c, "logit_bias", "out of memory");
	const char *k;
	json_t *b;
	json_object_foreach(v, k, b) {
		int64_t id = key_token_id(k, lim->vocab);
		if (id < 0) {
			if (lim->vocab > 0 && key_token_id(k, 0) >= 0)
				return fail(c, "logit_bias", "logit_bias: token id %s is not in the vocabulary [0, %d)", k, lim->vocab);
			return fail(c, "logit_bias", "logit_bias: the key '%.32s' is not a token id in decimal (\"50256\")", k);
		}
		if (!json_is_number(b) || !isfinite(json_number_value(b)) || fabs(json_number_value(b)) > 100)
			return fail(c, "logit_bias", "logit_bias[\"%s\"] must be a number in [-100, 100]", k);
		r->bias[r->n_bias++] = (sampler_bias){ (int32_t)id, (float)json_number_value(b) };
	}
	return 0;
}

/* stop_token_ids (vLLM): token ids that end a request as EOS does; repeated ids count once. */
static int stop_ids_parse(parse_ctx *c, completion_request *r, const completion_limits *lim)
{
	json_t *v = field(c, "stop_token_ids");
	if (!v)
		return 0;
	if (!json_is_array(v))
		return fail(c, "stop_token_ids", "'stop_token_ids' must be an array of token ids");
	const int64_t hi = lim->vocab > 0 ? lim->vocab : INT32_MAX;
	for (size_t i = 0; i < json_array_size(v); i++) {
		json_t *e = json_array_get(v, i);
		if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= hi)
			return fail(c, "stop_token_ids", "stop_token_ids[%zu] is not a token id in [0, %lld)", i, (long long)hi);
		int32_t id = (int32_t)json_integer_value(e), k = 0;
		while (k < r->n_stop_token_ids && r->stop_token_ids[k] != id)
			k++;
		if (k < r->n_stop_token_ids)
			continue;
		if (r->n_stop_token_ids == SAMPLER_MAX_STOP_IDS)
			return fail(c, "stop_token_ids", "more than %d stop_token_ids", SAMPLER_MAX_STOP_IDS);
		r->stop_token_ids[r->n_stop_token_ids++] = id;
	}
	return 0;
}

static int unsupported(parse_ctx *c, completion_request *r)
{
	json_t *v;
	if ((v = field(c, "suffix")) && !(json_is_string(v) && json_string_length(v) == 0))
		return fail(c, "suffix", "'suffix' is not supported");
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
	r->repetition_penalty = 1.0;
	r->logprobs = -1;
	r->n = 1;
	r->spec_adaptive = -1;
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
	/* an integer past int64 (a JSON Schema's enum or bound, say) is valid JSON: read every integer as a double then,
	 * as JavaScript does; the integer fields accept integral doubles */
	if (!r->json && strstr(jerr.text, "too big integer"))
		r->json = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &jerr);
	parse_ctx c = { r->json, err, err_len, param };
	if (!r->json)
		return fail(&c, NULL, "the request body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
		            jerr.column);
	if (!json_is_object(r->json))
		return fail(&c, NULL, "the request body must be a JSON object");
	return 0;
}

/* aah_speculation: "off", "ngram", "regime", "model", or {"draft": one of them, "k": 1 … 15, "adaptive": bool,
 * "regime": the draft regime} (docs/speculative.md). The scheduler checks what the server can run. */
static int spec_parse(parse_ctx *c, completion_request *r)
{
	static const char *const usage = "'aah_speculation' must be \"off\", \"ngram\", \"regime\", \"model\" or an object "
	                                 "{\"draft\": one of them, \"k\": 1 to 15, \"adaptive\": bool, \"regime\": name}";
	json_t *v = field(c, "aah_speculation");
	if (!v)
		return 0;
	json_t *d = v;
	if (json_is_object(v)) {
		const char *key;
		json_t *x;
		json_object_foreach(v, key, x) {
			if (!strcmp(key, "k")) {
				double k = json_is_number(x) ? json_number_value(x) : 0;
				if (k != (int32_t)k || k < 1 || k > 15)
					return fail(c, "aah_speculation", "'aah_speculation.k' must be an integer from 1 to 15");
				r->spec_k = (int32_t)k;
			} else if (!strcmp(key, "adaptive")) {
				if (!json_is_boolean(x))
					return fail(c, "aah_speculation", "'aah_speculation.adaptive' must be true or false");
				r->spec_adaptive = json_is_true(x);
			} else if (!strcmp(key, "regime")) {
				if (!json_is_string(x))
					return fail(c, "aah_speculation", "'aah_speculation.regime' must be a regime's name");
				r->spec_regime = json_string_value(x);
			} else if (strcmp(key, "draft") != 0) {
				return fail(c, "aah_speculation", "'aah_speculation' has no field '%.64s': %s", key, usage);
			}
		}
		d = json_object_get(v, "draft");
		if (!d)
			return fail(c, "aah_speculation", "'aah_speculation.draft' is missing: %s", usage);
	}
	sched_draft k;
	if (!json_is_string(d) || sched_draft_parse(json_string_value(d), &k) != 0)
		return fail(c, "aah_speculation", "%s", usage);
	if (r->spec_regime && k != SCHED_DRAFT_REGIME)
		return fail(c, "aah_speculation", "'aah_speculation.regime' names a draft regime: it goes with "
		            "\"draft\": \"regime\"");
	r->spec_draft = (int32_t)k;
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
	if (constraint_parse(r->json, &r->constraint, err, err_len, param) != 0)
		return -1;
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
	    get_number(&c, "frequency_penalty", -2, 2, false, &r->frequency_penalty) ||
	    get_number(&c, "repetition_penalty", 0, 2, true, &r->repetition_penalty))
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
	if (get_int(&c, "min_tokens", 0, lim->max_tokens, NULL, &r->min_tokens) ||
	    get_bool(&c, "ignore_eos", &r->ignore_eos) || stop_ids_parse(&c, r, lim) || bias_parse(&c, r, lim))
		return -1;
	if (spec_parse(&c, r))
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
	free(r->bias);
	constraint_free(&r->constraint);
	json_decref(r->json);
	memset(r, 0, sizeof *r);
}
