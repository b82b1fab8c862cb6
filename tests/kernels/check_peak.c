/* tests/kernels/check_peak.c — the dot-product peak loops (kernels/cpu/cpu_peak.h) and the backend's answer to which
 * instruction a product takes (aah_backend_cpu_product, kernels/backend.h), which aah-bench holds prefill against.
 *
 * Each loop this CPU can run must do exactly the multiply-adds it claims: its accumulators, summed, equal
 * v · iters · cpu_peak_macs_per_iter for several iteration counts, so a loop the compiler shortened, dropped or folded
 * fails; its measured rate must be positive, finite and below what any core can do (a loop that did no work would
 * time as absurdly fast). On a CPU without a variant the test says so and checks only that it is refused. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_bf16dot.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_peak.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/quant.h"

/* the loop of product _i (1 … AAH_CPU_PRODUCT_COUNT − 1) does the count it claims */
START_TEST(test_loop_counts)
{
	const aah_cpu_product p = (aah_cpu_product)_i;
	const cpu_peak_fn fn = cpu_peak_loop(p);
	ck_assert_double_gt(cpu_peak_macs_per_iter(p), 0);
	ck_assert_str_ne(cpu_peak_name(p), "no peak loop");
	if (!fn) {
		printf("note: this CPU cannot run the %s loop; skipped\n", cpu_peak_name(p));
		return;
	}
	/* f32 lanes stay exact below 2^24: at most 2·1001·64 (AMX-BF16, 32 products a lane a pass, v ≤ 2) */
	const struct {
		int64_t iters;
		int32_t v;
	} runs[] = { { 0, 5 }, { 1, 1 }, { 7, 3 }, { 1000, 1 }, { 1001, 2 } };
	for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
		const double want = cpu_peak_macs_per_iter(p) * (double)runs[r].iters * runs[r].v, got = fn(runs[r].iters, runs[r].v);
		ck_assert_msg(got == want, "%s: %lld passes of v = %d summed to %.17g, want %.17g", cpu_peak_name(p),
		              (long long)runs[r].iters, runs[r].v, got, want);
	}
}
END_TEST

/* every loop timed on 2 threads at once: a positive, finite rate, below 2^46 ≈ 7e13 ops/s a thread (AMX-INT8 at 2048
 * ops a cycle and 6 GHz is 1.2e13) */
START_TEST(test_measure)
{
	threadpool *tp = threadpool_init(2);
	ck_assert_ptr_nonnull(tp);
	int ran = 0;
	for (int32_t i = 1; i < AAH_CPU_PRODUCT_COUNT; i++) {
		const aah_cpu_product p = (aah_cpu_product)i;
		const double r = cpu_peak_measure(p, tp);
		if (!cpu_peak_loop(p)) {
			ck_assert_double_eq(r, 0);
			continue;
		}
		printf("%s: %.3g %s on 2 threads\n", cpu_peak_name(p), r, cpu_peak_unit(p));
		ck_assert_msg(isfinite(r) && r > 0 && r < 2 * 0x1p46, "%s: %g ops/s", cpu_peak_name(p), r);
		ran++;
	}
	threadpool_free(tp);
#if defined(__x86_64__)
	ck_assert_int_gt(ran, 0);   /* every x86-64 this project runs on has AVX2 at least */
#endif
	ck_assert_ptr_null(cpu_peak_loop(AAH_CPU_PRODUCT_OTHER));
	ck_assert_double_eq(cpu_peak_measure(AAH_CPU_PRODUCT_OTHER, NULL), 0);
	ck_assert_str_eq(cpu_peak_name(AAH_CPU_PRODUCT_OTHER), "no peak loop");
}
END_TEST

/* After an AMX peak loop loaded its own tile configuration on this thread, the backend's AMX product on this thread
 * still gives the VNNI kernel's bits: cpu_amx_tiles_full goes through cpu_amx.c's per-thread record, so the kernel
 * loads its configuration again (a stale record would multiply with the wrong tile shapes). */
START_TEST(test_amx_config_restored)
{
	if (!cpu_peak_loop(AAH_CPU_PRODUCT_AMX_INT8) || !cpu_kernels_by_name("avx512")) {
		printf("note: no AMX-INT8 here; skipped\n");
		return;
	}
	enum { N = 16, K = 256, M = 32 };
	float *w = malloc(sizeof(float) * M * K), *x = malloc(sizeof(float) * N * K), *ref = malloc(sizeof(float) * N * M),
	      *out = malloc(sizeof(float) * N * M);
	uint8_t *q = malloc(aah_dtype_row_bytes(AAH_DTYPE_Q8_0, K) * M);
	for (int i = 0; i < M * K; i++)
		w[i] = (float)((i * 37 % 101) - 50) / 50.0f;
	for (int i = 0; i < N * K; i++)
		x[i] = (float)((i * 53 % 97) - 48) / 40.0f;
	for (int r = 0; r < M; r++)
		aah_quantize_row_ref(AAH_DTYPE_Q8_0, q + aah_dtype_row_bytes(AAH_DTYPE_Q8_0, K) * r, w + r * K, K);
	aah_backend_params bp = { .n_threads = 1 };   /* one thread: the products run on this one, beside the peak loop */
	setenv("AAH_AMX", "0", 1);
	aah_backend *vnni = aah_backend_cpu_init(&bp);
	unsetenv("AAH_AMX");
	aah_backend *amx = aah_backend_cpu_init(&bp);
	ck_assert_int_eq(aah_backend_cpu_product(amx, AAH_DTYPE_Q8_0, K, N), AAH_CPU_PRODUCT_AMX_INT8);
	aah_tensor tv, ta;
	ck_assert_int_eq(vnni->iface.weight_import(vnni, &tv, q, AAH_DTYPE_Q8_0, M, K), 0);
	ck_assert_int_eq(amx->iface.weight_import(amx, &ta, q, AAH_DTYPE_Q8_0, M, K), 0);
	vnni->iface.matmul(vnni, ref, x, N, &tv);
	amx->iface.matmul(amx, out, x, N, &ta);   /* the kernel's configuration loaded and recorded */
	ck_assert_double_eq(cpu_peak_amx_int8(3, 1), cpu_peak_macs_per_iter(AAH_CPU_PRODUCT_AMX_INT8) * 3);
	amx->iface.matmul(amx, out, x, N, &ta);   /* must load it again */
	for (int i = 0; i < N * M; i++)
		ck_assert_msg(out[i] == ref[i], "element %d: %g after the peak loop, %g on vpdpbusd", i, out[i], ref[i]);
	vnni->iface.weight_release(vnni, &tv);
	amx->iface.weight_release(amx, &ta);
	vnni->iface.free(vnni);
	amx->iface.free(amx);
	free(w);
	free(x);
	free(ref);
	free(out);
	free(q);
}
END_TEST

/* A backend made with these environment settings (NULL: unset). */
static aah_backend *backend_with(const char *isa, const char *amx, const char *bf16)
{
	const char *names[3] = { "AAH_CPU_ISA", "AAH_AMX", "AAH_CPU_BF16" }, *vals[3] = { isa, amx, bf16 };
	for (int i = 0; i < 3; i++)
		if (vals[i])
			setenv(names[i], vals[i], 1);
	aah_backend_params bp = { .n_threads = 1 };
	aah_backend *b = aah_backend_cpu_init(&bp);
	for (int i = 0; i < 3; i++)
		unsetenv(names[i]);
	ck_assert_ptr_nonnull(b);
	return b;
}

/* aah_backend_cpu_product follows the backend's choices: the table's width for f32 products, vdpbf16ps or AMX-BF16 as
 * AAH_CPU_BF16 asks, AMX-INT8 for q8_0/q4_0 from CPU_AMX_MIN_ROWS rows, q4_k/q5_k from CPU_AMX_PREP_MIN_ROWS and q6_k
 * from CPU_AMX_Q6_MIN_ROWS */
START_TEST(test_product_paths)
{
	const bool avx512 = cpu_kernels_by_name("avx512") != NULL, vnni = avx512 && cpu_peak_loop(AAH_CPU_PRODUCT_DPBUSD_ZMM),
	           amx = vnni && cpu_amx_available(), bf16 = avx512 && cpu_bf16dot_available();
	aah_backend *b = backend_with("generic", NULL, NULL);
	ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_BF16, 64, 512), AAH_CPU_PRODUCT_OTHER);
	b->iface.free(b);
	if (cpu_kernels_by_name("avx2")) {
		b = backend_with("avx2", NULL, "bf16");   /* vdpbf16ps only beside the AVX-512 table */
		ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_BF16, 64, 512), AAH_CPU_PRODUCT_FMA_YMM);
		ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_F32, 64, 512), AAH_CPU_PRODUCT_FMA_YMM);
		b->iface.free(b);
	}
	if (!avx512) {
		printf("note: no AVX-512 here; the AVX-512 paths are not checked\n");
		return;
	}
	b = backend_with("avx512", NULL, "f32");
	ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_BF16, 64, 512), AAH_CPU_PRODUCT_FMA_ZMM);
	ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_Q8_0, 64, 512),
	                 amx ? AAH_CPU_PRODUCT_AMX_INT8 : vnni ? AAH_CPU_PRODUCT_DPBUSD_ZMM : AAH_CPU_PRODUCT_OTHER);
	if (vnni) {
		ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_Q8_0, 64, CPU_AMX_MIN_ROWS - 1), AAH_CPU_PRODUCT_DPBUSD_ZMM);
		ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_Q4_K, 256, 512),
		                 amx ? AAH_CPU_PRODUCT_AMX_INT8 : AAH_CPU_PRODUCT_DPBUSD_ZMM);
		/* the K types' tiles from CPU_AMX_PREP_MIN_ROWS rows, Q6_K's from CPU_AMX_Q6_MIN_ROWS */
		ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_Q4_K, 256, CPU_AMX_PREP_MIN_ROWS - 1),
		                 AAH_CPU_PRODUCT_DPBUSD_ZMM);
		ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_Q5_K, 256, CPU_AMX_PREP_MIN_ROWS),
		                 amx ? AAH_CPU_PRODUCT_AMX_INT8 : AAH_CPU_PRODUCT_DPBUSD_ZMM);
		ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_Q6_K, 256, CPU_AMX_Q6_MIN_ROWS - 1),
		                 AAH_CPU_PRODUCT_DPBUSD_ZMM);
		ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_Q6_K, 256, CPU_AMX_Q6_MIN_ROWS),
		                 amx ? AAH_CPU_PRODUCT_AMX_INT8 : AAH_CPU_PRODUCT_DPBUSD_ZMM);
	}
	b->iface.free(b);
	b = backend_with("avx512", "0", "bf16");
	ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_BF16, 64, 512),
	                 bf16 ? AAH_CPU_PRODUCT_DPBF16_ZMM : AAH_CPU_PRODUCT_FMA_ZMM);
	if (vnni)
		ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_Q8_0, 64, 512), AAH_CPU_PRODUCT_DPBUSD_ZMM);
	b->iface.free(b);
	if (amx) {
		b = backend_with("avx512", "all", "amx");
		ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_Q6_K, 256, 512), AAH_CPU_PRODUCT_AMX_INT8);
		if (cpu_amx_bf16_available()) {
			ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_BF16, 64, 512), AAH_CPU_PRODUCT_AMX_BF16);
			/* K not a multiple of 32: vdpbf16ps through the same branch */
			ck_assert_int_eq(aah_backend_cpu_product(b, AAH_DTYPE_BF16, 48, 512), AAH_CPU_PRODUCT_DPBF16_ZMM);
		}
		b->iface.free(b);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("peak");
	TCase *tc = tcase_create("peak_loops");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_loop_counts, 1, AAH_CPU_PRODUCT_COUNT);
	tcase_add_test(tc, test_measure);
	tcase_add_test(tc, test_amx_config_restored);
	tcase_add_test(tc, test_product_paths);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	const int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
