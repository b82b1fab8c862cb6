/* server/tokenize_api.c — POST /tokenize, POST /detokenize, GET /tokenizer_info. Both field spellings are read and
 * written: ours ("content", "add_special") and lm-evaluation-harness's remote tokenizer's ("prompt",
 * "add_special_tokens"). */
#include <stdlib.h>
#include <string.h>

#include "server/api.h"
#include "server/choice_text.h"

enum MHD_Result api_tokenize(http_request *req)
{
	enum MHD_Result rc;
	json_t *body = http_body_json(req, &rc);
	if (!body)
		return rc;
	const server_ctx *s = req->srv;
	const char *field = json_object_get(body, "content") ? "content" : "prompt";
	json_t *text = json_object_get(body, field);
	json_t *special = json_object_get(body, "add_special");
	const char *sfield = "add_special";
	if (!special) {
		special = json_object_get(body, "add_special_tokens");
		sfield = "add_special_tokens";
	}
	if (!json_is_string(text)) {
		json_decref(body);
		return http_reply_error(req, 400, "invalid_request_error", field, "invalid_type",
		                        "'content' (or 'prompt') must be a string");
	}
	if (special && !json_is_boolean(special) && !json_is_null(special)) {
		json_decref(body);
		return http_reply_error(req, 400, "invalid_request_error", sfield, "invalid_type", "'%s' must be a boolean",
		                        sfield);
	}
	const char *t = json_string_value(text);
	size_t len = json_string_length(text);
	char err[256];
	int64_t cap = (int64_t)len + 8;   /* byte-level BPE: at most a token per byte, plus BOS */
	int32_t *ids = malloc((size_t)cap * sizeof *ids);
	int64_t n = ids ? tokenizer_encode(s->tok, t, len, json_is_true(special), ids, cap, err, sizeof err) : -1;
	json_decref(body);
	if (n < 0 || n > cap) {
		free(ids);
		return http_reply_error(req, 400, "invalid_request_error", field, NULL, "cannot tokenize: %s",
		                        ids ? err : "out of memory");
	}
	json_t *arr = json_array();
	for (int64_t i = 0; i < n; i++)
		json_array_append_new(arr, json_integer(ids[i]));
	free(ids);
	snprintf(req->note, sizeof req->note, "tokens=%lld", (long long)n);
	return http_reply_json(req, 200, json_pack("{s:o,s:I}", "tokens", arr, "count", (json_int_t)n));
}

enum MHD_Result api_detokenize(http_request *req)
{
	enum MHD_Result rc;
	json_t *body = http_body_json(req, &rc);
	if (!body)
		return rc;
	const server_ctx *s = req->srv;
	json_t *arr = json_object_get(body, "tokens");
	if (!json_is_array(arr)) {
		json_decref(body);
		return http_reply_error(req, 400, "invalid_request_error", "tokens", "invalid_type",
		                        "'tokens' must be an array of token ids");
	}
	size_t n = json_array_size(arr);
	int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
	if (!ids) {
		json_decref(body);
		return http_reply_error(req, 500, "server_error", NULL, NULL, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(arr, i);
		json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
		/* the model's ids: those of its padded vocabulary that the tokenizer lacks have no text */
		if (id < 0 || id >= s->vocab) {
			free(ids);
			json_decref(body);
			return http_reply_error(req, 400, "invalid_request_error", "tokens", "invalid_token",
			                        "tokens[%zu] is not a token id in [0, %d)", i, s->vocab);
		}
		ids[i] = (int32_t)id;
	}
	json_decref(body);
	char *text;
	size_t len;
	int drc = choice_text_decode(s->tok, ids, (int64_t)n, &text, &len);
	free(ids);
	if (drc != 0)
		return http_reply_error(req, 500, "server_error", NULL, NULL, "out of memory decoding %zu tokens", n);
	json_t *out = json_pack("{s:s%,s:s%}", "content", text, (size_t)len, "prompt", text, (size_t)len);
	free(text);
	return http_reply_json(req, 200, out);
}

static json_t *token_or_null(const tokenizer *t, int32_t id)
{
	const char *s = id >= 0 ? tokenizer_token_text(t, id) : NULL;
	return s ? json_string(s) : json_null();
}

enum MHD_Result api_tokenizer_info(http_request *req)
{
	const server_ctx *s = req->srv;
	int32_t bos = tokenizer_bos(s->tok), eos = tokenizer_eos(s->tok);
	json_t *out = json_pack("{s:o,s:o,s:o,s:o,s:i,s:b,s:s,s:i}", "eos_token", token_or_null(s->tok, eos), "eos_token_id",
	                        eos >= 0 ? json_integer(eos) : json_null(), "bos_token", token_or_null(s->tok, bos),
	                        "bos_token_id", bos >= 0 ? json_integer(bos) : json_null(), "vocab_size",
	                        tokenizer_vocab_size(s->tok), "add_bos_token", tokenizer_add_bos(s->tok), "model",
	                        s->model_name, "max_model_len", s->ctx_len);
	return http_reply_json(req, 200, out);
}
