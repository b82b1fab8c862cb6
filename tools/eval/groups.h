/* tools/eval/groups.h — tasks the harness runs as a group of subtasks (MMLU: mmlu_<subject> under the four category
 * groups mmlu_stem, mmlu_other, mmlu_social_sciences, mmlu_humanities; MMLU-Pro: mmlu_pro_<category>) and how it
 * aggregates them (lm_eval/evaluator_utils.py consolidate_group_results with the groups' aggregate_metric_list
 * weight_by_size: True): a group's metric is the size-weighted mean over its leaf subtasks, its stderr
 * lm_eval/api/metrics.py pooled_sample_stderr over them, "N/A" when any subtask's is (a subtask of one item). */
#ifndef AAH_EVAL_GROUPS_H
#define AAH_EVAL_GROUPS_H

#include <stdint.h>

#include "tools/eval/prompt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* pooled_sample_stderr: sqrt(sum_i (n_i - 1) * se_i^2 * n_i / (sum_i n_i - k) / sum_i n_i) over k subtasks; NAN
 * (the harness's "N/A") when any se_i is NAN, or when no subtask has two items. */
double eval_pooled_stderr(const double *se, const int64_t *n, int32_t k);

/* The subtasks of a run's selected items. */
typedef struct eval_subtasks {
	int32_t n;            /* subtasks with at least one item, sorted by name (as the harness lists them) */
	char **name;          /* (n) "mmlu_abstract_algebra", "mmlu_pro_computer_science" */
	char **alias;         /* (n) "abstract_algebra" */
	const char **group;   /* (n) the intermediate group ("mmlu_stem"), or NULL */
	int64_t *size;        /* (n) items of it in the selection */
	int64_t *in_file;     /* (n) items of it in the file */
	int32_t *of_item;     /* (n_items of the run) each item's subtask */
} eval_subtasks;

/* 0 with *out filled when the run's task is a group (the caller frees with eval_subtasks_free); 1 when it is one
 * task (*out zeroed). */
int eval_subtasks_of(const eval_task_run *run, eval_subtasks *out);
void eval_subtasks_free(eval_subtasks *s);

/* The intermediate groups of a group task, in the harness's order (NULL-terminated), with their printed titles. */
extern const char *const eval_mmlu_groups[];

/* One metric over a group: x[i] for item i of the run; only the subtasks whose group is `group` (NULL: all). *mean
 * the size-weighted mean, *se the pooled stderr (NAN: "N/A"), *size the items counted. Per subtask when sub >= 0. */
void eval_group_stat(const eval_subtasks *s, const double *x, int64_t n_items, const char *group, int32_t sub,
                     double *mean, double *se, int64_t *size);

#ifdef __cplusplus
}
#endif
#endif
