/* tools/eval/runner.h — sends an evaluation's items to the server(s) and files each result in the cache as it
 * comes: C worker threads (C = --concurrency), each with its own connection to every server of the fleet, take the
 * next item of a regime (item i goes to server i mod n, so that a fleet shares the work), tokenize its texts through
 * the server's /tokenize (once; the ids are kept for the other regimes), send its requests, score it (score.h; code
 * in the sandbox) and append the record. One regime runs at a time so that its tokens per second are its own. A
 * progress line (a terminal) or plain lines go to stderr. The first error, or Ctrl-C, stops every worker after its
 * current request; what was done stays in the cache. */
#ifndef AAH_EVAL_RUNNER_H
#define AAH_EVAL_RUNNER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/eval/cache.h"
#include "tools/eval/client.h"
#include "tools/eval/prompt.h"
#include "tools/eval/sandbox.h"
#include "tools/eval/server_info.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ids of an item's texts, asked once and kept across regimes (owned by the caller's unit table). */
typedef struct eval_tokens {
	bool ready;
	int32_t *ctx;       /* MC: the context without its trailing whitespace; generation: the context; rolling: the doc */
	int64_t n_ctx;
	int32_t **cont;     /* MC: (n_choices) each continuation's ids: (context + continuation)[len(ctx):] */
	int64_t *n_cont;
	int32_t n_choices;
} eval_tokens;
void eval_tokens_free(eval_tokens *t);

/* One item to run in one regime. */
typedef struct eval_unit {
	const eval_task_run *run;
	const eval_item *item;
	eval_tokens *tok;
	char key[33];
} eval_unit;

typedef struct eval_runner_opts {
	const char *const *urls;    /* (n_urls) the fleet */
	int32_t n_urls;
	const char *api_key;
	double timeout_s;
	int32_t concurrency;
	int64_t max_length;         /* the harness's max_length (requests hold at most max_length - 1 tokens) */
	bool add_special;           /* /tokenize add_special (the harness's add_bos_token) */
	eval_sandbox_limits sandbox;
	atomic_int *stop;           /* raised by Ctrl-C, or by the runner on an error */
	eval_client_stats *stats;
	bool tty;                   /* a progress line redrawn in place, else plain lines */
} eval_runner_opts;

/* Runs units (all of one regime) to completion. *tokens and *seconds get the pass's token count (prompt +
 * completion, from usage) and wall time. 0: all done; 1: stopped by the stop flag; -1: an error (in err, naming
 * the server, task, line and what went wrong). */
int eval_runner_regime(const eval_runner_opts *o, const eval_server *srv, eval_cache *cache, const char *regime,
                       int32_t regime_index, int32_t n_regimes, eval_unit *units, int64_t n, double *tokens,
                       double *seconds, char *err, size_t errlen);

/* The cache key of an item in a regime. */
void eval_unit_key(const eval_server *srv, const char *regime, const eval_task_run *run, const eval_item *it,
                   char out[33]);

#ifdef __cplusplus
}
#endif
#endif
