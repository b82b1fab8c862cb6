/* server/info_api.c — GET /v1/models (the one model, OpenAI's list shape, with its context and AAH regimes) and
 * GET /health (200 while serving — the model is loaded before the port opens — 503 while draining). */
#include <stdatomic.h>

#include "server/api.h"
#include "server/chat_template.h"

enum MHD_Result api_models(http_request *req)
{
	const server_ctx *s = req->srv;
	json_t *regimes = json_array();
	for (int32_t i = 0; i < s->n_regimes; i++)
		json_array_append_new(regimes, json_string(s->regimes[i]));
	/* max_batch: how many sequences run at once, so that a client (aah-eval) can keep the batch full */
	json_t *model = json_pack("{s:s,s:s,s:I,s:s,s:i,s:I,s:{s:o,s:s}}", "id", s->model_name, "object", "model",
	                          "created", (json_int_t)s->created, "owned_by", "aahd", "max_model_len", s->ctx_len,
	                          "max_batch", (json_int_t)s->cfg->max_batch, "aah", "regimes", regimes, "default_regime",
	                          s->default_regime);
	/* whether /v1/chat/completions can answer, and with which template */
	if (model)
		json_object_set_new(model, "chat", json_pack("{s:b,s:s?}", "available", s->chat != NULL, "template",
		                                             s->chat ? chat_template_origin(s->chat) : NULL));
	return http_reply_json(req, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model));
}

enum MHD_Result api_health(http_request *req)
{
	if (atomic_load(&req->srv->draining))
		return http_reply_json(req, 503, json_pack("{s:s}", "status", "draining"));
	return http_reply_json(req, 200, json_pack("{s:s,s:s}", "status", "ok", "model", req->srv->model_name));
}
