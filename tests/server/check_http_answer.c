/* tests/server/check_http_answer.c — Check suite for server/http_answer: the front's own responses are whole HTTP/1.1
 * responses (status line and reason, Content-Type, a Content-Length equal to the body, Connection: close, Retry-After
 * only when asked) whose body is the API's error object, valid JSON whatever bytes the message held; nothing is
 * written when it does not fit. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_answer.h"

static char buf[2048];

/* The body after the head, parsed; its Content-Length checked against it. */
static json_t *body_of(const char *s, size_t n)
{
	const char *end = strstr(s, "\r\n\r\n");
	ck_assert_ptr_nonnull(end);
	const char *cl = strstr(s, "Content-Length: ");
	ck_assert_ptr_nonnull(cl);
	size_t len = strtoul(cl + 16, NULL, 10);
	ck_assert_uint_eq(len, n - (size_t)(end + 4 - s));
	json_error_t e;
	json_t *j = json_loadb(end + 4, len, 0, &e);
	ck_assert_msg(j != NULL, "not JSON: %s", e.text);
	return j;
}

START_TEST(test_503_with_retry)
{
	size_t n = http_answer_format(buf, sizeof buf, 503, "server_error", "server_busy", 1, "every slot busy");
	ck_assert_uint_gt(n, 0);
	buf[n] = 0;
	ck_assert_ptr_eq(strstr(buf, "HTTP/1.1 503 Service Unavailable\r\n"), buf);
	ck_assert_ptr_nonnull(strstr(buf, "\r\nContent-Type: application/json\r\n"));
	ck_assert_ptr_nonnull(strstr(buf, "\r\nConnection: close\r\n"));
	ck_assert_ptr_nonnull(strstr(buf, "\r\nRetry-After: 1\r\n"));
	json_t *j = body_of(buf, n);
	json_t *e = json_object_get(j, "error");
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "every slot busy");
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "server_error");
	ck_assert_str_eq(json_string_value(json_object_get(e, "code")), "server_busy");
	ck_assert(json_is_null(json_object_get(e, "param")));
	json_decref(j);
}
END_TEST

START_TEST(test_no_retry_and_reasons)
{
	static const struct { int status; const char *line; } rows[] = {
		{ 400, "HTTP/1.1 400 Bad Request\r\n" }, { 408, "HTTP/1.1 408 Request Timeout\r\n" },
		{ 413, "HTTP/1.1 413 Content Too Large\r\n" }, { 429, "HTTP/1.1 429 Too Many Requests\r\n" },
		{ 505, "HTTP/1.1 505 HTTP Version Not Supported\r\n" }, { 599, "HTTP/1.1 599 Internal Server Error\r\n" },
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		size_t n = http_answer_format(buf, sizeof buf, rows[i].status, "invalid_request_error", "x", 0, "m");
		buf[n] = 0;
		ck_assert_ptr_eq(strstr(buf, rows[i].line), buf);
		ck_assert_ptr_null(strstr(buf, "Retry-After"));
		json_decref(body_of(buf, n));
	}
}
END_TEST

START_TEST(test_hostile_message_stays_json)
{
	const char msg[] = "bad \xff\xfe byte \"quoted\" \\ and \x01 control\r\n";
	size_t n = http_answer_format(buf, sizeof buf, 400, "invalid_request_error", "bad_request", 0, msg);
	json_t *j = body_of(buf, n);
	const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
	ck_assert_str_eq(m, "bad ?? byte \"quoted\" \\ and ? control??");
	json_decref(j);
}
END_TEST

START_TEST(test_does_not_fit)
{
	size_t full = http_answer_format(buf, sizeof buf, 408, "invalid_request_error", "request_timeout", 0, "late");
	ck_assert_uint_gt(full, 0);
	memset(buf, 'z', sizeof buf);
	ck_assert_uint_eq(http_answer_format(buf, full - 1, 408, "invalid_request_error", "request_timeout", 0, "late"), 0);
	ck_assert_int_eq(buf[0], 'z');   /* nothing written */
	ck_assert_uint_eq(http_answer_format(buf, full, 408, "invalid_request_error", "request_timeout", 0, "late"), full);
}
END_TEST

static Suite *answer_suite(void)
{
	Suite *s = suite_create("http_answer");
	TCase *t = tcase_create("format");
	tcase_add_test(t, test_503_with_retry);
	tcase_add_test(t, test_no_retry_and_reasons);
	tcase_add_test(t, test_hostile_message_stays_json);
	tcase_add_test(t, test_does_not_fit);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(answer_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
