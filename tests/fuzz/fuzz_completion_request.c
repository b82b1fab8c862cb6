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
	completion_limits lim = { 16, 4096, 2051 };
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
		/* the sampling fields: what sampler_params_check and the scheduler take */
		if (r.n_bias < 0 || r.n_bias > SAMPLER_MAX_BIAS || !(r.repetition_penalty > 0 && r.repetition_penalty <= 2) ||
		    r.min_tokens < 0 || r.min_tokens > lim.max_tokens || r.n_stop_token_ids < 0 ||
		    r.n_stop_token_ids > SAMPLER_MAX_STOP_IDS)
			abort();
		for (int32_t i = 0; i < r.n_bias; i++)
			if (r.bias[i].id < 0 || r.bias[i].id >= lim.vocab || !(r.bias[i].bias >= -100 && r.bias[i].bias <= 100))
				abort();
		for (int32_t i = 0; i < r.n_stop_token_ids; i++)
			for (int32_t k = 0; k <= i; k++)
				if (r.stop_token_ids[i] < 0 || r.stop_token_ids[i] >= lim.vocab ||
				    (k < i && r.stop_token_ids[k] == r.stop_token_ids[i]))
					abort();
	}
	completion_request_free(&r);
	return 0;
}
