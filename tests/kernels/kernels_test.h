/* tests/kernels/kernels_test.h — what the CPU kernel suites share (check_kernels.c, check_attention.c): a seeded generator,
 * bit casts, stored weights with their exact f32 values, tolerances, and CPU backends for every table and thread count.
 * Included once per suite. */
#ifndef AAH_KERNELS_TEST_H
#define AAH_KERNELS_TEST_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/test_rng.h"

/* ---- helpers: a seeded generator, bit casts, stored weights with their exact f32 values ---- */

static inline void rng_seed(uint64_t s)
{
	rng_state = s;
}

static inline uint32_t f2u(float f)
{
	union { float f; uint32_t u; } v = { .f = f };
	return v.u;
}

static inline float u2f(uint32_t u)
{
	union { uint32_t u; float f; } v = { .u = u };
	return v.f;
}

/* The same value as a float, bit for bit, or both NaN. */
static inline int same_float(float a, float b)
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
static inline float store_elem(void *w, aah_dtype t, int64_t i, float f)
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

static inline void wmat_init(wmat *m, aah_dtype t, int64_t rows, int64_t cols, float amp)
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

static inline void wmat_free(wmat *m)
{
	free(m->data);
	free(m->deq);
}

static inline float *rand_floats(int64_t n, float amp)
{
	float *p = malloc(n > 0 ? (size_t)n * sizeof(float) : 1);
	ck_assert_ptr_nonnull(p);
	for (int64_t i = 0; i < n; i++)
		p[i] = amp * rng_f();
	return p;
}

/* |got - ref| ≤ rel · mag, where mag bounds the terms of the sum (Σ|x·w|), plus a denormal's worth. */
static inline int close_to(double got, double ref, double mag, double rel)
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

static inline const cpu_kernels *table_or_skip(int i)
{
	const cpu_kernels *k = cpu_kernels_by_name(isa_names[i]);
	if (!k)
		printf("note: this CPU lacks %s; its kernel table is skipped\n", isa_names[i]);
	else
		ck_assert_str_eq(k->isa, isa_names[i]);
	return k;
}

/* ---- CPU backends: every table (through AAH_CPU_ISA) × 1, 2, 3 threads ---- */

#define MAX_CFG 9

typedef struct backend_set {
	int n;
	aah_backend *b[MAX_CFG];
	char label[MAX_CFG][32];
} backend_set;

/* A CPU backend whose kernels are the table `isa`, or NULL (with a note) when the CPU lacks it. */
static inline aah_backend *backend_make(const char *isa, int32_t threads)
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
static inline void backends_open(backend_set *s, unsigned threads_mask)
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

static inline void backends_close(backend_set *s)
{
	for (int i = 0; i < s->n; i++)
		s->b[i]->iface.free(s->b[i]);
	s->n = 0;
}

#endif
