/* tests/engine/check_grammar_schema.c — Check suite for engine/grammar/json_schema: every schema of the corpus
 * (tests/data/grammar/schemas/) converts, the same text twice, and the engine's matcher (engine/grammar/grammar.h)
 * accepts its valid values and rejects its invalid ones; every schema of unsupported/ is refused naming its keyword;
 * invalid schemas, odd inputs (deep nesting, huge numbers and counts, long names, left recursion) and the size
 * bounds give clear errors, never a crash. tests/test_grammar_schema.sh holds the same corpus to tests/grammar_ref.py. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "models/tokenizer.h"
#include "tests/test_env.h"

/* ---- helpers ---- */

/* The sorted names of the .json files of testdata()/grammar/SUB; n set. */
static char **list_json(const char *sub, int *n)
{
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/grammar/%s", testdata(), sub);
	struct dirent **ents;
	int k = scandir(dir, &ents, NULL, alphasort);
	ck_assert_msg(k >= 0, "cannot list %s", dir);
	char **names = calloc((size_t)k + 1, sizeof *names);
	*n = 0;
	for (int i = 0; i < k; i++) {
		size_t len = strlen(ents[i]->d_name);
		if (len > 5 && strcmp(ents[i]->d_name + len - 5, ".json") == 0) {
			names[*n] = malloc(strlen(dir) + len + 2);
			sprintf(names[*n], "%s/%s", dir, ents[i]->d_name);
			(*n)++;
		}
		free(ents[i]);
	}
	free(ents);
	return names;
}

static void free_list(char **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static json_t *load(const char *path)
{
	json_error_t je;
	json_t *j = json_load_file(path, JSON_DECODE_ANY, &je);
	ck_assert_msg(j != NULL, "%s: %s", path, je.text);
	return j;
}

static json_t *parse(const char *text)
{
	json_error_t je;
	json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
	ck_assert_msg(j != NULL, "bad test JSON %s: %s", text, je.text);
	return j;
}

/* The converter's grammar for schema text (NULL with err). */
static char *convert(const char *text, char *err, size_t err_len)
{
	json_t *s = parse(text);
	char *g = json_schema_to_gbnf(s, err, err_len);
	json_decref(s);
	return g;
}

static void expect_error(const char *schema, const char *want)
{
	char err[512];
	char *g = convert(schema, err, sizeof err);
	ck_assert_msg(g == NULL, "%s converted, expected an error with: %s", schema, want);
	ck_assert_msg(strstr(err, want) != NULL, "%s: error \"%s\" lacks \"%s\"", schema, err, want);
}

static char *expect_ok(const char *schema)
{
	char err[512];
	char *g = convert(schema, err, sizeof err);
	ck_assert_msg(g != NULL, "%s: %s", schema, err);
	ck_assert_msg(strncmp(g, "root ::= ", 9) == 0, "%s: grammar does not start with root: %.80s", schema, g);
	return g;
}

/* ---- the corpus ---- */

START_TEST(corpus_converts_stably)
{
	int n;
	char **files = list_json("schemas", &n);
	ck_assert_int_ge(n, 32);
	for (int i = 0; i < n; i++) {
		json_t *c = load(files[i]);
		json_t *s = json_object_get(c, "schema");
		char err[512];
		char *a = json_schema_to_gbnf(s, err, sizeof err);
		ck_assert_msg(a != NULL, "%s: %s", files[i], err);
		ck_assert_msg(strncmp(a, "root ::= ", 9) == 0, "%s: no root first", files[i]);
		ck_assert_uint_le(strlen(a), GRAMMAR_MAX_TEXT);
		/* the same text from a second conversion, and from a deep copy (other pointers, same schema) */
		char *b = json_schema_to_gbnf(s, err, sizeof err);
		json_t *copy = json_deep_copy(s);
		char *d = json_schema_to_gbnf(copy, err, sizeof err);
		ck_assert_msg(b && d && strcmp(a, b) == 0 && strcmp(a, d) == 0, "%s: conversions differ", files[i]);
		free(a);
		free(b);
		free(d);
		json_decref(copy);
		json_decref(c);
	}
	free_list(files, n);
}
END_TEST

START_TEST(unsupported_are_refused)
{
	int n;
	char **files = list_json("unsupported", &n);
	ck_assert_int_ge(n, 5);
	for (int i = 0; i < n; i++) {
		json_t *c = load(files[i]);
		const char *want = json_string_value(json_object_get(c, "expect_error"));
		ck_assert_msg(want != NULL, "%s: no expect_error", files[i]);
		char err[512] = "";
		char *g = json_schema_to_gbnf(json_object_get(c, "schema"), err, sizeof err);
		ck_assert_msg(g == NULL, "%s: converted", files[i]);
		ck_assert_msg(strstr(err, want) && strstr(err, "is not supported"), "%s: \"%s\" lacks \"%s\"", files[i], err,
		              want);
		json_decref(c);
	}
	free_list(files, n);
}
END_TEST

/* ---- the engine follows the grammars: valid texts end the grammar, invalid ones cannot ---- */

static tokenizer *tok;
static grammar_vocab *vocab;

static void engine_setup(void)
{
	char dir[1024], err[256];
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", testdata());
	tok = tokenizer_load(dir, err, sizeof err);
	ck_assert_msg(tok != NULL, "%s", err);
	vocab = grammar_vocab_new(tok, tokenizer_vocab_size(tok), err, sizeof err);
	ck_assert_msg(vocab != NULL, "%s", err);
}

static void engine_teardown(void)
{
	grammar_vocab_free(vocab);
	tokenizer_free(tok);
}

/* Whether g's language holds text; must_end: whether nothing may follow it. */
static bool accepts(grammar *g, const char *text, bool *must_end)
{
	grammar_matcher *m = grammar_matcher_new(g);
	ck_assert_ptr_nonnull(m);
	bool ok = grammar_matcher_accept_bytes(m, text, strlen(text)) == 0 && grammar_matcher_can_end(m);
	if (must_end)
		*must_end = ok && grammar_matcher_must_end(m);
	grammar_matcher_free(m);
	return ok;
}

/* text (malloc'd) with every exponent outside strings signed, 1e20 as 1e+20: Python's form; text is freed. */
static char *python_exponents(char *text)
{
	char *out = malloc(2 * strlen(text) + 1), *o = out;
	bool in_str = false;
	for (const char *p = text; *p; p++) {
		if (in_str && *p == '\\' && p[1]) {
			*o++ = *p++;
		} else if (*p == '"') {
			in_str = !in_str;
		} else if (!in_str && (*p == 'e' || *p == 'E') && p[1] >= '0' && p[1] <= '9') {
			*o++ = *p;
			*o++ = '+';
			continue;
		}
		*o++ = *p;
	}
	*o = 0;
	free(text);
	return out;
}

/* jansson writes what json.dumps does with ensure_ascii=False (", " and ": ", or compact), reals with at most 15
 * digits, which for the corpus's numbers is Python's shortest form. */
static void check_values(grammar *g, const char *file, json_t *values, bool want)
{
	static const size_t flags[] = { JSON_ENCODE_ANY | JSON_REAL_PRECISION(15),
		                          JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15) };
	for (size_t i = 0; i < json_array_size(values); i++) {
		for (int f = 0; f < 2; f++) {
			char *text = python_exponents(json_dumps(json_array_get(values, i), flags[f]));
			bool must_end;
			bool got = accepts(g, text, &must_end);
			ck_assert_msg(got == want, "%s: the engine %s %s", file, got ? "accepts" : "rejects", text);
			/* a closed object or array is the end: no whitespace may trail the root value */
			if (got && (text[0] == '{' || text[0] == '['))
				ck_assert_msg(must_end, "%s: more may follow %s", file, text);
			free(text);
		}
	}
}

static void check_texts(grammar *g, const char *file, json_t *texts, bool want)
{
	for (size_t i = 0; i < json_array_size(texts); i++) {
		const char *text = json_string_value(json_array_get(texts, i));
		bool got = accepts(g, text, NULL);
		ck_assert_msg(got == want, "%s: the engine %s %s", file, got ? "accepts" : "rejects", text);
	}
}

START_TEST(engine_follows_corpus)
{
	int n;
	char **files = list_json("schemas", &n);
	for (int i = 0; i < n; i++) {
		json_t *c = load(files[i]);
		char err[512];
		char *text = json_schema_to_gbnf(json_object_get(c, "schema"), err, sizeof err);
		ck_assert_msg(text != NULL, "%s: %s", files[i], err);
		grammar *g = grammar_compile(vocab, text, strlen(text), err, sizeof err);
		ck_assert_msg(g != NULL, "%s: the engine refuses the grammar: %s", files[i], err);
		check_values(g, files[i], json_object_get(c, "valid"), true);
		check_values(g, files[i], json_object_get(c, "invalid"), false);
		check_texts(g, files[i], json_object_get(c, "valid_text"), true);
		check_texts(g, files[i], json_object_get(c, "invalid_text"), false);
		grammar_unref(g);
		free(text);
		json_decref(c);
	}
	free_list(files, n);
}
END_TEST

START_TEST(engine_json_object)
{
	char err[512];
	const char *text = json_object_gbnf();
	ck_assert(strncmp(text, "root ::= object\n", 16) == 0);
	grammar *g = grammar_compile(vocab, text, strlen(text), err, sizeof err);
	ck_assert_msg(g != NULL, "%s", err);
	static const char *const yes[] = { "{}", "{ }", "{\"a\": [1, 2.5e-3, \"x\", null, true, false, {}]}",
		                               "{\"\\u00e9\\ud83d\\ude00\":{\"b\":{\"c\":[]}}}", "{\n  \"a\": 1\n}" };
	static const char *const no[] = { "[]", "1", "\"x\"", "{} ", " {}", "{\"a\":1,}", "{\"a\" 1}", "{'a':1}",
		                              "{\"a\":01}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\x01\"}" };
	for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
		ck_assert_msg(accepts(g, yes[i], NULL), "rejects %s", yes[i]);
	for (size_t i = 0; i < sizeof no / sizeof *no; i++)
		ck_assert_msg(!accepts(g, no[i], NULL), "accepts %s", no[i]);
	grammar_unref(g);
}
END_TEST

/* ---- refusals and invalid schemas ---- */

START_TEST(keywords_refused_exactly)
{
	static const char *const kws[] = { "patternProperties", "dependentRequired", "dependentSchemas", "if", "then",
		"else", "not", "contains", "minContains", "maxContains", "minProperties", "maxProperties", "multipleOf",
		"propertyNames", "unevaluatedProperties", "unevaluatedItems", "additionalItems", "$anchor", "$dynamicRef",
		"$recursiveRef", "contentEncoding", "nullable", "discriminator", "foo" };
	for (size_t i = 0; i < sizeof kws / sizeof *kws; i++) {
		char schema[256], want[256], err[512];
		snprintf(schema, sizeof schema, "{\"type\":\"object\",\"properties\":{\"a~b/c\":{\"%s\":1}}}", kws[i]);
		snprintf(want, sizeof want, "JSON Schema keyword '%s' at /properties/a~0b~1c is not supported", kws[i]);
		char *g = convert(schema, err, sizeof err);
		ck_assert_msg(g == NULL && strcmp(err, want) == 0, "%s: got \"%s\"", kws[i], err);
	}
	expect_error("{\"minProperties\":1}", "JSON Schema keyword 'minProperties' at / is not supported");
	expect_error("{\"type\":\"string\",\"format\":\"email\"}", "'format' at / is not supported for 'email'");
	expect_error("{\"type\":\"string\",\"format\":\"uri\"}", "'uri'");
	expect_error("{\"uniqueItems\":true}", "'uniqueItems'");
	expect_error("{\"type\":\"number\",\"maximum\":10}", "'maximum' at / is not supported for type 'number'");
	expect_error("{\"exclusiveMinimum\":0.5}", "'exclusiveMinimum'");   /* no type: number is among them */
	expect_error("{\"allOf\":[{},{}]}", "'allOf' at / is not supported with more than one schema");
	expect_error("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "'oneOf'");
	expect_error("{\"oneOf\":[{\"enum\":[1,2]},{\"const\":2.0}]}", "'oneOf'");
	expect_error("{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":{}}}", "'type' at / is not supported alongside '$ref'");
	expect_error("{\"enum\":[\"a\"],\"minLength\":1}", "'minLength' at / is not supported alongside 'enum'");
	expect_error("{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "'maxLength' at / is not supported alongside 'pattern'");
	expect_error("{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"a\"}", "'pattern' at / is not supported alongside 'format'");
	expect_error("{\"$ref\":\"other.json#/x\"}", "'$ref' at / is not supported");
	expect_error("{\"$ref\":\"#/$defs/a/properties/b\",\"$defs\":{\"a\":{}}}", "'$ref' at / is not supported");
	expect_error("{\"items\":[{}]}", "'items' at / is not supported");
	expect_error("{\"maxItems\":10001}", "'maxItems' at / is not supported above 10000");
	expect_error("{\"minLength\":20000}", "'minLength'");
	expect_error("{\"type\":\"string\",\"pattern\":\"^a|b$\"}", "'pattern'");
	expect_error("{\"type\":\"string\",\"pattern\":\"(?<=a)b\"}", "'pattern' at / is not supported");
	expect_error("{\"properties\":{\"x\":{\"$id\":\"y\"}}}", "'$id' at /properties/x");
}
END_TEST

START_TEST(invalid_schemas)
{
	expect_error("5", "invalid JSON Schema at /: a schema must be an object or a boolean");
	expect_error("\"string\"", "a schema must be an object or a boolean");
	expect_error("null", "a schema must be an object or a boolean");
	expect_error("{\"type\":5}", "invalid JSON Schema at /: 'type'");
	expect_error("{\"type\":\"text\"}", "'type' text is not a JSON Schema type");
	expect_error("{\"type\":[]}", "'type'");
	expect_error("{\"type\":[\"string\",\"string\"]}", "names string twice");
	expect_error("{\"required\":\"a\"}", "'required' must be an array of strings");
	expect_error("{\"required\":[1]}", "'required' must be an array of strings");
	expect_error("{\"required\":[\"a\",\"a\"]}", "names 'a' twice");
	expect_error("{\"properties\":[]}", "'properties' must be an object");
	expect_error("{\"properties\":{\"a\":5}}", "property 'a' must be a schema");
	expect_error("{\"minLength\":5,\"maxLength\":2}", "minLength 5 is greater than maxLength 2");
	expect_error("{\"type\":\"string\",\"minLength\":-1}", "'minLength' must be a non-negative integer");
	expect_error("{\"minItems\":1.5}", "'minItems' must be a non-negative integer");
	expect_error("{\"minItems\":3,\"maxItems\":1}", "minItems 3 is greater than maxItems 1");
	expect_error("{\"$ref\":\"#/$defs/missing\"}", "'$ref' #/$defs/missing does not resolve");
	expect_error("{\"$ref\":\"#/definitions/a\",\"$defs\":{\"a\":{}}}", "does not resolve");
	expect_error("{\"$ref\":5}", "'$ref' must be a string");
	expect_error("{\"$ref\":\"#/$defs/%zz\",\"$defs\":{}}", "bad %-escape");
	expect_error("{\"$ref\":\"#/$defs/a~2\",\"$defs\":{}}", "bad ~-escape");
	expect_error("{\"enum\":[]}", "'enum' is empty");
	expect_error("{\"enum\":5}", "'enum' must be an array");
	expect_error("{\"anyOf\":[]}", "'anyOf' must be a non-empty array");
	expect_error("{\"anyOf\":[1]}", "'anyOf' item 0 must be a schema");
	expect_error("{\"minimum\":\"1\"}", "'minimum' must be a number");
	expect_error("{\"exclusiveMinimum\":true}", "draft-04 boolean form");
	expect_error("{\"additionalProperties\":1}", "'additionalProperties' must be a schema");
	expect_error("{\"pattern\":1}", "'pattern' must be a string");
	expect_error("{\"strict\":\"yes\"}", "'strict' must be a boolean");
	expect_error("{\"$defs\":[]}", "'$defs' must be an object");
	/* schemas no value satisfies */
	expect_error("false", "admits no value");
	expect_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "admits no value");
	expect_error("{\"type\":\"integer\",\"minimum\":1e300}", "admits no value");
	expect_error("{\"enum\":[\"a\"],\"type\":\"integer\"}", "admits no value");
	expect_error("{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}", "admits no value");
	expect_error("{\"type\":\"object\",\"required\":[\"a\"],\"additionalProperties\":false}", "admits no value");
	expect_error("{\"type\":\"array\",\"items\":false,\"minItems\":1}", "admits no value");
	/* left recursion: a rule that reaches itself before any byte */
	expect_error("{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "left recursion");
	expect_error("{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"allOf\":[{\"$ref\":\"#/$defs/a\"}]}}}",
	             "left recursion");
	/* no error buffer at all */
	json_t *s = parse("{\"not\":{}}");
	ck_assert_ptr_null(json_schema_to_gbnf(s, NULL, 0));
	json_decref(s);
	char err[8];
	ck_assert_ptr_null(json_schema_to_gbnf(NULL, err, sizeof err));
	ck_assert_int_eq(strlen(err), 7);   /* cut to the buffer */
}
END_TEST

/* ---- odd inputs ---- */

START_TEST(odd_inputs)
{
	char *g = expect_ok("{}");
	ck_assert_str_eq(g, "root ::= value\n" "value ::= object | array | string | number | boolean | null\n" "object ::= \"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\"\n"
	                    "member ::= string ws \":\" ws value\n" "array ::= \"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\"\n"
	                    "string ::= \"\\\"\" char* \"\\\"\"\n"
	                    "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] hex{3} | [dD] [0-7] hex{2} | "
	                    "[dD] [89abAB] hex{2} \"\\\\u\" [dD] [c-fC-F] hex{2} ) )\n"
	                    "hex ::= [0-9a-fA-F]\n"
	                    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
	                    "boolean ::= \"true\" | \"false\"\n" "null ::= \"null\"\n" "ws ::= ( \" \" | \"\\n\" [ \\t]{0,40} )?\n");
	free(g);
	free(expect_ok("true"));
	free(expect_ok("{\"type\":\"object\",\"properties\":{}}"));
	free(expect_ok("{\"type\":\"array\",\"maxItems\":0}"));
	free(expect_ok("{\"type\":\"string\",\"maxLength\":0}"));
	free(expect_ok("{\"type\":\"integer\",\"minimum\":-9223372036854775808,\"maximum\":9223372036854775807}"));
	/* bounds past the 16-digit numerals leave no integer, and say so */
	expect_error("{\"type\":\"integer\",\"exclusiveMinimum\":9223372036854775807,\"minimum\":-1e308}", "admits no value");
	expect_error("{\"type\":\"integer\",\"maximum\":-1e308,\"exclusiveMaximum\":1e308}", "admits no value");
	free(expect_ok("{\"const\":1e308}"));
	free(expect_ok("{\"const\":-9223372036854775808}"));
	free(expect_ok("{\"enum\":[\"\",{},[],{\"\":[{\"\":null}]}]}"));
	free(expect_ok("{\"type\":\"string\",\"pattern\":\"\"}"));
	free(expect_ok("{\"properties\":{\"\":{\"type\":\"string\"}},\"required\":[\"\"]}"));
	free(expect_ok("{\"type\":\"string\",\"minLength\":10000,\"maxLength\":10000}"));

	/* 64 levels nest; 65 do not (the limit, not the stack, stops it) */
	char deep[4096];
	for (int levels = 63; levels <= 200; levels += 137) {
		size_t o = 0;
		for (int i = 0; i < levels; i++)
			o += (size_t)snprintf(deep + o, sizeof deep - o, "{\"items\":");
		o += (size_t)snprintf(deep + o, sizeof deep - o, "{\"type\":\"null\"}");
		for (int i = 0; i < levels; i++)
			deep[o++] = '}';
		deep[o] = 0;
		if (levels <= 64) {
			free(expect_ok(deep));
		} else {
			expect_error(deep, "nested deeper than 64 levels");
		}
	}
	/* a chain of $refs deeper than the limit */
	json_t *defs = json_object();
	for (int i = 0; i < 100; i++) {
		char name[16], ref[32];
		snprintf(name, sizeof name, "d%d", i);
		snprintf(ref, sizeof ref, "#/$defs/d%d", i + 1);
		json_object_set_new(defs, name, i == 99 ? json_pack("{s:s}", "type", "null")
		                                          : json_pack("{s:[{s:s}]}", "prefixItems", "$ref", ref));
	}
	json_t *s = json_pack("{s:s,s:o}", "$ref", "#/$defs/d0", "$defs", defs);
	char err[512];
	ck_assert_ptr_null(json_schema_to_gbnf(s, err, sizeof err));
	ck_assert_msg(strstr(err, "nested deeper") != NULL, "%s", err);
	json_decref(s);
}
END_TEST

START_TEST(size_bounds)
{
	char err[512];
	/* an enum of 200000 strings is past 1 MB of GBNF */
	json_t *values = json_array();
	for (int i = 0; i < 200000; i++) {
		char v[32];
		snprintf(v, sizeof v, "value-%d", i);
		json_array_append_new(values, json_string(v));
	}
	json_t *s = json_pack("{s:o}", "enum", values);
	ck_assert_ptr_null(json_schema_to_gbnf(s, err, sizeof err));
	ck_assert_msg(strstr(err, "more than 1048576 bytes of GBNF") != NULL, "%s", err);
	json_decref(s);

	/* 300 strings of up to 10000 characters each would expand past the engine's symbols */
	json_t *props = json_object();
	for (int i = 0; i < 300; i++) {
		char k[16];
		snprintf(k, sizeof k, "p%d", i);
		json_object_set_new(props, k, json_pack("{s:s,s:i}", "type", "string", "maxLength", 9000 + i));
	}
	s = json_pack("{s:o}", "properties", props);
	ck_assert_ptr_null(json_schema_to_gbnf(s, err, sizeof err));
	ck_assert_msg(strstr(err, "repeats too much") != NULL, "%s", err);
	json_decref(s);

	/* 2000 optional properties: the grammar grows linearly (rules chained, not copied) */
	props = json_object();
	for (int i = 0; i < 2000; i++) {
		char k[16];
		snprintf(k, sizeof k, "p%d", i);
		json_object_set_new(props, k, json_pack("{s:s}", "type", "integer"));
	}
	s = json_pack("{s:o,s:b}", "properties", props, "additionalProperties", 0);
	char *g = json_schema_to_gbnf(s, err, sizeof err);
	ck_assert_msg(g != NULL, "%s", err);
	ck_assert_uint_lt(strlen(g), 300000);
	free(g);
	json_decref(s);

	/* a property name of 100000 characters beside additionalProperties: one rule per prefix, no deep recursion */
	char *longname = malloc(100001);
	memset(longname, 'k', 100000);
	longname[100000] = 0;
	props = json_object();
	json_object_set_new(props, longname, json_true());
	s = json_pack("{s:o}", "properties", props);
	g = json_schema_to_gbnf(s, err, sizeof err);
	ck_assert_msg(g == NULL && strstr(err, "bytes of GBNF"), "%s", g ? "converted" : err);
	json_decref(s);
	memset(longname, 'k', 2000);
	longname[2000] = 0;
	props = json_object();
	json_object_set_new(props, longname, json_true());
	s = json_pack("{s:o}", "properties", props);
	g = json_schema_to_gbnf(s, err, sizeof err);
	ck_assert_msg(g != NULL, "%s", err);
	free(g);
	json_decref(s);
	free(longname);
}
END_TEST

START_TEST(rule_names_and_reuse)
{
	/* rules are named from the pointer; one rule serves identical sub-schemas */
	char *g = expect_ok("{\"type\":\"object\",\"properties\":{\"user name\":{\"type\":[\"string\",\"null\"]},"
	                    "\"user_name\":{\"type\":[\"string\",\"null\"]},\"string\":{\"type\":\"integer\",\"minimum\":1},"
	                    "\"n\":{\"type\":\"integer\",\"minimum\":1}},\"required\":[\"n\"]}");
	ck_assert_msg(strstr(g, "\nuser-name ::= string | null\n") != NULL, "%s", g);
	ck_assert_msg(strstr(g, "user-name-2") == NULL, "identical schemas got two rules:\n%s", g);
	ck_assert_msg(strstr(g, "\nstring-2 ::= [1-9]") != NULL, "a property named string:\n%s", g);
	ck_assert_msg(strstr(g, "\nstring ::= \"\\\"\" char* \"\\\"\"\n") != NULL, "%s", g);
	free(g);
	/* a recursive $defs target is a recursive rule */
	g = expect_ok("{\"$defs\":{\"T\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/T\"}}},\"$ref\":\"#/$defs/T\"}");
	ck_assert_msg(strstr(g, "root ::= T\nT ::= \"[\" ws ( T ( ws \",\" ws T )* ws )? \"]\"\n") != NULL, "%s", g);
	free(g);
	/* an integer range */
	g = expect_ok("{\"type\":\"integer\",\"minimum\":-12,\"maximum\":250}");
	ck_assert_msg(strncmp(g, "root ::= \"-\" ( [0-9] | \"1\" [0-2] ) | [0-9] | [1-9] [0-9] | \"1\" [0-9]{2} | \"2\" [0-4] [0-9] | \"250\"\n",
	                      94) == 0, "%s", g);
	free(g);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("grammar_schema");
	TCase *tc = tcase_create("corpus");
	tcase_add_test(tc, corpus_converts_stably);
	tcase_add_test(tc, unsupported_are_refused);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	tc = tcase_create("engine");
	tcase_add_checked_fixture(tc, engine_setup, engine_teardown);
	tcase_add_test(tc, engine_follows_corpus);
	tcase_add_test(tc, engine_json_object);
	tcase_set_timeout(tc, 300);
	suite_add_tcase(s, tc);
	tc = tcase_create("errors");
	tcase_add_test(tc, keywords_refused_exactly);
	tcase_add_test(tc, invalid_schemas);
	suite_add_tcase(s, tc);
	tc = tcase_create("bounds");
	tcase_add_test(tc, odd_inputs);
	tcase_add_test(tc, size_bounds);
	tcase_add_test(tc, rule_names_and_reuse);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
