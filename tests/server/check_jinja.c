/* tests/server/check_jinja.c — Check suite for server/jinja/jinja.h, the chat template interpreter, piece by piece: whitespace
 * control, expressions, statements and scoping, filters, tests, methods, Python's str() and json.dumps; every
 * syntax error with its line and column; every runtime error path; raise_exception; each limit (steps, output,
 * memory, nesting of the template, of values, of macro calls, range); one template rendered by several threads at
 * once; a 10,000-message conversation under the default limits. tests/test_jinja.sh compares with python3-jinja2. */
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja.h"

static const char conv[] =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"},"
	" {\"role\": \"assistant\", \"content\": \"yo\"}], \"add_generation_prompt\": true, \"n\": 7, \"nil\": null,"
	" \"d\": {\"b\": 1, \"a\": [1, 2.5, \"x\", null, true]}, \"u\": \"h\\u00e9\\u65e5\"}";

/* Renders tpl with the JSON vars (NULL: conv): the output (caller frees) or NULL with *st and err set. */
static char *render_lim(const char *tpl, const char *vars, const jinja_limits *lim, jinja_status *st, char *err,
                        size_t err_len)
{
	json_error_t je;
	json_t *v = json_loads(vars ? vars : conv, 0, &je);
	ck_assert_msg(v != NULL, "bad test vars: %s", je.text);
	jinja_template *t = jinja_parse(tpl, strlen(tpl), err, err_len);
	ck_assert_msg(t != NULL, "parse of %s failed: %s", tpl, err);
	char *out = NULL;
	size_t len = 0;
	*st = jinja_render(t, v, lim, &out, &len, err, err_len);
	if (*st == JINJA_OK) {
		ck_assert_ptr_nonnull(out);
		ck_assert_uint_eq(strlen(out), len);
	} else
		ck_assert_ptr_null(out);
	jinja_free(t);
	json_decref(v);
	return out;
}

static void expect_out(const char *tpl, const char *vars, const char *want)
{
	char err[512];
	jinja_status st;
	char *out = render_lim(tpl, vars, NULL, &st, err, sizeof err);
	ck_assert_msg(st == JINJA_OK, "%s: status %d: %s", tpl, st, err);
	ck_assert_msg(strcmp(out, want) == 0, "%s\n  gave [%s]\n  want [%s]", tpl, out, want);
	free(out);
}

static void expect_fail(const char *tpl, const char *vars, jinja_status want, const char *msg)
{
	char err[512];
	jinja_status st;
	char *out = render_lim(tpl, vars, NULL, &st, err, sizeof err);
	ck_assert_msg(st == want, "%s: status %d, want %d (%s) out [%s]", tpl, st, want, err, out ? out : "");
	ck_assert_msg(strstr(err, msg) != NULL, "%s: error [%s] lacks [%s]", tpl, err, msg);
}

static void expect_syntax(const char *tpl, const char *msg)
{
	char err[512];
	jinja_template *t = jinja_parse(tpl, strlen(tpl), err, sizeof err);
	ck_assert_msg(t == NULL, "%s parsed", tpl);
	ck_assert_msg(strstr(err, msg) != NULL, "%s: error [%s] lacks [%s]", tpl, err, msg);
}

START_TEST(test_whitespace)
{
	expect_out("a{% if true %}\nb{% endif %}\nc", "{}", "abc");                   /* trim_blocks */
	expect_out("a{{ 1 }}\nb", "{}", "a1\nb");
	expect_out("  {% if true %}x{% endif %}", "{}", "x");                         /* lstrip_blocks */
	expect_out("t  {% if true %}x{% endif %}", "{}", "t  x");                     /* not after text */
	expect_out("  {{ 1 }}", "{}", "  1");                                         /* not before {{ */
	expect_out("a  {{- 1 -}}  \n b", "{}", "a1b");
	expect_out("a\n  {%- if true -%}\n  b\n{%- endif %}", "{}", "ab");
	expect_out("  {%+ if true %}x{% endif +%}\ny", "{}", "  x\ny");
	expect_out("a{# c #}\nb{#- c -#}  c", "{}", "abc");
	expect_out("x\r\ny\rz\n", "{}", "x\ny\nz");                                    /* newlines, the last dropped */
	expect_out("x\n\n", "{}", "x\n");
	expect_out("{% raw %}{{ a }}{% endraw %}", "{}", "{{ a }}");
	expect_out("\t{% if true %}\n\tin\n\t{% endif %}\n", "{}", "\tin\n");
}
END_TEST

START_TEST(test_expressions)
{
	expect_out("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 3 ** 2 }}", "{}",
	           "7 9 3 -4 2 64");
	expect_out("{{ 7 / 2 }} {{ 1 / 3 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }}",
	           "{}", "3.5 0.3333333333333333 0.30000000000000004 1e+16 1000000000000000.0 0.0001 1e-05 -0.0");
	expect_out("{{ 'a' ~ 1 ~ none ~ true ~ missing }} {{ 'ab' * 2 }} {{ [1] + [2] }}", "{}", "a1NoneTrue abab [1, 2]");
	expect_out("{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ (1, 2) == [1, 2] }} {{ 'b' > 'a' }} {{ 2 in [1, 2] }} {{ 'x' not in 'abc' }}",
	           "{}", "True True False True True True");
	expect_out("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ not '' }} {{ 'y' if n > 3 else 'n' }} [{{ 'y' if false }}]", NULL,
	           "x b True y []");
	expect_out("{{ d.a[1] }} {{ d['b'] }} {{ d.a.0 }} {{ d.a[-1] }} {{ d.a[1:3] }} {{ d.a[::-1] }} {{ u[1:] }} {{ u[-1] }}",
	           NULL, "2.5 1 1 True [2.5, 'x'] [True, None, 'x', 2.5, 1] é日 日");
	expect_out("{{ d }} {{ nil }} {{ (1,) }} {{ ['it\\'s', \"q\\\"\", 'n\\nl'] }}", NULL,
	           "{'b': 1, 'a': [1, 2.5, 'x', None, True]} None (1,) [\"it's\", 'q\"', 'n\\nl']");
	expect_out("{{ {'k': [1, {'z': none}]} }} {{ dict(a=1) }} {{ \"\\u00e9\\x41\\101\" }}", "{}",
	           "{'k': [1, {'z': None}]} {'a': 1} éAA");
}
END_TEST

START_TEST(test_statements)
{
	expect_out("{% for m in messages %}{{ loop.index0 }}{{ m.role[0] }}{{ '|' if not loop.last }}{% endfor %}", NULL,
	           "0s|1u|2a");
	expect_out("{% for m in messages[::-1] %}{{ loop.revindex }}{{ loop.length }}{% endfor %}", NULL, "332313");
	expect_out("{% for x in [] %}a{% else %}empty{% endfor %}", "{}", "empty");
	expect_out("{% for x in range(9) if x is odd %}{% if x == 7 %}{% break %}{% endif %}{{ x }}{% endfor %}", "{}", "135");
	expect_out("{% for x in range(5) %}{% if x < 3 %}{% continue %}{% endif %}{{ x }}{% endfor %}", "{}", "34");
	expect_out("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", NULL, "b=1;a=[1, 2.5, 'x', None, True];");
	expect_out("{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = i + 5 %}{{ x }}{% endfor %}{{ x }}", "{}", "15161");
	expect_out("{% set ns = namespace(k=0) %}{% for i in range(4) %}{% set ns.k = ns.k + i %}{% endfor %}{{ ns.k }}", "{}", "6");
	expect_out("{% set a, b = 'xy' %}{{ b }}{{ a }}", "{}", "yx");
	expect_out("{% set s %}in{{ 1 }}{% endset %}[{{ s }}]", "{}", "[in1]");
	expect_out("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}{{ m() }}", "{}", "1B23B");
	expect_out("{% filter upper %}ab{{ 'c' }}{% endfilter %}", "{}", "ABC");
	expect_out("{% if n > 10 %}a{% elif n > 5 %}b{% else %}c{% endif %}", NULL, "b");
	expect_out("{% generation %}{% set q = 1 %}g{% endgeneration %}[{{ q }}]", "{}", "g[]");
}
END_TEST

START_TEST(test_builtins)
{
	expect_out("{{ ' a b '.strip() }}|{{ 'xax'.strip('x') }}|{{ 'a,b,c'.split(',', 1) }}|{{ ' a  b '.split() }}|"
	           "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXa'.replace('a', 'b') }}|"
	           "{{ 'hé'.upper() }}|{{ 'AB'.lower() }}|{{ 'a b'.title() }}|{{ 'ab'.find('b') }}", "{}",
	           "a b|a|['a', 'b,c']|['a', 'b']|TrueTrue|bXb|HÉ|ab|A B|1");
	expect_out("{{ d | tojson }} {{ 'é\"\\n' | tojson }} {{ d | tojson(indent=1) }}", NULL,
	           "{\"b\": 1, \"a\": [1, 2.5, \"x\", null, true]} \"é\\\"\\n\" {\n \"b\": 1,\n \"a\": [\n  1,\n  2.5,\n  \"x\",\n  null,\n  true\n ]\n}");
	expect_out("{{ messages | length }} {{ u | length }} {{ messages | first | attr('keys') is callable }} "
	           "{{ messages | last | tojson }} {{ [1, 2] | join('-') }} {{ missing | default('dflt') }} "
	           "{{ 'aB' | capitalize }} {{ 'ab' | list }} {{ ' t ' | trim }}", NULL,
	           "3 3 True {\"role\": \"assistant\", \"content\": \"yo\"} 1-2 dflt Ab ['a', 'b'] t");
	expect_out("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join }} "
	           "{{ messages | rejectattr('role', 'in', ['user', 'system']) | list | length }} {{ [3, 1, 2] | sort }} "
	           "{{ [1, 1, 2] | unique | list }} {{ [1, 2] | reverse | list }} {{ [1, 2] | sum }} {{ '7' | int + 1 }}",
	           NULL, "hi 1 [1, 2, 3] [1, 2] [2, 1] 3 8");
	expect_out("{{ n is defined }}{{ x is defined }}{{ nil is none }}{{ u is string }}{{ d is mapping }}"
	           "{{ messages is sequence }}{{ n is number }}{{ n is odd }}{{ n is divisibleby 7 }}{{ nil is not none }}",
	           NULL, "TrueFalseTrueTrueTrueTrueTrueTrueTrueFalse");
	expect_out("{{ range(3) | list }} {{ range(5, 0, -2) | list }} {{ d.get('b') }} {{ d.get('q', 'z') }}", NULL,
	           "[0, 1, 2] [5, 3, 1] 1 z");
	expect_out("{{ x }}|{{ d.nope }}|{{ d.a[9] }}|{{ nil.attr }}|{{ x | length }}|{% for i in x %}i{% endfor %}", NULL,
	           "||||0|");
}
END_TEST

START_TEST(test_syntax_errors)
{
	expect_syntax("{{ 1 + }}", "line 1, column 8: unexpected '}}', expected an expression");
	expect_syntax("a\nb {% if x %}", "line 2, column 6: this block is not closed");
	expect_syntax("{% for x in y %}{% endif %}", "line 1, column 20: unexpected 'endif'");
	expect_syntax("{{ x", "line 1, column 5: unexpected end of template");
	expect_syntax("{{ 'abc }}", "line 1, column 4: unterminated string");
	expect_syntax("{# open", "line 1, column 1: comment without '#}'");
	expect_syntax("{{ x | nosuch }}", "line 1, column 8: no filter named 'nosuch'");
	expect_syntax("{{ x is nosuch }}", "line 1, column 9: no test named 'nosuch'");
	expect_syntax("{% include 'f' %}", "'include' tag is not supported");
	expect_syntax("{% import 'f' as g %}", "'import' tag is not supported");
	expect_syntax("{% extends 'f' %}", "'extends' tag is not supported");
	expect_syntax("{% frobnicate %}", "unknown tag 'frobnicate'");
	expect_syntax("{% break %}", "'break' outside a loop");
	expect_syntax("{{ (1 }}", "unexpected '}'");
	expect_syntax("{{ 1) }}", "unexpected ')'");
	expect_syntax("{{ x @ y }}", "unexpected character '@'");
	expect_syntax("{{ f(a=1, 2) }}", "a positional argument after a keyword argument");
	expect_syntax("{{ f(*a) }}", "*args and **kwargs are not supported");
	expect_syntax("{% macro m(a=1, b) %}{% endmacro %}", "a parameter without a default");
	expect_syntax("{% for x in y recursive %}{% endfor %}", "recursive loops are not supported");
	expect_syntax("{% set 1 = 2 %}", "a name to assign to");
	expect_syntax("{{ 99999999999999999999 }}", "does not fit in 64 bits");
	expect_syntax("{{ '\\N{DASH}' }}", "\\N{...} escapes are not supported");
	expect_syntax("{{ '\\x4' }}", "truncated \\x escape");
	expect_syntax("{% raw %}never ended", "raw");
	expect_syntax("{{ a is defined is defined }}", "tests cannot be chained");
	expect_syntax("{% if true %}{% else %}{% elif x %}{% endif %}", "unexpected 'elif'");
	const char bad_utf8[] = "ok\n  \xff{{ x }}";
	char err[256];
	ck_assert_ptr_null(jinja_parse(bad_utf8, sizeof bad_utf8 - 1, err, sizeof err));
	ck_assert_str_eq(err, "line 2, column 3: the template is not valid UTF-8");
	const char nul[] = "a\0b";
	ck_assert_ptr_null(jinja_parse(nul, 3, err, sizeof err));
	ck_assert_str_eq(err, "line 1, column 2: the template holds a NUL byte");
	/* no err buffer is allowed; an empty template renders to nothing */
	ck_assert_ptr_null(jinja_parse("{{", 2, NULL, 0));
	expect_out("", "{}", "");
}
END_TEST

START_TEST(test_runtime_errors)
{
	expect_fail("{{ 'a' + 1 }}", NULL, JINJA_ERR_RUNTIME, "line 1, column 8: unsupported operand types for +: 'str' and 'int'");
	expect_fail("\n{{ x.y }}", NULL, JINJA_ERR_RUNTIME, "line 2, column 5: 'x' is undefined");
	expect_fail("{{ x[0] }}", NULL, JINJA_ERR_RUNTIME, "'x' is undefined");
	expect_fail("{{ x + 1 }}", NULL, JINJA_ERR_RUNTIME, "'x' is undefined");
	expect_fail("{{ x() }}", NULL, JINJA_ERR_RUNTIME, "'x' is undefined");
	expect_fail("{{ 1 / 0 }}", NULL, JINJA_ERR_RUNTIME, "division by zero");
	expect_fail("{{ 1 % 0 }}", NULL, JINJA_ERR_RUNTIME, "modulo by zero");
	expect_fail("{{ 9223372036854775807 + 1 }}", NULL, JINJA_ERR_RUNTIME, "integer overflow");
	expect_fail("{{ 1 < 'a' }}", NULL, JINJA_ERR_RUNTIME, "'<' is not supported between 'int' and 'str'");
	expect_fail("{{ 1 in 2 }}", NULL, JINJA_ERR_RUNTIME, "argument of type 'int' is not iterable");
	expect_fail("{% for x in nil %}{% endfor %}", NULL, JINJA_ERR_RUNTIME, "'NoneType' object is not iterable");
	expect_fail("{{ messages.append(1) }}", NULL, JINJA_ERR_RUNTIME, "access to attribute 'append' of 'list' object is unsafe");
	expect_fail("{{ d.update({}) }}", NULL, JINJA_ERR_RUNTIME, "'update' of 'dict' object is unsafe");
	expect_fail("{% set d.x = 1 %}", NULL, JINJA_ERR_RUNTIME, "not a namespace()");
	expect_fail("{% set a, b = [1] %}", NULL, JINJA_ERR_RUNTIME, "cannot unpack 1 values into 2 names");
	expect_fail("{{ n() }}", NULL, JINJA_ERR_RUNTIME, "'int' object is not callable");
	expect_fail("{{ [1][::0] }}", NULL, JINJA_ERR_RUNTIME, "slice step cannot be zero");
	expect_fail("{{ x | tojson }}", NULL, JINJA_ERR_RUNTIME, "Undefined is not JSON serializable");
	expect_fail("{{ 5 | length }}", NULL, JINJA_ERR_RUNTIME, "has no len()");
	expect_fail("{{ 'a'.split('') }}", NULL, JINJA_ERR_RUNTIME, "empty separator");
	expect_fail("{{ '{}'.format(1) }}", NULL, JINJA_ERR_RUNTIME, "str.format is not supported");
	expect_fail("{{ '%s' % 1 }}", NULL, JINJA_ERR_RUNTIME, "formatting of strings is not supported");
	expect_fail("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", NULL, JINJA_ERR_RUNTIME, "takes at most 1 argument");
	expect_fail("{% macro m(a) %}{% endmacro %}{{ m(b=2) }}", NULL, JINJA_ERR_RUNTIME, "has no parameter 'b'");
	expect_fail("{{ {[1]: 2} }}", NULL, JINJA_ERR_RUNTIME, "unhashable type: 'list'");
	expect_fail("{{ messages | map('nosuch') | list }}", NULL, JINJA_ERR_RUNTIME, "no filter named 'nosuch'");
	expect_fail("{{ [1, 'a'] | sort }}", NULL, JINJA_ERR_RUNTIME, "'<' is not supported");
	/* raise_exception: the template's own words, nothing added */
	expect_fail("{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no ' ~ m.role) }}"
	            "{% endif %}{% endfor %}", NULL, JINJA_ERR_RAISE, "no assistant");
	char err[64];
	jinja_status st;
	char *out = render_lim("{{ raise_exception('exactly this') }}", "{}", NULL, &st, err, sizeof err);
	ck_assert_ptr_null(out);
	ck_assert_int_eq(st, JINJA_ERR_RAISE);
	ck_assert_str_eq(err, "exactly this");
	/* a short err buffer is cut, never overrun */
	char tiny[8];
	out = render_lim("{{ raise_exception('a long message, longer than eight') }}", "{}", NULL, &st, tiny, sizeof tiny);
	ck_assert_int_eq(st, JINJA_ERR_RAISE);
	ck_assert_str_eq(tiny, "a long ");
}
END_TEST

START_TEST(test_api)
{
	char err[256];
	jinja_template *t = jinja_parse("{{ x | default('none given') }}", 31, err, sizeof err);
	ck_assert_ptr_nonnull(t);
	char *out;
	size_t len;
	/* no variables at all */
	ck_assert_int_eq(jinja_render(t, NULL, NULL, &out, &len, err, sizeof err), JINJA_OK);
	ck_assert_str_eq(out, "none given");
	free(out);
	/* variables that are not an object */
	json_t *arr = json_array();
	ck_assert_int_eq(jinja_render(t, arr, NULL, &out, &len, err, sizeof err), JINJA_ERR_RUNTIME);
	ck_assert_ptr_null(out);
	ck_assert_str_eq(err, "the variables are not a JSON object");
	json_decref(arr);
	jinja_free(t);
	jinja_free(NULL);
	/* the source need not be NUL-terminated */
	const char src[] = { '{', '{', ' ', '1', ' ', '}', '}', 'X' };
	t = jinja_parse(src, 7, err, sizeof err);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(jinja_render(t, NULL, NULL, &out, &len, err, sizeof err), JINJA_OK);
	ck_assert_str_eq(out, "1");
	free(out);
	jinja_free(t);
	/* JSON strings may hold NUL: the output holds it too, and out_len counts it */
	json_t *v = json_pack("{s:s%}", "s", "a\0b", (size_t)3);
	t = jinja_parse("[{{ s }}]", 9, err, sizeof err);
	ck_assert_int_eq(jinja_render(t, v, NULL, &out, &len, err, sizeof err), JINJA_OK);
	ck_assert_uint_eq(len, 5);
	ck_assert_int_eq(memcmp(out, "[a\0b]", 6), 0);
	free(out);
	jinja_free(t);
	json_decref(v);
	/* an object of many keys (indexed past 16): lookups, order and a key set twice */
	json_t *many = json_object();
	char key[16];
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof key, "k%d", i);
		json_object_set_new(many, key, json_integer(i));
	}
	v = json_pack("{s:o}", "d", many);
	const char *tpl = "{{ d | length }}|{{ d.k4999 }}|{{ d['k17'] }}|{{ (d | list)[:3] }}|{{ (d | list)[-1] }}|"
	                  "{{ 'k5000' in d }}|{% set ns = namespace(d) %}{% set ns.k3 = 'x' %}{{ ns.k3 }}{{ ns.k4 }}";
	t = jinja_parse(tpl, strlen(tpl), err, sizeof err);
	ck_assert_int_eq(jinja_render(t, v, NULL, &out, &len, err, sizeof err), JINJA_OK);
	ck_assert_str_eq(out, "5000|4999|17|['k0', 'k1', 'k2']|k4999|False|x4");
	free(out);
	jinja_free(t);
	json_decref(v);
	expect_out("{{ {'a': 1, 'b': 2, 'a': 3} }}", "{}", "{'a': 3, 'b': 2}");
}
END_TEST

START_TEST(test_limits)
{
	char err[256];
	jinja_status st;
	jinja_limits lim = { .max_steps = 100000 };
	/* a loop that would run 10^10 times */
	char *out = render_lim("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}",
	                       &lim, &st, err, sizeof err);
	ck_assert_int_eq(st, JINJA_ERR_LIMIT);
	ck_assert_msg(strstr(err, "step limit (100000)"), "%s", err);
	/* output */
	jinja_limits olim = { .max_output = 1000 };
	out = render_lim("{% for i in range(1000) %}{{ 'xx' }}{% endfor %}", "{}", &olim, &st, err, sizeof err);
	ck_assert_int_eq(st, JINJA_ERR_LIMIT);
	ck_assert_msg(strstr(err, "output passed its limit (1000 bytes)"), "%s", err);
	out = render_lim("{% for i in range(500) %}{{ 'xx' }}{% endfor %}", "{}", &olim, &st, err, sizeof err);
	ck_assert_int_eq(st, JINJA_OK);
	ck_assert_uint_eq(strlen(out), 1000);
	free(out);
	/* memory: a string that doubles */
	jinja_limits mlim = { .max_memory = 1 << 20 };
	out = render_lim("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "{}",
	                 &mlim, &st, err, sizeof err);
	ck_assert_int_eq(st, JINJA_ERR_LIMIT);
	ck_assert_msg(strstr(err, "memory limit"), "%s", err);
	out = render_lim("{{ 'x' * 10000000 }}", "{}", &mlim, &st, err, sizeof err);
	ck_assert_int_eq(st, JINJA_ERR_LIMIT);
	/* memory held only for a while is given back: many short-lived strings stay within a small limit */
	out = render_lim("{% for i in range(20000) %}{% set s = 'abcdefgh' * 100 %}{% endfor %}done", "{}", &mlim, &st, err,
	                 sizeof err);
	ck_assert_msg(st == JINJA_OK, "%s", err);
	free(out);
	/* range, as the sandbox bounds it */
	out = render_lim("{{ range(100001) | length }}", "{}", NULL, &st, err, sizeof err);
	ck_assert_int_eq(st, JINJA_ERR_LIMIT);
	ck_assert_msg(strstr(err, "at most 100000"), "%s", err);
	/* macros calling themselves without end */
	out = render_lim("{% macro f(k) %}{{ f(k + 1) }}{% endmacro %}{{ f(0) }}", "{}", NULL, &st, err, sizeof err);
	ck_assert_int_eq(st, JINJA_ERR_LIMIT);
	ck_assert_msg(strstr(err, "macros called deeper"), "%s", err);
	/* values nested deeper than 256 levels, built by the template or given */
	out = render_lim("{% set ns = namespace(x=1) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
	                 "{}", NULL, &st, err, sizeof err);
	ck_assert_int_eq(st, JINJA_ERR_LIMIT);
	ck_assert_msg(strstr(err, "nested deeper"), "%s", err);
	out = render_lim("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "{}", NULL, &st, err, sizeof err);
	ck_assert_int_eq(st, JINJA_ERR_LIMIT);
	char deep[2000];
	size_t k = 0;
	k += (size_t)sprintf(deep, "{\"v\": ");
	for (int i = 0; i < 300; i++) deep[k++] = '[';
	for (int i = 0; i < 300; i++) deep[k++] = ']';
	deep[k++] = '}';
	deep[k] = 0;
	out = render_lim("{{ v | length }}", deep, NULL, &st, err, sizeof err);
	ck_assert_int_eq(st, JINJA_ERR_LIMIT);
	/* the template itself nested too deep: refused when parsed */
	char nest[1400];
	k = 0;
	k += (size_t)sprintf(nest, "{{ ");
	for (int i = 0; i < 300; i++) nest[k++] = '(';
	nest[k++] = '1';
	for (int i = 0; i < 300; i++) nest[k++] = ')';
	strcpy(nest + k, " }}");
	expect_syntax(nest, "deeper than");
	char ifs[8000];
	k = 0;
	for (int i = 0; i < 200; i++) k += (size_t)sprintf(ifs + k, "{%% if true %%}");
	for (int i = 0; i < 200; i++) k += (size_t)sprintf(ifs + k, "{%% endif %%}");
	expect_syntax(ifs, "deeper than");
	k = 0;
	k += (size_t)sprintf(nest, "{{ ");
	for (int i = 0; i < 300; i++) { nest[k++] = 'n'; nest[k++] = 'o'; nest[k++] = 't'; nest[k++] = ' '; }
	strcpy(nest + k, "1 }}");
	expect_syntax(nest, "deeper than");
	/* nesting that only running reaches: a macro recursing inside 100 levels of brackets */
	char rec[1200];
	k = (size_t)sprintf(rec, "{%% macro f(k) %%}{{ ");
	for (int i = 0; i < 100; i++) rec[k++] = '[';
	k += (size_t)sprintf(rec + k, "f(k + 1) if k < 60 else 0");
	for (int i = 0; i < 100; i++) rec[k++] = ']';
	strcpy(rec + k, " }}{% endmacro %}{{ f(0) }}");
	out = render_lim(rec, "{}", NULL, &st, err, sizeof err);
	ck_assert_int_eq(st, JINJA_ERR_LIMIT);
	ck_assert_msg(strstr(err, "evaluation nested deeper than 512 levels"), "%s", err);
	(void)out;
}
END_TEST

/* The Qwen3 template's shape (tools, namespace, messages[::-1], string methods) over a long conversation. */
static const char qwen_like[] =
	"{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
	"{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
	"{%- if ns.multi_step_tool and message.role == 'user' and not(message.content.startswith('<tool_response>')) %}"
	"{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}"
	"{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
	"{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

START_TEST(test_long_conversation)
{
	json_t *msgs = json_array();
	for (int i = 0; i < 10000; i++)
		json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", i % 2 ? "assistant" : "user", "content",
		                                      "a message of some length, as people write them"));
	json_t *vars = json_pack("{s:o,s:b}", "messages", msgs, "add_generation_prompt", 1);
	char err[256];
	jinja_template *t = jinja_parse(qwen_like, strlen(qwen_like), err, sizeof err);
	ck_assert_msg(t != NULL, "%s", err);
	char *out;
	size_t len;
	ck_assert_msg(jinja_render(t, vars, NULL, &out, &len, err, sizeof err) == JINJA_OK, "%s", err);
	ck_assert_uint_eq(len, 10000 * (strlen("<|im_start|>user\n<|im_end|>\n") +
	                                strlen("a message of some length, as people write them")) + 5000 * 5 +
	                       strlen("<|im_start|>assistant\n"));
	free(out);
	jinja_free(t);
	json_decref(vars);
}
END_TEST

typedef struct render_job {
	const jinja_template *t;
	json_t *vars;
	char *out;
	int ok;
} render_job;

static void *render_thread(void *arg)
{
	render_job *j = arg;
	char err[128];
	size_t len;
	j->ok = 1;
	for (int i = 0; i < 20 && j->ok; i++) {
		char *out;
		if (jinja_render(j->t, j->vars, NULL, &out, &len, err, sizeof err) != JINJA_OK) { j->ok = 0; break; }
		if (j->out && strcmp(out, j->out) != 0) j->ok = 0;
		free(j->out);
		j->out = out;
	}
	return NULL;
}

START_TEST(test_threads)
{
	char err[256];
	jinja_template *t = jinja_parse(qwen_like, strlen(qwen_like), err, sizeof err);
	ck_assert_ptr_nonnull(t);
	json_t *vars = json_loads(conv, 0, NULL);
	render_job jobs[4] = { { 0 } };
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		jobs[i].t = t;
		jobs[i].vars = vars;
		ck_assert_int_eq(pthread_create(&th[i], NULL, render_thread, &jobs[i]), 0);
	}
	for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
	for (int i = 0; i < 4; i++) {
		ck_assert(jobs[i].ok);
		ck_assert_str_eq(jobs[i].out, jobs[0].out);
	}
	ck_assert(strstr(jobs[0].out, "<|im_start|>user\nhi<|im_end|>\n") != NULL);
	for (int i = 0; i < 4; i++) free(jobs[i].out);
	json_decref(vars);
	jinja_free(t);
}
END_TEST

static Suite *jinja_suite(void)
{
	Suite *s = suite_create("jinja");
	TCase *tc = tcase_create("language");
	tcase_add_test(tc, test_whitespace);
	tcase_add_test(tc, test_expressions);
	tcase_add_test(tc, test_statements);
	tcase_add_test(tc, test_builtins);
	suite_add_tcase(s, tc);
	tc = tcase_create("errors");
	tcase_add_test(tc, test_syntax_errors);
	tcase_add_test(tc, test_runtime_errors);
	tcase_add_test(tc, test_api);
	suite_add_tcase(s, tc);
	tc = tcase_create("limits");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_long_conversation);
	tcase_add_test(tc, test_threads);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(jinja_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
