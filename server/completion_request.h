/* server/completion_request.h — the body of POST /v1/completions, parsed and validated: every field's type and
 * range checked, with the offending field named (the OpenAI error's `param`). No tokenizer, no engine: fuzzed. */
#ifndef AAH_SERVER_COMPLETION_REQUEST_H
#define AAH_SERVER_COMPLETION_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sampler.h"
#include "engine/stop_text.h"
#include "server/constraint.h"

#define COMPLETION_MAX_STOP STOP_TEXT_MAX               /* stop strings, as OpenAI: what the engine matches */
#define COMPLETION_MAX_STOP_BYTES STOP_TEXT_MAX_BYTES
#define COMPLETION_MAX_LOGPROBS 20
#define COMPLETION_MAX_SALT 256                        /* bytes of a cache_salt */

/* One prompt: text (to be tokenized) or token ids. */
typedef struct completion_prompt {
	const char *text;                    /* borrowed from the parsed JSON, or NULL */
	size_t text_len;
	int32_t *ids;                        /* owned; n_ids ≥ 1, when text is NULL */
	int32_t n_ids;
} completion_prompt;

typedef struct completion_request {
	json_t *json;                        /* the parsed body; strings point into it */
	const char *model;                   /* NULL: absent */
	completion_prompt *prompts;          /* n_prompts ≥ 1 */
	int32_t n_prompts;
	int64_t max_tokens;                  /* -1: absent (the server's default) */
	double temperature, top_p, min_p, presence_penalty, frequency_penalty;
	int32_t top_k;                       /* 0 = off */
	bool seed_set;
	uint64_t seed;
	const char *stop[COMPLETION_MAX_STOP];
	size_t stop_len[COMPLETION_MAX_STOP];
	int32_t n_stop;
	bool stream, include_usage;
	int32_t logprobs;                    /* -1: none */
	bool echo;
	int32_t n;
	const char *regime;                  /* aah_regime, or NULL */
	const char *cache_salt;              /* vLLM's cache_salt (1 to COMPLETION_MAX_SALT bytes), or NULL */
	sampler_bias *bias;                  /* logit_bias: n_bias ≤ SAMPLER_MAX_BIAS entries (owned), biases in [-100, 100] */
	int32_t n_bias;
	double repetition_penalty;           /* (0, 2]; 1 = off */
	int64_t min_tokens;                  /* 0 … the cap of max_tokens (the job checks it against max_tokens) */
	bool ignore_eos;
	int32_t stop_token_ids[SAMPLER_MAX_STOP_IDS];   /* distinct, in the order given */
	int32_t n_stop_token_ids;
	int32_t spec_draft;                  /* aah_speculation: a sched_draft (0: the server's default) */
	int32_t spec_k;                      /* 0: the server's */
	int32_t spec_adaptive;               /* -1: the server's; 0, 1 */
	const char *spec_regime;             /* NULL: the server's draft regime */
	constraint constraint;               /* the output constraint (response_format, structured_outputs, guided_*,
	                                      * grammar, json_schema) as GBNF text, or none (server/constraint.h) */
} completion_request;

typedef struct completion_limits {
	int32_t max_n;                       /* n × prompts at most */
	int64_t max_tokens;                  /* the cap of max_tokens */
	int32_t vocab;                       /* token ids below it are valid in logit_bias and stop_token_ids (the model's
	                                      * rows the tokenizer can spell); 0: any id up to INT32_MAX (the engine checks) */
} completion_limits;

/* Parses a JSON body. Returns 0, or -1 with a message in err and the field's name in *param (NULL for the body
 * as a whole). Free with completion_request_free (also after a failure). */
int completion_request_parse(completion_request *out, const char *body, size_t len, const completion_limits *lim,
                             char *err, size_t err_len, const char **param);
void completion_request_free(completion_request *r);

/* The pieces of completion_request_parse that /v1/chat/completions shares (chat_request.c). _defaults sets every
 * field to its default; _load parses the body into r->json (an object) after the defaults; _parse_shared reads the
 * fields both endpoints have — model, aah_regime, aah_speculation, n, max_tokens, temperature, top_p, min_p, top_k, the penalties
 * (repetition_penalty too), seed, stop, stream, stream_options, cache_salt, logit_bias, min_tokens, ignore_eos,
 * stop_token_ids — from r->json. Each returns 0, or -1 with err and *param as above. */
void completion_request_defaults(completion_request *r);
int completion_request_load(completion_request *r, const char *body, size_t len, char *err, size_t err_len,
                            const char **param);
int completion_request_parse_shared(completion_request *r, const completion_limits *lim, char *err, size_t err_len,
                                    const char **param);

#endif
