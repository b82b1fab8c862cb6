/* server/request_fields.c — the table of request fields and its check (request_fields.h). */
#include "server/request_fields.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define C REQUEST_COMPLETIONS
#define H REQUEST_CHAT
#define IMPL REQUEST_FIELD_IMPLEMENTED
#define NOOP REQUEST_FIELD_NOOP
#define NO REQUEST_FIELD_REFUSED

/* Implemented fields are read by completion_request.c and chat_request.c (with their own refusals of values they
 * cannot honour: best_of other than n, …; the constraint fields in server/constraint.c). A refused field passes when its value
 * is the one that changes nothing (see neutral()). */
static const request_field fields[] = {
	/* OpenAI, both endpoints */
	{ "model", C | H, IMPL, NULL },
	{ "n", C | H, IMPL, NULL },
	{ "max_tokens", C | H, IMPL, NULL },
	{ "temperature", C | H, IMPL, NULL },
	{ "top_p", C | H, IMPL, NULL },
	{ "presence_penalty", C | H, IMPL, NULL },
	{ "frequency_penalty", C | H, IMPL, NULL },
	{ "seed", C | H, IMPL, NULL },
	{ "stop", C | H, IMPL, NULL },
	{ "stream", C | H, IMPL, NULL },
	{ "stream_options", C | H, IMPL, NULL },
	{ "logit_bias", C | H, IMPL, NULL },
	{ "logprobs", C | H, IMPL, NULL },
	{ "best_of", C | H, IMPL, NULL },
	{ "echo", C | H, IMPL, NULL },
	{ "user", C | H, NOOP, "an end-user id for the provider's abuse monitoring; aahd logs nothing of it" },
	/* OpenAI completions */
	{ "prompt", C, IMPL, NULL },
	{ "suffix", C, IMPL, NULL },
	/* OpenAI chat */
	{ "messages", H, IMPL, NULL },
	{ "max_completion_tokens", H, IMPL, NULL },
	{ "top_logprobs", H, IMPL, NULL },
	{ "tools", H, IMPL, NULL },
	{ "tool_choice", H, IMPL, NULL },
	{ "response_format", C | H, IMPL, NULL },
	{ "functions", H, IMPL, NULL },
	{ "function_call", H, IMPL, NULL },
	{ "modalities", H, IMPL, NULL },
	{ "audio", H, IMPL, NULL },
	{ "prediction", H, IMPL, NULL },
	{ "metadata", H, NOOP, "tags for OpenAI's stored completions; aahd stores nothing" },
	{ "store", H, NO, "aahd does not store completions ('store': false is accepted)" },
	{ "service_tier", H, NO, "aahd has one tier ('auto' and 'default' are accepted)" },
	{ "parallel_tool_calls", H, IMPL, NULL },
	{ "reasoning_effort", H, NO, "aahd has no reasoning-effort control for the model it serves" },
	{ "web_search_options", H, NO, "aahd has no web search" },
	/* aahd's and vLLM's extensions */
	{ "aah_regime", C | H, IMPL, NULL },
	{ "aah_speculation", C | H, IMPL, NULL },
	{ "cache_salt", C | H, IMPL, NULL },
	{ "top_k", C | H, IMPL, NULL },
	{ "min_p", C | H, IMPL, NULL },
	{ "add_generation_prompt", H, IMPL, NULL },
	{ "chat_template_kwargs", H, IMPL, NULL },
	{ "continue_final_message", H, IMPL, NULL },
	{ "chat_template", H, IMPL, NULL },
	{ "repetition_penalty", C | H, IMPL, NULL },
	{ "min_tokens", C | H, IMPL, NULL },
	{ "ignore_eos", C | H, IMPL, NULL },
	{ "priority", C | H, NO, "requests are served first come, first served ('priority': 0 is accepted)" },
	{ "stop_token_ids", C | H, IMPL, NULL },
	{ "include_stop_str_in_output", C | H, NO, "stop strings are never returned ('include_stop_str_in_output': false "
	                                           "is accepted)" },
	{ "skip_special_tokens", C | H, NO, "special tokens are always skipped in the text ('skip_special_tokens': true "
	                                    "is accepted)" },
	{ "length_penalty", C | H, NO, "no beam search ('length_penalty': 1 is accepted)" },
	{ "use_beam_search", C | H, NO, "no beam search ('use_beam_search': false is accepted)" },
	{ "structured_outputs", C | H, IMPL, NULL },
	{ "guided_json", C | H, IMPL, NULL },
	{ "guided_regex", C | H, IMPL, NULL },
	{ "guided_choice", C | H, IMPL, NULL },
	{ "guided_grammar", C | H, IMPL, NULL },
	{ "guided_whitespace_pattern", C | H, NO, "the JSON grammars allow a fixed, bounded whitespace (null is accepted)" },
	{ "guided_decoding_backend", C | H, NOOP, "aahd has one constrained-decoding engine (engine/grammar/)" },
	{ "allowed_token_ids", C | H, NO, "not implemented" },
	{ "bad_words", C | H, NO, "not implemented" },
	{ "logits_processors", C | H, NO, "aahd runs no client code" },
	{ "prompt_logprobs", C | H, NO, "use 'echo' with 'logprobs' and 'max_tokens': 0 on /v1/completions" },
	{ "truncate_prompt_tokens", C | H, NO, "prompts are never truncated: a prompt over the context is a 400" },
	{ "return_tokens_as_token_ids", C | H, NO, "not implemented" },
	{ "documents", H, NO, "pass documents in the messages" },
	/* llama-server's */
	{ "grammar", C | H, IMPL, NULL },
	{ "json_schema", C | H, IMPL, NULL },
	{ "n_predict", C | H, NO, "send 'max_tokens'" },
	{ "cache_prompt", C | H, NO, "the prefix cache is the server's (prefix_cache); 'cache_prompt': true is accepted" },
};

const request_field *request_fields(size_t *n)
{
	*n = sizeof fields / sizeof fields[0];
	return fields;
}

static bool is_num(const json_t *v, double x)
{
	return json_is_number(v) && json_number_value(v) == x;
}

static bool is_str(const json_t *v, const char *s)
{
	return json_is_string(v) && !strcmp(json_string_value(v), s);
}

/* Whether a refused field's value is the one that changes nothing here. */
static bool neutral(const char *name, const json_t *v)
{
	if (!strcmp(name, "length_penalty"))
		return is_num(v, 1);
	if (!strcmp(name, "priority"))
		return is_num(v, 0);
	if (!strcmp(name, "include_stop_str_in_output") || !strcmp(name, "use_beam_search") || !strcmp(name, "store"))
		return json_is_false(v);
	if (!strcmp(name, "skip_special_tokens") || !strcmp(name, "cache_prompt"))
		return json_is_true(v);
	if (!strcmp(name, "service_tier"))
		return is_str(v, "auto") || is_str(v, "default");
	return false;
}

int request_fields_check(const json_t *body, unsigned endpoint, char *err, size_t err_len, const char **param)
{
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)body, key, v) {
		const request_field *f = NULL;
		for (size_t i = 0; i < sizeof fields / sizeof fields[0] && !f; i++)
			if (!strcmp(fields[i].name, key))
				f = &fields[i];
		if (!f || !(f->endpoints & endpoint)) {
			*param = key;
			snprintf(err, err_len, "unrecognized request argument supplied: '%.64s'%s", key,
			         f ? (endpoint == REQUEST_CHAT ? " (it belongs to /v1/completions)"
			                                       : " (it belongs to /v1/chat/completions)")
			           : "");
			return -1;
		}
		if (f->state == REQUEST_FIELD_REFUSED && !json_is_null(v) && !neutral(key, v)) {
			*param = f->name;
			snprintf(err, err_len, "'%s' is not supported: %s", f->name, f->why);
			return -1;
		}
	}
	/* OpenAI: stream_options only with stream */
	const json_t *so = json_object_get(body, "stream_options");
	if (so && !json_is_null(so) && !json_is_true(json_object_get(body, "stream"))) {
		*param = "stream_options";
		snprintf(err, err_len, "'stream_options' is only allowed when 'stream' is true");
		return -1;
	}
	return 0;
}
