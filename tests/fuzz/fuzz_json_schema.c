/* tests/fuzz/fuzz_json_schema.c — libFuzzer target for the JSON Schema to GBNF converter
 * (engine/grammar/json_schema.h): any bytes that parse as JSON are a schema; it converts, the same text twice, to a
 * grammar with root first and within the size bound, or is refused with a message. Every converted grammar is
 * compiled by the engine, which may refuse one only for what the schema itself asks (no finite value, too large),
 * never for a grammar the converter wrote wrong. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "models/tokenizer.h"
#include "tests/fuzz/fuzz_vocab.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/json_schema";

/* Refusals of the engine that a valid conversion may meet: a schema whose every value is infinite (a required
 * property that holds the object's own schema) or a grammar past the engine's bounds. Anything else is a bug. */
static int engine_may_refuse(const char *err)
{
	return strstr(err, "matches no string") || strstr(err, "derives no string") || strstr(err, "past ") ||
	       strstr(err, "more than") || strstr(err, "out of memory");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *schema = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
	if (!schema)
		return 0;
	char err[512] = "";
	char *g = json_schema_to_gbnf(schema, err, sizeof err);
	if (!g) {
		if (!err[0])
			abort();   /* every refusal says why */
		json_decref(schema);
		return 0;
	}
	char again_err[512];
	char *again = json_schema_to_gbnf(schema, again_err, sizeof again_err);
	size_t len = strlen(g);
	if (!again || strcmp(g, again) != 0 || strncmp(g, "root ::= ", 9) != 0 || len > GRAMMAR_MAX_TEXT ||
	    g[len - 1] != '\n')
		abort();
	grammar *gr = grammar_compile(fuzz_vocab("fuzz_json_schema"), g, len, err, sizeof err);
	if (!gr && !engine_may_refuse(err)) {
		fprintf(stderr, "fuzz_json_schema: the engine refuses the grammar: %s\n%s", err, g);
		abort();
	}
	grammar_unref(gr);
	free(again);
	free(g);
	json_decref(schema);
	return 0;
}
