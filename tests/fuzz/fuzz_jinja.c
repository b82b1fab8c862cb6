/* tests/fuzz/fuzz_jinja.c — libFuzzer target for server/jinja/jinja.h: the input is a template, then optionally a NUL
 * byte and a JSON object of variables (else a small conversation). Any bytes parse to a template or to an error
 * "line L, column C: …"; a template renders within small limits to NUL-terminated output or to an error that says
 * why; nothing crashes, hangs or leaks. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/jinja";

static const char default_vars[] =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"hi \\u00e9\"},"
	" {\"role\": \"assistant\", \"content\": \"<think>\\nx\\n</think>\\n\\nyo\", \"tool_calls\": [{\"id\": \"abcdefghi\","
	" \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null, true]}}}]}, {\"role\": \"tool\","
	" \"tool_call_id\": \"abcdefghi\", \"content\": \"42\"}], \"tools\": [{\"type\": \"function\", \"function\":"
	" {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}], \"add_generation_prompt\": true,"
	" \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t tlen = nul ? (size_t)(nul - data) : size;
	json_t *vars = nul ? json_loadb((const char *)nul + 1, size - tlen - 1, 0, NULL)
	                   : json_loads(default_vars, 0, NULL);
	if (!json_is_object(vars)) {   /* variables that are not an object: the template alone */
		json_decref(vars);
		vars = json_object();
	}
	char err[256];
	jinja_template *t = jinja_parse((const char *)data, tlen, err, sizeof err);
	if (!t) {
		if (strncmp(err, "line ", 5) != 0) abort();
	} else {
		jinja_limits lim = { .max_steps = 200000, .max_output = 1 << 20, .max_memory = 8 << 20 };
		char *out = (char *)1;
		size_t out_len = 12345;
		jinja_status st = jinja_render(t, vars, &lim, &out, &out_len, err, sizeof err);
		if (st == JINJA_OK) {
			if (!out || out[out_len] != 0 || out_len > lim.max_output) abort();
		} else {
			if (out != NULL || st > JINJA_ERR_MEMORY) abort();
			if (st != JINJA_ERR_RAISE && err[0] == 0) abort();
		}
		free(out);
		jinja_free(t);
	}
	json_decref(vars);
	return 0;
}
