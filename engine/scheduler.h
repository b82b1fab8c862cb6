/* engine/scheduler.h — the engine thread: it owns the engine and runs every open sequence one step at a time
 * (continuous batching); other threads submit requests to a bounded queue and read their tokens back. On a device it
 * samples from each row's candidates (logits_top) and reads a whole row back only when they do not decide (scheduler.c;
 * AAH_DEVICE_SAMPLING=1|0 forces that on or off). */
#ifndef AAH_SCHEDULER_H
#define AAH_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/aah_tally.h"
#include "engine/engine.h"
#include "engine/grammar/grammar.h"
#include "engine/sampler.h"
#include "engine/gen_text.h"
#include "models/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SCHED_MAX_LOGPROBS 20     /* top-N log-probabilities per position, at most */
#define SCHED_MAX_STOP_IDS SAMPLER_MAX_STOP_IDS   /* stop token ids (EOS, stop_token_ids) per request */
#define SCHED_MAX_REGIMES 16      /* regimes the metrics keep apart */
#define SCHED_MAX_WINDOWS AAH_TALLY_MAX_WINDOWS   /* distinct windows the branch-usage metric keeps apart per regime */
#define SCHED_HIST_MAX_BOUNDS 16  /* histogram bucket bounds (the +Inf bucket is extra) */
#define SCHED_MAX_TENANT 512      /* bytes of a prefix-cache tenant (sched_request_params.cache_tenant) */

typedef struct sched sched;
typedef struct sched_request sched_request;

/* Why a request ended. NONE while it runs. */
typedef enum sched_finish {
	SCHED_FINISH_NONE = 0,
	SCHED_FINISH_LENGTH,      /* max_tokens generated, or the context is full */
	SCHED_FINISH_STOP,        /* a stop token id (EOS) was sampled, which is not among the tokens; or the text completed
	                           * a stop string, and the token that completed it is the last of the tokens */
	SCHED_FINISH_CANCELLED,   /* sched_request_cancel: client gone, shutdown */
	SCHED_FINISH_ERROR,       /* the engine refused; the message is in the result */
} sched_finish;

/* What sched_submit can refuse. */
typedef enum sched_status {
	SCHED_OK = 0,
	SCHED_ERR_INVALID,        /* bad parameters (empty prompt, token out of range, too many logprobs, …) */
	SCHED_ERR_TOO_LONG,       /* prompt + max_tokens exceed the context or could never fit the KV cache */
	SCHED_ERR_REGIME,         /* no such regime */
	SCHED_ERR_QUEUE_FULL,     /* queue_length requests are waiting already */
	SCHED_ERR_SHUTDOWN,       /* draining: no new work */
	SCHED_ERR_NOMEM,
	SCHED_ERR_SPEC,           /* the speculation it asks for cannot run here (no draft model, k past the engine's …) */
} sched_status;

/* With the engine's prefix cache on (engine_params.prefix_cache), a request starts after the longest prefix of its
 * prompt the cache holds (engine_prefix_restore), and a request whose prompt shares more of its beginning with one
 * that is being prefilled right now waits for that prefill (then restores from it) instead of computing the same
 * positions beside it: the several prompts of one request (multiple choice) share their context that way. Every
 * prompt adds its blocks to the cache as it goes (engine_prefix_insert). Tokens and log-probabilities are bit for bit
 * those without the cache.
 *
 * Admission: first come, first served. The head of the queue enters when a slot is free and its worst-case KV pages
 * (its regime's capacities at prompt + max_tokens positions) fit beside those reserved by the running requests; until
 * then no request behind it enters, so a large request is never overtaken forever by small ones. */
/* Speculative decoding (docs/speculative.md): a request that speculates proposes up to k tokens past the one it
 * feeds next (the draft), and one engine step feeds them all as one item (engine_item.generated) beside the other
 * requests; its logits rows are then sampled one after another exactly as k + 1 decode steps would sample them — the
 * same sampler, mask, penalties, stop checks and random draws — and the draft is taken while each token drawn equals
 * the proposed one. For a draft that proposes one token with certainty that is the standard rejection rule (accept d
 * with probability p(d), else draw from p without d), so the output is the one decoding without a draft would give,
 * draw for draw; the positions past the last accepted one are taken back (engine_seq_truncate). Drafts: */
typedef enum sched_draft {
	SCHED_DRAFT_DEFAULT = 0,  /* a request: the server's (sched_params.spec) */
	SCHED_DRAFT_OFF,
	SCHED_DRAFT_NGRAM,        /* prompt lookup: the tokens that followed the latest earlier occurrence of the context's
	                           * last 2 … 4 tokens, in the prompt or the output */
	SCHED_DRAFT_REGIME,       /* the target model itself under another (smaller-window) AAH regime, its greedy tokens:
	                           * a second sequence of the same engine, the same weights, no second model */
	SCHED_DRAFT_MODEL,        /* the draft model's greedy tokens (sched_params.draft: same tokenizer) */
} sched_draft;

#define SCHED_MAX_SPEC_K 15       /* draft tokens per verify pass at most (the engine takes back ≤ 16 positions) */
#define SCHED_N_DRAFTS 3          /* the kinds that draft: ngram, regime, model (the metrics' index: kind − NGRAM) */

typedef struct sched_spec {
	sched_draft draft;
	int32_t k;                /* draft tokens per verify pass at most, 1 … SCHED_MAX_SPEC_K; 0: the server's */
	int32_t adaptive;         /* 1: k shrinks to what was accepted when a draft is rejected and grows by one after a
	                           * draft taken whole; 0: always k; -1: the server's */
	const char *regime;       /* SCHED_DRAFT_REGIME: the regime that drafts; NULL: the server's; copied */
} sched_spec;

/* The name of a draft kind ("off", "ngram", "regime", "model"); sched_draft_parse the reverse (-1: none such). */
const char *sched_draft_name(sched_draft d);
int sched_draft_parse(const char *name, sched_draft *out);

typedef struct sched_params {
	int32_t max_seqs;         /* sequences running at once; must be ≤ the engine's max_seqs; 0 = 8 */
	int32_t queue_length;     /* requests waiting at most (beyond that sched_submit refuses); 0 = 64 */
	int32_t step_tokens;      /* prompt tokens per step, so that a long prompt does not stall decoders; 0 = 256 */
	int32_t step_delay_us;    /* test hook: sleep before every step, so that requests last long enough to cancel */
	const tokenizer *tok;     /* decodes generated tokens into each request's text (sched_view.text), once, on the
	                           * engine thread; borrowed, must outlive the scheduler. NULL: no text, and no request
	                           * may have stop strings */
	/* Speculative decoding: the server's default for requests that do not choose (draft SCHED_DRAFT_DEFAULT is taken
	 * for off, k 0 for 4, adaptive -1 for on); a request may choose any kind the server can run. The engines must have
	 * been made with engine_params.rollback ≥ k + 1 for a request to speculate. */
	sched_spec spec;
	engine *draft;            /* the draft model (SCHED_DRAFT_MODEL), or NULL: its tokenizer is the target's (the caller
	                           * checked), its engine belongs to the engine thread from sched_init on, as e does;
	                           * the caller frees it after sched_free */
} sched_params;

/* Called on the engine thread after new output is published for a request (last = false), and once more when the
 * request has ended (last = true); after that call the scheduler never touches ctx again. It must not block and
 * must not call back into the scheduler except sched_request_* readers. */
typedef void (*sched_notify_fn)(void *ctx, bool last);

typedef struct sched_request_params {
	const int32_t *prompt;    /* n_prompt ≥ 1 ids, copied */
	int32_t n_prompt;
	int32_t max_tokens;       /* ≥ 0: tokens to generate at most; 0 runs the prompt only */
	/* Seeded per request: the same seed gives the same tokens whatever else runs. Its lists are copied and checked
	 * (sampler_params_check); the prompt counts for its repetition penalty; its min_tokens holds back its
	 * min_tokens_ids and the stop strings (a stop string ending in the text of one of the first min_tokens tokens
	 * does not count, as in vLLM). */
	sampler_params sampling;
	const char *regime;       /* NULL = the engine's default; copied */
	const char *cache_tenant; /* the prefix cache's namespace (a cache salt, an API key's name): requests of different
	                           * tenants never share a cached block nor wait for each other's prefill; NULL or "":
	                           * the shared one. At most SCHED_MAX_TENANT bytes; copied */
	int32_t logprobs;         /* -1 = none; else the log-probability of each generated token and the top-N, N ≤ 20 */
	bool prompt_logprobs;     /* also for prompt tokens 1 … n_prompt-1 (echo; top-N as logprobs, or 0) */
	const int32_t *stop_ids;  /* n_stop_ids ≤ SCHED_MAX_STOP_IDS token ids that end the request (the EOS ids unless
	                           * ignore_eos, stop_token_ids), copied; such a token is not among the output */
	int32_t n_stop_ids;
	/* n_stop ≤ STOP_TEXT_MAX stop strings, copied. The engine thread matches them in the text as it makes it
	 * (engine/gen_text.h) and ends the request at the token that completes one, before any further step: its
	 * tokens, text, stats and counters stop exactly there. */
	const char *const *stop;
	const size_t *stop_len;
	int32_t n_stop;
	/* A constrained request: the grammar its output must be a sentence of (engine/grammar/grammar.h), compiled against
	 * a vocabulary of the engine's logits width; the request holds a reference while it lives. Each step draws from
	 * the tokens the grammar allows (the stop ids only where the grammar may end); the request ends with
	 * SCHED_FINISH_STOP as soon as the grammar admits nothing longer, and an error of the matcher (a bound) ends it
	 * with SCHED_FINISH_ERROR. Log-probabilities stay those of the raw logits. NULL: free output. */
	grammar *grammar;
	sched_spec spec;          /* speculative decoding: {0} for the server's default */
	sched_notify_fn notify;   /* optional */
	void *notify_ctx;
} sched_request_params;

/* Log-probabilities of a run of positions: logprob (n) of the actual token, and its top-N alternatives
 * top_ids / top_logprobs (n, n_top), best first (ties: lower id first). Natural log, from the raw logits. */
typedef struct sched_logprob_rows {
	float *logprob;
	int32_t *top_ids;
	float *top_logprobs;
	int32_t n_top;
} sched_logprob_rows;

/* A reader's snapshot: the arrays of the request are stable up to these counts. */
typedef struct sched_view {
	uint64_t version;         /* changes with every publication */
	int32_t n_tokens;         /* generated tokens available */
	bool prompt_done;         /* the prompt is processed (prompt logprobs are complete) */
	sched_finish finish;
	/* The output's text as of this publication, made once on the engine thread (engine/gen_text.h; empty without
	 * sched_params.tok): stop strings cut it, a held tail is not yet safe, and once the request has ended it is
	 * finished (an incomplete last character is U+FFFD). Valid while the caller holds its reference. */
	gen_text_view text;
} sched_view;

/* After the request has ended. */
typedef struct sched_result {
	sched_finish finish;
	int32_t n_tokens;         /* generated tokens (a stop token not counted) */
	int32_t stop_id;          /* the stop token that ended it, else -1 */
	int32_t stop_string;      /* the stop string that ended it (its index), else -1: found after a token, or in the
	                           * U+FFFD that an incomplete last character becomes at the end (then the finish is
	                           * SCHED_FINISH_STOP even where max_tokens ran out) */
	bool has_stats;           /* the sequence ran (it was admitted) */
	engine_seq_stats stats;   /* taken just before its sequence closed */
	double queue_s;           /* submit → admitted */
	double ttft_s;            /* submit → first token (or prompt done when max_tokens is 0); -1 if none */
	double duration_s;        /* submit → end */
	bool grammar_complete;    /* a constrained request ended because its grammar admits nothing longer */
	bool grammar_failed;      /* SCHED_FINISH_ERROR from the request's grammar (a bound of its matcher), not the engine */
	int32_t cached_tokens;    /* prompt tokens that came from the prefix cache instead of a prefill (a choice that
	                           * forked another's prefill: 0, the prompt is counted once, under the one that ran it) */
	sched_draft draft;        /* how it speculated (SCHED_DRAFT_OFF: it did not) */
	int32_t spec_drafted;     /* draft tokens proposed, those accepted, and the verify passes that checked them */
	int32_t spec_accepted;
	int32_t spec_passes;
	char err[256];            /* SCHED_FINISH_ERROR: why */
} sched_result;

typedef struct sched_histogram {
	int32_t n_bounds;
	double bounds[SCHED_HIST_MAX_BOUNDS];            /* upper bounds, increasing */
	uint64_t counts[SCHED_HIST_MAX_BOUNDS + 1];      /* per bucket (not cumulative); the last is +Inf */
	double sum;
	uint64_t count;
} sched_histogram;

/* Totals of the sequences of one regime that have ended (aah.windows: every window the regime may count, listed from
 * the start at 0 usage, in ascending order), and its latency histograms. */
typedef struct sched_regime_totals {
	char name[64];
	aah_tally aah;                       /* its sequences' AAH figures, added as each ends */
	sched_histogram ttft, inter_token, duration;   /* the requests of this regime (sched_metrics has all of them) */
} sched_regime_totals;

typedef struct sched_metrics {
	int32_t running, waiting;
	uint64_t prompt_tokens, generation_tokens;
	/* Device sampling (scheduler.c's header): whether it is on, tokens its candidates decided, generated tokens whose
	 * log-probabilities came from candidates, and whole logits rows read back because candidates did not suffice. */
	bool device_sampling;
	uint64_t draws_from_top, logprobs_from_top, logits_rows_fetched;
	uint64_t draws_greedy_batched;   /* host path: greedy tokens picked with the step's others (engine_argmax_rows) */
	double prompt_tokens_per_s, generation_tokens_per_s;   /* over the last 10 s */
	int64_t kv_bytes_used, kv_bytes_capacity;
	sched_histogram ttft, inter_token, duration;
	int32_t n_regimes;
	sched_regime_totals regimes[SCHED_MAX_REGIMES];
	engine_prefix_stats prefix;   /* the prefix cache (engine.h), as of the last step */
	/* Constrained decoding: requests admitted with a grammar, those the grammar ended (complete), those a matcher's
	 * bound ended (error), and the time of each token mask (grammar_matcher_mask) on the engine thread. */
	uint64_t constrained_requests, constrained_complete, constrained_errors;
	sched_histogram grammar_mask;
	/* Speculative decoding, per draft kind (index kind − SCHED_DRAFT_NGRAM): draft tokens proposed and accepted, verify
	 * passes (steps that checked a draft of one token or more), and draft-engine steps (the forward passes that made
	 * regime and model drafts). */
	uint64_t spec_drafted[SCHED_N_DRAFTS], spec_accepted[SCHED_N_DRAFTS], spec_passes[SCHED_N_DRAFTS];
	uint64_t spec_draft_steps[SCHED_N_DRAFTS];
} sched_metrics;

/* Starts the engine thread, which owns e from now on: no other thread may call engine functions until
 * sched_free (engine_config, the regime names and layouts, which do not change, excepted). ep: the parameters e was made
 * with (they size the KV page pool, in which admission reserves each request's worst case). Returns 0, or -1 with
 * a message. Free with sched_free. */
int sched_init(sched **out, engine *e, const engine_params *ep, const sched_params *p, char *err, size_t err_len);
/* Cancels whatever still runs or waits, stops and joins the engine thread. The engine stays the caller's. */
void sched_free(sched *s);

/* Submits n requests at once, all or none (a request with n choices). On SCHED_OK out[0 … n-1] hold them, each
 * with a reference the caller drops with sched_request_release; otherwise nothing is queued and err says why.
 * Requests of one submission with the same prompt and regime share its prefill: they are admitted together (when they
 * can ever fit together), the first runs the prompt, and the others fork its sequence (engine_seq_fork) before their
 * first token — each still samples with its own generator, so each gets what it would get alone. A later one that
 * wants prompt log-probabilities shares only with an earlier one that computes the same (they are copied). */
sched_status sched_submit(sched *s, const sched_request_params *p, int32_t n, sched_request **out, char *err,
                          size_t err_len);
/* Refuses new work from now on (SCHED_ERR_SHUTDOWN); what runs and waits goes on. */
void sched_drain(sched *s);
/* Requests running plus waiting. */
int32_t sched_busy(sched *s);
/* Cancels every running and waiting request. */
void sched_cancel_all(sched *s);
void sched_metrics_get(sched *s, sched_metrics *out);

/* Any thread: asks the engine thread to end the request (it frees the KV pages at its next step). */
void sched_request_cancel(sched_request *r);
/* Drops the caller's reference; the request must not be used after. Does not cancel. */
void sched_request_release(sched_request *r);
void sched_request_view(sched_request *r, sched_view *v);
/* Waits until the version differs from seen or timeout_ms passes (-1: no limit). Returns true when it changed. */
bool sched_request_wait(sched_request *r, uint64_t seen, int32_t timeout_ms, sched_view *v);
/* Readers of the published output; valid up to the counts of a view. */
const int32_t *sched_request_prompt(const sched_request *r, int32_t *n_prompt);
const int32_t *sched_request_tokens(const sched_request *r);
const sched_logprob_rows *sched_request_token_logprobs(const sched_request *r);   /* NULL without logprobs */
/* Row i is prompt token i; row 0 has no log-probability (NaN, n_top entries unset). NULL unless asked for. */
const sched_logprob_rows *sched_request_prompt_logprobs(const sched_request *r);
/* Fills *out once the request has ended; returns false while it runs. */
bool sched_request_result(sched_request *r, sched_result *out);

#ifdef __cplusplus
}
#endif
#endif
