/* tests/tools/check_eval_tasks.c — Check suite for aah-eval's task table, dataset reader and prompt builder
 * (tools/eval/tasks, dataset, prompt) on the committed task files of tests/data/eval/: each layout's contexts,
 * continuations and targets as the harness's templates render them (expected strings written out here), few-shot
 * selection by each sampler (CPython's random.Random(1234).sample orders), GPQA's seeded shuffle, and every kind
 * of bad file refused with its line and field. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/eval/dataset.h"
#include "tools/eval/groups.h"
#include "tools/eval/prompt.h"
#include "tools/eval/report.h"
#include "tests/test_env.h"
#include "tools/eval/tasks.h"

static char dir[1024];

static void setup(void)
{
	snprintf(dir, sizeof dir, "%s/eval", testdata());
}

/* Prepares a task from the test files; k = -1 for its default shots. */
static void prepare(eval_task_run *run, const char *task, int32_t k)
{
	eval_prepare_opts o = {k, {-1, -1, 0}, -1, "test"};
	char err[1024];
	ck_assert_ptr_nonnull(eval_task_find(task));
	int rc = eval_task_prepare(run, eval_task_find(task), dir, &o, err, sizeof err);
	ck_assert_msg(rc == 0, "%s: %s", task, err);
}

START_TEST(test_table)
{
	const char *names[] = {"mmlu", "mmlu_pro", "gpqa_diamond", "arc_challenge", "hellaswag", "triviaqa",
	                       "ceval", "gsm8k", "humaneval", "mbpp", "perplexity"};
	ck_assert_int_eq(eval_n_tasks, 11);
	for (int i = 0; i < 11; i++) {
		const eval_task *t = eval_task_find(names[i]);
		ck_assert_ptr_nonnull(t);
		ck_assert_ptr_nonnull(t->doc_to_text);
		ck_assert_ptr_nonnull(t->primary);
		if (t->output == EVAL_MULTIPLE_CHOICE)
			ck_assert(t->doc_to_choices && t->doc_to_gold && t->scorer == EVAL_SCORE_MC);
		if (t->output == EVAL_GENERATE_UNTIL)
			ck_assert(t->until[0] && t->max_gen_toks > 0 && t->n_filters >= 1);
		if (t->scorer == EVAL_SCORE_PASS_AT_1)
			ck_assert_ptr_nonnull(t->program);
	}
	ck_assert_ptr_null(eval_task_find("mmlu_abstract_algebra"));
}
END_TEST

START_TEST(test_mmlu)
{
	eval_task_run run;
	prepare(&run, "mmlu", -1);
	ck_assert_int_eq(run.n_items, 6);
	ck_assert_int_eq(run.k, 0);
	ck_assert_str_eq(run.items[0].context,
	                 "The following are multiple choice questions (with answers) about astronomy.\n\n"
	                 "Which planet in our solar system is closest to the Sun?\nA. Venus\nB. Mercury\nC. Mars\nD. Earth\n"
	                 "Answer:");
	ck_assert_int_eq(run.items[0].n_choices, 4);
	ck_assert_str_eq(run.items[0].continuation[3], " D");
	ck_assert_int_eq(run.items[0].gold, 1);
	ck_assert_str_eq(run.items[1].context,
	                 "The following are multiple choice questions (with answers) about high school chemistry.\n\n"
	                 "What is the boiling point of water at sea level in degrees Celsius?\nA. 90\nB. 100\nC. 110\n"
	                 "D. 120\nAnswer:");
	eval_task_run_free(&run);
	/* first_n of the item's subject, answers as letters */
	prepare(&run, "mmlu", 2);
	ck_assert_str_eq(run.items[0].context,
	                 "The following are multiple choice questions (with answers) about astronomy.\n\n"
	                 "What is the largest planet of the solar system?\nA. Earth\nB. Jupiter\nC. Saturn\nD. Neptune\n"
	                 "Answer: B\n\n"
	                 "What do we call a rocky body orbiting the Sun between Mars and Jupiter?\nA. Comet\nB. Moon\n"
	                 "C. Asteroid\nD. Quasar\nAnswer: C\n\n"
	                 "Which planet in our solar system is closest to the Sun?\nA. Venus\nB. Mercury\nC. Mars\nD. Earth\n"
	                 "Answer:");
	eval_task_run_free(&run);
}
END_TEST

START_TEST(test_random_fewshot)
{
	/* gsm8k 5-shot: random.Random(1234).sample(range(5), 5) gives [3,0,4,2,1], then [0,4,1,3,2] */
	eval_task_run run;
	prepare(&run, "gsm8k", -1);
	ck_assert_int_eq(run.k, 5);
	const char *ex3 = "Question: A shop sells 10 cups a day. How many in a week?\nAnswer: 10 * 7 = <<10*7=70>>70 cups.\n"
	                  "#### 70\n\nQuestion: Ann has 5 marbles";
	ck_assert_msg(!strncmp(run.items[0].context, ex3, strlen(ex3)), "%s", run.items[0].context);
	ck_assert_msg(!strncmp(run.items[1].context, "Question: Ann has 5 marbles", 27), "%s", run.items[1].context);
	/* the fifth shot (index 1), then the item itself, whose answer is not in its prompt */
	const char *tail = "Question: A cake is cut into 8 slices and 3 are eaten. How many slices are left?\nAnswer: 8 - 3 = "
	                   "<<8-3=5>>5 slices.\n#### 5\n\nQuestion: Tom has 3 apples and buys 4 more. How many apples does he "
	                   "have?\nAnswer:";
	size_t n = strlen(run.items[0].context);
	ck_assert_msg(n > strlen(tail) && !strcmp(run.items[0].context + n - strlen(tail), tail), "%s", run.items[0].context);
	ck_assert_str_eq(json_string_value(run.items[0].target),
	                 "Tom starts with 3 apples.\nHe buys 4 more, so 3 + 4 = <<3+4=7>>7.\n#### 7");
	eval_task_run_free(&run);
}
END_TEST

START_TEST(test_hellaswag)
{
	eval_task_run run;
	prepare(&run, "hellaswag", -1);
	ck_assert_str_eq(run.items[0].context,
	                 "Making tea: A man fills a kettle with water and puts it on the stove. Then he");
	ck_assert_str_eq(run.items[0].continuation[0], " waits for the water to boil.");
	ck_assert_str_eq(run.items[1].context,
	                 "Gardening. How to plant a tree: Dig a hole twice as wide as the root ball. Place the tree in the "
	                 "hole.");
	ck_assert_str_eq(run.items[1].choice[2], " Cut the tree into pieces.");   /* preprocess strips before re.sub */
	ck_assert_int_eq(run.items[1].gold, 0);
	eval_task_run_free(&run);
	/* few-shot examples in the HF layout (label a string): the gold ending is their target */
	prepare(&run, "hellaswag", 1);
	ck_assert_msg(strstr(run.items[0].context, ": ") && strstr(run.items[0].context, ".\n\nMaking tea:"), "%s",
	              run.items[0].context);
	eval_task_run_free(&run);
}
END_TEST

/* MMLU and MMLU-Pro as the harness's groups: subtasks by subject / category, the group's stderr pooled over them
 * (pooled_sample_stderr), "N/A" where a subtask has one item; one-task tasks are not groups */
START_TEST(test_groups)
{
	eval_task_run run;
	prepare(&run, "mmlu", -1);
	eval_subtasks st;
	ck_assert_int_eq(eval_subtasks_of(&run, &st), 0);
	ck_assert_int_eq(st.n, 2);
	ck_assert_str_eq(st.name[0], "mmlu_astronomy");
	ck_assert_str_eq(st.name[1], "mmlu_high_school_chemistry");
	ck_assert_str_eq(st.group[0], "mmlu_stem");
	ck_assert_str_eq(st.group[1], "mmlu_stem");
	ck_assert(st.size[0] == 3 && st.size[1] == 3 && st.in_file[0] == 3);
	/* astronomy (items 0, 3, 5) [1, 0, 0], chemistry (1, 2, 4) [1, 0, 1]: each sample variance 1/3, stderr 1/3;
	 * pooled variance (2 * 1/9 * 3 + 2 * 1/9 * 3) / (6 - 2) = 1/3, stderr sqrt(1/3 / 6) — not the flat
	 * sqrt(0.3 / 6) of the six items as one task */
	double x[6] = {1, 1, 0, 0, 1, 0}, mean, se;
	int64_t size;
	eval_group_stat(&st, x, 6, NULL, -1, &mean, &se, &size);
	ck_assert(fabs(mean - 0.5) < 1e-15 && size == 6);
	ck_assert_msg(fabs(se - sqrt(1.0 / 18)) < 1e-15, "%.17g", se);
	eval_group_stat(&st, x, 6, "mmlu_stem", -1, &mean, &se, &size);
	ck_assert(fabs(se - sqrt(1.0 / 18)) < 1e-15 && size == 6);
	eval_group_stat(&st, x, 6, "mmlu_humanities", -1, &mean, &se, &size);
	ck_assert(size == 0 && isnan(mean));
	eval_group_stat(&st, x, 6, NULL, 0, &mean, &se, &size);
	ck_assert(fabs(mean - 1.0 / 3) < 1e-15 && fabs(se - 1.0 / 3) < 1e-15 && size == 3);
	eval_subtasks_free(&st);
	eval_task_run_free(&run);
	/* the first three items: astronomy has one, so its stderr and the group's are N/A */
	eval_prepare_opts o = {-1, {3, -1, 0}, -1, "test"};
	char err[1024];
	ck_assert_int_eq(eval_task_prepare(&run, eval_task_find("mmlu"), dir, &o, err, sizeof err), 0);
	ck_assert_int_eq(eval_subtasks_of(&run, &st), 0);
	eval_group_stat(&st, x, 3, NULL, -1, &mean, &se, &size);
	ck_assert(isnan(se) && size == 3);
	eval_subtasks_free(&st);
	eval_task_run_free(&run);
	double ses[2] = {1.0 / 3, 1.0 / 3};
	int64_t ns[2] = {3, 3};
	ck_assert(fabs(eval_pooled_stderr(ses, ns, 2) - sqrt(1.0 / 18)) < 1e-15);
	ses[1] = NAN;
	ck_assert(isnan(eval_pooled_stderr(ses, ns, 2)));

	prepare(&run, "mmlu_pro", -1);
	ck_assert_int_eq(eval_subtasks_of(&run, &st), 0);
	ck_assert(st.n == 2 && !strcmp(st.name[0], "mmlu_pro_computer_science") && !strcmp(st.name[1], "mmlu_pro_math"));
	ck_assert_ptr_null(st.group[0]);
	eval_subtasks_free(&st);
	eval_task_run_free(&run);
	prepare(&run, "arc_challenge", -1);
	ck_assert_int_eq(eval_subtasks_of(&run, &st), 1);
	eval_task_run_free(&run);
}
END_TEST

START_TEST(test_gpqa)
{
	/* zeroshot: random.seed(0), one shuffle per item in file order: [2,0,1,3], [0,1,3,2], [0,2,1,3], [1,0,3,2] */
	eval_task_run run;
	prepare(&run, "gpqa_diamond", -1);
	ck_assert_str_eq(run.items[0].context, "What is the correct answer to this question:What is the SI unit of force?\n"
	                                       "Choices:\n(A) Pascal\n(B) Joule\n(C) Watt\n(D) Newton\nAnswer:");
	ck_assert_int_eq(run.items[0].gold, 3);
	ck_assert_str_eq(run.items[0].continuation[0], " (A)");
	ck_assert_msg(strstr(run.items[1].context, "(A) Temperature only\n(B) Mass. density\n(C) Kinetic energy\n(D) Colour")
	              != NULL, "%s", run.items[1].context);
	ck_assert_int_eq(run.items[1].gold, 2);
	ck_assert_msg(strstr(run.items[2].context, "(C)  \n") != NULL, "%s", run.items[2].context);   /* None → " " */
	ck_assert_int_eq(run.items[3].gold, 2);   /* choices.index(correct): the first "Photon" */
	eval_task_run_free(&run);
	prepare(&run, "gpqa_diamond", 2);   /* n_shot: its description and template */
	ck_assert(!strncmp(run.items[0].context, "Here are some example questions from experts.", 45));
	ck_assert(strstr(run.items[0].context, "\nAnswer: (") != NULL);
	/* n_shot/utils.py preprocesses as zeroshot does: " [title]" → ". ", double spaces → one */
	ck_assert_msg(strstr(run.items[1].context, "Mass. density") != NULL, "%s", run.items[1].context);
	eval_task_run_free(&run);
}
END_TEST

/* Where few-shot examples come from: a random draw over a file smaller than the harness's split is marked partial
 * ("5 of 198 rows, not the harness's draw"); first_n and fixed ids are not; 0-shot reads no pool. */
START_TEST(test_fewshot_pool)
{
	static const struct {
		const char *task;
		int32_t k;
		bool partial;
		const char *note;
	} cases[] = {
		{"gpqa_diamond", 2, true, "5 of 198 rows, not the harness's draw"},
		{"arc_challenge", 1, true, "5 of 1119 rows, not the harness's draw"},
		{"hellaswag", 1, true, "5 of 39905 rows, not the harness's draw"},
		{"gsm8k", 5, true, "5 of 7473 rows, not the harness's draw"},
		{"mmlu", 1, false, NULL},
		{"mbpp", 3, false, NULL},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		eval_task_run run;
		prepare(&run, cases[i].task, cases[i].k);
		ck_assert_msg(run.pool.partial == cases[i].partial, "%s", cases[i].task);
		ck_assert(!run.pool.full);
		if (cases[i].note) {
			ck_assert_str_eq(run.pool.note, cases[i].note);
			ck_assert_msg(strstr(run.pool.detail, "the harness samples the ") != NULL, "%s", run.pool.detail);
			/* only GPQA has a whole-split file to name */
			ck_assert(!!strstr(run.pool.detail, "gpqa_diamond.full.jsonl, that whole split, is not in the data "
			                                    "directory") == !strcmp(cases[i].task, "gpqa_diamond"));
		} else {
			ck_assert_ptr_null(run.pool.note);
			ck_assert_ptr_null(run.pool.detail);
		}
		char want[128];
		snprintf(want, sizeof want, "%s.fewshot.jsonl", cases[i].task);
		ck_assert_str_eq(run.pool.file, want);
		json_t *j = eval_fewshot_pool_json(&run);
		ck_assert(json_is_true(json_object_get(j, "partial")) == cases[i].partial);
		ck_assert_int_eq(json_integer_value(json_object_get(j, "rows")), run.fewshot.n);
		json_decref(j);
		eval_task_run_free(&run);
	}
	eval_task_run run;
	prepare(&run, "gpqa_diamond", 0);
	ck_assert_ptr_null(run.pool.file);
	ck_assert(!run.pool.partial);
	ck_assert_ptr_null(eval_fewshot_pool_json(&run));
	eval_task_run_free(&run);
}
END_TEST

/* A directory holding synthetic GPQA-shaped rows (never the dataset's): NAME.full.jsonl with n_full rows, one of
 * them holding U+2028 (the file is split on \n only), and NAME.jsonl with rows first..first+n_items-1 of it. */
static char syndir[256];
static void synthetic_gpqa(int32_t n_full, int32_t first, int32_t n_items)
{
	snprintf(syndir, sizeof syndir, "/tmp/aah-eval-gpqa-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(syndir));
	char path[512];
	for (int pass = 0; pass < 2; pass++) {
		snprintf(path, sizeof path, "%s/gpqa_diamond%s.jsonl", syndir, pass ? "" : ".full");
		FILE *f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		for (int32_t i = pass ? first : 0; i < (pass ? first + n_items : n_full); i++)
			fprintf(f, "{\"Question\": \"Synthetic%squestion %d?\", \"Correct Answer\": \"right %d\", "
			        "\"Incorrect Answer 1\": \"wrong %d a\", \"Incorrect Answer 2\": \"wrong %d b\", "
			        "\"Incorrect Answer 3\": \"wrong %d c\", \"Record ID\": \"syn%d\"}\n",
			        i == 5 ? "\xe2\x80\xa8" : " ", i, i, i, i, i, i);
		fclose(f);
	}
}

static void remove_synthetic(void)
{
	char path[512];
	snprintf(path, sizeof path, "%s/gpqa_diamond.full.jsonl", syndir);
	unlink(path);
	snprintf(path, sizeof path, "%s/gpqa_diamond.jsonl", syndir);
	unlink(path);
	rmdir(syndir);
}

/* GPQA n-shot over the whole split (gpqa_diamond.full.jsonl): process_docs once over the split in its order
 * (random.Random(42)), the items its first rows, random.Random(1234).sample(range(198), k + 1) with the item itself
 * dropped. Expected strings from harness_reference.prepare over the same synthetic rows. */
START_TEST(test_gpqa_full_split)
{
	synthetic_gpqa(198, 0, 3);
	eval_prepare_opts o = {1, {-1, -1, 0}, -1, ""};
	eval_task_run run;
	char err[1024];
	ck_assert_msg(eval_task_prepare(&run, eval_task_find("gpqa_diamond"), syndir, &o, err, sizeof err) == 0, "%s", err);
	ck_assert(run.pool.full && !run.pool.partial);
	ck_assert_ptr_null(run.pool.note);
	ck_assert_str_eq(run.pool.file, "gpqa_diamond.full.jsonl");
	ck_assert_int_eq(run.pool.rows, 198);
	ck_assert_int_eq(run.n_items, 3);
	for (int64_t i = 0; i < run.n_items; i++)
		ck_assert_ptr_eq(run.items[i].doc, run.fewshot.doc[i]);   /* the items are the split's rows */
	const char *desc = "Here are some example questions from experts. Answer the final question yourself, following "
	                   "the format of the previous questions exactly.\n";
	char want[1024];
	/* item 0 draws [112, 29]: 112 */
	snprintf(want, sizeof want, "%sQuestion: Synthetic question 112?\nChoices:\n(A) wrong 112 b\n(B) wrong 112 a\n"
	         "(C) wrong 112 c\n(D) right 112\nAnswer: (D)\n\nQuestion: Synthetic question 0?\nChoices:\n(A) wrong 0 c\n"
	         "(B) wrong 0 b\n(C) right 0\n(D) wrong 0 a\nAnswer:", desc);
	ck_assert_str_eq(run.items[0].context, want);
	ck_assert_int_eq(run.items[0].gold, 2);
	/* item 1 draws [1, 23]: itself, dropped, then 23 */
	snprintf(want, sizeof want, "%sQuestion: Synthetic question 23?\nChoices:\n(A) wrong 23 c\n(B) right 23\n"
	         "(C) wrong 23 a\n(D) wrong 23 b\nAnswer: (B)\n\nQuestion: Synthetic question 1?\nChoices:\n(A) right 1\n"
	         "(B) wrong 1 c\n(C) wrong 1 a\n(D) wrong 1 b\nAnswer:", desc);
	ck_assert_str_eq(run.items[1].context, want);
	ck_assert_int_eq(run.items[1].gold, 0);
	/* item 2 draws [149, 8]: 149, whose answers were shuffled 150th in the split's order */
	snprintf(want, sizeof want, "%sQuestion: Synthetic question 149?\nChoices:\n(A) wrong 149 a\n(B) wrong 149 c\n"
	         "(C) wrong 149 b\n(D) right 149\nAnswer: (D)\n\nQuestion: Synthetic question 2?\nChoices:\n(A) wrong 2 b\n"
	         "(B) right 2\n(C) wrong 2 c\n(D) wrong 2 a\nAnswer:", desc);
	ck_assert_str_eq(run.items[2].context, want);
	json_t *j = eval_fewshot_pool_json(&run);
	ck_assert(json_is_true(json_object_get(j, "whole_split")) && json_is_false(json_object_get(j, "partial")));
	ck_assert_int_eq(json_integer_value(json_object_get(j, "split_rows")), 198);
	json_decref(j);
	eval_task_run_free(&run);
	/* zero-shot reads no pool: random.seed(0) over the items, as before */
	o.num_fewshot = 0;
	ck_assert_int_eq(eval_task_prepare(&run, eval_task_find("gpqa_diamond"), syndir, &o, err, sizeof err), 0);
	ck_assert_ptr_null(run.pool.file);
	ck_assert_int_eq(run.fewshot.n, 0);
	eval_task_run_free(&run);
	remove_synthetic();

	/* a whole split of fewer rows than the harness's (here 10 of 198): marked partial all the same */
	synthetic_gpqa(10, 0, 2);
	o.num_fewshot = 3;
	ck_assert_int_eq(eval_task_prepare(&run, eval_task_find("gpqa_diamond"), syndir, &o, err, sizeof err), 0);
	ck_assert(run.pool.full && run.pool.partial);
	ck_assert_str_eq(run.pool.note, "10 of 198 rows, not the harness's draw");
	ck_assert_str_eq(run.pool.detail, "the harness samples the 198 rows of its Diamond (train, the split evaluated) "
	                                  "split");
	eval_task_run_free(&run);
	remove_synthetic();

	/* items that are not the split's first rows, or more items than the split has: refused */
	synthetic_gpqa(10, 1, 2);
	ck_assert_int_eq(eval_task_prepare(&run, eval_task_find("gpqa_diamond"), syndir, &o, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "gpqa_diamond.jsonl:1 is not row 1 of") && strstr(err, "the first rows of the whole split"),
	              "%s", err);
	remove_synthetic();
	synthetic_gpqa(2, 0, 3);
	ck_assert_int_eq(eval_task_prepare(&run, eval_task_find("gpqa_diamond"), syndir, &o, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "has 3 items, more than the 2 rows of"), "%s", err);
	remove_synthetic();
}
END_TEST

/* The outputs mark a row whose few-shot pool is partial: "†" and a footnote in table 9, a column of table9.csv,
 * the row's fewshot_pool in tables.json; an unmarked row says nothing. */
START_TEST(test_partial_pool_marked)
{
	eval_task_run runs[2];
	prepare(&runs[0], "mmlu", 1);
	prepare(&runs[1], "gpqa_diamond", 2);
	json_t **res[2];
	for (int t = 0; t < 2; t++) {
		res[t] = calloc((size_t)runs[t].n_items, sizeof *res[t]);
		for (int64_t i = 0; i < runs[t].n_items; i++)
			res[t][i] = json_pack("{s:{s:f,s:f}}", "metrics", "acc,none", (double)(i % 2), "acc_norm,none", 0.0);
	}
	eval_server srv = {.key = "http://x", .model = "m"};
	const char *regimes[] = {"full_attention"};
	double tps[] = {NAN};
	json_t *config = json_pack("{s:I}", "max_length", (json_int_t)2048);
	eval_report rep = {.srv = &srv, .regimes = regimes, .n_regimes = 1, .runs = runs, .n_runs = 2,
	                   .results = (json_t *const *const *)res, .tokens_per_second = tps, .config = config,
	                   .max_length = 2048, .max_length_from = "test"};
	char *md = eval_report_markdown(&rep);
	ck_assert_msg(strstr(md, "| GPQA-Diamond † | acc | 4 |") && strstr(md, "| MMLU | acc |")
	              && strstr(md, "\n† gpqa_diamond 2-shot: partial few-shot pool: gpqa_diamond.fewshot.jsonl holds 5 of 198 "
	                            "rows, not the harness's draw (the harness samples the 198 rows of its Diamond (train, "
	                            "the split evaluated) split; gpqa_diamond.full.jsonl, that whole split, is not in the data "
	                            "directory). Not comparable with published numbers.\n")
	              && !strstr(md, "mmlu 1-shot"), "%s", md);
	free(md);
	char out[] = "/tmp/aah-eval-report-XXXXXX", err[512], path[600];
	ck_assert_ptr_nonnull(mkdtemp(out));
	ck_assert_msg(eval_report_write(&rep, out, err, sizeof err) == 0, "%s", err);
	snprintf(path, sizeof path, "%s/tables.json", out);
	json_t *tj = json_load_file(path, 0, NULL);
	json_t *rows = json_object_get(json_object_get(tj, "table9"), "rows");
	ck_assert_int_eq(json_array_size(rows), 2);
	json_t *mm = json_array_get(rows, 0), *gp = json_array_get(rows, 1);
	ck_assert(json_is_false(json_object_get(mm, "partial_fewshot_pool")));
	ck_assert(json_is_false(json_object_get(json_object_get(mm, "fewshot_pool"), "partial")));
	ck_assert(json_is_true(json_object_get(gp, "partial_fewshot_pool")));
	ck_assert_int_eq(json_integer_value(json_object_get(gp, "num_fewshot")), 2);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(gp, "fewshot_pool"), "note")),
	                 "5 of 198 rows, not the harness's draw");
	json_decref(tj);
	snprintf(path, sizeof path, "%s/table9.csv", out);
	FILE *f = fopen(path, "r");
	char csv[2048] = "";
	ck_assert_ptr_nonnull(f);
	csv[fread(csv, 1, sizeof csv - 1, f)] = 0;
	fclose(f);
	ck_assert_msg(strstr(csv, "full_attention_stderr,fewshot_pool\n") && strstr(csv, ",MMLU,acc,6,50.0000,23.5702,\n")
	              && strstr(csv, ",4,50.0000,28.8675,\"partial: 5 of 198 rows, not the harness's draw\"\n"), "%s", csv);
	char cmd[700];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
	ck_assert_int_eq(system(cmd), 0);
	json_decref(config);
	for (int t = 0; t < 2; t++) {
		for (int64_t i = 0; i < runs[t].n_items; i++)
			json_decref(res[t][i]);
		free(res[t]);
		eval_task_run_free(&runs[t]);
	}
}
END_TEST

START_TEST(test_other_layouts)
{
	eval_task_run run;
	prepare(&run, "arc_challenge", -1);
	ck_assert_str_eq(run.items[1].context, "Question: Which process turns liquid water into water vapour?\nAnswer:");
	ck_assert_int_eq(run.items[1].gold, 2);   /* labels 1-4, key "3" */
	ck_assert_int_eq(run.items[2].n_choices, 5);
	ck_assert_str_eq(run.items[2].continuation[1], " Water and minerals");
	eval_task_run_free(&run);

	prepare(&run, "ceval", -1);
	ck_assert_str_eq(run.items[0].context, "以下是中国关于计算机网络的单项选择题，请选出其中的正确答案。\n\n"
	                                       "计算机网络中，HTTP 协议默认使用哪个端口？\nA. 21\nB. 80\nC. 25\nD. 110\n答案：");
	ck_assert_int_eq(run.items[0].gold, 1);
	ck_assert_str_eq(run.items[3].context, "水的化学式是什么？\nA. CO2\nB. H2O\nC. NaCl\nD. O2\n答案：");   /* no subject */
	eval_task_run_free(&run);

	prepare(&run, "triviaqa", -1);
	ck_assert_str_eq(run.items[0].context, "Question: Which city is the capital of France?\nAnswer:");
	ck_assert_str_eq(run.items[1].context, "Question: What is the largest ocean on Earth??\nAnswer:");
	ck_assert_int_eq((int)json_array_size(run.items[0].target), 3);
	eval_task_run_free(&run);
	prepare(&run, "triviaqa", 1);   /* a few-shot target is the first alias */
	ck_assert(strstr(run.items[0].context, "?\nAnswer: ") != NULL);
	eval_task_run_free(&run);

	prepare(&run, "mmlu_pro", -1);
	const char *desc = "The following are multiple choice questions (with answers) about math. Think step by step and "
	                   "then finish your answer with \"the answer is (X)\" where X is the correct letter choice.\n"
	                   "Question:\nWhat is 2 plus 3?\nOptions:\nA. 4\nB. 5\nC. 6\nAnswer: Let's think step by step. "
	                   "We compute the value directly. The answer is (B).\n\nQuestion:\nWhat is 10 minus 4?";
	ck_assert_msg(!strncmp(run.items[0].context, desc, strlen(desc)), "%s", run.items[0].context);
	const char *end = "Question:\nWhat is 7 times 8?\nOptions:\nA. 54\nB. 56\nC. 58\nD. 64\nE. 48\nF. 72\n"
	                  "Answer: Let's think step by step.";
	size_t n = strlen(run.items[0].context);
	ck_assert(n > strlen(end) && !strcmp(run.items[0].context + n - strlen(end), end));
	ck_assert(strstr(run.items[2].context, "J. 16\nAnswer:") != NULL);   /* the first ten options only */
	ck_assert_str_eq(json_string_value(run.items[1].target), "B");
	eval_task_run_free(&run);

	prepare(&run, "mbpp", -1);
	ck_assert_int_eq(run.k, 3);
	const char *shots = "You are an expert Python programmer, and here is your task: Write a function to square a "
	                    "number. Your code should pass these tests:\n\nassert square(2) == 4\nassert square(3) == 9\n"
	                    "assert square(0) == 0\n[BEGIN]\ndef square(x):\n    return x * x\n[DONE]\n\n"
	                    "You are an expert Python programmer, and here is your task: Write a function to check";
	ck_assert_msg(!strncmp(run.items[0].context, shots, strlen(shots)), "%s", run.items[0].context);
	ck_assert(strstr(run.items[0].context, "return xs[0]\n[DONE]\n\nYou are an expert Python programmer, and here is "
	                                       "your task: Write a function to return the larger") != NULL);
	char *prog = run.task->program(run.items[0].doc, "def larger(a, b):\n    return max(a, b)\n");
	ck_assert_str_eq(prog, "def larger(a, b):\n    return max(a, b)\n\nassert larger(1, 2) == 2\nassert larger(5, 3) == 5"
	                       "\nassert larger(4, 4) == 4");
	free(prog);
	eval_task_run_free(&run);

	prepare(&run, "humaneval", -1);
	ck_assert_int_eq(run.k, 0);
	prog = run.task->program(run.items[2].doc, "    return 2 * x\n");
	ck_assert_msg(!strcmp(prog, "def double(x):\n    \"\"\"Return twice x.\n    >>> double(2)\n    4\n    \"\"\"\n"
	                            "    return 2 * x\n\n\n\ndef check(candidate):\n    assert candidate(2) == 4\n"
	                            "    assert candidate(0) == 0\n\ncheck(double)"), "%s", prog);
	free(prog);
	eval_task_run_free(&run);

	prepare(&run, "perplexity", -1);
	ck_assert_int_eq(run.n_items, 1);
	ck_assert(!strncmp(run.items[0].context, "An inference server keeps", 25));
	eval_task_run_free(&run);
}
END_TEST

START_TEST(test_subsets_and_hashes)
{
	eval_prepare_opts o = {-1, {2, -1, 0}, -1, "a"};
	eval_task_run a, b, c;
	char err[512];
	ck_assert_int_eq(eval_task_prepare(&a, eval_task_find("arc_challenge"), dir, &o, err, sizeof err), 0);
	ck_assert_int_eq(a.n_items, 2);
	ck_assert_int_eq(a.n_file, 5);
	o.settings = "b";   /* another setting, another hash */
	ck_assert_int_eq(eval_task_prepare(&b, eval_task_find("arc_challenge"), dir, &o, err, sizeof err), 0);
	ck_assert_str_ne(a.items[0].hash, b.items[0].hash);
	o.settings = "a";
	o.subset = (eval_subset_spec){-1, 3, 11};
	ck_assert_int_eq(eval_task_prepare(&c, eval_task_find("arc_challenge"), dir, &o, err, sizeof err), 0);
	ck_assert_int_eq(c.n_items, 3);
	for (int64_t i = 0; i < c.n_items; i++) {
		ck_assert_int_eq(c.items[i].doc_id, i);
		/* an item keeps its hash whichever subset it is in (0-shot: its prompt does not depend on its position) */
		if (c.items[i].index < 2)
			ck_assert_str_eq(c.items[i].hash, a.items[c.items[i].index].hash);
	}
	eval_task_run_free(&a);
	eval_task_run_free(&b);
	eval_task_run_free(&c);
}
END_TEST

/* A temporary data dir holding one task file (and optionally its few-shot file). */
static char tmpdir[256];
static void write_task(const char *task, const char *items, const char *fewshot)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/aah-eval-check-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	char path[512];
	snprintf(path, sizeof path, "%s/%s.jsonl", tmpdir, task);
	FILE *f = fopen(path, "w");
	fputs(items, f);
	fclose(f);
	if (fewshot) {
		snprintf(path, sizeof path, "%s/%s.fewshot.jsonl", tmpdir, task);
		f = fopen(path, "w");
		fputs(fewshot, f);
		fclose(f);
	}
}

static void remove_task(const char *task)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s.jsonl", tmpdir, task);
	unlink(path);
	snprintf(path, sizeof path, "%s/%s.fewshot.jsonl", tmpdir, task);
	unlink(path);
	rmdir(tmpdir);
}

/* The error of preparing task over a temporary file, which must contain want. */
static void expect_error(const char *task, const char *items, const char *fewshot, int32_t k, const char *want)
{
	write_task(task, items, fewshot);
	eval_prepare_opts o = {k, {-1, -1, 0}, -1, ""};
	eval_task_run run;
	char err[1024] = "";
	int rc = eval_task_prepare(&run, eval_task_find(task), tmpdir, &o, err, sizeof err);
	remove_task(task);
	ck_assert_msg(rc == -1, "%s accepted: %s", task, items);
	ck_assert_msg(strstr(err, want) != NULL, "error '%s' lacks '%s'", err, want);
}

START_TEST(test_bad_files)
{
	const char *ok = "{\"question\": \"q\", \"subject\": \"s\", \"choices\": [\"a\", \"b\", \"c\", \"d\"], \"answer\": 0}\n";
	expect_error("mmlu", "{\"question\": \"q\", \"subject\": \"s\", \"choices\": [\"a\", \"b\", \"c\"], \"answer\": 0}\n",
	             NULL, 0, "mmlu.jsonl:1: field 'choices': expected an array of 4 strings (found an array of 3)");
	char two[512];
	snprintf(two, sizeof two, "%s{\"question\": \"q\", \"subject\": \"s\", \"choices\": [\"a\", \"b\", \"c\", \"d\"], "
	         "\"answer\": 7}\n", ok);
	expect_error("mmlu", two, NULL, 0, "mmlu.jsonl:2: field 'answer': expected 0, 1, 2 or 3");
	snprintf(two, sizeof two, "%s\n{\"question\": \"q\", \"subject\": \"s\"", ok);   /* cut short, after a blank line */
	expect_error("mmlu", two, NULL, 0, "mmlu.jsonl:3: not JSON");
	expect_error("mmlu", "[1, 2]\n", NULL, 0, "mmlu.jsonl:1: expected a JSON object, found an array");
	expect_error("mmlu", "{\"subject\": \"s\", \"choices\": [\"a\", \"b\", \"c\", \"d\"], \"answer\": 0}\n", NULL, 0,
	             "mmlu.jsonl:1: missing field 'question'");
	expect_error("mmlu", "\n\n", NULL, 0, "mmlu.jsonl: no items");
	expect_error("mmlu", ok, NULL, 1, "mmlu.fewshot.jsonl: no such file");
	expect_error("mmlu", ok, ok, 2, "2-shot needs 2 few-shot examples with subject \"s\", the few-shot file has 1");
	expect_error("arc_challenge", "{\"question\": \"q\", \"choices\": {\"text\": [\"a\", \"b\"], \"label\": [\"A\", \"B\"]},"
	             " \"answerKey\": \"C\"}\n", NULL, 0, "arc_challenge.jsonl:1: field 'answerKey': not one of choices.label");
	expect_error("arc_challenge", "{\"question\": \"q\", \"choices\": {\"text\": [\"a\", \"b\"], \"label\": [\"A\", 2]}, "
	             "\"answerKey\": \"A\"}\n", NULL, 0, "field 'choices.label': expected an array of at least 1 strings");
	expect_error("hellaswag", "{\"activity_label\": \"a\", \"ctx_a\": \"b\", \"ctx_b\": \"c\", \"endings\": [\"x\", \"y\"], "
	             "\"label\": \"two\"}\n", NULL, 0, "field 'label': expected an integer (or a string of digits)");
	expect_error("hellaswag", "{\"activity_label\": \"a\", \"ctx_a\": \"b\", \"ctx_b\": \"c\", \"endings\": [\"x\", \"y\"], "
	             "\"label\": 4}\n", NULL, 0, "field 'label': expected the index of one of the endings");
	expect_error("triviaqa", "{\"question\": \"q\", \"answer\": {\"value\": \"v\"}}\n", NULL, 0,
	             "triviaqa.jsonl:1: missing field 'answer.aliases'");
	expect_error("ceval", "{\"question\": \"q\", \"A\": \"1\", \"B\": \"2\", \"C\": \"3\", \"D\": \"4\", \"answer\": \"E\"}\n",
	             NULL, 0, "field 'answer': expected \"A\", \"B\", \"C\" or \"D\"");
	expect_error("mmlu_pro", "{\"question\": \"q\", \"options\": [\"a\", \"b\"], \"answer\": \"C\", \"cot_content\": \"\", "
	             "\"category\": \"math\"}\n", NULL, 0, "field 'answer': expected the letter (A-J) of one of the options");
	expect_error("gsm8k", "{\"question\": 5, \"answer\": \"#### 5\"}\n", NULL, 0,
	             "gsm8k.jsonl:1: field 'question': expected a string (found an integer)");
	expect_error("mbpp", "{\"text\": \"t\", \"code\": \"c\", \"task_id\": 9, \"test_list\": [\"a\", \"b\", \"c\"]}\n",
	             "{\"text\": \"t\", \"code\": \"c\", \"task_id\": 2, \"test_list\": [\"a\", \"b\", \"c\"]}\n", -1,
	             "the few-shot file has no row with task_id 3");
	expect_error("gsm8k", "{\"question\": \"q\", \"answer\": \"#### 5\"}\n", "{\"question\": \"q\", \"answer\": \"a\"}\n", 5,
	             "draws 5 few-shot examples but the file has 1");
	expect_error("humaneval", "{\"task_id\": \"x\", \"prompt\": \"p\", \"entry_point\": \"f\", \"test\": \"t\", "
	             "\"task_id\": \"y\"}\n", NULL, 0, "humaneval.jsonl:1: not JSON: duplicate object key");
	/* a missing task file names it */
	eval_prepare_opts o = {-1, {-1, -1, 0}, -1, ""};
	eval_task_run run;
	char err[1024];
	ck_assert_int_eq(eval_task_prepare(&run, eval_task_find("mmlu"), "/nonexistent-dir", &o, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "/nonexistent-dir/mmlu.jsonl: no such file") != NULL, "%s", err);
	ck_assert_int_eq(eval_task_prepare(&run, eval_task_find("perplexity"), "/nonexistent-dir", &o, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "perplexity.jsonl: no such file") != NULL, "%s", err);
}
END_TEST

static Suite *tasks_suite(void)
{
	Suite *s = suite_create("eval_tasks");
	TCase *tc = tcase_create("tasks");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_table);
	tcase_add_test(tc, test_mmlu);
	tcase_add_test(tc, test_random_fewshot);
	tcase_add_test(tc, test_hellaswag);
	tcase_add_test(tc, test_groups);
	tcase_add_test(tc, test_gpqa);
	tcase_add_test(tc, test_fewshot_pool);
	tcase_add_test(tc, test_gpqa_full_split);
	tcase_add_test(tc, test_partial_pool_marked);
	tcase_add_test(tc, test_other_layouts);
	tcase_add_test(tc, test_subsets_and_hashes);
	tcase_add_test(tc, test_bad_files);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tasks_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
