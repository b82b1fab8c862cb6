/* tests/tools/check_eval_score.c — Check suite for aah-eval's scoring arithmetic (tools/eval/score, pytext, pyrandom,
 * subset): Python's str and re semantics, CPython's random numbers (values printed by Python 3.11 itself), the
 * harness's log-likelihood requests, acc / acc_norm, filters and exact_match, rolling windows, stderr and the
 * McNemar test, and the --sample selection. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/eval/pyrandom.h"
#include "tools/eval/pytext.h"
#include "tools/eval/score.h"
#include "tools/eval/subset.h"
#include "tools/eval/tasks.h"

#define STR_EQ(got, want)                                  \
	do {                                                   \
		char *g_ = (got);                                  \
		ck_assert_msg(!strcmp(g_, want), "got '%s', want '%s'", g_, want); \
		free(g_);                                          \
	} while (0)

START_TEST(test_py_strings)
{
	STR_EQ(py_strip(" \t\u00a0hello world\u3000\n"), "hello world");
	STR_EQ(py_lstrip("  \n x "), "x ");
	ck_assert_uint_eq(py_rstrip_len("Answer: \n", 9), 7);
	ck_assert_uint_eq(py_rstrip_len("   ", 3), 0);
	ck_assert_uint_eq(py_len("héllo", strlen("héllo")), 5);
	ck_assert_uint_eq(py_len("注意", strlen("注意")), 2);
	STR_EQ(py_capitalize("tHE quick Fox"), "The quick fox");   /* str.capitalize lowers the rest */
	STR_EQ(py_capitalize(""), "");
	STR_EQ(py_capitalize("élan VITAL"), "Élan vital");
	STR_EQ(py_lower("ÀB c"), "àb c");
	STR_EQ(py_replace("a  b  c", "  ", " "), "a b c");
	STR_EQ(py_replace("aaa", "aa", "b"), "ba");   /* non-overlapping, left to right */
	STR_EQ(py_remove_punctuation("The Beatles!? (1960s), rock-n'roll."), "The Beatles 1960s rocknroll");
}
END_TEST

START_TEST(test_py_regex)
{
	char err[256];
	py_regex *strict = py_regex_compile("#### (\\-?[0-9\\.\\,]+)", err, sizeof err);
	py_regex *flex = py_regex_compile("(-?[$0-9.,]{2,})|(-?[0-9]+)", err, sizeof err);
	ck_assert_ptr_nonnull(strict);
	ck_assert_ptr_nonnull(flex);
	STR_EQ(py_regex_filter(strict, "so 3 + 4 = 7.\n#### 7\n#### 8", 0, "[invalid]"), "7");
	STR_EQ(py_regex_filter(strict, "no answer here", 0, "[invalid]"), "[invalid]");
	/* flexible-extract: the last match; a tuple gives its first non-empty group */
	STR_EQ(py_regex_filter(flex, "He had $1,200 and 3 cats, then 45.", -1, "[invalid]"), "45.");
	STR_EQ(py_regex_filter(flex, "He had $1,200 and 3 cats", -1, "[invalid]"), "3");
	STR_EQ(py_regex_filter(flex, "nothing", -1, "[invalid]"), "[invalid]");
	py_regex *brackets = py_regex_compile("\\[.*?\\]", err, sizeof err);
	STR_EQ(py_regex_sub(brackets, "a [header] b [step] c", ""), "a  b  c");
	py_regex *ws = py_regex_compile("\\s+", err, sizeof err);
	ck_assert_int_eq(py_regex_split_count(ws, " a b\n c "), 5);
	py_regex_free(ws);
	ck_assert_ptr_null(py_regex_compile("(unclosed", err, sizeof err));
	ck_assert_msg(strstr(err, "(unclosed") != NULL, "%s", err);
	/* a NUL from the server travels as C0 80, which no pattern crosses and which goes back out as U+0000 */
	char *t = py_text_from_json("a\0b", 3);
	ck_assert(py_text_has_nul(t));
	json_t *j = py_text_json(t);
	ck_assert_uint_eq(json_string_length(j), 3);
	ck_assert_int_eq(json_string_value(j)[1], 0);
	json_decref(j);
	free(t);
	py_regex_free(strict);
	py_regex_free(flex);
	py_regex_free(brackets);
}
END_TEST

/* Reference values printed by /usr/bin/python3 (3.11):
 *   random.Random(0).getrandbits(32) x3; Random(1234).sample(range(5), 5) x3; Random(1234).sample(range(100), 7) x2;
 *   random.seed(0); shuffle([0,1,2,3]) x4; Random(42).shuffle(list(range(4))); Random(2**40+5).getrandbits(32) */
START_TEST(test_py_random)
{
	py_random r;
	py_random_seed(&r, 0);
	ck_assert_uint_eq(py_random_u32(&r), 3626764237u);
	ck_assert_uint_eq(py_random_u32(&r), 1654615998u);
	ck_assert_uint_eq(py_random_u32(&r), 3255389356u);
	py_random_seed(&r, 1234);
	const int32_t pool[3][5] = {{3, 0, 4, 2, 1}, {0, 4, 1, 3, 2}, {0, 4, 1, 2, 3}};
	for (int k = 0; k < 3; k++) {
		int32_t out[5];
		ck_assert_int_eq(py_random_sample(&r, 5, 5, out), 0);
		for (int i = 0; i < 5; i++)
			ck_assert_int_eq(out[i], pool[k][i]);
	}
	py_random_seed(&r, 1234);
	const int32_t set[2][7] = {{99, 56, 14, 0, 11, 74, 4}, {85, 88, 10, 12, 98, 45, 30}};
	for (int k = 0; k < 2; k++) {
		int32_t out[7];
		ck_assert_int_eq(py_random_sample(&r, 100, 7, out), 0);
		for (int i = 0; i < 7; i++)
			ck_assert_int_eq(out[i], set[k][i]);
	}
	py_random_seed(&r, 0);
	const int32_t sh[4][4] = {{2, 0, 1, 3}, {0, 1, 3, 2}, {0, 2, 1, 3}, {1, 0, 3, 2}};
	for (int k = 0; k < 4; k++) {
		int32_t p[4] = {0, 1, 2, 3};
		py_random_shuffle(&r, p, 4);
		for (int i = 0; i < 4; i++)
			ck_assert_int_eq(p[i], sh[k][i]);
	}
	py_random_seed(&r, 42);
	int32_t p[4] = {0, 1, 2, 3};
	py_random_shuffle(&r, p, 4);
	ck_assert(p[0] == 2 && p[1] == 1 && p[2] == 3 && p[3] == 0);
	py_random_seed(&r, (1ull << 40) + 5);
	ck_assert_uint_eq(py_random_u32(&r), 2166296868u);
	int32_t big[3];
	ck_assert_int_eq(py_random_sample(&r, 2, 3, big), -1);
}
END_TEST

START_TEST(test_subset)
{
	int64_t *a, *b, *c;
	eval_subset_spec s = {-1, 10, 7};
	int64_t na = eval_subset_select(&s, "mmlu", 100, &a);
	int64_t nb = eval_subset_select(&s, "mmlu", 100, &b);
	ck_assert_int_eq(na, 10);
	ck_assert_int_eq(nb, 10);
	for (int i = 0; i < 10; i++) {
		ck_assert_int_eq(a[i], b[i]);
		ck_assert(a[i] >= 0 && a[i] < 100);
		if (i)
			ck_assert(a[i] > a[i - 1]);   /* file order, no repeats */
	}
	/* pinned: the same arguments select these items on any machine */
	const int64_t pinned[10] = {5, 11, 19, 33, 37, 47, 51, 62, 71, 96};
	for (int i = 0; i < 10; i++)
		ck_assert_msg(a[i] == pinned[i], "item %d: %lld", i, (long long)a[i]);
	s.seed = 8;
	eval_subset_select(&s, "mmlu", 100, &c);
	ck_assert(memcmp(a, c, 10 * sizeof *a) != 0);
	free(c);
	s.seed = 7;
	eval_subset_select(&s, "gsm8k", 100, &c);   /* another task, another draw (the same seed as a) */
	ck_assert(memcmp(a, c, 10 * sizeof *a) != 0);
	free(a);
	free(b);
	free(c);
	eval_subset_spec lim = {3, -1, 0};
	ck_assert_int_eq(eval_subset_select(&lim, "x", 100, &a), 3);
	ck_assert(a[0] == 0 && a[1] == 1 && a[2] == 2);
	free(a);
	eval_subset_spec many = {-1, 500, 1};
	ck_assert_int_eq(eval_subset_select(&many, "x", 20, &a), 20);
	free(a);
}
END_TEST

START_TEST(test_ll_request)
{
	int32_t ctx[] = {1, 2, 3, 4, 5}, cont[] = {6, 7};
	int32_t out[8];
	int64_t n, ctxlen;
	eval_ll_request(ctx, 5, cont, 2, 100, out, &n, &ctxlen);
	ck_assert_int_eq(n, 7);
	ck_assert_int_eq(ctxlen, 5);
	eval_ll_request(ctx, 5, cont, 2, 4, out, &n, &ctxlen);   /* left truncation: (ctx + cont)[-4:] */
	ck_assert_int_eq(n, 4);
	ck_assert_int_eq(ctxlen, 2);
	ck_assert(out[0] == 4 && out[1] == 5 && out[2] == 6 && out[3] == 7);
	ck_assert_uint_eq(eval_pair_context_len("Answer: "), 7);   /* _encode_pair moves the space */
	ck_assert_uint_eq(eval_pair_context_len("Answer:"), 7);
}
END_TEST

START_TEST(test_ll_parse)
{
	json_t *lp = json_loads("{\"tokens\":[\"a\",\"b\",\"c\",\"d\"],\"token_logprobs\":[null,-1.5,-0.25,-2.0],"
	                        "\"top_logprobs\":[null,{\"x\":-0.5,\"b\":-1.5},{\"c\":-0.25},{\"d\":-2.0,\"e\":-3.0}]}",
	                        0, NULL);
	double ll;
	bool greedy;
	char err[256];
	ck_assert_int_eq(eval_ll_parse(lp, 2, 4, &ll, &greedy, err, sizeof err), 0);
	ck_assert(ll == -2.25);
	ck_assert(greedy);
	ck_assert_int_eq(eval_ll_parse(lp, 1, 4, &ll, &greedy, err, sizeof err), 0);
	ck_assert(ll == -3.75);
	ck_assert(!greedy);   /* b (-1.5) is not the top of its row (x, -0.5) */
	ck_assert_int_eq(eval_ll_parse(lp, 1, 5, &ll, &greedy, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "4 prompt log-probabilities for a prompt of 5") != NULL, "%s", err);
	ck_assert_int_eq(eval_ll_parse(lp, 0, 4, &ll, &greedy, err, sizeof err), -1);
	json_decref(lp);
	json_t *none = json_object();
	ck_assert_int_eq(eval_ll_parse(none, 1, 2, &ll, &greedy, err, sizeof err), -1);
	json_decref(none);
}
END_TEST

START_TEST(test_mc)
{
	/* acc_norm divides by Python's len (code points): "é" is 1, not 2 */
	char *choices[] = {"é", "ab", "abcdef"};
	double ll[] = {-1.0, -1.5, -2.4};
	eval_mc_score s;
	eval_score_mc(ll, choices, 3, 2, &s);
	ck_assert_int_eq(s.pred, 0);
	ck_assert_int_eq(s.pred_norm, 2);   /* -1, -0.75, -0.4 */
	ck_assert(s.acc == 0.0 && s.acc_norm == 1.0);
	double tie[] = {-1.0, -1.0, -3.0};
	eval_score_mc(tie, choices, 3, 1, &s);
	ck_assert_int_eq(s.pred, 0);   /* numpy's argmax: the first maximum */
}
END_TEST

START_TEST(test_generation_scoring)
{
	const eval_task *gsm = eval_task_find("gsm8k"), *tqa = eval_task_find("triviaqa"), *pro = eval_task_find("mmlu_pro");
	ck_assert_ptr_nonnull(gsm);
	const char *until[] = {"Question:", "</s>", NULL};
	STR_EQ(eval_cut_at_stops("42 apples\n\nQuestion: next</s>", until, NULL), "42 apples\n\n");
	STR_EQ(eval_cut_at_stops("a<|endoftext|>b", until, "<|endoftext|>"), "a");
	STR_EQ(eval_cut_at_stops("none", NULL, NULL), "none");
	json_t *target = json_string("First 1,000 - 250 = 750.\n#### 750");
	char *strict = eval_filter_apply(&gsm->filters[0], "So she has $750.\n#### 750");
	ck_assert_str_eq(strict, "750");
	ck_assert(eval_exact_match(&gsm->match, strict, target) == 1.0);
	free(strict);
	char *flex = eval_filter_apply(&gsm->filters[1], "She has $750. The end.");
	ck_assert_str_eq(flex, "$750.");
	ck_assert(eval_exact_match(&gsm->match, flex, target) == 1.0);   /* "$" and the final "." are ignored */
	free(flex);
	char *none = eval_filter_apply(&gsm->filters[0], "seven hundred and fifty");
	ck_assert_str_eq(none, "[invalid]");
	ck_assert(eval_exact_match(&gsm->match, none, target) == 0.0);
	free(none);
	json_decref(target);
	json_t *aliases = json_pack("[s,s]", "William Shakespeare", "The Bard");
	char *ws = eval_filter_apply(&tqa->filters[0], "  the bard");
	ck_assert(eval_exact_match(&tqa->match, ws, aliases) == 1.0);
	free(ws);
	/* remove_whitespace is resp.strip() (extraction.py), not lstrip: trailing whitespace goes too */
	ws = eval_filter_apply(&tqa->filters[0], " \tthe bard \n");
	ck_assert_str_eq(ws, "the bard");
	ck_assert(eval_exact_match(&tqa->match, ws, aliases) == 1.0);
	free(ws);
	ck_assert(eval_exact_match(&tqa->match, "Shakespeare", aliases) == 0.0);
	ck_assert(eval_exact_match(&tqa->match, "william shakespeare!", aliases) == 1.0);
	json_decref(aliases);
	char *letter = eval_filter_apply(&pro->filters[0], "Thinking... the answer is (C). Or the answer is D");
	ck_assert_str_eq(letter, "C");
	json_t *c = json_string("C");
	ck_assert(eval_exact_match(&pro->match, letter, c) == 1.0);
	json_decref(c);
	free(letter);
}
END_TEST

/* Every token predicted exactly once, each window at most max_seq_len + 1 tokens, context directly before it. */
START_TEST(test_rolling_windows)
{
	eval_window *w;
	int64_t n = eval_rolling_windows(6, 4, &w);
	ck_assert_int_eq(n, 2);
	ck_assert(w[0].prefix && w[0].pred_from == 0 && w[0].pred_to == 4);
	/* the harness: input tokens[1:5], prediction tokens[4:6]; disjoint context tokens[1:4] */
	ck_assert(!w[1].prefix && w[1].ctx_from == 1 && w[1].ctx_to == 4 && w[1].pred_from == 4 && w[1].pred_to == 6);
	free(w);
	for (int64_t len = 1; len < 40; len++)
		for (int64_t m = 1; m < 9; m++) {
			n = eval_rolling_windows(len, m, &w);
			int64_t next = 0;
			for (int64_t i = 0; i < n; i++) {
				ck_assert_int_eq(w[i].pred_from, next);
				next = w[i].pred_to;
				int64_t ctx = w[i].prefix ? 1 : w[i].ctx_to - w[i].ctx_from;
				ck_assert(ctx >= 1 && ctx + (w[i].pred_to - w[i].pred_from) <= m + 1);
				ck_assert(w[i].prefix || w[i].ctx_to == w[i].pred_from);
			}
			ck_assert_int_eq(next, len);
			free(w);
		}
	ck_assert_int_eq(eval_rolling_windows(0, 4, &w), 0);
	ck_assert_int_eq(eval_count_words("two  words"), 2);
	ck_assert_int_eq(eval_count_words(" lead"), 2);   /* re.split keeps the empty first piece */
}
END_TEST

/* TemplateAPI's generation prompt, x[-n:] with n = (max_length - 1) - max_gen_toks, Python's slice for every sign */
START_TEST(test_gen_prompt_start)
{
	ck_assert_int_eq(eval_gen_prompt_start(10, 2048, 256), 0);        /* fits: whole */
	ck_assert_int_eq(eval_gen_prompt_start(3000, 2048, 256), 1209);   /* the last 1791 */
	ck_assert_int_eq(eval_gen_prompt_start(10, 257, 256), 0);         /* n = 0: x[-0:] is all of x */
	ck_assert_int_eq(eval_gen_prompt_start(10, 256, 256), 1);         /* n = -1: x[1:] */
	ck_assert_int_eq(eval_gen_prompt_start(10, 100, 256), 10);        /* n = -157: x[157:], empty */
}
END_TEST

START_TEST(test_stats)
{
	double x[] = {1, 0, 1, 1};
	ck_assert(fabs(eval_mean(x, 4) - 0.75) < 1e-15);
	ck_assert(fabs(eval_stderr(x, 4) - 0.25) < 1e-15);   /* sample sd 0.5 over sqrt(4) */
	ck_assert(isnan(eval_stderr(x, 1)));
	ck_assert(eval_mcnemar_p(0, 0) == 1.0);
	ck_assert(fabs(eval_mcnemar_p(5, 0) - 0.0625) < 1e-12);
	ck_assert(fabs(eval_mcnemar_p(0, 5) - 0.0625) < 1e-12);
	ck_assert(fabs(eval_mcnemar_p(3, 3) - 1.0) < 1e-12);
	ck_assert(fabs(eval_mcnemar_p(1, 9) - 0.021484375) < 1e-12);   /* 2 * 11 / 1024 */
}
END_TEST

static Suite *score_suite(void)
{
	Suite *s = suite_create("eval_score");
	TCase *tc = tcase_create("score");
	tcase_add_test(tc, test_py_strings);
	tcase_add_test(tc, test_py_regex);
	tcase_add_test(tc, test_py_random);
	tcase_add_test(tc, test_subset);
	tcase_add_test(tc, test_ll_request);
	tcase_add_test(tc, test_ll_parse);
	tcase_add_test(tc, test_mc);
	tcase_add_test(tc, test_generation_scoring);
	tcase_add_test(tc, test_rolling_windows);
	tcase_add_test(tc, test_gen_prompt_start);
	tcase_add_test(tc, test_stats);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(score_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
