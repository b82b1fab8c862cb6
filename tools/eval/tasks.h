/* tools/eval/tasks.h — the benchmark tasks as data: one row per task, as lm-evaluation-harness writes a task in YAML
 * (how a document becomes a prompt, its choices, its target, the generation's stop sequences, the filters and the
 * metric). The scoring loops (score.h) and the request builder (prompt.h) read these rows; nothing else knows a
 * task by name. */
#ifndef AAH_EVAL_TASKS_H
#define AAH_EVAL_TASKS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/eval/dataset.h"
#include "tools/eval/pyrandom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eval_output {
	EVAL_MULTIPLE_CHOICE,         /* a log-likelihood per choice; acc (and acc_norm) */
	EVAL_GENERATE_UNTIL,          /* greedy generation until a stop sequence; filters, then a match or a test run */
	EVAL_LOGLIKELIHOOD_ROLLING,   /* perplexity over context-length windows */
} eval_output;

typedef enum eval_group { EVAL_GROUP_LANGUAGE, EVAL_GROUP_MATH_CODE, EVAL_GROUP_PERPLEXITY } eval_group;

typedef enum eval_sampler {
	EVAL_SAMPLER_RANDOM,    /* the harness's default: random.Random(1234).sample(fewshot docs, k), one stream per task */
	EVAL_SAMPLER_FIRST_N,   /* the first k (of those whose fewshot_key field equals the item's, when set) */
	EVAL_SAMPLER_FIXED,     /* the rows whose fixed_field is fixed_ids[0], [1], …, in that order, first k of them */
} eval_sampler;

typedef enum eval_scorer { EVAL_SCORE_MC, EVAL_SCORE_EXACT_MATCH, EVAL_SCORE_PASS_AT_1, EVAL_SCORE_PERPLEXITY } eval_scorer;

/* One entry of a task's filter_list: what turns a generation into the string that is scored. */
typedef struct eval_filter {
	const char *name;     /* the harness's filter name: the "metric,NAME" key of results */
	const char *regex;    /* RegexFilter pattern (take_first), or NULL */
	int32_t group_select;
	bool strip;           /* remove_whitespace: the harness's extraction.py strips both ends (resp.strip()) */
} eval_filter;

/* exact_match's options (HF evaluate): regexes removed from prediction and reference, then case, then punctuation. */
typedef struct eval_match_rules {
	bool ignore_case, ignore_punctuation;
	const char *ignore_regexes[6];   /* NULL-terminated */
} eval_match_rules;

typedef struct eval_task {
	const char *name;      /* as the harness spells the task: mmlu, mmlu_pro, …; the file is DIR/NAME.jsonl */
	const char *title;     /* the row of table 9 */
	const char *version;   /* the harness's metadata version (goes into results.json and the cache key) */
	eval_group group;
	eval_output output;
	const eval_field *layout;   /* items and few-shot examples share it */
	eval_doc_check check;

	/* The harness's process_docs: derived fields added to each doc, in file order, items first, then few-shot
	 * examples (GPQA's shuffled answers). rng is seeded with process_seed[k > 0]. NULL: none. */
	void (*process)(json_t *doc, py_random *rng, int32_t k);
	uint64_t process_seed[2];
	char *(*description)(const json_t *doc, int32_t k);   /* NULL (or a NULL result): none */
	char *(*doc_to_text)(const json_t *doc, int32_t k);   /* the item's prompt text (k: shots, for variants) */
	char *(*fewshot_text)(const json_t *doc, int32_t k);  /* a few-shot example's text; NULL: doc_to_text */
	char *(*fewshot_target)(const json_t *doc);           /* its answer; NULL: the gold choice (MC) */
	/* MC: the choice texts (new strings into *out, the caller frees each and the array) and the gold index */
	int32_t (*doc_to_choices)(const json_t *doc, char ***out);
	int32_t (*doc_to_gold)(const json_t *doc);
	json_t *(*doc_to_target)(const json_t *doc);          /* the samples' "target" of a generation task */
	const char *target_delimiter;
	int32_t num_fewshot;          /* the harness's default k */
	eval_sampler sampler;
	const char *fewshot_key;      /* FIRST_N: examples of the item's subject/category only; NULL: all */
	bool fewshot_same_split;      /* the harness's config has fewshot_split == test_split: it draws k + 1 */
	/* The split the harness takes few-shot examples from: its name and its number of rows (0: none, or its size
	 * does not change the examples). A RANDOM draw over a few-shot file with fewer rows is not the harness's draw:
	 * such a run is marked in the tables and the JSON outputs (eval_task_run.pool, prompt.h). */
	const char *fewshot_split;
	int64_t fewshot_split_rows;
	/* The items are the first rows of the split the examples come from (GPQA: the harness draws n-shot examples
	 * from the Diamond split it evaluates). DIR/NAME.full.jsonl, when present, is that whole split: with shots it is
	 * the pool, process_docs runs over it once in its order, and the items are its first rows (checked). */
	bool fewshot_full_split;
	const char *fixed_field;
	int64_t fixed_ids[4];
	int32_t n_fixed;

	const char *until[6];         /* generation stop sequences (NULL-terminated) */
	int32_t max_gen_toks;

	eval_scorer scorer;
	eval_filter filters[2];
	int32_t n_filters;
	eval_match_rules match;
	bool acc_norm;                /* MC: the harness reports acc_norm too */
	const char *metric;           /* acc, exact_match, pass@1, pass_at_1, word_perplexity */
	const char *primary;          /* the results key table 9 shows: "acc_norm,none", "exact_match,strict-match", … */
	/* code tasks: the program run in the sandbox for a completion (the caller frees it) */
	char *(*program)(const json_t *doc, const char *completion);
} eval_task;

extern const eval_task eval_tasks[];
extern const int32_t eval_n_tasks;

const eval_task *eval_task_find(const char *name);   /* NULL when unknown */

#ifdef __cplusplus
}
#endif
#endif
