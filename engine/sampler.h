/* engine/sampler.h — picks the next token from logits: greedy, or temperature with top-k, top-p, min-p and
 * presence/frequency penalties, from a seeded generator so the same seed gives the same tokens. */
#ifndef AAH_SAMPLER_H
#define AAH_SAMPLER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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
} sampler_params;

typedef struct sampler {
	sampler_params p;
	int32_t n_vocab;
	uint64_t rng[4];            /* xoshiro256** state */
	float *probs;               /* n_vocab scratch */
	int32_t *idx;               /* n_vocab scratch: candidate ids */
	int32_t *counts;            /* n_vocab: occurrences in the output so far (penalties) */
	int64_t n_accepted;         /* tokens recorded by sampler_accept */
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

/* Returns 0, or -1 when out of memory. Free with sampler_free. */
int sampler_init(sampler *s, const sampler_params *p, int32_t n_vocab);
void sampler_free(sampler *s);
/* Picks a token below the vocab limit. logits (n_vocab) are not modified. */
int32_t sampler_sample(sampler *s, const float *logits);
/* The token sampler_sample would pick from the full row, from the row's candidates alone: returns it when they decide
 * the draw, else -1 with nothing drawn (the generator untouched), and the caller samples the full row with
 * sampler_sample. Bit for bit sampler_sample's answer when t comes from the CPU backend; from a device, whose sum may
 * differ in the last places, the same up to that rounding. The candidates decide: greedy; top-k below n (and ties
 * not straddling the last candidate); top-p when the nucleus closes inside the candidates; min-p alone when
 * min_p · p_max exceeds the last candidate's probability. They never decide plain temperature sampling (every id may
 * be drawn), a row with a NaN, or penalties once a token has been accepted. */
int32_t sampler_sample_top(sampler *s, const sampler_top *t);
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
/* Records an output token (for the penalties). */
void sampler_accept(sampler *s, int32_t token);
/* Index of the largest logit, lowest id on ties. */
int32_t sampler_argmax(const float *logits, int32_t n);
/* n > 0 when this sampler's next draw is exactly sampler_argmax over the first n logits of the row (greedy, no
 * penalty), so a caller may pick it for many rows at once (engine_argmax_rows); 0 otherwise. */
int32_t sampler_greedy_cols(const sampler *s);

#ifdef __cplusplus
}
#endif
#endif
