/* tests/kernels/check_amx_bf16.c — the x86 fast paths of the CPU backend that depend on the CPU: the AMX-INT8 products of packed
 * quantized weights (kernels/cpu/cpu_amx.h) and the bf16 products on vdpbf16ps (kernels/cpu/cpu_bf16dot.h).
 *
 * AMX: each kernel against a naive reference (dequantized weights times the dequantized activation quants, in double),
 * bit for bit against the portable dot and the AVX-512 VNNI kernel, and bit for bit the same for every activation row
 * count 1 … 16 and every place of a row among them; through the backend, every row of an n-row product (AMX from
 * cpu_amx_min_rows on) the same bits as the row alone (vpdpbusd) and as a backend with AAH_AMX=0.
 * BF16 dot (vdpbf16ps) and AMX-BF16 tiles: the activation rounding against cpu_f32_to_bf16, the products against a
 * naive reference of the rounded activations, and every row of an n-row product the same bits as the row alone.
 *
 * On a CPU without AMX-INT8 (or whose kernel refuses the tile state), or without AVX-512 BF16, the tests of that path
 * print why and pass without checking it: a CI run elsewhere checks only that the backend falls back (the other suites
 * then run the VNNI / AVX2 / f32 kernels they always ran). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_bf16dot.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_qpack.h"
#include "kernels/cpu/cpu_quant.h"
#include "kernels/quant.h"
#include "tests/kernels/kernels_test.h"

static const aah_dtype wtypes[5] = { AAH_DTYPE_Q8_0, AAH_DTYPE_Q4_0, AAH_DTYPE_Q4_K, AAH_DTYPE_Q5_K, AAH_DTYPE_Q6_K };

static bool amx_or_skip(const char *test)
{
	if (cpu_amx_available())
		return true;
	printf("note: %s skipped: no AMX-INT8 here (CPUID leaf 7 lacks AMX-TILE/AMX-INT8, or the kernel refused "
	       "ARCH_REQ_XCOMP_PERM for the tile data); the backend falls back to the VNNI/AVX2 kernels\n", test);
	return false;
}

static bool bf16dot_or_skip(const char *test)
{
	if (cpu_bf16dot_available())
		return true;
	printf("note: %s skipped: no AVX-512 BF16 here; bf16 weights run on the exact f32 path\n", test);
	return false;
}

/* Random blocks of type t, n values: every byte random, then the scales set to random halves ±[2^-12, 2^-4) (never
 * subnormal, NaN or infinite). malloc'd; the caller frees. */
static uint8_t *rand_blocks(aah_dtype t, int64_t n)
{
	const size_t bytes = aah_dtype_row_bytes(t, n);
	uint8_t *p = malloc(bytes);
	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < bytes; i++)
		p[i] = (uint8_t)rng_u64();
	for (int64_t b = 0; b < n / aah_dtype_block_len(t); b++) {
		uint8_t *blk = p + (size_t)b * aah_dtype_block_bytes(t);
		aah_half h[2];
		for (int i = 0; i < 2; i++) {
			float m = ldexpf(1.0f + 0.5f * (rng_f() + 1.0f), -12 + (int)(rng_u64() % 8));
			if ((t == AAH_DTYPE_Q8_0 || t == AAH_DTYPE_Q4_0 || t == AAH_DTYPE_Q6_K) && (rng_u64() & 1))
				m = -m;
			h[i] = aah_float_to_half(m);
		}
		switch (t) {
		case AAH_DTYPE_Q8_0: ((aah_block_q8_0 *)(void *)blk)->d = h[0]; break;
		case AAH_DTYPE_Q4_0: ((aah_block_q4_0 *)(void *)blk)->d = h[0]; break;
		case AAH_DTYPE_Q4_K: ((aah_block_q4_K *)(void *)blk)->d = h[0]; ((aah_block_q4_K *)(void *)blk)->dmin = h[1]; break;
		case AAH_DTYPE_Q5_K: ((aah_block_q5_K *)(void *)blk)->d = h[0]; ((aah_block_q5_K *)(void *)blk)->dmin = h[1]; break;
		case AAH_DTYPE_Q6_K: ((aah_block_q6_K *)(void *)blk)->d = h[0]; break;
		default: break;
		}
	}
	return p;
}

/* ---- AMX kernels ---- */

#define NC CPU_AMX_CALL_COLS   /* activation rows: the most one call takes, two tiles' */

/* nr rows of blocks w packed into a group, times NC activation rows x: the AMX kernel alone per row against the naive
 * reference, the portable dot's bits and the VNNI kernel's bits; then in calls of every row count n and start c0 the
 * same bits as alone. */
static void amx_check(aah_dtype t, const uint8_t *w, int nr, const float *x, int64_t K, const char *what)
{
	const cpu_amx_fn amx = cpu_amx_kernel(t);
	const cpu_qpack_fn vnni = cpu_qpack_kernel_avx512(t);
	ck_assert_ptr_nonnull(amx);
	ck_assert_ptr_nonnull(vnni);
	const aah_dtype at = cpu_quant_act_type(t);
	const size_t rb = aah_dtype_row_bytes(t, K), as = cpu_qpack_act_row_bytes(t, K), qs = aah_dtype_row_bytes(at, K);
	const int64_t nb = K / aah_dtype_block_len(t);
	uint8_t *g = aligned_alloc(64, (cpu_qpack_group_bytes(t, K) + 63) & ~(size_t)63), *xa = malloc(NC * as),
	        *xq = malloc(NC * qs);
	float *wd = malloc((size_t)K * sizeof(float)), *ad = malloc((size_t)K * sizeof(float));
	/* the tiles' layout of the quants: for each row c alone (slot 0), and for every run of rows from c0 (chunk
	 * (c - c0) / 16, slot (c - c0) % 16) */
	const size_t aqc = (size_t)nb * cpu_amx_act_block_bytes(t);
	uint8_t *aq1 = aligned_alloc(64, NC * aqc), *aqn = aligned_alloc(64, NC * aqc);
	cpu_qpack_group(t, g, w, rb, nr, K);
	/* the weights made ready for the tiles (the K types), once for every call below */
	const cpu_amx_prep_fn prep = cpu_amx_prep(t);
	uint8_t *pb = aligned_alloc(64, (size_t)nb * (cpu_amx_prep_bytes(t) ? cpu_amx_prep_bytes(t) : 64));
	if (prep)
		prep(pb, nb, 1, 0, g, 256);
	for (int c = 0; c < NC; c++) {
		cpu_qpack_quantize_act(t, xa + c * as, x + c * K, K);
		cpu_quantize_act(at, xq + c * qs, x + c * K, K);
		cpu_amx_act_put(t, aq1 + c * aqc, 0, xa + c * as, nb);
	}
	static float alone[NC][CPU_QPACK_ROWS];
	for (int c = 0; c < NC; c++) {
		float o[CPU_QPACK_ROWS + 1], v[CPU_QPACK_ROWS + 1];
		for (int r = 0; r <= CPU_QPACK_ROWS; r++)
			o[r] = v[r] = SENTINEL;
		amx(nb, 1, nr, 1, 0, o, 0, g, xa + c * as, as, aq1 + c * aqc, pb, c % 2 ? 512 : 0);
		vnni(nb, 1, nr, v, 0, g, xa + c * as, as, 0);
		for (int r = nr; r <= CPU_QPACK_ROWS; r++)
			CHECK(o[r] == SENTINEL, "%s %s: wrote row %d of %d", what, aah_dtype_name(t), r, nr);
		aah_dequantize_row(at, ad, xq + c * qs, K);
		for (int r = 0; r < nr; r++) {
			alone[c][r] = o[r];
			aah_dequantize_row(t, wd, w + (size_t)r * rb, K);
			double s = 0, mag = 0;
			for (int64_t k = 0; k < K; k++) {
				s += (double)wd[k] * ad[k];
				mag += fabs((double)wd[k] * ad[k]);
			}
			/* the kernels' float steps: a rounded product of scales, a rounded product and a rounded sum per block,
			 * against the weights' dequantization, itself rounded per value */
			const double tol = (double)(nb + 8) * ldexp(1.0, -22) * mag;
			CHECK(fabs(o[r] - s) <= tol + 1e-30, "%s %s K=%lld (%d, %d): AMX %.9g, naive %.9g (tolerance %.3g)", what,
			      aah_dtype_name(t), (long long)K, c, r, o[r], s, tol);
			float gen;
			cpu_qkernels_generic.dot[t](nb, 1, &gen, w + (size_t)r * rb, xq + c * qs, qs);
			CHECK(same_float(o[r], gen), "%s %s K=%lld (%d, %d): AMX %.9g, the portable dot %.9g", what,
			      aah_dtype_name(t), (long long)K, c, r, o[r], gen);
			CHECK(same_float(o[r], v[r]), "%s %s K=%lld (%d, %d): AMX %.9g, VNNI %.9g", what, aah_dtype_name(t),
			      (long long)K, c, r, o[r], v[r]);
		}
	}
	for (int n = 2; n <= NC; n++)
		for (int c0 = 0; c0 + n <= NC; c0 += n > 8 && n < 24 ? 1 : 3) {
			float out[NC * CPU_QPACK_ROWS];
			for (int c = 0; c < n; c++)
				cpu_amx_act_put(t, aqn + (size_t)(c / CPU_AMX_COLS) * aqc, c % CPU_AMX_COLS, xa + (c0 + c) * as, nb);
			amx(nb, n, nr, 1, 0, out, CPU_QPACK_ROWS, g, xa + c0 * as, as, aqn, pb, 0);
			for (int c = 0; c < n; c++)
				for (int r = 0; r < nr; r++)
					CHECK(same_float(out[c * CPU_QPACK_ROWS + r], alone[c0 + c][r]),
					      "%s %s: (%d, %d) among %d on tiles: %.9g, alone %.9g", what, aah_dtype_name(t), c0 + c, r, n,
					      out[c * CPU_QPACK_ROWS + r], alone[c0 + c][r]);
		}
	free(g);
	free(pb);
	free(xa);
	free(xq);
	free(aq1);
	free(aqn);
	free(wd);
	free(ad);
}

START_TEST(test_amx_kernels)
{
	if (!amx_or_skip("test_amx_kernels"))
		return;
	rng_seed(4242);
	const int64_t Ks[3] = { 256, 1536, 96 };   /* 96: three blocks of 32 (Q8_0, Q4_0 only) */
	for (int ti = 0; ti < 5; ti++)
		for (int ki = 0; ki < 3; ki++) {
			const aah_dtype t = wtypes[ti];
			const int64_t K = Ks[ki];
			if (K % aah_dtype_block_len(t))
				continue;
			const int nr = ki == 1 ? 16 : ki == 0 ? 11 : 5;
			uint8_t *w = rand_blocks(t, K * nr);
			float *x = rand_floats(NC * K, 1.0f);
			for (int64_t i = 0; i < NC * K; i += 7)
				x[i] *= 20.0f;
			amx_check(t, w, nr, x, K, "random");
			free(w);
			free(x);
		}
}
END_TEST

/* Every quant bit set, then clear, with the largest scales' bytes, against activations of ±127: the sums' extremes. */
START_TEST(test_amx_extremes)
{
	if (!amx_or_skip("test_amx_extremes"))
		return;
	const int64_t K = 512;
	float *x = malloc(NC * K * sizeof *x);
	for (int c = 0; c < NC; c++)
		for (int64_t k = 0; k < K; k++)
			x[c * K + k] = c % 2 ? 127.0f : (k % 2 ? 127.0f : -127.0f);
	for (int ti = 0; ti < 5; ti++) {
		const aah_dtype t = wtypes[ti];
		const size_t rb = aah_dtype_row_bytes(t, K);
		for (int pattern = 0; pattern < 2; pattern++) {
			uint8_t *w = malloc(CPU_QPACK_ROWS * rb);
			memset(w, pattern ? 0x00 : 0xff, CPU_QPACK_ROWS * rb);
			for (int64_t b = 0; b < CPU_QPACK_ROWS * K / aah_dtype_block_len(t); b++) {   /* finite scales of 1 */
				uint8_t *blk = w + b * aah_dtype_block_bytes(t);
				const aah_half one = aah_float_to_half(1.0f / 1024);
				switch (t) {
				case AAH_DTYPE_Q8_0: ((aah_block_q8_0 *)(void *)blk)->d = one; break;
				case AAH_DTYPE_Q4_0: ((aah_block_q4_0 *)(void *)blk)->d = one; break;
				case AAH_DTYPE_Q4_K: ((aah_block_q4_K *)(void *)blk)->d = one; ((aah_block_q4_K *)(void *)blk)->dmin = one; break;
				case AAH_DTYPE_Q5_K: ((aah_block_q5_K *)(void *)blk)->d = one; ((aah_block_q5_K *)(void *)blk)->dmin = one; break;
				case AAH_DTYPE_Q6_K: ((aah_block_q6_K *)(void *)blk)->d = one; break;
				default: break;
				}
			}
			amx_check(t, w, CPU_QPACK_ROWS, x, K, pattern ? "bits clear" : "bits set");
			free(w);
		}
	}
	free(x);
}
END_TEST

/* A CPU backend of the avx512 table and `threads` threads, AMX on for every packed type (AAH_AMX=all, the default's
 * other name) or off (AAH_AMX=0). */
static aah_backend *backend_amx(int threads, int amx)
{
	setenv("AAH_CPU_ISA", "avx512", 1);
	setenv("AAH_AMX", amx ? "all" : "0", 1);
	aah_backend_params p = { .n_threads = threads };
	aah_backend *b = aah_backend_cpu_init(&p);
	unsetenv("AAH_CPU_ISA");
	unsetenv("AAH_AMX");
	ck_assert_ptr_nonnull(b);
	return b;
}

/* Through the backend (the packed layout, the quantized activations, the walk over groups and threads): every row of
 * an n-row product the same bits as the row alone (one row: vpdpbusd) and as the AAH_AMX=0 backend's product. */
START_TEST(test_amx_matmul_batch_invariant)
{
	if (!amx_or_skip("test_amx_matmul_batch_invariant"))
		return;
	const aah_dtype t = wtypes[_i];
	rng_seed(7000 + (uint64_t)_i);
	const int64_t shapes[][2] = { { 37, 512 }, { 64, 1024 }, { 200, 256 } };
	const int32_t sizes[] = { 101, 45, 40, 33, 32, 31, 28, 17, 16, 15, 12, 11, 5, 4, 3, 2 };
	for (int threads = 1; threads <= 2; threads++) {
		aah_backend *on = backend_amx(threads, 1), *off = backend_amx(threads, 0);
		for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
			const int64_t M = shapes[si][0], K = shapes[si][1];
			if (K % aah_dtype_block_len(t))
				continue;
			uint8_t *w = rand_blocks(t, M * K);
			float *x = rand_floats(101 * K, 1.0f);
			float *batch = malloc((size_t)(101 * M) * sizeof(float)), *ref = malloc((size_t)(101 * M) * sizeof(float)),
			      *alone = malloc((size_t)M * sizeof(float));
			aah_tensor won, woff;
			ck_assert_int_eq(on->iface.weight_import(on, &won, w, t, M, K), 0);
			ck_assert_int_eq(off->iface.weight_import(off, &woff, w, t, M, K), 0);
			for (size_t zi = 0; zi < sizeof sizes / sizeof sizes[0]; zi++) {
				const int32_t n = sizes[zi];
				on->iface.matmul(on, batch, x, n, &won);
				off->iface.matmul(off, ref, x, n, &woff);
				for (int32_t i = 0; i < n; i++) {
					on->iface.matmul(on, alone, x + i * K, 1, &won);
					for (int64_t m = 0; m < M; m++) {
						CHECK(same_float(batch[i * M + m], alone[m]),
						      "%s M=%lld K=%lld %dt: row %d of %d (%lld) on tiles %.9g, alone %.9g", aah_dtype_name(t),
						      (long long)M, (long long)K, threads, i, n, (long long)m, batch[i * M + m], alone[m]);
						CHECK(same_float(batch[i * M + m], ref[i * M + m]),
						      "%s M=%lld K=%lld %dt: row %d of %d (%lld) %.9g, with AAH_AMX=0 %.9g", aah_dtype_name(t),
						      (long long)M, (long long)K, threads, i, n, (long long)m, batch[i * M + m], ref[i * M + m]);
					}
				}
			}
			on->iface.weight_release(on, &won);
			off->iface.weight_release(off, &woff);
			free(w);
			free(x);
			free(batch);
			free(ref);
			free(alone);
		}
		on->iface.free(on);
		off->iface.free(off);
	}
}
END_TEST

/* ---- BF16 dot ---- */

/* The pairs: each half cpu_f32_to_bf16 of its value (random, exact ties, NaN, ±inf, the largest floats, subnormals),
 * k-major for nr rows, the odd K's missing half 0. */
START_TEST(test_bf16dot_pairs)
{
	if (!bf16dot_or_skip("test_bf16dot_pairs"))
		return;
	rng_seed(31);
	const int64_t Ks[] = { 1, 2, 31, 32, 33, 64, 100, 1025 };
	for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
		for (int32_t nr = 1; nr <= CPU_BF16DOT_ROWS; nr += 5) {
			const int64_t K = Ks[ki], KP = (K + 1) / 2;
			float *x = rand_floats(nr * K, 4.0f);
			for (int64_t i = 0; i < nr * K; i++)
				switch (i % 11) {
				case 1: x[i] = u2f((f2u(x[i]) & 0xffff0000u) | 0x8000u); break;   /* a tie */
				case 3: x[i] = u2f((f2u(x[i]) & 0xfffe0000u) | 0x8000u); break;   /* a tie, even below */
				case 5: x[i] = i % 3 ? NAN : -INFINITY; break;
				case 7: x[i] = i % 2 ? 3.4e38f : -1e-40f; break;
				default: break;
				}
			uint32_t *p = malloc((size_t)(KP * nr + 1) * sizeof *p);
			p[KP * nr] = 0xdeadbeefu;
			cpu_bf16dot_pairs(p, x, nr, K);
			CHECK(p[KP * nr] == 0xdeadbeefu, "K=%lld nr=%d: wrote past the end", (long long)K, nr);
			for (int32_t i = 0; i < nr; i++)
				for (int64_t kp = 0; kp < KP; kp++) {
					const uint32_t lo = cpu_f32_to_bf16(x[i * K + 2 * kp]),
					               hi = 2 * kp + 1 < K ? cpu_f32_to_bf16(x[i * K + 2 * kp + 1]) : 0;
					CHECK(p[kp * nr + i] == (lo | hi << 16), "K=%lld nr=%d row %d pair %lld: 0x%08x, want 0x%08x",
					      (long long)K, nr, i, (long long)kp, p[kp * nr + i], lo | hi << 16);
				}
			free(p);
			free(x);
		}
}
END_TEST

/* A backend of the avx512 table with the bf16 products on vdpbf16ps (AAH_CPU_BF16=bf16) or exact (f32). */
static aah_backend *backend_bf16(int threads, const char *mode)
{
	setenv("AAH_CPU_ISA", "avx512", 1);
	setenv("AAH_CPU_BF16", mode, 1);
	aah_backend_params p = { .n_threads = threads };
	aah_backend *b = aah_backend_cpu_init(&p);
	unsetenv("AAH_CPU_ISA");
	unsetenv("AAH_CPU_BF16");
	ck_assert_ptr_nonnull(b);
	return b;
}

/* matmul with bf16 weights on vdpbf16ps (AAH_CPU_BF16=bf16) and on AMX-BF16 tiles (=amx, where the CPU has them;
 * vdpbf16ps where K is not a multiple of 32) against the naive reference of the bf16-rounded activations (in double),
 * and every row of an n-row product the same bits as the row alone; the exact path (=f32) against the f32
 * activations' reference. */
START_TEST(test_bf16dot_matmul)
{
	if (!bf16dot_or_skip("test_bf16dot_matmul"))
		return;
	rng_seed(77);
	const int64_t shapes[][2] = { { 37, 600 }, { 64, 1024 }, { 6, 101 }, { 1030, 300 }, { 70, 512 } };
	const int32_t sizes[] = { 101, 17, 16, 13, 5, 4, 1 };
	static const char *const modes[3] = { "bf16", "f32", "amx" };
	if (!cpu_amx_bf16_available())
		printf("note: no AMX-BF16 tiles here: AAH_CPU_BF16=amx runs vdpbf16ps, and is tested as such\n");
	for (int threads = 1; threads <= 2; threads++)
		for (int mode = 0; mode < 3; mode++) {
			const int exact = mode == 1;
			aah_backend *b = backend_bf16(threads, modes[mode]);
			for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
				const int64_t M = shapes[si][0], K = shapes[si][1];
				wmat w;
				wmat_init(&w, AAH_DTYPE_BF16, M, K, 1.0f);
				float *x = rand_floats(101 * K, 1.0f);
				float *batch = malloc((size_t)(101 * M) * sizeof(float)), *alone = malloc((size_t)M * sizeof(float));
				aah_tensor wt;
				ck_assert_int_eq(b->iface.weight_import(b, &wt, w.data, AAH_DTYPE_BF16, M, K), 0);
				b->iface.matmul(b, batch, x, 101, &wt);
				for (int32_t i = 0; i < 101; i++)
					for (int64_t m = 0; m < M; m++) {
						double s = 0, mag = 0;
						for (int64_t k = 0; k < K; k++) {
							const float xv = exact ? x[i * K + k] : cpu_bf16_to_f32(cpu_f32_to_bf16(x[i * K + k]));
							s += (double)xv * w.deq[m * K + k];
							mag += fabs((double)xv * w.deq[m * K + k]);
						}
						CHECK(close_to(batch[i * M + m], s, mag, 1e-5), "%s %dt M=%lld K=%lld (%d, %lld): %.9g, want %.9g",
						      modes[mode], threads, (long long)M, (long long)K, i, (long long)m,
						      batch[i * M + m], s);
					}
				for (size_t zi = 0; zi < sizeof sizes / sizeof sizes[0]; zi++) {
					b->iface.matmul(b, batch, x, sizes[zi], &wt);
					for (int32_t i = 0; i < sizes[zi]; i++) {
						b->iface.matmul(b, alone, x + i * K, 1, &wt);
						CHECK(memcmp(alone, batch + i * M, (size_t)M * sizeof(float)) == 0,
						      "%s %dt M=%lld K=%lld: row %d of a batch of %d differs from the row alone",
						      modes[mode], threads, (long long)M, (long long)K, i, sizes[zi]);
					}
				}
				b->iface.weight_release(b, &wt);
				free(batch);
				free(alone);
				free(x);
				wmat_free(&w);
			}
			b->iface.free(b);
		}
}
END_TEST

/* What the fallback guarantees everywhere: the detection answers (and answers the same twice), and where it says no the
 * backends still start and multiply, with AAH_AMX=0 or not. */
START_TEST(test_fallback)
{
	const bool a = cpu_amx_available(), f = cpu_bf16dot_available();
	ck_assert(a == cpu_amx_available());
	ck_assert(f == cpu_bf16dot_available());
	printf("note: this CPU: AMX-INT8 tiles %s, AVX-512 BF16 %s\n", a ? "granted" : "absent", f ? "present" : "absent");
	for (int amx = 0; amx < 2; amx++) {
		setenv("AAH_AMX", amx ? "1" : "0", 1);
		aah_backend_params p = { .n_threads = 2 };
		aah_backend *b = aah_backend_cpu_init(&p);
		unsetenv("AAH_AMX");
		ck_assert_ptr_nonnull(b);
		b->iface.free(b);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("amx");
	TCase *tc = tcase_create("x86_fast_paths");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_fallback);
	tcase_add_test(tc, test_amx_kernels);
	tcase_add_test(tc, test_amx_extremes);
	tcase_add_loop_test(tc, test_amx_matmul_batch_invariant, 0, 5);
	tcase_add_test(tc, test_bf16dot_pairs);
	tcase_add_test(tc, test_bf16dot_matmul);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	const int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
