/* engine/sched_internal.h — what engine/scheduler.c (the engine thread's loop) and engine/sched_request.c (the
 * requests and the calls other threads make: submit, cancel, the readers, drain, metrics) share: the request and the
 * scheduler objects, and which lock guards what. Private to those two files; engine/scheduler.h is the interface. */
#ifndef AAH_SCHED_INTERNAL_H
#define AAH_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "engine/scheduler.h"

typedef struct sched_slot sched_slot;   /* the engine thread's (scheduler.c) */
typedef struct sched_request sched_request;

struct sched_request {
	sched *s;
	atomic_int refs;
	atomic_bool cancel;
	uint64_t epoch;                   /* sched_cancel_all ends the requests of earlier epochs */
	uint64_t id;                      /* unique in this scheduler, from 1 */
	uint64_t leader_id;               /* an earlier request of the same submission with this prompt, else 0 */

	/* set at submit, then read-only */
	int32_t *prompt;                  /* n_prompt */
	int32_t n_prompt;
	int32_t max_tokens;
	int32_t regime;                   /* index into s->regimes */
	char *tenant;                     /* the prefix cache's namespace; NULL: the shared one */
	int32_t logprobs;
	bool prompt_lp;
	int32_t stop_ids[SCHED_MAX_STOP_IDS];
	int32_t n_stop_ids;
	sched_notify_fn notify;
	void *notify_ctx;
	int64_t pages_max;                /* worst-case KV pages, reserved while it runs */
	double t_submit;

	/* the engine thread's */
	sampler smp;
	grammar_matcher *gm;              /* the output's grammar, or NULL */
	uint32_t *mask;                   /* gm's allowed tokens, one bit per logits column */
	double t_admit, t_first, t_last;

	/* written by the engine thread; others read them up to the published counts */
	int32_t *tokens;                  /* max_tokens */
	sched_logprob_rows gen_lp;        /* max_tokens rows, when logprobs ≥ 0 */
	sched_logprob_rows prompt_lp_rows; /* n_prompt rows, when prompt_lp */
	gen_text text;                    /* the output's text and its stop strings (readers: pub.text) */

	pthread_mutex_t mu;               /* guards pub and result */
	pthread_cond_t cv;
	sched_view pub;
	sched_result result;
};

/* Whether two requests' prompts live in one prefix-cache namespace (sched_request_params.cache_tenant). */
static inline bool sched_same_tenant(const sched_request *a, const sched_request *b)
{
	return !strcmp(a->tenant ? a->tenant : "", b->tenant ? b->tenant : "");
}

struct sched {
	engine *e;
	sched_params p;
	int32_t vocab, ctx_len;
	int32_t n_regimes;
	char regimes[SCHED_MAX_REGIMES][64];
	int32_t default_regime;
	int64_t kv_heads;                 /* n_layers · n_kv_heads: page rings per sequence */
	bool prefix;                      /* the engine's prefix cache is on */
	int64_t page_bytes;
	int64_t pool_pages;

	pthread_t thread;
	bool thread_started;

	pthread_mutex_t mu;               /* guards the queue, stop, draining, n_running */
	pthread_cond_t cv;                /* the engine thread waits here for work */
	sched_request **queue;            /* ring of queue_length */
	int32_t q_head, q_len;
	bool stop, draining;
	int32_t n_running;
	atomic_uint_fast64_t epoch;
	uint64_t next_id;

	/* the engine thread's: slots and per-step buffers, all allocated at init */
	sched_slot *slots;                /* max_seqs */
	int32_t *order;                   /* running slots in admission order (FCFS for the prefill budget) */
	int32_t n_order;
	int64_t reserved_pages;
	engine_item *items;               /* max_seqs */
	int32_t *item_slot;               /* max_seqs */
	const float **greedy_rows;        /* max_seqs: this step's rows of greedy decoders, picked at once */
	int32_t *greedy_ids, *greedy_item;   /* max_seqs: their tokens, and their items (ascending) */
	float *logits;                    /* (logit_rows, vocab) */
	int32_t prompt_logit_rows;        /* rows per step for prompt log-probabilities (echo) */
	/* device sampling (the header comment): a step's rows stay in the engine, logits_top reduces them */
	bool device;
	aah_logits_stats *top_stats;      /* max_seqs: this step's rows */
	int32_t *top_ids;                 /* (max_seqs, AAH_LOGITS_TOP_MAX) their candidates, top_n a row */
	float *top_logits;                /* (max_seqs, AAH_LOGITS_TOP_MAX) */
	float *top_temp;                  /* max_seqs: each row's temperature */
	bool *row_fetched;                /* max_seqs: the row is in s->logits already */
	int32_t top_n, top_cols;          /* this step's candidates per row (0: none taken) and their columns */
	int32_t *lp_ids;                  /* AAH_LOGITS_TOP_MAX: one row's candidates over all columns (logprobs) */
	float *lp_logits;                 /* AAH_LOGITS_TOP_MAX */
	int64_t text_room;                /* the most text one token makes (stop_text_room_max); 0 without a tokenizer */
	sched_request **admitted;         /* max_seqs */
	sched_request **dropped;          /* queue_length: cancelled while waiting */

	pthread_mutex_t metrics_mu;       /* guards m and the rate buckets */
	sched_metrics m;
	int64_t rate_sec[10];             /* per-second buckets of the last 10 s */
	double rate_prompt[10], rate_gen[10];
};

#endif
