/* tests/fuzz/fuzz_gguf.c — libFuzzer target for the GGUF reader: the input is a whole file, parsed as gguf_model_open
 * parses its mapping; when it parses, every key goes through the typed getters, the model config is read from the
 * metadata (gguf_model_config: the shape, RoPE and YaRN keys) and the tokenizer is built from it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "models/gguf.h"
#include "models/gguf_model.h"
#include "models/tokenizer.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/gguf";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gguf_file g;
	char err[512];
	if (gguf_parse(&g, data, size, err, sizeof err) == 0) {
		for (int64_t i = 0; i < g.n_kv; i++) {
			char key[128];
			size_t n = g.kv[i].key.len < sizeof key - 1 ? (size_t)g.kv[i].key.len : sizeof key - 1;
			for (size_t j = 0; j < n; j++)
				key[j] = g.kv[i].key.s[j] ? g.kv[i].key.s[j] : '?';
			key[n] = 0;
			int64_t iv;
			double fv;
			bool bv;
			gguf_str sv;
			(void)gguf_get_int(&g, key, &iv, err, sizeof err);
			(void)gguf_get_float(&g, key, &fv, err, sizeof err);
			(void)gguf_get_bool(&g, key, &bv, err, sizeof err);
			(void)gguf_get_str(&g, key, &sv, err, sizeof err);
		}
		model_config c;
		(void)gguf_model_config(&c, &g, "fuzz.gguf", err, sizeof err);
		gguf_free(&g);
		tokenizer *t = tokenizer_from_gguf(data, size, err, sizeof err);
		tokenizer_free(t);
	}
	return 0;
}
