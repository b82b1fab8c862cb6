/* tests/server/check_http_framing.c — Check suite for server/http_framing: heads and bodies re-emitted canonically (CRLF, one
 * Content-Length, chunks without extensions or trailers), pipelined requests split where they end, the same result
 * fed whole or a byte at a time, and every framing the server refuses refused with its status: two Content-Lengths,
 * one of 2^64 or a sign, Transfer-Encoding beside it or other than chunked, a chunk past max_body as soon as its
 * digits say so, folding, bare CR, NUL, heads too long, other HTTP versions. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_framing.h"

#define MAX_BODY 1000

static http_framing fr;
static char out[HTTP_FRAMING_OUT_MIN + 4096];

/* Feeds s whole (step 0) or step bytes at a time; collects the canonical bytes and the event sequence ("HE" for HEAD,
 * END; "X" for an error). Returns the bytes consumed. */
static size_t run(const char *s, size_t n, size_t step, char *events, size_t *out_len)
{
	http_framing_init(&fr, MAX_BODY);
	size_t used = 0, ne = 0;
	*out_len = 0;
	for (;;) {
		size_t avail = n - used;
		if (step && avail > step)
			avail = step;
		http_framing_event ev;
		size_t k = http_framing_feed(&fr, s + used, avail, out, sizeof out, out_len, &ev);
		used += k;
		if (ev == HTTP_FRAMING_HEAD)
			events[ne++] = 'H';
		else if (ev == HTTP_FRAMING_END)
			events[ne++] = 'E';
		else if (ev == HTTP_FRAMING_ERROR) {
			events[ne++] = 'X';
			break;
		} else if (used == n || k == 0)
			break;
	}
	events[ne] = 0;
	return used;
}

static void expect(const char *in, const char *want_events, const char *want_out)
{
	for (size_t step = 0; step <= 1; step++) {
		char ev[64];
		size_t len;
		run(in, strlen(in), step, ev, &len);
		ck_assert_msg(!strcmp(ev, want_events), "%s (step %zu): events %s, want %s (%d %s)", in, step, ev, want_events,
		              fr.status, fr.message);
		if (want_out) {
			out[len] = 0;
			ck_assert_msg(len == strlen(want_out) && !memcmp(out, want_out, len), "%s (step %zu): out\n%s\nwant\n%s", in,
			              step, out, want_out);
		}
	}
}

static void refuse(const char *in, int32_t status)
{
	for (size_t step = 0; step <= 1; step++) {
		char ev[64];
		size_t len;
		run(in, strlen(in), step, ev, &len);
		ck_assert_msg(strchr(ev, 'X'), "%s (step %zu): accepted (%s)", in, step, ev);
		ck_assert_msg(fr.status == status, "%s (step %zu): status %d (%s), want %d", in, step, fr.status, fr.message,
		              status);
	}
}

START_TEST(test_canonical_head)
{
	expect("GET /health HTTP/1.1\r\nHost: x\r\n\r\n", "HE", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
	/* LF ends, whitespace around values, an empty value, blank lines before the request line */
	expect("\r\n\nGET /a?b=1 HTTP/1.0\nHost:x  \nX-Empty:\nAccept: \t*/*\t\n\n", "HE",
	       "GET /a?b=1 HTTP/1.0\r\nHost: x\r\nX-Empty:\r\nAccept: */*\r\n\r\n");
	/* what the head said stays until the request ends */
	const char *h = "GET /a?b=1 HTTP/1.0\r\n\r\n";
	http_framing_init(&fr, MAX_BODY);
	size_t n = 0;
	http_framing_event e;
	ck_assert_uint_eq(http_framing_feed(&fr, h, strlen(h), out, sizeof out, &n, &e), strlen(h));
	ck_assert_int_eq(e, HTTP_FRAMING_HEAD);
	ck_assert_str_eq(fr.req.method, "GET");
	ck_assert_str_eq(fr.req.path, "/a");
	ck_assert_int_eq(fr.req.minor, 0);
	/* a later HTTP/1.x speaks 1.1 */
	expect("GET / HTTP/1.7\r\n\r\n", "HE", "GET / HTTP/1.1\r\n\r\n");
}
END_TEST

START_TEST(test_content_length)
{
	expect("POST /v HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", "HE",
	       "POST /v HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
	ck_assert_uint_eq(fr.req.length, 0);   /* ended: reset for the next request */
	/* the same value twice: one header goes on */
	expect("POST /v HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 003\r\n\r\nabc", "HE",
	       "POST /v HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
	refuse("POST /v HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400);
	refuse("POST /v HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n", 400);
	refuse("POST /v HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400);
	refuse("POST /v HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400);
	refuse("POST /v HTTP/1.1\r\nContent-Length: +5\r\n\r\n", 400);
	refuse("POST /v HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", 400);
	refuse("POST /v HTTP/1.1\r\nContent-Length:\r\n\r\n", 400);
	refuse("POST /v HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", 413);
	expect("POST /v HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n", "X", NULL);   /* 2^64 − 1: too large */
	ck_assert_int_eq(fr.status, 413);
}
END_TEST

START_TEST(test_chunked)
{
	expect("POST /v HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n5;name=value\r\nhello\r\n00003 \t;x\r\nabc\r\n"
	       "0\r\nX-Trailer: 1\r\n\r\n",
	       "HE", "POST /v HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n");
	expect("POST /v HTTP/1.1\nTransfer-Encoding: chunked\n\nA\nabcdefghij\n0\n\n", "HE",
	       "POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\na\r\nabcdefghij\r\n0\r\n\r\n");
	refuse("POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400);
	refuse("POST /v HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501);
	refuse("POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501);
	refuse("POST /v HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
	refuse("POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n", 400);   /* data past its size */
	refuse("POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400);
	refuse("POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5 5\r\n", 400);
	refuse("POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n;x\r\n", 400);
	refuse("POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n", 400);
	/* past max_body: the whole body, or one chunk */
	refuse("POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n", 413);   /* 1001 */
}
END_TEST

/* A chunk size past max_body is refused while its digits arrive: before its line ends, before any of its data. */
START_TEST(test_chunk_size_at_once)
{
	const char *head = "POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
	char in[256];
	snprintf(in, sizeof in, "%s%s", head, "7fffffffffffffff");
	char ev[64];
	size_t len;
	size_t used = run(in, strlen(in), 0, ev, &len);
	ck_assert_str_eq(ev, "HX");
	ck_assert_int_eq(fr.status, 413);
	ck_assert_uint_lt(used, strlen(in));   /* refused before the last digits */
	snprintf(in, sizeof in, "%s%s", head, "1f4\r\n");   /* 500 bytes: fine, then 501 more is not */
	run(in, strlen(in), 0, ev, &len);
	ck_assert_str_eq(ev, "H");
	char big[2048];
	snprintf(big, sizeof big, "%s1f4\r\n%0500d\r\n1f5\r\n", head, 0);
	run(big, strlen(big), 0, ev, &len);
	ck_assert_str_eq(ev, "HX");
	ck_assert_int_eq(fr.status, 413);
	snprintf(big, sizeof big, "%s1f4\r\n%0500d\r\n1f4\r\n", head, 0);   /* exactly max_body */
	run(big, strlen(big), 0, ev, &len);
	ck_assert_str_eq(ev, "H");
}
END_TEST

START_TEST(test_malformed_heads)
{
	refuse("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400);                  /* bare CR */
	refuse("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400);               /* folding */
	refuse("GET / HTTP/1.1\r\nX : a\r\n\r\n", 400);                    /* whitespace before the colon */
	refuse("GET / HTTP/1.1\r\nno colon\r\n\r\n", 400);
	refuse("GET / HTTP/1.1\r\n: v\r\n\r\n", 400);
	refuse("GET / HTTP/1.1\r\nX: a\x01\r\n\r\n", 400);
	refuse("GET /  HTTP/1.1\r\n\r\n", 400);
	refuse("GET/ HTTP/1.1\r\n\r\n", 400);
	refuse("GET / HTTP/1.1 x\r\n\r\n", 400);
	refuse("GET / HTTP/2.0\r\n\r\n", 505);
	refuse("GET / FTP/1.1\r\n\r\n", 400);
	refuse("G(T / HTTP/1.1\r\n\r\n", 400);
	refuse("VERYVERYLONGMETHOD / HTTP/1.1\r\n\r\n", 501);
	refuse("\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n", 400);
	char nul[] = "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n";
	char ev[16];
	size_t len;
	run(nul, sizeof nul - 1, 0, ev, &len);
	ck_assert_str_eq(ev, "X");
	ck_assert_int_eq(fr.status, 400);
	/* too long: the request line (414), the head (431) */
	static char big[HTTP_FRAMING_HEAD_MAX + 256];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = 0;
	memcpy(big, "GET /", 5);
	refuse(big, 414);
	snprintf(big, 64, "GET / HTTP/1.1\r\nX: ");
	memset(big + strlen(big), 'b', HTTP_FRAMING_HEAD_MAX);
	big[HTTP_FRAMING_HEAD_MAX + 100] = 0;
	refuse(big, 431);
	/* too many fields, however short */
	size_t n = (size_t)snprintf(big, 64, "GET / HTTP/1.1\r\n");
	for (int i = 0; i <= HTTP_FRAMING_FIELDS_MAX; i++)
		n += (size_t)snprintf(big + n, sizeof big - n, "a%d: b\r\n", i);
	snprintf(big + n, sizeof big - n, "\r\n");
	refuse(big, 431);
	n = (size_t)snprintf(big, 64, "GET / HTTP/1.1\r\n");
	for (int i = 0; i < HTTP_FRAMING_FIELDS_MAX; i++)
		n += (size_t)snprintf(big + n, sizeof big - n, "a%d: b\r\n", i);
	snprintf(big + n, sizeof big - n, "\r\n");
	expect(big, "HE", NULL);   /* as many as allowed */
}
END_TEST

START_TEST(test_pipelined)
{
	const char *in = "POST /a HTTP/1.1\r\nContent-Length: 2\r\n\r\nokGET /health HTTP/1.1\r\n\r\n"
	                 "POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nGET";
	for (size_t step = 0; step <= 1; step++) {
		char ev[64];
		size_t len;
		size_t used = run(in, strlen(in), step, ev, &len);
		ck_assert_str_eq(ev, "HEHEHE");
		ck_assert_uint_eq(used, strlen(in));
		ck_assert(http_framing_in_head(&fr) && fr.started);   /* "GET" of a fourth is in */
		out[len] = 0;
		ck_assert_str_eq(out, "POST /a HTTP/1.1\r\nContent-Length: 2\r\n\r\nokGET /health HTTP/1.1\r\n\r\n"
		                      "POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n");
	}
	/* one call stops after each event, so that the caller can act between requests */
	http_framing_init(&fr, MAX_BODY);
	size_t n = 0;
	http_framing_event e;
	size_t k = http_framing_feed(&fr, in, strlen(in), out, sizeof out, &n, &e);
	ck_assert_int_eq(e, HTTP_FRAMING_HEAD);
	ck_assert_uint_eq(k, strlen("POST /a HTTP/1.1\r\nContent-Length: 2\r\n\r\n"));
	ck_assert_uint_eq(fr.req.length, 2);
	k += http_framing_feed(&fr, in + k, strlen(in) - k, out, sizeof out, &n, &e);
	ck_assert_int_eq(e, HTTP_FRAMING_END);
	ck_assert(!fr.started);
	k += http_framing_feed(&fr, in + k, strlen(in) - k, out, sizeof out, &n, &e);
	ck_assert_int_eq(e, HTTP_FRAMING_HEAD);
	ck_assert_str_eq(fr.req.path, "/health");
}
END_TEST

/* With little room in out, a body goes through piecewise and a head waits for HTTP_FRAMING_OUT_MIN. */
START_TEST(test_out_room)
{
	const char *in = "POST /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n0123456789";
	static char small[HTTP_FRAMING_OUT_MIN + 3];
	http_framing_init(&fr, MAX_BODY);
	size_t n = 0, used = 0;
	http_framing_event e;
	used += http_framing_feed(&fr, in, strlen(in), small, sizeof small - 4, &n, &e);   /* not room for a head */
	ck_assert_int_eq(e, HTTP_FRAMING_MORE);
	ck_assert_uint_eq(used, 0);
	used += http_framing_feed(&fr, in, strlen(in), small, sizeof small, &n, &e);
	ck_assert_int_eq(e, HTTP_FRAMING_HEAD);
	ck_assert(fr.req.expect_continue);
	size_t head = n;
	used += http_framing_feed(&fr, in + used, strlen(in) - used, small, head + 3, &n, &e);
	ck_assert_int_eq(e, HTTP_FRAMING_MORE);
	ck_assert_uint_eq(n, head + 3);
	n = head;   /* the caller forwarded those */
	used += http_framing_feed(&fr, in + used, strlen(in) - used, small, sizeof small, &n, &e);
	ck_assert_int_eq(e, HTTP_FRAMING_END);
	ck_assert_uint_eq(used, strlen(in));
}
END_TEST

static Suite *framing_suite(void)
{
	Suite *s = suite_create("http_framing");
	TCase *tc = tcase_create("http_framing");
	tcase_add_test(tc, test_canonical_head);
	tcase_add_test(tc, test_content_length);
	tcase_add_test(tc, test_chunked);
	tcase_add_test(tc, test_chunk_size_at_once);
	tcase_add_test(tc, test_malformed_heads);
	tcase_add_test(tc, test_pipelined);
	tcase_add_test(tc, test_out_room);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(framing_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
