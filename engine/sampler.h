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
} sampler;

/* Returns 0, or -1 when out of memory. Free with sampler_free. */
int sampler_init(sampler *s, const sampler_params *p, int32_t n_vocab);
void sampler_free(sampler *s);
/* Picks a token below the vocab limit. logits (n_vocab) are not modified. */
int32_t sampler_sample(sampler *s, const float *logits);
/* Records an output token (for the penalties). */
void sampler_accept(sampler *s, int32_t token);
/* Index of the largest logit, lowest id on ties. */
int32_t sampler_argmax(const float *logits, int32_t n);

#ifdef __cplusplus
}
#endif
#endif
