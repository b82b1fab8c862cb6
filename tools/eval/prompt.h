/* tools/eval/prompt.h — turns a task's files into the items an evaluation sends: reads DIR/TASK.jsonl (and, when
 * shots are asked for, DIR/TASK.fewshot.jsonl, or for a task whose items are the first rows of its few-shot split
 * DIR/TASK.full.jsonl when present), runs the task's process_docs, selects the subset, and builds
 * each item's context as the harness does (description + few-shot examples + doc_to_text) with its continuations
 * (multiple choice) or stop sequences (generation). Everything here is text; tokens come from the server later. */
#ifndef AAH_EVAL_PROMPT_H
#define AAH_EVAL_PROMPT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/eval/dataset.h"
#include "tools/eval/subset.h"
#include "tools/eval/tasks.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eval_item {
	int64_t doc_id;        /* 0-based in the selected subset */
	int64_t index;         /* 0-based in the file */
	int64_t line;          /* 1-based line of the file */
	const json_t *doc;     /* the processed doc (borrowed from the run's docs) */
	char *context;         /* MC and generation: the prompt; perplexity: the document */
	int32_t n_choices;     /* MC */
	char **continuation;   /* (n_choices) target_delimiter + choice */
	char **choice;         /* (n_choices) the choice texts (their lengths normalise acc_norm) */
	int32_t gold;          /* MC */
	json_t *target;        /* the samples' "target": the gold index (MC), the target text or aliases */
	char hash[33];         /* of everything the item asks of the server (prompt, continuations, generation settings) */
} eval_item;

typedef struct eval_prepare_opts {
	int32_t num_fewshot;         /* -1: the task's default */
	eval_subset_spec subset;
	int32_t max_gen_toks;        /* -1: the task's */
	const char *settings;        /* the caller's settings that change a result (tokenization, lengths): hashed too */
} eval_prepare_opts;

/* Where a run's few-shot examples come from, and whether they can be the harness's. */
typedef struct eval_fewshot_pool {
	char *file;                  /* the file's name without its directory (gpqa_diamond.full.jsonl); NULL: 0-shot */
	int64_t rows;                /* rows in it */
	int64_t split_rows;          /* rows in the harness's split (the task's fewshot_split_rows; 0: not known) */
	bool full;                   /* the whole split of a task whose items are its first rows (TASK.full.jsonl) */
	bool partial;                /* a random draw over fewer rows than the harness draws from: other examples */
	char *note;                  /* partial: "5 of 198 rows, not the harness's draw"; else NULL */
	char *detail;                /* partial: what the harness draws from instead ("the harness samples the 198 rows of
	                              * its Diamond (train, …) split; gpqa_diamond.full.jsonl, …, is not in the data
	                              * directory"); else NULL */
} eval_fewshot_pool;

typedef struct eval_task_run {
	const eval_task *task;
	char *path;                  /* the items' file */
	eval_docs docs, fewshot;     /* fewshot: the pool (the whole split, items included, for a full-split file) */
	eval_fewshot_pool pool;
	int32_t k;                   /* shots */
	int32_t max_gen_toks;
	int64_t n_file;              /* items in the file */
	eval_item *items;            /* (n_items) the selected subset, in file order */
	int64_t n_items;
} eval_task_run;

/* Prepares task from dir. 0, or -1 with a message naming the file, line and field (or what is missing). */
int eval_task_prepare(eval_task_run *run, const eval_task *task, const char *dir, const eval_prepare_opts *opts,
                      char *err, size_t errlen);
void eval_task_run_free(eval_task_run *run);
/* The run's few-shot pool as JSON, {"file", "rows", "split", "split_rows", "whole_split", "partial"[, "note",
 * "detail"]}
 * (split_rows null when not known); NULL when the run has no shots. The caller owns it. */
json_t *eval_fewshot_pool_json(const eval_task_run *run);

#ifdef __cplusplus
}
#endif
#endif
