/* tests/fuzz/fuzz_safetensors.c — libFuzzer target for the safetensors header parser: the input is a whole
 * file (8-byte little-endian header length, header, data), parsed as st_open_file would, then freed. */
#include <stddef.h>
#include <stdint.h>

#include "models/safetensors.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/safetensors";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 8) return 0;
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
	if (hlen > size - 8) return 0;   /* st_open_file refuses this before parsing */
	st_tensor *t;
	int32_t n;
	char err[256];
	if (st_parse_header((const char *)data + 8, (size_t)hlen, size - 8 - (size_t)hlen, &t, &n, err, sizeof err) == 0)
		st_tensors_free(t, n);
	return 0;
}
