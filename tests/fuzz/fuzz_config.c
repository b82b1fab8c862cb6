/* tests/fuzz/fuzz_config.c — libFuzzer target for the config.json parser: any bytes in, a model_config or
 * an error out, and when accepted, the rotary frequencies computed from it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "models/model_config.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/config";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	model_config c;
	char err[256];
	if (model_config_parse(&c, (const char *)data, size, err, sizeof err) == 0) {
		/* An accepted config has a sane head_dim, so this allocation is small. */
		float *f = malloc((size_t)c.head_dim / 2 * sizeof *f + 1);
		if (f) model_config_rope_freqs(&c, f);
		free(f);
	}
	return 0;
}
