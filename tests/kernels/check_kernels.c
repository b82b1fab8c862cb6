/* tests/kernels/check_kernels.c — Check suite for kernels/cpu/: every kernel table (generic, AVX2, AVX-512) and every
 * backend op against a naive double-precision reference written here, the thread pool, and the scalar f16/bf16
 * conversions against the F16C hardware. Attention (tiles and the paged op) is tests/kernels/check_attention.c. */
#include <check.h>
#include <immintrin.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/argmax.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/threadpool.h"
#include "tests/kernels/kernels_test.h"

/* ---- kernel tables ---- */

START_TEST(test_table_select)
{
	ck_assert_ptr_eq(cpu_kernels_by_name("generic"), &cpu_kernels_generic);
	ck_assert_ptr_null(cpu_kernels_by_name("sse9"));
	ck_assert_ptr_null(cpu_kernels_by_name(""));
	const cpu_kernels *best = cpu_kernels_select();
	ck_assert_ptr_nonnull(best);
	for (int i = 0; i < 3; i++) {
		const cpu_kernels *k = cpu_kernels_by_name(isa_names[i]);
		if (!k)
			continue;
		setenv("AAH_CPU_ISA", isa_names[i], 1);
		ck_assert_ptr_eq(cpu_kernels_select(), k);
		ck_assert_int_ge(k->panel_rows, 1);
		ck_assert_ptr_nonnull(k->panel_mm);
	}
	/* an unknown name falls back to the best table */
	setenv("AAH_CPU_ISA", "nonsense", 1);
	ck_assert_ptr_eq(cpu_kernels_select(), best);
	unsetenv("AAH_CPU_ISA");
	ck_assert_ptr_eq(cpu_kernels_select(), best);
}
END_TEST

static const int64_t pmm_K[] = { 1, 2, 7, 15, 16, 17, 33, 100, 1024 };
static const int64_t pmm_M[] = { 13, 16, 37 };

/* panel_mm over every range of panels [p0, p1) of packed weights, 1 … panel_rows activation rows (k-major):
 * out[i·ldo + m] for the rows m < M of those panels, i < n, within 1e-5 of a float64 sum; every other element of out
 * keeps its sentinel. */
START_TEST(test_panel_mm)
{
	const cpu_kernels *k = table_or_skip(_i);
	if (!k)
		return;
	rng_seed(100 + (uint64_t)_i);
	const int32_t n_max = k->panel_rows < 17 ? k->panel_rows : 17;
	for (int di = 0; di < 3; di++)
		for (size_t mi = 0; mi < sizeof pmm_M / sizeof pmm_M[0]; mi++)
			for (size_t ki = 0; ki < sizeof pmm_K / sizeof pmm_K[0]; ki++) {
				const int64_t M = pmm_M[mi], K = pmm_K[ki], ldo = M + 3, ldx = K + 2;
				const int64_t panels = (M + CPU_PANEL - 1) / CPU_PANEL;
				wmat w;
				wmat_init(&w, dtypes[di], M, K, 1.0f);
				void *packed = aligned_alloc(64, (size_t)cpu_packed_elems(w.type, M, K) * 4 + 64);
				cpu_pack_panels(packed, w.data, w.type, M, K, 0, panels);
				float *x = rand_floats(n_max * ldx, 1.0f), *xt = malloc((size_t)(n_max * K) * sizeof(float));
				float *out = malloc((size_t)(n_max * ldo) * sizeof(float));
				double *ref = malloc((size_t)(n_max * M) * sizeof(double)), *mag = malloc((size_t)(n_max * M) * sizeof(double));
				for (int32_t i = 0; i < n_max; i++)
					for (int64_t m = 0; m < M; m++) {
						double s = 0, a = 0;
						for (int64_t kk = 0; kk < K; kk++) {
							double p = (double)x[i * ldx + kk] * w.deq[m * K + kk];
							s += p;
							a += fabs(p);
						}
						ref[i * M + m] = s;
						mag[i * M + m] = a;
					}
				for (int32_t n = 1; n <= n_max; n++)
					for (int64_t p0 = 0; p0 < panels; p0++)
						for (int64_t p1 = p0 + 1; p1 <= panels; p1++) {
							for (int64_t e = 0; e < n_max * ldo; e++)
								out[e] = SENTINEL;
							for (int32_t i = 0; i < n; i++)   /* the kernel's k-major activations */
								for (int64_t kk = 0; kk < K; kk++)
									xt[kk * n + i] = x[i * ldx + kk];
							k->panel_mm(out, ldo, xt, n, packed, w.type, K, M, p0, p1);
							for (int32_t i = 0; i < n_max; i++)
								for (int64_t m = 0; m < ldo; m++) {
									float got = out[i * ldo + m];
									if (i < n && m < M && m >= p0 * CPU_PANEL && m < p1 * CPU_PANEL)
										CHECK(close_to(got, ref[i * M + m], mag[i * M + m], 1e-5),
										      "%s panel_mm %s M=%lld K=%lld n=%d panels [%lld,%lld) out[%d][%lld] = %.9g, "
										      "want %.9g", k->isa, aah_dtype_name(w.type), (long long)M, (long long)K, n,
										      (long long)p0, (long long)p1, i, (long long)m, got, ref[i * M + m]);
									else
										CHECK(got == SENTINEL, "%s panel_mm %s M=%lld K=%lld n=%d panels [%lld,%lld) "
										      "wrote out[%d][%lld]", k->isa, aah_dtype_name(w.type), (long long)M,
										      (long long)K, n, (long long)p0, (long long)p1, i, (long long)m);
								}
						}
				free(packed);
				free(x);
				free(xt);
				free(out);
				free(ref);
				free(mag);
				wmat_free(&w);
			}
}
END_TEST

static const int64_t odd_n[] = { 0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 1001 };

/* exp_sum: s[t] = exp(s[t] − mx) within 4e-7 relative of float64 (below exp(-87.3) anything in [0, 1.3e-38]), the
 * sum and Σ p·(s − mx) within 1e-6 relative (of Σ|…|); the elements after n keep their sentinel. */
START_TEST(test_exp_sum)
{
	const cpu_kernels *k = table_or_skip(_i);
	if (!k)
		return;
	rng_seed(350 + (uint64_t)_i);
	for (size_t ni = 0; ni < sizeof odd_n / sizeof odd_n[0]; ni++) {
		const int64_t n = odd_n[ni];
		float *s = malloc((size_t)(n + 16) * sizeof(float)), *in = malloc((size_t)(n + 1) * sizeof(float));
		const float mx = 3.0f * rng_f();
		for (int64_t t = 0; t < n; t++)   /* spans 0 … -100 below mx, both ends included */
			in[t] = t == 0 ? mx : t == 1 ? mx - 100.0f : mx - 100.0f * (0.5f + 0.5f * rng_f()) * (t % 3 ? 0.1f : 1.0f);
		memcpy(s, in, (size_t)n * sizeof(float));
		for (int64_t t = n; t < n + 16; t++)
			s[t] = SENTINEL;
		double ps = -1, got = k->exp_sum(s, n, mx, &ps), want = 0, want_ps = 0, mag_ps = 0;
		for (int64_t t = 0; t < n; t++) {
			const float x = in[t] - mx;   /* the argument as every table forms it */
			double e = exp((double)x);
			want += e;
			want_ps += e * x;
			mag_ps += fabs(e * x);
			if (x < -87.3f)
				CHECK(s[t] >= 0 && s[t] <= 1.3e-38f, "%s exp_sum n=%lld [%lld]: exp(%.9g) = %.9g", k->isa,
				      (long long)n, (long long)t, (double)x, s[t]);
			else
				CHECK(fabs(s[t] - e) <= 4e-7 * e, "%s exp_sum n=%lld [%lld]: exp(%.9g) = %.9g, want %.9g", k->isa,
				      (long long)n, (long long)t, (double)x, s[t], e);
		}
		CHECK(fabs(got - want) <= 1e-6 * want + 1e-30, "%s exp_sum n=%lld: sum %.9g, want %.9g", k->isa, (long long)n,
		      got, want);
		CHECK(fabs(ps - want_ps) <= 1e-6 * mag_ps + 1e-30, "%s exp_sum n=%lld: Σ p·(s − mx) %.9g, want %.9g", k->isa,
		      (long long)n, ps, want_ps);
		/* without ps: the same values and sum, bit for bit */
		float *again = malloc((size_t)(n + 1) * sizeof(float));
		memcpy(again, in, (size_t)n * sizeof(float));
		CHECK(k->exp_sum(again, n, mx, NULL) == got && !memcmp(s, again, (size_t)n * sizeof(float)),
		      "%s exp_sum n=%lld: other results without ps", k->isa, (long long)n);
		free(again);
		for (int64_t t = n; t < n + 16; t++)
			CHECK(s[t] == SENTINEL, "%s exp_sum n=%lld wrote s[%lld]", k->isa, (long long)n, (long long)t);
		free(s);
		free(in);
	}
}
END_TEST

static float scalar_to_f32(const void *src, aah_dtype t, int64_t i)
{
	switch (t) {
	case AAH_DTYPE_F16: return cpu_f16_to_f32(((const uint16_t *)src)[i]);
	case AAH_DTYPE_BF16: return cpu_bf16_to_f32(((const uint16_t *)src)[i]);
	default: return ((const float *)src)[i];
	}
}

/* Every 16-bit pattern through the table's to_f32, then odd counts at odd offsets with a guard after dst. */
START_TEST(test_to_f32)
{
	const cpu_kernels *k = table_or_skip(_i);
	if (!k)
		return;
	rng_seed(400 + (uint64_t)_i);
	uint16_t *all = malloc(65536 * sizeof(uint16_t));
	float *dst = malloc(65536 * sizeof(float));
	for (uint32_t h = 0; h < 65536; h++)
		all[h] = (uint16_t)h;
	for (int di = 1; di < 3; di++) {
		k->to_f32(dst, all, dtypes[di], 65536);
		for (uint32_t h = 0; h < 65536; h++)
			CHECK(same_float(dst[h], scalar_to_f32(all, dtypes[di], h)), "%s to_f32 %s 0x%04x → %a",
			      k->isa, aah_dtype_name(dtypes[di]), h, dst[h]);
	}
	free(all);
	free(dst);

	for (int di = 0; di < 3; di++)
		for (size_t ni = 0; ni < sizeof odd_n / sizeof odd_n[0]; ni++)
			for (int64_t off = 0; off < 3; off++) {
				const int64_t n = odd_n[ni];
				wmat w;
				wmat_init(&w, dtypes[di], 1, n + off, 4.0f);
				const char *src = (const char *)w.data + (size_t)off * aah_dtype_size(w.type);
				float *d = malloc((size_t)(n + 16) * sizeof(float));
				for (int64_t i = 0; i < n + 16; i++)
					d[i] = SENTINEL;
				k->to_f32(d, src, w.type, n);
				for (int64_t i = 0; i < n + 16; i++)
					CHECK(i < n ? f2u(d[i]) == f2u(w.deq[off + i]) : d[i] == SENTINEL,
					      "%s to_f32 %s n=%lld off=%lld dst[%lld] = %a", k->isa, aah_dtype_name(w.type),
					      (long long)n, (long long)off, (long long)i, d[i]);
				free(d);
				wmat_free(&w);
			}
}
END_TEST

/* max: the largest of init and n values, exactly, wherever it lies (odd n, every position, -inf and negatives). */
START_TEST(test_max)
{
	const cpu_kernels *k = table_or_skip(_i);
	if (!k)
		return;
	rng_seed(380 + (uint64_t)_i);
	float s[1001];
	for (size_t ni = 0; ni < sizeof odd_n / sizeof odd_n[0]; ni++) {
		const int64_t n = odd_n[ni];
		for (int64_t at = 0; at < (n < 40 ? n : 40); at++) {
			for (int64_t t = 0; t < n; t++)
				s[t] = -50.0f + 10.0f * rng_f();
			s[at] = -1.5f + 0.1f * rng_f();   /* the largest, at every position in turn */
			float want = s[at];
			CHECK(k->max(s, n, -INFINITY) == want, "%s max n=%lld at %lld: %.9g, want %.9g", k->isa, (long long)n,
			      (long long)at, k->max(s, n, -INFINITY), want);
			CHECK(k->max(s, n, 2.0f) == 2.0f, "%s max n=%lld: init 2 above all", k->isa, (long long)n);
		}
		CHECK(k->max(s, 0, -3.0f) == -3.0f, "%s max n=0", k->isa);
	}
}
END_TEST

/* from_f32: every table rounds as cpu_f32_to_f16 / cpu_f32_to_bf16 do, bit for bit, NaN included: random bits, values
 * near the f16 range, ties, subnormals, infinities and NaNs of both signs, odd counts at odd offsets with a guard. */
START_TEST(test_from_f32)
{
	const cpu_kernels *k = table_or_skip(_i);
	if (!k)
		return;
	rng_seed(420 + (uint64_t)_i);
	enum { N = 1 << 16 };
	float *src = malloc((N + 3) * sizeof(float));
	uint16_t *dst = malloc((N + 3 + 16) * sizeof(float));   /* room for f32 */
	static const uint32_t special[] = { 0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
		                                0x7f800001u, 0xff812345u, 0x7fffffffu, 0x477ff000u, 0x477fefffu, 0x33000000u,
		                                0x33000001u, 0x38800000u, 0x387fffffu, 0x3f808000u, 0x3f818000u, 0x00000001u };
	for (int64_t i = 0; i < N + 3; i++) {
		const uint64_t r = rng_u64();
		uint32_t bits = (uint32_t)r;
		if (i % 3 == 1)   /* near the f16 range: exponents 96 … 159 */
			bits = (bits & 0x807fffffu) | (uint32_t)(96 + ((r >> 32) & 63)) << 23;
		else if (i % 3 == 2)   /* bf16 and f16 ties: the dropped bits exactly half */
			bits = (bits & 0xffff0000u) | ((r >> 40) & 1 ? 0x8000u : 0x1000u);
		if (i < (int64_t)(sizeof special / sizeof special[0]))
			bits = special[i];
		src[i] = u2f(bits);
	}
	for (int di = 0; di < 3; di++)
		for (int64_t off = 0; off < 3; off++)
			for (size_t ni = 0; ni < sizeof odd_n / sizeof odd_n[0] + 1; ni++) {
				const int64_t n = ni < sizeof odd_n / sizeof odd_n[0] ? odd_n[ni] : N;
				const size_t es = aah_dtype_size(dtypes[di]);
				memset(dst, 0xa5, (N + 3 + 16) * sizeof(float));
				k->from_f32(dst, dtypes[di], src + off, n);
				for (int64_t i = 0; i < n; i++) {
					const float f = src[off + i];
					if (dtypes[di] == AAH_DTYPE_F32) {
						CHECK(!memcmp((const char *)dst + i * 4, &src[off + i], 4), "%s from_f32 f32 n=%lld off=%lld [%lld]",
						      k->isa, (long long)n, (long long)off, (long long)i);
						continue;
					}
					const uint16_t got = dst[i], want = dtypes[di] == AAH_DTYPE_F16 ? cpu_f32_to_f16(f) : cpu_f32_to_bf16(f);
					CHECK(got == want, "%s from_f32 %s n=%lld off=%lld [%lld]: 0x%08x → 0x%04x, want 0x%04x", k->isa,
					      aah_dtype_name(dtypes[di]), (long long)n, (long long)off, (long long)i, f2u(f), got, want);
				}
				for (size_t b = (size_t)n * es; b < (size_t)n * es + 32; b++)
					CHECK(((const unsigned char *)dst)[b] == 0xa5, "%s from_f32 %s n=%lld wrote past the end", k->isa,
					      aah_dtype_name(dtypes[di]), (long long)n);
			}
	free(src);
	free(dst);
}
END_TEST

/* ---- backend ops: every table (through AAH_CPU_ISA) × 1, 2, 3 threads ---- */

START_TEST(test_backend_init)
{
	for (int rep = 0; rep < 20; rep++) {
		aah_backend_params p = { .n_threads = 1 + rep % 4 };
		aah_backend *b = aah_backend_cpu_init(rep == 0 ? NULL : &p);
		ck_assert_ptr_nonnull(b);
		ck_assert_ptr_nonnull(b->iface.matmul);
		b->iface.synchronize(b);
		void *buf = b->iface.buf_alloc(b, 1000);
		ck_assert_ptr_nonnull(buf);
		ck_assert_uint_eq((uintptr_t)buf % 64, 0);
		char src[1000], back[1000];
		for (int i = 0; i < 1000; i++)
			src[i] = (char)(i * 7);
		b->iface.buf_write(b, buf, src, sizeof src);
		b->iface.buf_read(b, back, buf, sizeof back);
		ck_assert_mem_eq(src, back, sizeof src);
		b->iface.buf_free(b, buf);
		b->iface.free(b);
	}
}
END_TEST

typedef struct mm_shape {
	int64_t M, K;
	int32_t n_max;   /* rows of x: all of matmul_n up to n_max */
} mm_shape;

static const int32_t matmul_n[] = { 1, 3, 4, 5, 11, 12, 13, 100, 257 };
static const mm_shape matmul_shapes[] = {
	{ 6, 64, 257 }, { 37, 100, 257 }, { 1030, 100, 257 }, { 37, 600, 257 }, { 37, 3072, 257 }, { 1030, 3072, 13 },
};

/* matmul with weights of dtype _i, every shape and row count, every backend; the reference for n rows is the
 * first n rows of the reference for n_max rows (rows are independent). */
START_TEST(test_matmul)
{
	const aah_dtype t = dtypes[_i];
	rng_seed(500 + (uint64_t)_i);
	backend_set bs;
	backends_open(&bs, 7);
	for (size_t si = 0; si < sizeof matmul_shapes / sizeof matmul_shapes[0]; si++) {
		const mm_shape *sh = &matmul_shapes[si];
		const int64_t M = sh->M, K = sh->K;
		wmat w;
		wmat_init(&w, t, M, K, 1.0f);
		float *x = rand_floats(sh->n_max * K, 1.0f);
		double *ref = malloc((size_t)(sh->n_max * M) * sizeof(double));
		double *mag = malloc((size_t)(sh->n_max * M) * sizeof(double));
		for (int64_t i = 0; i < sh->n_max; i++)
			for (int64_t m = 0; m < M; m++) {
				double s = 0, a = 0;
				const float *xr = x + i * K, *wr = w.deq + m * K;
				for (int64_t kk = 0; kk < K; kk++) {
					double p = (double)xr[kk] * wr[kk];
					s += p;
					a += fabs(p);
				}
				ref[i * M + m] = s;
				mag[i * M + m] = a;
			}
		for (int bi = 0; bi < bs.n; bi++) {
			aah_backend *b = bs.b[bi];
			aah_tensor wt;
			ck_assert_int_eq(b->iface.weight_import(b, &wt, w.data, t, M, K), 0);
			ck_assert_ptr_ne(wt.data, w.data);   /* a packed copy */
			for (size_t ni = 0; ni < sizeof matmul_n / sizeof matmul_n[0]; ni++) {
				const int32_t n = matmul_n[ni];
				if (n > sh->n_max)
					continue;
				float *out = malloc((size_t)(n * M) * sizeof(float));
				for (int64_t e = 0; e < n * M; e++)
					out[e] = SENTINEL;
				b->iface.matmul(b, out, x, n, &wt);
				for (int64_t e = 0; e < n * M; e++)
					CHECK(close_to(out[e], ref[e], mag[e], 1e-5),
					      "%s matmul %s n=%d M=%lld K=%lld out[%lld][%lld] = %.9g, want %.9g", bs.label[bi],
					      aah_dtype_name(t), n, (long long)M, (long long)K, (long long)(e / M),
					      (long long)(e % M), out[e], ref[e]);
				free(out);
			}
			b->iface.weight_release(b, &wt);
			ck_assert_ptr_null(wt.data);
		}
		free(ref);
		free(mag);
		free(x);
		wmat_free(&w);
	}
	backends_close(&bs);
}
END_TEST

/* argmax_rows: each row's id is aah_argmax's (the sampler's), whatever the rows' count and the threads: random rows,
 * ties (the first wins), ±0, NaN at 0 (the scan's 0), NaN elsewhere (ignored), all -inf, short and odd widths. */
START_TEST(test_argmax_rows)
{
	rng_seed(1200);
	backend_set bs;
	backends_open(&bs, 7);
	const int32_t widths[] = { 1, 5, 63, 64, 65, 1000, 151669 };
	for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
		const int32_t n = widths[wi], rows = 11;
		float *l = rand_floats((int64_t)rows * n, 4.0f);
		const float *rp[11];
		int32_t want[11], got[11];
		for (int32_t r = 0; r < rows; r++) {
			float *x = l + (int64_t)r * n;
			switch (r) {
			case 1: for (int32_t i = 0; i < n; i++) x[i] = roundf(x[i]); break;                /* ties */
			case 2: for (int32_t i = 0; i < n; i++) x[i] = i % 2 ? 0.0f : -0.0f; break;      /* ±0 */
			case 3: x[0] = NAN; break;
			case 4: x[n / 2] = NAN; break;
			case 5: for (int32_t i = 0; i < n; i++) x[i] = -INFINITY; break;
			default: break;
			}
			rp[r] = x;
			want[r] = aah_argmax(x, n);
		}
		for (int bi = 0; bi < bs.n; bi++)
			for (int32_t nr = 1; nr <= rows; nr += 5) {
				memset(got, 0xff, sizeof got);
				bs.b[bi]->iface.argmax_rows(bs.b[bi], got, rp, nr, n);
				for (int32_t r = 0; r < rows; r++)
					CHECK(r < nr ? got[r] == want[r] : got[r] == -1, "%s argmax_rows width %d, %d rows: row %d = %d, want %d",
					      bs.label[bi], n, nr, r, got[r], r < nr ? want[r] : -1);
			}
		free(l);
	}
	backends_close(&bs);
}
END_TEST

/* Batch invariance: each row of a batched matmul is bit-identical to the same row computed alone, whichever path
 * (gemv for few rows, tiles for many, padded edge tiles) and thread count ran it — so a request's tokens never
 * depend on what else shares the engine step. */
START_TEST(test_matmul_batch_invariant)
{
	const aah_dtype t = dtypes[_i];
	rng_seed(900 + (uint64_t)_i);
	backend_set bs;
	backends_open(&bs, 7);
	const int64_t shapes[][2] = { { 37, 600 }, { 64, 1024 }, { 6, 100 }, { 1030, 300 } };
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
		const int64_t M = shapes[si][0], K = shapes[si][1];
		const int32_t n = 101;
		wmat w;
		wmat_init(&w, t, M, K, 1.0f);
		float *x = rand_floats(n * K, 1.0f);
		float *batch = malloc((size_t)(n * M) * sizeof(float)), *alone = malloc((size_t)M * sizeof(float));
		for (int bi = 0; bi < bs.n; bi++) {
			aah_backend *b = bs.b[bi];
			aah_tensor wt;
			ck_assert_int_eq(b->iface.weight_import(b, &wt, w.data, t, M, K), 0);
			const int32_t sizes[] = { n, 13, 12, 5, 4 };
			for (size_t zi = 0; zi < sizeof sizes / sizeof sizes[0]; zi++) {
				b->iface.matmul(b, batch, x, sizes[zi], &wt);
				for (int32_t i = 0; i < sizes[zi]; i++) {
					b->iface.matmul(b, alone, x + i * K, 1, &wt);
					ck_assert_msg(memcmp(alone, batch + i * M, (size_t)M * sizeof(float)) == 0,
					              "%s %s M=%lld K=%lld: row %d of a batch of %d differs from the row alone",
					              bs.label[bi], aah_dtype_name(t), (long long)M, (long long)K, i, sizes[zi]);
				}
			}
			b->iface.weight_release(b, &wt);
		}
		free(batch);
		free(alone);
		free(x);
		wmat_free(&w);
	}
	backends_close(&bs);
}
END_TEST

/* (n_rows, dim): single-threaded below n_rows·dim = 32768, pooled above (incl. fewer rows than threads). */
static const int32_t rms_shapes[][2] = { { 1, 7 }, { 3, 64 }, { 5, 100 }, { 17, 1024 }, { 64, 1024 }, { 9, 4096 },
	                                     { 2, 20000 }, { 1, 40000 } };

START_TEST(test_rmsnorm)
{
	rng_seed(600);
	backend_set bs;
	backends_open(&bs, 7);
	const float eps = 1e-6f;
	for (size_t si = 0; si < sizeof rms_shapes / sizeof rms_shapes[0]; si++)
		for (int di = 0; di < 3; di++) {
			const int32_t rows = rms_shapes[si][0], dim = rms_shapes[si][1];
			const int64_t n = (int64_t)rows * dim;
			wmat w;
			wmat_init(&w, dtypes[di], 1, dim, 2.0f);
			float *x = rand_floats(n, 3.0f);
			for (int64_t i = 0; i < dim; i++)
				x[i] *= 1e-3f;   /* a small row */
			double *ref = malloc((size_t)n * sizeof(double));
			for (int32_t r = 0; r < rows; r++) {
				double ss = 0;
				for (int32_t i = 0; i < dim; i++)
					ss += (double)x[(int64_t)r * dim + i] * x[(int64_t)r * dim + i];
				double inv = 1.0 / sqrt(ss / dim + (double)eps);
				for (int32_t i = 0; i < dim; i++)
					ref[(int64_t)r * dim + i] = x[(int64_t)r * dim + i] * inv * w.deq[i];
			}
			float *out = malloc((size_t)n * sizeof(float)), *inplace = malloc((size_t)n * sizeof(float));
			for (int bi = 0; bi < bs.n; bi++) {
				aah_backend *b = bs.b[bi];
				aah_tensor wt;
				ck_assert_int_eq(b->iface.weight_import(b, &wt, w.data, w.type, 1, dim), 0);
				b->iface.rmsnorm(b, out, x, &wt, rows, eps);
				memcpy(inplace, x, (size_t)n * sizeof(float));
				b->iface.rmsnorm(b, inplace, inplace, &wt, rows, eps);
				for (int64_t e = 0; e < n; e++) {
					CHECK(close_to(out[e], ref[e], fabs(ref[e]), 1e-5),
					      "%s rmsnorm %s rows=%d dim=%d [%lld] = %.9g, want %.9g", bs.label[bi],
					      aah_dtype_name(w.type), rows, dim, (long long)e, out[e], ref[e]);
					CHECK(f2u(inplace[e]) == f2u(out[e]), "%s rmsnorm in place %s rows=%d dim=%d [%lld] differs",
					      bs.label[bi], aah_dtype_name(w.type), rows, dim, (long long)e);
				}
				b->iface.weight_release(b, &wt);
			}
			free(out);
			free(inplace);
			free(ref);
			free(x);
			wmat_free(&w);
		}
	backends_close(&bs);
}
END_TEST

START_TEST(test_rope)
{
	rng_seed(700);
	backend_set bs;
	backends_open(&bs, 7);
	static const int32_t dims[] = { 2, 64, 128, 1024 };
	static const int32_t pos[] = { 0, 1, 17, 40000, 131071 };
	const int32_t rows = (int32_t)(sizeof pos / sizeof pos[0]), heads = 3;
	for (size_t dj = 0; dj < sizeof dims / sizeof dims[0]; dj++) {
		const int32_t d = dims[dj], half = d / 2;
		const int64_t n = (int64_t)rows * heads * d;
		float *inv_freq = malloc((size_t)half * sizeof(float));
		for (int32_t j = 0; j < half; j++)
			inv_freq[j] = (float)pow(1e6, -2.0 * j / d);
		float *x0 = rand_floats(n, 2.0f), *x = malloc((size_t)n * sizeof(float));
		for (int bi = 0; bi < bs.n; bi++) {
			aah_backend *b = bs.b[bi];
			memcpy(x, x0, (size_t)n * sizeof(float));
			b->iface.rope(b, x, rows, heads, d, pos, inv_freq);
			for (int32_t r = 0; r < rows; r++)
				for (int32_t h = 0; h < heads; h++) {
					const int64_t base = ((int64_t)r * heads + h) * d;
					for (int32_t j = 0; j < half; j++) {
						double th = (double)pos[r] * (double)inv_freq[j];
						double a = x0[base + j], c = x0[base + j + half];
						double want0 = a * cos(th) - c * sin(th), want1 = a * sin(th) + c * cos(th);
						double mag = fabs(a) + fabs(c);
						CHECK(close_to(x[base + j], want0, mag, 1e-5) &&
						                  close_to(x[base + j + half], want1, mag, 1e-5),
						      "%s rope d=%d pos=%d head %d pair %d: (%.9g, %.9g), want (%.9g, %.9g)",
						      bs.label[bi], d, pos[r], h, j, x[base + j], x[base + j + half], want0, want1);
						if (pos[r] == 0)   /* θ = 0: the identity, exactly */
							CHECK(x[base + j] == x0[base + j] && x[base + j + half] == x0[base + j + half],
							      "%s rope at position 0 is not the identity", bs.label[bi]);
					}
				}
		}
		free(inv_freq);
		free(x0);
		free(x);
	}
	backends_close(&bs);
}
END_TEST

START_TEST(test_swiglu_add)
{
	rng_seed(800);
	backend_set bs;
	backends_open(&bs, 7);
	const int64_t n = 1001;
	float *gate = rand_floats(n, 20.0f), *up = rand_floats(n, 3.0f), *y = rand_floats(n, 5.0f);
	static const float special[] = { 0.0f, -0.0f, 100.0f, -100.0f, 1000.0f, -1000.0f, 88.0f, -88.0f, 1e-30f };
	for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
		gate[i] = special[i];
	float *out = malloc((size_t)n * sizeof(float)), *g2 = malloc((size_t)n * sizeof(float));
	for (int bi = 0; bi < bs.n; bi++) {
		aah_backend *b = bs.b[bi];
		for (int64_t i = 0; i < n; i++)
			out[i] = SENTINEL;
		b->iface.swiglu(b, out, gate, up, n);
		memcpy(g2, gate, (size_t)n * sizeof(float));
		b->iface.swiglu(b, g2, g2, up, n);   /* out == gate */
		for (int64_t i = 0; i < n; i++) {
			double g = gate[i];
			double want = g / (1.0 + exp(-g)) * up[i];
			CHECK(close_to(out[i], want, fabs(want), 1e-5), "%s swiglu(%.9g, %.9g) = %.9g, want %.9g",
			      bs.label[bi], gate[i], up[i], out[i], want);
			CHECK(same_float(g2[i], out[i]), "%s swiglu in place [%lld] differs", bs.label[bi], (long long)i);
		}

		/* add: x += y, exactly the float sum; n = 0 touches nothing */
		float *x = rand_floats(n, 5.0f), *x0 = malloc((size_t)n * sizeof(float));
		memcpy(x0, x, (size_t)n * sizeof(float));
		b->iface.add(b, x, y, n);
		for (int64_t i = 0; i < n; i++)
			CHECK(f2u(x[i]) == f2u(x0[i] + y[i]), "%s add [%lld]", bs.label[bi], (long long)i);
		memcpy(x0, x, (size_t)n * sizeof(float));
		b->iface.add(b, x, y, 0);
		ck_assert_mem_eq(x, x0, (size_t)n * sizeof(float));
		free(x);
		free(x0);
	}
	free(gate);
	free(up);
	free(y);
	free(out);
	free(g2);
	backends_close(&bs);
}
END_TEST

START_TEST(test_get_rows)
{
	rng_seed(900);
	backend_set bs;
	backends_open(&bs, 7);
	static const int64_t cols[] = { 1, 37, 64, 1000 };
	static const int32_t ids[] = { 0, 49, 7, 7, 23, 48, 1 };
	const int32_t n = (int32_t)(sizeof ids / sizeof ids[0]);
	for (int di = 0; di < 3; di++)
		for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
			const int64_t C = cols[ci];
			wmat w;
			wmat_init(&w, dtypes[di], 50, C, 10.0f);
			float *out = malloc((size_t)(n * C) * sizeof(float));
			for (int bi = 0; bi < bs.n; bi++) {
				aah_backend *b = bs.b[bi];
				aah_tensor t;
				ck_assert_int_eq(b->iface.weight_import(b, &t, w.data, w.type, w.rows, w.cols), 0);
				for (int64_t e = 0; e < n * C; e++)
					out[e] = SENTINEL;
				b->iface.get_rows(b, out, &t, ids, n);
				for (int32_t i = 0; i < n; i++)
					for (int64_t c = 0; c < C; c++)
						CHECK(f2u(out[i * C + c]) == f2u(w.deq[ids[i] * C + c]),
						      "%s get_rows %s cols=%lld row %d col %lld", bs.label[bi], aah_dtype_name(w.type),
						      (long long)C, i, (long long)c);
				b->iface.weight_release(b, &t);
			}
			free(out);
			wmat_free(&w);
		}
	backends_close(&bs);
}
END_TEST

/* ---- thread pool ---- */

typedef struct tp_ctx {
	int64_t count[8];
	int64_t stamp[8];
	int32_t seen_n[8];
	int64_t run;
	_Atomic int64_t calls;
	_Atomic int bad_index;
} tp_ctx;

static void tp_fn(void *p, int32_t i, int32_t n)
{
	tp_ctx *c = p;
	if (i < 0 || i >= 8 || i >= n) {
		atomic_store(&c->bad_index, 1);
		return;
	}
	c->count[i]++;
	c->stamp[i] = c->run;
	c->seen_n[i] = n;
	atomic_fetch_add(&c->calls, 1);
}

START_TEST(test_threadpool_runs)
{
	static const int32_t sizes[] = { 1, 2, 5 };
	for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
		const int32_t n = sizes[si];
		threadpool *tp = threadpool_init(n);
		ck_assert_ptr_nonnull(tp);
		ck_assert_int_eq(threadpool_size(tp), n);
		tp_ctx c;
		memset(&c, 0, sizeof c);
		int64_t stale = 0;
		/* A pool with more threads than cores wakes sleeping workers every run (milliseconds apiece on a loaded
		 * machine: 10000 of them took past the case's timeout beside two busy loops), so it runs 500 times; every one of
		 * those goes through the sleep-and-wake path that the test is there for. */
		const int64_t runs = n <= sysconf(_SC_NPROCESSORS_ONLN) ? 10000 : 500;
		for (int64_t r = 0; r < runs; r++) {
			c.run = r;
			threadpool_run(tp, tp_fn, &c);
			/* run returns only when every worker is done with this run */
			for (int32_t i = 0; i < n; i++)
				stale += c.stamp[i] != r;
			stale += atomic_load(&c.calls) != (r + 1) * n;
		}
		ck_assert_int_eq(atomic_load(&c.bad_index), 0);
		CHECK(stale == 0, "pool of %d: %lld stale results after run", n, (long long)stale);
		for (int32_t i = 0; i < n; i++) {
			ck_assert_int_eq(c.count[i], runs);
			ck_assert_int_eq(c.seen_n[i], n);
		}
		for (int32_t i = n; i < 8; i++)
			ck_assert_int_eq(c.count[i], 0);
		threadpool_free(tp);
	}
}
END_TEST

START_TEST(test_threadpool_init_free)
{
	for (int rep = 0; rep < 300; rep++) {
		const int32_t n = 1 + rep % 6;
		threadpool *tp = threadpool_init(n);
		ck_assert_ptr_nonnull(tp);
		tp_ctx c;
		memset(&c, 0, sizeof c);
		for (int r = 0; r < rep % 4; r++)
			threadpool_run(tp, tp_fn, &c);   /* freed right after a run, or never run */
		for (int32_t i = 0; i < n; i++)
			ck_assert_int_eq(c.count[i], rep % 4);
		threadpool_free(tp);
	}
	threadpool *tp = threadpool_init(0);   /* clamped to one: the caller alone */
	ck_assert_ptr_nonnull(tp);
	ck_assert_int_eq(threadpool_size(tp), 1);
	threadpool_free(tp);
	threadpool_free(NULL);
}
END_TEST

/* ---- scalar f16 / bf16 conversions ---- */

__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
	return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h)
{
	return _cvtsh_ss(h);
}

static int have_f16c(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("f16c");
}

static int f16_is_nan(uint16_t h)
{
	return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

START_TEST(test_f16_exhaustive)
{
	const int hw = have_f16c();
	if (!hw)
		printf("note: no F16C; f16 conversions are checked without the hardware\n");
	for (uint32_t h = 0; h < 65536; h++) {
		float f = cpu_f16_to_f32((uint16_t)h);
		if (hw)
			CHECK(same_float(f, hw_f16_to_f32((uint16_t)h)), "f16 0x%04x → %a, hardware %a", h, f,
			      hw_f16_to_f32((uint16_t)h));
		uint16_t back = cpu_f32_to_f16(f);
		if (f16_is_nan((uint16_t)h)) {
			CHECK(isnan(f), "f16 NaN 0x%04x → %a", h, f);
			CHECK(f16_is_nan(back) && (back & 0x8000) == (h & 0x8000), "f16 NaN 0x%04x round trip 0x%04x", h,
			      back);
		} else {
			CHECK(back == h, "f16 0x%04x → %a → 0x%04x", h, f, back);
		}
	}
}
END_TEST

typedef struct f16_case {
	float f;
	uint16_t h;
} f16_case;

START_TEST(test_f16_rounding)
{
	const float u = 1.0f / 1024;   /* f16 ulp at 1 */
	const f16_case cases[] = {
		{ 1.0f, 0x3c00 },
		{ 1.0f + u / 2, 0x3c00 },                       /* tie → even (down) */
		{ 1.0f + 3 * u / 2, 0x3c02 },                   /* tie → even (up) */
		{ 1.0f + u / 2 + u / 4096, 0x3c01 },            /* above the tie */
		{ 1.0f + u / 2 - u / 4096, 0x3c00 },
		{ -(1.0f + 3 * u / 2), 0xbc02 },
		{ 2047.0f, 0x67ff },
		{ 2049.0f, 0x6800 },                            /* tie between 2048 and 2050 → 2048 */
		{ 2051.0f, 0x6802 },                            /* tie → 2052 */
		{ 65504.0f, 0x7bff },                           /* largest finite */
		{ 65519.99f, 0x7bff },
		{ 65520.0f, 0x7c00 },                           /* the tie above 65504 rounds to inf */
		{ 1e10f, 0x7c00 },
		{ -1e10f, 0xfc00 },
		{ INFINITY, 0x7c00 },
		{ -INFINITY, 0xfc00 },
		{ 0.0f, 0x0000 },
		{ -0.0f, 0x8000 },
		{ 0x1p-14f, 0x0400 },                           /* smallest normal */
		{ 0x1p-24f, 0x0001 },                           /* smallest subnormal */
		{ 0x1p-25f, 0x0000 },                           /* half of it: tie → 0 */
		{ 0x1.000002p-25f, 0x0001 },                    /* just above the tie */
		{ -0x1p-25f, 0x8000 },
		{ 0x1.8p-24f, 0x0002 },                         /* 1.5 units: tie → 2 */
		{ 0x1.4p-23f, 0x0002 },                         /* 2.5 units: tie → 2 */
		{ 0x1.cp-23f, 0x0004 },                         /* 3.5 units: tie → 4 */
		{ 1023 * 0x1p-24f, 0x03ff },                    /* largest subnormal */
		{ 1023.5f * 0x1p-24f, 0x0400 },                 /* tie → the smallest normal (even) */
		{ 0x1p-30f, 0x0000 },
		{ 0x1p-140f, 0x0000 },                          /* f32 subnormal */
		{ 3.14159265f, 0x4248 },
	};
	const int hw = have_f16c();
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint16_t got = cpu_f32_to_f16(cases[i].f);
		CHECK(got == cases[i].h, "f32 %a → f16 0x%04x, want 0x%04x", cases[i].f, got, cases[i].h);
		if (hw)
			CHECK(hw_f32_to_f16(cases[i].f) == cases[i].h, "the test's own case %a is wrong", cases[i].f);
	}
	ck_assert(f16_is_nan(cpu_f32_to_f16(NAN)));
	ck_assert(f16_is_nan(cpu_f32_to_f16(-NAN)));
	ck_assert(f16_is_nan(cpu_f32_to_f16(u2f(0x7f800001))));   /* a signalling NaN stays NaN, not inf */
	ck_assert(f16_is_nan(cpu_f32_to_f16(u2f(0xffc00001))));
}
END_TEST

/* Random patterns (every exponent, NaN and inf included) and a stride through all 2^32 floats, against F16C. */
START_TEST(test_f16_vs_hardware)
{
	if (!have_f16c()) {
		printf("note: no F16C; hardware comparison skipped\n");
		return;
	}
	rng_seed(1400);
	int64_t bad = 0;
	uint32_t first_bad = 0;
	for (int64_t i = 0; i < 2000000; i++) {
		uint64_t r = rng_u64();
		uint32_t bits = (uint32_t)r;
		if (i & 1)   /* half of them near the f16 range: exponents 96 … 159 */
			bits = (bits & 0x807fffffu) | (uint32_t)(96 + ((r >> 32) & 63)) << 23;
		float f = u2f(bits);
		uint16_t a = cpu_f32_to_f16(f), b = hw_f32_to_f16(f);
		if (isnan(f) ? !f16_is_nan(a) : a != b) {
			if (!bad++)
				first_bad = bits;
		}
	}
	for (uint64_t u = 0; u < (1ull << 32); u += 251) {
		float f = u2f((uint32_t)u);
		uint16_t a = cpu_f32_to_f16(f), b = hw_f32_to_f16(f);
		if (isnan(f) ? !f16_is_nan(a) : a != b) {
			if (!bad++)
				first_bad = (uint32_t)u;
		}
	}
	CHECK(bad == 0, "%lld f32 → f16 mismatches with F16C; first 0x%08x → 0x%04x, hardware 0x%04x",
	      (long long)bad, first_bad, cpu_f32_to_f16(u2f(first_bad)), hw_f32_to_f16(u2f(first_bad)));
}
END_TEST

/* Round to nearest bf16 by comparing the two neighbours in double; ties to the even mantissa. Inf counts as
 * the value 2^128 (the next step past the largest bf16). */
static uint16_t ref_f32_to_bf16(float f)
{
	uint32_t u = f2u(f);
	uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;   /* same sign; |lo| ≤ |f| < |hi| */
	if (lo == u)
		return (uint16_t)(u >> 16);
	double x = fabs((double)f), a = fabs((double)u2f(lo));
	double b = (hi & 0x7fffffffu) == 0x7f800000u ? 0x1p128 : fabs((double)u2f(hi));
	if (x - a < b - x)
		return (uint16_t)(lo >> 16);
	if (x - a > b - x)
		return (uint16_t)(hi >> 16);
	return (uint16_t)(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

static int bf16_is_nan(uint16_t h)
{
	return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

START_TEST(test_bf16)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float f = cpu_bf16_to_f32((uint16_t)h);
		CHECK(f2u(f) == h << 16, "bf16 0x%04x → %a", h, f);
		uint16_t back = cpu_f32_to_bf16(f);
		if (bf16_is_nan((uint16_t)h))
			CHECK(bf16_is_nan(back) && (back & 0x8000) == (h & 0x8000), "bf16 NaN 0x%04x → 0x%04x", h, back);
		else
			CHECK(back == h, "bf16 0x%04x → 0x%04x", h, back);
	}
	const f16_case cases[] = {
		{ 1.0f + 0x1p-8f, 0x3f80 },                /* tie → even (down) */
		{ 1.0f + 0x1.8p-7f, 0x3f82 },              /* tie → even (up) */
		{ 1.0f + 0x1p-8f + 0x1p-20f, 0x3f81 },
		{ -(1.0f + 0x1.8p-7f), 0xbf82 },
		{ 0x1.fep127f, 0x7f7f },                   /* largest finite bf16 */
		{ 0x1.ffp127f, 0x7f80 },                   /* the tie above it rounds to inf */
		{ 0x1.fffffep127f, 0x7f80 },               /* FLT_MAX → inf */
		{ INFINITY, 0x7f80 },
		{ -INFINITY, 0xff80 },
		{ 0x1p-149f, 0x0000 },                     /* the smallest f32 subnormal: below half a bf16 step */
		{ 0x1p-133f, 0x0001 },                     /* the smallest bf16 subnormal */
		{ -0.0f, 0x8000 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		CHECK(cpu_f32_to_bf16(cases[i].f) == cases[i].h, "f32 %a → bf16 0x%04x, want 0x%04x", cases[i].f,
		      cpu_f32_to_bf16(cases[i].f), cases[i].h);
		CHECK(ref_f32_to_bf16(cases[i].f) == cases[i].h, "the test's own case %a is wrong", cases[i].f);
	}
	ck_assert(bf16_is_nan(cpu_f32_to_bf16(NAN)));
	ck_assert(bf16_is_nan(cpu_f32_to_bf16(u2f(0x7f800001))));   /* would become inf if truncated */
	ck_assert(bf16_is_nan(cpu_f32_to_bf16(u2f(0xff800001))));
	ck_assert(bf16_is_nan(cpu_f32_to_bf16(u2f(0x7fffffff))));   /* would carry into the sign if rounded */

	rng_seed(1500);
	int64_t bad = 0;
	uint32_t first_bad = 0;
	for (int64_t i = 0; i < 4000000; i++) {
		uint32_t bits = (uint32_t)rng_u64();
		if (i & 1)
			bits = (bits & 0xffff0000u) | (i & 2 ? 0x8000u : 0x7fffu);   /* ties and the neighbours of ties */
		float f = u2f(bits);
		uint16_t a = cpu_f32_to_bf16(f);
		if (isnan(f) ? !bf16_is_nan(a) : a != ref_f32_to_bf16(f)) {
			if (!bad++)
				first_bad = bits;
		}
	}
	CHECK(bad == 0, "%lld f32 → bf16 mismatches; first 0x%08x → 0x%04x, want 0x%04x", (long long)bad,
	      first_bad, cpu_f32_to_bf16(u2f(first_bad)), ref_f32_to_bf16(u2f(first_bad)));
}
END_TEST

static Suite *kernels_suite(void)
{
	Suite *s = suite_create("kernels");

	TCase *tc = tcase_create("tables");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_table_select);
	tcase_add_loop_test(tc, test_panel_mm, 0, 3);
	tcase_add_loop_test(tc, test_exp_sum, 0, 3);
	tcase_add_loop_test(tc, test_max, 0, 3);
	tcase_add_loop_test(tc, test_to_f32, 0, 3);
	tcase_add_loop_test(tc, test_from_f32, 0, 3);
	suite_add_tcase(s, tc);

	tc = tcase_create("backend_ops");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_backend_init);
	tcase_add_loop_test(tc, test_matmul, 0, 3);
	tcase_add_loop_test(tc, test_matmul_batch_invariant, 0, 3);
	tcase_add_test(tc, test_argmax_rows);
	tcase_add_test(tc, test_rmsnorm);
	tcase_add_test(tc, test_rope);
	tcase_add_test(tc, test_swiglu_add);
	tcase_add_test(tc, test_get_rows);
	suite_add_tcase(s, tc);

	tc = tcase_create("threadpool");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_threadpool_runs);
	tcase_add_test(tc, test_threadpool_init_free);
	suite_add_tcase(s, tc);

	tc = tcase_create("conversions");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_f16_exhaustive);
	tcase_add_test(tc, test_f16_rounding);
	tcase_add_test(tc, test_f16_vs_hardware);
	tcase_add_test(tc, test_bf16);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(kernels_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
