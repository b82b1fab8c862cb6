/* server/config.c — the configuration table and its three readers: the file, the flags, --help (see config.h).
 * Every key's default goes through the same setter as a file or a flag would, so the table is the one truth. */
#include "server/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef enum config_type { CONFIG_STRING, CONFIG_INT, CONFIG_ENUM } config_type;

typedef struct config_row {
	const char *name;
	config_type type;
	size_t offset;                  /* into aahd_config: char * or int64_t */
	int64_t min, max;               /* CONFIG_INT */
	const char *const *values;      /* CONFIG_ENUM: NULL-terminated */
	const char *def;
	const char *help;
} config_row;

static const char *const backends[] = { "auto", "cpu", "cuda", NULL };
static const char *const dtypes[] = { "f32", "f16", "bf16", NULL };
static const char *const levels[] = { "error", "warn", "info", "debug", NULL };
static const char *const on_off[] = { "on", "off", NULL };
static const char *const cache_scopes[] = { "key", "global", NULL };
static const char *const reasoning_parsers[] = { "qwen3", "none", NULL };
static const char *const drafts[] = { "off", "ngram", "regime", "model", NULL };
static const char *const amx_modes[] = { "auto", "off", "all", NULL };
static const char *const bf16_modes[] = { "auto", "f32", "bf16", "amx", NULL };
static const char *const tool_call_parsers[] = { "auto", "hermes", "llama3_json", "mistral", "none", NULL };

#define STR(f) CONFIG_STRING, offsetof(aahd_config, f), 0, 0, NULL
#define INT(f, lo, hi) CONFIG_INT, offsetof(aahd_config, f), lo, hi, NULL
#define ENUM(f, v) CONFIG_ENUM, offsetof(aahd_config, f), 0, 0, v

static const config_row rows[] = {
	{ "host", STR(host), "127.0.0.1", "address to listen on (0.0.0.0 or :: for every interface)" },
	{ "port", INT(port, 0, 65535), "8080", "TCP port; 0 picks a free one and logs it" },
	{ "model", STR(model), "",
	  "model directory (Hugging Face layout, optional aah.json), a run directory, or a .gguf file (docs/quantize.md)" },
	{ "aah", STR(aah), "", "the AAH regimes file; empty: aah.json beside the model, if there is one" },
	{ "model_name", STR(model_name), "", "model id in the API; empty: the model directory's base name" },
	{ "checkpoint_step", INT(checkpoint_step, 0, INT64_MAX), "0",
	  "in a run directory, load checkpoint-N; 0: the highest step" },
	{ "regime", STR(regime), "", "default AAH regime; empty: aah.json's default_regime (else full_attention)" },
	{ "chat_template", STR(chat_template), "",
	  "Jinja2 chat template file for /v1/chat/completions; empty: the model's own (chat_template.jinja or "
	  "tokenizer_config.json's chat_template; none: chat requests get 400)" },
	{ "reasoning_parser", ENUM(reasoning_parser, reasoning_parsers), "qwen3",
	  "chat answers: qwen3 puts a <think>…</think> block that opens the answer (or that the prompt opened) in "
	  "reasoning_content, as vLLM's --reasoning-parser qwen3 (docs/chat.md); none: all text is content" },
	{ "tool_call_parser", ENUM(tool_call_parser, tool_call_parsers), "auto",
	  "chat answers to requests with tools: the tool-call format parsed out of the content into message.tool_calls "
	  "(docs/chat.md#tools); auto: the format the chat template's source writes calls in (mistral for [TOOL_CALLS], "
	  "hermes for <tool_call>, llama3_json for <|python_tag|> or the ipython role), else none; hermes, llama3_json, "
	  "mistral: that format; none: no parsing, and tool_choice required or a named function get 400" },
	{ "backend", ENUM(backend, backends), "auto", "compute backend: auto, cpu, cuda (auto: CUDA when present)" },
	{ "threads", INT(threads, 0, 1024), "0", "CPU threads of the engine; 0: every online core" },
	{ "cpu_amx", ENUM(cpu_amx, amx_modes), "auto",
	  "CPU backend, quantized products on AMX-INT8 tiles (where the CPU and kernel allow them; the same bits either "
	  "way): auto (the environment's AAH_AMX if set, else every packed type on tiles from the row count where they "
	  "are faster), off, all (the same as the default); a value other than auto overrides AAH_AMX" },
	{ "cpu_bf16", ENUM(cpu_bf16, bf16_modes), "auto",
	  "CPU backend, bf16 weights' products: auto (the environment's AAH_CPU_BF16 if set, else f32), f32 (exact: f32 "
	  "activations times the widened weights), bf16 (vdpbf16ps, activations rounded to bf16, where the CPU has "
	  "AVX-512 BF16), amx (AMX-BF16 tiles where the CPU has them); a value other than auto overrides AAH_CPU_BF16" },
	{ "max_batch", INT(max_batch, 1, 256), "8", "sequences running at once (continuous batching)" },
	{ "ctx_len", INT(ctx_len, 0, 1 << 20), "0", "context length per sequence; 0: min(the model's, 4096)" },
	{ "kv_dtype", ENUM(kv_dtype, dtypes), "f16",
	  "KV cache element type: f16 (half the memory of f32, as fast; 10 mantissa bits, finite below 65504), bf16 "
	  "(the same memory, f32's range, 7 bits), f32 (the exact reference)" },
	{ "kv_budget_bytes", INT(kv_budget_bytes, 0, INT64_MAX), "0",
	  "KV cache page pool in bytes; 0: room for max_batch full contexts" },
	{ "prefix_cache", ENUM(prefix_cache, on_off), "on",
	  "reuse the KV of prompts' shared beginnings (per regime, bit for bit the same outputs; docs/prefix_cache.md): "
	  "on, off" },
	{ "prefix_cache_bytes", INT(prefix_cache_bytes, 0, INT64_MAX), "0",
	  "most KV bytes the prefix cache keeps; 0: as much of the page pool as requests leave (it yields at once)" },
	{ "speculation", ENUM(speculation, drafts), "off",
	  "speculative decoding for requests that do not choose (aah_speculation; docs/speculative.md): off, ngram "
	  "(prompt lookup), regime (the model under draft_regime), model (model_draft); the output is the same either way" },
	{ "spec_k", INT(spec_k, 1, 15), "4", "draft tokens a verify pass checks at most, unless a request says" },
	{ "spec_adaptive", ENUM(spec_adaptive, on_off), "on",
	  "on: a request's draft length shrinks to what was accepted after a rejection and grows back by one after a "
	  "draft taken whole; off: always spec_k" },
	{ "draft_regime", STR(draft_regime), "",
	  "an AAH regime of the model that drafts for regime speculation (smaller windows: cheaper steps at long context); "
	  "it opens a draft sequence beside every slot; empty: regime drafts are off" },
	{ "model_draft", STR(model_draft), "",
	  "a draft model for model speculation (a directory or .gguf with the same tokenizer, checked at load); empty: none" },
	{ "prefill_chunk", INT(prefill_chunk, 3, 65536), "256",
	  "prompt tokens per engine step, so that a long prompt does not stall the decoding sequences" },
	{ "max_body_bytes", INT(max_body_bytes, 1024, (int64_t)1 << 30), "1048576",
	  "largest request body; larger ones get 413" },
	{ "max_prompt_tokens", INT(max_prompt_tokens, 0, 1 << 20), "0", "longest prompt in tokens; 0: the context length" },
	{ "max_tokens", INT(max_tokens, 0, 1 << 20), "4096",
	  "most tokens one choice may generate (the cap of the request's max_tokens); 0: the context length" },
	{ "max_n", INT(max_n, 1, 1024), "16", "most choices (n × prompts) in one request" },
	{ "queue_length", INT(queue_length, 1, 1 << 20), "64",
	  "sequences waiting for a slot at most; beyond that requests get 429 with Retry-After" },
	{ "api_key", STR(api_key), "",
	  "require 'Authorization: Bearer KEY' (every endpoint but /health); empty: none. The environment variable "
	  "AAHD_API_KEY overrides it (keeps the key out of files and the process list)" },
	{ "api_keys", STR(api_keys), "",
	  "a file of named API keys, one 'NAME KEY' per line (# comments); any of them opens every endpoint but /health, "
	  "as api_key does (which may be set beside it, as the key named default); empty: none" },
	{ "prefix_cache_scope", ENUM(prefix_cache_scope, cache_scopes), "key",
	  "whose cached prompts a request may reuse: key (only those sent with its own API key; with no key, everyone "
	  "shares one scope), global (every key's); a request's cache_salt narrows it further" },
	{ "log_level", ENUM(log_level, levels), "info", "error, warn, info (one line per request), debug" },
	{ "max_connections", INT(max_connections, 1, 65536), "256",
	  "HTTP connections served at once (no thread of their own; buffers and libmicrohttpd's pool, about 110 KiB "
	  "each); more wait for a slot, and get 503 with Retry-After when none frees within request_timeout" },
	{ "probe_connections", INT(probe_connections, 0, 1024), "4",
	  "connections beyond max_connections for GET /health and GET /metrics alone (one request each)" },
	{ "per_ip_connections", INT(per_ip_connections, 0, 65536), "0",
	  "connections per client address, served and waiting; more get 429; 0: no limit" },
	{ "connection_timeout", INT(connection_timeout, 1, 86400), "60",
	  "seconds a connection may stay idle between requests, or stall reading its response" },
	{ "request_timeout", INT(request_timeout, 1, 86400), "30",
	  "seconds a client has to send a request's head and body, from its first byte (then 408)" },
	{ "shutdown_grace_seconds", INT(shutdown_grace_seconds, 0, 86400), "30",
	  "on SIGTERM/SIGINT: seconds to finish running requests before cancelling them" },
};
#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))

static const config_row *row_find(const char *key)
{
	for (int i = 0; i < N_ROWS; i++)
		if (!strcmp(rows[i].name, key))
			return &rows[i];
	return NULL;
}

static int row_set(aahd_config *c, const config_row *r, const char *value, char *err, size_t err_len)
{
	void *field = (char *)c + r->offset;
	switch (r->type) {
	case CONFIG_INT: {
		char *end;
		errno = 0;
		long long v = strtoll(value, &end, 10);
		/* a size may carry a binary suffix: 64M, 2G */
		if (end != value && !errno && *end && !end[1] && strchr("KMG", toupper((unsigned char)*end))) {
			int shift = toupper((unsigned char)*end) == 'K' ? 10 : toupper((unsigned char)*end) == 'M' ? 20 : 30;
			if (v > (LLONG_MAX >> shift) || v < -(LLONG_MAX >> shift))
				errno = ERANGE;
			v <<= shift;
			end++;
		}
		if (end == value || *end || errno || v < r->min || v > r->max) {
			snprintf(err, err_len, "%s: '%s' is not an integer in [%" PRId64 ", %" PRId64 "]", r->name, value, r->min,
			         r->max);
			return -1;
		}
		*(int64_t *)field = v;
		return 0;
	}
	case CONFIG_ENUM: {
		int i = 0;
		while (r->values[i] && strcmp(r->values[i], value))
			i++;
		if (!r->values[i]) {
			int n = snprintf(err, err_len, "%s: '%s' is not one of", r->name, value);
			for (int j = 0; r->values[j] && n > 0 && (size_t)n < err_len; j++)
				n += snprintf(err + n, err_len - (size_t)n, " %s", r->values[j]);
			return -1;
		}
	}
		/* an enum is stored as its string */
		/* fall through */
	case CONFIG_STRING: {
		char *copy = strdup(value);
		if (!copy) {
			snprintf(err, err_len, "out of memory");
			return -1;
		}
		free(*(char **)field);
		*(char **)field = copy;
		return 0;
	}
	}
	return -1;
}

void aahd_config_init(aahd_config *c)
{
	memset(c, 0, sizeof *c);
	char err[256];
	for (int i = 0; i < N_ROWS; i++)
		if (row_set(c, &rows[i], rows[i].def, err, sizeof err) != 0) {
			fprintf(stderr, "%s:%d: the default of %s is invalid: %s\n", __FILE__, __LINE__, rows[i].name, err);
			abort();   /* a bug in the table */
		}
}

void aahd_config_free(aahd_config *c)
{
	for (int i = 0; i < N_ROWS; i++)
		if (rows[i].type != CONFIG_INT) {
			char **f = (char **)((char *)c + rows[i].offset);
			free(*f);
			*f = NULL;
		}
}

int aahd_config_set(aahd_config *c, const char *key, const char *value, char *err, size_t err_len)
{
	const config_row *r = row_find(key);
	if (!r) {
		snprintf(err, err_len, "unknown key '%s' (aahd --help lists them)", key);
		return -1;
	}
	return row_set(c, r, value, err, err_len);
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = 0;
	return s;
}

int aahd_config_load(aahd_config *c, const char *path, char *err, size_t err_len)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, err_len, "%s: %s", path, strerror(errno));
		return -1;
	}
	char line[8192], msg[512];
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(err, err_len, "%s:%d: line too long", path, lineno);
			rc = -1;
			break;
		}
		char *s = trim(line);
		if (!*s || *s == '#')
			continue;
		/* key = value, or key value */
		char *key = s;
		size_t k = strcspn(s, " \t=");
		char *v = s + k;
		if (*v)
			*v++ = 0;
		v = trim(v);
		if (*v == '=')
			v = trim(v + 1);
		size_t vn = strlen(v);
		if (vn >= 2 && v[0] == '"' && v[vn - 1] == '"') {
			v[vn - 1] = 0;
			v++;
		}
		if (aahd_config_set(c, key, v, msg, sizeof msg) != 0) {
			snprintf(err, err_len, "%s:%d: %s", path, lineno, msg);
			rc = -1;
			break;
		}
	}
	fclose(f);
	return rc;
}

int aahd_config_check(const aahd_config *c, char *err, size_t err_len)
{
	if (!*c->model) {
		snprintf(err, err_len, "no model: set 'model' in the configuration file or give --model DIR");
		return -1;
	}
	if (!*c->host) {
		snprintf(err, err_len, "host is empty");
		return -1;
	}
	if (!strcmp(c->speculation, "regime") && !*c->draft_regime) {
		snprintf(err, err_len, "speculation = regime needs a draft_regime (--draft-regime NAME)");
		return -1;
	}
	if (!strcmp(c->speculation, "model") && !*c->model_draft) {
		snprintf(err, err_len, "speculation = model needs a model_draft (--model-draft DIR)");
		return -1;
	}
	return 0;
}

int aahd_config_count(void) { return N_ROWS; }
const char *aahd_config_name(int i) { return i >= 0 && i < N_ROWS ? rows[i].name : NULL; }

void aahd_config_print_help(FILE *f)
{
	for (int i = 0; i < N_ROWS; i++) {
		char flag[64];
		snprintf(flag, sizeof flag, "--%s", rows[i].name);
		for (char *p = flag + 2; *p; p++)
			if (*p == '_')
				*p = '-';
		const char *arg = rows[i].type == CONFIG_INT ? "N" : rows[i].type == CONFIG_ENUM ? "NAME" : "TEXT";
		char left[96];
		snprintf(left, sizeof left, "%s %s", flag, arg);
		fprintf(f, "  %-32s %s (default: %s)\n", left, rows[i].help, *rows[i].def ? rows[i].def : "empty");
	}
}

void aahd_config_print(const aahd_config *c, FILE *f)
{
	fprintf(f, "# aahd.conf — aahd's configuration: every key, with its default. `key = value` (strings may be\n"
	           "# \"quoted\"; # starts a comment line). Each key is also a flag, --key-name VALUE, that overrides the\n"
	           "# file; `aahd --help` lists them, `aahd --print-config` prints the configuration in effect.\n");
	for (int i = 0; i < N_ROWS; i++) {
		const void *field = (const char *)c + rows[i].offset;
		fprintf(f, "\n# %s (default: %s)\n", rows[i].help, *rows[i].def ? rows[i].def : "empty");
		if (rows[i].type == CONFIG_INT)
			fprintf(f, "%s = %" PRId64 "\n", rows[i].name, *(const int64_t *)field);
		else if (!strcmp(rows[i].name, "api_key") && **(char *const *)field)
			fprintf(f, "# %s = (set; not shown)\n", rows[i].name);
		else
			fprintf(f, "%s = \"%s\"\n", rows[i].name, *(char *const *)field);
	}
}

void aahd_config_export_cpu_switches(const aahd_config *c)
{
	if (strcmp(c->cpu_amx, "auto") != 0)
		setenv("AAH_AMX", !strcmp(c->cpu_amx, "off") ? "0" : "all", 1);
	if (strcmp(c->cpu_bf16, "auto") != 0)
		setenv("AAH_CPU_BF16", c->cpu_bf16, 1);
}
