/* tests/fuzz/fuzz_chat_request.c — libFuzzer target for the /v1/chat/completions body parser: any bytes in, a
 * validated request or an error naming the field out; an accepted request's fields and template variables are what
 * the handler and the renderer rely on. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/chat_request.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/chat_request";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	chat_request r;
	completion_limits lim = { 16, 4096, 2051 };
	char err[512];
	const char *param;
	if (chat_request_parse(&r, (const char *)data, size, &lim, err, sizeof err, &param) == 0) {
		const completion_request *b = &r.base;
		if (b->n < 1 || b->n > lim.max_n || b->max_tokens > lim.max_tokens || b->n_prompts != 0 ||
		    b->n_stop > COMPLETION_MAX_STOP || !(b->temperature >= 0 && b->temperature <= 2) ||
		    !(b->top_p > 0 && b->top_p <= 1) || b->top_k < 0 || r.top_logprobs < 0 ||
		    r.top_logprobs > CHAT_MAX_TOP_LOGPROBS || (r.logprobs ? b->logprobs != r.top_logprobs : b->logprobs != -1))
			abort();
		json_t *msgs = json_object_get(r.vars, "messages");
		if (!json_is_array(msgs) || json_array_size(msgs) < 1 || json_array_size(msgs) > CHAT_MAX_MESSAGES ||
		    (int32_t)json_array_size(msgs) != r.n_messages || !json_is_boolean(json_object_get(r.vars, "add_generation_prompt")))
			abort();
		/* continue_final_message: the last message is the assistant's, and no new turn is opened after it */
		json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
		if (r.continue_final && (strcmp(json_string_value(json_object_get(last, "role")), "assistant") != 0 ||
		                         !json_is_string(json_object_get(last, "content")) ||
		                         json_is_true(json_object_get(r.vars, "add_generation_prompt"))))
			abort();
		for (size_t i = 0; i < json_array_size(msgs); i++) {
			json_t *m = json_array_get(msgs, i);
			json_t *content = json_object_get(m, "content");
			const char *role = json_string_value(json_object_get(m, "role"));
			if (!role || (content && !json_is_string(content) && !json_is_null(content)) ||
			    (!json_is_string(content) && strcmp(role, "assistant") != 0))
				abort();
		}
	} else if (!*err) {
		abort();   /* every refusal says why */
	}
	chat_request_free(&r);
	return 0;
}
