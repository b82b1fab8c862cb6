/* tools/eval/prompt.h — turns a task's files into the items an evaluation sends: reads DIR/TASK.jsonl (and
 * DIR/TASK.fewshot.jsonl when shots are asked for), runs the task's process_docs, selects the subset, and builds
 * each item's context as the harness does (description + few-shot examples + doc_to_text) with its continuations
 * (multiple choice) or stop sequences (generation). Everything here is text; tokens come from the server later. */
#ifndef AAH_EVAL_PROMPT_H
#define AAH_EVAL_PROMPT_H

#include <jansson.h>
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

typedef struct eval_task_run {
	const eval_task *task;
	char *path;                  /* the items' file */
	eval_docs docs, fewshot;
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

#ifdef __cplusplus
}
#endif
#endif
