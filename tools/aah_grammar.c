/* tools/aah_grammar.c — aah-grammar: prints the GBNF grammar that constrained decoding would compile for a JSON
 * Schema, a regular expression, a list of choices or any JSON object, so that grammars can be read and tested alone
 * (tests/test_grammar_schema.sh feeds them to tests/grammar_ref.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex.h"

static int usage(void)
{
	fprintf(stderr,
	        "usage: aah-grammar schema FILE       GBNF of the JSON Schema in FILE (- for standard input)\n"
	        "       aah-grammar regex RE          GBNF of the regular expression RE (matched whole)\n"
	        "       aah-grammar choice S...       GBNF whose language is exactly the strings S\n"
	        "       aah-grammar json-object       GBNF of any JSON object\n");
	return 2;
}

static int print_or_fail(char *gbnf, const char *err)
{
	if (!gbnf) {
		fprintf(stderr, "aah-grammar: %s\n", err);
		return 1;
	}
	fputs(gbnf, stdout);
	free(gbnf);
	return 0;
}

int main(int argc, char **argv)
{
	char err[1024];
	if (argc < 2)
		return usage();
	const char *cmd = argv[1];
	if (strcmp(cmd, "schema") == 0 && argc == 3) {
		json_error_t je;
		json_t *schema = strcmp(argv[2], "-") == 0 ? json_loadf(stdin, JSON_DECODE_ANY, &je)
		                                           : json_load_file(argv[2], JSON_DECODE_ANY, &je);
		if (!schema) {
			fprintf(stderr, "aah-grammar: %s: line %d: %s\n", argv[2], je.line, je.text);
			return 1;
		}
		int rc = print_or_fail(json_schema_to_gbnf(schema, err, sizeof err), err);
		json_decref(schema);
		return rc;
	}
	if (strcmp(cmd, "regex") == 0 && argc == 3)
		return print_or_fail(regex_to_gbnf(argv[2], strlen(argv[2]), err, sizeof err), err);
	if (strcmp(cmd, "choice") == 0 && argc >= 3) {
		size_t n = (size_t)argc - 2;
		size_t *len = malloc(n * sizeof *len);
		if (!len) {
			fprintf(stderr, "aah-grammar: out of memory\n");
			return 1;
		}
		for (size_t i = 0; i < n; i++)
			len[i] = strlen(argv[i + 2]);
		int rc = print_or_fail(choice_to_gbnf((const char *const *)argv + 2, len, n, err, sizeof err), err);
		free(len);
		return rc;
	}
	if (strcmp(cmd, "json-object") == 0 && argc == 2) {
		fputs(json_object_gbnf(), stdout);
		return 0;
	}
	return usage();
}
