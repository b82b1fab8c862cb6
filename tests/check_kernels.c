/* tests/check_kernels.c — Check suite for kernels/cpu/: every kernel table (generic, AVX2, AVX-512) and every
 * backend op against a naive double-precision reference written here, paged attention against dense masked
 * attention, the thread pool, and the scalar f16/bf16 conversions against the F16C hardware. */
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
#include "tests/test_rng.h"

/* ---- helpers: a seeded generator, bit casts, stored weights with their exact f32 values ---- */

static void rng_seed(uint64_t s)
{
	rng_state = s;
}

static uint32_t f2u(float f)
{
	union { float f; uint32_t u; } v = { .f = f };
	return v.u;
}

static float u2f(uint32_t u)
{
	union { uint32_t u; float f; } v = { .u = u };
	return v.f;
}

/* The same value as a float, bit for bit, or both NaN. */
static int same_float(float a, float b)
{
	return (isnan(a) && isnan(b)) || f2u(a) == f2u(b);
}

static const aah_dtype dtypes[3] = { AAH_DTYPE_F32, AAH_DTYPE_F16, AAH_DTYPE_BF16 };
static const char *const isa_names[3] = { "generic", "avx2", "avx512" };

/* A matrix stored in `type` (data) and the f32 values it holds (deq); both rows × cols, malloc'd to the exact
 * size so that ASan sees any read past the end. Free with wmat_free. */
typedef struct wmat {
	void *data;
	float *deq;
	aah_dtype type;
	int64_t rows, cols;
} wmat;

/* Stores f in type t at w[i]; returns the value stored. */
static float store_elem(void *w, aah_dtype t, int64_t i, float f)
{
	switch (t) {
	case AAH_DTYPE_F16: {
		uint16_t h = cpu_f32_to_f16(f);
		((uint16_t *)w)[i] = h;
		return cpu_f16_to_f32(h);
	}
	case AAH_DTYPE_BF16: {
		uint16_t h = cpu_f32_to_bf16(f);
		((uint16_t *)w)[i] = h;
		return cpu_bf16_to_f32(h);
	}
	default:
		((float *)w)[i] = f;
		return f;
	}
}

static void wmat_init(wmat *m, aah_dtype t, int64_t rows, int64_t cols, float amp)
{
	m->type = t;
	m->rows = rows;
	m->cols = cols;
	size_t n = (size_t)(rows * cols);
	m->data = malloc(n ? n * aah_dtype_size(t) : 1);
	m->deq = malloc(n ? n * sizeof(float) : 1);
	ck_assert_ptr_nonnull(m->data);
	ck_assert_ptr_nonnull(m->deq);
	for (size_t i = 0; i < n; i++)
		m->deq[i] = store_elem(m->data, t, (int64_t)i, amp * rng_f());
}

static void wmat_free(wmat *m)
{
	free(m->data);
	free(m->deq);
}

static float *rand_floats(int64_t n, float amp)
{
	float *p = malloc(n > 0 ? (size_t)n * sizeof(float) : 1);
	ck_assert_ptr_nonnull(p);
	for (int64_t i = 0; i < n; i++)
		p[i] = amp * rng_f();
	return p;
}

/* |got - ref| ≤ rel · mag, where mag bounds the terms of the sum (Σ|x·w|), plus a denormal's worth. */
static int close_to(double got, double ref, double mag, double rel)
{
	return fabs(got - ref) <= rel * mag + 1e-30;
}

#define SENTINEL (-7777.25f)

/* ck_assert_msg without Check's bookkeeping: every passing ck_assert writes a message to the runner, which
 * loops that check millions of values cannot afford. */
#define CHECK(expr, ...)                     \
	do {                                     \
		if (!(expr))                         \
			ck_abort_msg(__VA_ARGS__);       \
	} while (0)

static const cpu_kernels *table_or_skip(int i)
{
	const cpu_kernels *k = cpu_kernels_by_name(isa_names[i]);
	if (!k)
		printf("note: this CPU lacks %s; its kernel table is skipped\n", isa_names[i]);
	else
		ck_assert_str_eq(k->isa, isa_names[i]);
	return k;
}

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
 * sum within 1e-6 relative; the elements after n keep their sentinel. */
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
		double got = k->exp_sum(s, n, mx), want = 0;
		for (int64_t t = 0; t < n; t++) {
			const float x = in[t] - mx;   /* the argument as every table forms it */
			double e = exp((double)x);
			want += e;
			if (x < -87.3f)
				CHECK(s[t] >= 0 && s[t] <= 1.3e-38f, "%s exp_sum n=%lld [%lld]: exp(%.9g) = %.9g", k->isa,
				      (long long)n, (long long)t, (double)x, s[t]);
			else
				CHECK(fabs(s[t] - e) <= 4e-7 * e, "%s exp_sum n=%lld [%lld]: exp(%.9g) = %.9g, want %.9g", k->isa,
				      (long long)n, (long long)t, (double)x, s[t], e);
		}
		CHECK(fabs(got - want) <= 1e-6 * want + 1e-30, "%s exp_sum n=%lld: sum %.9g, want %.9g", k->isa, (long long)n,
		      got, want);
		for (int64_t t = n; t < n + 16; t++)
			CHECK(s[t] == SENTINEL, "%s exp_sum n=%lld wrote s[%lld]", k->isa, (long long)n, (long long)t);
		free(s);
		free(in);
	}
}
END_TEST

START_TEST(test_dot_axpy)
{
	const cpu_kernels *k = table_or_skip(_i);
	if (!k)
		return;
	rng_seed(300 + (uint64_t)_i);
	for (size_t ni = 0; ni < sizeof odd_n / sizeof odd_n[0]; ni++) {
		const int64_t n = odd_n[ni];
		float *a = rand_floats(n, 1.0f), *b = rand_floats(n, 1.0f);
		double s = 0, m = 0;
		for (int64_t i = 0; i < n; i++) {
			s += (double)a[i] * b[i];
			m += fabs((double)a[i] * b[i]);
		}
		float got = k->dot(a, b, n);
		CHECK(close_to(got, s, m, 1e-5), "%s dot n=%lld = %.9g, want %.9g", k->isa, (long long)n, got, s);

		/* axpy: y[i] += alpha · x[i]; the 16 floats after y[n) keep their sentinel */
		const float alpha = 1.5f * rng_f();
		float *y = malloc((size_t)(n + 16) * sizeof(float));
		for (int64_t i = 0; i < n + 16; i++)
			y[i] = i < n ? 2.0f * rng_f() : SENTINEL;
		float *y0 = malloc((size_t)(n + 1) * sizeof(float));
		memcpy(y0, y, (size_t)n * sizeof(float));
		k->axpy(y, alpha, a, n);
		for (int64_t i = 0; i < n + 16; i++) {
			if (i >= n) {
				CHECK(y[i] == SENTINEL, "%s axpy n=%lld wrote y[%lld]", k->isa, (long long)n, (long long)i);
				continue;
			}
			double want = (double)y0[i] + (double)alpha * a[i];
			CHECK(close_to(y[i], want, fabs(y0[i]) + fabs((double)alpha * a[i]), 1e-6),
			      "%s axpy n=%lld y[%lld] = %.9g, want %.9g", k->isa, (long long)n, (long long)i, y[i], want);
		}
		free(a);
		free(b);
		free(y);
		free(y0);
	}
}
END_TEST

/* The attention blocks: qk (scores of n keys against `group` query heads) and pv (their weighted values added to
 * the outputs), with row strides above head_dim and ld above n; nothing outside the block is touched. */
START_TEST(test_qk_pv)
{
	const cpu_kernels *k = table_or_skip(_i);
	if (!k)
		return;
	rng_seed(350 + (uint64_t)_i);
	static const int32_t groups[] = { 1, 2, 3, 4, 5, 8 };
	static const int32_t hds[] = { 8, 16, 32, 40, 64, 128, 192 };
	static const int32_t ns[] = { 1, 7, 16, 33 };
	for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
		for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
			for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
				for (int pad = 0; pad < 2; pad++) {
					const int32_t group = groups[gi], hd = hds[hi], n = ns[ni];
					const int64_t ks = hd + 3 * pad, ld = n + 5 * pad + 1;
					const int64_t rows_len = (int64_t)(n - 1) * ks + hd;   /* exactly what n strided rows span */
					float *q = rand_floats((int64_t)group * hd, 1.0f), *keys = rand_floats(rows_len, 1.0f);
					float *scores = malloc((size_t)(group * ld) * sizeof(float));
					for (int64_t e = 0; e < group * ld; e++)
						scores[e] = SENTINEL;
					k->qk(scores, ld, q, group, keys, ks, n, hd);
					for (int32_t g = 0; g < group; g++)
						for (int64_t t = 0; t < ld; t++) {
							float got = scores[g * ld + t];
							if (t >= n) {
								CHECK(got == SENTINEL, "%s qk group=%d hd=%d n=%d wrote scores[%d][%lld]", k->isa, group,
								      hd, n, g, (long long)t);
								continue;
							}
							double sum = 0, mag = 0;
							for (int32_t d = 0; d < hd; d++) {
								double pr = (double)q[g * hd + d] * keys[t * ks + d];
								sum += pr;
								mag += fabs(pr);
							}
							CHECK(close_to(got, sum, mag, 1e-5),
							      "%s qk group=%d hd=%d n=%d ks=%lld [%d][%lld] = %.9g, want %.9g", k->isa, group, hd, n, (long long)ks, g, (long long)t, got, sum);
						}

					/* pv: out (group, hd) += p (group, ld) · values (n rows of stride ks) */
					float *p = malloc((size_t)(group * ld) * sizeof(float));
					for (int64_t e = 0; e < group * ld; e++)
						p[e] = (float)((rng_u64() >> 40) * (1.0 / 16777216.0));
					float *out = rand_floats((int64_t)group * hd, 2.0f);
					float *out0 = malloc((size_t)group * hd * sizeof(float));
					memcpy(out0, out, (size_t)group * hd * sizeof(float));
					k->pv(out, p, ld, group, keys, ks, n, hd);
					for (int32_t g = 0; g < group; g++)
						for (int32_t d = 0; d < hd; d++) {
							double sum = out0[g * hd + d], mag = fabs(sum);
							for (int32_t t = 0; t < n; t++) {
								double pr = (double)p[g * ld + t] * keys[t * ks + d];
								sum += pr;
								mag += fabs(pr);
							}
							CHECK(close_to(out[g * hd + d], sum, mag, 1e-5),
							      "%s pv group=%d hd=%d n=%d vs=%lld out[%d][%d] = %.9g, want %.9g", k->isa, group, hd, n,
							      (long long)ks, g, d, out[g * hd + d], sum);
						}
					free(q);
					free(keys);
					free(scores);
					free(p);
					free(out);
					free(out0);
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

/* ---- backend ops: every table (through AAH_CPU_ISA) × 1, 2, 3 threads ---- */

#define MAX_CFG 9

typedef struct backend_set {
	int n;
	aah_backend *b[MAX_CFG];
	char label[MAX_CFG][32];
} backend_set;

/* A CPU backend whose kernels are the table `isa`, or NULL (with a note) when the CPU lacks it. */
static aah_backend *backend_make(const char *isa, int32_t threads)
{
	if (!cpu_kernels_by_name(isa)) {
		printf("note: this CPU lacks %s; its backend is skipped\n", isa);
		return NULL;
	}
	setenv("AAH_CPU_ISA", isa, 1);
	aah_backend_params p = { .n_threads = threads };
	aah_backend *b = aah_backend_cpu_init(&p);
	unsetenv("AAH_CPU_ISA");
	ck_assert_ptr_nonnull(b);
	ck_assert_str_eq(aah_backend_cpu_isa(b), isa);
	ck_assert_str_eq(b->iface.name, "cpu");
	return b;
}

/* Every (isa, threads) the CPU can run; threads_mask bit t-1 selects t threads. */
static void backends_open(backend_set *s, unsigned threads_mask)
{
	s->n = 0;
	for (int i = 0; i < 3; i++)
		for (int32_t t = 1; t <= 3; t++) {
			if (!(threads_mask & (1u << (t - 1))))
				continue;
			aah_backend *b = backend_make(isa_names[i], t);
			if (!b)
				break;
			s->b[s->n] = b;
			snprintf(s->label[s->n], sizeof s->label[s->n], "%s/%dt", isa_names[i], t);
			s->n++;
		}
	ck_assert_int_ge(s->n, 1);
}

static void backends_close(backend_set *s)
{
	for (int i = 0; i < s->n; i++)
		s->b[i]->iface.free(s->b[i]);
	s->n = 0;
}

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

/* ---- attention over paged rings against dense masked attention ---- */

#define MAX_SEQS 4
#define MAX_KV 8
#define MAX_HEADS 8

/* The probe's distance bands: the reference keeps the mass of fine bands split at every edge any test uses, and
 * a test's coarser bands (edges a subset of these) sum them. */
#define N_FINE 7
static const int32_t fine_edges[N_FINE - 1] = { 1, 4, 8, 16, 20, 64 };

static int fine_band(int64_t d)
{
	int b = 0;
	while (b < N_FINE - 1 && d >= fine_edges[b])
		b++;
	return b;
}

/* Band configurations by sequence: 5 bands, 1 band, no probe, 3 bands. */
static const int32_t band_edges_5[4] = { 1, 4, 16, 64 }, band_edges_3[2] = { 8, 20 }, band_edges_1[1] = { 0 };
static const int32_t band_n[4] = { 5, 1, 0, 3 };
static const int32_t *const band_edges_of[4] = { band_edges_5, band_edges_1, NULL, band_edges_3 };

/* One sequence of an attention scenario: its whole history (q, k, v), the reference output and work, the
 * windows, capacities and hand-built rings of its KV heads, and the chunk sizes it is fed in. */
typedef struct attn_seq_data {
	int32_t len;
	int32_t chunks[5];            /* chunk sizes, cycled */
	int32_t windows[MAX_KV], caps[MAX_KV], n_slots[MAX_KV];
	int32_t *rings;               /* (n_kv, ring_stride) */
	float *q;                     /* (len, n_heads, hd) */
	float *k, *v;                 /* (len, n_kv, hd) */
	double *ref;                  /* (len, n_heads, hd) */
	uint64_t *ref_work;           /* (len) keys attended by all heads of the query at that position */
	double *ref_band;             /* (len, n_heads, N_FINE) attention mass by key distance */
	int32_t done;                 /* positions fed so far */
	int32_t next_chunk;
} attn_seq_data;

typedef struct attn_scenario {
	int32_t n_heads, n_kv, hd;
	aah_dtype pool_type;
	int32_t n_seqs;
	int32_t ring_stride;
	attn_seq_data s[MAX_SEQS];
	aah_kv_pool pool;
	unsigned char *pool_init;     /* the pool's bytes before the run */
	size_t pool_bytes;
} attn_scenario;

/* Dense reference: query at p, head h attends keys max(0, p-W+1) … p of KV head h / group, softmax(q·k·scale). */
static void attn_reference(attn_scenario *sc, attn_seq_data *d, float scale)
{
	const int32_t nh = sc->n_heads, nkv = sc->n_kv, hd = sc->hd, group = nh / nkv;
	double *w = malloc((size_t)d->len * sizeof(double));
	for (int32_t p = 0; p < d->len; p++) {
		uint64_t work = 0;
		for (int32_t h = 0; h < nh; h++) {
			const int32_t kvh = h / group, W = d->windows[kvh];
			const int32_t first = p - W + 1 > 0 ? p - W + 1 : 0;
			const float *q = d->q + ((int64_t)p * nh + h) * hd;
			double mx = -INFINITY, sum = 0;
			for (int32_t t = first; t <= p; t++) {
				const float *k = d->k + ((int64_t)t * nkv + kvh) * hd;
				double s = 0;
				for (int32_t i = 0; i < hd; i++)
					s += (double)q[i] * k[i];
				w[t] = s * scale;
				if (w[t] > mx)
					mx = w[t];
			}
			for (int32_t t = first; t <= p; t++) {
				w[t] = exp(w[t] - mx);
				sum += w[t];
			}
			double *o = d->ref + ((int64_t)p * nh + h) * hd;
			for (int32_t i = 0; i < hd; i++)
				o[i] = 0;
			double *band = d->ref_band + ((int64_t)p * nh + h) * N_FINE;
			for (int32_t f = 0; f < N_FINE; f++)
				band[f] = 0;
			for (int32_t t = first; t <= p; t++) {
				const float *v = d->v + ((int64_t)t * nkv + kvh) * hd;
				for (int32_t i = 0; i < hd; i++)
					o[i] += w[t] / sum * v[i];
				band[fine_band(p - t)] += w[t] / sum;
			}
			work += (uint64_t)(p - first + 1);
		}
		d->ref_work[p] = work;
	}
	free(w);
}

static void pool_fill_nan(aah_kv_pool *pool, size_t elems)
{
	for (size_t i = 0; i < elems; i++) {
		if (pool->type == AAH_DTYPE_F32)
			((float *)pool->data)[i] = NAN;
		else
			((uint16_t *)pool->data)[i] = pool->type == AAH_DTYPE_F16 ? 0x7e00 : 0x7fc0;
	}
}

/* Builds rings of distinct pages (a shuffled pool with a few spare pages), the data and the reference. */
static void scenario_init(attn_scenario *sc, int32_t nh, int32_t nkv, int32_t hd, aah_dtype type, int32_t n_seqs,
                          const int32_t *lens, const int32_t (*chunks)[5], const int32_t (*windows)[MAX_KV],
                          const int32_t (*caps)[MAX_KV])
{
	memset(sc, 0, sizeof *sc);
	sc->n_heads = nh;
	sc->n_kv = nkv;
	sc->hd = hd;
	sc->pool_type = type;
	sc->n_seqs = n_seqs;
	int32_t total_slots = 0, max_slots = 0;
	for (int32_t si = 0; si < n_seqs; si++) {
		attn_seq_data *d = &sc->s[si];
		d->len = lens[si];
		memcpy(d->chunks, chunks[si], sizeof d->chunks);
		for (int32_t h = 0; h < nkv; h++) {
			d->windows[h] = windows[si][h];
			d->caps[h] = caps[si][h];
			ck_assert_int_ge(d->caps[h], d->windows[h]);
			d->n_slots[h] = (d->caps[h] + AAH_PAGE_LEN - 1) / AAH_PAGE_LEN + 1;
			total_slots += d->n_slots[h];
			if (d->n_slots[h] > max_slots)
				max_slots = d->n_slots[h];
		}
	}
	sc->ring_stride = max_slots + 3;   /* rings need not be packed */
	const int32_t n_pages = total_slots + 7;
	int32_t *perm = malloc((size_t)n_pages * sizeof *perm);
	for (int32_t i = 0; i < n_pages; i++)
		perm[i] = i;
	for (int32_t i = n_pages - 1; i > 0; i--) {
		int32_t j = (int32_t)(rng_u64() % (uint64_t)(i + 1)), tmp = perm[i];
		perm[i] = perm[j];
		perm[j] = tmp;
	}
	int32_t used = 0;
	for (int32_t si = 0; si < n_seqs; si++) {
		attn_seq_data *d = &sc->s[si];
		d->rings = malloc((size_t)nkv * (size_t)sc->ring_stride * sizeof *d->rings);
		for (int32_t h = 0; h < nkv; h++)
			for (int32_t r = 0; r < sc->ring_stride; r++)
				d->rings[h * sc->ring_stride + r] = r < d->n_slots[h] ? perm[used++] : -1;
	}
	free(perm);

	sc->pool.type = type;
	sc->pool.head_dim = hd;
	sc->pool.n_pages = n_pages;
	const size_t elems = (size_t)n_pages * 2 * AAH_PAGE_LEN * (size_t)hd;
	sc->pool_bytes = elems * aah_dtype_size(type);
	sc->pool.data = malloc(sc->pool_bytes);
	sc->pool_init = malloc(sc->pool_bytes);
	pool_fill_nan(&sc->pool, elems);   /* a read of a page never written turns the output into NaN */
	memcpy(sc->pool_init, sc->pool.data, sc->pool_bytes);

	const float scale = 1.0f / sqrtf((float)hd);
	for (int32_t si = 0; si < n_seqs; si++) {
		attn_seq_data *d = &sc->s[si];
		d->q = rand_floats((int64_t)d->len * nh * hd, 3.0f);
		d->k = rand_floats((int64_t)d->len * nkv * hd, 1.0f);
		d->v = rand_floats((int64_t)d->len * nkv * hd, 1.0f);
		d->ref = malloc((size_t)d->len * (size_t)nh * (size_t)hd * sizeof(double));
		d->ref_work = malloc((size_t)d->len * sizeof(uint64_t));
		d->ref_band = malloc((size_t)d->len * (size_t)nh * N_FINE * sizeof(double));
		attn_reference(sc, d, scale);
	}
}

static void scenario_free(attn_scenario *sc)
{
	for (int32_t si = 0; si < sc->n_seqs; si++) {
		attn_seq_data *d = &sc->s[si];
		free(d->rings);
		free(d->q);
		free(d->k);
		free(d->v);
		free(d->ref);
		free(d->ref_work);
		free(d->ref_band);
	}
	free(sc->pool.data);
	free(sc->pool_init);
}

/* Feeds every sequence chunk by chunk through attention then kv_store, as the engine does, and compares each
 * step's output and work count with the reference. Finished sequences stay in the call with n_new = 0. */
static void scenario_run(attn_scenario *sc, aah_backend *b, const char *label, double tol)
{
	const int32_t nh = sc->n_heads, nkv = sc->n_kv, hd = sc->hd;
	const float scale = 1.0f / sqrtf((float)hd);
	memcpy(sc->pool.data, sc->pool_init, sc->pool_bytes);
	int32_t max_rows = 0;   /* Σ of each sequence's largest chunk */
	for (int32_t si = 0; si < sc->n_seqs; si++) {
		sc->s[si].done = 0;
		sc->s[si].next_chunk = 0;
		int32_t mx = 0;
		for (int c = 0; c < 5; c++)
			mx = sc->s[si].chunks[c] > mx ? sc->s[si].chunks[c] : mx;
		max_rows += mx;
	}
	float *q = malloc((size_t)max_rows * nh * hd * sizeof(float));
	float *k = malloc((size_t)max_rows * nkv * hd * sizeof(float));
	float *v = malloc((size_t)max_rows * nkv * hd * sizeof(float));
	float *out = malloc((size_t)max_rows * nh * hd * sizeof(float));
	aah_attn_seq seqs[MAX_SEQS];
	float band_mass[MAX_SEQS][MAX_HEADS * 5];
	ck_assert_int_le(nh, MAX_HEADS);
	for (int step = 0;; step++) {
		memset(seqs, 0, sizeof seqs);
		int32_t rows = 0, active = 0;
		for (int32_t j = 0; j < sc->n_seqs; j++) {
			const int32_t si = (j + step) % sc->n_seqs;   /* vary which sequence comes first in the rows */
			attn_seq_data *d = &sc->s[si];
			int32_t n = d->len - d->done;
			int32_t want = d->chunks[d->next_chunk % 5];
			if (n > want)
				n = want;
			aah_attn_seq *s = &seqs[j];
			s->row0 = rows;
			s->n_new = n;
			s->pos0 = d->done;
			s->ring_stride = sc->ring_stride;
			s->rings = d->rings;
			s->n_slots = d->n_slots;
			s->windows = d->windows;
			/* the probe, by sequence (5, 1, no or 3 bands), off every fourth step; band_mass starts nonzero */
			if (band_n[si % 4] > 0 && step % 4 != 3) {
				s->n_bands = band_n[si % 4];
				s->band_edges = band_edges_of[si % 4];
				s->band_mass = band_mass[j];
				for (int32_t e = 0; e < nh * s->n_bands; e++)
					band_mass[j][e] = 0.25f * (float)(e + 1);
			}
			memcpy(q + (int64_t)rows * nh * hd, d->q + (int64_t)d->done * nh * hd, (size_t)n * nh * hd * sizeof(float));
			memcpy(k + (int64_t)rows * nkv * hd, d->k + (int64_t)d->done * nkv * hd,
			       (size_t)n * nkv * hd * sizeof(float));
			memcpy(v + (int64_t)rows * nkv * hd, d->v + (int64_t)d->done * nkv * hd,
			       (size_t)n * nkv * hd * sizeof(float));
			rows += n;
			active += n > 0;
		}
		if (!active)
			break;
		for (int64_t e = 0; e < (int64_t)rows * nh * hd; e++)
			out[e] = SENTINEL;
		/* per-sequence work is added to what seq_work holds; every third step passes NULL */
		uint64_t seq_work[MAX_SEQS], seq_work0[MAX_SEQS];
		for (int32_t j = 0; j < sc->n_seqs; j++)
			seq_work[j] = seq_work0[j] = 1000003ull * (uint64_t)(j + step);
		uint64_t work = b->iface.attention(b, out, q, k, v, &sc->pool, seqs, sc->n_seqs, nh, nkv, scale,
		                                   step % 3 == 2 ? NULL : seq_work);
		uint64_t want_work = 0;
		for (int32_t j = 0; j < sc->n_seqs; j++) {
			const aah_attn_seq *s = &seqs[j];
			const attn_seq_data *d = NULL;
			for (int32_t si = 0; si < sc->n_seqs; si++)
				if (sc->s[si].rings == s->rings)
					d = &sc->s[si];
			uint64_t want_seq = 0;
			for (int32_t i = 0; i < s->n_new; i++)
				want_seq += d->ref_work[s->pos0 + i];
			want_work += want_seq;
			if (step % 3 == 2)
				CHECK(seq_work[j] == seq_work0[j], "%s attention step %d wrote seq_work", label, step);
			else
				CHECK(seq_work[j] - seq_work0[j] == want_seq, "%s attention step %d: seq_work[%d] += %llu, want %llu",
				      label, step, j, (unsigned long long)(seq_work[j] - seq_work0[j]), (unsigned long long)want_seq);
			/* the probe: Σ over this chunk's rows of each head's mass per band, on top of what was there */
			for (int32_t h = 0; h < nh && s->band_mass; h++) {
				double want_band[5] = { 0 };
				for (int32_t i = 0; i < s->n_new; i++)
					for (int32_t f = 0; f < N_FINE; f++) {
						int32_t lower = f == 0 ? 0 : fine_edges[f - 1], cb = 0;
						while (cb < s->n_bands - 1 && lower >= s->band_edges[cb])
							cb++;
						want_band[cb] += d->ref_band[((int64_t)(s->pos0 + i) * nh + h) * N_FINE + f];
					}
				for (int32_t b2 = 0; b2 < s->n_bands; b2++) {
					const int32_t e = h * s->n_bands + b2;
					double got = (double)s->band_mass[e] - 0.25 * (e + 1);
					CHECK(fabs(got - want_band[b2]) <= tol * (1.0 + want_band[b2]),
					      "%s attention step %d: pos %d n_new %d head %d band %d of %d: mass %.7g, want %.7g", label, step,
					      s->pos0, s->n_new, h, b2, s->n_bands, got, want_band[b2]);
				}
			}
			for (int32_t i = 0; i < s->n_new; i++) {
				const int32_t p = s->pos0 + i;
				for (int32_t h = 0; h < nh; h++)
					for (int32_t e = 0; e < hd; e++) {
						float got = out[((int64_t)(s->row0 + i) * nh + h) * hd + e];
						double ref = d->ref[((int64_t)p * nh + h) * hd + e];
						CHECK(close_to(got, ref, 1.0 + fabs(ref), tol),
						      "%s attention %s nh=%d nkv=%d hd=%d step %d: seq pos %d (chunk at %d, n_new %d) "
						      "head %d [%d] = %.9g, want %.9g",
						      label, aah_dtype_name(sc->pool_type), nh, nkv, hd, step, p, s->pos0, s->n_new, h,
						      e, got, ref);
					}
			}
		}
		CHECK(work == want_work, "%s attention step %d: work %llu, want %llu", label, step,
		      (unsigned long long)work, (unsigned long long)want_work);
		b->iface.kv_store(b, &sc->pool, k, v, seqs, sc->n_seqs, nkv);
		for (int32_t si = 0; si < sc->n_seqs; si++) {
			attn_seq_data *d = &sc->s[si];
			if (d->done < d->len) {
				int32_t n = d->len - d->done, want = d->chunks[d->next_chunk % 5];
				d->done += n < want ? n : want;
				d->next_chunk++;
			}
		}
	}
	/* pages outside every ring were never written */
	const size_t page_bytes = 2 * AAH_PAGE_LEN * (size_t)hd * aah_dtype_size(sc->pool_type);
	char *in_ring = calloc((size_t)sc->pool.n_pages, 1);
	for (int32_t si = 0; si < sc->n_seqs; si++)
		for (int32_t h = 0; h < nkv; h++)
			for (int32_t r = 0; r < sc->s[si].n_slots[h]; r++)
				in_ring[sc->s[si].rings[h * sc->ring_stride + r]] = 1;
	for (int32_t pg = 0; pg < sc->pool.n_pages; pg++)
		if (!in_ring[pg])
			CHECK(!memcmp((char *)sc->pool.data + pg * page_bytes, sc->pool_init + pg * page_bytes, page_bytes),
			      "%s kv_store wrote page %d, which is in no ring", label, pg);
	free(in_ring);
	free(q);
	free(k);
	free(v);
	free(out);
}

typedef struct head_cfg {
	int32_t nh, nkv, hd;
} head_cfg;

/* group sizes 1, 2, 3, 4 and MQA (4, 8); head_dim 40 and 16 exercise the SIMD tails, 32, 64 and 128 the
 * register-blocked attention paths */
static const head_cfg head_cfgs[] = { { 4, 4, 64 }, { 4, 2, 40 }, { 8, 2, 64 }, { 4, 1, 40 },
	                                  { 6, 3, 16 }, { 6, 2, 128 }, { 8, 1, 32 } };

static const int32_t attn_lens[MAX_SEQS] = { 330, 317, 301, 310 };
static const int32_t attn_chunks[MAX_SEQS][5] = {
	{ 1, 5, 16, 37, 100 }, { 100, 37, 16, 5, 1 }, { 5, 1, 37, 16, 100 }, { 250, 1, 16, 5, 37 },
};

/* Windows 8, 20, 64 per KV head, rotated per sequence; capacities equal to the window or above it. */
static void windowed_params(int32_t nkv, int32_t (*windows)[MAX_KV], int32_t (*caps)[MAX_KV])
{
	static const int32_t w3[3] = { 8, 20, 64 }, extra[3] = { 0, 20, 3 };
	for (int32_t si = 0; si < MAX_SEQS; si++)
		for (int32_t h = 0; h < nkv; h++) {
			windows[si][h] = w3[(h + si) % 3];
			caps[si][h] = windows[si][h] + (si == 1 ? 0 : si == 2 ? windows[si][h] : extra[(h + si) % 3]);
		}
}

START_TEST(test_attention_windowed)
{
	const head_cfg *hc = &head_cfgs[_i];
	rng_seed(1000 + (uint64_t)_i);
	int32_t windows[MAX_SEQS][MAX_KV], caps[MAX_SEQS][MAX_KV];
	windowed_params(hc->nkv, windows, caps);
	attn_scenario sc;
	scenario_init(&sc, hc->nh, hc->nkv, hc->hd, AAH_DTYPE_F32, MAX_SEQS, attn_lens, attn_chunks,
	              (const int32_t(*)[MAX_KV])windows, (const int32_t(*)[MAX_KV])caps);
	backend_set bs;
	backends_open(&bs, 7);
	for (int bi = 0; bi < bs.n; bi++)
		scenario_run(&sc, bs.b[bi], bs.label[bi], 1e-4);
	backends_close(&bs);
	scenario_free(&sc);
}
END_TEST

/* f16 and bf16 pools: the history read back from the pages is rounded, so the tolerance is looser. */
START_TEST(test_attention_pool_types)
{
	const aah_dtype t = _i < 2 ? AAH_DTYPE_F16 : AAH_DTYPE_BF16;
	const head_cfg *hc = &head_cfgs[_i % 2 ? 3 : 2];
	rng_seed(1100 + (uint64_t)_i);
	int32_t windows[MAX_SEQS][MAX_KV], caps[MAX_SEQS][MAX_KV];
	windowed_params(hc->nkv, windows, caps);
	attn_scenario sc;
	scenario_init(&sc, hc->nh, hc->nkv, hc->hd, t, MAX_SEQS, attn_lens, attn_chunks,
	              (const int32_t(*)[MAX_KV])windows, (const int32_t(*)[MAX_KV])caps);
	backend_set bs;
	backends_open(&bs, 2 | 4);
	for (int bi = 0; bi < bs.n; bi++)
		scenario_run(&sc, bs.b[bi], bs.label[bi], 1e-2);
	backends_close(&bs);
	scenario_free(&sc);
}
END_TEST

/* Every window ≥ the sequence: the reference is plain causal attention over the whole history. */
START_TEST(test_attention_full_causal)
{
	const head_cfg *hc = &head_cfgs[_i];
	rng_seed(1200 + (uint64_t)_i);
	int32_t windows[MAX_SEQS][MAX_KV], caps[MAX_SEQS][MAX_KV];
	for (int32_t si = 0; si < MAX_SEQS; si++)
		for (int32_t h = 0; h < hc->nkv; h++) {
			windows[si][h] = si == 3 ? attn_lens[si] : 1000;   /* equal to the length, or above it */
			caps[si][h] = windows[si][h] + (h % 2) * 16;
		}
	attn_scenario sc;
	scenario_init(&sc, hc->nh, hc->nkv, hc->hd, AAH_DTYPE_F32, MAX_SEQS, attn_lens, attn_chunks,
	              (const int32_t(*)[MAX_KV])windows, (const int32_t(*)[MAX_KV])caps);
	/* the reference built with these windows is the causal one: every key 0 … p */
	for (int32_t si = 0; si < MAX_SEQS; si++)
		for (int32_t p = 0; p < sc.s[si].len; p++)
			CHECK(sc.s[si].ref_work[p] == (uint64_t)(p + 1) * (uint64_t)hc->nh, "reference work at %d", p);
	backend_set bs;
	backends_open(&bs, 1 | 2);
	for (int bi = 0; bi < bs.n; bi++)
		scenario_run(&sc, bs.b[bi], bs.label[bi], 1e-4);
	backends_close(&bs);
	scenario_free(&sc);
}
END_TEST

/* A single query row with one key (position 0) returns v exactly; the work count is n_heads. */
START_TEST(test_attention_first_token)
{
	backend_set bs;
	backends_open(&bs, 1);
	rng_seed(1300);
	const int32_t nh = 4, nkv = 2, hd = 32;
	float *q = rand_floats(nh * hd, 1.0f), *k = rand_floats(nkv * hd, 1.0f), *v = rand_floats(nkv * hd, 1.0f);
	float out[4 * 32];
	int32_t rings[2] = { 0, 1 }, slots[2] = { 1, 1 }, win[2] = { 16, 16 };
	aah_kv_pool pool = { malloc(2 * 2 * AAH_PAGE_LEN * hd * sizeof(float)), AAH_DTYPE_F32, 2, hd };
	aah_attn_seq s = { .row0 = 0, .n_new = 1, .pos0 = 0, .ring_stride = 1, .rings = rings, .n_slots = slots,
	                   .windows = win };
	for (int bi = 0; bi < bs.n; bi++) {
		aah_backend *b = bs.b[bi];
		uint64_t sw = 5;
		ck_assert_uint_eq(b->iface.attention(b, out, q, k, v, &pool, &s, 1, nh, nkv, 0.125f, &sw), (uint64_t)nh);
		ck_assert_uint_eq(sw, 5 + (uint64_t)nh);
		for (int32_t h = 0; h < nh; h++)
			for (int32_t e = 0; e < hd; e++)
				CHECK(out[h * hd + e] == v[(h / 2) * hd + e], "%s first token head %d [%d]", bs.label[bi], h, e);
		/* kv_store writes row 0 of each head's page */
		b->iface.kv_store(b, &pool, k, v, &s, 1, nkv);
		for (int32_t h = 0; h < nkv; h++) {
			const float *pg = (const float *)pool.data + (size_t)rings[h] * 2 * AAH_PAGE_LEN * hd;
			ck_assert_mem_eq(pg, k + h * hd, hd * sizeof(float));
			ck_assert_mem_eq(pg + AAH_PAGE_LEN * hd, v + h * hd, hd * sizeof(float));
		}
	}
	free(pool.data);
	free(q);
	free(k);
	free(v);
	backends_close(&bs);
}
END_TEST

/* The probe with one band per key distance 0 … 18 and a last band for 19 and beyond: every band gets its own
 * mass, however many bands there are (backend.h sets no limit). */
START_TEST(test_attention_many_bands)
{
	enum { NH = 2, HD = 16, N = 40, NB = 20 };
	backend_set bs;
	backends_open(&bs, 1 | 2);
	rng_seed(1350);
	float *q = rand_floats(N * NH * HD, 3.0f), *k = rand_floats(N * HD, 1.0f), *v = rand_floats(N * HD, 1.0f);
	float *out = malloc(N * NH * HD * sizeof(float));
	int32_t edges[NB - 1];
	for (int32_t b = 0; b < NB - 1; b++)
		edges[b] = b + 1;
	double want[NH][NB] = { { 0 } };
	for (int32_t p = 0; p < N; p++)
		for (int32_t h = 0; h < NH; h++) {
			double w[N], mx = -INFINITY, sum = 0;
			for (int32_t t = 0; t <= p; t++) {
				double d = 0;
				for (int32_t e = 0; e < HD; e++)
					d += (double)q[(p * NH + h) * HD + e] * k[t * HD + e];
				w[t] = d * 0.25;
				mx = w[t] > mx ? w[t] : mx;
			}
			for (int32_t t = 0; t <= p; t++)
				sum += (w[t] = exp(w[t] - mx));
			for (int32_t t = 0; t <= p; t++)
				want[h][p - t < NB - 1 ? p - t : NB - 1] += w[t] / sum;
		}
	int32_t ring[4] = { 0, 1, 2, 3 }, slots[1] = { 4 }, win[1] = { 64 };
	aah_kv_pool pool = { NULL, AAH_DTYPE_F32, 4, HD };
	for (int bi = 0; bi < bs.n; bi++) {
		float mass[NH * NB] = { 0 };
		aah_attn_seq s = { .row0 = 0, .n_new = N, .pos0 = 0, .ring_stride = 4, .rings = ring, .n_slots = slots,
		                   .windows = win, .band_mass = mass, .band_edges = edges, .n_bands = NB };
		bs.b[bi]->iface.attention(bs.b[bi], out, q, k, v, &pool, &s, 1, NH, 1, 0.25f, NULL);
		for (int32_t h = 0; h < NH; h++)
			for (int32_t b = 0; b < NB; b++)
				CHECK(fabs(mass[h * NB + b] - want[h][b]) <= 1e-4 * (1 + want[h][b]),
				      "%s %d bands: head %d band %d mass %.7g, want %.7g", bs.label[bi], NB, h, b, mass[h * NB + b],
				      want[h][b]);
	}
	free(q);
	free(k);
	free(v);
	free(out);
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
	tcase_add_loop_test(tc, test_dot_axpy, 0, 3);
	tcase_add_loop_test(tc, test_qk_pv, 0, 3);
	tcase_add_loop_test(tc, test_to_f32, 0, 3);
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

	tc = tcase_create("attention");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_attention_first_token);
	tcase_add_loop_test(tc, test_attention_windowed, 0, (int)(sizeof head_cfgs / sizeof head_cfgs[0]));
	tcase_add_loop_test(tc, test_attention_pool_types, 0, 4);
	tcase_add_loop_test(tc, test_attention_full_causal, 0, 2);
	tcase_add_test(tc, test_attention_many_bands);
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
