/* server/server.h — what every HTTP handler shares: the configuration, the tokenizer, the scheduler (the engine
 * thread's queue), what the model offers, and the HTTP counters; server_run is the daemon's life cycle. */
#ifndef AAH_SERVER_SERVER_H
#define AAH_SERVER_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "engine/grammar/grammar_cache.h"
#include "engine/scheduler.h"
#include "models/tokenizer.h"
#include "server/api_keys.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/tool_calls.h"

struct chat_template;

typedef struct server_ctx {
	const aahd_config *cfg;
	api_keys keys;                    /* api_keys's and api_key's (named "default"); none: no authentication */
	bool cache_per_key;               /* prefix_cache_scope = key: a request's key is part of its cache tenant */
	tokenizer *tok;
	struct grammar_vocab *gvocab;     /* tok's tokens in a trie, over the model's logits width (constrained decoding) */
	struct grammar_cache *grammars;   /* compiled grammars by their GBNF text */
	sched *sch;                       /* owns the engine; HTTP threads only submit and read */
	char model_name[256];
	time_t created;
	int32_t ctx_len, vocab;
	int32_t max_prompt_tokens;        /* resolved: ≤ ctx_len */
	int32_t max_tokens;               /* resolved output cap */
	int32_t eos_ids[SCHED_MAX_STOP_IDS];
	int32_t n_eos;
	int32_t n_regimes;
	char regimes[SCHED_MAX_REGIMES][64];
	const char *default_regime;       /* one of regimes */
	const engine *eng;                /* the scheduler's: only its immutable parts (config, regime layouts) are read */
	int32_t acr_context_length;       /* T of ACR (aah.json's context_length, else the engine's) */
	char backend[192];                /* engine_backend_desc: "cuda (…)" or "cpu (…)", for the log and /metrics */
	struct chat_template *chat;       /* the chat template (chat_template.h); NULL: chat requests get 400 */
	tool_format tool_fmt;             /* tool_call_parser resolved: the format chat answers to tools are parsed as;
	                                   * NONE: no parsing (and tool_choice required or named gets 400) */
	server_metrics metrics;
	atomic_bool draining;             /* SIGTERM seen: new work gets 503 */
} server_ctx;

/* Serves until SIGTERM or SIGINT, then drains. Returns the exit status: 0 after a clean stop, 1 when start-up
 * failed (the log says why). */
int server_run(const aahd_config *cfg);

/* Index of a regime name in ctx->regimes, or -1. */
int32_t server_regime_index(const server_ctx *ctx, const char *name);

#endif
