/* tests/check_eval_tasks.c — Check suite for aah-eval's task table, dataset reader and prompt builder
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
