/* tests/engine/check_sampler.c — Check suite for engine/sampler: greedy and its ties, seeded reproducibility, the drawn
 * distribution against softmax, temperature, top-k, top-p, min-p, presence/frequency penalties, odd logits, the draw
 * from candidates. The per-request adjustments (logit_bias, …) are check_sampler_adjust.c's. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/sampler.h"
#include "kernels/backend.h"
#include "tests/engine/sampler_test.h"

/* logits = log(p): softmax at T = 1 gives p back; p = 0 gives -inf. */
static void logits_from_probs(float *l, const double *p, int32_t n)
{
	for (int32_t i = 0; i < n; i++)
		l[i] = p[i] > 0 ? (float)log(p[i]) : -INFINITY;
}

/* ---- greedy ---- */

START_TEST(test_argmax)
{
	const float a[] = { 1, 3, 3, 2 };
	ck_assert_int_eq(sampler_argmax(a, 4), 1);
	const float b[] = { -5, -5, -5 };
	ck_assert_int_eq(sampler_argmax(b, 3), 0);
	const float c[] = { -INFINITY, -1e30f, -INFINITY };
	ck_assert_int_eq(sampler_argmax(c, 3), 1);
	const float d[] = { 7 };
	ck_assert_int_eq(sampler_argmax(d, 1), 0);
	const float e[] = { 0, 0, 1e-38f, 1e-38f };
	ck_assert_int_eq(sampler_argmax(e, 4), 2);
	const float f[] = { -INFINITY, INFINITY, 5, INFINITY };
	ck_assert_int_eq(sampler_argmax(f, 4), 1);
	/* long rows (blocks of 64 and a tail): ties across blocks, NaNs ignored, a NaN first wins as in a plain scan */
	float g[1000];
	for (int32_t i = 0; i < 1000; i++)
		g[i] = (float)(i % 97);
	g[130] = g[700] = g[999] = 200;
	g[5] = g[131] = NAN;
	ck_assert_int_eq(sampler_argmax(g, 1000), 130);
	g[130] = g[700] = 0;
	ck_assert_int_eq(sampler_argmax(g, 1000), 999);   /* in the tail */
	g[0] = NAN;
	ck_assert_int_eq(sampler_argmax(g, 1000), 0);
	for (int32_t i = 0; i < 1000; i++)
		g[i] = -INFINITY;
	ck_assert_int_eq(sampler_argmax(g, 1000), 0);
	g[640] = -1e30f;
	ck_assert_int_eq(sampler_argmax(g, 1000), 640);
}
END_TEST

START_TEST(test_greedy)
{
	rng_state = 1;
	const int32_t n = 1000;
	float *l = malloc(n * sizeof *l), *copy = malloc(n * sizeof *copy);
	sampler s;
	sampler_params p = params(0.0f, 42);
	p.top_k = 5;   /* ignored when greedy */
	p.top_p = 0.3f;
	init_ok(&s, &p, n);
	for (int rep = 0; rep < 200; rep++) {
		for (int32_t i = 0; i < n; i++)
			l[i] = rng_range(-10, 10);
		int32_t a = (int32_t)(rng_u64() % n), b = (int32_t)(rng_u64() % n);
		l[a] = l[b] = 11.0f;   /* a tie for the maximum: the lower id wins */
		memcpy(copy, l, n * sizeof *l);
		int32_t want = a < b ? a : b;
		CHECK(sampler_sample(&s, l) == want, "greedy picked %d, want %d", sampler_sample(&s, l), want);
		CHECK(sampler_argmax(l, n) == want, "argmax");
		CHECK(!memcmp(l, copy, n * sizeof *l), "sampler_sample modified the logits");
	}
	sampler_free(&s);
	/* negative temperature is greedy too */
	p = params(-1.0f, 3);
	init_ok(&s, &p, 4);
	const float t[] = { 0, 2, 1, 2 };
	for (int i = 0; i < 100; i++)
		CHECK(sampler_sample(&s, t) == 1, "negative temperature is not greedy");
	sampler_free(&s);
	sampler_free(&s);   /* a second free is harmless */
	free(l);
	free(copy);
}
END_TEST

/* ---- the generator ---- */

static void draw_seq(int32_t *out, int32_t n_draws, const sampler_params *p, const float *l, int32_t n)
{
	sampler s;
	init_ok(&s, p, n);
	for (int32_t i = 0; i < n_draws; i++)
		out[i] = sampler_sample(&s, l);
	sampler_free(&s);
}

START_TEST(test_seed)
{
	rng_state = 2;
	const int32_t n = 50, draws = 1000;
	float l[50];
	for (int32_t i = 0; i < n; i++)
		l[i] = rng_range(-2, 2);
	int32_t a[1000], b[1000], c[1000];
	static const uint64_t seeds[] = { 0, 1, 2, 0xdeadbeefcafef00dull, UINT64_MAX };
	for (size_t si = 0; si < sizeof seeds / sizeof seeds[0]; si++) {
		sampler_params p = params(1.0f, seeds[si]);
		draw_seq(a, draws, &p, l, n);
		draw_seq(b, draws, &p, l, n);
		ck_assert_mem_eq(a, b, sizeof a);
		/* the same with filters */
		p.top_k = 20;
		p.top_p = 0.9f;
		p.min_p = 0.02f;
		draw_seq(a, draws, &p, l, n);
		draw_seq(b, draws, &p, l, n);
		ck_assert_mem_eq(a, b, sizeof a);
		/* another seed gives another sequence */
		sampler_params q = params(1.0f, seeds[si]);
		sampler_params r = params(1.0f, seeds[si] + 1);
		draw_seq(a, draws, &q, l, n);
		draw_seq(c, draws, &r, l, n);
		int same = 0;
		for (int32_t i = 0; i < draws; i++)
			same += a[i] == c[i];
		ck_assert_msg(same < draws / 4, "seeds %llu and %llu agree on %d of %d draws", (unsigned long long)seeds[si],
		              (unsigned long long)seeds[si] + 1, same, draws);
	}
}
END_TEST

/* ---- the distribution ---- */

START_TEST(test_softmax_distribution)
{
	sampler s;
	sampler_params p = params(1.0f, 7);
	init_ok(&s, &p, 8);
	double want[8];
	softmax_ref(want, small_logits, 8, 1.0);
	check_distribution(&s, small_logits, want, 8, 200000, 0.01, "T=1");
	sampler_free(&s);
}
END_TEST

START_TEST(test_temperature)
{
	static const float temps[] = { 0.25f, 0.5f, 2.0f, 10.0f };
	for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++) {
		sampler s;
		sampler_params p = params(temps[ti], 8 + ti);
		init_ok(&s, &p, 8);
		double want[8];
		softmax_ref(want, small_logits, 8, temps[ti]);
		char what[32];
		snprintf(what, sizeof what, "T=%g", temps[ti]);
		check_distribution(&s, small_logits, want, 8, 100000, 0.01, what);
		sampler_free(&s);
	}
}
END_TEST

/* T = 1e-6: the largest logit wins every time, even against one a thousandth below it. */
START_TEST(test_tiny_temperature)
{
	rng_state = 3;
	const int32_t n = 300;
	float l[300];
	sampler s;
	sampler_params p = params(1e-6f, 9);
	init_ok(&s, &p, n);
	for (int rep = 0; rep < 1000; rep++) {
		for (int32_t i = 0; i < n; i++)
			l[i] = rng_range(-5, 5);
		int32_t best = sampler_argmax(l, n), second = (best + 1) % n;
		l[second] = l[best] - 1e-3f;
		CHECK(sampler_sample(&s, l) == best, "T=1e-6 did not pick the argmax");
	}
	sampler_free(&s);
}
END_TEST

/* ---- top-k ---- */

START_TEST(test_top_k_1_is_greedy)
{
	rng_state = 4;
	const int32_t n = 500;
	float l[500];
	static const float temps[] = { 0.7f, 1.0f, 5.0f };
	for (size_t ti = 0; ti < 3; ti++) {
		sampler s;
		sampler_params p = params(temps[ti], 10 + ti);
		p.top_k = 1;
		init_ok(&s, &p, n);
		for (int rep = 0; rep < 500; rep++) {
			for (int32_t i = 0; i < n; i++)
				l[i] = rng_range(-3, 3);
			if (rep % 2) {   /* with a tie for the maximum */
				int32_t a = (int32_t)(rng_u64() % n), b = (int32_t)(rng_u64() % n);
				l[a] = l[b] = 3.5f;
			}
			CHECK(sampler_sample(&s, l) == sampler_argmax(l, n), "top_k=1 T=%g is not greedy", temps[ti]);
		}
		sampler_free(&s);
	}
}
END_TEST

START_TEST(test_top_k_3)
{
	sampler s;
	sampler_params p = params(1.0f, 11);
	p.top_k = 3;
	init_ok(&s, &p, 8);
	/* the three best of small_logits are ids 6 (3.0), 2 (2.0), 5 (1.5), renormalized */
	double want[8] = { 0 }, z = exp(3.0) + exp(2.0) + exp(1.5);
	want[6] = exp(3.0) / z;
	want[2] = exp(2.0) / z;
	want[5] = exp(1.5) / z;
	check_distribution(&s, small_logits, want, 8, 100000, 0.01, "top_k=3");
	sampler_free(&s);

	/* random logits: only ever one of the three best */
	rng_state = 5;
	const int32_t n = 1000;
	float *l = malloc(n * sizeof *l);
	p = params(2.0f, 12);
	p.top_k = 3;
	init_ok(&s, &p, n);
	for (int rep = 0; rep < 300; rep++) {
		for (int32_t i = 0; i < n; i++)
			l[i] = rng_range(-1, 1);
		int32_t t = sampler_sample(&s, l);
		int32_t above = 0;   /* tokens strictly better than t, or as good with a lower id */
		for (int32_t i = 0; i < n; i++)
			above += l[i] > l[t] || (l[i] == l[t] && i < t);
		CHECK(above < 3, "top_k=3 gave a token with %d better ones", above);
	}
	sampler_free(&s);
	free(l);

	/* ties at the boundary: equal logits are ordered by id, so top_k=3 of 10 equal logits is ids 0, 1, 2 */
	float eq[10];
	for (int i = 0; i < 10; i++)
		eq[i] = 0.5f;
	p = params(1.0f, 13);
	p.top_k = 3;
	init_ok(&s, &p, 10);
	double want_eq[10] = { 1.0 / 3, 1.0 / 3, 1.0 / 3 };
	check_distribution(&s, eq, want_eq, 10, 30000, 0.015, "top_k=3 of equal logits");
	sampler_free(&s);

	/* top_k ≥ n is off */
	p = params(1.0f, 14);
	p.top_k = 100;
	init_ok(&s, &p, 8);
	double want_all[8];
	softmax_ref(want_all, small_logits, 8, 1.0);
	check_distribution(&s, small_logits, want_all, 8, 100000, 0.01, "top_k=100 of 8");
	sampler_free(&s);
}
END_TEST

/* ---- top-p ---- */

typedef struct nucleus_case {
	const char *what;
	int32_t n;
	double probs[8];
	float top_p;
	int32_t top_k;
	int32_t keep[8];   /* 1 = in the nucleus */
} nucleus_case;

/* The nucleus is the smallest prefix of (p desc, id asc) whose mass is ≥ top_p (of the top-k remainder when
 * top-k is on); the draw is renormalized within it. */
static const nucleus_case nucleus_cases[] = {
	{ "0.5 alone", 4, { 0.5, 0.3, 0.15, 0.05 }, 0.45f, 0, { 1, 0, 0, 0 } },
	{ "0.5+0.3", 4, { 0.5, 0.3, 0.15, 0.05 }, 0.6f, 0, { 1, 1, 0, 0 } },
	{ "0.5+0.3+0.15", 4, { 0.5, 0.3, 0.15, 0.05 }, 0.9f, 0, { 1, 1, 1, 0 } },
	{ "unsorted ids", 5, { 0.05, 0.15, 0.5, 0.1, 0.2 }, 0.75f, 0, { 0, 1, 1, 0, 1 } },
	{ "tie: lower id first", 4, { 0.2, 0.3, 0.3, 0.2 }, 0.5f, 0, { 0, 1, 1, 0 } },
	{ "tie split by the cut", 4, { 0.2, 0.3, 0.3, 0.2 }, 0.7f, 0, { 1, 1, 1, 0 } },
	{ "tie split by the cut 2", 5, { 0.25, 0.25, 0.25, 0.25, 0.0 }, 0.3f, 0, { 1, 1, 0, 0, 0 } },
	{ "everything", 3, { 0.4, 0.35, 0.25 }, 0.99f, 0, { 1, 1, 1 } },
	{ "top_k then top_p of the rest", 5, { 0.4, 0.3, 0.2, 0.06, 0.04 }, 0.75f, 3, { 1, 1, 0, 0, 0 } },
	{ "top_k then top_p of the rest 2", 5, { 0.4, 0.3, 0.2, 0.06, 0.04 }, 0.8f, 3, { 1, 1, 1, 0, 0 } },
};

START_TEST(test_top_p_nucleus)
{
	const nucleus_case *c = &nucleus_cases[_i];
	float l[8];
	logits_from_probs(l, c->probs, c->n);
	double want[8] = { 0 }, z = 0;
	for (int32_t i = 0; i < c->n; i++)
		z += c->keep[i] ? c->probs[i] : 0;
	for (int32_t i = 0; i < c->n; i++)
		want[i] = c->keep[i] ? c->probs[i] / z : 0;
	sampler s;
	sampler_params p = params(1.0f, 20 + (uint64_t)_i);
	p.top_p = c->top_p;
	p.top_k = c->top_k;
	init_ok(&s, &p, c->n);
	check_distribution(&s, l, want, c->n, 100000, 0.01, c->what);
	sampler_free(&s);
}
END_TEST

/* A nucleus against a long tail: 0.5 and 0.26, then 0.24 spread over 2000 tokens. With top_p = 0.6 the nucleus
 * is {0, 1} (0.5 < 0.6 ≤ 0.76); with 0.8 it reaches into the tail, so almost every draw of the tail is allowed. */
START_TEST(test_top_p_long_tail)
{
	const int32_t n = 2002;
	double *pr = malloc(n * sizeof *pr), *want = calloc(n, sizeof *want);
	float *l = malloc(n * sizeof *l);
	pr[0] = 0.5;
	pr[1] = 0.26;
	for (int32_t i = 2; i < n; i++)
		pr[i] = 0.24 / (n - 2);
	logits_from_probs(l, pr, n);

	sampler s;
	sampler_params p = params(1.0f, 30);
	p.top_p = 0.6f;
	init_ok(&s, &p, n);
	want[0] = 0.5 / 0.76;
	want[1] = 0.26 / 0.76;
	check_distribution(&s, l, want, n, 50000, 0.01, "top_p=0.6 over a long tail");
	sampler_free(&s);

	/* 0.76 + k · 0.00012 ≥ 0.8 needs k = 334 tail tokens (the lowest ids among equals) */
	p.top_p = 0.8f;
	p.seed = 31;
	init_ok(&s, &p, n);
	int64_t head = 0, tail = 0, beyond = 0;
	for (int d = 0; d < 50000; d++) {
		int32_t t = sampler_sample(&s, l);
		if (t < 2)
			head++;
		else if (t < 2 + 334 + 1)
			tail++;
		else
			beyond++;
	}
	sampler_free(&s);
	ck_assert_msg(beyond == 0, "top_p=0.8: %lld draws beyond the nucleus", (long long)beyond);
	double tail_mass = 334 * 0.24 / (n - 2);
	ck_assert_msg(fabs((double)tail / 50000 - tail_mass / (0.76 + tail_mass)) < 0.01,
	              "top_p=0.8: tail frequency %.4f, want %.4f", (double)tail / 50000, tail_mass / (0.76 + tail_mass));
	free(pr);
	free(want);
	free(l);
}
END_TEST

/* Samplers on two threads at once draw what each draws alone: the candidate sort's comparison once found its
 * probabilities through one pointer shared by every thread, so concurrent top-p draws sorted with each other's. */
typedef struct race_arg {
	const float *logits;
	int32_t n, draws;
	uint64_t seed;
	int32_t *out;
} race_arg;

static void *race_draws(void *p)
{
	race_arg *a = p;
	sampler s;
	sampler_params sp = params(1.0f, a->seed);
	sp.top_p = 0.9f;
	if (sampler_init(&s, &sp, a->n) != 0)
		return NULL;
	for (int32_t d = 0; d < a->draws; d++)
		a->out[d] = sampler_sample(&s, a->logits);
	sampler_free(&s);
	return NULL;
}

START_TEST(test_threads)
{
	enum { N = 4000, DRAWS = 400 };
	float *la = malloc(N * sizeof *la), *lb = malloc(N * sizeof *lb);
	rng_state = 77;
	for (int32_t i = 0; i < N; i++) {   /* two different broad distributions: long sorts that overlap */
		la[i] = (float)(rng_u64() % 1000) / 250.0f;
		lb[i] = (float)(rng_u64() % 1000) / 250.0f;
	}
	int32_t *alone_a = malloc(DRAWS * sizeof(int32_t)), *alone_b = malloc(DRAWS * sizeof(int32_t));
	int32_t *both_a = malloc(DRAWS * sizeof(int32_t)), *both_b = malloc(DRAWS * sizeof(int32_t));
	race_arg a = { la, N, DRAWS, 5, alone_a }, b = { lb, N, DRAWS, 6, alone_b };
	race_draws(&a);
	race_draws(&b);
	for (int round = 0; round < 3; round++) {
		a.out = both_a;
		b.out = both_b;
		pthread_t ta, tb;
		ck_assert_int_eq(pthread_create(&ta, NULL, race_draws, &a), 0);
		ck_assert_int_eq(pthread_create(&tb, NULL, race_draws, &b), 0);
		pthread_join(ta, NULL);
		pthread_join(tb, NULL);
		ck_assert_mem_eq(both_a, alone_a, DRAWS * sizeof(int32_t));
		ck_assert_mem_eq(both_b, alone_b, DRAWS * sizeof(int32_t));
	}
	free(la);
	free(lb);
	free(alone_a);
	free(alone_b);
	free(both_a);
	free(both_b);
}
END_TEST

/* ---- min-p ---- */

START_TEST(test_min_p)
{
	/* p_max = 0.5, min_p = 0.25: the floor is 0.125, so 0.1 and 0.05 go */
	const double pr[5] = { 0.5, 0.2, 0.1, 0.05, 0.15 };
	float l[5];
	logits_from_probs(l, pr, 5);
	double want[5] = { 0.5 / 0.85, 0.2 / 0.85, 0, 0, 0.15 / 0.85 };
	sampler s;
	sampler_params p = params(1.0f, 40);
	p.min_p = 0.25f;
	init_ok(&s, &p, 5);
	check_distribution(&s, l, want, 5, 100000, 0.01, "min_p=0.25");
	sampler_free(&s);

	/* min_p = 1 keeps only the maximum (and its ties) */
	const double pr2[4] = { 0.3, 0.3, 0.2, 0.2 };
	logits_from_probs(l, pr2, 4);
	double want2[4] = { 0.5, 0.5, 0, 0 };
	p.min_p = 1.0f;
	p.seed = 41;
	init_ok(&s, &p, 4);
	check_distribution(&s, l, want2, 4, 50000, 0.01, "min_p=1");
	sampler_free(&s);

	/* with top_k: min_p applies to what top_k left */
	logits_from_probs(l, pr, 5);
	double want3[5] = { 0.5 / 0.7, 0.2 / 0.7, 0, 0, 0 };
	p = params(1.0f, 42);
	p.min_p = 0.1f;
	p.top_k = 2;
	init_ok(&s, &p, 5);
	check_distribution(&s, l, want3, 5, 50000, 0.01, "top_k=2 min_p=0.1");
	sampler_free(&s);
}
END_TEST

/* ---- penalties ---- */

START_TEST(test_penalties_greedy)
{
	const float l[3] = { 5.0f, 4.5f, 0.0f };
	sampler s;
	sampler_params p = params(0.0f, 50);
	p.presence_penalty = 0.25f;
	p.frequency_penalty = 0.125f;
	init_ok(&s, &p, 3);
	ck_assert_int_eq(sampler_sample(&s, l), 0);
	sampler_accept(&s, 0);   /* 5 - 0.25 - 0.125 = 4.625 */
	ck_assert_int_eq(sampler_sample(&s, l), 0);
	sampler_accept(&s, 0);   /* 5 - 0.25 - 0.25 = 4.5: a tie, the lower id wins */
	ck_assert_int_eq(sampler_sample(&s, l), 0);
	sampler_accept(&s, 0);   /* 4.375 */
	ck_assert_int_eq(sampler_sample(&s, l), 1);
	sampler_accept(&s, 1);   /* 4.5 - 0.375 = 4.125 */
	ck_assert_int_eq(sampler_sample(&s, l), 0);
	/* out-of-range tokens are ignored */
	sampler_accept(&s, -1);
	sampler_accept(&s, 3);
	sampler_accept(&s, INT32_MAX);
	ck_assert_int_eq(s.counts[0], 3);
	ck_assert_int_eq(s.counts[1], 1);
	ck_assert_int_eq(s.counts[2], 0);
	sampler_free(&s);

	/* presence only: once is the same as many times */
	p = params(0.0f, 51);
	p.presence_penalty = 0.75f;
	init_ok(&s, &p, 3);
	sampler_accept(&s, 0);   /* 4.25 < 4.5 */
	ck_assert_int_eq(sampler_sample(&s, l), 1);
	sampler_accept(&s, 1);   /* 3.75 < 4.25 */
	ck_assert_int_eq(sampler_sample(&s, l), 0);
	for (int i = 0; i < 10; i++)
		sampler_accept(&s, 0);
	ck_assert_int_eq(sampler_sample(&s, l), 0);
	sampler_free(&s);

	/* a negative penalty favours tokens already seen */
	p = params(0.0f, 52);
	p.frequency_penalty = -1.0f;
	init_ok(&s, &p, 3);
	for (int i = 0; i < 6; i++)
		sampler_accept(&s, 2);   /* 0 + 6 > 5 */
	ck_assert_int_eq(sampler_sample(&s, l), 2);
	sampler_free(&s);
}
END_TEST

/* With T = 1 the draw follows softmax(l - presence·[c > 0] - frequency·c). */
START_TEST(test_penalties_distribution)
{
	sampler s;
	sampler_params p = params(1.0f, 53);
	p.presence_penalty = 0.5f;
	p.frequency_penalty = 0.3f;
	init_ok(&s, &p, 8);
	const int32_t accepted[] = { 6, 6, 2, 5, 6 };
	int32_t counts[8] = { 0 };
	for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
		sampler_accept(&s, accepted[i]);
		counts[accepted[i]]++;
	}
	float pen[8];
	for (int32_t i = 0; i < 8; i++)
		pen[i] = small_logits[i] - (counts[i] ? 0.5f + 0.3f * (float)counts[i] : 0.0f);
	double want[8];
	softmax_ref(want, pen, 8, 1.0);
	check_distribution(&s, small_logits, want, 8, 100000, 0.01, "penalties at T=1");
	sampler_free(&s);
}
END_TEST

/* ---- odd logits ---- */

START_TEST(test_all_equal)
{
	float l[10];
	for (int i = 0; i < 10; i++)
		l[i] = -3.0f;
	sampler s;
	sampler_params p = params(0.0f, 60);
	init_ok(&s, &p, 10);
	ck_assert_int_eq(sampler_sample(&s, l), 0);
	sampler_free(&s);

	double uniform[10];
	for (int i = 0; i < 10; i++)
		uniform[i] = 0.1;
	p = params(1.0f, 61);
	init_ok(&s, &p, 10);
	check_distribution(&s, l, uniform, 10, 100000, 0.01, "all equal");
	sampler_free(&s);

	/* top_p = 0.45 of ten equal tokens: ids 0 … 4 */
	double five[10] = { 0.2, 0.2, 0.2, 0.2, 0.2 };
	p.top_p = 0.45f;
	p.seed = 62;
	init_ok(&s, &p, 10);
	check_distribution(&s, l, five, 10, 50000, 0.01, "all equal, top_p=0.45");
	sampler_free(&s);

	/* min_p keeps every one of them */
	p = params(1.0f, 63);
	p.min_p = 0.9f;
	init_ok(&s, &p, 10);
	check_distribution(&s, l, uniform, 10, 50000, 0.01, "all equal, min_p=0.9");
	sampler_free(&s);
}
END_TEST

START_TEST(test_neg_inf)
{
	rng_state = 6;
	const int32_t n = 64;
	float l[64];
	static const float temps[] = { 0.0f, 0.5f, 1.0f, 3.0f, 100.0f };
	for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++)
		for (int filt = 0; filt < 4; filt++) {
			sampler s;
			sampler_params p = params(temps[ti], 70 + ti * 4 + (uint64_t)filt);
			if (filt == 1)
				p.top_p = 0.95f;
			if (filt == 2)
				p.min_p = 1e-9f;
			if (filt == 3)
				p.top_k = 50;   /* more than the finite logits */
			init_ok(&s, &p, n);
			for (int rep = 0; rep < 2000; rep++) {
				for (int32_t i = 0; i < n; i++)
					l[i] = i % 3 == 1 ? rng_range(-4, 4) : -INFINITY;
				int32_t t = sampler_sample(&s, l);
				CHECK(t >= 0 && t < n && t % 3 == 1, "T=%g filter %d drew token %d with logit %g", temps[ti], filt, t,
				      t >= 0 && t < n ? l[t] : 0.0f);
			}
			sampler_free(&s);
		}
	/* one finite logit among -inf: always it */
	for (int32_t i = 0; i < n; i++)
		l[i] = -INFINITY;
	l[37] = -1e30f;
	sampler s;
	sampler_params p = params(1.0f, 80);
	init_ok(&s, &p, n);
	for (int rep = 0; rep < 100; rep++)
		CHECK(sampler_sample(&s, l) == 37, "the only finite logit was not drawn");
	sampler_free(&s);
}
END_TEST

/* ---- the vocabulary limit ---- */

/* Ids at or above vocab_limit (a padded embedding's extra rows) are never drawn, however large their logits; below
 * it the draw is softmax over [0, limit). A limit of 0 or ≥ n_vocab is off. */
START_TEST(test_vocab_limit)
{
	float l[12];
	for (int i = 0; i < 8; i++)
		l[i] = small_logits[i];
	for (int i = 8; i < 12; i++)
		l[i] = 50.0f;   /* padding rows with the largest logits */
	sampler s;
	sampler_params p = params(0.0f, 100);
	p.vocab_limit = 8;
	init_ok(&s, &p, 12);
	ck_assert_int_eq(sampler_sample(&s, l), 6);
	sampler_free(&s);

	double want[12] = { 0 };
	softmax_ref(want, small_logits, 8, 1.0);
	p = params(1.0f, 101);
	p.vocab_limit = 8;
	init_ok(&s, &p, 12);
	check_distribution(&s, l, want, 12, 100000, 0.01, "vocab_limit=8");
	sampler_free(&s);

	/* with every filter */
	p.top_k = 3;
	p.top_p = 0.9f;
	p.min_p = 0.01f;
	p.presence_penalty = 0.5f;
	p.seed = 102;
	init_ok(&s, &p, 12);
	for (int d = 0; d < 5000; d++) {
		int32_t t = sampler_sample(&s, l);
		CHECK(t == 6 || t == 2 || t == 5 || t == 1, "vocab_limit=8 with filters drew %d", t);
		sampler_accept(&s, t);
	}
	sampler_free(&s);

	/* off: 0 and ≥ n_vocab */
	static const int32_t off[] = { 0, 12, 1000, -1 };
	for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
		p = params(0.0f, 103);
		p.vocab_limit = off[i];
		init_ok(&s, &p, 12);
		ck_assert_int_eq(sampler_sample(&s, l), 8);
		sampler_free(&s);
	}
}
END_TEST

/* ---- a real vocabulary ---- */

START_TEST(test_large_vocab)
{
	rng_state = 7;
	const int32_t n = 151936;
	float *l = malloc((size_t)n * sizeof *l);
	for (int32_t i = 0; i < n; i++)
		l[i] = rng_range(-8, 8) + (i % 1000 == 0 ? 12.0f : 0.0f);   /* a few strong tokens, a long tail */
	int32_t best = sampler_argmax(l, n);
	/* the 40th largest logit: tokens above it are the top-40 */
	float *sorted = malloc((size_t)n * sizeof *sorted);
	memcpy(sorted, l, (size_t)n * sizeof *sorted);
	for (int32_t k = 0; k < 40; k++) {   /* partial selection sort: 40 passes */
		int32_t m = k;
		for (int32_t i = k + 1; i < n; i++)
			if (sorted[i] > sorted[m])
				m = i;
		float t = sorted[k];
		sorted[k] = sorted[m];
		sorted[m] = t;
	}
	const float kth = sorted[39];
	free(sorted);

	struct cfg {
		float temperature, top_p, min_p;
		int32_t top_k;
	} cfgs[] = {
		{ 0.0f, 1.0f, 0.0f, 0 },   { 1.0f, 1.0f, 0.0f, 0 },  { 0.8f, 0.95f, 0.0f, 0 }, { 0.7f, 0.9f, 0.05f, 40 },
		{ 1.0f, 1.0f, 0.0f, 40 },  { 1.0f, 0.5f, 0.0f, 0 },  { 1.0f, 1.0f, 0.1f, 0 },  { 1e-6f, 1.0f, 0.0f, 0 },
	};
	for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
		sampler s;
		sampler_params p = params(cfgs[ci].temperature, 90 + ci);
		p.top_p = cfgs[ci].top_p;
		p.min_p = cfgs[ci].min_p;
		p.top_k = cfgs[ci].top_k;
		/* a penalty would move the argmax and the top-40 that the checks below expect */
		p.presence_penalty = p.top_k == 0 && p.temperature >= 1e-3f ? 0.1f : 0.0f;
		init_ok(&s, &p, n);
		const int draws = 100;
		double t0 = aah_now_s();
		for (int d = 0; d < draws; d++) {
			int32_t t = sampler_sample(&s, l);
			CHECK(t >= 0 && t < n, "token %d", t);
			if (p.temperature == 0 || p.temperature < 1e-3f)
				CHECK(t == best, "greedy gave %d, want %d", t, best);
			if (p.top_k == 40)
				CHECK(l[t] >= kth, "top_k=40 gave a token below the 40th logit");
			sampler_accept(&s, t);
		}
		double ms = (aah_now_s() - t0) * 1e3 / draws;
		printf("sampler vocab %d T=%g top_k=%d top_p=%g min_p=%g: %.3f ms per token\n", n, p.temperature, p.top_k,
		       p.top_p, p.min_p, ms);
		ck_assert_msg(ms < 50.0, "%.1f ms per token", ms);   /* generous: a sanitizer build on a busy machine */
		sampler_free(&s);
	}
	free(l);
}
END_TEST

/* ---- the draw from a row's candidates (sampler_sample_top) against the draw from the whole row ----
 * The candidates and sums come from the CPU backend's logits_top (the reference of a device's); every draw of the
 * candidate sampler must equal the full-row sampler's, whether it decided or fell back to sampler_sample (which then
 * also proves that a fallback left the generator untouched). */

typedef struct top_case {
	float temperature;
	int32_t top_k;
	float top_p, min_p;
	int32_t vocab_limit;
	int decides;   /* 1: every draw on rows without ties must be decided by the candidates; -1: none may be; 0: either */
} top_case;

static const top_case top_cases[] = {
	{ 0, 0, 1, 0, 0, 1 },           { 0, 0, 1, 0, 4000, 1 },       { 0.8f, 0, 1, 0, 0, -1 },
	{ 0.8f, 1, 1, 0, 0, 1 },        { 0.8f, 5, 1, 0, 0, 1 },       { 1.3f, 40, 1, 0, 0, 1 },
	{ 0.8f, 63, 1, 0, 4000, 1 },    { 0.8f, 0, 0.5f, 0, 0, 0 },    { 0.8f, 0, 0.9f, 0, 0, 0 },
	{ 1.0f, 0, 0.95f, 0, 0, 0 },    { 0.8f, 40, 0.9f, 0, 0, 1 },   { 0.8f, 0, 1, 0.1f, 0, 0 },
	{ 0.8f, 0, 1, 0.3f, 0, 0 },     { 0.8f, 20, 0.8f, 0.05f, 0, 1 }, { 0.7f, 0, 0.9f, 0.05f, 4000, 0 },
	{ 0.3f, 0, 0.99f, 0, 0, 0 },    { 2.0f, 200, 0.7f, 0, 0, 1 },
};

START_TEST(test_top_candidates)
{
	const top_case *tc = &top_cases[_i];
	aah_backend_params bp = { .n_threads = 1 };
	aah_backend *cpu = aah_backend_cpu_init(&bp);
	ck_assert_ptr_nonnull(cpu);
	float *l = malloc(TOP_V * sizeof *l), *top_l = malloc(256 * sizeof *top_l);
	int32_t *top_ids = malloc(256 * sizeof *top_ids);
	ck_assert(l && top_l && top_ids);
	long decided_total = 0;
	for (int kind = 0; kind < 6; kind++)
		for (int small = 0; small < 2; small++) {   /* the wanted count, and a stingy 8 that falls back more */
			rng_state = 1000 + (uint64_t)_i * 16 + (uint64_t)kind * 2 + (uint64_t)small;
			sampler_params sp = { .temperature = tc->temperature, .top_k = tc->top_k, .top_p = tc->top_p,
			                      .min_p = tc->min_p, .seed = 77 + (uint64_t)kind, .vocab_limit = tc->vocab_limit };
			sampler a, b;
			ck_assert_int_eq(sampler_init(&a, &sp, TOP_V), 0);
			ck_assert_int_eq(sampler_init(&b, &sp, TOP_V), 0);
			const int32_t n_cols = tc->vocab_limit > 0 ? tc->vocab_limit : TOP_V;
			const int32_t n_top = small ? 8 : sampler_top_wanted(&b, 256);
			int decided = 0, draws = 30;
			for (int d = 0; d < draws; d++) {
				top_row(l, kind);
				aah_logits_stats st;
				cpu->iface.logits_top(cpu, &st, top_ids, top_l, l, TOP_V, 1, n_cols, &tc->temperature, n_top);
				/* the log-softmax normaliser, as the scheduler's logprob_fill computes it */
				double m = -INFINITY, sum1 = 0;
				for (int32_t i = 0; i < n_cols; i++)
					m = l[i] > m ? l[i] : m;
				for (int32_t i = 0; i < n_cols; i++)
					sum1 += exp((double)l[i] - m);
				CHECK(st.lse == m + log(sum1) || (isnan(st.lse) && isnan(m + log(sum1))), "lse %.17g, want %.17g",
				      st.lse, m + log(sum1));
				sampler_top t = { st.max, st.sum, top_ids, top_l, n_top, n_cols };
				int32_t got = sampler_sample_top(&b, &t);
				decided += got >= 0;
				if (got < 0)
					got = sampler_sample(&b, l);
				int32_t want = sampler_sample(&a, l);
				CHECK(got == want, "case %d kind %d n_top %d draw %d: candidates give %d, the full row %d", _i, kind,
				      n_top, d, got, want);
			}
			if (tc->decides == 1 && !small && kind != 2 && kind != 3)   /* rows without (rounded) ties */
				CHECK(decided == draws, "case %d kind %d: %d of %d draws decided", _i, kind, decided, draws);
			if (tc->decides == -1)
				CHECK(decided == 0, "case %d kind %d: %d draws decided without the whole row", _i, kind, decided);
			decided_total += decided;
			sampler_free(&a);
			sampler_free(&b);
		}
	printf("top candidates, case %d (T=%g top_k=%d top_p=%g min_p=%g limit %d): %ld of %d draws decided\n", _i,
	       tc->temperature, tc->top_k, tc->top_p, tc->min_p, tc->vocab_limit, decided_total, 6 * 2 * 30);
	if (tc->decides >= 0)
		CHECK(decided_total > 0, "case %d: no draw decided by the candidates", _i);
	free(l);
	free(top_l);
	free(top_ids);
	cpu->iface.free(cpu);
}
END_TEST

/* Log-probabilities from the candidates equal the full row's, bit for bit; an id outside them, or more ids than they
 * hold, is refused. */
START_TEST(test_top_candidates_logprobs)
{
	aah_backend_params bp = { .n_threads = 1 };
	aah_backend *cpu = aah_backend_cpu_init(&bp);
	float *l = malloc(TOP_V * sizeof *l), top_l[64], lp_want, lp_got, lps_want[20], lps_got[20];
	int32_t top_ids[64], ids_want[20], ids_got[20];
	const float one = 1.0f;
	int used = 0;
	for (int kind = 0; kind < 6; kind++)
		for (int d = 0; d < 10; d++) {
			rng_state = 900 + (uint64_t)kind * 10 + (uint64_t)d;
			top_row(l, kind);
			aah_logits_stats st;
			cpu->iface.logits_top(cpu, &st, top_ids, top_l, l, TOP_V, 1, TOP_V, &one, 64);
			sampler_top t = { st.max, st.sum, top_ids, top_l, 64, TOP_V };
			/* the chosen id: mostly a candidate, sometimes not */
			int32_t id = d % 3 ? top_ids[rng_u64() % 64] : (int32_t)(rng_u64() % TOP_V);
			const int32_t n_lp = d % 2 ? 20 : 0;
			int rc = sampler_logprobs_top(&t, st.lse, id, n_lp, &lp_got, ids_got, lps_got);
			bool in = false;
			for (int32_t j = 0; j < 64; j++)
				in = in || top_ids[j] == id;
			if (!isfinite(st.lse))
				in = false;
			CHECK(rc == (in ? 0 : -1), "kind %d draw %d: rc %d for an id %s the candidates", kind, d, rc,
			      in ? "among" : "outside");
			if (rc != 0)
				continue;
			used++;
			sampler_logprobs(l, TOP_V, id, n_lp, &lp_want, ids_want, lps_want);
			CHECK(memcmp(&lp_got, &lp_want, sizeof lp_got) == 0, "kind %d: logprob %.9g, full row %.9g", kind, lp_got,
			      lp_want);
			CHECK(n_lp == 0 || (memcmp(ids_got, ids_want, (size_t)n_lp * sizeof *ids_got) == 0 &&
			                    memcmp(lps_got, lps_want, (size_t)n_lp * sizeof *lps_got) == 0),
			      "kind %d: top logprobs differ", kind);
		}
	ck_assert_int_gt(used, 20);
	sampler_top t = { 0, 1, (const int32_t[]){ 3 }, (const float[]){ 1.0f }, 1, TOP_V };
	ck_assert_int_eq(sampler_logprobs_top(&t, 2.0, 3, 2, &lp_got, ids_got, lps_got), -1);   /* 2 of 1 candidate */
	ck_assert_int_eq(sampler_logprobs_top(&t, NAN, 3, 1, &lp_got, ids_got, lps_got), -1);
	ck_assert_int_eq(sampler_logprobs_top(&t, 2.0, 3, 1, &lp_got, ids_got, lps_got), 0);
	ck_assert(lp_got == -1.0f && ids_got[0] == 3);
	free(l);
	cpu->iface.free(cpu);
}
END_TEST

/* Penalties move logits after the candidates were chosen: once a token is accepted the candidates cannot decide. */
START_TEST(test_top_candidates_penalties)
{
	aah_backend_params bp = { .n_threads = 1 };
	aah_backend *cpu = aah_backend_cpu_init(&bp);
	float *l = malloc(TOP_V * sizeof *l), top_l[64];
	int32_t top_ids[64];
	rng_state = 5;
	top_row(l, 0);
	sampler_params sp = params(0, 1);
	sp.presence_penalty = 1.5f;
	sampler a, b;
	ck_assert_int_eq(sampler_init(&a, &sp, TOP_V), 0);
	ck_assert_int_eq(sampler_init(&b, &sp, TOP_V), 0);
	aah_logits_stats st;
	cpu->iface.logits_top(cpu, &st, top_ids, top_l, l, TOP_V, 1, TOP_V, &sp.temperature, 64);
	sampler_top t = { st.max, st.sum, top_ids, top_l, 64, TOP_V };
	int32_t first = sampler_sample_top(&b, &t);
	ck_assert_int_eq(first, sampler_sample(&a, l));
	sampler_accept(&a, first);
	sampler_accept(&b, first);
	ck_assert_int_eq(sampler_sample_top(&b, &t), -1);
	ck_assert_int_ne(sampler_sample(&b, l), first);   /* the penalty moved the argmax: the row had to be read */
	t.n_cols = TOP_V - 1;   /* candidates from other columns than the sampler's */
	sampler_params sq = params(0, 1);
	sampler c;
	ck_assert_int_eq(sampler_init(&c, &sq, TOP_V), 0);
	ck_assert_int_eq(sampler_sample_top(&c, &t), -1);
	sampler_free(&a);
	sampler_free(&b);
	sampler_free(&c);
	free(l);
	cpu->iface.free(cpu);
}
END_TEST

static Suite *sampler_suite(void)
{
	Suite *s = suite_create("sampler");

	TCase *tc = tcase_create("greedy");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_argmax);
	tcase_add_test(tc, test_greedy);
	tcase_add_test(tc, test_tiny_temperature);
	suite_add_tcase(s, tc);

	tc = tcase_create("distribution");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_seed);
	tcase_add_test(tc, test_softmax_distribution);
	tcase_add_test(tc, test_temperature);
	suite_add_tcase(s, tc);

	tc = tcase_create("filters");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_top_k_1_is_greedy);
	tcase_add_test(tc, test_top_k_3);
	tcase_add_loop_test(tc, test_top_p_nucleus, 0, (int)(sizeof nucleus_cases / sizeof nucleus_cases[0]));
	tcase_add_test(tc, test_top_p_long_tail);
	tcase_add_test(tc, test_threads);
	tcase_add_test(tc, test_min_p);
	suite_add_tcase(s, tc);

	tc = tcase_create("penalties");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_penalties_greedy);
	tcase_add_test(tc, test_penalties_distribution);
	suite_add_tcase(s, tc);

	tc = tcase_create("odd_logits");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_all_equal);
	tcase_add_test(tc, test_neg_inf);
	tcase_add_test(tc, test_vocab_limit);
	tcase_add_test(tc, test_large_vocab);
	suite_add_tcase(s, tc);

	tc = tcase_create("top_candidates");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_top_candidates, 0, (int)(sizeof top_cases / sizeof top_cases[0]));
	tcase_add_test(tc, test_top_candidates_penalties);
	tcase_add_test(tc, test_top_candidates_logprobs);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sampler_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
