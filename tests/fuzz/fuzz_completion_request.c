/* tests/fuzz/fuzz_completion_request.c — libFuzzer target for the /v1/completions body parser: any bytes in, a
 * validated request or an error naming the field out; an accepted request's fields are within their bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "server/completion_request.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/completion_request";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	completion_request r;
	completion_limits lim = { 16, 4096 };
	char err[512];
	const char *param;
	if (completion_request_parse(&r, (const char *)data, size, &lim, err, sizeof err, &param) == 0) {
		/* what the handler relies on */
		if (r.n_prompts < 1 || r.n < 1 || (int64_t)r.n * r.n_prompts > lim.max_n || r.max_tokens > lim.max_tokens ||
		    r.logprobs < -1 || r.logprobs > COMPLETION_MAX_LOGPROBS || r.n_stop > COMPLETION_MAX_STOP ||
		    !(r.temperature >= 0 && r.temperature <= 2) || !(r.top_p > 0 && r.top_p <= 1) || r.top_k < 0)
			abort();
		for (int32_t i = 0; i < r.n_prompts; i++)
			if (!r.prompts[i].text && (r.prompts[i].n_ids < 1 || !r.prompts[i].ids))
				abort();
	}
	completion_request_free(&r);
	return 0;
}
