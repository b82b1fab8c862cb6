/* tests/fuzz/fuzz_grammar.c — libFuzzer target for the GBNF compiler and matcher (engine/grammar/grammar.h): the
 * input up to its first NUL is a grammar, the rest bytes to follow. A grammar compiles or is refused with a message;
 * a compiled one is followed byte by byte, and its mask at the start and at the end must agree with the token-by-token
 * answer (until the matcher fails on a bound, with a message). Nothing may crash, leak or run unbounded. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar.h"
#include "models/tokenizer.h"
#include "tests/fuzz/fuzz_vocab.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/grammar";

static void check_mask(grammar_matcher *m, int32_t nv, uint32_t *bits)
{
	if (grammar_matcher_mask(m, bits) < 0)
		return;
	for (int32_t id = 0; id < nv; id++) {
		bool naive = grammar_matcher_allows(m, id);
		/* a token-by-token check can meet the ambiguity bound (GRAMMAR_MAX_STACKS over the whole stacks) where
		 * the mask's cut stacks did not: the matcher then has failed, says why, and accepts nothing more */
		if (grammar_matcher_error(m)[0])
			return;
		if ((bool)(bits[id >> 5] >> (id & 31) & 1) != naive)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	grammar_vocab *v = fuzz_vocab("fuzz_grammar");
	const uint8_t *nul = memchr(data, 0, size);
	size_t glen = nul ? (size_t)(nul - data) : size;
	char err[256];
	grammar *g = grammar_compile(v, (const char *)data, glen, err, sizeof err);
	if (!g) {
		if (!err[0])
			abort();   /* a refusal always says why */
		return 0;
	}
	int32_t nv = grammar_vocab_size(v);
	uint32_t *bits = malloc((size_t)(nv + 31) / 32 * 4);
	grammar_matcher *m = grammar_matcher_new(g);
	if (!bits || !m)
		abort();
	check_mask(m, nv, bits);
	if (nul) {
		const uint8_t *in = nul + 1;
		size_t n = size - glen - 1;
		for (size_t i = 0; i < n; i++)
			if (grammar_matcher_accept_bytes(m, in + i, 1) < 0)
				break;
		check_mask(m, nv, bits);
	}
	grammar_matcher_free(m);
	grammar_unref(g);
	free(bits);
	return 0;
}
