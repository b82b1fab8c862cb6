/* tests/server/check_chat.c — Check suite for server/chat_request and server/chat_template: every field of a chat body
 * accepted or refused with its name (the sampling fields it shares with /v1/completions too), the messages turned into template variables (parts joined, members kept in
 * order), and where a template comes from (a file, chat_template.jinja, tokenizer_config.json's string or named list,
 * none) with its bos_token and eos_token, rendered through server/jinja/jinja.h. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_TMPDIR "chat"
#include "server/chat_request.h"
#include "server/chat_template.h"
#include "tests/test_env.h"

static const completion_limits LIM = { 8, 256, 0 };   /* vocab 0: ids unchecked (test_sampling_fields sets one) */

/* Parses body; returns the status, with the refusal's param and message. */
static int parse(chat_request *r, const char *body, const char **param, char *err, size_t err_len)
{
	return chat_request_parse(r, body, strlen(body), &LIM, err, err_len, param);
}

/* A body that must be refused, naming param, with a message containing `says`. */
static void refused(const char *body, const char *param, const char *says)
{
	chat_request r;
	const char *p = "unset";
	char err[512] = "";
	ck_assert_msg(parse(&r, body, &p, err, sizeof err) == -1, "accepted: %s", body);
	if (param)
		ck_assert_msg(p && !strcmp(p, param), "%s: param %s, not %s (%s)", body, p ? p : "NULL", param, err);
	else
		ck_assert_msg(p == NULL, "%s: param %s (%s)", body, p, err);
	ck_assert_msg(strstr(err, says) != NULL, "%s: '%s' does not say '%s'", body, err, says);
	chat_request_free(&r);
}

START_TEST(test_defaults_and_fields)
{
	chat_request r;
	const char *p;
	char err[512];
	ck_assert_int_eq(parse(&r, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", &p, err, sizeof err), 0);
	ck_assert_int_eq(r.base.n, 1);
	ck_assert_int_eq(r.base.max_tokens, -1);
	ck_assert_int_eq(r.base.logprobs, -1);
	ck_assert(!r.logprobs);
	ck_assert_int_eq(r.base.n_prompts, 0);
	ck_assert_int_eq(r.n_messages, 1);
	ck_assert(json_is_true(json_object_get(r.vars, "add_generation_prompt")));
	ck_assert(json_is_null(json_object_get(r.vars, "tools")));
	ck_assert(json_is_null(json_object_get(r.vars, "documents")));
	ck_assert_ptr_null(json_object_get(r.vars, "bos_token"));
	chat_request_free(&r);

	const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n\": 3, \"max_tokens\": 9, "
	                   "\"max_completion_tokens\": 5, \"logprobs\": true, \"top_logprobs\": 4, \"seed\": -2, "
	                   "\"stop\": [\"a\", \"b\"], \"stream\": true, \"stream_options\": {\"include_usage\": true}, "
	                   "\"aah_regime\": \"x\", \"add_generation_prompt\": false, \"temperature\": 0, "
	                   "\"chat_template_kwargs\": {\"enable_thinking\": false, \"k\": [1, {\"a\": null}]}, "
	                   "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": \"auto\", "
	                   "\"response_format\": {\"type\": \"text\"}, \"modalities\": [\"text\"], \"user\": \"u\"}";
	ck_assert_msg(parse(&r, body, &p, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(r.base.n, 3);
	ck_assert_int_eq(r.base.max_tokens, 5);   /* max_completion_tokens wins */
	ck_assert(r.logprobs);
	ck_assert_int_eq(r.top_logprobs, 4);
	ck_assert_int_eq(r.base.logprobs, 4);
	ck_assert(r.base.seed_set);
	ck_assert_int_eq(r.base.n_stop, 2);
	ck_assert(r.base.stream && r.base.include_usage);
	ck_assert_str_eq(r.base.regime, "x");
	ck_assert(json_is_false(json_object_get(r.vars, "add_generation_prompt")));
	ck_assert(json_is_false(json_object_get(r.vars, "enable_thinking")));
	ck_assert_int_eq(json_array_size(json_object_get(r.vars, "k")), 2);
	ck_assert_int_eq(json_array_size(json_object_get(r.vars, "tools")), 1);
	chat_request_free(&r);
}
END_TEST

START_TEST(test_messages_become_variables)
{
	chat_request r;
	const char *p;
	char err[512];
	const char *body =
	        "{\"messages\": ["
	        "{\"role\": \"system\", \"name\": \"s\", \"content\": \"S\"},"
	        "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": "
	        "\"\\u00e9\"}, {\"type\": \"text\", \"text\": \"\"}]},"
	        "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"1\", \"function\": {\"name\": "
	        "\"f\", \"arguments\": {\"x\": [1]}}}]},"
	        "{\"role\": \"tool\", \"tool_call_id\": \"1\", \"content\": []},"
	        "{\"role\": \"assistant\", \"reasoning_content\": \"r\"}]}";
	ck_assert_msg(parse(&r, body, &p, err, sizeof err) == 0, "%s", err);
	json_t *m = json_object_get(r.vars, "messages");
	ck_assert_int_eq(json_array_size(m), 5);
	/* members kept in their order, content in its place */
	char *s = json_dumps(json_array_get(m, 0), JSON_COMPACT);
	ck_assert_str_eq(s, "{\"role\":\"system\",\"name\":\"s\",\"content\":\"S\"}");
	free(s);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(m, 1), "content")), "a\n\xc3\xa9\n");
	/* an assistant turn of only tool_calls, content null: the template sees "" (as vLLM gives it) */
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(m, 2), "content")), "");
	ck_assert_int_eq(json_array_size(json_object_get(json_array_get(m, 2), "tool_calls")), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(m, 3), "content")), "");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(m, 3), "tool_call_id")), "1");
	ck_assert_ptr_null(json_object_get(json_array_get(m, 4), "content"));   /* absent stays absent */
	chat_request_free(&r);
}
END_TEST

START_TEST(test_refusals)
{
	refused("", NULL, "not valid JSON");
	refused("[1]", NULL, "JSON object");
	refused("{\"messages\": [{\"role\": \"user\", \"content\": \"\\ud800\"}]}", NULL, "not valid JSON");
	refused("{}", "messages", "required");
	refused("{\"messages\": null}", "messages", "required");
	refused("{\"messages\": \"hi\"}", "messages", "array");
	refused("{\"messages\": []}", "messages", "empty");
	refused("{\"messages\": [1]}", "messages[0]", "object");
	refused("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"content\": \"x\"}]}", "messages[1].role",
	        "role");
	refused("{\"messages\": [{\"role\": \"critic\", \"content\": \"x\"}]}", "messages[0].role", "developer");
	refused("{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content", "needs a 'content'");
	refused("{\"messages\": [{\"role\": \"system\", \"content\": null}]}", "messages[0].content", "content");
	refused("{\"messages\": [{\"role\": \"user\", \"content\": {}}]}", "messages[0].content", "string");
	refused("{\"messages\": [{\"role\": \"user\", \"content\": [\"x\"]}]}", "messages[0].content[0]", "object");
	refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"text\": \"x\"}]}]}", "messages[0].content[0]",
	        "type");
	refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", "messages[0].content[0]",
	        "'text' string");
	refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\"}, {\"type\": "
	        "\"input_audio\"}]}]}",
	        "messages[0].content[1]", "input_audio");
	refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"name\": 3}]}", "messages[0].name", "string");
	refused("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": {}}]}", "messages[0].tool_calls", "array");
	refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"extra\": "
	        "[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]}]}",
	        "messages[0]", "deeper");
	const char *ok = "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]";
	char body[512];
	static const struct { const char *field, *param, *says; } fields[] = {
		{ "\"logprobs\": 1", "logprobs", "true or false" },
		{ "\"top_logprobs\": 2", "top_logprobs", "needs 'logprobs'" },
		{ "\"logprobs\": true, \"top_logprobs\": 21", "top_logprobs", "[0, 20]" },
		{ "\"logprobs\": true, \"top_logprobs\": 1.5", "top_logprobs", "integer" },
		{ "\"max_completion_tokens\": 257", "max_completion_tokens", "[0, 256]" },
		{ "\"max_completion_tokens\": \"5\"", "max_completion_tokens", "integer" },
		{ "\"max_tokens\": -1", "max_tokens", "integer" },
		{ "\"n\": 9", "n", "[1, 8]" },
		{ "\"temperature\": -1", "temperature", "[0, 2]" },
		{ "\"stop\": [1]", "stop", "strings" },
		{ "\"stream\": 1", "stream", "true or false" },
		{ "\"add_generation_prompt\": \"yes\"", "add_generation_prompt", "true or false" },
		{ "\"chat_template_kwargs\": []", "chat_template_kwargs", "object" },
		{ "\"chat_template_kwargs\": {\"bos_token\": \"x\"}", "chat_template_kwargs", "bos_token" },
		{ "\"chat_template_kwargs\": {\"messages\": []}", "chat_template_kwargs", "messages" },
		{ "\"tools\": {}", "tools", "array" },
		{ "\"tools\": [1]", "tools", "tools[0]" },
		{ "\"tool_choice\": \"required\"", "tool_choice", "needs 'tools'" },
		{ "\"tool_choice\": \"any\"", "tool_choice", "must be" },
		{ "\"tool_choice\": {\"type\": \"function\"}", "tool_choice", "as an object" },
		{ "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
		  "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}", "tool_choice",
		  "'g', which is not among" },
		{ "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": \"required\", "
		  "\"response_format\": {\"type\": \"json_object\"}", "tool_choice", "cannot be combined with 'response_format'" },
		{ "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"strict\": true}}]", "tools",
		  "cannot be enforced" },
		{ "\"parallel_tool_calls\": 0", "parallel_tool_calls", "true or false" },
		{ "\"response_format\": {\"type\": \"json_schema\"}", "response_format", "needs a 'json_schema' object" },
		{ "\"response_format\": {\"type\": \"xml\"}", "response_format", "not supported" },
		{ "\"logit_bias\": {\"x\": 5}", "logit_bias", "not a token id" },
		{ "\"logit_bias\": {\"1\": 101}", "logit_bias", "[-100, 100]" },
		{ "\"logit_bias\": [1]", "logit_bias", "object" },
		{ "\"repetition_penalty\": 0", "repetition_penalty", "(0, 2]" },
		{ "\"min_tokens\": 257", "min_tokens", "[0, 256]" },
		{ "\"ignore_eos\": 1", "ignore_eos", "true or false" },
		{ "\"stop_token_ids\": [-1]", "stop_token_ids", "token id" },
		{ "\"functions\": []", "functions", "tools" },
		{ "\"modalities\": [\"text\", \"audio\"]", "modalities", "not supported" },
		{ "\"audio\": {}", "audio", "not supported" },
		{ "\"chat_template\": \"x\"", "chat_template", "own chat template" },
		{ "\"echo\": true", "echo", "not supported" },
		{ "\"continue_final_message\": true", "continue_final_message", "must be the assistant's (it is 'user')" },
		{ "\"continue_final_message\": 1", "continue_final_message", "true or false" },
		{ "\"best_of\": 2", "best_of", "not supported" },
	};
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		snprintf(body, sizeof body, "{%s, %s}", ok, fields[i].field);
		refused(body, fields[i].param, fields[i].says);
	}
}
END_TEST

/* The turns: developer accepted (and renamed system for a template that does not name it), continue_final_message
 * as vLLM takes it (the last message the assistant's, with text; add_generation_prompt false by default beside it, an
 * explicit true refused) and the prompt cut as transformers cuts it, enable_thinking false noted. */
START_TEST(test_turns)
{
	chat_request r;
	const char *p;
	char err[512];
	const char *dev = "{\"messages\": [{\"role\": \"developer\", \"content\": \"Be terse.\"}, {\"role\": \"user\", "
	                  "\"content\": \"hi\"}], \"chat_template_kwargs\": {\"enable_thinking\": false}}";
	ck_assert_int_eq(parse(&r, dev, &p, err, sizeof err), 0);
	json_t *m0 = json_array_get(json_object_get(r.vars, "messages"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(m0, "role")), "developer");
	ck_assert(r.thinking_off);
	ck_assert(!r.continue_final);
	chat_request_developer_as_system(&r);
	ck_assert_str_eq(json_string_value(json_object_get(m0, "role")), "system");
	ck_assert_str_eq(json_string_value(json_object_get(m0, "content")), "Be terse.");
	size_t cut;
	ck_assert_int_eq(chat_request_continue_cut(&r, "abc", 3, &cut), 0);   /* not continuing: the whole prompt */
	ck_assert_uint_eq(cut, 3);
	chat_request_free(&r);

	const char *cont = "{\"messages\": [{\"role\": \"user\", \"content\": \"Count\"}, {\"role\": \"assistant\", "
	                   "\"content\": \"<think>1 2 \"}], \"continue_final_message\": true}";
	ck_assert_int_eq(parse(&r, cont, &p, err, sizeof err), 0);
	ck_assert(r.continue_final);
	ck_assert(!r.thinking_off);
	ck_assert(json_is_false(json_object_get(r.vars, "add_generation_prompt")));   /* no new turn by default */
	/* the last occurrence, trailing whitespace kept where the prompt has the whole text */
	const char *prompt = "u: <think>1 2 \na: <think>1 2 <end>\n";
	ck_assert_int_eq(chat_request_continue_cut(&r, prompt, strlen(prompt), &cut), 0);
	ck_assert_uint_eq(cut, strlen("u: <think>1 2 \na: <think>1 2 "));
	/* a template that trimmed the text: the cut ends at the stripped text */
	prompt = "a: <think>1 2<end>";
	ck_assert_int_eq(chat_request_continue_cut(&r, prompt, strlen(prompt), &cut), 0);
	ck_assert_uint_eq(cut, strlen("a: <think>1 2"));
	/* a template that changed it: no place to continue from */
	prompt = "a: 1 2<end>";
	ck_assert_int_eq(chat_request_continue_cut(&r, prompt, strlen(prompt), &cut), -1);
	chat_request_free(&r);

	const char *both = "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}], \"continue_final_message\": "
	                   "true, \"add_generation_prompt\": false}";
	ck_assert_int_eq(parse(&r, both, &p, err, sizeof err), 0);
	chat_request_free(&r);
	refused("{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}], \"continue_final_message\": true, "
	        "\"add_generation_prompt\": true}",
	        "continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
	refused("{\"messages\": [{\"role\": \"assistant\", \"content\": \" \\n\"}], \"continue_final_message\": true}",
	        "continue_final_message", "needs text");
	refused("{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": []}], "
	        "\"continue_final_message\": true}",
	        "continue_final_message", "needs text");
	ck_assert_int_eq(parse(&r, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
	                           "\"continue_final_message\": false}", &p, err, sizeof err), 0);
	ck_assert(json_is_true(json_object_get(r.vars, "add_generation_prompt")));
	chat_request_free(&r);

	/* the template side: whether it names the developer role */
	chat_template *t = chat_template_from_string("{{ messages[0].role }}", 22, "t", NULL, NULL, err, sizeof err);
	ck_assert_ptr_nonnull(t);
	ck_assert(!chat_template_knows_developer(t));
	chat_template_free(t);
	const char *src = "{% if messages[0].role == 'developer' %}D{% endif %}";
	t = chat_template_from_string(src, strlen(src), "t", NULL, NULL, err, sizeof err);
	ck_assert_ptr_nonnull(t);
	ck_assert(chat_template_knows_developer(t));
	chat_template_free(t);
}
END_TEST

/* The sampling fields both endpoints share (completion_request_parse_shared): logit_bias into (id, bias) entries with
 * its keys and values checked against the vocabulary of the limits, stop_token_ids without repeats, the others in
 * range; absent, each is off. */
START_TEST(test_sampling_fields)
{
	const completion_limits lim = { 8, 256, 2051 };
	chat_request r;
	const char *p;
	char err[512];
	const char *msgs = "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]";
	char body[1024];
	snprintf(body, sizeof body, "{%s}", msgs);
	ck_assert_int_eq(chat_request_parse(&r, body, strlen(body), &lim, err, sizeof err, &p), 0);
	ck_assert_int_eq(r.base.n_bias, 0);
	ck_assert(r.base.repetition_penalty == 1.0);
	ck_assert_int_eq(r.base.min_tokens, 0);
	ck_assert(!r.base.ignore_eos);
	ck_assert_int_eq(r.base.n_stop_token_ids, 0);
	chat_request_free(&r);

	snprintf(body, sizeof body, "{%s, \"logit_bias\": {\"0\": -100, \"2050\": 100, \"17\": 2.5}, "
	         "\"repetition_penalty\": 1.3, \"min_tokens\": 4, \"max_tokens\": 9, \"ignore_eos\": true, "
	         "\"stop_token_ids\": [7, 2048, 7]}", msgs);
	ck_assert_msg(chat_request_parse(&r, body, strlen(body), &lim, err, sizeof err, &p) == 0, "%s", err);
	ck_assert_int_eq(r.base.n_bias, 3);
	ck_assert(r.base.bias[0].id == 0 && r.base.bias[0].bias == -100.0f);
	ck_assert(r.base.bias[1].id == 2050 && r.base.bias[1].bias == 100.0f);
	ck_assert(r.base.bias[2].id == 17 && r.base.bias[2].bias == 2.5f);
	ck_assert(r.base.repetition_penalty == 1.3);
	ck_assert_int_eq(r.base.min_tokens, 4);
	ck_assert(r.base.ignore_eos);
	ck_assert_int_eq(r.base.n_stop_token_ids, 2);
	ck_assert(r.base.stop_token_ids[0] == 7 && r.base.stop_token_ids[1] == 2048);
	chat_request_free(&r);

	static const struct { const char *field, *says; } bad[] = {
		{ "\"logit_bias\": {\"2051\": 1}", "not in the vocabulary [0, 2051)" },   /* a padding row, or beyond */
		{ "\"logit_bias\": {\"-1\": 1}", "not a token id" },
		{ "\"logit_bias\": {\"+1\": 1}", "not a token id" },
		{ "\"logit_bias\": {\"01\": 1}", "not a token id" },
		{ "\"logit_bias\": {\"\": 1}", "not a token id" },
		{ "\"logit_bias\": {\"1.0\": 1}", "not a token id" },
		{ "\"logit_bias\": {\"99999999999\": 1}", "not a token id" },
		{ "\"logit_bias\": {\"1\": \"5\"}", "[-100, 100]" },
		{ "\"logit_bias\": {\"1\": -100.5}", "[-100, 100]" },
		{ "\"repetition_penalty\": 2.5", "(0, 2]" },
		{ "\"repetition_penalty\": \"1\"", "number" },
		{ "\"min_tokens\": -1", "[0, 256]" },
		{ "\"min_tokens\": 1.5", "integer" },
		{ "\"stop_token_ids\": [2051]", "[0, 2051)" },
		{ "\"stop_token_ids\": 5", "array" },
		{ "\"stop_token_ids\": [\"5\"]", "token id" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(body, sizeof body, "{%s, %s}", msgs, bad[i].field);
		p = "unset";
		ck_assert_msg(chat_request_parse(&r, body, strlen(body), &lim, err, sizeof err, &p) == -1, "accepted: %s", body);
		const char *name = strchr(bad[i].field, '"') + 1;
		ck_assert_msg(p && !strncmp(p, name, strlen(p)) && name[strlen(p)] == '"', "%s: param %s", body, p);
		ck_assert_msg(strstr(err, bad[i].says) != NULL, "%s: '%s' does not say '%s'", body, err, bad[i].says);
		chat_request_free(&r);
	}

	/* at most 1024 logit_bias entries; at most 64 distinct stop_token_ids */
	size_t cap = 64 * 1024;
	char *big = malloc(cap);
	for (int n = 1024; n <= 1025; n++) {
		size_t at = (size_t)snprintf(big, cap, "{%s, \"logit_bias\": {", msgs);
		for (int i = 0; i < n; i++)
			at += (size_t)snprintf(big + at, cap - at, "%s\"%d\": 1", i ? ", " : "", i);
		snprintf(big + at, cap - at, "}}");
		int rc = chat_request_parse(&r, big, strlen(big), &lim, err, sizeof err, &p);
		ck_assert_msg(rc == (n == 1024 ? 0 : -1), "%d entries: %s", n, err);
		if (rc == 0)
			ck_assert_int_eq(r.base.n_bias, 1024);
		else
			ck_assert(!strcmp(p, "logit_bias") && strstr(err, "at most 1024"));
		chat_request_free(&r);
	}
	for (int n = 64; n <= 65; n++) {
		size_t at = (size_t)snprintf(big, cap, "{%s, \"stop_token_ids\": [", msgs);
		for (int i = 0; i < n; i++)
			at += (size_t)snprintf(big + at, cap - at, "%s%d, %d", i ? ", " : "", i, i);   /* each twice */
		snprintf(big + at, cap - at, "]}");
		int rc = chat_request_parse(&r, big, strlen(big), &lim, err, sizeof err, &p);
		ck_assert_msg(rc == (n == 64 ? 0 : -1), "%d ids: %s", n, err);
		if (rc != 0)
			ck_assert(!strcmp(p, "stop_token_ids"));
		chat_request_free(&r);
	}
	free(big);
}
END_TEST

START_TEST(test_message_count_bound)
{
	/* CHAT_MAX_MESSAGES accepted, one more refused */
	size_t cap = 64 + (CHAT_MAX_MESSAGES + 1) * 40;
	char *body = malloc(cap);
	for (int n = CHAT_MAX_MESSAGES; n <= CHAT_MAX_MESSAGES + 1; n++) {
		size_t at = (size_t)snprintf(body, cap, "{\"messages\": [");
		for (int i = 0; i < n; i++)
			at += (size_t)snprintf(body + at, cap - at, "%s{\"role\": \"user\", \"content\": \"m\"}", i ? "," : "");
		snprintf(body + at, cap - at, "]}");
		chat_request r;
		const char *p;
		char err[512];
		int rc = parse(&r, body, &p, err, sizeof err);
		ck_assert_int_eq(rc, n == CHAT_MAX_MESSAGES ? 0 : -1);
		if (rc != 0)
			ck_assert(strstr(err, "at most 4096") != NULL);
		chat_request_free(&r);
	}
	free(body);
}
END_TEST

/* ---- template sources ---- */

static void write_file(const char *name, const char *text)
{
	char path[600];
	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

/* Renders t with one user message "hi" and the generation prompt. */
static char *render_hi(const chat_template *t)
{
	json_t *vars = json_pack("{s:[{s:s,s:s}],s:b}", "messages", "role", "user", "content", "hi",
	                         "add_generation_prompt", 1);
	char *out;
	size_t len;
	char err[256];
	jinja_status st = chat_template_render(t, vars, NULL, &out, &len, err, sizeof err);
	json_decref(vars);
	ck_assert_msg(st == JINJA_OK, "%s", err);
	ck_assert_uint_eq(strlen(out), len);
	return out;
}

START_TEST(test_template_sources)
{
	chat_template *t;
	char err[512];
	/* no tokenizer_config.json, no file: no template, no error */
	ck_assert_int_eq(chat_template_load("", tmpdir, NULL, &t, err, sizeof err), 0);
	ck_assert_ptr_null(t);
	/* a config without chat_template: none either */
	write_file("tokenizer_config.json", "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": "
	                                    "\"</s>\"}");
	ck_assert_int_eq(chat_template_load(NULL, tmpdir, NULL, &t, err, sizeof err), 0);
	ck_assert_ptr_null(t);
	/* a string; bos from an AddedToken object, eos from a string */
	write_file("tokenizer_config.json", "{\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"</s>\", "
	                                    "\"chat_template\": \"{{ bos_token }}[{{ messages[0].content }}]{{ eos_token }}\"}");
	ck_assert_msg(chat_template_load(NULL, tmpdir, NULL, &t, err, sizeof err) == 0 && t, "%s", err);
	ck_assert(strstr(chat_template_origin(t), "tokenizer_config.json") != NULL);
	char *out = render_hi(t);
	ck_assert_str_eq(out, "<s>[hi]</s>");
	free(out);
	chat_template_free(t);
	/* the named list: "default" is taken; a null bos_token leaves the variable undefined */
	write_file("tokenizer_config.json",
	           "{\"bos_token\": null, \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": "
	           "\"default\", \"template\": \"{% if bos_token is defined %}B{% endif %}D{{ messages|length }}\"}]}");
	ck_assert_msg(chat_template_load(NULL, tmpdir, NULL, &t, err, sizeof err) == 0 && t, "%s", err);
	out = render_hi(t);
	ck_assert_str_eq(out, "D1");
	free(out);
	chat_template_free(t);
	write_file("tokenizer_config.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}]}");
	ck_assert_int_eq(chat_template_load(NULL, tmpdir, NULL, &t, err, sizeof err), -1);
	ck_assert(strstr(err, "default") && strstr(err, "--chat-template"));
	write_file("tokenizer_config.json", "{\"chat_template\": 7}");
	ck_assert_int_eq(chat_template_load(NULL, tmpdir, NULL, &t, err, sizeof err), -1);
	/* chat_template.jinja beside it comes first; a configured file before both */
	write_file("tokenizer_config.json", "{\"chat_template\": \"config\"}");
	write_file("chat_template.jinja", "jinja file{% if add_generation_prompt %}!{% endif %}");
	ck_assert_msg(chat_template_load(NULL, tmpdir, NULL, &t, err, sizeof err) == 0 && t, "%s", err);
	ck_assert(strstr(chat_template_origin(t), "chat_template.jinja") != NULL);
	out = render_hi(t);
	ck_assert_str_eq(out, "jinja file!");
	free(out);
	chat_template_free(t);
	char path[600];
	snprintf(path, sizeof path, "%s/mine.jinja", tmpdir);
	write_file("mine.jinja", "mine");
	ck_assert_msg(chat_template_load(path, tmpdir, NULL, &t, err, sizeof err) == 0 && t, "%s", err);
	ck_assert(strstr(chat_template_origin(t), "--chat-template") != NULL);
	out = render_hi(t);
	ck_assert_str_eq(out, "mine");
	free(out);
	chat_template_free(t);
	/* a file that cannot be read, and one that does not parse: errors naming it, and the line and column */
	snprintf(path, sizeof path, "%s/absent.jinja", tmpdir);
	ck_assert_int_eq(chat_template_load(path, tmpdir, NULL, &t, err, sizeof err), -1);
	ck_assert(strstr(err, "absent.jinja") != NULL);
	write_file("bad.jinja", "ok\n{% for m in messages %}{{ m.content }\n");
	snprintf(path, sizeof path, "%s/bad.jinja", tmpdir);
	ck_assert_int_eq(chat_template_load(path, tmpdir, NULL, &t, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "bad.jinja") && strstr(err, "line 2, column "), "%s", err);
	/* the string hook, as the GGUF loader calls it */
	t = chat_template_from_string("{{ eos_token }}", 15, "model.gguf", NULL, "<|im_end|>", err, sizeof err);
	ck_assert_msg(t != NULL, "%s", err);
	ck_assert_str_eq(chat_template_origin(t), "model.gguf");
	out = render_hi(t);
	ck_assert_str_eq(out, "<|im_end|>");
	free(out);
	chat_template_free(t);
}
END_TEST

START_TEST(test_render_statuses)
{
	char err[512];
	const char *raise = "{{ raise_exception('no ' + messages[0].role) }}";
	chat_template *t = chat_template_from_string(raise, strlen(raise), "x", NULL, NULL, err, sizeof err);
	ck_assert_msg(t != NULL, "%s", err);
	json_t *vars = json_pack("{s:[{s:s}]}", "messages", "role", "tool");
	char *out;
	size_t len;
	ck_assert_int_eq(chat_template_render(t, vars, NULL, &out, &len, err, sizeof err), JINJA_ERR_RAISE);
	ck_assert_ptr_null(out);
	ck_assert_str_eq(err, "no tool");
	chat_template_free(t);
	const char *loop = "{% for a in messages %}{% for b in messages %}{% for c in messages %}x{% endfor %}{% endfor "
	                   "%}{% endfor %}";
	t = chat_template_from_string(loop, strlen(loop), "x", NULL, NULL, err, sizeof err);
	ck_assert_msg(t != NULL, "%s", err);
	json_t *many = json_array();
	for (int i = 0; i < 100; i++)
		json_array_append_new(many, json_pack("{s:s}", "role", "user"));
	json_object_set_new(vars, "messages", many);
	jinja_limits lim = { .max_steps = 10000 };
	ck_assert_int_eq(chat_template_render(t, vars, &lim, &out, &len, err, sizeof err), JINJA_ERR_LIMIT);
	ck_assert_ptr_null(out);
	json_decref(vars);
	chat_template_free(t);
}
END_TEST

static Suite *chat_suite(void)
{
	Suite *s = suite_create("chat");
	TCase *req = tcase_create("request");
	tcase_add_test(req, test_defaults_and_fields);
	tcase_add_test(req, test_messages_become_variables);
	tcase_add_test(req, test_refusals);
	tcase_add_test(req, test_turns);
	tcase_add_test(req, test_sampling_fields);
	tcase_add_test(req, test_message_count_bound);
	suite_add_tcase(s, req);
	TCase *tpl = tcase_create("template");
	tcase_add_checked_fixture(tpl, tmp_setup, tmp_teardown);
	tcase_add_test(tpl, test_template_sources);
	tcase_add_test(tpl, test_render_statuses);
	suite_add_tcase(s, tpl);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(chat_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
