/* server/config.h — aahd's configuration: one table of keys (name, type, bounds, default, help) that serves the
 * file (conf/aahd.conf), the command-line flags (--key-name VALUE) and `aahd --help`, as redis's config.c. */
#ifndef AAH_SERVER_CONFIG_H
#define AAH_SERVER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct aahd_config {
	char *host;                     /* listen address */
	int64_t port;                   /* 0: any free port (the log says which) */
	char *model;                    /* model directory (or run directory of checkpoints, or a .gguf file) */
	char *aah;                      /* aah.json to use; "" = the one beside the model, if any */
	char *model_name;               /* the id clients name; "" = the model directory's base name */
	int64_t checkpoint_step;        /* 0 = the highest */
	char *regime;                   /* default AAH regime; "" = the model's default_regime */
	char *chat_template;            /* Jinja2 chat template file; "" = the model's own (tokenizer_config.json) */
	char *reasoning_parser;         /* qwen3: <think> blocks of chat answers go to reasoning_content; none: off */
	char *tool_call_parser;         /* auto, hermes, llama3_json, mistral, none (server/tool_calls.h) */
	char *backend;                  /* auto, cpu, cuda */
	char *cpu_amx;                  /* auto (AAH_AMX as set, else every packed type on tiles), off, all */
	char *cpu_bf16;                 /* auto (AAH_CPU_BF16 as set, else exact), f32, bf16, amx */
	int64_t threads;                /* 0 = online cores */
	int64_t max_batch;              /* sequences running at once */
	int64_t ctx_len;                /* 0 = min(model's, 4096) */
	char *kv_dtype;                 /* f32, f16, bf16 */
	int64_t kv_budget_bytes;        /* 0 = room for max_batch full contexts */
	char *prefix_cache;             /* on, off */
	int64_t prefix_cache_bytes;     /* 0 = no cap below the page pool */
	char *speculation;              /* the requests' default draft: off, ngram, regime, model */
	int64_t spec_k;                 /* draft tokens per verify pass at most */
	char *spec_adaptive;            /* on, off */
	char *draft_regime;             /* "" = no regime drafts */
	char *model_draft;              /* "" = no draft model */
	int64_t prefill_chunk;          /* prompt tokens per engine step */
	int64_t max_body_bytes;
	int64_t max_prompt_tokens;      /* 0 = the context length */
	int64_t max_tokens;             /* output tokens per choice at most; 0 = the context length */
	int64_t max_n;                  /* choices (n × prompts) per request at most */
	int64_t queue_length;
	char *api_key;                  /* "" = no authentication */
	char *api_keys;                 /* a file of named keys (server/api_keys.h); "" = none */
	char *prefix_cache_scope;       /* key: each API key's prefixes its own; global: shared by every key */
	char *log_level;
	int64_t max_connections;        /* served at once */
	int64_t probe_connections;      /* beyond them, for /health and /metrics */
	int64_t per_ip_connections;     /* 0 = off */
	int64_t connection_timeout;     /* seconds a connection may stay idle */
	int64_t request_timeout;        /* seconds for a request's head and body */
	int64_t shutdown_grace_seconds;
} aahd_config;

/* Fills c with every key's default. Free with aahd_config_free. */
void aahd_config_init(aahd_config *c);
void aahd_config_free(aahd_config *c);
/* Sets a key from its text (the file's and the flags' path). Returns 0, or -1 with a message. */
int aahd_config_set(aahd_config *c, const char *key, const char *value, char *err, size_t err_len);
/* Reads `key = value` lines (# starts a comment line; values may be "quoted"). Returns 0, or -1 with
 * "file:line: message". */
int aahd_config_load(aahd_config *c, const char *path, char *err, size_t err_len);
/* Checks what single keys cannot (e.g. a model is named). Returns 0, or -1 with a message. */
int aahd_config_check(const aahd_config *c, char *err, size_t err_len);
/* Hands the CPU backend's product switches to it the one way it reads them, its environment variables, before any
 * engine exists: cpu_amx off or all sets AAH_AMX (0, all), cpu_bf16 f32, bf16 or amx sets AAH_CPU_BF16; auto leaves
 * the variable as the environment has it. So a key that is not auto overrides the environment. */
void aahd_config_export_cpu_switches(const aahd_config *c);

/* The table, for the flags and --help: key i's name, its flag (--key-name), and a help line. */
int aahd_config_count(void);
const char *aahd_config_name(int i);
/* Prints "  --flag VALUE   help (default: …)" for every key. */
void aahd_config_print_help(FILE *f);
/* Prints the configuration as a commented config file (conf/aahd.conf is this with the defaults); a set api_key
 * is not shown. */
void aahd_config_print(const aahd_config *c, FILE *f);

#endif
