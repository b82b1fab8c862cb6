/* server/api.h — the HTTP endpoints (README.md's table; their path: docs/architecture.md), one handler each; the
 * route table in http.c maps paths to them.
 * Each runs on one of libmicrohttpd's epoll threads once the whole body is in, and answers (or starts a stream); none
 * blocks: one that waits for the engine parks its request (http_request_park) and is called again. */
#ifndef AAH_SERVER_API_H
#define AAH_SERVER_API_H

#include "server/http.h"

enum MHD_Result api_completions(http_request *req);      /* POST /v1/completions (completions.c) */
enum MHD_Result api_chat_completions(http_request *req); /* POST /v1/chat/completions (chat_completions.c) */
enum MHD_Result api_models(http_request *req);           /* GET /v1/models (info_api.c) */
enum MHD_Result api_health(http_request *req);           /* GET /health (info_api.c) */
enum MHD_Result api_metrics(http_request *req);          /* GET /metrics (metrics_api.c) */
enum MHD_Result api_stats(http_request *req);            /* GET /v1/stats (stats_api.c) */
enum MHD_Result api_dashboard(http_request *req);        /* GET /dashboard (stats_api.c; the page is dashboard.html) */
enum MHD_Result api_tokenize(http_request *req);         /* POST /tokenize (tokenize_api.c) */
enum MHD_Result api_detokenize(http_request *req);       /* POST /detokenize (tokenize_api.c) */
enum MHD_Result api_tokenizer_info(http_request *req);   /* GET /tokenizer_info (tokenize_api.c) */

#endif
