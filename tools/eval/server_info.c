/* tools/eval/server_info.c — the server's description (see server_info.h). */
#include "tools/eval/server_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/eval/util.h"

static void set_regimes(eval_server *s, const json_t *arr)
{
	s->n_regimes = (int32_t)json_array_size(arr);
	s->regimes = xcalloc((size_t)(s->n_regimes ? s->n_regimes : 1), sizeof *s->regimes);
	int32_t n = 0;
	for (int32_t i = 0; i < s->n_regimes; i++) {
		const char *r = json_string_value(json_array_get(arr, (size_t)i));
		if (r)
			s->regimes[n++] = xstrdup(r);
	}
	s->n_regimes = n;
}

/* One server's /v1/models and /tokenizer_info into s (s->key untouched). */
static int fetch_one(eval_server *s, eval_client *c, char *err, size_t errlen)
{
	eval_client_error e;
	json_t *models;
	if (eval_client_get(c, "/v1/models", &models, &e) != EVAL_CLIENT_OK) {
		snprintf(err, errlen, "%s", e.message);
		return -1;
	}
	json_t *m = json_array_get(json_object_get(models, "data"), 0);
	const char *id = json_string_value(json_object_get(m, "id"));
	if (!id) {
		snprintf(err, errlen, "%s/v1/models lists no model", eval_client_url(c));
		json_decref(models);
		return -1;
	}
	s->model = xstrdup(id);
	json_t *len = json_object_get(m, "max_model_len");
	s->max_model_len = json_is_integer(len) ? (int64_t)json_integer_value(len) : 0;
	json_t *batch = json_object_get(m, "max_batch");
	s->max_batch = json_is_integer(batch) ? (int32_t)json_integer_value(batch) : 0;
	json_t *aah = json_object_get(m, "aah");
	s->aahd = json_is_object(aah);
	json_t *regimes = json_object_get(aah, "regimes");
	if (json_is_array(regimes))
		set_regimes(s, regimes);
	const char *def = json_string_value(json_object_get(aah, "default_regime"));
	s->default_regime = def ? xstrdup(def) : NULL;
	json_decref(models);

	s->prefix_token = -1;
	json_t *info;
	if (eval_client_get(c, "/tokenizer_info", &info, &e) == EVAL_CLIENT_OK) {
		json_t *bos = json_object_get(info, "bos_token_id"), *eos = json_object_get(info, "eos_token_id");
		/* the harness's remote tokenizer: bos_token_id or eos_token_id */
		if (json_is_integer(bos))
			s->prefix_token = (int32_t)json_integer_value(bos);
		else if (json_is_integer(eos))
			s->prefix_token = (int32_t)json_integer_value(eos);
		const char *eos_text = json_string_value(json_object_get(info, "eos_token"));
		s->eos_text = eos_text ? xstrdup(eos_text) : NULL;
		json_decref(info);
	} else if (e.status == EVAL_CLIENT_UNREACHABLE || e.status == EVAL_CLIENT_STOPPED) {
		snprintf(err, errlen, "%s", e.message);
		return -1;
	}
	return 0;
}

int eval_server_fetch(eval_server *s, eval_client *const *clients, int32_t n, const char *key, char *err,
                      size_t errlen)
{
	memset(s, 0, sizeof *s);
	for (int32_t i = 0; i < n; i++) {
		eval_server one = {0};
		if (fetch_one(&one, clients[i], err, errlen) != 0) {
			eval_server_free(&one);
			eval_server_free(s);
			return -1;
		}
		if (i == 0) {
			int32_t batch = one.max_batch;
			*s = one;
			s->max_batch = batch;
			continue;
		}
		if (!eval_server_same(s, &one)) {
			snprintf(err, errlen, "the servers differ: %s serves '%s' (%d regimes, context %lld), %s serves '%s' "
			         "(%d regimes, context %lld); a fleet must serve one model", eval_client_url(clients[0]),
			         s->model, s->n_regimes, (long long)s->max_model_len, eval_client_url(clients[i]), one.model,
			         one.n_regimes, (long long)one.max_model_len);
			eval_server_free(&one);
			eval_server_free(s);
			return -1;
		}
		s->max_batch += one.max_batch;
		eval_server_free(&one);
	}
	s->key = xstrdup(key);
	s->live = true;
	return 0;
}

json_t *eval_server_record(const eval_server *s)
{
	json_t *regimes = json_array();
	for (int32_t i = 0; i < s->n_regimes; i++)
		json_array_append_new(regimes, json_string(s->regimes[i]));
	json_t *r = json_pack("{s:s,s:s,s:s,s:o,s:I,s:i,s:i,s:b}", "type", "server", "server", s->key, "model", s->model,
	                      "regimes", regimes, "max_model_len", (json_int_t)s->max_model_len, "max_batch", s->max_batch,
	                      "prefix_token", s->prefix_token, "aahd", s->aahd);
	if (s->default_regime)
		json_object_set_new(r, "default_regime", json_string(s->default_regime));
	if (s->eos_text)
		json_object_set_new(r, "eos_token", json_string(s->eos_text));
	return r;
}

int eval_server_from_record(eval_server *s, const json_t *rec)
{
	memset(s, 0, sizeof *s);
	const char *key = json_string_value(json_object_get(rec, "server"));
	const char *model = json_string_value(json_object_get(rec, "model"));
	json_t *regimes = json_object_get(rec, "regimes");
	if (!key || !model || !json_is_array(regimes))
		return -1;
	s->key = xstrdup(key);
	s->model = xstrdup(model);
	set_regimes(s, regimes);
	s->max_model_len = (int64_t)json_integer_value(json_object_get(rec, "max_model_len"));
	s->max_batch = (int32_t)json_integer_value(json_object_get(rec, "max_batch"));
	json_t *p = json_object_get(rec, "prefix_token");
	s->prefix_token = json_is_integer(p) ? (int32_t)json_integer_value(p) : -1;
	const char *def = json_string_value(json_object_get(rec, "default_regime"));
	s->default_regime = def ? xstrdup(def) : NULL;
	const char *eos = json_string_value(json_object_get(rec, "eos_token"));
	s->eos_text = eos ? xstrdup(eos) : NULL;
	s->aahd = json_is_true(json_object_get(rec, "aahd"));
	s->live = false;
	return 0;
}

bool eval_server_same(const eval_server *a, const eval_server *b)
{
	if (strcmp(a->model, b->model) || a->max_model_len != b->max_model_len || a->n_regimes != b->n_regimes ||
	    a->prefix_token != b->prefix_token || a->aahd != b->aahd)
		return false;
	for (int32_t i = 0; i < a->n_regimes; i++)
		if (strcmp(a->regimes[i], b->regimes[i]))
			return false;
	return (!a->eos_text && !b->eos_text) || (a->eos_text && b->eos_text && !strcmp(a->eos_text, b->eos_text));
}

int32_t eval_server_regime(const eval_server *s, const char *name)
{
	for (int32_t i = 0; i < s->n_regimes; i++)
		if (!strcmp(s->regimes[i], name))
			return i;
	return -1;
}

void eval_server_free(eval_server *s)
{
	for (int32_t i = 0; i < s->n_regimes; i++)
		free(s->regimes[i]);
	free(s->regimes);
	free(s->key);
	free(s->model);
	free(s->default_regime);
	free(s->eos_text);
	memset(s, 0, sizeof *s);
}
