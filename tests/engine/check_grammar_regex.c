/* tests/engine/check_grammar_regex.c — Check suite for engine/grammar/regex: the GBNF written for a table of patterns, each
 * refusal naming its construct and offset, rule names and appending, choices and their escapes, and odd inputs (the
 * empty pattern, megabyte patterns, 1000 nested groups, nested and nullable repetitions, seeded random bytes), every
 * grammar checked for well-formed GBNF. What the grammars mean is tested against Python's re in
 * tests/test_grammar_regex.sh. */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/regex.h"
#include "tests/test_rng.h"

/* ---- a structural check of GBNF as regex.c writes it: one rule a line, `name ::= body`, literals and classes
 * closed, parentheses balanced, every name used defined exactly once, root (or the given name) among them ---- */

static bool name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
}

#define MAX_NAMES 20000

static bool well_formed(const char *g, const char *root, char *why, size_t why_len)
{
	static char defined[MAX_NAMES][48], used[MAX_NAMES][48];
	int n_def = 0, n_used = 0;
	const char *p = g;
	if (!*p) {
		snprintf(why, why_len, "no rules");
		return false;
	}
	while (*p) {
		const char *name = p;
		while (name_char(*p))
			p++;
		size_t nl = (size_t)(p - name);
		if (nl == 0 || nl >= 48 || strncmp(p, " ::= ", 5) != 0) {
			snprintf(why, why_len, "line does not start with 'name ::= ': %.40s", name);
			return false;
		}
		for (int i = 0; i < n_def; i++)
			if (strlen(defined[i]) == nl && !strncmp(defined[i], name, nl)) {
				snprintf(why, why_len, "rule %.*s defined twice", (int)nl, name);
				return false;
			}
		if (n_def == MAX_NAMES)
			return snprintf(why, why_len, "too many rules"), false;
		memcpy(defined[n_def], name, nl);
		defined[n_def++][nl] = 0;
		p += 5;
		int depth = 0;
		bool item = false;   /* something since the last '(' or '|' (a body is never an empty alternative) */
		while (*p && *p != '\n') {
			char ch = *p;
			if (ch == '"' || ch == '[') {
				char close = ch == '"' ? '"' : ']';
				for (p++; *p && *p != close; p++)
					if (*p == '\\' && p[1])
						p++;
					else if (*p == '\n')
						return snprintf(why, why_len, "newline inside %c", ch), false;
				if (*p != close)
					return snprintf(why, why_len, "unclosed %c", ch), false;
				p++;
				item = true;
			} else if (name_char(ch)) {
				const char *u = p;
				while (name_char(*p))
					p++;
				size_t ul = (size_t)(p - u);
				if (ul >= 48 || n_used == MAX_NAMES)
					return snprintf(why, why_len, "name too long"), false;
				memcpy(used[n_used], u, ul);
				used[n_used++][ul] = 0;
				item = true;
			} else if (ch == '(') {
				depth++, p++, item = false;
			} else if (ch == ')') {
				if (--depth < 0 || !item)
					return snprintf(why, why_len, "unbalanced or empty ()"), false;
				p++;
			} else if (ch == '|') {
				if (!item)
					return snprintf(why, why_len, "empty alternative"), false;
				p++, item = false;
			} else if (ch == '*' || ch == '+' || ch == '?') {
				if (!item)
					return snprintf(why, why_len, "postfix with nothing before it"), false;
				p++;
			} else if (ch == '{') {
				if (!item)
					return snprintf(why, why_len, "count with nothing before it"), false;
				while (*p && *p != '}')
					p++;
				if (*p)
					p++;
			} else if (ch == ' ') {
				p++;
			} else {
				return snprintf(why, why_len, "unexpected %c", ch), false;
			}
		}
		if (depth != 0 || !item)
			return snprintf(why, why_len, "unbalanced () or empty body in rule %.47s", defined[n_def - 1]), false;
		if (*p != '\n')
			return snprintf(why, why_len, "last line without a newline"), false;
		p++;
	}
	for (int i = 0; i < n_used; i++) {
		bool ok = false;
		for (int j = 0; j < n_def && !ok; j++)
			ok = !strcmp(used[i], defined[j]);
		if (!ok)
			return snprintf(why, why_len, "rule %.47s used, not defined", used[i]), false;
	}
	if (strcmp(defined[0], root) != 0)
		return snprintf(why, why_len, "first rule is %.47s, not %.47s", defined[0], root), false;
	return true;
}

static bool valid_utf8(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		int n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
		if (!n)
			return false;
		for (int i = 1; i < n; i++)
			if ((p[i] & 0xC0) != 0x80)
				return false;
		p += n;
	}
	return true;
}

/* regex_to_gbnf on a C string, checked well formed; the caller frees it. */
static char *gbnf_of(const char *re)
{
	char err[512], why[256];
	char *g = regex_to_gbnf(re, strlen(re), err, sizeof err);
	ck_assert_msg(g != NULL, "'%s' refused: %s", re, err);
	ck_assert_msg(well_formed(g, "root", why, sizeof why), "'%s' gives bad GBNF (%s):\n%s", re, why, g);
	return g;
}

/* ---- outputs ---- */

static const struct {
	const char *re, *gbnf;
} outputs[] = {
	{ "abc", "root ::= \"abc\"\n" },
	{ "a|b", "root ::= \"a\" | \"b\"\n" },
	{ "ab*", "root ::= \"a\" \"b\"*\n" },
	{ "(ab)*", "root ::= (\"ab\")*\n" },
	{ "(?:ab)+c", "root ::= (\"ab\")+ \"c\"\n" },
	{ "a?", "root ::= \"a\"?\n" },
	{ "a{3}", "root ::= \"a\"{3}\n" },
	{ "a{2,}", "root ::= \"a\"{2,}\n" },
	{ "a{2,5}", "root ::= \"a\"{2,5}\n" },
	{ "a{0,1}", "root ::= \"a\"?\n" },
	{ "a{1}", "root ::= \"a\"\n" },
	{ "a{0}", "root ::= \"\"\n" },
	{ "a*?b+?c??d{1,2}?", "root ::= \"a\"* \"b\"+ \"c\"? \"d\"{1,2}\n" },
	/* nested and nullable repetitions: every unbounded body matches something non-empty */
	{ "(a*)*", "root ::= \"a\"*\n" },
	{ "(a*)+", "root ::= \"a\"*\n" },
	{ "(a+)*", "root ::= \"a\"*\n" },
	{ "(a?)*", "root ::= \"a\"*\n" },
	{ "(a+)?", "root ::= \"a\"*\n" },
	{ "(a|)+", "root ::= \"a\"*\n" },
	{ "(a*){2,3}", "root ::= \"a\"*\n" },
	{ "(a?){3}", "root ::= \"a\"{0,3}\n" },
	{ "(a+){2,}", "root ::= \"a\"{2,}\n" },
	{ "(a+){3}", "root ::= \"a\"{3,}\n" },
	{ "(a+){0,3}", "root ::= \"a\"*\n" },
	{ "(a?b?)*", "root ::= (\"a\" \"b\"? | \"b\")*\n" },
	{ "(a?b?c?)*", "root ::= (\"a\" \"b\"? \"c\"? | \"b\" \"c\"? | \"c\")*\n" },
	{ "(a?b?c?d?)*", "root ::= (\"a\" \"b\"? root-1 | \"b\" root-1 | \"c\" \"d\"? | \"d\")*\nroot-1 ::= \"c\"? \"d\"?\n" },
	{ "(a{2}){3}", "root ::= (\"a\"{2}){3}\n" },
	{ "x(y(z(w)*)*)*", "root ::= \"x\" (\"y\" (\"z\" \"w\"*)*)*\n" },
	/* classes, Perl classes, escapes */
	{ ".", "root ::= [^\\x0A]\n" },
	{ "[^\\n]", "root ::= [^\\x0A]\n" },
	{ "\\d\\D", "root ::= [0-9] [^0-9]\n" },
	{ "\\w", "root ::= [0-9A-Z\\x5Fa-z]\n" },
	{ "\\W", "root ::= [^0-9A-Z\\x5Fa-z]\n" },
	{ "\\s", "root ::= [\\x09\\x0A\\x0C\\x0D ]\n" },
	{ "\\S", "root ::= [^\\x09\\x0A\\x0C\\x0D ]\n" },
	{ "[a-z0-9_]", "root ::= [0-9\\x5Fa-z]\n" },
	{ "[^\"\\\\]", "root ::= [^\\x22\\x5C]\n" },
	{ "[\\d\\s]", "root ::= [\\x09\\x0A\\x0C\\x0D 0-9]\n" },
	{ "[\\D]", "root ::= [^0-9]\n" },
	{ "[^\\D]", "root ::= [0-9]\n" },
	{ "[-a]", "root ::= [\\x2Da]\n" },
	{ "[a-]", "root ::= [\\x2Da]\n" },
	{ "[]a]", "root ::= [\\x5Da]\n" },
	{ "[^]a]", "root ::= [^\\x5Da]\n" },
	{ "[a-c-e]", "root ::= [\\x2Da-ce]\n" },
	{ "[.]", "root ::= \".\"\n" },
	{ "[a]", "root ::= \"a\"\n" },
	{ "[[:alpha:]_-]", "root ::= [\\x2DA-Z\\x5Fa-z]\n" },
	{ "[[:^digit:]]", "root ::= [^0-9]\n" },
	{ "[\\x{0}-\\x{10FFFF}]", "root ::= [\\x00-\\uD7FF\\uE000-\\U0010FFFF]\n" },
	{ "[\\s\\S]", "root ::= [\\x00-\\uD7FF\\uE000-\\U0010FFFF]\n" },
	{ "[\\x{D000}-\\x{E000}]", "root ::= [\\uD000-\\uD7FF\\uE000]\n" },
	{ "[\\b]", "root ::= \"\\x08\"\n" },
	{ "\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/\\-\\ ", "root ::= \".*+?()[]{}|^$\\\\/- \"\n" },
	{ "\"\\\\", "root ::= \"\\\"\\\\\"\n" },
	{ "\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80", "root ::= \"\\u00E9\\u65E5\\U0001F600\"\n" },
	{ "\\t\\n\\r\\f\\v\\a\\x01\\x7f\\0\\012\\u00e9\\x{1F600}", "root ::= \"\\t\\n\\r\\x0C\\x0B\\x07\\x01\\x7F\\x00\\n\\u00E9\\U0001F600\"\n" },
	/* anchors, empty alternatives, groups */
	{ "", "root ::= \"\"\n" },
	{ "^$", "root ::= \"\"\n" },
	{ "()", "root ::= \"\"\n" },
	{ "()*", "root ::= \"\"\n" },
	{ "^abc$", "root ::= \"abc\"\n" },
	{ "\\Aabc\\z", "root ::= \"abc\"\n" },
	{ "^a|b$", "root ::= \"a\" | \"b\"\n" },
	{ "a|b|", "root ::= (\"a\" | \"b\")?\n" },
	{ "(|a)", "root ::= \"a\"?\n" },
	{ "|", "root ::= \"\"\n" },
	{ "((a|b)|(c|d))", "root ::= \"a\" | \"b\" | \"c\" | \"d\"\n" },
	{ "(?P<year>\\d{4})-(?<m>\\d\\d)", "root ::= [0-9]{4} \"-\" [0-9] [0-9]\n" },
	/* braces that are not counts are text, as in RE2 and Python */
	{ "a{", "root ::= \"a{\"\n" },
	{ "x{a}", "root ::= \"x{a}\"\n" },
	{ "{}", "root ::= \"{}\"\n" },
	{ "a}", "root ::= \"a}\"\n" },
	{ "]", "root ::= \"]\"\n" },
};

START_TEST(test_outputs)
{
	for (size_t i = 0; i < sizeof outputs / sizeof *outputs; i++) {
		char *g = gbnf_of(outputs[i].re);
		ck_assert_msg(!strcmp(g, outputs[i].gbnf), "'%s':\n got  %s want %s", outputs[i].re, g, outputs[i].gbnf);
		free(g);
	}
}
END_TEST

/* ---- refusals ---- */

static const struct {
	const char *re, *msg;   /* msg: a part of the error */
} refusals[] = {
	{ "a(?i)b", "regex flag group '(?i' at offset 1 is not supported" },
	{ "(?i:a)", "flag group '(?i' at offset 0" },
	{ "(?-s)a", "flag group '(?-' at offset 0" },
	{ "(?s)a", "flag group '(?s' at offset 0" },
	{ "(a)\\1", "backreference '\\1' at offset 3" },
	{ "(a)\\9", "backreference '\\9' at offset 3" },
	{ "(?P<n>a)(?P=n)", "backreference '(?P=' at offset 8" },
	{ "(a)\\k<n>", "backreference '\\k' at offset 3" },
	{ "x(?=y)", "lookahead '(?=' at offset 1" },
	{ "x(?!y)", "lookahead '(?!' at offset 1" },
	{ "(?<=a)b", "lookbehind '(?<=' at offset 0" },
	{ "(?<!a)b", "lookbehind '(?<!' at offset 0" },
	{ "(?>a)", "atomic group '(?>' at offset 0" },
	{ "(?#c)a", "comment group '(?#' at offset 0" },
	{ "(?", "group '(?' at offset 0" },
	{ "(?P<1a>x)", "group name at offset 4" },
	{ "(?<>x)", "group name at offset 3" },
	{ "ab\\b", "word boundary '\\b' at offset 2" },
	{ "\\Bx", "word boundary '\\B' at offset 0" },
	{ "a^b", "anchor '^' at offset 1 is not supported (only at the very start)" },
	{ "(^a)", "anchor '^' at offset 1" },
	{ "a$b", "anchor '$' at offset 1 is not supported (only at the very end)" },
	{ "(a$)", "anchor '$' at offset 2" },
	{ "a\\Ab", "anchor '\\A' at offset 1" },
	{ "a\\zb", "anchor '\\z' at offset 1" },
	{ "a\\Z", "anchor '\\Z' at offset 1" },
	{ "a++", "possessive quantifier '++' at offset 1" },
	{ "a*+", "possessive quantifier '*+' at offset 1" },
	{ "a?+", "possessive quantifier '?+' at offset 1" },
	{ "a{2}+", "possessive quantifier '{2}+' at offset 1" },
	{ "a**", "quantifier at offset 2 follows another" },
	{ "a*??", "quantifier at offset 3 follows another" },
	{ "a{2}{3}", "quantifier at offset 4 follows another" },
	{ "*a", "quantifier at offset 0 has nothing to repeat" },
	{ "a|+b", "quantifier at offset 2 has nothing to repeat" },
	{ "(*a)", "quantifier at offset 1 has nothing to repeat" },
	{ "^*a", "quantifier at offset 1 has nothing to repeat" },
	{ "{2}", "quantifier at offset 0 has nothing to repeat" },
	{ "a{,3}", "repetition '{,' at offset 1 is ambiguous" },
	{ "a{,}", "repetition '{,' at offset 1 is ambiguous" },
	{ "\\pL", "Unicode class '\\p' at offset 0" },
	{ "x\\p{Greek}", "Unicode class '\\p' at offset 1" },
	{ "[\\P{L}]", "Unicode class '\\P' at offset 1" },
	{ "a{1001}", "repetition count at offset 1 is over 1000" },
	{ "a{2,1001}", "repetition count at offset 1 is over 1000" },
	{ "a{99999999999999999999}", "repetition count at offset 1 is over 1000" },
	{ "a{3,2}", "repetition {3,2} at offset 1 has its minimum over its maximum" },
	{ "(a{10}){101}", "nested repetition counts at offset 7 multiply past 1000" },
	{ "((a{10}){10}b){11}", "nested repetition counts at offset 14" },
	{ "[^\\x00-\\x{10FFFF}]", "empty character class at offset 0" },
	{ "[\\x{D800}-\\x{DFFF}]", "empty character class at offset 0" },
	{ "[^\\s\\S]", "empty character class at offset 0" },
	{ "[]", "missing ']' for '[' at offset 0" },
	{ "ab[cd", "missing ']' for '[' at offset 2" },
	{ "[z-a]", "class range at offset 1 runs backwards" },
	{ "[\\d-z]", "class range at offset 1 starts at a class" },
	{ "[a-\\d]", "class range at offset 1 ends at a class" },
	{ "[[:alpha:]-z]", "class range at offset 1 starts at a class" },
	{ "[[:foo:]]", "POSIX class '[:foo:]' at offset 1 is not supported" },
	{ "[[:alpha]", "POSIX class '[:' at offset 1 has no ':]'" },
	{ "(ab", "missing ')' for '(' at offset 0" },
	{ "((a)", "missing ')' for '(' at offset 0" },
	{ "ab)", "unbalanced ')' at offset 2" },
	{ "(a))", "unbalanced ')' at offset 3" },
	{ ")", "unbalanced ')' at offset 0" },
	{ "ab\\", "trailing backslash at offset 2" },
	{ "[a\\", "trailing backslash at offset 2" },
	{ "\\q", "escape '\\q' at offset 0 is not supported" },
	{ "\\e", "escape '\\e' at offset 0 is not supported" },
	{ "\\x4", "escape '\\x' at offset 0 needs two hex digits" },
	{ "\\u12g4", "escape '\\u' at offset 0 needs four hex digits" },
	{ "\\x{}", "escape '\\x{' at offset 0 needs hex digits" },
	{ "\\x{110000}", "past U+10FFFF" },
	{ "\\x{FFFFFFFFFFFF}", "past U+10FFFF" },
	{ "\\uD800", "surrogate (U+D800)" },
	{ "\\Qa\\E", "quoting '\\Q' at offset 0" },
	{ "\\C", "single byte '\\C' at offset 0" },
	{ "ab\xff", "not valid UTF-8 at offset 2" },
	{ "\xc3", "not valid UTF-8 at offset 0" },
	{ "a\xc0\x80", "not valid UTF-8 at offset 1" },         /* an overlong NUL */
	{ "\xed\xa0\x80", "not valid UTF-8 at offset 0" },      /* a surrogate written in UTF-8 */
	{ "\xf4\x90\x80\x80", "not valid UTF-8 at offset 0" },  /* past U+10FFFF */
};

START_TEST(test_refusals)
{
	char err[512];
	for (size_t i = 0; i < sizeof refusals / sizeof *refusals; i++) {
		const char *re = refusals[i].re;
		strcpy(err, "unset");
		char *g = regex_to_gbnf(re, strlen(re), err, sizeof err);
		ck_assert_msg(g == NULL, "'%s' was accepted:\n%s", re, g ? g : "");
		ck_assert_msg(strstr(err, refusals[i].msg) != NULL, "'%s': error '%s' lacks '%s'", re, err, refusals[i].msg);
		ck_assert_msg(valid_utf8(err), "'%s': the error is not UTF-8", re);
	}
}
END_TEST

/* regex_gbnf appends a rule of the given name (helpers name-N) after what the buffer holds; a refusal leaves the
 * caller to discard; the name is checked. */
START_TEST(test_regex_gbnf)
{
	char err[256], why[256];
	aah_bytebuf b = { 0 };
	ck_assert_int_eq(aah_bytebuf_put(&b, "root ::= pat \"!\"\n", 17), 0);
	ck_assert_int_eq(regex_gbnf(&b, "pat", "(a?b?c?d?)+", 11, err, sizeof err), 0);
	ck_assert_int_eq(aah_bytebuf_put(&b, "", 1), 0);
	ck_assert_str_eq((char *)b.p, "root ::= pat \"!\"\n"
	                              "pat ::= (\"a\" \"b\"? pat-1 | \"b\" pat-1 | \"c\" \"d\"? | \"d\")*\n"
	                              "pat-1 ::= \"c\"? \"d\"?\n");
	ck_assert_msg(well_formed((char *)b.p, "root", why, sizeof why), "%s", why);
	b.n--;
	/* a second pattern under another name: its helpers do not collide */
	ck_assert_int_eq(regex_gbnf(&b, "x_2", "(a?b?c?d?)+", 11, err, sizeof err), 0);
	ck_assert_int_eq(aah_bytebuf_put(&b, "", 1), 0);
	ck_assert_ptr_nonnull(strstr((char *)b.p, "x_2-1 ::= \"c\"? \"d\"?\n"));
	ck_assert_msg(well_formed((char *)b.p, "root", why, sizeof why), "%s", why);
	size_t before = b.n;
	ck_assert_int_eq(regex_gbnf(&b, "bad", "a(", 2, err, sizeof err), -1);
	ck_assert_str_eq(err, "regex missing ')' for '(' at offset 1");
	ck_assert_uint_ge(b.n, before);   /* the caller discards: out may hold a part */
	ck_assert_int_eq(regex_gbnf(&b, "a b", "a", 1, err, sizeof err), -1);
	ck_assert_ptr_nonnull(strstr(err, "rule name 'a b'"));
	ck_assert_int_eq(regex_gbnf(&b, "", "a", 1, err, sizeof err), -1);
	ck_assert_int_eq(regex_gbnf(&b, NULL, "a", 1, err, sizeof err), -1);
	/* a NUL inside the pattern is a character like any other; err may be NULL */
	b.n = 0;
	ck_assert_int_eq(regex_gbnf(&b, "n", "a\0b", 3, NULL, 0), 0);
	ck_assert_int_eq(aah_bytebuf_put(&b, "", 1), 0);
	ck_assert_str_eq((char *)b.p, "n ::= \"a\\x00b\"\n");
	ck_assert_int_eq(regex_gbnf(&b, "n", "(", 1, NULL, 0), -1);
	ck_assert_int_eq(regex_gbnf(&b, "n", NULL, 0, err, sizeof err), 0);
	aah_bytebuf_free(&b);
}
END_TEST

/* ---- choices ---- */

START_TEST(test_choices)
{
	char err[256], why[256];
	const char *s1[] = { "yes", "no" };
	size_t l1[] = { 3, 2 };
	char *g = choice_to_gbnf(s1, l1, 2, err, sizeof err);
	ck_assert_str_eq(g, "root ::= \"yes\" | \"no\"\n");
	free(g);
	/* quotes, backslashes, control characters, a NUL, the empty string, non-ASCII: all escaped as code points */
	const char *s2[] = { "a\"b", "c\\d", "", "\t\n\r\x01\x7f", "x\0y", "\xc3\xa9\xf0\x9f\x98\x80", "#[]" };
	size_t l2[] = { 3, 3, 0, 5, 3, 6, 3 };
	g = choice_to_gbnf(s2, l2, 7, err, sizeof err);
	ck_assert_str_eq(g, "root ::= \"a\\\"b\" | \"c\\\\d\" | \"\" | \"\\t\\n\\r\\x01\\x7F\" | \"x\\x00y\" | "
	                    "\"\\u00E9\\U0001F600\" | \"#[]\"\n");
	ck_assert_msg(well_formed(g, "root", why, sizeof why), "%s", why);
	free(g);
	ck_assert_ptr_null(choice_to_gbnf(s1, l1, 0, err, sizeof err));
	ck_assert_str_eq(err, "no choices: at least one string is needed");
	const char *s3[] = { "ok", "bad\xff" };
	size_t l3[] = { 2, 4 };
	ck_assert_ptr_null(choice_to_gbnf(s3, l3, 2, err, sizeof err));
	ck_assert_str_eq(err, "choice 1 is not valid UTF-8 at byte 3");
	const char *s4[] = { "\xed\xa0\x80" };   /* a surrogate written in UTF-8 */
	size_t l4[] = { 3 };
	ck_assert_ptr_null(choice_to_gbnf(s4, l4, 1, err, sizeof err));
	ck_assert_ptr_null(choice_to_gbnf(NULL, l1, 2, err, sizeof err));
	/* many choices: one rule, bounded like a pattern */
	enum { N = 5000 };
	const char **many = malloc(N * sizeof *many);
	size_t *ml = malloc(N * sizeof *ml);
	for (int i = 0; i < N; i++)
		many[i] = "choice", ml[i] = 6;
	g = choice_to_gbnf(many, ml, N, err, sizeof err);
	ck_assert_ptr_nonnull(g);
	ck_assert_uint_eq(strlen(g), strlen("root ::= \n") + N * strlen("\"choice\"") + (N - 1) * 3);
	free(g);
	static char big[600000];
	memset(big, 'x', sizeof big);
	many[0] = many[1] = big, ml[0] = ml[1] = sizeof big;
	ck_assert_ptr_null(choice_to_gbnf(many, ml, 2, err, sizeof err));
	ck_assert_ptr_nonnull(strstr(err, "choices would become more than"));
	free(many);
	free(ml);
}
END_TEST

/* ---- odd inputs ---- */

static char *repeat_str(const char *unit, size_t times, const char *prefix, const char *suffix)
{
	size_t ul = strlen(unit), pl = strlen(prefix), sl = strlen(suffix);
	char *s = malloc(pl + ul * times + sl + 1);
	ck_assert_ptr_nonnull(s);
	memcpy(s, prefix, pl);
	for (size_t i = 0; i < times; i++)
		memcpy(s + pl + i * ul, unit, ul);
	memcpy(s + pl + ul * times, suffix, sl + 1);
	return s;
}

START_TEST(test_long)
{
	char err[256];
	/* half a megabyte of text: one literal */
	char *re = repeat_str("a", 500000, "", "");
	char *g = gbnf_of(re);
	ck_assert_uint_eq(strlen(g), strlen("root ::= \"\"\n") + 500000);
	free(g);
	free(re);
	/* past the bound on the pattern */
	re = repeat_str("a", (1u << 20) + 1, "", "");
	ck_assert_ptr_null(regex_to_gbnf(re, strlen(re), err, sizeof err));
	ck_assert_ptr_nonnull(strstr(err, "longer than"));
	free(re);
	/* a pattern under the bound whose GBNF is over it: é is 2 bytes in, \u00E9 6 out */
	re = repeat_str("\xc3\xa9", 200000, "", "");
	ck_assert_ptr_null(regex_to_gbnf(re, strlen(re), err, sizeof err));
	ck_assert_ptr_nonnull(strstr(err, "regex would become more than 1048576 bytes of GBNF"));
	free(re);
	/* 20000 alternatives, 10000 classes */
	re = repeat_str("ab|", 20000, "", "c");
	free(gbnf_of(re));
	free(re);
	re = repeat_str("[a-f\\d]{1,3}", 10000, "", "");
	free(gbnf_of(re));
	free(re);
}
END_TEST

START_TEST(test_nesting)
{
	char err[256];
	/* 1000 groups open at once is the bound; deep inline nesting moves into helper rules */
	char *open = repeat_str("(", 1000, "", "a");
	char *re = repeat_str(")", 1000, open, "");
	char *g = gbnf_of(re);
	ck_assert_str_eq(g, "root ::= \"a\"\n");
	free(g);
	free(re);
	free(open);
	open = repeat_str("(", 1001, "", "a");
	re = repeat_str(")", 1001, open, "");
	ck_assert_ptr_null(regex_to_gbnf(re, strlen(re), err, sizeof err));
	ck_assert_str_eq(err, "regex groups nested deeper than 1000 at offset 1000");
	free(re);
	free(open);
	/* 1000 levels of (a|(…)+): each level must stay a level, in rules of bounded depth */
	open = repeat_str("(a|", 999, "", "b");
	re = repeat_str(")+", 999, open, "");
	g = gbnf_of(re);
	ck_assert_uint_lt(strlen(g), 100000);
	int rules = 0, deepest = 0, depth = 0;   /* no literal here holds a parenthesis */
	for (const char *p = g; *p; p++) {
		rules += *p == '\n';
		depth = *p == '\n' ? 0 : depth + (*p == '(') - (*p == ')');
		deepest = depth > deepest ? depth : deepest;
	}
	ck_assert_int_gt(rules, 10);
	ck_assert_int_le(deepest, 30);
	free(g);
	free(re);
	free(open);
	/* stars on stars on stars fold to one */
	open = repeat_str("(", 500, "", "a*");
	re = repeat_str(")*", 500, open, "");
	g = gbnf_of(re);
	ck_assert_str_eq(g, "root ::= \"a\"*\n");
	free(g);
	free(re);
	free(open);
	/* a long nullable body under a star: linear output (a shared suffix chain, one helper rule a link) */
	re = repeat_str("a?", 3000, "(", ")*");
	g = gbnf_of(re);
	ck_assert_uint_lt(strlen(g), 200000);
	free(g);
	free(re);
	re = repeat_str("(b|c?)d?", 2000, "(", ")+");
	g = gbnf_of(re);
	ck_assert_uint_lt(strlen(g), 400000);
	free(g);
	free(re);
	/* nested nullable repetitions */
	g = gbnf_of("((a?b?)*(c?d?)+)*((e|)(f|)){0,4}");
	free(g);
	/* counts: a product of 1000 is allowed, {1000} of a nullable body folds */
	free(gbnf_of("((a{10}){10}){10}"));
	g = gbnf_of("(a?){1000}");
	ck_assert_str_eq(g, "root ::= \"a\"{0,1000}\n");
	free(g);
}
END_TEST

/* Seeded random patterns over the metacharacters: accepted ones are well-formed GBNF under the bound, refused ones
 * say where (every message has "offset" or names a bound), no crash or hang. */
START_TEST(test_random)
{
	static const char *const pieces[] = {
		"a", "b", "\xc3\xa9", "(", ")", "(?:", "(?P<n>", "|", "*", "+", "?", "{2}", "{1,3}", "{0,}", "{", "}", "[",
		"]", "[^", "-", "\\", "\\d", "\\w", "\\s", "\\S", "\\x41", "\\x{1F600}", "\\u00e9", ".", "^", "$", "\\n",
		"[:alpha:]", "\\1", "(?=", "(?i)", ",", "0", "9", "\xff", "\x00",
	};
	enum { N_PIECES = sizeof pieces / sizeof *pieces };
	char err[512], why[256], re[256];
	rng_state = 20240611;
	int accepted = 0;
	for (int iter = 0; iter < 60000; iter++) {
		size_t len = 0;
		int n = (int)(rng_u64() % 24);
		for (int i = 0; i < n; i++) {
			const char *p = pieces[rng_u64() % N_PIECES];
			size_t pl = p[0] ? strlen(p) : 1;   /* the "\x00" piece is one NUL byte */
			if (len + pl >= sizeof re)
				break;
			memcpy(re + len, p, pl);
			len += pl;
		}
		char *g = regex_to_gbnf(re, len, err, sizeof err);
		if (g) {
			accepted++;
			ck_assert_msg(well_formed(g, "root", why, sizeof why), "'%.*s' gives bad GBNF (%s):\n%s", (int)len, re,
			              why, g);
			ck_assert_msg(valid_utf8(g), "'%.*s' gives GBNF that is not UTF-8", (int)len, re);
			free(g);
		} else {
			ck_assert_msg(err[0] && (strstr(err, "offset") || strstr(err, "bytes")), "'%.*s': error '%s'", (int)len,
			              re, err);
			ck_assert_msg(valid_utf8(err), "'%.*s': error not UTF-8", (int)len, re);
		}
	}
	ck_assert_int_gt(accepted, 3000);   /* the generator exercises the writer, not only the refusals */
}
END_TEST

static Suite *grammar_regex_suite(void)
{
	Suite *s = suite_create("grammar_regex");
	TCase *tc = tcase_create("translate");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_outputs);
	tcase_add_test(tc, test_refusals);
	tcase_add_test(tc, test_regex_gbnf);
	tcase_add_test(tc, test_choices);
	suite_add_tcase(s, tc);
	TCase *odd = tcase_create("odd");
	tcase_set_timeout(odd, 300);
	tcase_add_test(odd, test_long);
	tcase_add_test(odd, test_nesting);
	tcase_add_test(odd, test_random);
	suite_add_tcase(s, odd);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(grammar_regex_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
