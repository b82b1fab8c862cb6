/* tests/fuzz/fuzz_vocab.h — the grammar fuzz targets' vocabulary: the small test tokenizer (a few hundred tokens, so
 * masks can be checked whole on every input), loaded once, no compile warm-up. Included once per target. */
#ifndef AAH_TESTS_FUZZ_VOCAB_H
#define AAH_TESTS_FUZZ_VOCAB_H

#include <stdio.h>
#include <stdlib.h>

#include "engine/grammar/grammar.h"
#include "models/tokenizer.h"

static grammar_vocab *fuzz_vocab(const char *who)
{
	static grammar_vocab *v;
	static tokenizer *t;   /* kept for the process (static: still reachable, no leak report) */
	if (v)
		return v;
	const char *data = getenv("AAH_TESTDATA");
	char dir[1024], err[512] = "";
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", data && *data ? data : "tests/data");
	t = tokenizer_load(dir, err, sizeof err);
	if (!t || !(v = grammar_vocab_new(t, tokenizer_vocab_size(t), err, sizeof err))) {
		fprintf(stderr, "%s: %s\n", who, err);
		abort();
	}
	grammar_vocab_set_warm(v, 0);
	return v;
}

#endif
