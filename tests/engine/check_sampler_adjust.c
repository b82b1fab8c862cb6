/* tests/engine/check_sampler_adjust.c — Check suite for engine/sampler's per-request adjustments (sampler_adjust, the one
 * place they are made): logit_bias, the repetition penalty over the prompt and the output, min_tokens' ban of the stop
 * ids, an allowed-token mask, their order, determinism, and the draw from candidates declining or deciding with them
 * exactly as the whole row does. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "kernels/backend.h"
#include "tests/engine/sampler_test.h"

/* Sets the bits of ids in a mask of n ids (cleared first). */
static void mask_of(uint32_t *mask, int32_t n, const int32_t *ids, int32_t n_ids)
{
	memset(mask, 0, (size_t)(n + 31) / 32 * sizeof *mask);
	for (int32_t i = 0; i < n_ids; i++)
		mask[ids[i] >> 5] |= 1u << (ids[i] & 31);
}

/* logit_bias moves a greedy choice both ways (+100 forces a token, -100 removes the argmax), the same id twice adds up,
 * an id at or past vocab_limit changes nothing, and the caller's logits stay as they were; at T = 1 the draw follows
 * softmax(l + bias). */
START_TEST(test_logit_bias)
{
	float l[8], copy[8];
	memcpy(l, small_logits, sizeof l);
	memcpy(copy, l, sizeof l);
	sampler s;
	sampler_params p = params(0.0f, 1);
	const sampler_bias up[] = { { 7, 100.0f } };   /* the smallest logit */
	p.bias = up;
	p.n_bias = 1;
	init_ok(&s, &p, 8);
	ck_assert_int_eq(sampler_greedy_cols(&s), 0);   /* not for the batched argmax */
	ck_assert_int_eq(sampler_sample(&s, l), 7);
	sampler_free(&s);
	ck_assert_mem_eq(l, copy, sizeof l);

	const sampler_bias down[] = { { 6, -100.0f } };   /* the argmax, 3.0: the next is id 2 at 2.0 */
	p.bias = down;
	init_ok(&s, &p, 8);
	ck_assert_int_eq(sampler_sample(&s, l), 2);
	sampler_free(&s);

	/* id 5 twice: 1.5 + 1 + 1 = 3.5 beats 3.0; the copy is sorted and merged, whatever the caller's order */
	const sampler_bias twice[] = { { 5, 1.0f }, { 1, 0.25f }, { 5, 1.0f } };
	p.bias = twice;
	p.n_bias = 3;
	init_ok(&s, &p, 8);
	ck_assert_int_eq(s.p.n_bias, 2);
	ck_assert_int_eq(sampler_sample(&s, l), 5);
	sampler_free(&s);

	/* past the vocab limit: never drawn, biased or not */
	const sampler_bias past[] = { { 7, 100.0f } };
	p.bias = past;
	p.n_bias = 1;
	p.vocab_limit = 7;
	init_ok(&s, &p, 8);
	ck_assert_int_eq(sampler_sample(&s, l), 6);
	sampler_free(&s);

	p = params(1.0f, 2);
	const sampler_bias mix[] = { { 0, 2.0f }, { 6, -1.5f }, { 4, 3.0f } };
	p.bias = mix;
	p.n_bias = 3;
	init_ok(&s, &p, 8);
	float biased[8];
	memcpy(biased, small_logits, sizeof biased);
	biased[0] += 2.0f;
	biased[6] -= 1.5f;
	biased[4] += 3.0f;
	double want[8];
	softmax_ref(want, biased, 8, 1.0);
	check_distribution(&s, small_logits, want, 8, 100000, 0.01, "logit_bias at T=1");
	sampler_free(&s);
}
END_TEST

/* The repetition penalty (vLLM, Hugging Face): an id of the prompt or the output has l > 0 divided by p, l ≤ 0
 * multiplied; it comes after logit_bias and before presence/frequency; 0 and 1 are off, bit for bit. */
START_TEST(test_repetition_penalty)
{
	sampler s;
	sampler_params p = params(0.0f, 3);
	p.repetition_penalty = 2.0f;
	const float l[4] = { 5.0f, 4.5f, -1.0f, -1.5f };
	init_ok(&s, &p, 4);
	ck_assert_int_eq(sampler_greedy_cols(&s), 0);
	ck_assert_int_eq(sampler_sample(&s, l), 0);
	const int32_t prompt[] = { 0, 9, -3 };   /* out-of-range ids are ignored */
	sampler_prompt(&s, prompt, 3);
	ck_assert_int_eq(sampler_sample(&s, l), 1);   /* 5 / 2 = 2.5 < 4.5 */
	sampler_accept(&s, 1);                        /* the output counts too: 4.5 / 2 = 2.25 < 2.5 */
	ck_assert_int_eq(sampler_sample(&s, l), 0);
	sampler_free(&s);

	/* negative logits are multiplied: -1 · 2 = -2 falls below -1.5 */
	const float neg[2] = { -1.0f, -1.5f };
	init_ok(&s, &p, 2);
	ck_assert_int_eq(sampler_sample(&s, neg), 0);
	sampler_accept(&s, 0);
	ck_assert_int_eq(sampler_sample(&s, neg), 1);
	sampler_free(&s);

	/* a penalty below 1 favours what was seen: 1 / 0.5 = 2 > 1.5 */
	const float two[2] = { 1.0f, 1.5f };
	p.repetition_penalty = 0.5f;
	init_ok(&s, &p, 2);
	sampler_prompt(&s, (const int32_t[]){ 0 }, 1);
	ck_assert_int_eq(sampler_sample(&s, two), 0);
	sampler_free(&s);

	/* after logit_bias: (1 + 3) / 2 = 2 < 2.5 (before it, 1 / 2 + 3 = 3.5 would win) */
	const float ab[2] = { 1.0f, 2.5f };
	p.repetition_penalty = 2.0f;
	p.bias = (const sampler_bias[]){ { 0, 3.0f } };
	p.n_bias = 1;
	init_ok(&s, &p, 2);
	sampler_prompt(&s, (const int32_t[]){ 0 }, 1);
	ck_assert_int_eq(sampler_sample(&s, ab), 1);
	sampler_free(&s);

	/* before presence: 4 / 2 - 1 = 1 < 1.2 (after it, (4 - 1) / 2 = 1.5 would win) */
	const float rp[2] = { 4.0f, 1.2f };
	p = params(0.0f, 4);
	p.repetition_penalty = 2.0f;
	p.presence_penalty = 1.0f;
	init_ok(&s, &p, 2);
	sampler_accept(&s, 0);
	ck_assert_int_eq(sampler_sample(&s, rp), 1);
	sampler_free(&s);

	/* at T = 1 the draw follows softmax of the penalised logits */
	p = params(1.0f, 5);
	p.repetition_penalty = 1.7f;
	init_ok(&s, &p, 8);
	sampler_prompt(&s, (const int32_t[]){ 6, 2, 7 }, 3);
	sampler_accept(&s, 4);
	float pen[8];
	for (int32_t i = 0; i < 8; i++) {
		bool seen = i == 6 || i == 2 || i == 7 || i == 4;
		pen[i] = !seen ? small_logits[i] : small_logits[i] > 0 ? small_logits[i] / 1.7f : small_logits[i] * 1.7f;
	}
	double want[8];
	softmax_ref(want, pen, 8, 1.0);
	check_distribution(&s, small_logits, want, 8, 100000, 0.01, "repetition penalty at T=1");
	sampler_free(&s);

	/* 1 and 0 are off: the same draws as without, bit for bit, prompt or not */
	rng_state = 11;
	float row[300];
	for (int32_t i = 0; i < 300; i++)
		row[i] = rng_range(-4, 4);
	for (int k = 0; k < 2; k++) {
		sampler a, b;
		sampler_params pa = params(0.9f, 6), pb = pa;
		pb.repetition_penalty = k ? 1.0f : 0.0f;
		pa.top_k = pb.top_k = 40;
		init_ok(&a, &pa, 300);
		init_ok(&b, &pb, 300);
		ck_assert_ptr_null(b.seen);
		sampler_prompt(&b, (const int32_t[]){ 1, 2, 3 }, 3);
		for (int d = 0; d < 200; d++) {
			int32_t x = sampler_sample(&a, row), y = sampler_sample(&b, row);
			CHECK(x == y, "repetition_penalty %d changed draw %d: %d against %d", k, d, y, x);
			sampler_accept(&a, x);
			sampler_accept(&b, y);
		}
		sampler_free(&a);
		sampler_free(&b);
	}
}
END_TEST

/* min_tokens: until that many tokens are accepted the stop ids are never drawn (greedy and sampled), then they are
 * ordinary again; with only stop ids in the vocabulary nothing can be drawn (-1). */
START_TEST(test_min_tokens)
{
	sampler s;
	sampler_params p = params(0.0f, 7);
	const int32_t stops[] = { 6, 2 };   /* the two largest logits of small_logits */
	p.min_tokens = 3;
	p.min_tokens_ids = stops;
	p.n_min_tokens_ids = 2;
	init_ok(&s, &p, 8);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(sampler_greedy_cols(&s), 0);
		int32_t t = sampler_sample(&s, small_logits);
		ck_assert_int_eq(t, 5);   /* 1.5: the largest of the rest */
		sampler_accept(&s, t);
	}
	ck_assert_int_eq(sampler_greedy_cols(&s), 8);   /* the ban is over: the batched argmax may take it again */
	ck_assert_int_eq(sampler_sample(&s, small_logits), 6);
	sampler_free(&s);

	/* at T = 1: softmax over the others while it holds */
	p = params(1.0f, 8);
	p.min_tokens = 1000000;
	p.min_tokens_ids = stops;
	p.n_min_tokens_ids = 2;
	p.top_p = 0.9f;   /* the sorted path too */
	init_ok(&s, &p, 8);
	float rest[8];
	memcpy(rest, small_logits, sizeof rest);
	rest[6] = rest[2] = -INFINITY;
	for (int k = 0; k < 20000; k++) {
		int32_t t = sampler_sample(&s, small_logits);
		CHECK(t != 6 && t != 2, "draw %d: stop id %d before min_tokens", k, t);
	}
	sampler_free(&s);
	p.top_p = 1.0f;
	init_ok(&s, &p, 8);
	double want[8];
	softmax_ref(want, rest, 8, 1.0);
	check_distribution(&s, small_logits, want, 8, 100000, 0.01, "min_tokens at T=1");
	sampler_free(&s);

	/* nothing but stop ids: nothing to draw, greedy or not */
	const float one[2] = { 0.0f, 1.0f };
	for (int t = 0; t < 2; t++) {
		p = params((float)t, 9);
		p.min_tokens = 1;
		p.min_tokens_ids = (const int32_t[]){ 1, 0 };
		p.n_min_tokens_ids = 2;
		init_ok(&s, &p, 2);
		ck_assert_int_eq(sampler_sample(&s, one), -1);
		sampler_free(&s);
	}
	/* ids the list holds out of range are dropped; a check refuses them */
	p = params(0.0f, 10);
	const int32_t odd[] = { 8, -1, 6 };
	p.min_tokens = 1;
	p.min_tokens_ids = odd;
	p.n_min_tokens_ids = 3;
	char err[256];
	ck_assert_int_eq(sampler_params_check(&p, 8, err, sizeof err), -1);
	ck_assert_ptr_nonnull(strstr(err, "out of range"));
	init_ok(&s, &p, 8);
	ck_assert_int_eq(s.p.n_min_tokens_ids, 1);
	ck_assert_int_eq(sampler_sample(&s, small_logits), 2);
	sampler_free(&s);
}
END_TEST

/* A mask: only allowed ids are drawn, greedy included; a mask that allows nothing gives -1 and leaves the generator as
 * it was; a full mask changes nothing. */
START_TEST(test_mask)
{
	uint32_t mask[(300 + 31) / 32];
	sampler s;
	sampler_params p = params(0.0f, 12);
	init_ok(&s, &p, 8);
	mask_of(mask, 8, (const int32_t[]){ 0, 3, 4 }, 3);
	ck_assert_int_eq(sampler_sample_masked(&s, small_logits, mask), 3);   /* 0.5 */
	mask_of(mask, 8, NULL, 0);
	ck_assert_int_eq(sampler_sample_masked(&s, small_logits, mask), -1);
	sampler_free(&s);

	/* sampled, with every filter: never outside the mask; the distribution is softmax over the allowed */
	rng_state = 13;
	float row[300];
	for (int32_t i = 0; i < 300; i++)
		row[i] = rng_range(-3, 3);
	int32_t allowed_ids[40];
	for (int32_t i = 0; i < 40; i++)
		allowed_ids[i] = 7 * i + 3;
	mask_of(mask, 300, allowed_ids, 40);
	for (int filt = 0; filt < 4; filt++) {
		p = params(1.0f, 14 + (uint64_t)filt);
		p.top_k = filt == 1 ? 100 : 0;   /* more than the mask allows */
		p.top_p = filt == 2 ? 0.95f : 1.0f;
		p.min_p = filt == 3 ? 0.01f : 0.0f;
		init_ok(&s, &p, 300);
		for (int k = 0; k < 5000; k++) {
			int32_t t = sampler_sample_masked(&s, row, mask);
			CHECK(t >= 0 && t < 300 && t % 7 == 3 && t / 7 < 40, "filter %d drew %d outside the mask", filt, t);
		}
		sampler_free(&s);
	}
	float only[8];
	for (int32_t i = 0; i < 8; i++)
		only[i] = i == 1 || i == 4 || i == 5 ? small_logits[i] : -INFINITY;
	double want[8];
	softmax_ref(want, only, 8, 1.0);
	mask_of(mask, 8, (const int32_t[]){ 1, 4, 5 }, 3);
	p = params(1.0f, 20);
	init_ok(&s, &p, 8);
	int64_t *count = calloc(8, sizeof *count);
	for (int k = 0; k < 100000; k++)
		count[sampler_sample_masked(&s, small_logits, mask)]++;
	for (int32_t i = 0; i < 8; i++)
		CHECK(fabs((double)count[i] / 100000 - want[i]) < 0.01, "masked T=1: token %d frequency %.4f, want %.4f", i,
		      (double)count[i] / 100000, want[i]);
	free(count);
	sampler_free(&s);

	/* an empty mask draws nothing from the generator; a full one is no mask */
	sampler a, b;
	p = params(0.8f, 21);
	init_ok(&a, &p, 300);
	init_ok(&b, &p, 300);
	uint32_t none[(300 + 31) / 32] = { 0 }, all[(300 + 31) / 32];
	memset(all, 0xff, sizeof all);
	for (int k = 0; k < 50; k++) {
		ck_assert_int_eq(sampler_sample_masked(&b, row, none), -1);
		int32_t x = sampler_sample(&a, row), y = sampler_sample_masked(&b, row, all);
		CHECK(x == y, "draw %d: %d with a full mask, %d without", k, y, x);
	}
	sampler_free(&a);
	sampler_free(&b);
}
END_TEST

/* Every adjustment at once gives the same tokens for the same seed, every time; the caller's row is never written. */
START_TEST(test_adjust_deterministic)
{
	rng_state = 22;
	float row[500], copy[500];
	for (int32_t i = 0; i < 500; i++)
		row[i] = rng_range(-5, 5);
	memcpy(copy, row, sizeof row);
	const sampler_bias bias[] = { { 10, 4.0f }, { 20, -100.0f }, { 499, 1.5f } };
	const int32_t stops[] = { 3, 30 };
	uint32_t mask[(500 + 31) / 32];
	memset(mask, 0xff, sizeof mask);
	mask[0] &= ~0x10u;   /* id 4 */
	int32_t seq[2][64];
	for (int run = 0; run < 2; run++) {
		sampler_params p = params(0.7f, 23);
		p.top_k = 50;
		p.top_p = 0.9f;
		p.presence_penalty = 0.3f;
		p.repetition_penalty = 1.2f;
		p.bias = bias;
		p.n_bias = 3;
		p.min_tokens = 10;
		p.min_tokens_ids = stops;
		p.n_min_tokens_ids = 2;
		char err[128];
		ck_assert_int_eq(sampler_params_check(&p, 500, err, sizeof err), 0);
		sampler s;
		init_ok(&s, &p, 500);
		sampler_prompt(&s, (const int32_t[]){ 10, 11, 12 }, 3);
		for (int k = 0; k < 64; k++) {
			seq[run][k] = sampler_sample_masked(&s, row, mask);
			CHECK(seq[run][k] != 4 && seq[run][k] != 20, "an excluded id %d", seq[run][k]);
			CHECK(k >= 10 || (seq[run][k] != 3 && seq[run][k] != 30), "a stop id before min_tokens");
			sampler_accept(&s, seq[run][k]);
		}
		sampler_free(&s);
	}
	ck_assert_mem_eq(seq[0], seq[1], sizeof seq[0]);
	ck_assert_mem_eq(row, copy, sizeof row);
	/* the check refuses what the scheduler must not pass on */
	char err[128];
	sampler_params q = params(0, 1);
	q.n_bias = SAMPLER_MAX_BIAS + 1;
	q.bias = bias;
	ck_assert_int_eq(sampler_params_check(&q, 500, err, sizeof err), -1);
	q = params(0, 1);
	q.bias = (const sampler_bias[]){ { 500, 1.0f } };
	q.n_bias = 1;
	ck_assert_int_eq(sampler_params_check(&q, 500, err, sizeof err), -1);
	q.bias = (const sampler_bias[]){ { 5, NAN } };
	ck_assert_int_eq(sampler_params_check(&q, 500, err, sizeof err), -1);
	q = params(0, 1);
	q.repetition_penalty = -1;
	ck_assert_int_eq(sampler_params_check(&q, 500, err, sizeof err), -1);
	q = params(0, 1);
	q.min_tokens = -1;
	ck_assert_int_eq(sampler_params_check(&q, 500, err, sizeof err), -1);
}
END_TEST

/* ---- the draw from a row's candidates ---- */

/* The candidate path with the adjustments: logit_bias and the repetition penalty always read the row; a mask or
 * min_tokens' ban decide a greedy draw (the first allowed candidate) and leave a sampled one to the row; and whatever
 * decided, every draw equals the full row's. */
START_TEST(test_top_candidates_adjusted)
{
	aah_backend_params bp = { .n_threads = 1 };
	aah_backend *cpu = aah_backend_cpu_init(&bp);
	float *l = malloc(TOP_V * sizeof *l), top_l[64];
	int32_t top_ids[64];
	uint32_t mask[(TOP_V + 31) / 32];
	/* c: bias; repetition; ban greedy; ban sampled; mask greedy; mask sampled; ban and mask greedy; mask sampled
	 * without top-k */
	for (int kind = 0; kind < 6; kind++)
		for (int c = 0; c < 8; c++) {
			rng_state = 4000 + (uint64_t)kind * 8 + (uint64_t)c;
			top_row(l, kind);
			sampler_params sp = params(c == 3 || c == 5 || c == 7 ? 0.8f : 0.0f, 90 + (uint64_t)c);
			sp.top_k = c == 7 ? 0 : 20;
			const float T = sp.temperature > 0 ? sp.temperature : 1.0f;
			aah_logits_stats st;
			cpu->iface.logits_top(cpu, &st, top_ids, top_l, l, TOP_V, 1, TOP_V, &T, 64);
			sampler_top t = { st.max, st.sum, top_ids, top_l, 64, TOP_V };
			/* the best candidate held back (banned, or out of the mask), and the second too in the last case */
			const int32_t held[2] = { top_ids[0], top_ids[1] };
			const sampler_bias b[] = { { top_ids[40], 30.0f } };
			if (c == 0) {
				sp.bias = b;
				sp.n_bias = 1;
			} else if (c == 1) {
				sp.repetition_penalty = 1.5f;
			} else if (c == 2 || c == 3 || c == 6) {
				sp.min_tokens = 5;
				sp.min_tokens_ids = held;
				sp.n_min_tokens_ids = c == 6 ? 2 : 1;
			}
			const bool masked = c >= 4;
			memset(mask, 0xff, sizeof mask);
			if (masked)
				mask[held[c == 6 ? 1 : 0] >> 5] &= ~(1u << (held[c == 6 ? 1 : 0] & 31));
			sampler a, bb;
			ck_assert_int_eq(sampler_init(&a, &sp, TOP_V), 0);
			ck_assert_int_eq(sampler_init(&bb, &sp, TOP_V), 0);
			sampler_prompt(&a, top_ids, 3);
			sampler_prompt(&bb, top_ids, 3);
			for (int d = 0; d < 8; d++) {
				int32_t got = sampler_sample_top_masked(&bb, &t, masked ? mask : NULL);
				const bool decided = got >= 0;
				if (c <= 1)
					CHECK(!decided, "case %d: candidates decided a draw they cannot replay", c);
				if ((c == 2 || c == 4 || c == 6) && d < 5 && kind != 3 && kind != 4)
					CHECK(decided, "case %d kind %d draw %d: a greedy draw with exclusions was not decided", c, kind, d);
				if ((c == 3 && d < 5) || c == 5 || c == 7)
					CHECK(!decided, "case %d draw %d: a sampled draw with exclusions was decided", c, d);
				if (!decided)
					got = sampler_sample_masked(&bb, l, masked ? mask : NULL);
				int32_t want = sampler_sample_masked(&a, l, masked ? mask : NULL);
				CHECK(got == want, "case %d kind %d draw %d: %d, the full row %d", c, kind, d, got, want);
				if (d < 5 && (c == 2 || c == 4 || c == 6) && !masked)
					CHECK(want != held[0], "case %d: a held id drawn", c);
				sampler_accept(&a, want);
				sampler_accept(&bb, got);
			}
			sampler_free(&a);
			sampler_free(&bb);
		}
	free(l);
	cpu->iface.free(cpu);
}
END_TEST

static Suite *sampler_adjust_suite(void)
{
	Suite *s = suite_create("sampler_adjust");
	TCase *tc = tcase_create("adjustments");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_logit_bias);
	tcase_add_test(tc, test_repetition_penalty);
	tcase_add_test(tc, test_min_tokens);
	tcase_add_test(tc, test_mask);
	tcase_add_test(tc, test_adjust_deterministic);
	tcase_add_test(tc, test_top_candidates_adjusted);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sampler_adjust_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
