/* engine/sampler.h — picks the next token from logits: greedy, or temperature with top-k, top-p, min-p, after the
 * per-request adjustments (an allowed-token mask, logit_bias, min_tokens' ban of the stop ids, the repetition,
 * presence and frequency penalties), from a seeded generator so the same seed gives the same tokens. */
#ifndef AAH_SAMPLER_H
#define AAH_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SAMPLER_MAX_BIAS 1024      /* logit_bias entries */
#define SAMPLER_MAX_STOP_IDS 64    /* ids min_tokens holds back */

/* One logit_bias entry: bias is added to the logit of id before anything else looks at it (OpenAI: in [-100, 100]). */
typedef struct sampler_bias {
	int32_t id;
	float bias;
} sampler_bias;

typedef struct sampler_params {
	float temperature;          /* 0 = greedy (ties → lowest id) */
	int32_t top_k;              /* 0 = off */
	float top_p;                /* 1 = off */
	float min_p;                /* 0 = off: drop tokens below min_p · p_max */
	float presence_penalty;     /* subtracted once from a token seen in the output */
	float frequency_penalty;    /* subtracted per occurrence in the output */
	uint64_t seed;
	int32_t vocab_limit;        /* only ids below it are drawn (0 = every logit): a model's vocabulary is often padded
	                             * past its tokenizer's (Qwen3: 151936 rows, 151669 tokens), and a padding id has no text */
	float repetition_penalty;   /* 0 or 1 = off; else > 0 (vLLM, Hugging Face): a token seen in the prompt
	                             * (sampler_prompt) or the output has its logit l made l / p when l > 0, else l · p */
	const sampler_bias *bias;   /* n_bias ≤ SAMPLER_MAX_BIAS logit_bias entries, ids below n_vocab; copied by
	                             * sampler_init (an id given twice gets the sum) */
	int32_t n_bias;
	int32_t min_tokens;         /* until this many tokens are accepted, min_tokens_ids cannot be drawn */
	const int32_t *min_tokens_ids;   /* n_min_tokens_ids ≤ SAMPLER_MAX_STOP_IDS: every id that may end the request
	                                  * (EOS ids, stop_token_ids; vLLM holds EOS back under ignore_eos too); copied */
	int32_t n_min_tokens_ids;
} sampler_params;

typedef struct sampler {
	sampler_params p;           /* its bias and min_tokens_ids point at the copies below */
	int32_t n_vocab;
	uint64_t rng[4];            /* xoshiro256** state */
	float *probs;               /* n_vocab scratch: the adjusted logits, then probabilities */
	int32_t *idx;               /* n_vocab scratch: candidate ids */
	int32_t *counts;            /* n_vocab: occurrences in the output so far (penalties) */
	int64_t n_accepted;         /* tokens recorded by sampler_accept */
	sampler_bias *bias;         /* p.n_bias entries, ascending ids, each id once */
	int32_t *min_tokens_ids;    /* p.n_min_tokens_ids */
	uint32_t *seen;             /* (n_vocab + 31) / 32 words: a bit per id seen in the prompt or the output; NULL
	                             * without the repetition penalty */
} sampler;

/* A row's logits as a backend's logits_top reduces them (kernels/backend.h): the candidates and what the sampler needs
 * of the rest of the row. */
typedef struct sampler_top {
	float max;                  /* aah_logits_stats.max */
	double sum;                 /* aah_logits_stats.sum, at this sampler's temperature */
	const int32_t *ids;         /* n candidates: the largest logits, largest first, the lower id first among equals */
	const float *logits;
	int32_t n;
	int32_t n_cols;             /* the columns they were chosen from: the sampler's vocab_limit (or n_vocab) */
} sampler_top;

/* Whether p's per-request fields are ones a sampler over n_vocab ids takes: at most SAMPLER_MAX_BIAS finite biases and
 * SAMPLER_MAX_STOP_IDS min_tokens ids, all in [0, n_vocab); min_tokens ≥ 0; a finite repetition_penalty ≥ 0. Returns
 * 0, or -1 with the reason in err. */
int sampler_params_check(const sampler_params *p, int32_t n_vocab, char *err, size_t err_len);
/* Returns 0, or -1 when out of memory. Free with sampler_free. Ids out of [0, n_vocab) in p's lists are ignored. */
int sampler_init(sampler *s, const sampler_params *p, int32_t n_vocab);
void sampler_free(sampler *s);
/* Records the prompt's ids for the repetition penalty (ids out of range ignored); call before the first draw. Nothing
 * to do without the penalty. */
void sampler_prompt(sampler *s, const int32_t *ids, int32_t n);

/* The draw. Every per-request adjustment is made in one place (sampler.c, sampler_adjust), on a scratch copy of the
 * row, in this order (vLLM's):
 *   1. mask: an id whose bit (mask[id / 32] >> id % 32 & 1) is clear is never drawn, greedy included (−inf);
 *   2. logit_bias: l += bias;
 *   3. min_tokens: while fewer than min_tokens tokens have been accepted, min_tokens_ids are never drawn (−inf);
 *   4. repetition penalty p, for an id seen in the prompt or the output: l > 0 → l / p, else l · p;
 *   5. presence and frequency penalties, for an id seen c > 0 times in the output: l −= presence + frequency · c;
 * then temperature, top-k, top-p, min-p and the draw (or the argmax when greedy). Log-probabilities are not the
 * sampler's: the scheduler reports them from the raw logits (sampler_logprobs). */
/* Picks a token below the vocab limit, or -1 when the mask and min_tokens' ban leave no id with a finite logit (only
 * possible with a mask, or a vocabulary of stop ids). logits (n_vocab) are not modified. mask: NULL, or
 * (n_vocab + 31) / 32 words, a set bit per allowed id. */
int32_t sampler_sample_masked(sampler *s, const float *logits, const uint32_t *mask);
/* sampler_sample_masked without a mask. */
int32_t sampler_sample(sampler *s, const float *logits);
/* The token sampler_sample would pick from the full row, from the row's candidates alone: returns it when they decide
 * the draw, else -1 with nothing drawn (the generator untouched), and the caller samples the full row with
 * sampler_sample. Bit for bit sampler_sample's answer when t comes from the CPU backend; from a device, whose sum may
 * differ in the last places, the same up to that rounding. The candidates decide: greedy; top-k below n (and ties
 * not straddling the last candidate); top-p when the nucleus closes inside the candidates; min-p alone when
 * min_p · p_max exceeds the last candidate's probability. They never decide plain temperature sampling (every id may
 * be drawn), a row with a NaN, penalties once a token has been accepted, logit_bias, the repetition penalty, nor a
 * mask or min_tokens' ban unless greedy (then the first candidate they allow, when no outsider can tie with it). */
int32_t sampler_sample_top(sampler *s, const sampler_top *t);
/* sampler_sample_top with sampler_sample_masked's mask: -1 also when the candidates allow nothing (the caller then
 * samples the whole row with the same mask, which says whether anything at all is allowed). */
int32_t sampler_sample_top_masked(sampler *s, const sampler_top *t, const uint32_t *mask);
/* log_softmax(row)[id] into *logprob and the n_lp best ids with theirs, from the candidates and lse (the row's
 * log-softmax normaliser, aah_logits_stats.lse, over all its columns): what the scheduler's logprob_fill computes from
 * the whole row, bit for bit with the CPU backend's lse. Returns 0, or -1 when the candidates hold fewer than n_lp ids
 * or not id, or lse is not finite (the caller then reads the row). */
int sampler_logprobs_top(const sampler_top *t, double lse, int32_t id, int32_t n_lp, float *logprob,
                         int32_t *top_ids, float *top_logprobs);
/* log_softmax(logits)[id] over the n_cols entries into *logprob, and the n_lp best ids (largest first, the lower id
 * first among equals) with theirs; sums in float64. What sampler_logprobs_top gives from candidates. */
void sampler_logprobs(const float *logits, int32_t n_cols, int32_t id, int32_t n_lp, float *logprob, int32_t *top_ids,
                      float *top_logprobs);
/* How many candidates sampler_sample_top wants for this sampler's settings, at most cap: top_k + 1 (one more, to see
 * where a tie ends), at least 64. */
int32_t sampler_top_wanted(const sampler *s, int32_t cap);
/* Records an output token (for the penalties and min_tokens). */
void sampler_accept(sampler *s, int32_t token);
/* Index of the largest logit, lowest id on ties. */
int32_t sampler_argmax(const float *logits, int32_t n);
/* n > 0 when this sampler's next draw is exactly sampler_argmax over the first n logits of the row (greedy, no
 * penalty, no logit_bias, min_tokens' ban over), so a caller may pick it for many rows at once (engine_argmax_rows);
 * 0 otherwise. A caller with a mask for the draw does not take that path. */
int32_t sampler_greedy_cols(const sampler *s);

#ifdef __cplusplus
}
#endif
#endif
