/* server/metrics_api.c — GET /metrics: the scheduler's and the HTTP counters rendered by metrics.c. Kept apart from
 * metrics.c so that the arrows run one way: http.c counts into metrics.c, and this handler uses both. */
#include <stdlib.h>

#include "server/api.h"
#include "server/metrics.h"

static server_metrics_info server_metrics_info_of(const server_ctx *srv)
{
	return (server_metrics_info){ .backend = srv->backend, .acr_context_length = srv->acr_context_length,
	                              .queue_capacity = srv->cfg->queue_length, .max_batch = srv->cfg->max_batch };
}

enum MHD_Result api_metrics(http_request *req)
{
	size_t len;
	server_metrics_info info = server_metrics_info_of(req->srv);
	char *text = server_metrics_render(&req->srv->metrics, req->srv->sch, &info, &len);
	if (!text)
		return http_reply_error(req, 500, "server_error", NULL, NULL, "out of memory");
	enum MHD_Result rc = http_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
	free(text);
	return rc;
}
