/* server/metrics.c — the HTTP status counters and the text of /metrics (see metrics.h; the handler is metrics_api.c):
 * a snapshot of the scheduler's counters and the status counts as Prometheus text 0.0.4, HELP and TYPE per family,
 * histograms with cumulative buckets. A leaf: it includes nothing of the HTTP side. */
#include "server/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void server_metrics_count(server_metrics *m, int status)
{
	if (status >= 100 && status < 600)
		atomic_fetch_add(&m->by_status[status], 1);
}

void server_metrics_count_chat(server_metrics *m, int status)
{
	if (status >= 100 && status < 600)
		atomic_fetch_add(&m->chat_by_status[status], 1);
}

static const char *const grammar_kinds[SERVER_GRAMMAR_KINDS] = { "json_schema", "json_object", "regex", "choice",
                                                                  "grammar", "tool_call" };
static const double compile_bounds[SERVER_COMPILE_BOUNDS] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5 };

void server_metrics_tool_calls(server_metrics *m, int64_t calls, int64_t invalid)
{
	atomic_fetch_add(&m->tool_calls, (uint_fast64_t)calls);
	atomic_fetch_add(&m->tool_call_invalid_arguments, (uint_fast64_t)invalid);
}

void server_metrics_grammar(server_metrics *m, const char *kind, bool hit, bool ok, double seconds)
{
	for (int i = 0; i < SERVER_GRAMMAR_KINDS; i++)
		if (kind && !strcmp(kind, grammar_kinds[i]))
			atomic_fetch_add(&m->constrained[i], 1);
	if (hit) {
		atomic_fetch_add(&m->grammar_hits, 1);
		return;
	}
	atomic_fetch_add(&m->grammar_misses, 1);
	if (!ok) {
		atomic_fetch_add(&m->grammar_errors, 1);
		return;
	}
	int b = 0;
	while (b < SERVER_COMPILE_BOUNDS && seconds > compile_bounds[b])
		b++;
	atomic_fetch_add(&m->compile_counts[b], 1);
	atomic_fetch_add(&m->compile_us, (uint_fast64_t)(seconds * 1e6 + 0.5));
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, double quote and newline escaped, as the format asks. */
static void label_value(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f), fputc(*s, f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

/* One histogram's series: with a regime label (one series per regime of one family: a quantile of the whole server is
 * histogram_quantile(q, sum by (le) (rate(NAME_bucket[…])))), or without (regime NULL). */
static void histogram_series(FILE *f, const char *name, const char *regime, const sched_histogram *h)
{
	uint64_t cum = 0;
	for (int32_t b = 0; b <= h->n_bounds; b++) {
		cum += h->counts[b];
		fprintf(f, "%s_bucket{", name);
		if (regime) {
			fputs("regime=\"", f);
			label_value(f, regime);
			fputs("\",", f);
		}
		if (b < h->n_bounds)
			fprintf(f, "le=\"%g\"} %llu\n", h->bounds[b], (unsigned long long)cum);
		else
			fprintf(f, "le=\"+Inf\"} %llu\n", (unsigned long long)cum);
	}
	const char *suffix[2] = { "_sum", "_count" };
	for (int k = 0; k < 2; k++) {
		fprintf(f, "%s%s", name, suffix[k]);
		if (regime) {
			fputs("{regime=\"", f);
			label_value(f, regime);
			fputs("\"}", f);
		}
		if (k == 0)
			fprintf(f, " %.9g\n", h->sum);
		else
			fprintf(f, " %llu\n", (unsigned long long)h->count);
	}
}

static void histogram(FILE *f, const sched_metrics *m, const char *name, const char *help, int which)
{
	family(f, name, "histogram", help);
	for (int32_t i = 0; i < m->n_regimes; i++) {
		const sched_regime_totals *g = &m->regimes[i];
		histogram_series(f, name, g->name, which == 0 ? &g->ttft : which == 1 ? &g->inter_token : &g->duration);
	}
}

typedef enum regime_figure {
	FIGURE_SEQUENCES,
	FIGURE_PRODUCTS,
	FIGURE_PRODUCTS_FULL,
	FIGURE_KV_PEAK,
	FIGURE_KV_PEAK_FULL,
} regime_figure;

static double figure(const sched_regime_totals *g, regime_figure which)
{
	switch (which) {
	case FIGURE_SEQUENCES: return (double)g->aah.sequences;
	case FIGURE_PRODUCTS: return g->aah.attn_products;
	case FIGURE_PRODUCTS_FULL: return g->aah.attn_products_full;
	case FIGURE_KV_PEAK: return g->aah.kv_bytes_peak;
	case FIGURE_KV_PEAK_FULL: return g->aah.kv_bytes_full_peak;
	}
	return 0;
}

/* A counter per regime, every regime from the start (at 0), so that rate() sees each one's first increase. Values
 * are integers summed in doubles: exact up to 2^53. */
static void regime_counter(FILE *f, const sched_metrics *m, const char *name, const char *help, regime_figure which)
{
	family(f, name, "counter", help);
	for (int32_t i = 0; i < m->n_regimes; i++) {
		const sched_regime_totals *g = &m->regimes[i];
		fprintf(f, "%s{regime=\"", name);
		label_value(f, g->name);
		fprintf(f, "\"} %.0f\n", figure(g, which));
	}
}

/* One gauge per regime that has finished sequences: value = num / den. */
static void per_regime(FILE *f, const sched_metrics *m, const char *name, const char *help, int which)
{
	family(f, name, "gauge", help);
	for (int32_t i = 0; i < m->n_regimes; i++) {
		const sched_regime_totals *g = &m->regimes[i];
		if (g->aah.sequences == 0)
			continue;
		double v = which == 0 ? aah_tally_acr(&g->aah) : which == 1 ? aah_tally_work_ratio(&g->aah)
		                                                              : aah_tally_kv_ratio(&g->aah);
		fprintf(f, "%s{regime=\"", name);
		label_value(f, g->name);
		fprintf(f, "\"} %.6f\n", v);
	}
}

/* aahd_backend_info{backend="cuda",device="NVIDIA H200, …"} 1, from a description "NAME (DEVICE)". */
/* Constrained decoding (docs/structured-output.md): the server's counts and the engine thread's mask times. */
static void grammar_metrics(FILE *f, server_metrics *sm, const sched_metrics *m)
{
	family(f, "aahd_constrained_requests_total", "counter",
	       "Requests whose output was constrained, by the kind of constraint (a 400 at compile included).");
	for (int i = 0; i < SERVER_GRAMMAR_KINDS; i++)
		fprintf(f, "aahd_constrained_requests_total{kind=\"%s\"} %llu\n", grammar_kinds[i],
		        (unsigned long long)atomic_load(&sm->constrained[i]));
	family(f, "aahd_tool_calls_total", "counter", "Tool calls returned in chat answers (message.tool_calls).");
	fprintf(f, "aahd_tool_calls_total %llu\n", (unsigned long long)atomic_load(&sm->tool_calls));
	family(f, "aahd_tool_call_invalid_arguments_total", "counter",
	       "Tool calls among them whose arguments are not one JSON object (returned as the model wrote them).");
	fprintf(f, "aahd_tool_call_invalid_arguments_total %llu\n",
	        (unsigned long long)atomic_load(&sm->tool_call_invalid_arguments));
	family(f, "aahd_grammar_cache_hits_total", "counter", "Constraints whose compiled grammar was in the cache.");
	fprintf(f, "aahd_grammar_cache_hits_total %llu\n", (unsigned long long)atomic_load(&sm->grammar_hits));
	family(f, "aahd_grammar_cache_misses_total", "counter", "Constraints compiled (the refused ones included).");
	fprintf(f, "aahd_grammar_cache_misses_total %llu\n", (unsigned long long)atomic_load(&sm->grammar_misses));
	family(f, "aahd_grammar_compile_errors_total", "counter", "Grammars refused at compile (a 400 naming the field).");
	fprintf(f, "aahd_grammar_compile_errors_total %llu\n", (unsigned long long)atomic_load(&sm->grammar_errors));
	family(f, "aahd_grammar_compile_seconds", "histogram",
	       "Time to compile a grammar against the vocabulary, its mask warm-up included (cache misses only).");
	sched_histogram compile = { .n_bounds = SERVER_COMPILE_BOUNDS, .sum = (double)atomic_load(&sm->compile_us) / 1e6 };
	for (int b = 0; b <= SERVER_COMPILE_BOUNDS; b++) {
		if (b < SERVER_COMPILE_BOUNDS)
			compile.bounds[b] = compile_bounds[b];
		compile.counts[b] = atomic_load(&sm->compile_counts[b]);
		compile.count += compile.counts[b];
	}
	histogram_series(f, "aahd_grammar_compile_seconds", NULL, &compile);
	family(f, "aahd_constrained_sequences_total", "counter", "Sequences (choices) admitted with a grammar.");
	fprintf(f, "aahd_constrained_sequences_total %llu\n", (unsigned long long)m->constrained_requests);
	family(f, "aahd_constrained_complete_total", "counter",
	       "Constrained sequences that ended because their grammar was complete.");
	fprintf(f, "aahd_constrained_complete_total %llu\n", (unsigned long long)m->constrained_complete);
	family(f, "aahd_constrained_errors_total", "counter",
	       "Constrained sequences ended by a bound of the matcher (nesting, ambiguity; finish_reason error).");
	fprintf(f, "aahd_constrained_errors_total %llu\n", (unsigned long long)m->constrained_errors);
	family(f, "aahd_grammar_mask_seconds", "histogram", "Time to compute one token mask on the engine thread.");
	histogram_series(f, "aahd_grammar_mask_seconds", NULL, &m->grammar_mask);
}

/* Speculative decoding (docs/speculative.md), per draft kind, every kind from the start at 0. */
static void spec_metrics(FILE *f, const sched_metrics *m)
{
	static const sched_draft kinds[SCHED_N_DRAFTS] = { SCHED_DRAFT_NGRAM, SCHED_DRAFT_REGIME, SCHED_DRAFT_MODEL };
	struct { const char *name, *type, *help; } fam[] = {
		{ "aahd_spec_draft_tokens_total", "counter", "Draft tokens proposed to verify passes." },
		{ "aahd_spec_accepted_tokens_total", "counter", "Draft tokens accepted (each one a decode step saved)." },
		{ "aahd_spec_verify_passes_total", "counter", "Steps that checked a draft of one token or more." },
		{ "aahd_spec_draft_steps_total", "counter", "Forward passes of a draft engine (regime and model drafts)." },
		{ "aahd_spec_acceptance_rate", "gauge", "Accepted over proposed draft tokens, since the start." },
		{ "aahd_spec_mean_accepted_length", "gauge",
		  "Tokens a verify pass produced on average: 1 + accepted draft tokens per pass (vLLM's mean acceptance "
		  "length)." },
	};
	for (int32_t q = 0; q < (int32_t)(sizeof fam / sizeof fam[0]); q++) {
		family(f, fam[q].name, fam[q].type, fam[q].help);
		for (int32_t i = 0; i < SCHED_N_DRAFTS; i++) {
			const double d = (double)m->spec_drafted[i], a = (double)m->spec_accepted[i], p = (double)m->spec_passes[i];
			const double v[] = { d, a, p, (double)m->spec_draft_steps[i], d > 0 ? a / d : 0, p > 0 ? 1 + a / p : 0 };
			fprintf(f, "%s{draft=\"%s\"} %.*f\n", fam[q].name, sched_draft_name(kinds[i]), q < 4 ? 0 : 6, v[q]);
		}
	}
}

/* The prefix cache's counters (their names: docs/architecture.md), at 0 when it is off. */
static void prefix_cache_metrics(FILE *f, const engine_prefix_stats *p)
{
	family(f, "aahd_prefix_cache_enabled", "gauge", "1 when the prefix cache is on (the prefix_cache key).");
	fprintf(f, "aahd_prefix_cache_enabled %d\n", p->enabled ? 1 : 0);
	family(f, "aahd_prefix_cache_queries_total", "counter", "Prompts looked up in the prefix cache.");
	fprintf(f, "aahd_prefix_cache_queries_total %llu\n", (unsigned long long)p->queries);
	family(f, "aahd_prefix_cache_hits_total", "counter", "Prompts that started after a cached prefix.");
	fprintf(f, "aahd_prefix_cache_hits_total %llu\n", (unsigned long long)p->hits);
	family(f, "aahd_prefix_cache_hit_tokens_total", "counter",
	       "Prompt tokens taken from the prefix cache instead of prefilled (aahd_prompt_tokens_total counts the rest).");
	fprintf(f, "aahd_prefix_cache_hit_tokens_total %llu\n", (unsigned long long)p->hit_tokens);
	family(f, "aahd_prefix_cache_bytes", "gauge",
	       "KV bytes the prefix cache's blocks hold (pages shared with running sequences included).");
	fprintf(f, "aahd_prefix_cache_bytes %lld\n", (long long)p->bytes);
	family(f, "aahd_prefix_cache_bytes_capacity", "gauge", "The most the prefix cache may hold (prefix_cache_bytes).");
	fprintf(f, "aahd_prefix_cache_bytes_capacity %lld\n", (long long)p->max_bytes);
	family(f, "aahd_prefix_cache_evictions_total", "counter",
	       "Cached 16-token blocks evicted (least recently used leaf first), for room or for the byte cap.");
	fprintf(f, "aahd_prefix_cache_evictions_total %llu\n", (unsigned long long)p->evictions);
}

static void backend_info(FILE *f, const char *desc)
{
	family(f, "aahd_backend_info", "gauge", "The compute backend the engine runs on (the value is always 1).");
	const char *open = strstr(desc, " (");
	size_t n = open ? (size_t)(open - desc) : strlen(desc);
	char name[64], device[192] = "";
	snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), desc);
	if (open) {
		snprintf(device, sizeof device, "%s", open + 2);
		size_t dl = strlen(device);
		if (dl > 0 && device[dl - 1] == ')')
			device[dl - 1] = 0;
	}
	fprintf(f, "aahd_backend_info{backend=\"");
	label_value(f, name);
	fprintf(f, "\",device=\"");
	label_value(f, device);
	fprintf(f, "\"} 1\n");
}

char *server_metrics_render(server_metrics *sm, sched *s, const server_metrics_info *info, size_t *len)
{
	sched_metrics *m = malloc(sizeof *m);
	if (!m)
		return NULL;
	sched_metrics_get(s, m);
	char *text = NULL;
	FILE *f = open_memstream(&text, len);
	if (!f) {
		free(m);
		return NULL;
	}
	family(f, "aahd_requests_total", "counter",
	       "HTTP requests answered, by status code (/health, /metrics, /v1/stats and /dashboard not counted).");
	for (int st = 100; st < 600; st++) {
		uint64_t n = atomic_load(&sm->by_status[st]);
		if (n)
			fprintf(f, "aahd_requests_total{status=\"%d\"} %llu\n", st, (unsigned long long)n);
	}
	/* a separate counter rather than an endpoint label on aahd_requests_total: every existing query of that family
	 * keeps its meaning, and chat is the one endpoint whose share operators ask for */
	family(f, "aahd_chat_requests_total", "counter",
	       "POST /v1/chat/completions requests answered, by status code (counted in aahd_requests_total too).");
	for (int st = 100; st < 600; st++) {
		uint64_t n = atomic_load(&sm->chat_by_status[st]);
		if (n)
			fprintf(f, "aahd_chat_requests_total{status=\"%d\"} %llu\n", st, (unsigned long long)n);
	}
	family(f, "aahd_requests_running", "gauge", "Sequences in the engine now (a request with n choices runs n).");
	fprintf(f, "aahd_requests_running %d\n", m->running);
	family(f, "aahd_requests_waiting", "gauge", "Sequences waiting in the queue for a slot.");
	fprintf(f, "aahd_requests_waiting %d\n", m->waiting);
	family(f, "aahd_prompt_tokens_total", "counter", "Prompt tokens processed.");
	fprintf(f, "aahd_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
	family(f, "aahd_generation_tokens_total", "counter", "Tokens generated.");
	fprintf(f, "aahd_generation_tokens_total %llu\n", (unsigned long long)m->generation_tokens);
	family(f, "aahd_prompt_tokens_per_second", "gauge", "Prompt tokens per second over the last 10 seconds.");
	fprintf(f, "aahd_prompt_tokens_per_second %.3f\n", m->prompt_tokens_per_s);
	family(f, "aahd_generation_tokens_per_second", "gauge", "Generated tokens per second over the last 10 seconds.");
	fprintf(f, "aahd_generation_tokens_per_second %.3f\n", m->generation_tokens_per_s);
	family(f, "aahd_device_sampling", "gauge",
	       "1 when tokens are drawn from each logits row's candidates where the logits are (engine/scheduler.c).");
	fprintf(f, "aahd_device_sampling %d\n", m->device_sampling ? 1 : 0);
	family(f, "aahd_draws_from_candidates_total", "counter", "Tokens that the logits rows' candidates decided.");
	fprintf(f, "aahd_draws_from_candidates_total %llu\n", (unsigned long long)m->draws_from_top);
	family(f, "aahd_logprobs_from_candidates_total", "counter",
	       "Generated tokens whose log-probabilities came from the logits rows' candidates.");
	fprintf(f, "aahd_logprobs_from_candidates_total %llu\n", (unsigned long long)m->logprobs_from_top);
	family(f, "aahd_logits_rows_fetched_total", "counter",
	       "Whole logits rows read back under device sampling because the candidates did not decide.");
	fprintf(f, "aahd_logits_rows_fetched_total %llu\n", (unsigned long long)m->logits_rows_fetched);
	per_regime(f, m, "aahd_acr", "Inference ACR (sum over windows of f_W * W / T) of the finished sequences of a regime.", 0);
	family(f, "aahd_acr_context_length", "gauge", "T of inference ACR: aah.json's context_length (else the engine's).");
	fprintf(f, "aahd_acr_context_length %d\n", info->acr_context_length);
	family(f, "aahd_branch_usage_total", "counter",
	       "Branch usage: query-head selections of each window, summed over layers, groups and tokens.");
	for (int32_t i = 0; i < m->n_regimes; i++) {
		const sched_regime_totals *g = &m->regimes[i];
		for (int32_t w = 0; w < g->aah.n_windows; w++) {
			fprintf(f, "aahd_branch_usage_total{regime=\"");
			label_value(f, g->name);
			fprintf(f, "\",window=\"%d\"} %.0f\n", g->aah.windows[w], g->aah.window_usage[w]);
		}
	}
	/* W as a value beside each window label: PromQL cannot read a label as a number, and a fleet's ACR is
	 * sum(W * rate(usage)) / sum(T * rate(usage)) (deploy/prometheus/aahd.rules.yml) */
	family(f, "aahd_branch_window", "gauge", "The window W of each window label of aahd_branch_usage_total, as a value.");
	int32_t shown[SCHED_MAX_REGIMES * SCHED_MAX_WINDOWS], n_shown = 0;
	for (int32_t i = 0; i < m->n_regimes; i++)
		for (int32_t w = 0; w < m->regimes[i].aah.n_windows; w++) {
			int32_t win = m->regimes[i].aah.windows[w], k = 0;
			while (k < n_shown && shown[k] != win)
				k++;
			if (k < n_shown)
				continue;
			shown[n_shown++] = win;
			fprintf(f, "aahd_branch_window{window=\"%d\"} %d\n", win, win);
		}
	regime_counter(f, m, "aahd_sequences_total", "Sequences (choices) of a regime that have ended.",
	               FIGURE_SEQUENCES);
	regime_counter(f, m, "aahd_attention_products_total",
	               "Attention query-key products done by the ended sequences of a regime (counted by the backend).",
	               FIGURE_PRODUCTS);
	regime_counter(f, m, "aahd_attention_products_full_total",
	               "Query-key products full causal attention would do for the same tokens.",
	               FIGURE_PRODUCTS_FULL);
	regime_counter(f, m, "aahd_kv_peak_bytes_total", "Sum over the ended sequences of a regime of their peak KV bytes.",
	               FIGURE_KV_PEAK);
	regime_counter(f, m, "aahd_kv_peak_bytes_full_total",
	               "Sum over the same sequences of what full attention would hold at their lengths.",
	               FIGURE_KV_PEAK_FULL);
	per_regime(f, m, "aahd_attention_work_ratio",
	           "Attention query-key products done over those full causal attention would do, per regime.", 1);
	family(f, "aahd_kv_cache_bytes_used", "gauge",
	       "KV cache bytes held by the running sequences (pages they share once; the prefix cache's own not).");
	fprintf(f, "aahd_kv_cache_bytes_used %lld\n", (long long)m->kv_bytes_used);
	family(f, "aahd_kv_cache_bytes_capacity", "gauge", "KV cache page pool in bytes.");
	fprintf(f, "aahd_kv_cache_bytes_capacity %lld\n", (long long)m->kv_bytes_capacity);
	prefix_cache_metrics(f, &m->prefix);
	grammar_metrics(f, sm, m);
	spec_metrics(f, m);
	per_regime(f, m, "aahd_kv_memory_ratio",
	           "Peak KV bytes over what full attention would hold for the same tokens, summed over sequences, per regime.",
	           2);
	family(f, "aahd_queue_capacity", "gauge", "Sequences that may wait at most (queue_length); beyond it, 429.");
	fprintf(f, "aahd_queue_capacity %lld\n", (long long)info->queue_capacity);
	family(f, "aahd_max_batch", "gauge", "Sequences that may run at once (max_batch).");
	fprintf(f, "aahd_max_batch %lld\n", (long long)info->max_batch);
	histogram(f, m, "aahd_time_to_first_token_seconds", "Time from arrival to the first generated token, per regime.", 0);
	histogram(f, m, "aahd_inter_token_latency_seconds", "Time between consecutive tokens of a sequence, per regime.", 1);
	histogram(f, m, "aahd_request_duration_seconds", "Time from arrival to the end of a sequence, per regime.", 2);
	if (info->backend && *info->backend)
		backend_info(f, info->backend);
	free(m);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}
