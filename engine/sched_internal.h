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

typedef struct sched_request sched_request;

typedef enum sched_slot_state {
	SCHED_SLOT_IDLE = 0,
	SCHED_SLOT_PREFILL,       /* prompt tokens left to feed */
	SCHED_SLOT_DECODE,        /* `next` is the token to feed */
	SCHED_SLOT_FORK_WAIT,     /* no sequence yet: forks its leader's once the shared prompt is through */
	SCHED_SLOT_PREFIX_WAIT,   /* no sequence yet: waits for its leader's prompt, which shares its beginning, to be in
	                           * the prefix cache, then prefills after what it finds there */
	SCHED_SLOT_DONE,          /* ended this step; compacted away at its end */
} sched_slot_state;

/* A running request, on the engine thread. */
typedef struct sched_slot {
	sched_request *r;                 /* NULL when idle */
	sched_slot_state state;
	int32_t seq;                      /* engine sequence; -1 in FORK_WAIT */
	int32_t leader;                   /* FORK_WAIT: the slot whose prefill this one forks; PREFIX_WAIT: whose prompt it
	                                   * waits for */
	int32_t cached;                   /* prompt tokens the prefix cache gave it */
	int32_t n_fed;                    /* prompt tokens fed so far */
	int32_t n_tokens;                 /* tokens generated */
	int32_t next;                     /* DECODE: the token the next step feeds */
	int32_t chunk;                    /* this step: tokens fed (0 = not in this step) */
	int64_t row0;                     /* this step: first logits row */
	bool changed;                     /* this step: something to publish */
	/* speculative decoding (sched_spec.c) */
	int32_t feed[SCHED_MAX_SPEC_K + 1];   /* this step's item: next, then the draft */
	int32_t n_draft;                  /* this step: draft tokens in feed (0: a plain decode step) */
	int32_t spec_k;                   /* the draft length it may propose now (adaptive: moves with acceptance) */
	engine *de;                       /* regime and model drafts: the engine of its draft sequence */
	int32_t dseq;                     /* its draft sequence, or -1 */
	int32_t dlen;                     /* positions the draft sequence holds: the request's tokens [0, dlen) */
	int32_t d_need;                   /* this step: tokens its draft sequence is fed before drafting */
	int32_t spec_drafted, spec_accepted, spec_passes;   /* so far (sched_result) */
} sched_slot;

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
	sched_draft draft;                /* speculative decoding, resolved at submit: SCHED_DRAFT_OFF, or how it drafts */
	int32_t spec_k;                   /* draft tokens per verify pass at most */
	bool spec_adaptive;
	int32_t draft_regime;             /* SCHED_DRAFT_REGIME: its index into s->regimes */
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
	/* speculative decoding's drafting (sched_spec.c): items and rows of one draft round, per draft engine */
	engine_item *d_items;             /* max_seqs */
	int32_t *d_slot;                  /* max_seqs: the slot of each */
	const float **d_rows;             /* max_seqs */
	int32_t *d_ids;                   /* max_seqs */
	float *d_logits;                  /* (max_seqs, the widest draft vocabulary) */
	int32_t *d_feed;                  /* (max_seqs, step_tokens) what each slot's draft sequence is fed first */
	int32_t spec_rows;                /* verify rows a step may add beyond one a slot (sizes s->logits) */
	bool regime_drafts;               /* the engine has a draft sequence for every slot (SCHED_DRAFT_REGIME) */
	int32_t d_vocab;                  /* columns a draft may propose: the target's and the draft model's common ids */
	sched_request **admitted;         /* max_seqs */
	sched_request **dropped;          /* queue_length: cancelled while waiting */

	pthread_mutex_t metrics_mu;       /* guards m and the rate buckets */
	sched_metrics m;
	int64_t rate_sec[10];             /* per-second buckets of the last 10 s */
	double rate_prompt[10], rate_gen[10];
};

/* sched_spec.c, the engine thread's: */
/* Fills every decoding slot's draft for this step (sl->n_draft tokens after sl->next in sl->feed), running the draft
 * engines' forward passes for regime and model drafts. */
void spec_draft(sched *s);
/* One verify pass of a draft of this kind into the metrics: its tokens, those accepted (the slot counts its own). */
void spec_counted(sched *s, sched_draft kind, int32_t drafted, int32_t accepted);
/* After sl's verify pass accepted `accepted` of its sl->n_draft tokens and it still runs: takes back the positions past
 * them in its sequence and its draft sequence, and moves its k. */
void spec_verified(sched *s, sched_slot *sl, int32_t accepted);
/* sl's request ends: its draft sequence closes, and its counts go to the result. */
void spec_end(sched *s, sched_slot *sl, sched_result *res);
/* The sequence's tokens: prompt, then the output. */
static inline int32_t sched_token_at(const sched_request *r, int32_t i)
{
	return i < r->n_prompt ? r->prompt[i] : r->tokens[i - r->n_prompt];
}

#endif
