/* tests/fuzz/fuzz_tool_calls_mistral.c — libFuzzer target for the mistral tool-call parser (server/tool_calls.h): any bytes
 * as generated text, split anywhere, give the one-piece result and never crash (tests/fuzz/fuzz_tool_calls_check.h). */
#include <stddef.h>
#include <stdint.h>

#include "tests/fuzz/fuzz_tool_calls_check.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/tool_calls_mistral";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_tool_calls_check(TOOL_FORMAT_MISTRAL, data, size);
	return 0;
}
