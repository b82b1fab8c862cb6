/* server/stats_api.c — GET /v1/stats: the figures of /metrics as one JSON object (the dashboard's feed), plus what
 * the text exposition cannot carry: each regime's layout, every layer's KV-head groups with their window and
 * capacity. Counters are the same numbers /metrics shows, so a client can difference two polls exactly. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "server/api.h"

/* The layout of regime ri: {"full", "policy", "layers": [{"groups": [{"kv_heads", "window", "capacity"}]}]}. */
static json_t *layout_json(const engine *e, int32_t ri)
{
	engine_regime_layout lay;
	if (engine_regime_layout_get(e, ri, &lay) != 0)
		return json_null();
	json_t *layers = json_array();
	for (int32_t l = 0; l < lay.n_layers; l++) {
		json_t *groups = json_array();
		for (int32_t g = 0; g < lay.n_groups; g++) {
			if (lay.group_layer[g] != l)
				continue;
			json_t *heads = json_array();
			for (int32_t h = 0; h < lay.n_kv_heads; h++)
				if (lay.head_group[l * lay.n_kv_heads + h] == g)
					json_array_append_new(heads, json_integer(h));
			json_array_append_new(groups, json_pack("{s:o,s:i,s:i}", "kv_heads", heads, "window", lay.group_window[g],
			                                        "capacity", lay.group_capacity[g]));
		}
		json_array_append_new(layers, json_pack("{s:o}", "groups", groups));
	}
	return json_pack("{s:b,s:s,s:i,s:o}", "full", lay.full, "policy", lay.adaptive ? "adaptive" : "static",
	                 "kv_heads", lay.n_kv_heads, "layers", layers);
}

static json_t *histogram_json(const sched_histogram *h)
{
	json_t *buckets = json_array();
	uint64_t cum = 0;
	for (int32_t b = 0; b <= h->n_bounds; b++) {
		cum += h->counts[b];
		json_array_append_new(buckets, json_pack("{s:o,s:I}", "le", b < h->n_bounds ? json_real(h->bounds[b])
		                                                                             : json_string("+Inf"),
		                                         "count", (json_int_t)cum));
	}
	return json_pack("{s:I,s:f,s:o}", "count", (json_int_t)h->count, "sum", h->sum, "buckets", buckets);
}

static json_t *regime_json(const server_ctx *s, const sched_regime_totals *g, int32_t ri)
{
	const aah_tally *a = &g->aah;
	json_t *usage = json_array();
	for (int32_t w = 0; w < a->n_windows; w++)
		json_array_append_new(usage, json_pack("{s:i,s:f}", "window", a->windows[w], "usage", a->window_usage[w]));
	/* null where nothing was counted (the JSON says "no figure", never a made-up 1) */
	json_t *acr = a->sequences == 0 || a->usage_total <= 0 ? json_null() : json_real(aah_tally_acr(a));
	return json_pack("{s:s,s:I,s:o,s:o,s:o,s:f,s:f,s:o,s:f,s:f,s:f,s:f,s:o,s:o,s:o,s:o}", "name", g->name,
	                 "sequences", (json_int_t)a->sequences, "acr", acr,
	                 "attention_work_ratio", a->attn_products_full > 0 ? json_real(aah_tally_work_ratio(a)) : json_null(),
	                 "kv_memory_ratio", a->kv_bytes_full_peak > 0 ? json_real(aah_tally_kv_ratio(a)) : json_null(),
	                 "branch_usage_total", a->usage_total, "branch_usage_weighted", aah_tally_usage_weighted(a),
	                 "branch_usage", usage,
	                 "attention_products", a->attn_products, "attention_products_full", a->attn_products_full,
	                 "kv_peak_bytes", a->kv_bytes_peak, "kv_peak_bytes_full", a->kv_bytes_full_peak,
	                 "time_to_first_token_seconds", histogram_json(&g->ttft),
	                 "inter_token_latency_seconds", histogram_json(&g->inter_token),
	                 "request_duration_seconds", histogram_json(&g->duration), "layout", layout_json(s->eng, ri));
}

enum MHD_Result api_stats(http_request *req)
{
	const server_ctx *s = req->srv;
	sched_metrics *m = malloc(sizeof *m);
	if (!m)
		return http_reply_error(req, 503, "server_error", NULL, NULL, "out of memory");
	sched_metrics_get(s->sch, m);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	json_t *by_status = json_object(), *chat_by_status = json_object();
	for (int st = 100; st < 600; st++) {
		uint64_t n = atomic_load(&req->srv->metrics.by_status[st]);
		uint64_t nc = atomic_load(&req->srv->metrics.chat_by_status[st]);
		char key[8];
		snprintf(key, sizeof key, "%d", st);
		if (n)
			json_object_set_new(by_status, key, json_integer((json_int_t)n));
		if (nc)   /* the chat endpoint's, counted in by_status too */
			json_object_set_new(chat_by_status, key, json_integer((json_int_t)nc));
	}
	json_t *regimes = json_array();
	for (int32_t i = 0; i < m->n_regimes; i++)
		json_array_append_new(regimes, regime_json(s, &m->regimes[i], i));
	json_t *out = json_pack(
	        "{s:s,s:f,s:s,s:s,s:b,s:{s:i,s:i,s:I,s:I,s:o},s:{s:I,s:I,s:f,s:f},s:{s:I,s:I},s:i,s:s,s:o}",
	        "object", "aahd.stats", "time", (double)now.tv_sec + (double)now.tv_nsec * 1e-9, "model", s->model_name,
	        "backend", s->backend, "draining", atomic_load(&req->srv->draining),
	        "requests", "running", m->running, "waiting", m->waiting, "queue_capacity",
	        (json_int_t)s->cfg->queue_length, "max_batch", (json_int_t)s->cfg->max_batch, "by_status", by_status,
	        "tokens", "prompt_total", (json_int_t)m->prompt_tokens, "generation_total",
	        (json_int_t)m->generation_tokens, "prompt_per_second", m->prompt_tokens_per_s, "generation_per_second",
	        m->generation_tokens_per_s,
	        "kv_cache", "bytes_used", (json_int_t)m->kv_bytes_used, "bytes_capacity", (json_int_t)m->kv_bytes_capacity,
	        "acr_context_length", s->acr_context_length, "default_regime", s->default_regime, "regimes", regimes);
	/* the prefix cache: its counters and the hit rate the dashboard shows (hits ÷ queries; the share of prompt tokens
	 * it gave, hit tokens ÷ (hit tokens + prefilled)) */
	const engine_prefix_stats *pc = &m->prefix;
	double sent = (double)pc->hit_tokens + (double)m->prompt_tokens;
	if (out)
		json_object_set_new(out, "prefix_cache",
		                    json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f}", "enabled", pc->enabled, "queries",
		                              (json_int_t)pc->queries, "hits", (json_int_t)pc->hits, "hit_tokens",
		                              (json_int_t)pc->hit_tokens, "evictions", (json_int_t)pc->evictions, "bytes",
		                              (json_int_t)pc->bytes, "bytes_capacity", (json_int_t)pc->max_bytes, "hit_rate",
		                              pc->queries ? (double)pc->hits / (double)pc->queries : 0.0, "token_hit_rate",
		                              sent > 0 ? (double)pc->hit_tokens / sent : 0.0));
	free(m);
	if (out)
		json_object_set_new(json_object_get(out, "requests"), "chat_by_status", chat_by_status);
	else
		json_decref(chat_by_status);
	if (!out)
		return http_reply_error(req, 503, "server_error", NULL, NULL, "out of memory");
	return http_reply_json(req, 200, out);
}

/* The page itself: server/dashboard.html, embedded at build time (the Makefile writes it into a C array). */
extern const unsigned char dashboard_html[];
extern const size_t dashboard_html_len;

enum MHD_Result api_dashboard(http_request *req)
{
	return http_reply(req, 200, "text/html; charset=utf-8", (const char *)dashboard_html, dashboard_html_len);
}
