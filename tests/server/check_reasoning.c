/* tests/server/check_reasoning.c — Check suite for server/reasoning: the incremental split fed every text in one piece, in
 * two pieces cut at every byte, in three pieces cut at every pair of bytes, and byte by byte, against a whole-text
 * reference written another way (memmem over the whole answer, as vLLM's qwen3 parser partitions it); the start a
 * prompt gives; the reasoning-token count. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/reasoning.h"

/* The whole-text rule: OFF is all content; DETECT is a block only when the text begins with <think>; in a block the
 * first </think> ends it (a later <think> is text), and a block without </think> is reasoning to the end. */
static void reference(const char *text, size_t len, reasoning_start start, char *r, size_t *rn, char *c, size_t *cn)
{
	*rn = *cn = 0;
	const char *rest = text;
	size_t rest_len = len;
	if (start == REASONING_START_OFF ||
	    (start == REASONING_START_DETECT && (len < 7 || memcmp(text, "<think>", 7) != 0))) {
		memcpy(c, text, len);
		*cn = len;
		return;
	}
	if (start == REASONING_START_DETECT) {
		rest += 7;
		rest_len -= 7;
	}
	const char *end = memmem(rest, rest_len, "</think>", 8);
	if (!end) {
		memcpy(r, rest, rest_len);
		*rn = rest_len;
		return;
	}
	*rn = (size_t)(end - rest);
	memcpy(r, rest, *rn);
	*cn = rest_len - *rn - 8;
	memcpy(c, end + 8, *cn);
}

typedef struct split_result {
	char r[512], c[512];
	size_t rn, cn;
	reasoning_split s;
} split_result;

/* Feeds text cut at the offsets cuts[0 … n_cuts) (ascending), each piece into its own out as the stream would, and
 * joins the pieces. Checks that no piece of one feed puts content before reasoning: within a feed the reasoning
 * comes first, so a joined stream is the two fields in order. */
static void feed_cut(const char *text, size_t len, reasoning_start start, const size_t *cuts, int n_cuts,
                     split_result *res)
{
	memset(res, 0, sizeof *res);
	reasoning_init(&res->s, start);
	size_t at = 0;
	bool content_seen = false;
	for (int k = 0; k <= n_cuts; k++) {
		size_t to = k < n_cuts ? cuts[k] : len;
		char rb[512 + REASONING_MAX_HELD], cb[512 + REASONING_MAX_HELD];
		reasoning_out o = { rb, cb, 0, 0 };
		reasoning_feed(&res->s, text + at, to - at, &o);
		if (k == n_cuts)
			reasoning_finish(&res->s, &o);
		ck_assert_uint_le(o.reasoning_len + o.content_len, to - at + REASONING_MAX_HELD);
		ck_assert_msg(!(content_seen && o.reasoning_len > 0), "reasoning after content, text '%s'", text);
		content_seen |= o.content_len > 0;
		memcpy(res->r + res->rn, rb, o.reasoning_len);
		res->rn += o.reasoning_len;
		memcpy(res->c + res->cn, cb, o.content_len);
		res->cn += o.content_len;
		at = to;
	}
}

static void expect_same(const char *text, reasoning_start start, const split_result *got, const char *how)
{
	char r[512], c[512];
	size_t rn, cn;
	reference(text, strlen(text), start, r, &rn, c, &cn);
	ck_assert_msg(got->rn == rn && !memcmp(got->r, r, rn), "'%s' (start %d, %s): reasoning '%.*s', want '%.*s'", text,
	              start, how, (int)got->rn, got->r, (int)rn, r);
	ck_assert_msg(got->cn == cn && !memcmp(got->c, c, cn), "'%s' (start %d, %s): content '%.*s', want '%.*s'", text,
	              start, how, (int)got->cn, got->c, (int)cn, c);
}

/* Every way of cutting text into one, two or three pieces, and byte by byte, gives the reference's split. */
static void check_all_cuts(const char *text, reasoning_start start)
{
	size_t len = strlen(text);
	split_result res;
	feed_cut(text, len, start, NULL, 0, &res);
	expect_same(text, start, &res, "whole");
	for (size_t a = 0; a <= len; a++) {
		feed_cut(text, len, start, (size_t[]){ a }, 1, &res);
		expect_same(text, start, &res, "two pieces");
		for (size_t b = a; b <= len; b++) {
			feed_cut(text, len, start, (size_t[]){ a, b }, 2, &res);
			expect_same(text, start, &res, "three pieces");
		}
	}
	size_t cuts[512];
	for (size_t i = 0; i < len; i++)
		cuts[i] = i + 1;
	feed_cut(text, len, start, cuts, (int)len, &res);
	expect_same(text, start, &res, "byte by byte");
}

static const char *const texts[] = {
	"<think>\nLet me see.\n</think>\n\nThe answer is 42.",   /* Qwen3's shape: the blank lines stay, as in vLLM */
	"<think>a</think>b",
	"<think></think>",
	"<think>",
	"<thin",                                                /* a cut tag at max_tokens: content */
	"<think>reasoning that never ends",                     /* missing </think> (finish_reason length) */
	"<think>half a close </thi",
	"no block at all",
	"",
	"Before <think>x</think> after",                        /* text before <think>: no block */
	" <think>x</think>y",                                   /* even a space before it */
	"The answer.<think>mid</think>more",                    /* <think> mid-answer: content */
	"<think>a<think>b</think>c</think>d",                   /* nested-looking: the first </think> ends it */
	"<think>x</think>y<think>z</think>",                    /* a second block after the content is content */
	"<think><<</</t</think></think>",                       /* near-misses of the close tag */
	"<<think>x</think>",                                    /* a near-miss of the open tag */
	"<thinkx</think>y",
	"</think>leading close",
	"<think>Grüße 世界 🎉</think>ünïcödé",
};

START_TEST(test_every_cut)
{
	const reasoning_start starts[] = { REASONING_START_OFF, REASONING_START_DETECT, REASONING_START_OPEN };
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
		for (size_t k = 0; k < 3; k++)
			check_all_cuts(texts[i], starts[k]);
}
END_TEST

/* The decisions the reference encodes, spelled out, so that a wrong reference cannot hide a wrong split. */
START_TEST(test_decisions)
{
	split_result res;
	const char *t = "<think>\nhm\n</think>\n\nHi";
	feed_cut(t, strlen(t), REASONING_START_DETECT, NULL, 0, &res);
	ck_assert_uint_eq(res.rn, 4);
	ck_assert(!memcmp(res.r, "\nhm\n", 4));
	ck_assert_uint_eq(res.cn, 4);
	ck_assert(!memcmp(res.c, "\n\nHi", 4));   /* not trimmed: vLLM's qwen3 parser keeps what follows </think> */
	ck_assert(res.s.block);
	ck_assert_uint_eq(res.s.content_from, strlen("<think>\nhm\n</think>"));
	t = "x<think>y</think>z";
	feed_cut(t, strlen(t), REASONING_START_DETECT, NULL, 0, &res);
	ck_assert_uint_eq(res.rn, 0);
	ck_assert_uint_eq(res.cn, strlen(t));
	ck_assert(!res.s.block);
	t = "still thinking</think>done";
	feed_cut(t, strlen(t), REASONING_START_OPEN, NULL, 0, &res);
	ck_assert_uint_eq(res.rn, strlen("still thinking"));
	ck_assert_uint_eq(res.cn, 4);
	t = "<think>open";
	feed_cut(t, strlen(t), REASONING_START_DETECT, NULL, 0, &res);
	ck_assert_uint_eq(res.rn, 4);
	ck_assert_uint_eq(res.cn, 0);
	ck_assert_uint_eq(res.s.content_from, SIZE_MAX);
}
END_TEST

/* A held prefix is not let out until decided: "<thi" alone gives nothing, the next byte decides. */
START_TEST(test_holds_half_tags)
{
	reasoning_split s;
	char rb[64], cb[64];
	reasoning_out o = { rb, cb, 0, 0 };
	reasoning_init(&s, REASONING_START_DETECT);
	reasoning_feed(&s, "<thi", 4, &o);
	ck_assert_uint_eq(o.reasoning_len + o.content_len, 0);
	reasoning_feed(&s, "nk>ab</th", 9, &o);
	ck_assert_uint_eq(o.content_len, 0);
	ck_assert_uint_eq(o.reasoning_len, 2);   /* "ab"; "</th" held */
	o.reasoning_len = o.content_len = 0;
	reasoning_feed(&s, "ing", 3, &o);
	ck_assert_uint_eq(o.reasoning_len, 7);   /* "</thing" was not the tag: it is reasoning */
	ck_assert(!memcmp(rb, "</thing", 7));
	o.reasoning_len = 0;
	reasoning_feed(&s, "<", 1, &o);
	ck_assert_uint_eq(o.reasoning_len + o.content_len, 0);
	reasoning_finish(&s, &o);
	ck_assert_uint_eq(o.reasoning_len, 1);   /* the end: a cut close tag is reasoning */
	reasoning_init(&s, REASONING_START_DETECT);
	o.reasoning_len = o.content_len = 0;
	reasoning_feed(&s, "<thx", 4, &o);
	ck_assert_uint_eq(o.content_len, 4);
}
END_TEST

START_TEST(test_prompt_start)
{
	const struct {
		const char *prompt;
		reasoning_start want;
	} cases[] = {
		{ "<|im_start|>assistant\n", REASONING_START_DETECT },
		{ "<|im_start|>assistant\n<think>\n", REASONING_START_OPEN },             /* Qwen3-Thinking's template */
		{ "<|im_start|>assistant\n<think>\n\n</think>\n\n", REASONING_START_DETECT },   /* enable_thinking false */
		{ "<think>a</think>b<|im_start|>assistant\n<think>partial", REASONING_START_OPEN },   /* continued */
		{ "<think>a</think>b<|im_start|>assistant\n", REASONING_START_DETECT },
		{ "<think>", REASONING_START_OPEN },
		{ "<think", REASONING_START_DETECT },
		{ "", REASONING_START_DETECT },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		ck_assert_msg(reasoning_start_of_prompt(cases[i].prompt, strlen(cases[i].prompt)) == cases[i].want,
		              "prompt %zu", i);
}
END_TEST

/* Tokens are reasoning when their text begins before the content; one that straddles </think> is reasoning; the
 * tokens after the text (stop string, EOS) are reasoning only when the block never closed. */
START_TEST(test_token_count)
{
	/* tokens: "<think>" "ab" "c</th" "ink>\n" "Hi" ; text offsets 0 7 9 14 19 */
	const char *t = "<think>abc</think>\nHi";
	const size_t off[] = { 0, 7, 9, 14, 19 };
	split_result res;
	feed_cut(t, strlen(t), REASONING_START_DETECT, off + 1, 4, &res);
	ck_assert_int_eq(reasoning_count_tokens(&res.s, off, 5, 1), 4);
	/* the same text with no block (OFF): none */
	feed_cut(t, strlen(t), REASONING_START_OFF, off + 1, 4, &res);
	ck_assert_int_eq(reasoning_count_tokens(&res.s, off, 5, 1), 0);
	/* a token that ends exactly at </think>'s end is reasoning, the next one content */
	const char *u = "<think>x</think>y";
	const size_t uoff[] = { 0, 7, 8, 16 };
	feed_cut(u, strlen(u), REASONING_START_DETECT, uoff + 1, 3, &res);
	ck_assert_int_eq(reasoning_count_tokens(&res.s, uoff, 4, 2), 3);
	/* never closed (max_tokens, or a stop string inside the block): every token, the stop ones too */
	const char *v = "<think>abc";
	const size_t voff[] = { 0, 7, 8 };
	feed_cut(v, strlen(v), REASONING_START_DETECT, voff + 1, 2, &res);
	ck_assert_int_eq(reasoning_count_tokens(&res.s, voff, 3, 2), 5);
	/* prompt-opened: the first tokens are reasoning without any tag of their own */
	const char *w = "abc</think>d";
	const size_t woff[] = { 0, 3, 11 };
	feed_cut(w, strlen(w), REASONING_START_OPEN, woff + 1, 2, &res);
	ck_assert_int_eq(reasoning_count_tokens(&res.s, woff, 3, 1), 2);
	/* empty-text tokens (a special token) at the content's start are content */
	const size_t zoff[] = { 0, 7, 16, 16 };
	feed_cut(u, strlen(u), REASONING_START_DETECT, NULL, 0, &res);
	ck_assert_int_eq(reasoning_count_tokens(&res.s, zoff, 4, 0), 2);
}
END_TEST

static Suite *reasoning_suite(void)
{
	Suite *s = suite_create("reasoning");
	TCase *tc = tcase_create("reasoning");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_every_cut);
	tcase_add_test(tc, test_decisions);
	tcase_add_test(tc, test_holds_half_tags);
	tcase_add_test(tc, test_prompt_start);
	tcase_add_test(tc, test_token_count);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(reasoning_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
