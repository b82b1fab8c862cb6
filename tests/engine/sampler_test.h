/* tests/engine/sampler_test.h — what the sampler suites share (check_sampler.c: greedy, the generator, the filters, penalties,
 * odd logits, the draw from candidates; check_sampler_adjust.c: logit_bias, the repetition penalty, min_tokens, a
 * mask): a quiet CHECK, seeded rows, softmax in double, the drawn distribution against it, the candidates' rows.
 * Included once per suite. */
#ifndef AAH_SAMPLER_TEST_H
#define AAH_SAMPLER_TEST_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/sampler.h"
#include "tests/test_rng.h"

/* ck_assert_msg without Check's per-call bookkeeping (each passing ck_assert writes to the runner): for loops. */
#define CHECK(expr, ...)               \
	do {                               \
		if (!(expr))                   \
			ck_abort_msg(__VA_ARGS__); \
	} while (0)

/* uniform in [lo, hi) */
static inline float rng_range(float lo, float hi)
{
	return lo + (hi - lo) * (float)((double)(rng_u64() >> 11) / 9007199254740992.0);
}

static inline sampler_params params(float temperature, uint64_t seed)
{
	sampler_params p = { .temperature = temperature, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
	                     .presence_penalty = 0.0f, .frequency_penalty = 0.0f, .seed = seed };
	return p;
}

static inline void init_ok(sampler *s, const sampler_params *p, int32_t n)
{
	ck_assert_int_eq(sampler_init(s, p, n), 0);
	ck_assert_int_eq(s->n_vocab, n);
}

/* softmax(l / T) in double */
static inline void softmax_ref(double *p, const float *l, int32_t n, double T)
{
	double mx = -INFINITY, sum = 0;
	for (int32_t i = 0; i < n; i++)
		if (l[i] > mx)
			mx = l[i];
	for (int32_t i = 0; i < n; i++) {
		p[i] = isinf(l[i]) && l[i] < 0 ? 0 : exp((l[i] - mx) / T);
		sum += p[i];
	}
	for (int32_t i = 0; i < n; i++)
		p[i] /= sum;
}

/* Draws `draws` tokens and compares their frequencies with want (n values summing to 1): every frequency within
 * max_err, a token of probability 0 never drawn, and Pearson's χ² below a bound far in the tail. */
static inline void check_distribution(sampler *s, const float *logits, const double *want, int32_t n, int64_t draws,
                               double max_err, const char *what)
{
	int64_t *count = calloc((size_t)n, sizeof *count);
	for (int64_t d = 0; d < draws; d++) {
		int32_t t = sampler_sample(s, logits);
		CHECK(t >= 0 && t < n, "%s: token %d out of range", what, t);
		count[t]++;
	}
	double chi2 = 0;
	int df = -1;
	for (int32_t i = 0; i < n; i++) {
		double f = (double)count[i] / (double)draws;
		if (want[i] == 0) {
			CHECK(count[i] == 0, "%s: token %d of probability 0 drawn %lld times", what, i, (long long)count[i]);
			continue;
		}
		CHECK(fabs(f - want[i]) < max_err, "%s: token %d frequency %.5f, want %.5f", what, i, f, want[i]);
		double e = want[i] * (double)draws;
		chi2 += (count[i] - e) * (count[i] - e) / e;
		df++;
	}
	/* χ² with df ≤ 20 exceeds 3·df + 30 with probability below 1e-6 */
	CHECK(chi2 < 3.0 * df + 30.0, "%s: χ² = %.1f with %d degrees of freedom", what, chi2, df);
	free(count);
}

/* A row of small logits, and the distribution tests' usual subject. */
static const float small_logits[8] = { 0.0f, 1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 3.0f, -2.0f };

/* ---- rows for the draw from candidates (sampler_sample_top) ---- */

#define TOP_V 5000

/* A row of logits of one of six shapes. */
static inline void top_row(float *l, int kind)
{
	for (int32_t i = 0; i < TOP_V; i++) {
		float x = rng_range(-3.0f, 3.0f) + rng_range(-3.0f, 3.0f);
		switch (kind) {
		case 0: l[i] = x; break;                                         /* broad */
		case 1: l[i] = 0.3f * x; break;                                  /* peaked, after the line below */
		case 2: l[i] = rng_range(0.0f, 0.1f); break;                     /* nearly flat: a wide nucleus */
		case 3: l[i] = roundf(x * 2.0f) / 2.0f; break;                   /* many ties, at every boundary */
		case 4: l[i] = rng_u64() % 2 ? -INFINITY : x; break;             /* half of them impossible */
		default: l[i] = -1.1f * logf(rng_range(1.0f, (float)TOP_V)); break; /* a Zipf-like long tail */
		}
	}
	if (kind == 1)
		l[rng_u64() % TOP_V] = 14.0f;
}

#endif
