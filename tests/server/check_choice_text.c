/* tests/server/check_choice_text.c — Check suite for the text of a choice, as the engine thread makes it (engine/gen_text)
 * and the server reads it (server/choice_text): the text grows by whole UTF-8 characters, stop strings are found
 * across token boundaries and never sent, held-back text is released once it can no longer start a stop string,
 * marker special tokens are placed, and a view taken before the buffer grew stays valid. Uses the test model's
 * tokenizer. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer.h"
#include "engine/gen_text.h"
#include "server/choice_text.h"
#include "tests/test_env.h"

static tokenizer *tok;

static void setup(void)
{
	char dir[1024], err[256];
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", testdata());
	tok = tokenizer_load(dir, err, sizeof err);
	ck_assert_msg(tok != NULL, "%s", err);
}

static void teardown(void)
{
	tokenizer_free(tok);
}

/* Token ids of text (no special tokens added). */
static int32_t encode(const char *text, int32_t *ids, int32_t cap)
{
	char err[256];
	int64_t n = tokenizer_encode(tok, text, strlen(text), false, ids, cap, err, sizeof err);
	ck_assert_msg(n > 0 && n <= cap, "%s", err);
	return (int32_t)n;
}

/* One choice's pipeline: the engine thread's text and the server's reading of it, synced after every token. */
typedef struct pipe_text {
	gen_text g;
	choice_text c;
	int32_t ids[1024];
} pipe_text;

static int pipe_init(pipe_text *p, const char *const *stop, const size_t *stop_len, int32_t n_stop)
{
	memset(p, 0, sizeof *p);
	if (gen_text_init(&p->g, tok, stop, stop_len, n_stop, 1024, stop_text_room_max(tok)) != 0)
		return -1;
	choice_text_init(&p->c, tok);
	return 0;
}

static void pipe_sync(pipe_text *p)
{
	gen_text_view v;
	gen_text_view_get(&p->g, &v);
	ck_assert_int_eq(choice_text_sync(&p->c, p->ids, &v), 0);
}

static int pipe_push(pipe_text *p, int32_t id)
{
	if (p->g.n_tokens < 1024 && !gen_text_stopped(&p->g))
		p->ids[p->g.n_tokens] = id;
	int rc = gen_text_push(&p->g, id);
	pipe_sync(p);
	return rc;
}

static int pipe_finish(pipe_text *p)
{
	int rc = gen_text_finish(&p->g);
	pipe_sync(p);
	return rc;
}

static void pipe_free(pipe_text *p)
{
	choice_text_free(&p->c);
	gen_text_free(&p->g);
}

/* Pushes the tokens of each piece in turn. */
static void push_text(pipe_text *p, const char *text)
{
	int32_t ids[256];
	int32_t n = encode(text, ids, 256);
	for (int32_t i = 0; i < n; i++)
		ck_assert_int_eq(pipe_push(p, ids[i]), 0);
}

START_TEST(test_no_stop)
{
	pipe_text c;
	ck_assert_int_eq(pipe_init(&c, NULL, NULL, 0), 0);
	push_text(&c, "Hello, world! ");
	ck_assert_uint_eq(c.c.v.safe, c.c.v.len);
	push_text(&c, "Bye.");
	ck_assert_int_eq(pipe_finish(&c), 0);
	ck_assert_uint_eq(c.c.v.len, strlen("Hello, world! Bye."));
	ck_assert(!memcmp(c.c.v.text, "Hello, world! Bye.", c.c.v.len));
	ck_assert_uint_eq(c.c.v.safe, c.c.v.len);
	ck_assert(!c.c.v.stopped);
	ck_assert_int_eq(c.c.n_kept, c.c.v.n_tokens);
	for (int32_t i = 1; i < c.c.v.n_tokens; i++)
		ck_assert(c.c.v.tok_off[i] >= c.c.v.tok_off[i - 1]);
	pipe_free(&c);
}
END_TEST

/* "ab" + "c" + "d": with stop "bcx", "bc" is held until "d" shows it is not a stop. */
START_TEST(test_hold_back)
{
	const char *stop[] = { "bcx" };
	size_t len[] = { 3 };
	pipe_text c;
	ck_assert_int_eq(pipe_init(&c, stop, len, 1), 0);
	push_text(&c, "a");
	ck_assert_uint_eq(c.c.v.safe, 1);
	push_text(&c, "b");
	ck_assert_uint_eq(c.c.v.len, 2);
	ck_assert_uint_eq(c.c.v.safe, 1);   /* "b" may start "bcx" */
	push_text(&c, "c");
	ck_assert_uint_eq(c.c.v.safe, 1);   /* "bc" too */
	push_text(&c, "d");
	ck_assert_uint_eq(c.c.v.safe, 4);   /* "bcd" is not */
	ck_assert(!c.c.v.stopped);
	/* the end releases a held tail */
	push_text(&c, "b");
	ck_assert_uint_eq(c.c.v.safe, 4);
	ck_assert_int_eq(pipe_finish(&c), 0);
	ck_assert_uint_eq(c.c.v.safe, 5);
	pipe_free(&c);
}
END_TEST

/* A stop string split over several tokens: the text ends before it; nothing of it was ever safe. */
START_TEST(test_stop_across_tokens)
{
	const char *stop[] = { "never", "lo wo" };
	size_t len[] = { 5, 5 };
	pipe_text c;
	ck_assert_int_eq(pipe_init(&c, stop, len, 2), 0);
	const char *pieces[] = { "Hel", "lo", " w", "orld", " and more" };
	size_t max_safe = 0;
	for (int i = 0; i < 5 && !c.c.v.stopped; i++) {
		push_text(&c, pieces[i]);
		if (!c.c.v.stopped) {
			ck_assert(c.c.v.safe <= 3);   /* "Hel" is all that can be safe before the stop is decided */
			max_safe = c.c.v.safe;
		}
	}
	ck_assert(c.c.v.stopped);
	ck_assert_uint_eq(c.c.v.len, 3);
	ck_assert(!memcmp(c.c.v.text, "Hel", 3));
	ck_assert_uint_eq(c.c.v.safe, 3);
	ck_assert(max_safe <= 3);
	/* tokens whose text starts before the cut are kept */
	ck_assert_int_ge(c.c.n_kept, 1);
	ck_assert_int_le(c.c.n_kept, c.c.v.n_tokens);
	for (int32_t i = 0; i < c.c.n_kept; i++)
		ck_assert(c.c.v.tok_off[i] < 3);
	/* later tokens change nothing */
	int32_t n = c.c.v.n_tokens;
	push_text(&c, "x");
	ck_assert_int_eq(c.c.v.n_tokens, n);
	ck_assert_int_eq(pipe_finish(&c), 0);
	ck_assert_uint_eq(c.c.v.len, 3);
	pipe_free(&c);
}
END_TEST

/* The earliest of several stop strings wins, even when a longer one matches too. */
START_TEST(test_earliest_stop)
{
	const char *stop[] = { "world", "o w" };
	size_t len[] = { 5, 3 };
	pipe_text c;
	ck_assert_int_eq(pipe_init(&c, stop, len, 2), 0);
	push_text(&c, "Hello world");
	ck_assert(c.c.v.stopped);
	ck_assert_uint_eq(c.c.v.len, 4);
	ck_assert(!memcmp(c.c.v.text, "Hell", 4));
	pipe_free(&c);
}
END_TEST

/* A character split over byte tokens is held whole; an incomplete one at the end becomes U+FFFD. */
START_TEST(test_utf8)
{
	pipe_text c;
	ck_assert_int_eq(pipe_init(&c, NULL, NULL, 0), 0);
	int32_t ids[16];
	int32_t n = encode("\xe2\x82\xac", ids, 16);   /* € */
	for (int32_t i = 0; i < n; i++) {
		ck_assert_int_eq(pipe_push(&c, ids[i]), 0);
		ck_assert(c.c.v.len == 0 || c.c.v.len == 3);   /* nothing of a partial character */
	}
	ck_assert_uint_eq(c.c.v.len, 3);
	ck_assert(!memcmp(c.c.v.text, "\xe2\x82\xac", 3));
	if (n > 1) {   /* the first byte of it alone, then the end */
		ck_assert_int_eq(pipe_push(&c, ids[0]), 0);
		ck_assert_uint_eq(c.c.v.len, 3);
		ck_assert_int_eq(pipe_finish(&c), 0);
		ck_assert_uint_eq(c.c.v.len, 6);
		ck_assert(!memcmp(c.c.v.text + 3, "\xef\xbf\xbd", 3));
	}
	pipe_free(&c);
}
END_TEST

/* Special tokens add no text but count as tokens; ids beyond the tokenizer add nothing either. */
START_TEST(test_special_tokens)
{
	pipe_text c;
	ck_assert_int_eq(pipe_init(&c, NULL, NULL, 0), 0);
	push_text(&c, "hi");
	size_t len = c.c.v.len;
	ck_assert_int_eq(pipe_push(&c, tokenizer_eos(tok)), 0);
	ck_assert_int_eq(pipe_push(&c, tokenizer_vocab_size(tok) + 3), 0);
	ck_assert_uint_eq(c.c.v.len, len);
	ck_assert_int_eq(c.c.v.n_tokens, c.c.n_kept);
	ck_assert_uint_eq(gen_text_token_end(&c.c.v, c.c.v.n_tokens - 1), len);
	pipe_free(&c);
}
END_TEST

/* Markers: a special token whose text is in the allow-list is recorded at the offset of the text that follows it, the
 * text itself still without it; other special tokens are not; a stop drops the markers at or after where it begins. */
START_TEST(test_markers)
{
	static const char *const marks[] = { "[none]", "<|im_start|>" };
	const int32_t im_start = 2049, im_end = 2050;   /* the test tokenizer's specials (tests/data/qwen3-small-a) */
	ck_assert(tokenizer_is_special(tok, im_start) && tokenizer_is_special(tok, im_end));
	const char *stop[] = { "Stop" };
	size_t stop_len[] = { 4 };
	pipe_text c;
	ck_assert_int_eq(pipe_init(&c, stop, stop_len, 1), 0);
	choice_text_markers(&c.c, marks, 2);
	ck_assert_int_eq(pipe_push(&c, im_start), 0);
	push_text(&c, "ab");
	ck_assert_int_eq(pipe_push(&c, im_end), 0);
	ck_assert_int_eq(pipe_push(&c, im_start), 0);
	push_text(&c, "cd");
	ck_assert_int_eq(pipe_push(&c, im_start), 0);
	ck_assert_uint_eq(c.c.v.len, 4);
	ck_assert(!memcmp(c.c.v.text, "abcd", 4));
	ck_assert_int_eq(c.c.n_markers, 3);
	ck_assert_uint_eq(c.c.markers[0].at, 0);
	ck_assert_uint_eq(c.c.markers[1].at, 2);
	ck_assert_uint_eq(c.c.markers[2].at, 4);
	ck_assert_int_eq(c.c.markers[0].which, 1);
	/* the stop begins at 4: the marker there goes with it */
	push_text(&c, "Stop");
	ck_assert(c.c.v.stopped);
	ck_assert_uint_eq(c.c.v.len, 4);
	ck_assert_int_eq(c.c.n_markers, 2);
	pipe_free(&c);
	/* without an allow-list nothing is recorded */
	ck_assert_int_eq(pipe_init(&c, NULL, NULL, 0), 0);
	ck_assert_int_eq(pipe_push(&c, im_start), 0);
	ck_assert_int_eq(c.c.n_markers, 0);
	pipe_free(&c);
}
END_TEST

/* The buffer grows while readers hold earlier views: every view stays valid and is a prefix of the final text, and
 * the text is the tokenizer's decoding of the tokens. */
START_TEST(test_growth_keeps_views)
{
	pipe_text c;
	ck_assert_int_eq(pipe_init(&c, NULL, NULL, 0), 0);
	const size_t cap0 = c.g.cap;   /* 8 bytes a token: runs of spaces (one token of up to 32 here) go past it */
	static char want[16384] = "";
	for (int i = 0; i < 150; i++)
		strcat(want, i % 10 ? "ab                                                                " :
		                      "\xe2\x82\xac                                                                ");
	static int32_t ids[1024];
	int32_t n = encode(want, ids, 1024);
	static gen_text_view seen[1024];
	for (int32_t i = 0; i < n; i++) {
		ck_assert_int_eq(pipe_push(&c, ids[i]), 0);
		gen_text_view_get(&c.g, &seen[i]);
	}
	ck_assert_int_eq(pipe_finish(&c), 0);
	ck_assert_msg(c.g.cap > cap0, "the buffer did not grow (%zu bytes)", c.g.cap);   /* it grew */
	ck_assert_uint_eq(c.c.v.len, strlen(want));
	ck_assert(!memcmp(c.c.v.text, want, c.c.v.len));
	for (int32_t i = 0; i < n; i++)
		ck_assert_msg(!memcmp(seen[i].text, want, seen[i].len), "the view after token %d changed", i);
	pipe_free(&c);
}
END_TEST

/* An incomplete last character becomes U+FFFD at the finish, and that may complete a stop string. */
START_TEST(test_stop_in_finish)
{
	int32_t ids[16];
	int32_t n = encode("\xe2\x82\xac", ids, 16);
	if (n < 2)
		return;   /* the euro sign is one token here: nothing splits */
	const char *stop[] = { "x\xef\xbf\xbd" };
	size_t len[] = { 4 };
	pipe_text c;
	ck_assert_int_eq(pipe_init(&c, stop, len, 1), 0);
	push_text(&c, "ax");
	ck_assert_int_eq(pipe_push(&c, ids[0]), 0);
	ck_assert(!c.c.v.stopped);
	ck_assert_uint_eq(c.c.v.safe, 1);   /* "x" may begin it */
	ck_assert_int_eq(pipe_finish(&c), 0);
	ck_assert(c.c.v.stopped);
	ck_assert_int_eq(c.c.v.stop_index, 0);
	ck_assert_uint_eq(c.c.v.len, 1);
	ck_assert(c.c.v.finished);
	pipe_free(&c);
}
END_TEST

/* choice_text_decode: the text of ids with padding ids (the model's rows beyond the tokenizer) in them equals the text
 * without them, also where one falls inside a character's bytes; a negative id is refused. */
START_TEST(test_decode_padding)
{
	int32_t ids[16], with[32];
	int32_t n = encode("ab \xe2\x82\xac!", ids, 16);
	const int32_t pad = tokenizer_vocab_size(tok);
	int32_t m = 0;
	for (int32_t i = 0; i < n; i++) {
		with[m++] = pad + i % 3;
		with[m++] = ids[i];
	}
	with[m++] = pad;
	char *a, *b;
	size_t al, bl;
	ck_assert_int_eq(choice_text_decode(tok, ids, n, &a, &al), 0);
	ck_assert_int_eq(choice_text_decode(tok, with, m, &b, &bl), 0);
	ck_assert_str_eq(a, "ab \xe2\x82\xac!");
	ck_assert_uint_eq(al, bl);
	ck_assert_str_eq(a, b);
	free(a);
	free(b);
	ck_assert_int_eq(choice_text_decode(tok, with, 1, &a, &al), 0);   /* padding alone: empty */
	ck_assert_str_eq(a, "");
	free(a);
	with[1] = -1;
	ck_assert_int_eq(choice_text_decode(tok, with, 2, &a, &al), -2);
	ck_assert_ptr_null(a);
}
END_TEST

static Suite *choice_text_suite(void)
{
	Suite *s = suite_create("choice_text");
	TCase *tc = tcase_create("choice_text");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_no_stop);
	tcase_add_test(tc, test_hold_back);
	tcase_add_test(tc, test_stop_across_tokens);
	tcase_add_test(tc, test_earliest_stop);
	tcase_add_test(tc, test_utf8);
	tcase_add_test(tc, test_special_tokens);
	tcase_add_test(tc, test_markers);
	tcase_add_test(tc, test_decode_padding);
	tcase_add_test(tc, test_growth_keeps_views);
	tcase_add_test(tc, test_stop_in_finish);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(choice_text_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
