/* tests/server/check_tool_calls.c — Check suite for server/tool_calls: each format's calls parsed whole and split at every
 * byte (the events must reassemble to the final calls and content, and every split give the one-piece answer), two
 * calls, text around them, marker text inside arguments, calls cut short, invalid JSON, Unicode, seeded random
 * texts made of marker pieces; the format of real chat templates; and the grammar of forced calls compiled on the
 * small test vocabulary, its sentences accepted, others refused, and every accepted one parsed back. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar.h"
#include "models/tokenizer.h"
#include "server/tool_calls.h"
#include "tests/test_env.h"
#include "tests/test_rng.h"

/* ---- a parse, written as one string so that two parses compare with strcmp ---- */

typedef struct outbuf {
	char *s;
	size_t len, cap;
} outbuf;

static void ob_put(outbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = 2 * (b->len + n + 1);
		b->s = realloc(b->s, b->cap);
		ck_assert_ptr_nonnull(b->s);
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = 0;
}

static void ob_str(outbuf *b, const char *s)
{
	ob_put(b, s, strlen(s));
}

#define MAX_CALLS 64

/* What the events of one run said. */
typedef struct streamed {
	outbuf content;
	outbuf args[MAX_CALLS];
	char names[MAX_CALLS][300];
	char ids[MAX_CALLS][40];
	int32_t n;
} streamed;

static void take_events(streamed *st, tool_events *ev)
{
	for (int32_t i = 0; i < ev->n; i++) {
		tool_event *e = &ev->ev[i];
		ck_assert_uint_eq(strlen(e->text), e->len);
		switch (e->kind) {
		case TOOL_EVENT_CONTENT:
			ob_put(&st->content, e->text, e->len);
			break;
		case TOOL_EVENT_CALL_BEGIN:
			ck_assert_int_eq(e->index, st->n);   /* calls begin in order */
			ck_assert_int_lt(st->n, MAX_CALLS);
			snprintf(st->names[st->n], sizeof st->names[0], "%s", e->text);
			snprintf(st->ids[st->n], sizeof st->ids[0], "%s", e->id);
			st->n++;
			break;
		case TOOL_EVENT_ARGUMENTS:
			ck_assert_int_ge(e->index, 0);
			ck_assert_int_lt(e->index, st->n);
			ob_put(&st->args[e->index], e->text, e->len);
			break;
		}
	}
	tool_events_clear(ev);
}

/* Parses text pushed in pieces that end at the offsets cuts[0 … n_cuts) (increasing), checks that the events agree
 * with the final result, and returns that result written out (malloc'd). */
static char *parse_cut(tool_format fmt, const char *text, size_t len, const size_t *cuts, int n_cuts)
{
	tool_parser *p = tool_parser_new(fmt, 42);
	ck_assert_ptr_nonnull(p);
	tool_events ev;
	tool_events_init(&ev);
	streamed st = { 0 };
	size_t at = 0;
	for (int i = 0; i <= n_cuts; i++) {
		size_t end = i < n_cuts ? cuts[i] : len;
		ck_assert_int_eq(tool_parser_push(p, text + at, end - at, &ev), 0);
		take_events(&st, &ev);
		at = end;
	}
	ck_assert_int_eq(tool_parser_finish(p, &ev), 0);
	take_events(&st, &ev);
	ck_assert_int_eq(tool_parser_push(p, "x", 1, &ev), -1);   /* no text after the end */

	size_t clen;
	const char *content = tool_parser_content(p, &clen);
	ck_assert_uint_eq(clen, st.content.len);
	ck_assert(memcmp(content, st.content.s ? st.content.s : "", clen) == 0);
	ck_assert_int_eq(tool_parser_n_calls(p), st.n);
	outbuf r = { 0 };
	ob_str(&r, "content=");
	ob_put(&r, content, clen);
	for (int32_t i = 0; i < st.n; i++) {
		const tool_call *c = tool_parser_call(p, i);
		ck_assert_str_eq(c->name, st.names[i]);
		ck_assert_str_eq(c->id, st.ids[i]);
		ck_assert_uint_eq(c->arguments_len, st.args[i].len);
		ck_assert(memcmp(c->arguments, st.args[i].s ? st.args[i].s : "", c->arguments_len) == 0);
		char head[400];
		snprintf(head, sizeof head, "\n#%d %s %s valid=%d complete=%d args=", (int)i, c->id, c->name,
		         c->arguments_valid, c->complete);
		ob_str(&r, head);
		ob_put(&r, c->arguments, c->arguments_len);
		free(st.args[i].s);
	}
	ck_assert_ptr_null(tool_parser_call(p, st.n));
	free(st.content.s);
	tool_events_free(&ev);
	tool_parser_free(p);
	return r.s;
}

/* The one-piece result, after checking that every split in two, every split into single bytes and a few seeded
 * random splits give the same. */
static char *parse_all_ways(tool_format fmt, const char *text)
{
	size_t len = strlen(text);
	char *whole = parse_cut(fmt, text, len, NULL, 0);
	for (size_t k = 0; k <= len; k++) {
		char *two = parse_cut(fmt, text, len, &k, 1);
		ck_assert_msg(strcmp(two, whole) == 0, "split at %zu:\n%s\n-- one piece:\n%s", k, two, whole);
		free(two);
	}
	size_t *cuts = malloc((len + 1) * sizeof *cuts);
	for (size_t k = 0; k < len; k++)
		cuts[k] = k;
	char *bytes = parse_cut(fmt, text, len, cuts, (int)len);
	ck_assert_msg(strcmp(bytes, whole) == 0, "byte by byte:\n%s\n-- one piece:\n%s", bytes, whole);
	free(bytes);
	for (int r = 0; r < 20; r++) {
		int n = 0;
		for (size_t k = 0; k < len; k++)
			if (rng_u64() % 4 == 0)
				cuts[n++] = k;
		char *some = parse_cut(fmt, text, len, cuts, n);
		ck_assert_str_eq(some, whole);
		free(some);
	}
	free(cuts);
	return whole;
}

/* Checks text's result against expect, where each call's id is written as "ID". */
static void expect_parse(tool_format fmt, const char *text, const char *expect)
{
	char *got = parse_all_ways(fmt, text);
	/* replace each id (the word after '#N ') with ID */
	outbuf norm = { 0 };
	for (const char *s = got; *s;) {
		const char *hash = strstr(s, "\n#");
		if (!hash) {
			ob_str(&norm, s);
			break;
		}
		const char *sp = strchr(hash, ' ');
		ob_put(&norm, s, (size_t)(sp + 1 - s));
		ob_str(&norm, "ID");
		s = strchr(sp + 1, ' ');
	}
	ck_assert_msg(strcmp(norm.s, expect) == 0, "text:\n%s\ngot:\n%s\nexpected:\n%s", text, norm.s, expect);
	free(norm.s);
	free(got);
}

/* ---- hermes ---- */

START_TEST(test_hermes_one_call)
{
	expect_parse(TOOL_FORMAT_HERMES,
	             "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
	             "</tool_call>",
	             "content=Let me check.\n#0 ID get_weather valid=1 complete=1 args={\"city\": \"Paris\"}");
	expect_parse(TOOL_FORMAT_HERMES, "Hello, <b>world</b>!\n\n", "content=Hello, <b>world</b>!\n\n");
	expect_parse(TOOL_FORMAT_HERMES, "", "content=");
	/* no closing tag (the model ended after the object): vLLM takes the call */
	expect_parse(TOOL_FORMAT_HERMES, "<tool_call>\n{\"arguments\": {\"x\": 1}, \"name\": \"f\"}",
	             "content=\n#0 ID f valid=1 complete=1 args={\"x\": 1}");
	/* no arguments: {} */
	expect_parse(TOOL_FORMAT_HERMES, "<tool_call>{\"name\": \"now\"}</tool_call>",
	             "content=\n#0 ID now valid=1 complete=1 args={}");
}
END_TEST

START_TEST(test_hermes_two_calls_text_around)
{
	expect_parse(TOOL_FORMAT_HERMES,
	             "I will call two tools.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"n\": 1}}\n</tool_call>\n"
	             "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"list\": [1, {\"k\": null}]}}\n</tool_call>\n"
	             "Done.\n",
	             "content=I will call two tools.\nDone.\n\n"
	             "#0 ID a valid=1 complete=1 args={\"n\": 1}\n"
	             "#1 ID b valid=1 complete=1 args={\"list\": [1, {\"k\": null}]}");
	/* a second <tool_call> without the first's closing tag */
	expect_parse(TOOL_FORMAT_HERMES,
	             "<tool_call>{\"name\": \"a\", \"arguments\": {}}<tool_call>{\"name\": \"b\", \"arguments\": {}}",
	             "content=\n#0 ID a valid=1 complete=1 args={}\n#1 ID b valid=1 complete=1 args={}");
}
END_TEST

START_TEST(test_hermes_tags_in_arguments)
{
	expect_parse(TOOL_FORMAT_HERMES,
	             "<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"text\": \"<tool_call> and </tool_call> \\\"q\\\"\"}}"
	             "\n</tool_call>",
	             "content=\n#0 ID echo valid=1 complete=1 args={\"text\": \"<tool_call> and </tool_call> \\\"q\\\"\"}");
	/* tags in plain text that start no call */
	expect_parse(TOOL_FORMAT_HERMES, "Use <tool_call> tags, like <tool_call>this</tool_call>.",
	             "content=Use <tool_call> tags, like <tool_call>this</tool_call>.");
	expect_parse(TOOL_FORMAT_HERMES, "a <tool_ b <tool_call", "content=a <tool_ b <tool_call");
}
END_TEST

START_TEST(test_hermes_truncated)
{
	/* the name known: the call stays, cut short */
	expect_parse(TOOL_FORMAT_HERMES, "Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2",
	             "content=Hi\n#0 ID f valid=0 complete=0 args={\"a\": [1, 2");
	/* the name not known yet: content */
	expect_parse(TOOL_FORMAT_HERMES, "Hi <tool_call>\n{\"na", "content=Hi <tool_call>\n{\"na");
	expect_parse(TOOL_FORMAT_HERMES, "<tool_call>{\"name\": \"f\"", "content=\n#0 ID f valid=0 complete=0 args=");
}
END_TEST

START_TEST(test_hermes_invalid_json)
{
	expect_parse(TOOL_FORMAT_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1,}}\n</tool_call>",
	             "content=\n#0 ID f valid=0 complete=1 args={\"a\": 1,}");
	/* a brace missing before the closing tag */
	expect_parse(TOOL_FORMAT_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1</tool_call>after",
	             "content=after\n#0 ID f valid=0 complete=0 args={\"a\": 1");
	/* arguments as a string, and a scalar */
	expect_parse(TOOL_FORMAT_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
	             "content=\n#0 ID f valid=0 complete=1 args=\"{}\"");
	expect_parse(TOOL_FORMAT_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": 12 }</tool_call>",
	             "content=\n#0 ID f valid=0 complete=1 args=12");
	/* the name no string, no name at all: content */
	expect_parse(TOOL_FORMAT_HERMES, "<tool_call>{\"name\": 3}</tool_call>",
	             "content=<tool_call>{\"name\": 3}</tool_call>");
	expect_parse(TOOL_FORMAT_HERMES, "x<tool_call>{\"arguments\": {}}</tool_call>",
	             "content=x<tool_call>{\"arguments\": {}}</tool_call>");
}
END_TEST

START_TEST(test_hermes_unicode)
{
	expect_parse(TOOL_FORMAT_HERMES,
	             "Météo à 東京 🌧\n<tool_call>\n{\"name\": \"m\\u00e9t\\u00e9o\", \"arguments\": {\"ville\": \"Zürich 東京 🌧 "
	             "\\ud83c\\udf27\"}}\n</tool_call>",
	             "content=Météo à 東京 🌧\n#0 ID météo valid=1 complete=1 args={\"ville\": \"Zürich 東京 🌧 "
	             "\\ud83c\\udf27\"}");
}
END_TEST

/* ---- llama3_json ---- */

START_TEST(test_llama3_calls)
{
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
	             "content=\n#0 ID get_weather valid=1 complete=1 args={\"city\": \"Paris\"}");
	expect_parse(TOOL_FORMAT_LLAMA3_JSON,
	             " \n<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"x\": [1,2]}}",
	             "content=\n#0 ID a valid=1 complete=1 args={}\n#1 ID b valid=1 complete=1 args={\"x\": [1,2]}");
	/* text after the calls */
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "{\"name\": \"f\", \"parameters\": {}}\n\nThat is all.",
	             "content=That is all.\n#0 ID f valid=1 complete=1 args={}");
}
END_TEST

START_TEST(test_llama3_not_calls)
{
	/* text first: the message is content, a JSON object later in it too */
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "Sure: {\"name\": \"f\", \"parameters\": {}}",
	             "content=Sure: {\"name\": \"f\", \"parameters\": {}}");
	/* JSON without a name, or with a name not a string */
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "{\"a\": 1} and {\"name\": \"f\"}", "content={\"a\": 1} and {\"name\": \"f\"}");
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "  {\"name\": [1]}", "content=  {\"name\": [1]}");
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "<|python_tag|>brave_search.call(query=\"x\")",
	             "content=<|python_tag|>brave_search.call(query=\"x\")");
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "<|python", "content=<|python");
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "<|pythonic|>", "content=<|pythonic|>");
}
END_TEST

START_TEST(test_llama3_edge)
{
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "{\"name\": \"echo\", \"parameters\": {\"s\": \"<|python_tag|>{\\\"name\\\"; }\"}}",
	             "content=\n#0 ID echo valid=1 complete=1 args={\"s\": \"<|python_tag|>{\\\"name\\\"; }\"}");
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "{\"name\": \"f\", \"parameters\": {\"a\": \"cut",
	             "content=\n#0 ID f valid=0 complete=0 args={\"a\": \"cut");
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "{\"name\": \"f\", \"parameters\": {\"a\": tru}}",
	             "content=\n#0 ID f valid=0 complete=1 args={\"a\": tru}");
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "{\"name\": \"日本\", \"parameters\": {\"é\": \"ü\"}}",
	             "content=\n#0 ID 日本 valid=1 complete=1 args={\"é\": \"ü\"}");
	expect_parse(TOOL_FORMAT_LLAMA3_JSON, "{\"nam", "content={\"nam");
}
END_TEST

/* ---- mistral ---- */

START_TEST(test_mistral_array)
{
	expect_parse(TOOL_FORMAT_MISTRAL,
	             "Sure.[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abcdefghi\"}, "
	             "{\"name\": \"g\", \"arguments\": {}}]",
	             "content=Sure.\n#0 ID f valid=1 complete=1 args={\"a\": 1}\n#1 ID g valid=1 complete=1 args={}");
	expect_parse(TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]{\"name\": \"f\", \"arguments\": {\"s\": \"[TOOL_CALLS][\"}}",
	             "content=\n#0 ID f valid=1 complete=1 args={\"s\": \"[TOOL_CALLS][\"}");
	expect_parse(TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][]", "content=[TOOL_CALLS][]");
	expect_parse(TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": [",
	             "content=\n#0 ID f valid=0 complete=0 args={\"a\": [");
	expect_parse(TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\" 1}}]",
	             "content=\n#0 ID f valid=0 complete=1 args={\"a\" 1}");
	expect_parse(TOOL_FORMAT_MISTRAL, "a [TOOL_CALL b [TOOL_CALLS", "content=a [TOOL_CALL b [TOOL_CALLS");
}
END_TEST

START_TEST(test_mistral_v11)
{
	expect_parse(TOOL_FORMAT_MISTRAL,
	             "[TOOL_CALLS]get_weather{\"city\": \"Zürich\"}[TOOL_CALLS]f2[ARGS]{\"x\": 1}"
	             "[TOOL_CALLS]f3[CALL_ID]abc123def[ARGS]{}",
	             "content=\n#0 ID get_weather valid=1 complete=1 args={\"city\": \"Zürich\"}"
	             "\n#1 ID f2 valid=1 complete=1 args={\"x\": 1}\n#2 ID f3 valid=1 complete=1 args={}");
	expect_parse(TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]f[ARG]{}", "content=[TOOL_CALLS]f[ARG]{}");
	expect_parse(TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]Sure thing", "content=[TOOL_CALLS]Sure thing");
	expect_parse(TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]f{\"a\": \"cu", "content=\n#0 ID f valid=0 complete=0 args={\"a\": \"cu");
}
END_TEST

/* ---- ids, names, events ---- */

START_TEST(test_ids)
{
	const char *text[] = { "<tool_call>{\"name\": \"f\"}</tool_call><tool_call>{\"name\": \"f\"}</tool_call>",
		               "{\"name\": \"f\"}; {\"name\": \"f\"}",
		               "[TOOL_CALLS][{\"name\": \"f\"}, {\"name\": \"f\"}]" };
	tool_format fmt[] = { TOOL_FORMAT_HERMES, TOOL_FORMAT_LLAMA3_JSON, TOOL_FORMAT_MISTRAL };
	for (int f = 0; f < 3; f++) {
		char ids[2][2][40];
		for (int run = 0; run < 2; run++) {
			tool_parser *p = tool_parser_new(fmt[f], run == 0 ? 7 : 8);
			tool_events ev;
			tool_events_init(&ev);
			ck_assert_int_eq(tool_parser_push(p, text[f], strlen(text[f]), &ev), 0);
			ck_assert_int_eq(tool_parser_finish(p, &ev), 0);
			ck_assert_int_eq(tool_parser_n_calls(p), 2);
			for (int i = 0; i < 2; i++) {
				const char *id = tool_parser_call(p, i)->id;
				size_t len = strlen(id);
				const char *tail = fmt[f] == TOOL_FORMAT_MISTRAL ? id : id + 5;
				ck_assert_uint_eq(len, fmt[f] == TOOL_FORMAT_MISTRAL ? 9 : 29);
				if (fmt[f] != TOOL_FORMAT_MISTRAL)
					ck_assert(strncmp(id, "call_", 5) == 0);
				for (const char *c = tail; *c; c++)
					ck_assert_msg((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'),
					              "%s", id);
				snprintf(ids[run][i], 40, "%s", id);
			}
			ck_assert_str_ne(ids[run][0], ids[run][1]);
			tool_events_free(&ev);
			tool_parser_free(p);
		}
		ck_assert_str_ne(ids[0][0], ids[1][0]);   /* another seed, other ids */
	}
	char *a = parse_cut(TOOL_FORMAT_HERMES, text[0], strlen(text[0]), NULL, 0);
	char *b = parse_cut(TOOL_FORMAT_HERMES, text[0], strlen(text[0]), NULL, 0);
	ck_assert_str_eq(a, b);   /* the same seed, the same ids */
	free(a);
	free(b);
}
END_TEST

START_TEST(test_formats)
{
	ck_assert_int_eq(tool_format_from_name("hermes"), TOOL_FORMAT_HERMES);
	ck_assert_int_eq(tool_format_from_name("llama3_json"), TOOL_FORMAT_LLAMA3_JSON);
	ck_assert_int_eq(tool_format_from_name("mistral"), TOOL_FORMAT_MISTRAL);
	ck_assert_int_eq(tool_format_from_name("Hermes"), TOOL_FORMAT_NONE);
	ck_assert_int_eq(tool_format_from_name(NULL), TOOL_FORMAT_NONE);
	ck_assert_str_eq(tool_format_name(TOOL_FORMAT_LLAMA3_JSON), "llama3_json");
	ck_assert_ptr_null(tool_parser_new(TOOL_FORMAT_NONE, 1));
	struct { const char *file; tool_format fmt; } t[] = {
		{ "qwen3.jinja", TOOL_FORMAT_HERMES },
		{ "llama3.1_json.jinja", TOOL_FORMAT_LLAMA3_JSON },
		{ "mistral.jinja", TOOL_FORMAT_MISTRAL },
		{ "chatml.jinja", TOOL_FORMAT_NONE },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		char path[1024];
		snprintf(path, sizeof path, "%s/chat/%s", testdata(), t[i].file);
		FILE *f = fopen(path, "rb");
		ck_assert_msg(f != NULL, "%s", path);
		static char buf[1 << 16];
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = 0;
		ck_assert_msg(tool_format_from_template(buf) == t[i].fmt, "%s", t[i].file);
	}
	ck_assert_int_eq(tool_format_from_template("{{ '<|python_tag|>' }}"), TOOL_FORMAT_LLAMA3_JSON);
	ck_assert_int_eq(tool_format_from_template("ipython is a shell"), TOOL_FORMAT_NONE);
	ck_assert_int_eq(tool_format_from_template(NULL), TOOL_FORMAT_NONE);
}
END_TEST

/* Content never shows a marker that is still being read: pushing the text up to a marker's every prefix shows
 * nothing past the content before it. */
START_TEST(test_held_back)
{
	struct { tool_format fmt; const char *before, *marker; } t[] = {
		{ TOOL_FORMAT_HERMES, "Let me look.", "<tool_call>" },
		{ TOOL_FORMAT_MISTRAL, "Let me look.", "[TOOL_CALLS]" },
		{ TOOL_FORMAT_LLAMA3_JSON, "", "<|python_tag|>" },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		for (size_t k = 1; k <= strlen(t[i].marker); k++) {
			tool_parser *p = tool_parser_new(t[i].fmt, 1);
			tool_events ev;
			tool_events_init(&ev);
			streamed st = { 0 };
			ck_assert_int_eq(tool_parser_push(p, t[i].before, strlen(t[i].before), &ev), 0);
			ck_assert_int_eq(tool_parser_push(p, t[i].marker, k, &ev), 0);
			take_events(&st, &ev);
			ck_assert_str_eq(st.content.s ? st.content.s : "", t[i].before);
			free(st.content.s);
			tool_events_free(&ev);
			tool_parser_free(p);
		}
	}
}
END_TEST

/* Seeded random texts made of the formats' pieces: every split agrees with one piece, and nothing crashes. */
START_TEST(test_random_pieces)
{
	static const char *const pieces[] = {
		"<tool_call>", "</tool_call>", "<tool_", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|python_tag|>", "{", "}",
		"[", "]", "\"", "\\", ":", ",", ";", " ", "\n", "\"name\"", "\"arguments\"", "\"parameters\"", "\"f\"",
		"1", "null", "x", "é", "{\"name\": \"f\", \"arguments\": ", "{\"a\": \"<tool_call>\"}", "<",
	};
	int n_pieces = (int)(sizeof pieces / sizeof pieces[0]);
	rng_state = 1234;
	for (int r = 0; r < 300; r++) {
		char text[512] = "";
		size_t len = 0;
		int n = 1 + (int)(rng_u64() % 14);
		for (int i = 0; i < n; i++) {
			const char *s = pieces[rng_u64() % (uint64_t)n_pieces];
			if (len + strlen(s) + 1 > sizeof text)
				break;
			memcpy(text + len, s, strlen(s) + 1);
			len += strlen(s);
		}
		for (int f = 1; f <= 3; f++)
			free(parse_all_ways((tool_format)f, text));
	}
}
END_TEST

/* ---- the grammar of forced calls ---- */

static tokenizer *tok;
static grammar_vocab *voc;

static void grammar_setup(void)
{
	char dir[1024], err[256];
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", testdata());
	tok = tokenizer_load(dir, err, sizeof err);
	ck_assert_msg(tok != NULL, "%s", err);
	voc = grammar_vocab_new(tok, tokenizer_vocab_size(tok), err, sizeof err);
	ck_assert_msg(voc != NULL, "%s", err);
	grammar_vocab_set_warm(voc, 0);
}

static void grammar_teardown(void)
{
	grammar_vocab_free(voc);
	tokenizer_free(tok);
}

static const char *tools_json =
	"[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
	"\"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, "
	"\"required\": [\"city\"], \"additionalProperties\": false}}},"
	" {\"type\": \"function\", \"function\": {\"name\": \"now\"}},"
	" {\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {\"type\": \"object\", "
	"\"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"integer\"}}, \"required\": [\"a\", \"b\"],"
	" \"additionalProperties\": false}}}]";

static bool accepts(grammar *g, const char *s)
{
	grammar_matcher *m = grammar_matcher_new(g);
	ck_assert_ptr_nonnull(m);
	bool ok = grammar_matcher_accept_bytes(m, s, strlen(s)) == 0 && grammar_matcher_can_end(m);
	grammar_matcher_free(m);
	return ok;
}

static grammar *compile_tools(tool_format fmt, const char *only, bool parallel)
{
	json_t *tools = json_loads(tools_json, 0, NULL);
	ck_assert_ptr_nonnull(tools);
	char err[512];
	char *src = tool_calls_gbnf(fmt, tools, only, parallel, err, sizeof err);
	ck_assert_msg(src != NULL, "%s", err);
	grammar *g = grammar_compile(voc, src, strlen(src), err, sizeof err);
	ck_assert_msg(g != NULL, "%s\n%s", err, src);
	free(src);
	json_decref(tools);
	return g;
}

/* s is accepted, and parses to calls named names (space-separated) with valid arguments and no content. */
static void accepted_and_parsed(grammar *g, tool_format fmt, const char *s, const char *names)
{
	ck_assert_msg(accepts(g, s), "refused: %s", s);
	char *r = parse_all_ways(fmt, s);
	ck_assert_msg(strncmp(r, "content=\n", 9) == 0, "%s", r);
	char want[256] = "";
	int i = 0;
	for (const char *line = strstr(r, "\n#"); line; line = strstr(line + 1, "\n#"), i++) {
		char name[64];
		ck_assert(sscanf(line + 1, "#%*d %*s %63s valid=1 complete=1", name) == 1);
		ck_assert_msg(strstr(line + 1, "valid=1 complete=1") != NULL, "%s", r);
		snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", i ? " " : "", name);
	}
	ck_assert_str_eq(want, names);
	free(r);
}

START_TEST(test_gbnf_hermes)
{
	grammar *g = compile_tools(TOOL_FORMAT_HERMES, NULL, false);
	accepted_and_parsed(g, TOOL_FORMAT_HERMES,
	                    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n"
	                    "</tool_call>", "get_weather");
	accepted_and_parsed(g, TOOL_FORMAT_HERMES, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", "now");
	accepted_and_parsed(g, TOOL_FORMAT_HERMES,
	                    "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": -2}}\n</tool_call>", "add");
	ck_assert(!accepts(g, "Sure. <tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
	ck_assert(!accepts(g, "<tool_call>\n{\"name\": \"later\", \"arguments\": {}}\n</tool_call>"));
	ck_assert(!accepts(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
	ck_assert(!accepts(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2.5}}\n</tool_call>"));
	ck_assert(!accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"k\"}}"
	                      "\n</tool_call>"));
	ck_assert(!accepts(g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
	                      "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
	grammar_unref(g);

	g = compile_tools(TOOL_FORMAT_HERMES, NULL, true);
	accepted_and_parsed(g, TOOL_FORMAT_HERMES,
	                    "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
	                    "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>", "now add");
	ck_assert(!accepts(g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\nbye"));
	grammar_unref(g);

	g = compile_tools(TOOL_FORMAT_HERMES, "add", false);
	accepted_and_parsed(g, TOOL_FORMAT_HERMES,
	                    "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1,\n  \"b\": 2}}\n</tool_call>", "add");
	ck_assert(!accepts(g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
	grammar_unref(g);
}
END_TEST

START_TEST(test_gbnf_llama3_mistral)
{
	grammar *g = compile_tools(TOOL_FORMAT_LLAMA3_JSON, NULL, true);
	accepted_and_parsed(g, TOOL_FORMAT_LLAMA3_JSON,
	                    "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"<tool_call>\"}}; "
	                    "{\"name\": \"now\", \"parameters\": {}}", "get_weather now");
	ck_assert(!accepts(g, "{\"name\": \"now\", \"arguments\": {}}"));
	ck_assert(!accepts(g, " {\"name\": \"now\", \"parameters\": {}}"));
	grammar_unref(g);

	g = compile_tools(TOOL_FORMAT_MISTRAL, NULL, false);
	accepted_and_parsed(g, TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 4, \"b\": 3}}]",
	                    "add");
	ck_assert(!accepts(g, "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"now\", \"arguments\": {}}]"));
	ck_assert(!accepts(g, "[{\"name\": \"now\", \"arguments\": {}}]"));
	grammar_unref(g);
	g = compile_tools(TOOL_FORMAT_MISTRAL, NULL, true);
	accepted_and_parsed(g, TOOL_FORMAT_MISTRAL,
	                    "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"now\", \"arguments\": {}}]",
	                    "now now");
	grammar_unref(g);

	json_t *tools = json_loads(tools_json, 0, NULL);
	char err[256];
	ck_assert_ptr_null(tool_calls_gbnf(TOOL_FORMAT_HERMES, tools, "nothing", false, err, sizeof err));
	ck_assert_msg(strstr(err, "nothing") != NULL, "%s", err);
	ck_assert_ptr_null(tool_calls_gbnf(TOOL_FORMAT_NONE, tools, NULL, false, err, sizeof err));
	json_t *bad = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"g\", \"parameters\": "
	                         "{\"type\": \"object\", \"patternProperties\": {}}}}]", 0, NULL);
	ck_assert_ptr_null(tool_calls_gbnf(TOOL_FORMAT_HERMES, bad, NULL, false, err, sizeof err));
	ck_assert_msg(strstr(err, "'g'") != NULL && strstr(err, "patternProperties") != NULL, "%s", err);
	json_t *empty = json_array();
	ck_assert_ptr_null(tool_calls_gbnf(TOOL_FORMAT_HERMES, empty, NULL, false, err, sizeof err));
	json_decref(empty);
	json_decref(bad);
	json_decref(tools);
}
END_TEST

static Suite *tool_calls_suite(void)
{
	Suite *s = suite_create("tool_calls");
	TCase *tc = tcase_create("hermes");
	tcase_add_test(tc, test_hermes_one_call);
	tcase_add_test(tc, test_hermes_two_calls_text_around);
	tcase_add_test(tc, test_hermes_tags_in_arguments);
	tcase_add_test(tc, test_hermes_truncated);
	tcase_add_test(tc, test_hermes_invalid_json);
	tcase_add_test(tc, test_hermes_unicode);
	suite_add_tcase(s, tc);
	tc = tcase_create("llama3_json");
	tcase_add_test(tc, test_llama3_calls);
	tcase_add_test(tc, test_llama3_not_calls);
	tcase_add_test(tc, test_llama3_edge);
	suite_add_tcase(s, tc);
	tc = tcase_create("mistral");
	tcase_add_test(tc, test_mistral_array);
	tcase_add_test(tc, test_mistral_v11);
	suite_add_tcase(s, tc);
	tc = tcase_create("common");
	tcase_add_test(tc, test_ids);
	tcase_add_test(tc, test_formats);
	tcase_add_test(tc, test_held_back);
	tcase_add_test(tc, test_random_pieces);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	tc = tcase_create("gbnf");
	tcase_add_checked_fixture(tc, grammar_setup, grammar_teardown);
	tcase_add_test(tc, test_gbnf_hermes);
	tcase_add_test(tc, test_gbnf_llama3_mistral);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tool_calls_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
