/* tests/engine/check_stop_text.c — Check suite for engine/stop_text: the stop-string rule that the engine thread and the
 * server share, against a naive reference (the whole text decoded token by token and searched whole after each) over
 * seeded random token runs — byte tokens that split UTF-8 characters, special tokens, ids beyond the tokenizer, stop
 * strings that span many tokens — also under min_tokens — plus the end's U+FFFD, the room a token needs and invalid
 * stop strings. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/stop_text.h"
#include "models/tokenizer.h"
#include "tests/test_rng.h"
#include "tests/test_env.h"

static tokenizer *tok;
static int32_t byte_id[256];   /* a token whose bytes are that one byte, or -1 */

static void setup(void)
{
	char dir[1024], err[256];
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", testdata());
	tok = tokenizer_load(dir, err, sizeof err);
	ck_assert_msg(tok != NULL, "%s", err);
	for (int32_t b = 0; b < 256; b++)
		byte_id[b] = -1;
	for (int32_t id = 0; id < tokenizer_vocab_size(tok); id++) {
		unsigned char one[4];
		if (!tokenizer_is_special(tok, id) && tokenizer_token_bytes(tok, id, (char *)one, sizeof one) == 1 &&
		    byte_id[one[0]] < 0)
			byte_id[one[0]] = id;
	}
}

static void teardown(void)
{
	tokenizer_free(tok);
}

static int32_t encode(const char *text, int32_t *ids, int32_t cap)
{
	char err[256];
	int64_t n = tokenizer_encode(tok, text, strlen(text), false, ids, cap, err, sizeof err);
	ck_assert_msg(n > 0 && n <= cap, "%s", err);
	return (int32_t)n;
}

/* ---- the naive reference ---- */

typedef struct naive {
	tokenizer_stream ts;
	char text[1 << 16];
	size_t len;
} naive;

/* Decodes one more token into the whole text. */
static void naive_push(naive *nv, int32_t id)
{
	if (tokenizer_token_bytes(tok, id, NULL, 0) < 0)
		return;
	int64_t n = tokenizer_stream_push(&nv->ts, id, nv->text + nv->len, (int64_t)(sizeof nv->text - nv->len));
	ck_assert_int_ge(n, 0);
	nv->len += (size_t)n;
}

/* The earliest occurrence of any stop string in the whole text that ends past its first `after` bytes (lower index
 * first on a tie); -1: none. */
static int32_t naive_find(const naive *nv, const char *const *stop, const size_t *len, int32_t n_stop, size_t after,
                          size_t *at)
{
	int32_t which = -1;
	for (int32_t i = 0; i < n_stop; i++) {
		size_t from = after + 1 > len[i] ? after + 1 - len[i] : 0;   /* a start from here ends past `after` */
		const char *hit = from <= nv->len ? memmem(nv->text + from, nv->len - from, stop[i], len[i]) : NULL;
		if (hit && (which < 0 || (size_t)(hit - nv->text) < *at)) {
			which = i;
			*at = (size_t)(hit - nv->text);
		}
	}
	return which;
}

/* The longest suffix of the text that is a proper prefix of some stop string. */
static size_t naive_held(const naive *nv, const char *const *stop, const size_t *len, int32_t n_stop)
{
	size_t hold = 0;
	for (int32_t i = 0; i < n_stop; i++)
		for (size_t k = len[i] - 1; k > hold; k--)
			if (k <= nv->len && !memcmp(nv->text + nv->len - k, stop[i], k)) {
				hold = k;
				break;
			}
	return hold;
}

/* Pushes ids into m and the reference side by side: the same text, the same stopping token, the same place. With
 * min_tokens, vLLM's rule: no stop until more than min_tokens tokens are in, and then only an occurrence that ends
 * past the text of the first min_tokens. Returns the index of the token that stopped (-1: none, after finish). */
static int32_t run_both_min(const int32_t *ids, int32_t n, const char *const *stop, const size_t *len, int32_t n_stop,
                            int32_t min_tokens)
{
	stop_text m;
	ck_assert_int_eq(stop_text_init(&m, tok, stop, len, n_stop), 0);
	stop_text_min_tokens(&m, min_tokens);
	size_t after = 0;   /* bytes of the first min_tokens tokens' text */
	static naive nv;
	memset(&nv, 0, sizeof nv);
	tokenizer_stream_init(&nv.ts, tok, true);
	char *out = malloc((size_t)stop_text_room_max(tok));
	char *text = malloc(sizeof nv.text);
	size_t text_len = 0;
	int32_t stopped_at = -1;
	for (int32_t i = 0; i <= n && stopped_at < 0; i++) {
		int64_t w;
		if (i < n) {
			w = stop_text_push(&m, ids[i], out, stop_text_room(tok, ids[i]));
			naive_push(&nv, ids[i]);
		} else {   /* the end: what is held comes out as U+FFFD */
			w = stop_text_finish(&m, out, 8);
			int64_t f = tokenizer_stream_flush(&nv.ts, nv.text + nv.len, 8);
			nv.len += (size_t)f;
		}
		ck_assert_int_ge(w, 0);
		memcpy(text + text_len, out, (size_t)w);
		text_len += (size_t)w;
		ck_assert_uint_eq(text_len, nv.len);
		ck_assert(!memcmp(text, nv.text, nv.len));
		if (i < min_tokens)
			after = nv.len;
		size_t at = 0;
		int32_t which = (i < n ? i + 1 : n) > min_tokens ? naive_find(&nv, stop, len, n_stop, after, &at) : -1;
		ck_assert_msg(m.stopped == (which >= 0), "token %d: stop_text %s, the reference %s", i,
		              m.stopped ? "stopped" : "goes on", which >= 0 ? "stops" : "goes on");
		if (which >= 0) {
			ck_assert_int_eq(m.stop_index, which);
			ck_assert_uint_eq(m.stop_at, at);
			ck_assert_uint_eq(stop_text_held(&m), 0);
			stopped_at = i;
		} else {
			ck_assert_uint_eq(stop_text_held(&m), naive_held(&nv, stop, len, n_stop));
			ck_assert_uint_eq(m.len, nv.len);
		}
	}
	if (stopped_at >= 0 && stopped_at < n) {   /* after a stop nothing more is taken */
		ck_assert_int_eq(stop_text_push(&m, ids[stopped_at], out, stop_text_room(tok, ids[stopped_at])), 0);
		ck_assert_int_eq(stop_text_finish(&m, out, 8), 0);
	}
	free(out);
	free(text);
	return stopped_at;
}

static int32_t run_both(const int32_t *ids, int32_t n, const char *const *stop, const size_t *len, int32_t n_stop)
{
	return run_both_min(ids, n, stop, len, n_stop, 0);
}

/* ---- tests ---- */

/* Seeded random runs: words, byte tokens that split characters (some never completed), special tokens and ids beyond
 * the vocabulary; stop strings cut from the run's own text at random places and lengths (also across a split
 * character), beside ones that never occur. Every run agrees with the reference token by token. */
START_TEST(test_random_runs)
{
	rng_state = 20240611;
	static const char *words[] = { "Hello", " world", ",", " the", " weather", " today", "\n", " is", " 42", " ok" };
	const char *utf8[] = { "\xe2\x82\xac", "\xc3\xa9", "\xf0\x9f\x98\x80", "\xe4\xb8\xad" };   /* €, é, 😀, 中 */
	int32_t stopped = 0, held_back = 0, runs = 400;
	for (int32_t run = 0; run < runs; run++) {
		int32_t ids[256], n = 0;
		while (n < 120) {
			uint64_t k = rng_u64() % 10;
			if (k < 5) {
				int32_t w[8];
				int32_t nw = encode(words[rng_u64() % 10], w, 8);
				for (int32_t j = 0; j < nw; j++)
					ids[n++] = w[j];
			} else if (k < 8) {   /* a character, byte by byte; now and then one of its bytes is left out */
				const char *c = utf8[rng_u64() % 4];
				bool cut = rng_u64() % 5 == 0;
				for (size_t j = 0; j < strlen(c) - (cut ? 1 : 0); j++)
					if (byte_id[(unsigned char)c[j]] >= 0)
						ids[n++] = byte_id[(unsigned char)c[j]];
			} else if (k == 8) {
				ids[n++] = tokenizer_eos(tok);
			} else {
				ids[n++] = tokenizer_vocab_size(tok) + (int32_t)(rng_u64() % 7);   /* beyond the tokenizer */
			}
		}
		/* the whole text, to cut stop strings from */
		static naive whole;
		memset(&whole, 0, sizeof whole);
		tokenizer_stream_init(&whole.ts, tok, true);
		for (int32_t i = 0; i < n; i++)
			naive_push(&whole, ids[i]);
		char stops[STOP_TEXT_MAX][STOP_TEXT_MAX_BYTES];
		const char *stop[STOP_TEXT_MAX];
		size_t len[STOP_TEXT_MAX];
		int32_t n_stop = 1 + (int32_t)(rng_u64() % STOP_TEXT_MAX);
		for (int32_t i = 0; i < n_stop; i++) {
			stop[i] = stops[i];
			if (rng_u64() % 4 == 0) {   /* never in this text */
				len[i] = 3;
				memcpy(stops[i], "\xff\xfe\xff", 3);
				continue;
			}
			size_t l = 1 + rng_u64() % (rng_u64() % 8 == 0 ? 60 : 8);
			if (l > whole.len)
				l = whole.len;
			size_t from = rng_u64() % (whole.len - l + 1);
			memcpy(stops[i], whole.text + from, l);
			len[i] = l;
		}
		stopped += run_both(ids, n, stop, len, n_stop) >= 0;
		/* the same run under min_tokens: a stop ending in the first tokens' text never counts, later ones do */
		int32_t min_tokens = (int32_t)(rng_u64() % 40);
		int32_t at = run_both_min(ids, n, stop, len, n_stop, min_tokens);
		held_back += at >= min_tokens;
		ck_assert(at < 0 || at >= min_tokens);
	}
	ck_assert_int_gt(stopped, runs / 2);   /* most runs do meet a stop */
	ck_assert_int_gt(held_back, runs / 4);
}
END_TEST

/* min_tokens over a known text: "ab" occurs in the first token's text and again later; with min_tokens 1 the first
 * does not count (though it stays in the kept tail) and the second does; one that begins in the held-back text and
 * ends after it counts. */
START_TEST(test_min_tokens)
{
	int32_t ids[64];
	int32_t n = encode("ab ab cd", ids, 64);
	ck_assert_int_ge(n, 3);
	const char *stop[1] = { "ab" };
	size_t len[1] = { 2 };
	size_t first_end;   /* where the first "ab" ends in the text */
	{
		static naive nv;
		memset(&nv, 0, sizeof nv);
		tokenizer_stream_init(&nv.ts, tok, true);
		naive_push(&nv, ids[0]);
		first_end = nv.len;
	}
	ck_assert_uint_ge(first_end, 2);   /* the first token holds "ab" */
	int32_t plain = run_both_min(ids, n, stop, len, 1, 0), held = run_both_min(ids, n, stop, len, 1, 1);
	ck_assert_int_eq(plain, 0);
	ck_assert_int_gt(held, 0);
	/* every token held back: no stop at all, not even at the end */
	ck_assert_int_eq(run_both_min(ids, n, stop, len, 1, n), -1);
	/* a stop across the boundary of the held-back text: "b cd" begins in the held-back tokens and ends in the last */
	const char *across[1] = { "b cd" };
	size_t across_len[1] = { 4 };
	int32_t at = run_both_min(ids, n, across, across_len, 1, n - 1);
	ck_assert_int_eq(at, n - 1);
}
END_TEST

/* A stop string longer than most tokens, over many of them; its first byte far back in the kept tail. */
START_TEST(test_long_stop)
{
	const char *text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen";
	int32_t ids[64];
	int32_t n = encode(text, ids, 64);
	const char *stop[] = { strstr(text, "two") };
	size_t len[] = { (size_t)(strstr(text, " fourteen") - stop[0]) };
	int32_t k = run_both(ids, n, stop, len, 1);
	ck_assert_int_ge(k, 5);
	ck_assert_int_lt(k, n - 1);
	/* every one of its 255-byte cousins fits the matcher too */
	char big[STOP_TEXT_MAX_BYTES + 1];
	memset(big, 'a', sizeof big);
	const char *bs[] = { big };
	size_t bl[] = { STOP_TEXT_MAX_BYTES };
	int32_t a[300];
	int32_t na = encode("a", a, 1);
	ck_assert_int_eq(na, 1);
	for (int32_t i = 0; i < 300; i++)
		a[i] = a[0];
	ck_assert_int_eq(run_both(a, 300, bs, bl, 1), STOP_TEXT_MAX_BYTES - 1);
}
END_TEST

/* A character split over byte tokens completes a stop string only with its last byte; so does a stop string that
 * holds part of a character. Special tokens between the pieces add nothing and break nothing. */
START_TEST(test_split_character)
{
	const unsigned char euro[3] = { 0xe2, 0x82, 0xac };
	for (int32_t b = 0; b < 3; b++)
		ck_assert_int_ge(byte_id[euro[b]], 0);
	int32_t x[4];
	ck_assert_int_eq(encode("x", x, 4), 1);
	int32_t ids[] = { x[0], byte_id[0xe2], tokenizer_eos(tok), byte_id[0x82], byte_id[0xac], x[0] };
	const char *s1[] = { "x\xe2\x82\xac" };
	size_t l1[] = { 4 };
	ck_assert_int_eq(run_both(ids, 6, s1, l1, 1), 4);
	const char *s2[] = { "x\xe2" };   /* part of a character: found once the character is there */
	size_t l2[] = { 2 };
	ck_assert_int_eq(run_both(ids, 6, s2, l2, 1), 4);
}
END_TEST

/* An incomplete character at the end becomes U+FFFD, which a stop string may hold: found at the end, not before. */
START_TEST(test_end_replacement)
{
	int32_t ids[] = { byte_id['a'], byte_id[0xe2], byte_id[0x82] };
	const char *stop[] = { "a\xef\xbf\xbd" };
	size_t len[] = { 4 };
	ck_assert_int_eq(run_both(ids, 3, stop, len, 1), 3);   /* index n: stop_text_finish */
	stop_text m;
	ck_assert_int_eq(stop_text_init(&m, tok, stop, len, 1), 0);
	char out[64];
	for (int32_t i = 0; i < 3; i++)
		ck_assert_int_ge(stop_text_push(&m, ids[i], out, sizeof out), 0);
	ck_assert(!m.stopped);
	ck_assert_uint_eq(stop_text_held(&m), 1);   /* "a" may begin it */
	ck_assert_int_eq(stop_text_finish(&m, out, 2), -1);   /* no room for U+FFFD */
	ck_assert_int_eq(stop_text_finish(&m, out, 3), 3);
	ck_assert(m.stopped);
	ck_assert_uint_eq(m.stop_at, 0);
}
END_TEST

/* Too little room consumes nothing; the same token then goes in whole. Ids beyond the tokenizer need no room. */
START_TEST(test_room)
{
	int32_t ids[8];
	int32_t n = encode(" return", ids, 8);
	ck_assert_int_eq(n, 1);
	const char *stop[] = { "etu" };
	size_t len[] = { 3 };
	stop_text m;
	ck_assert_int_eq(stop_text_init(&m, tok, stop, len, 1), 0);
	int64_t room = stop_text_room(tok, ids[0]);
	ck_assert_int_ge(room, 8);
	ck_assert_int_le(room, stop_text_room_max(tok));
	char out[64];
	ck_assert_int_eq(stop_text_push(&m, ids[0], out, 2), -1);
	ck_assert(!m.stopped);
	ck_assert_uint_eq(m.len, 0);
	ck_assert_int_eq(stop_text_push(&m, ids[0], out, room), 7);
	ck_assert(m.stopped);
	ck_assert_uint_eq(m.stop_at, 2);
	ck_assert_int_eq(stop_text_room(tok, tokenizer_vocab_size(tok)), 0);
	ck_assert_int_eq(stop_text_room(tok, -1), 0);
	ck_assert_int_eq(stop_text_init(&m, tok, NULL, NULL, 0), 0);
	ck_assert_int_eq(stop_text_push(&m, tokenizer_vocab_size(tok) + 5, out, 0), 0);
	ck_assert_int_eq(stop_text_push(&m, ids[0], out, room), 7);
	ck_assert(!m.stopped);
	ck_assert_uint_eq(stop_text_held(&m), 0);
}
END_TEST

START_TEST(test_invalid)
{
	stop_text m;
	const char *stop[] = { "a", "b", "c", "d", "e" };
	size_t len[] = { 1, 1, 1, 1, 1 };
	ck_assert_int_eq(stop_text_init(&m, tok, stop, len, STOP_TEXT_MAX + 1), -1);
	ck_assert_int_eq(stop_text_init(&m, tok, stop, len, -1), -1);
	ck_assert_int_eq(stop_text_init(&m, NULL, stop, len, 1), -1);
	ck_assert_int_eq(stop_text_init(&m, tok, NULL, len, 1), -1);
	size_t zero[] = { 0 };
	ck_assert_int_eq(stop_text_init(&m, tok, stop, zero, 1), -1);
	char big[STOP_TEXT_MAX_BYTES + 1] = { 0 };
	const char *bs[] = { big };
	size_t bl[] = { sizeof big };
	ck_assert_int_eq(stop_text_init(&m, tok, bs, bl, 1), -1);
	ck_assert_int_eq(stop_text_init(&m, tok, stop, len, STOP_TEXT_MAX), 0);
}
END_TEST

static Suite *stop_text_suite(void)
{
	Suite *s = suite_create("stop_text");
	TCase *tc = tcase_create("stop_text");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_random_runs);
	tcase_add_test(tc, test_long_stop);
	tcase_add_test(tc, test_min_tokens);
	tcase_add_test(tc, test_split_character);
	tcase_add_test(tc, test_end_replacement);
	tcase_add_test(tc, test_room);
	tcase_add_test(tc, test_invalid);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(stop_text_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
