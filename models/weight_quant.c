/* models/weight_quant.c — load-time quantization (weight_quant.h). */
#include "models/weight_quant.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"

int weight_mix_parse(const char *name, weight_mix *out)
{
	static const struct { const char *name; weight_mix mix; } rows[] = {
		{ "q8_0", { AAH_DTYPE_Q8_0, 0, 0 } },
		{ "q4_0", { AAH_DTYPE_Q4_0, 0, 1 } },
		{ "q4_k_m", { AAH_DTYPE_Q4_K, 1, 1 } },
		{ "q5_k_m", { AAH_DTYPE_Q5_K, 1, 1 } },
		{ "q4_k", { AAH_DTYPE_Q4_K, 0, 0 } },
		{ "q5_k", { AAH_DTYPE_Q5_K, 0, 0 } },
		{ "q6_k", { AAH_DTYPE_Q6_K, 0, 0 } },
	};
	for (size_t i = 0; name && i < sizeof rows / sizeof rows[0]; i++)
		if (!strcmp(name, rows[i].name)) {
			*out = rows[i].mix;
			return 0;
		}
	return -1;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third one between. */
static int use_more_bits(int32_t i, int32_t n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

aah_dtype weight_mix_type(const weight_mix *mix, weight_role role, int32_t layer, int32_t n_layers, int64_t cols,
                          aah_dtype own)
{
	aah_dtype t = mix->base;
	if (role == WEIGHT_OUTPUT && mix->head_q6_k)
		t = AAH_DTYPE_Q6_K;
	else if (mix->medium && (role == WEIGHT_ATTN_V || role == WEIGHT_FFN_DOWN) && use_more_bits(layer, n_layers))
		t = AAH_DTYPE_Q6_K;
	if (!aah_dtype_row_bytes(t, cols))   /* rows not whole super-blocks: llama.cpp falls back too */
		t = aah_dtype_row_bytes(AAH_DTYPE_Q8_0, cols) ? AAH_DTYPE_Q8_0 : own;
	return t;
}

typedef struct quant_job {
	void *dst;
	aah_dtype t, st;
	const void *src;
	int64_t rows, cols, r0, r1;
} quant_job;

static void *quant_worker(void *p)
{
	quant_job *j = p;
	float *row = malloc((size_t)j->cols * sizeof *row);
	if (!row)
		return p;   /* non-NULL: failed */
	const size_t sb = (size_t)j->cols * aah_dtype_size(j->st), db = aah_dtype_row_bytes(j->t, j->cols);
	for (int64_t r = j->r0; r < j->r1; r++) {
		aah_dequantize_row(j->st, row, (const char *)j->src + (size_t)r * sb, j->cols);   /* exact widening */
		aah_quantize_row_ref(j->t, (char *)j->dst + (size_t)r * db, row, j->cols);
	}
	free(row);
	return NULL;
}

int weight_quantize_rows(void *dst, aah_dtype t, const void *src, aah_dtype st, int64_t rows, int64_t cols,
                         int32_t n_threads)
{
	enum { MAX_QT = 64 };
	int32_t n = n_threads < 1 ? 1 : n_threads > MAX_QT ? MAX_QT : n_threads;
	if (rows < n)
		n = rows < 1 ? 1 : (int32_t)rows;
	quant_job jobs[MAX_QT];
	pthread_t th[MAX_QT];
	int rc = 0, started = 0;
	for (int32_t i = 0; i < n; i++)
		jobs[i] = (quant_job){ dst, t, st, src, rows, cols, rows * i / n, rows * (i + 1) / n };
	for (int32_t i = 1; i < n; i++, started++)
		if (pthread_create(&th[i], NULL, quant_worker, &jobs[i]) != 0) {
			rc = -1;
			break;
		}
	if (quant_worker(&jobs[0]))
		rc = -1;
	for (int32_t i = 1; i <= started; i++) {
		void *res;
		pthread_join(th[i], &res);
		if (res)
			rc = -1;
	}
	return rc;
}
