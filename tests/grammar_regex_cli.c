/* tests/grammar_regex_cli.c — a test-only command line over engine/grammar/regex.h, so tests/test_grammar_regex.sh
 * can compare its grammars with Python's re without aah-grammar: `regex RE`, `regex-file FILE` (the pattern's raw
 * bytes), `choice S...`. Prints the GBNF, or the error on stderr and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/regex.h"

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	size_t got;
	while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap) {
			char *bigger = realloc(buf, cap *= 2);
			if (!bigger) {
				free(buf);
				buf = NULL;
			}
			buf = bigger;
		}
	}
	fclose(f);
	*len = n;
	return buf;
}

int main(int argc, char **argv)
{
	char err[512];
	char *g = NULL;
	if (argc == 3 && !strcmp(argv[1], "regex")) {
		g = regex_to_gbnf(argv[2], strlen(argv[2]), err, sizeof err);
	} else if (argc == 3 && !strcmp(argv[1], "regex-file")) {
		size_t len;
		char *re = read_file(argv[2], &len);
		if (!re) {
			fprintf(stderr, "cannot read %s\n", argv[2]);
			return 2;
		}
		g = regex_to_gbnf(re, len, err, sizeof err);
		free(re);
	} else if (argc >= 2 && !strcmp(argv[1], "choice")) {
		size_t n = (size_t)argc - 2;
		size_t *len = malloc((n + 1) * sizeof *len);
		for (size_t i = 0; i < n; i++)
			len[i] = strlen(argv[i + 2]);
		g = choice_to_gbnf((const char *const *)argv + 2, len, n, err, sizeof err);
		free(len);
	} else {
		fprintf(stderr, "usage: %s regex RE | regex-file FILE | choice S...\n", argv[0]);
		return 2;
	}
	if (!g) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	fputs(g, stdout);
	free(g);
	return 0;
}
