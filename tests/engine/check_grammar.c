/* tests/engine/check_grammar.c — Check suite for engine/grammar/grammar.h: GBNF compile errors that name the rule and
 * place, the language of small grammars byte by byte, UTF-8 classes, repetitions, the ends of a grammar, the depth
 * and ambiguity bounds, and the token masks against the naive reference (every token tried one by one from the same
 * state) along seeded random walks, on the small test vocabulary and on Qwen3's 151,936 tokens when the cache has
 * them. A walk's output must be a sentence of the grammar (a JSON walk must parse with jansson). */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gbnf_text.h"
#include "engine/grammar/grammar.h"
#include "models/tokenizer.h"
#include "tests/test_env.h"
#include "tests/test_rng.h"

static tokenizer *tok;
static grammar_vocab *voc;

static const char *cache_dir(void)
{
	const char *d = getenv("AAH_CACHE");
	return d && *d ? d : ".cache";
}

static void setup(void)
{
	char dir[1024], err[256];
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", testdata());
	tok = tokenizer_load(dir, err, sizeof err);
	ck_assert_msg(tok != NULL, "%s", err);
	voc = grammar_vocab_new(tok, tokenizer_vocab_size(tok) + 7, err, sizeof err);   /* + padding ids */
	ck_assert_msg(voc != NULL, "%s", err);
}

static void teardown(void)
{
	grammar_vocab_free(voc);
	tokenizer_free(tok);
}

static grammar *compile_ok(const char *src)
{
	char err[256] = "";
	grammar *g = grammar_compile(voc, src, strlen(src), err, sizeof err);
	ck_assert_msg(g != NULL, "%s: %s", src, err);
	return g;
}

static void compile_err(const char *src, const char *want)
{
	char err[256] = "";
	grammar *g = grammar_compile(voc, src, strlen(src), err, sizeof err);
	ck_assert_msg(g == NULL, "compiled: %s", src);
	ck_assert_msg(strstr(err, want) != NULL, "%s: error '%s' lacks '%s'", src, err, want);
}

/* Whether the grammar's language holds s (bytes, whole). */
static bool in_language(grammar *g, const char *s, size_t n)
{
	grammar_matcher *m = grammar_matcher_new(g);
	ck_assert_ptr_nonnull(m);
	bool ok = grammar_matcher_accept_bytes(m, s, n) == 0 && grammar_matcher_can_end(m);
	grammar_matcher_free(m);
	return ok;
}

#define YES(g, s) ck_assert_msg(in_language(g, s, strlen(s)), "'%s' should match", s)
#define NO(g, s) ck_assert_msg(!in_language(g, s, strlen(s)), "'%s' should not match", s)

START_TEST(test_errors)
{
	compile_err("root ::= \"a\" (", "line 1");
	compile_err("root ::= foo", "rule 'foo' is used but never defined");
	compile_err("start ::= \"a\"", "no rule 'root'");
	compile_err("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
	compile_err("root ::= root \"a\" | \"b\"", "left recursion");
	compile_err("root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\"", "left recursion: rule 'x'");
	compile_err("root ::= x\nx ::= \"a\" x", "matches no string");
	compile_err("root ::= \"a\"{10001}", "over 10000");
	compile_err("root ::= \"a\"{3,2}", "below its minimum");
	compile_err("root ::= \"\\q\"", "unknown escape");
	compile_err("root ::= [z-a]", "below its start");
	compile_err("root ::= \"abc", "unterminated string");
	compile_err("root ::= [abc", "unterminated character class");
	compile_err("root ::= \"\\uD800\"", "not a Unicode scalar value");
	compile_err("root ::= \"\xff\"", "not valid UTF-8");
	compile_err("root ::= * \"a\"", "follows nothing");
	compile_err("root ::= [^\\x00-\\U0010FFFF]", "matches no character");
	compile_err("root ::= \"a\" )", "unmatched ')'");
	compile_err("", "no rule 'root'");
	/* the error's place */
	compile_err("root ::= a\na ::= \"x\" \"y\n", "line 2");
}
END_TEST

START_TEST(test_language)
{
	grammar *g = compile_ok("root ::= [a-c]+ \"!\" # a comment\n");
	YES(g, "abc!");
	YES(g, "a!");
	NO(g, "!");
	NO(g, "abd!");
	NO(g, "abc");
	NO(g, "abc!!");
	grammar_unref(g);
	g = compile_ok("root ::= \"a\"{2,4} \"b\"{0,} \"c\"{,1} \"d\"{2}");
	YES(g, "aadd");
	YES(g, "aaaabbbbcdd");
	NO(g, "adddd");
	NO(g, "aaaaadd");
	NO(g, "aaccdd");
	NO(g, "aad");
	grammar_unref(g);
	/* rules over lines, alternatives, groups and a repeated group */
	g = compile_ok("root ::=\n  item (\",\" ws item)*\n\nitem ::= \"x\"\n  | \"yz\"\nws ::= \" \"?\n");
	YES(g, "x");
	YES(g, "x, yz,x");
	NO(g, "x,,x");
	NO(g, "x ,x");
	grammar_unref(g);
	/* tail left recursion and (a*)* are followed, not refused */
	g = compile_ok("root ::= (\"a\"*)* \"b\"\n");
	YES(g, "b");
	YES(g, "aaab");
	NO(g, "aaa");
	grammar_unref(g);
	g = compile_ok("root ::= x\nx ::= \"q\" | x\n");
	YES(g, "q");
	NO(g, "qq");
	grammar_unref(g);
	/* the empty string */
	g = compile_ok("root ::= \"\"");
	YES(g, "");
	NO(g, "a");
	grammar_unref(g);
}
END_TEST

START_TEST(test_utf8)
{
	grammar *g = compile_ok("root ::= [^a] [é-ë] . \"\\u4e2d\" [\\U0001F600-\\U0001F64F]");
	YES(g, "bé\n中😀");
	YES(g, "中ë\xf0\x9f\x98\x80中🙏");
	NO(g, "aé\n中😀");
	NO(g, "bè\n中😀");
	NO(g, "bé\n中😀x");
	NO(g, "bé\n中\xf0\x9f\x98");       /* a character cut short */
	NO(g, "\xed\xa0\x80" "é\n中😀");     /* a surrogate's encoding is not UTF-8 */
	NO(g, "\xc0\x80" "é\n中😀");         /* an overlong encoding */
	grammar_unref(g);
}
END_TEST

START_TEST(test_ends)
{
	grammar *g = compile_ok("root ::= \"yes\" | \"no\" | \"no way\"");
	grammar_matcher *m = grammar_matcher_new(g);
	ck_assert(!grammar_matcher_can_end(m));
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "ye", 2), 0);
	ck_assert(!grammar_matcher_can_end(m));
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "s", 1), 0);
	ck_assert(grammar_matcher_can_end(m));
	ck_assert(grammar_matcher_must_end(m));
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "!", 1), -1);
	ck_assert(grammar_matcher_must_end(m));          /* a refused byte changes nothing */
	grammar_matcher_free(m);
	m = grammar_matcher_new(g);
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "no", 2), 0);
	ck_assert(grammar_matcher_can_end(m));
	ck_assert(!grammar_matcher_must_end(m));
	uint32_t *bits = calloc((size_t)(grammar_vocab_size(voc) + 31) / 32, 4);
	int64_t n = grammar_matcher_mask(m, bits);
	ck_assert_int_gt(n, 0);                          /* " way", " ", … */
	grammar_matcher_free(m);
	free(bits);
	grammar_unref(g);
}
END_TEST

START_TEST(test_bounds)
{
	/* deeper than GRAMMAR_MAX_DEPTH frames: the matcher fails, with a message, never hangs */
	grammar *g = compile_ok("root ::= \"[\" root \"]\" | \"x\"");
	grammar_matcher *m = grammar_matcher_new(g);
	int rc = 0, i;
	for (i = 0; i < 2000 && rc == 0; i++)
		rc = grammar_matcher_accept_bytes(m, "[", 1);
	ck_assert_int_eq(rc, -1);
	ck_assert_msg(strstr(grammar_matcher_error(m), "deeper than"), "%s", grammar_matcher_error(m));
	ck_assert_int_lt(i, 2000);
	grammar_matcher_free(m);
	/* the same grammar goes on serving another matcher */
	YES(g, "[[x]]");
	grammar_unref(g);
	/* ambiguity the sets absorb: (a|a|aa)* stays a handful of stacks */
	g = compile_ok("root ::= (\"a\" | \"a\" | \"aa\")* \"b\"");
	char s[2001];
	memset(s, 'a', 2000);
	s[2000] = 0;
	ck_assert(!in_language(g, s, 2000));
	s[1999] = 'b';
	ck_assert(in_language(g, s, 2000));
	grammar_unref(g);
	/* a big but legal repetition compiles */
	g = compile_ok("root ::= [0-9]{0,10000}");
	YES(g, "");
	YES(g, "0123456789");
	grammar_unref(g);
}
END_TEST

/* ---- masks against the naive reference ---- */

/* gbnf_literal_cp and gbnf_class_cp, the one spelling the front ends write GBNF with: every code point of a sample
 * (controls, the characters with a meaning in a literal or a class, ASCII, two- to four-byte UTF-8) written either way
 * compiles to a grammar whose language is that character alone. */
START_TEST(test_spelling)
{
	static const uint32_t cps[] = { 0x00, 0x01, '\t', '\n', '\r', 0x1F, ' ', '"', '\\', ']', '[', '-', '^', '#', 'a', 'Z',
		                        '7', 0x7F, 0x80, 0xE9, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFD, 0x10000, 0x1F600,
		                        0x10FFFF };
	for (size_t i = 0; i < sizeof cps / sizeof *cps; i++) {
		char lit[12], cls[12], src[64], want[8];
		const int nl = gbnf_literal_cp(lit, cps[i]), nc = gbnf_class_cp(cls, cps[i]);
		ck_assert_int_eq(nl, (int)strlen(lit));
		ck_assert_int_eq(nc, (int)strlen(cls));
		size_t n = 0;   /* cps[i] in UTF-8 */
		uint32_t c = cps[i];
		if (c < 0x80) want[n++] = (char)c;
		else if (c < 0x800) { want[n++] = (char)(0xC0 | c >> 6); want[n++] = (char)(0x80 | (c & 63)); }
		else if (c < 0x10000) { want[n++] = (char)(0xE0 | c >> 12); want[n++] = (char)(0x80 | (c >> 6 & 63));
		                        want[n++] = (char)(0x80 | (c & 63)); }
		else { want[n++] = (char)(0xF0 | c >> 18); want[n++] = (char)(0x80 | (c >> 12 & 63));
		       want[n++] = (char)(0x80 | (c >> 6 & 63)); want[n++] = (char)(0x80 | (c & 63)); }
		for (int k = 0; k < 2; k++) {
			snprintf(src, sizeof src, k ? "root ::= [%s]" : "root ::= \"%s\"", k ? cls : lit);
			grammar *g = compile_ok(src);
			ck_assert_msg(in_language(g, want, n), "%s does not hold U+%04X", src, (unsigned)cps[i]);
			ck_assert_msg(!in_language(g, "x", 1) || cps[i] == 'x', "%s holds x", src);
			grammar_unref(g);
		}
	}
}
END_TEST

static const char *json_gbnf =
	"root   ::= object\n"
	"value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
	"object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\"\n"
	"array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\"\n"
	"string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
	"number ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15}) (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})? ws\n"
	"ws     ::= | \" \" | \"\\n\" [ \\t]{0,8}\n";

/* Random walks: at every step the mask must equal the naive one; then a token is drawn from the mask (an end when
 * allowed, sometimes) and followed. Returns the text. */
static char *walk_grammar(grammar_vocab *v, tokenizer *tk, const char *src, int steps, uint64_t seed, bool *ended)
{
	char err[256];
	grammar *g = grammar_compile(v, src, strlen(src), err, sizeof err);
	ck_assert_msg(g != NULL, "%s", err);
	grammar_matcher *m = grammar_matcher_new(g);
	int32_t nv = grammar_vocab_size(v), nw = (nv + 31) / 32;
	uint32_t *bits = calloc((size_t)nw, 4);
	int32_t *allowed = malloc((size_t)nv * sizeof *allowed);
	char *text = calloc(1, 1 << 16);
	size_t len = 0;
	rng_state = seed;
	*ended = false;
	for (int s = 0; s < steps; s++) {
		int64_t n = grammar_matcher_mask(m, bits);
		ck_assert_msg(n >= 0, "%s", grammar_matcher_error(m));
		int32_t k = 0;
		for (int32_t id = 0; id < nv; id++) {
			bool bit = bits[id >> 5] >> (id & 31) & 1;
			bool naive = grammar_matcher_allows(m, id);
			ck_assert_msg(bit == naive, "step %d token %d: mask %d, naive %d", s, id, bit, naive);
			if (bit)
				allowed[k++] = id;
		}
		ck_assert_int_eq(k, n);
		if (grammar_matcher_must_end(m) || (grammar_matcher_can_end(m) && rng_u64() % 4 == 0)) {
			*ended = true;
			break;
		}
		ck_assert_msg(k > 0, "no token allowed and no end at step %d", s);
		int32_t id = allowed[rng_u64() % (uint64_t)k];
		ck_assert_int_eq(grammar_matcher_accept(m, id), 0);
		int64_t b = tokenizer_token_bytes(tk, id, text + len, (1 << 16) - 1 - (int64_t)len);
		ck_assert(b > 0 && len + (size_t)b < (1 << 16) - 1);
		len += (size_t)b;
	}
	text[len] = 0;
	free(bits);
	free(allowed);
	grammar_matcher_free(m);
	grammar_unref(g);
	return text;
}

START_TEST(test_masks_small_vocab)
{
	int complete = 0;
	for (uint64_t seed = 1; seed <= (uint64_t)test_rounds(40); seed++) {
		bool ended;
		char *t = walk_grammar(voc, tok, json_gbnf, 120, seed, &ended);
		if (ended) {
			json_error_t je;
			json_t *j = json_loads(t, 0, &je);
			ck_assert_msg(j != NULL && json_is_object(j), "seed %llu: not a JSON object: %s (%s)",
			              (unsigned long long)seed, t, je.text);
			json_decref(j);
			complete++;
		}
		free(t);
	}
	ck_assert_int_gt(complete, test_rounds(40) / 8);   /* some walks end (> 5 of 40 as built) */
	/* the same walks with every transition in the map instead of the per-state arrays */
	grammar_vocab_set_transition_arrays(voc, 0);
	for (uint64_t seed = 1; seed <= (uint64_t)test_rounds(10); seed++) {
		bool ended;
		char *t = walk_grammar(voc, tok, json_gbnf, 120, seed, &ended);
		if (ended) {
			json_t *j = json_loads(t, 0, NULL);
			ck_assert_msg(j != NULL, "seed %llu: not JSON: %s", (unsigned long long)seed, t);
			json_decref(j);
		}
		free(t);
	}
	grammar_vocab_set_transition_arrays(voc, (size_t)32 << 20);
	/* a grammar of words, where tokens span several literals */
	for (uint64_t seed = 1; seed <= (uint64_t)test_rounds(10); seed++) {
		bool ended;
		char *t = walk_grammar(voc, tok, "root ::= (\"the \" | \"cat \" | \"sat \" | [a-z]{1,3} \" \")+ \"end\"",
		                       60, seed, &ended);
		free(t);
	}
}
END_TEST

START_TEST(test_masks_qwen3)
{
	char dir[1024], err[256];
	snprintf(dir, sizeof dir, "%s/qwen3-tokenizer", cache_dir());
	tokenizer *q = tokenizer_load(dir, err, sizeof err);
	if (!q) {
		printf("check_grammar: %s: skipped the Qwen3 vocabulary (%s)\n", dir, err);
		return;
	}
	grammar_vocab *v = grammar_vocab_new(q, 151936, err, sizeof err);
	ck_assert_msg(v != NULL, "%s", err);
	for (uint64_t seed = 1; seed <= (uint64_t)test_rounds(3); seed++) {
		bool ended;
		char *t = walk_grammar(v, q, json_gbnf, 40, seed, &ended);
		if (ended) {
			json_t *j = json_loads(t, 0, NULL);
			ck_assert_msg(j != NULL, "not JSON: %s", t);
			json_decref(j);
		}
		free(t);
	}
	grammar_vocab_free(v);
	tokenizer_free(q);
}
END_TEST

static Suite *grammar_suite(void)
{
	Suite *s = suite_create("grammar");
	TCase *tc = tcase_create("grammar");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_language);
	tcase_add_test(tc, test_utf8);
	tcase_add_test(tc, test_ends);
	tcase_add_test(tc, test_bounds);
	tcase_add_test(tc, test_spelling);
	tcase_add_test(tc, test_masks_small_vocab);
	tcase_add_test(tc, test_masks_qwen3);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(grammar_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
