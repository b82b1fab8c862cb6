/* tests/engine/check_aah_tally.c — Check suite for engine/aah_tally: sequences' AAH figures added up — windows merged in
 * ascending order, ACR weighted by branch usage (equal to the ACR of all the selections together), the plain mean
 * where nothing has usage, ratios of 1 where nothing was counted. */
#include <check.h>
#include <math.h>

#include "engine/aah_tally.h"

/* A sequence's stats from its usage per window, at T = 4096 (acr = Σ W·u / (T·Σ u)). */
static engine_seq_stats seq(const int32_t *w, const double *u, int32_t n, uint64_t prod, uint64_t prod_full)
{
	engine_seq_stats st = { .context_length = 4096, .attn_products = prod, .attn_products_full = prod_full,
		                .kv_bytes_peak = (int64_t)prod, .kv_bytes_full_peak = (int64_t)prod_full, .n_usage = n };
	double wsum = 0;
	for (int32_t i = 0; i < n; i++) {
		st.usage_window[i] = w[i];
		st.usage[i] = u[i];
		st.branch_usage_total += u[i];
		wsum += w[i] * u[i];
	}
	st.branch_usage_weighted = wsum;
	st.acr = st.branch_usage_total > 0 ? wsum / (4096.0 * st.branch_usage_total) : 1.0;
	return st;
}

START_TEST(test_add)
{
	aah_tally t = { 0 };
	ck_assert_double_eq(aah_tally_acr(&t), 1.0);
	ck_assert_double_eq(aah_tally_work_ratio(&t), 1.0);
	ck_assert_double_eq(aah_tally_kv_ratio(&t), 1.0);
	const int32_t wa[] = { 4096, 512 }, wb[] = { 1024, 512, 2048 };
	const double ua[] = { 10, 30 }, ub[] = { 5, 5, 50 };
	engine_seq_stats a = seq(wa, ua, 2, 100, 400), b = seq(wb, ub, 3, 300, 400);
	aah_tally_add(&t, &a);
	aah_tally_add(&t, &b);
	ck_assert_uint_eq(t.sequences, 2);
	ck_assert_int_eq(t.n_windows, 4);
	const int32_t want_w[] = { 512, 1024, 2048, 4096 };
	const double want_u[] = { 35, 5, 50, 10 };
	for (int32_t k = 0; k < 4; k++) {
		ck_assert_int_eq(t.windows[k], want_w[k]);
		ck_assert_double_eq(t.window_usage[k], want_u[k]);
	}
	double all = (512 * 35.0 + 1024 * 5.0 + 2048 * 50.0 + 4096 * 10.0) / (4096.0 * 100);
	ck_assert_double_eq_tol(aah_tally_acr(&t), all, 1e-12);
	ck_assert_double_eq_tol(aah_tally_usage_weighted(&t), all * 4096 * 100, 1e-6);
	ck_assert_double_eq(aah_tally_work_ratio(&t), 0.5);
	ck_assert_double_eq(aah_tally_kv_ratio(&t), 0.5);
}
END_TEST

/* Windows listed ahead (a regime's, at 0) keep their place; a full table drops new ones rather than overflow. */
START_TEST(test_windows)
{
	aah_tally t = { 0 };
	ck_assert_int_eq(aah_tally_window(&t, 2048), 0);
	ck_assert_int_eq(aah_tally_window(&t, 512), 0);
	ck_assert_int_eq(aah_tally_window(&t, 2048), 1);
	for (int32_t w = 1; t.n_windows < AAH_TALLY_MAX_WINDOWS; w++)
		aah_tally_window(&t, 10000 + w);
	ck_assert_int_eq(aah_tally_window(&t, 7), -1);
	ck_assert_int_eq(aah_tally_window(&t, 512), 0);
	const int32_t w[] = { 7, 512 };
	const double u[] = { 3, 4 };
	engine_seq_stats st = seq(w, u, 2, 1, 1);
	aah_tally_add(&t, &st);
	ck_assert_double_eq(t.window_usage[0], 4);
	ck_assert_double_eq(t.usage_total, 7);
}
END_TEST

/* Sequences without usage (a one-token prompt run): ACR is their plain mean. */
START_TEST(test_no_usage)
{
	aah_tally t = { 0 };
	engine_seq_stats a = { .acr = 0.25 }, b = { .acr = 0.75 };
	aah_tally_add(&t, &a);
	aah_tally_add(&t, &b);
	ck_assert_double_eq(aah_tally_acr(&t), 0.5);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("aah_tally");
	TCase *tc = tcase_create("aah_tally");
	tcase_add_test(tc, test_add);
	tcase_add_test(tc, test_windows);
	tcase_add_test(tc, test_no_usage);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
