/* tools/eval/report.h — the evaluation's outputs, from the cached per-item results: the table 9 shape (benchmark
 * rows grouped Language / Math and code, a column per regime, best per row in bold with ties bold, ± the harness's
 * standard error), the table 10 shape (per regime its measured ACR, attention work ratio, KV memory ratio and
 * tokens/s, the largest absolute score change against full attention in percentage points, and the items that
 * flipped each way on that benchmark with an exact McNemar p), the table 6 shape for perplexity, as Markdown, CSV
 * and JSON; an SVG of score change against ACR; DIR/results.json in lm-evaluation-harness's results shape per
 * regime (a group task's subtasks and groups as their own rows, groups and group_subtasks as the harness writes
 * them; groups.h); DIR/samples/REGIME/TASK.jsonl per item. */
#ifndef AAH_EVAL_REPORT_H
#define AAH_EVAL_REPORT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/eval/prompt.h"
#include "tools/eval/server_info.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eval_report {
	const eval_server *srv;
	const char *const *regimes;   /* (n_regimes) in column order */
	int32_t n_regimes;
	const eval_task_run *runs;    /* (n_runs) in table order */
	int32_t n_runs;
	/* results[r * n_runs + t][i]: the result object of item i of run t in regime r (borrowed) */
	json_t *const *const *results;
	const double *tokens_per_second;   /* (n_regimes), NAN when not measured */
	json_t *config;                    /* settings for results.json (borrowed) */
	int64_t max_length;                /* the harness's max_length the requests were cut to */
	const char *max_length_from;       /* where it came from, for the tables: "--max-length", the default, … */
} eval_report;

/* The three tables in Markdown (what `aah-eval` prints and DIR/tables.md holds). The caller frees. */
char *eval_report_markdown(const eval_report *rep);
/* Writes every output file into dir (created when missing). 0, or -1 with err. */
int eval_report_write(const eval_report *rep, const char *dir, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
