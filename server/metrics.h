/* server/metrics.h — the HTTP counters kept here (GET /metrics is metrics_api.c), the engine's figures from the scheduler, rendered as
 * Prometheus text exposition 0.0.4 with the metric names of docs/architecture.md. */
#ifndef AAH_SERVER_METRICS_H
#define AAH_SERVER_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/scheduler.h"

#define SERVER_GRAMMAR_KINDS 6       /* json_schema, json_object, regex, choice, grammar (server/constraint.h),
                                      * tool_call (tool_choice required or named: server/tool_calls.h) */
#define SERVER_COMPILE_BOUNDS 8

typedef struct server_metrics {
	atomic_uint_fast64_t by_status[600];   /* HTTP responses by status (probes of /health and /metrics excepted) */
	atomic_uint_fast64_t chat_by_status[600];   /* those of POST /v1/chat/completions among them */
	/* constrained decoding: requests by the kind of their constraint, the grammar cache's lookups, and the time of
	 * each compile (a miss), in microseconds per bucket of SERVER_COMPILE_BOUNDS (+Inf last) */
	atomic_uint_fast64_t constrained[SERVER_GRAMMAR_KINDS];
	atomic_uint_fast64_t grammar_hits, grammar_misses, grammar_errors;
	atomic_uint_fast64_t compile_counts[SERVER_COMPILE_BOUNDS + 1];
	atomic_uint_fast64_t compile_us;
	/* chat answers' tool calls (docs/chat.md#tools): those returned, and those among them whose arguments are not one
	 * JSON object (returned as the model wrote them) */
	atomic_uint_fast64_t tool_calls, tool_call_invalid_arguments;
} server_metrics;

void server_metrics_count(server_metrics *m, int status);
/* A response of /v1/chat/completions, counted besides (not instead of) server_metrics_count. */
void server_metrics_count_chat(server_metrics *m, int status);
/* A constrained request: its constraint's kind, whether the grammar cache had it, whether it compiled, and the
 * seconds the lookup (with the compile on a miss) took. */
void server_metrics_grammar(server_metrics *m, const char *kind, bool hit, bool ok, double seconds);
/* A chat answer's tool calls: calls returned, invalid of them with arguments that do not parse. */
void server_metrics_tool_calls(server_metrics *m, int64_t calls, int64_t invalid);
/* What /metrics shows beside the scheduler's figures. */
typedef struct server_metrics_info {
	const char *backend;          /* engine_backend_desc, e.g. "cuda (NVIDIA H200, …)": aahd_backend_info{backend, device} */
	int32_t acr_context_length;   /* T of ACR: aahd_acr_context_length */
	int64_t queue_capacity;       /* queue_length: aahd_queue_capacity */
	int64_t max_batch;            /* aahd_max_batch */
} server_metrics_info;

/* Renders every metric into a malloc'd text (caller frees); *len its length. NULL when out of memory. */
char *server_metrics_render(server_metrics *m, sched *s, const server_metrics_info *info, size_t *len);

#endif
