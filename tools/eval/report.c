/* tools/eval/report.c — tables, plot, results.json and samples from the per-item results (see report.h). Scores are
 * the mean of the task's primary metric over its items, in percent; stderr is the harness's mean_stderr (sample
 * standard deviation over sqrt(n)), and for a group task (MMLU, MMLU-Pro) its pooled_sample_stderr over the
 * subtasks (groups.h), "N/A" when a subtask has one item. Bold and ties are decided on the printed (one-decimal) values. The aah
 * figures are token-weighted over every request the regime's items made. */
#include "tools/eval/report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tools/eval/groups.h"
#include "tools/eval/score.h"
#include "tools/eval/util.h"

#define REFERENCE "full_attention"
#define PARTIAL_MARK "†"   /* a row whose few-shot examples are not the harness's draw (eval_task_run.pool) */

typedef struct cell {
	int64_t n;
	double *item;                          /* (n) the primary metric per item */
	double score, se;                      /* mean (a fraction) and stderr (NAN when n < 2) */
	double ll, tokens, bytes, words;       /* perplexity sums */
	double aah_tokens, weighted, acr, work, kv;
} cell;

typedef struct agg {
	const eval_report *rep;
	cell *cells;                           /* [r * n_runs + t] */
	double *acr, *work, *kv, *weighted;    /* (n_regimes) token-weighted over all tasks; NAN when unknown */
	int32_t ref;                           /* the full-attention regime's column, or -1 */
	/* table 10, per regime */
	double *max_delta;                     /* signed pp of the largest |Δ|; NAN without a reference */
	int32_t *max_task;                     /* its run index, -1 */
	int64_t *lost, *gained;
} agg;

static const json_t *result_at(const eval_report *rep, int32_t r, int32_t t, int64_t i)
{
	return rep->results[r * rep->n_runs + t][i];
}

static double metric_of(const json_t *res, const char *key)
{
	const json_t *v = json_object_get(json_object_get(res, "metrics"), key);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

static bool is_ppl(const eval_task_run *run)
{
	return run->task->output == EVAL_LOGLIKELIHOOD_ROLLING;
}

static void build(agg *a, const eval_report *rep)
{
	memset(a, 0, sizeof *a);
	a->rep = rep;
	int32_t R = rep->n_regimes, T = rep->n_runs;
	a->cells = xcalloc((size_t)(R * T > 0 ? R * T : 1), sizeof *a->cells);
	a->acr = xcalloc((size_t)R + 1, sizeof(double));
	a->work = xcalloc((size_t)R + 1, sizeof(double));
	a->kv = xcalloc((size_t)R + 1, sizeof(double));
	a->weighted = xcalloc((size_t)R + 1, sizeof(double));
	a->max_delta = xcalloc((size_t)R + 1, sizeof(double));
	a->max_task = xcalloc((size_t)R + 1, sizeof(int32_t));
	a->lost = xcalloc((size_t)R + 1, sizeof(int64_t));
	a->gained = xcalloc((size_t)R + 1, sizeof(int64_t));
	a->ref = -1;
	for (int32_t r = 0; r < R; r++)
		if (!strcmp(rep->regimes[r], REFERENCE))
			a->ref = r;
	for (int32_t r = 0; r < R; r++) {
		for (int32_t t = 0; t < T; t++) {
			const eval_task_run *run = &rep->runs[t];
			cell *c = &a->cells[r * T + t];
			c->n = run->n_items;
			c->item = xcalloc((size_t)(c->n ? c->n : 1), sizeof *c->item);
			for (int64_t i = 0; i < c->n; i++) {
				const json_t *res = result_at(rep, r, t, i);
				if (is_ppl(run)) {
					c->ll += metric_of(res, "loglikelihood");
					c->tokens += metric_of(res, "tokens");
					c->bytes += metric_of(res, "bytes");
					c->words += metric_of(res, "words");
				} else {
					c->item[i] = metric_of(res, run->task->primary);
				}
				const json_t *x = json_object_get(res, "aah");
				double tok = json_number_value(json_object_get(x, "tokens"));
				double w = json_number_value(json_object_get(x, "weighted_tokens"));
				c->aah_tokens += tok;
				c->weighted += w;
				c->acr += w * json_number_value(json_object_get(x, "acr"));
				c->work += w * json_number_value(json_object_get(x, "attention_work_ratio"));
				c->kv += w * json_number_value(json_object_get(x, "kv_memory_ratio"));
			}
			if (is_ppl(run)) {
				double bpb = c->bytes > 0 ? -c->ll / c->bytes / log(2.0) : NAN;
				c->score = bpb;
				c->se = NAN;
			} else {
				c->score = eval_mean(c->item, c->n);
				c->se = eval_stderr(c->item, c->n);
				eval_subtasks st;
				if (eval_subtasks_of(run, &st) == 0) {
					/* a group (MMLU, MMLU-Pro): its stderr pooled over its subtasks, as the harness reports it */
					double mean;
					int64_t size;
					eval_group_stat(&st, c->item, c->n, NULL, -1, &mean, &c->se, &size);
					eval_subtasks_free(&st);
				}
			}
			a->weighted[r] += c->weighted;
			a->acr[r] += c->acr;
			a->work[r] += c->work;
			a->kv[r] += c->kv;
		}
		if (a->weighted[r] > 0) {
			a->acr[r] /= a->weighted[r];
			a->work[r] /= a->weighted[r];
			a->kv[r] /= a->weighted[r];
		} else {
			a->acr[r] = a->work[r] = a->kv[r] = NAN;
		}
	}
	for (int32_t r = 0; r < R; r++) {
		a->max_delta[r] = r == a->ref ? 0.0 : NAN;   /* the reference row: no change, no benchmark, no flips */
		a->max_task[r] = -1;
		if (a->ref < 0 || r == a->ref)
			continue;
		for (int32_t t = 0; t < T; t++) {
			if (is_ppl(&rep->runs[t]))
				continue;
			double d = 100 * (a->cells[r * T + t].score - a->cells[a->ref * T + t].score);
			if (isnan(d))
				continue;
			if (a->max_task[r] < 0 || fabs(d) > fabs(a->max_delta[r])) {
				a->max_delta[r] = d;
				a->max_task[r] = t;
			}
		}
		if (a->max_task[r] >= 0) {
			const cell *x = &a->cells[r * T + a->max_task[r]], *f = &a->cells[a->ref * T + a->max_task[r]];
			for (int64_t i = 0; i < x->n; i++) {
				a->lost[r] += f->item[i] > 0.5 && x->item[i] < 0.5;
				a->gained[r] += f->item[i] < 0.5 && x->item[i] > 0.5;
			}
		}
	}
}

static void release(agg *a)
{
	for (int32_t i = 0; i < a->rep->n_regimes * a->rep->n_runs; i++)
		free(a->cells[i].item);
	free(a->cells);
	free(a->acr);
	free(a->work);
	free(a->kv);
	free(a->weighted);
	free(a->max_delta);
	free(a->max_task);
	free(a->lost);
	free(a->gained);
}

static const char *metric_name(const eval_task *t)
{
	static __thread char buf[64];
	const char *comma = strchr(t->primary, ',');
	size_t n = comma ? (size_t)(comma - t->primary) : strlen(t->primary);
	snprintf(buf, sizeof buf, "%.*s", (int)n, t->primary);
	return buf;
}

static const char *group_title(eval_group g)
{
	return g == EVAL_GROUP_LANGUAGE ? "Language" : "Math and code";
}

static void fmt(char *buf, size_t n, const char *f, double v)
{
	if (isnan(v))
		snprintf(buf, n, "—");
	else
		snprintf(buf, n, f, v);
}

/* The printed score of a cell (one decimal, percent): what bold compares. */
static double shown(double score)
{
	return isnan(score) ? NAN : round(score * 1000) / 10;
}

static bool has_scores(const eval_report *rep)
{
	for (int32_t t = 0; t < rep->n_runs; t++)
		if (!is_ppl(&rep->runs[t]))
			return true;
	return false;
}

static void markdown_table9(strbuf *b, const agg *a)
{
	const eval_report *rep = a->rep;
	int32_t R = rep->n_regimes, T = rep->n_runs;
	sb_adds(b, "Table 9 shape: score per benchmark and regime, percent ± standard error (best per row in bold, ties "
	           "bold)\n\n| Benchmark | Metric | n |");
	for (int32_t r = 0; r < R; r++)
		sb_addf(b, " %s |", rep->regimes[r]);
	sb_adds(b, "\n|---|---|---:|");
	for (int32_t r = 0; r < R; r++)
		sb_adds(b, "---:|");
	sb_adds(b, "\n");
	for (int g = EVAL_GROUP_LANGUAGE; g <= EVAL_GROUP_MATH_CODE; g++) {
		bool any = false;
		for (int32_t t = 0; t < T; t++)
			any |= rep->runs[t].task->group == (eval_group)g;
		if (!any)
			continue;
		sb_addf(b, "| *%s* | | |", group_title((eval_group)g));
		for (int32_t r = 0; r < R; r++)
			sb_adds(b, " |");
		sb_adds(b, "\n");
		for (int32_t t = 0; t < T; t++) {
			const eval_task *task = rep->runs[t].task;
			if (task->group != (eval_group)g)
				continue;
			double best = -INFINITY;
			for (int32_t r = 0; r < R; r++) {
				double s = shown(a->cells[r * T + t].score);
				if (!isnan(s) && s > best)
					best = s;
			}
			sb_addf(b, "| %s%s | %s | %lld |", task->title, rep->runs[t].pool.partial ? " " PARTIAL_MARK : "",
			        metric_name(task), (long long)rep->runs[t].n_items);
			for (int32_t r = 0; r < R; r++) {
				const cell *c = &a->cells[r * T + t];
				double s = shown(c->score);
				char sc[32], se[32];
				fmt(sc, sizeof sc, "%.1f", s);
				fmt(se, sizeof se, "%.1f", 100 * c->se);
				bool bold = !isnan(s) && s == best;
				sb_addf(b, " %s%s%s ± %s |", bold ? "**" : "", sc, bold ? "**" : "", se);
			}
			sb_adds(b, "\n");
		}
	}
	/* the footnote of each marked row, a paragraph of its own */
	for (int32_t t = 0; t < T; t++) {
		const eval_task_run *run = &rep->runs[t];
		if (!run->pool.partial || is_ppl(run))
			continue;
		sb_addf(b, "\n%s %s %d-shot: partial few-shot pool: %s holds %s (%s). Not comparable with published "
		        "numbers.\n", PARTIAL_MARK, run->task->name, run->k, run->pool.file, run->pool.note,
		        run->pool.detail);
	}
}

static void markdown_table10(strbuf *b, const agg *a)
{
	const eval_report *rep = a->rep;
	sb_adds(b, "Table 10 shape: measured per regime (token-weighted over the evaluation's own requests); largest "
	           "absolute score change against " REFERENCE ", and the items of that benchmark that flipped each way\n\n"
	           "| Regime | ACR | Attention work ratio | KV memory ratio | Tokens/s | Max abs Δ (pp) | On | Flips "
	           "right→wrong / wrong→right | McNemar p |\n|---|---:|---:|---:|---:|---:|---|---:|---:|\n");
	for (int32_t r = 0; r < rep->n_regimes; r++) {
		char acr[32], work[32], kv[32], tps[32], d[32], p[32];
		fmt(acr, sizeof acr, "%.4f", a->acr[r]);
		fmt(work, sizeof work, "%.4f", a->work[r]);
		fmt(kv, sizeof kv, "%.4f", a->kv[r]);
		fmt(tps, sizeof tps, "%.1f", rep->tokens_per_second[r]);
		fmt(d, sizeof d, "%.1f", isnan(a->max_delta[r]) ? NAN : fabs(a->max_delta[r]));
		bool have = a->max_task[r] >= 0;
		fmt(p, sizeof p, "%.3g", have ? eval_mcnemar_p(a->lost[r], a->gained[r]) : NAN);
		sb_addf(b, "| %s | %s | %s | %s | %s | %s | %s |", rep->regimes[r], acr, work, kv, tps, d,
		        have ? rep->runs[a->max_task[r]].task->title : "—");
		if (have)
			sb_addf(b, " %lld / %lld | %s |\n", (long long)a->lost[r], (long long)a->gained[r], p);
		else
			sb_adds(b, " — | — |\n");
	}
	if (a->ref < 0)
		sb_adds(b, "\n(no " REFERENCE " column: the changes need it among --regimes)\n");
}

static void markdown_ppl(strbuf *b, const agg *a)
{
	const eval_report *rep = a->rep;
	int32_t T = rep->n_runs;
	for (int32_t t = 0; t < T; t++) {
		if (!is_ppl(&rep->runs[t]))
			continue;
		sb_addf(b, "Table 6 shape: perplexity of %s (%lld document%s; loglikelihood_rolling, windows of %lld tokens)\n\n"
		           "| Regime | Loss | PPL | Bits per byte | Word PPL | Tokens | ACR | Tokens/s |\n"
		           "|---|---:|---:|---:|---:|---:|---:|---:|\n",
		        rep->runs[t].path, (long long)rep->runs[t].n_items, rep->runs[t].n_items == 1 ? "" : "s",
		        (long long)json_integer_value(json_object_get(rep->config, "max_length")) - 1);
		for (int32_t r = 0; r < rep->n_regimes; r++) {
			const cell *c = &a->cells[r * T + t];
			double loss = c->tokens > 0 ? -c->ll / c->tokens : NAN;
			char l[32], ppl[32], bpb[32], wp[32], acr[32], tps[32];
			fmt(l, sizeof l, "%.4f", loss);
			fmt(ppl, sizeof ppl, "%.2f", exp(loss));
			fmt(bpb, sizeof bpb, "%.4f", c->score);
			fmt(wp, sizeof wp, "%.2f", c->words > 0 ? exp(-c->ll / c->words) : NAN);
			fmt(acr, sizeof acr, "%.4f", c->weighted > 0 ? c->acr / c->weighted : NAN);
			fmt(tps, sizeof tps, "%.1f", rep->tokens_per_second[r]);
			sb_addf(b, "| %s | %s | %s | %s | %s | %.0f | %s | %s |\n", rep->regimes[r], l, ppl, bpb, wp, c->tokens, acr,
			        tps);
		}
		sb_adds(b, "\n");
	}
}

static char *markdown(const agg *a)
{
	strbuf b = {0};
	sb_addf(&b, "Model %s, served by %s; max_length %lld (%s).\n\n", a->rep->srv->model, a->rep->srv->key,
	        (long long)a->rep->max_length, a->rep->max_length_from ? a->rep->max_length_from : "");
	if (has_scores(a->rep)) {
		markdown_table9(&b, a);
		sb_adds(&b, "\n");
	}
	markdown_table10(&b, a);
	sb_adds(&b, "\n");
	markdown_ppl(&b, a);
	return sb_take(&b);
}

char *eval_report_markdown(const eval_report *rep)
{
	agg a;
	build(&a, rep);
	char *md = markdown(&a);
	release(&a);
	return md;
}

/* ---- CSV ---- */

static void csv_field(strbuf *b, const char *s)
{
	if (!strpbrk(s, ",\"\n")) {
		sb_adds(b, s);
		return;
	}
	sb_add(b, "\"", 1);
	for (const char *p = s; *p; p++) {
		if (*p == '"')
			sb_add(b, "\"", 1);
		sb_add(b, p, 1);
	}
	sb_add(b, "\"", 1);
}

static void csv_num(strbuf *b, double v, const char *f)
{
	sb_add(b, ",", 1);
	if (!isnan(v))
		sb_addf(b, f, v);
}

static char *csv_table9(const agg *a)
{
	const eval_report *rep = a->rep;
	int32_t R = rep->n_regimes, T = rep->n_runs;
	strbuf b = {0};
	sb_adds(&b, "group,task,benchmark,metric,n");
	for (int32_t r = 0; r < R; r++) {
		sb_add(&b, ",", 1);
		csv_field(&b, rep->regimes[r]);
		sb_add(&b, ",", 1);
		char *h = xasprintf("%s_stderr", rep->regimes[r]);
		csv_field(&b, h);
		free(h);
	}
	sb_adds(&b, ",fewshot_pool\n");
	for (int32_t t = 0; t < T; t++) {
		const eval_task *task = rep->runs[t].task;
		if (is_ppl(&rep->runs[t]))
			continue;
		sb_addf(&b, "%s,%s,%s,%s,%lld", group_title(task->group), task->name, task->title, metric_name(task),
		        (long long)rep->runs[t].n_items);
		for (int32_t r = 0; r < R; r++) {
			csv_num(&b, 100 * a->cells[r * T + t].score, "%.4f");
			csv_num(&b, 100 * a->cells[r * T + t].se, "%.4f");
		}
		/* empty, or the mark of a pool that is not the harness's: "partial: 5 of 198 rows, not the harness's draw" */
		sb_add(&b, ",", 1);
		if (rep->runs[t].pool.partial) {
			char *note = xasprintf("partial: %s", rep->runs[t].pool.note);
			csv_field(&b, note);
			free(note);
		}
		sb_adds(&b, "\n");
	}
	return sb_take(&b);
}

static char *csv_table10(const agg *a)
{
	const eval_report *rep = a->rep;
	strbuf b = {0};
	sb_adds(&b, "regime,acr,attention_work_ratio,kv_memory_ratio,tokens_per_second,max_abs_delta_pp,max_delta_pp,"
	            "max_delta_task,flips_right_to_wrong,flips_wrong_to_right,mcnemar_p\n");
	for (int32_t r = 0; r < rep->n_regimes; r++) {
		csv_field(&b, rep->regimes[r]);
		csv_num(&b, a->acr[r], "%.6f");
		csv_num(&b, a->work[r], "%.6f");
		csv_num(&b, a->kv[r], "%.6f");
		csv_num(&b, rep->tokens_per_second[r], "%.3f");
		csv_num(&b, fabs(a->max_delta[r]), "%.4f");
		csv_num(&b, a->max_delta[r], "%.4f");
		bool have = a->max_task[r] >= 0;
		sb_addf(&b, ",%s", have ? rep->runs[a->max_task[r]].task->name : "");
		if (have)
			sb_addf(&b, ",%lld,%lld,%.6g\n", (long long)a->lost[r], (long long)a->gained[r],
			        eval_mcnemar_p(a->lost[r], a->gained[r]));
		else
			sb_adds(&b, ",,,\n");
	}
	return sb_take(&b);
}

static char *csv_ppl(const agg *a)
{
	const eval_report *rep = a->rep;
	int32_t T = rep->n_runs;
	strbuf b = {0};
	sb_adds(&b, "task,regime,documents,tokens,bytes,words,loglikelihood,loss,perplexity,bits_per_byte,"
	            "word_perplexity,byte_perplexity,acr,tokens_per_second\n");
	for (int32_t t = 0; t < T; t++) {
		if (!is_ppl(&rep->runs[t]))
			continue;
		for (int32_t r = 0; r < rep->n_regimes; r++) {
			const cell *c = &a->cells[r * T + t];
			double loss = c->tokens > 0 ? -c->ll / c->tokens : NAN;
			sb_addf(&b, "%s,", rep->runs[t].task->name);
			csv_field(&b, rep->regimes[r]);
			sb_addf(&b, ",%lld,%.0f,%.0f,%.0f,%.6f", (long long)c->n, c->tokens, c->bytes, c->words, c->ll);
			csv_num(&b, loss, "%.6f");
			csv_num(&b, exp(loss), "%.6f");
			csv_num(&b, c->score, "%.6f");
			csv_num(&b, c->words > 0 ? exp(-c->ll / c->words) : NAN, "%.6f");
			csv_num(&b, c->bytes > 0 ? exp(-c->ll / c->bytes) : NAN, "%.6f");
			csv_num(&b, c->weighted > 0 ? c->acr / c->weighted : NAN, "%.6f");
			csv_num(&b, rep->tokens_per_second[r], "%.3f");
			sb_adds(&b, "\n");
		}
	}
	return sb_take(&b);
}

/* ---- JSON ---- */

static json_t *num(double v)
{
	return isnan(v) || isinf(v) ? json_null() : json_real(v);
}

static json_t *tables_json(const agg *a)
{
	const eval_report *rep = a->rep;
	int32_t R = rep->n_regimes, T = rep->n_runs;
	json_t *regimes = json_array();
	for (int32_t r = 0; r < R; r++)
		json_array_append_new(regimes, json_string(rep->regimes[r]));
	json_t *rows = json_array();
	for (int32_t t = 0; t < T; t++) {
		if (is_ppl(&rep->runs[t]))
			continue;
		const eval_task *task = rep->runs[t].task;
		double best = -INFINITY;
		for (int32_t r = 0; r < R; r++) {
			double s = shown(a->cells[r * T + t].score);
			if (!isnan(s) && s > best)
				best = s;
		}
		json_t *scores = json_object();
		for (int32_t r = 0; r < R; r++) {
			const cell *c = &a->cells[r * T + t];
			json_object_set_new(scores, rep->regimes[r],
			                    json_pack("{s:o,s:o,s:b}", "score", num(100 * c->score), "stderr", num(100 * c->se),
			                              "best", !isnan(shown(c->score)) && shown(c->score) == best));
		}
		json_t *pool = eval_fewshot_pool_json(&rep->runs[t]);
		json_array_append_new(rows, json_pack("{s:s,s:s,s:s,s:s,s:I,s:i,s:b,s:o,s:o}", "group",
		                                      group_title(task->group), "task", task->name, "benchmark", task->title,
		                                      "metric", metric_name(task), "n", (json_int_t)rep->runs[t].n_items,
		                                      "num_fewshot", rep->runs[t].k, "partial_fewshot_pool",
		                                      rep->runs[t].pool.partial, "fewshot_pool", pool ? pool : json_null(),
		                                      "scores", scores));
	}
	json_t *t10 = json_array();
	for (int32_t r = 0; r < R; r++) {
		bool have = a->max_task[r] >= 0;
		json_array_append_new(
			t10, json_pack("{s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "regime", rep->regimes[r], "acr",
			               num(a->acr[r]), "attention_work_ratio", num(a->work[r]), "kv_memory_ratio", num(a->kv[r]),
			               "tokens_per_second", num(rep->tokens_per_second[r]), "max_abs_delta_pp",
			               num(fabs(a->max_delta[r])), "max_delta_pp", num(a->max_delta[r]), "max_delta_task",
			               have ? json_string(rep->runs[a->max_task[r]].task->name) : json_null(),
			               "flips_right_to_wrong", have ? json_integer(a->lost[r]) : json_null(), "flips_wrong_to_right",
			               have ? json_integer(a->gained[r]) : json_null(), "mcnemar_p",
			               have ? json_real(eval_mcnemar_p(a->lost[r], a->gained[r])) : json_null()));
	}
	json_t *ppl = json_array();
	for (int32_t t = 0; t < T; t++) {
		if (!is_ppl(&rep->runs[t]))
			continue;
		for (int32_t r = 0; r < R; r++) {
			const cell *c = &a->cells[r * T + t];
			double loss = c->tokens > 0 ? -c->ll / c->tokens : NAN;
			json_array_append_new(ppl, json_pack("{s:s,s:s,s:I,s:f,s:f,s:f,s:f,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "task",
			                                     rep->runs[t].task->name, "regime", rep->regimes[r], "documents",
			                                     (json_int_t)c->n, "tokens", c->tokens, "bytes", c->bytes, "words",
			                                     c->words, "loglikelihood", c->ll, "loss", num(loss), "perplexity",
			                                     num(exp(loss)), "bits_per_byte", num(c->score), "word_perplexity",
			                                     num(c->words > 0 ? exp(-c->ll / c->words) : NAN), "byte_perplexity",
			                                     num(c->bytes > 0 ? exp(-c->ll / c->bytes) : NAN), "acr",
			                                     num(c->weighted > 0 ? c->acr / c->weighted : NAN), "tokens_per_second",
			                                     num(rep->tokens_per_second[r])));
		}
	}
	return json_pack("{s:s,s:s,s:I,s:s,s:{s:o,s:o},s:o,s:o}", "model", rep->srv->model, "server", rep->srv->key,
	                 "max_length", (json_int_t)rep->max_length, "max_length_from",
	                 rep->max_length_from ? rep->max_length_from : "", "table9",
	                 "regimes", regimes, "rows", rows, "table10", t10, "perplexity", ppl);
}

/* ---- SVG: score change (pp) against measured ACR ---- */

static const char *const COLORS[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d",
                                     "#666666"};

static void svg_text(strbuf *b, const char *s)
{
	for (const char *p = s; *p; p++) {
		if (*p == '<')
			sb_adds(b, "&lt;");
		else if (*p == '>')
			sb_adds(b, "&gt;");
		else if (*p == '&')
			sb_adds(b, "&amp;");
		else
			sb_add(b, p, 1);
	}
}

static char *svg(const agg *a)
{
	const eval_report *rep = a->rep;
	int32_t R = rep->n_regimes, T = rep->n_runs;
	const double W = 720, H = 440, L = 70, Rm = 200, Tm = 40, B = 50;
	double pw = W - L - Rm, ph = H - Tm - B;
	double span = 1;
	for (int32_t r = 0; r < R && a->ref >= 0; r++)
		for (int32_t t = 0; t < T; t++) {
			if (is_ppl(&rep->runs[t]))
				continue;
			double d = 100 * fabs(a->cells[r * T + t].score - a->cells[a->ref * T + t].score);
			if (!isnan(d) && d > span)
				span = d;
		}
	span = ceil(span * 1.1);
	strbuf b = {0};
	sb_addf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
	            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
	        W, H, W, H);
	sb_addf(&b, "<text x=\"%.0f\" y=\"22\" font-size=\"14\">Score change against " REFERENCE ", per benchmark, at "
	            "each regime's measured ACR</text>\n", L);
	/* axes and grid */
	for (int i = 0; i <= 4; i++) {
		double x = L + pw * i / 4;
		sb_addf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, Tm, x, Tm + ph);
		sb_addf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.2f</text>\n", x, Tm + ph + 16, i / 4.0);
	}
	for (int i = -2; i <= 2; i++) {
		double y = Tm + ph / 2 - ph / 2 * i / 2;
		sb_addf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", L, y, L + pw, y,
		        i == 0 ? "#888" : "#ddd");
		sb_addf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%+.1f</text>\n", L - 6, y + 4, span * i / 2);
	}
	sb_addf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">measured inference ACR</text>\n", L + pw / 2,
	        H - 12);
	sb_addf(&b, "<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.1f)\">score change "
	            "(percentage points)</text>\n", Tm + ph / 2, Tm + ph / 2);
	if (a->ref < 0)
		sb_addf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">no %s regime to compare with</text>\n",
		        L + pw / 2, Tm + ph / 2 - 10, REFERENCE);
	int32_t legend = 0;
	for (int32_t r = 0; r < R && a->ref >= 0; r++) {
		if (isnan(a->acr[r]))
			continue;
		const char *col = COLORS[legend % 8];
		double x = L + pw * (a->acr[r] < 0 ? 0 : a->acr[r] > 1 ? 1 : a->acr[r]);
		for (int32_t t = 0; t < T; t++) {
			if (is_ppl(&rep->runs[t]))
				continue;
			double d = 100 * (a->cells[r * T + t].score - a->cells[a->ref * T + t].score);
			if (isnan(d))
				continue;
			double y = Tm + ph / 2 - ph / 2 * d / span;
			bool max = t == a->max_task[r];
			sb_addf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%d\" fill=\"%s\" fill-opacity=\"%s\"><title>", x, y,
			        max ? 6 : 3, col, max ? "1" : "0.5");
			svg_text(&b, rep->regimes[r]);
			sb_addf(&b, " %s: %+.1f pp</title></circle>\n", rep->runs[t].task->title, d);
		}
		double ly = Tm + 10 + 18 * legend;
		sb_addf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"/>\n<text x=\"%.1f\" y=\"%.1f\">", L + pw + 18,
		        ly, col, L + pw + 28, ly + 4);
		svg_text(&b, rep->regimes[r]);
		sb_addf(&b, " (ACR %.4f)</text>\n", a->acr[r]);
		legend++;
	}
	sb_addf(&b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#555\">large dot: the largest |change|</text>\n",
	        L + pw + 12, Tm + 10 + 18 * legend + 6);
	sb_adds(&b, "</svg>\n");
	return sb_take(&b);
}

/* ---- results.json and samples ---- */

static json_t *stderr_value(double se)
{
	return isnan(se) ? json_string("N/A") : json_real(se);
}

/* "acc,none" → "acc_stderr,none" */
static char *stderr_key(const char *key)
{
	const char *comma = strchr(key, ',');
	return comma ? xasprintf("%.*s_stderr%s", (int)(comma - key), key, comma) : xasprintf("%s_stderr", key);
}

/* The metrics of run t in regime r over its items — or, for a group task, over its subtasks (st): the whole group
 * (group NULL, sub -1), an intermediate group, or one subtask (sub >= 0) — with the harness's stderr keys. */
static json_t *metric_results(const eval_report *rep, int32_t r, int32_t t, const eval_subtasks *st, const char *group,
                              int32_t sub, const char *alias)
{
	const eval_task_run *run = &rep->runs[t];
	int64_t n = run->n_items;
	json_t *o = json_pack("{s:s}", "alias", alias);
	if (n == 0)
		return o;
	const char *key;
	json_t *v;
	json_object_foreach(json_object_get(result_at(rep, r, t, 0), "metrics"), key, v) {
		double *x = xmalloc((size_t)n * sizeof *x);
		for (int64_t i = 0; i < n; i++)
			x[i] = metric_of(result_at(rep, r, t, i), key);
		double mean, se;
		int64_t size = n;
		if (st) {
			eval_group_stat(st, x, n, group, sub, &mean, &se, &size);
		} else {
			mean = eval_mean(x, n);
			se = eval_stderr(x, n);
		}
		json_object_set_new(o, key, num(mean));
		char *sk = stderr_key(key);
		json_object_set_new(o, sk, stderr_value(se));
		free(sk);
		free(x);
		if (st && sub < 0)
			json_object_set_new(o, "samples", json_integer(size));
	}
	return o;
}

static json_t *task_results(const eval_report *rep, const agg *a, int32_t r, int32_t t)
{
	const eval_task_run *run = &rep->runs[t];
	const cell *c = &a->cells[r * rep->n_runs + t];
	json_t *o = json_pack("{s:s}", "alias", run->task->name);
	if (is_ppl(run)) {
		double loss = c->tokens > 0 ? -c->ll / c->tokens : NAN;
		json_object_set_new(o, "word_perplexity,none", num(c->words > 0 ? exp(-c->ll / c->words) : NAN));
		json_object_set_new(o, "word_perplexity_stderr,none", json_string("N/A"));
		json_object_set_new(o, "byte_perplexity,none", num(c->bytes > 0 ? exp(-c->ll / c->bytes) : NAN));
		json_object_set_new(o, "byte_perplexity_stderr,none", json_string("N/A"));
		json_object_set_new(o, "bits_per_byte,none", num(c->score));
		json_object_set_new(o, "bits_per_byte_stderr,none", json_string("N/A"));
		json_object_set_new(o, "loss,none", num(loss));
		json_object_set_new(o, "perplexity,none", num(exp(loss)));
		return o;
	}
	json_decref(o);
	return metric_results(rep, r, t, NULL, NULL, -1, run->task->name);
}

/* A group task's rows, as the harness's results hold them: the group (pooled over its subtasks), its intermediate
 * groups (MMLU's four categories), every subtask; the group rows also into groups, the subtask lists into
 * group_subtasks, each subtask's counts into nsamples. */
static void group_rows(const eval_report *rep, int32_t r, int32_t t, const eval_subtasks *st, json_t *results,
                       json_t *groups, json_t *group_subtasks, json_t *nsamples)
{
	const eval_task *task = rep->runs[t].task;
	json_t *top = metric_results(rep, r, t, st, NULL, -1, task->name);
	json_object_set_new(results, task->name, top);
	json_object_set(groups, task->name, top);
	json_t *children = json_array();
	bool mmlu = !strcmp(task->name, "mmlu");
	for (int32_t g = 0; mmlu && eval_mmlu_groups[g]; g++) {
		const char *gname = eval_mmlu_groups[g];
		json_t *members = json_array();
		for (int32_t j = 0; j < st->n; j++)
			if (st->group[j] && !strcmp(st->group[j], gname))
				json_array_append_new(members, json_string(st->name[j]));
		if (json_array_size(members) == 0) {
			json_decref(members);
			continue;
		}
		char *alias = xasprintf(" - %s", gname + 5);   /* " - stem", " - social_sciences" */
		json_t *row = metric_results(rep, r, t, st, gname, -1, alias);
		free(alias);
		json_object_set_new(results, gname, row);
		json_object_set(groups, gname, row);
		json_object_set_new(group_subtasks, gname, members);
		json_array_append_new(children, json_string(gname));
	}
	for (int32_t j = 0; j < st->n; j++) {
		if (!mmlu || !st->group[j])
			json_array_append_new(children, json_string(st->name[j]));
		char *alias = xasprintf("%s- %s", mmlu && st->group[j] ? "  " : " ", st->alias[j]);
		json_object_set_new(results, st->name[j], metric_results(rep, r, t, st, NULL, j, alias));
		free(alias);
		json_object_set_new(nsamples, st->name[j], json_pack("{s:I,s:I}", "original", (json_int_t)st->in_file[j],
		                                                      "effective", (json_int_t)st->size[j]));
	}
	json_object_set_new(group_subtasks, task->name, children);
}

static json_t *results_json(const agg *a)
{
	const eval_report *rep = a->rep;
	int32_t R = rep->n_regimes, T = rep->n_runs;
	json_t *regimes = json_object();
	for (int32_t r = 0; r < R; r++) {
		json_t *results = json_object(), *nsamples = json_object(), *hib = json_object(), *groups = json_object();
		json_t *group_subtasks = json_object();
		double tokens = 0;
		for (int32_t t = 0; t < T; t++) {
			const eval_task_run *run = &rep->runs[t];
			eval_subtasks st;
			if (!is_ppl(run) && eval_subtasks_of(run, &st) == 0) {
				group_rows(rep, r, t, &st, results, groups, group_subtasks, nsamples);
				eval_subtasks_free(&st);
			} else {
				json_object_set_new(results, run->task->name, task_results(rep, a, r, t));
			}
			json_object_set_new(nsamples, run->task->name, json_pack("{s:I,s:I}", "original", (json_int_t)run->n_file,
			                                                          "effective", (json_int_t)run->n_items));
			json_object_set_new(hib, run->task->name, json_pack("{s:b}", run->task->metric, !is_ppl(run)));
			tokens += a->cells[r * T + t].aah_tokens;
		}
		json_t *aah = json_pack("{s:o,s:o,s:o,s:o,s:f}", "acr", num(a->acr[r]), "attention_work_ratio", num(a->work[r]),
		                        "kv_memory_ratio", num(a->kv[r]), "tokens_per_second", num(rep->tokens_per_second[r]),
		                        "tokens", tokens);
		json_object_set_new(regimes, rep->regimes[r],
		                    json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "results", results, "groups", groups,
		                              "group_subtasks", group_subtasks, "aah", aah, "n-samples", nsamples,
		                              "higher_is_better", hib));
	}
	json_t *versions = json_object(), *nshot = json_object();
	for (int32_t t = 0; t < T; t++) {
		json_object_set_new(versions, rep->runs[t].task->name, json_string(rep->runs[t].task->version));
		json_object_set_new(nshot, rep->runs[t].task->name, json_integer(rep->runs[t].k));
	}
	char date[64];
	time_t now = time(NULL);
	strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	return json_pack("{s:o,s:O,s:o,s:o,s:s,s:s,s:s}", "regimes", regimes, "config", rep->config, "versions", versions,
	                 "n-shot", nshot, "model_name", rep->srv->model, "server", rep->srv->key, "date", date);
}

static char *sample_lines(const eval_report *rep, int32_t r, int32_t t)
{
	const eval_task_run *run = &rep->runs[t];
	strbuf b = {0};
	sb_add(&b, "", 0);
	for (int64_t i = 0; i < run->n_items; i++) {
		const eval_item *it = &run->items[i];
		const json_t *res = result_at(rep, r, t, i);
		json_t *args = json_array();
		if (it->n_choices > 0)
			for (int32_t c = 0; c < it->n_choices; c++)
				json_array_append_new(args, json_pack("[s,s]", it->context, it->continuation[c]));
		else
			json_array_append_new(args, json_pack("[s]", it->context));
		json_t *line = json_pack("{s:I,s:O,s:O,s:o,s:O,s:O}", "doc_id", (json_int_t)it->doc_id, "doc", it->doc,
		                         "target", it->target ? it->target : json_null(), "arguments", args, "resps",
		                         json_object_get(res, "resps"), "filtered_resps", json_object_get(res, "filtered_resps"));
		/* each metric by its name: the bare name for the task's first filter, "metric,filter" for every filter */
		const char *key;
		json_t *v;
		const char *first = run->task->n_filters ? run->task->filters[0].name : "none";
		json_object_foreach(json_object_get(res, "metrics"), key, v) {
			const char *comma = strchr(key, ',');
			if (comma && !strcmp(comma + 1, first)) {
				char bare[64];
				snprintf(bare, sizeof bare, "%.*s", (int)(comma - key), key);
				json_object_set(line, bare, v);
			} else if (!comma) {
				json_object_set(line, key, v);
			}
			if (comma && (run->task->n_filters > 1))
				json_object_set(line, key, v);
		}
		const char *extra[] = {"filtered", "finish_reason", "sandbox", "pred", "pred_norm", "windows", "aah"};
		for (size_t k = 0; k < sizeof extra / sizeof *extra; k++)
			if (json_object_get(res, extra[k]))
				json_object_set(line, extra[k], json_object_get(res, extra[k]));
		json_object_set_new(line, "file_index", json_integer(it->index));
		char *s = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(17));
		json_decref(line);
		if (s) {
			sb_adds(&b, s);
			sb_add(&b, "\n", 1);
			free(s);
		}
	}
	return sb_take(&b);
}

/* ---- files ---- */

static int make_dir(const char *path, char *err, size_t errlen)
{
	char *p = xstrdup(path);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		mkdir(p, 0755);
		*s = '/';
	}
	int rc = mkdir(p, 0755);
	if (rc != 0 && errno != EEXIST) {
		snprintf(err, errlen, "cannot create %s: %s", p, strerror(errno));
		free(p);
		return -1;
	}
	free(p);
	return 0;
}

static int write_text(const char *path, const char *text, char *err, size_t errlen)
{
	char *tmp = xasprintf("%s.tmp", path);
	FILE *f = fopen(tmp, "wb");
	bool ok = f && fwrite(text, 1, strlen(text), f) == strlen(text);
	ok = f && fclose(f) == 0 && ok;
	if (ok && rename(tmp, path) != 0)
		ok = false;
	if (!ok) {
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
		unlink(tmp);
	}
	free(tmp);
	return ok ? 0 : -1;
}

static int write_json(const char *path, json_t *j, char *err, size_t errlen)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
	json_decref(j);
	if (!s) {
		snprintf(err, errlen, "cannot encode %s", path);
		return -1;
	}
	strbuf b = {0};
	sb_adds(&b, s);
	sb_add(&b, "\n", 1);
	free(s);
	int rc = write_text(path, b.s, err, errlen);
	sb_free(&b);
	return rc;
}

int eval_report_write(const eval_report *rep, const char *dir, char *err, size_t errlen)
{
	if (make_dir(dir, err, errlen) != 0)
		return -1;
	agg a;
	build(&a, rep);
	int rc = 0;
	char *path;
#define OUT(name, text_expr)                                       \
	do {                                                           \
		char *text_ = (text_expr);                                 \
		path = xasprintf("%s/%s", dir, name);                      \
		if (rc == 0)                                               \
			rc = write_text(path, text_, err, errlen);             \
		free(path);                                                \
		free(text_);                                               \
	} while (0)
	OUT("tables.md", markdown(&a));
	OUT("table9.csv", csv_table9(&a));
	OUT("table10.csv", csv_table10(&a));
	OUT("perplexity.csv", csv_ppl(&a));
	OUT("score_vs_acr.svg", svg(&a));
#undef OUT
	if (rc == 0) {
		path = xasprintf("%s/tables.json", dir);
		rc = write_json(path, tables_json(&a), err, errlen);
		free(path);
	}
	if (rc == 0) {
		path = xasprintf("%s/results.json", dir);
		rc = write_json(path, results_json(&a), err, errlen);
		free(path);
	}
	for (int32_t r = 0; r < rep->n_regimes && rc == 0; r++) {
		char *sdir = xasprintf("%s/samples/%s", dir, rep->regimes[r]);
		rc = make_dir(sdir, err, errlen);
		for (int32_t t = 0; t < rep->n_runs && rc == 0; t++) {
			char *text = sample_lines(rep, r, t);
			path = xasprintf("%s/%s.jsonl", sdir, rep->runs[t].task->name);
			rc = write_text(path, text, err, errlen);
			free(path);
			free(text);
		}
		free(sdir);
	}
	release(&a);
	return rc;
}
