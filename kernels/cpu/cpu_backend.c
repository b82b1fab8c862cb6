/* kernels/cpu/cpu_backend.c — the CPU backend: the reference every other backend is tested against, and the
 * embedded default. Weight matrices are packed into panels at import (cpu_kernels.h), vectors used in place
 * (memory-mapped); activations are f32; loops run on a thread pool. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/argmax.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_bf16dot.h"
#include "kernels/cpu/cpu_ctx.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_qpack.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/quant.h"

static cpu_ctx *ctx_of(aah_backend *b)
{
	return (cpu_ctx *)b->context;
}

bool cpu_scratch_reserve(cpu_ctx *c, size_t n)
{
	for (int32_t i = 0; i < c->n_threads; i++) {
		cpu_scratch *s = &c->scratch[i];
		if (s->cap >= n)
			continue;
		float *p = aligned_alloc(64, ((n * sizeof(float)) + 63) & ~(size_t)63);
		if (!p)
			return false;
		free(s->buf);
		s->buf = p;
		s->cap = n;
	}
	return true;
}

bool cpu_buf_reserve(cpu_buf *b, size_t bytes)
{
	if (b->cap >= bytes)
		return true;
	void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (!p)
		return false;
	free(b->p);
	b->p = p;
	b->cap = bytes;
	return true;
}

void cpu_split_range(int64_t n, int64_t align, int32_t i, int32_t nt, int64_t *lo, int64_t *hi)
{
	int64_t blocks = (n + align - 1) / align;
	int64_t b0 = blocks * i / nt, b1 = blocks * (i + 1) / nt;
	*lo = b0 * align < n ? b0 * align : n;
	*hi = b1 * align < n ? b1 * align : n;
}

/* ---- memory ---- */

static void *cpu_buf_alloc(aah_backend *b, size_t bytes)
{
	return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static void cpu_buf_free(aah_backend *b, void *p)
{
	free(p);
}

static void cpu_buf_copy(aah_backend *b, void *dst, const void *src, size_t bytes)
{
	memcpy(dst, src, bytes);
}

typedef struct pack_job {
	void *dst;
	const void *src;
	aah_dtype type;
	int64_t rows, cols;
} pack_job;

static void pack_worker(void *p, int32_t ti, int32_t nt)
{
	pack_job *j = p;
	int64_t lo, hi;
	cpu_split_range((j->rows + CPU_PANEL - 1) / CPU_PANEL, 1, ti, nt, &lo, &hi);
	cpu_pack_panels(j->dst, j->src, j->type, j->rows, j->cols, lo, hi);
}

/* Groups [lo, hi) of a block-quantized matrix packed (cpu_qpack.h). */
static void qpack_worker(void *p, int32_t ti, int32_t nt)
{
	pack_job *j = p;
	const int64_t groups = (j->rows + CPU_QPACK_ROWS - 1) / CPU_QPACK_ROWS;
	const size_t gs = cpu_qpack_group_bytes(j->type, j->cols), rs = aah_dtype_row_bytes(j->type, j->cols);
	int64_t lo, hi;
	cpu_split_range(groups, 1, ti, nt, &lo, &hi);
	for (int64_t g = lo; g < hi; g++) {
		const int64_t r0 = g * CPU_QPACK_ROWS;
		cpu_qpack_group(j->type, (char *)j->dst + (size_t)g * gs, (const char *)j->src + (size_t)r0 * rs, rs,
		                j->rows - r0 < CPU_QPACK_ROWS ? (int)(j->rows - r0) : CPU_QPACK_ROWS, j->cols);
	}
}

/* Matrices (more than one row) are packed into panels, a copy; vectors are used in place. */
static int cpu_weight_import(aah_backend *b, aah_tensor *out, const void *host, aah_dtype type, int64_t rows,
                             int64_t cols)
{
	*out = (aah_tensor){ (void *)host, type, rows, cols, 0 };
	const bool blocks = aah_dtype_is_quantized(type);
	/* Block types: matrices of whole blocks per row only (never a vector: rmsnorm reads floats), and never Q8_K */
	if (blocks && (rows <= 1 || type == AAH_DTYPE_Q8_K || !aah_dtype_row_bytes(type, cols)))
		return -1;
	if (rows <= 1)
		return 0;
	cpu_ctx *c = ctx_of(b);
	const bool qpack = blocks && c->qpack_kernel && c->qpack_kernel(type);
	const int64_t groups = (rows + CPU_QPACK_ROWS - 1) / CPU_QPACK_ROWS;
	/* 2 MiB aligned and advised into huge pages: a 4B model's 8 GB fault in 4096 pieces instead of 2 million */
	const size_t huge = 2u << 20,
	             bytes = qpack ? (size_t)groups * cpu_qpack_group_bytes(type, cols)
	                     : blocks ? (size_t)rows * aah_dtype_row_bytes(type, cols)
	                              : (size_t)cpu_packed_elems(type, rows, cols) * aah_dtype_size(type);
	void *data = bytes >= huge ? aligned_alloc(huge, (bytes + huge - 1) & ~(huge - 1))
	                           : aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (!data)
		return -1;
	if (bytes >= huge)
		(void)madvise(data, (bytes + huge - 1) & ~(huge - 1), MADV_HUGEPAGE);   /* a hint: no harm if refused */
	out->data = data;
	if (qpack) {
		pack_job j = { data, host, type, rows, cols };
		threadpool_run(c->tp, qpack_worker, &j);
		out->layout = CPU_LAYOUT_QPACK;
		return 0;
	}
	if (blocks) {   /* the blocks as they are: the dots read them in file order (cpu_quant.h) */
		memcpy(data, host, bytes);
		out->layout = CPU_LAYOUT_BLOCKS;
		return 0;
	}
	pack_job j = { data, host, type, rows, cols };
	threadpool_run(c->tp, pack_worker, &j);
	out->layout = CPU_LAYOUT_PANELS;
	return 0;
}

static void cpu_weight_release(aah_backend *b, aah_tensor *t)
{
	if (t->layout == CPU_LAYOUT_PANELS || t->layout == CPU_LAYOUT_BLOCKS || t->layout == CPU_LAYOUT_QPACK)
		free(t->data);
	t->data = NULL;
	t->layout = 0;
}

static void cpu_synchronize(aah_backend *b)
{
}

/* ---- element-wise and row ops ---- */

static void cpu_get_rows(aah_backend *b, float *out, const aah_tensor *table, const int32_t *ids, int32_t n)
{
	const cpu_kernels *k = ctx_of(b)->k;
	const int64_t K = table->cols;
	if (table->layout == CPU_LAYOUT_QPACK) {   /* a packed embedding: its rows' blocks unpacked, then dequantized */
		cpu_ctx *c = ctx_of(b);
		const size_t row_bytes = aah_dtype_row_bytes(table->type, K), gs = cpu_qpack_group_bytes(table->type, K);
		if (!cpu_buf_reserve(&c->qrow, row_bytes))
			abort();   /* one row's blocks: out of memory here is not recoverable */
		for (int32_t i = 0; i < n; i++) {
			cpu_qpack_unpack_row(table->type, c->qrow.p, (const char *)table->data + (size_t)(ids[i] / CPU_QPACK_ROWS) * gs,
			                     ids[i] % CPU_QPACK_ROWS, K);
			aah_dequantize_row(table->type, out + (int64_t)i * K, c->qrow.p, K);
		}
		return;
	}
	if (table->layout == CPU_LAYOUT_BLOCKS) {   /* a quantized embedding: its rows dequantized exactly */
		const size_t row_bytes = aah_dtype_row_bytes(table->type, K);
		for (int32_t i = 0; i < n; i++)
			aah_dequantize_row(table->type, out + (int64_t)i * K, (const char *)table->data + (size_t)ids[i] * row_bytes,
			                   K);
		return;
	}
	if (table->layout == CPU_LAYOUT_PANELS) {
		for (int32_t i = 0; i < n; i++)
			for (int64_t kk = 0; kk < K; kk++) {
				int64_t at = cpu_packed_index(table->type, K, ids[i], kk);
				out[(int64_t)i * K + kk] = table->type == AAH_DTYPE_F32 ? ((const float *)table->data)[at]
				                           : table->type == AAH_DTYPE_BF16
				                               ? cpu_bf16_to_f32(((const uint16_t *)table->data)[at])
				                               : cpu_f16_to_f32(((const uint16_t *)table->data)[at]);
			}
		return;
	}
	size_t row_bytes = (size_t)K * aah_dtype_size(table->type);
	for (int32_t i = 0; i < n; i++)
		k->to_f32(out + (int64_t)i * K, (const char *)table->data + (size_t)ids[i] * row_bytes, table->type, K);
}

typedef struct rmsnorm_job {
	float *out;
	const float *x;
	const aah_tensor *w;
	int32_t n_rows;
	float eps;
	const cpu_kernels *k;
	cpu_ctx *c;
} rmsnorm_job;

static void rmsnorm_worker(void *p, int32_t ti, int32_t nt)
{
	rmsnorm_job *j = p;
	const int64_t d = j->w->cols;
	float *wf = j->c->scratch[ti].buf;   /* the weight as f32 */
	j->k->to_f32(wf, j->w->data, j->w->type, d);
	int64_t lo, hi;
	cpu_split_range(j->n_rows, 1, ti, nt, &lo, &hi);
	for (int64_t r = lo; r < hi; r++) {
		const float *x = j->x + r * d;
		float *o = j->out + r * d;
		/* a double sum keeps long rows exact to float rounding; eight of them, so that the additions do not wait on
		 * each other (one chain was 5% of a prefill) */
		double s8[8] = { 0 };
		int64_t i = 0;
		for (; i + 8 <= d; i += 8)
			for (int k = 0; k < 8; k++)
				s8[k] += (double)x[i + k] * x[i + k];
		for (; i < d; i++)
			s8[i % 8] += (double)x[i] * x[i];
		const double ss = ((s8[0] + s8[1]) + (s8[2] + s8[3])) + ((s8[4] + s8[5]) + (s8[6] + s8[7]));
		float inv = (float)(1.0 / sqrt(ss / (double)d + (double)j->eps));
		for (i = 0; i < d; i++)
			o[i] = x[i] * inv * wf[i];
	}
}

static void cpu_rmsnorm(aah_backend *b, float *out, const float *x, const aah_tensor *w, int32_t n_rows, float eps)
{
	cpu_ctx *c = ctx_of(b);
	rmsnorm_job j = { out, x, w, n_rows, eps, c->k, c };
	if (!cpu_scratch_reserve(c, (size_t)w->cols))
		abort();   /* a few KB: out of memory here is not recoverable */
	if ((int64_t)n_rows * w->cols < 32768)
		rmsnorm_worker(&j, 0, 1);
	else
		threadpool_run(c->tp, rmsnorm_worker, &j);
}

static void cpu_rope(aah_backend *b, float *x, int32_t n_rows, int32_t n_heads, int32_t head_dim,
                     const int32_t *pos, const float *inv_freq)
{
	const int32_t half = head_dim / 2;
	float cs[512], sn[512];
	for (int32_t r = 0; r < n_rows; r++) {
		for (int32_t j = 0; j < half; j++) {
			double th = (double)pos[r] * (double)inv_freq[j];
			cs[j] = (float)cos(th);
			sn[j] = (float)sin(th);
		}
		for (int32_t h = 0; h < n_heads; h++) {
			float *v = x + ((int64_t)r * n_heads + h) * head_dim;
			for (int32_t j = 0; j < half; j++) {
				float a = v[j], bb = v[j + half];
				v[j] = a * cs[j] - bb * sn[j];
				v[j + half] = a * sn[j] + bb * cs[j];
			}
		}
	}
}

/* The element-wise steps: a prefill's are large (512 tokens × 3072 for the 0.6B shape's SwiGLU), so they are split
 * among the workers (each element computed the same way wherever it runs); a decode step's stay on this thread. */
#define ELEMENTWISE_PARALLEL 32768

typedef struct elementwise_job {
	float *out;
	const float *a, *b;
	int64_t n;
} elementwise_job;

static void swiglu_range(float *out, const float *gate, const float *up, int64_t lo, int64_t hi)
{
	for (int64_t i = lo; i < hi; i++) {
		float g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

static void swiglu_worker(void *p, int32_t ti, int32_t nt)
{
	elementwise_job *j = p;
	int64_t lo, hi;
	cpu_split_range(j->n, 16, ti, nt, &lo, &hi);
	swiglu_range(j->out, j->a, j->b, lo, hi);
}

static void cpu_swiglu(aah_backend *b, float *out, const float *gate, const float *up, int64_t n)
{
	elementwise_job j = { out, gate, up, n };
	if (n < ELEMENTWISE_PARALLEL)
		swiglu_range(out, gate, up, 0, n);
	else
		threadpool_run(ctx_of(b)->tp, swiglu_worker, &j);
}

static void add_worker(void *p, int32_t ti, int32_t nt)
{
	elementwise_job *j = p;
	int64_t lo, hi;
	cpu_split_range(j->n, 16, ti, nt, &lo, &hi);
	for (int64_t i = lo; i < hi; i++)
		j->out[i] += j->a[i];
}

static void cpu_add(aah_backend *b, float *x, const float *y, int64_t n)
{
	elementwise_job j = { x, y, NULL, n };
	if (n < 4 * ELEMENTWISE_PARALLEL)
		add_worker(&j, 0, 1);
	else
		threadpool_run(ctx_of(b)->tp, add_worker, &j);
}

static void cpu_split_cols(aah_backend *b, float *const *dst, const int32_t *widths, int32_t n_parts, const float *src,
                           int32_t n_rows)
{
	int64_t total = 0;
	for (int32_t p = 0; p < n_parts; p++)
		total += widths[p];
	for (int64_t r = 0; r < n_rows; r++) {
		const float *s = src + r * total;
		for (int32_t p = 0; p < n_parts; p++) {
			memcpy(dst[p] + r * widths[p], s, (size_t)widths[p] * sizeof *s);
			s += widths[p];
		}
	}
}

/* ---- logits post-processing: the reference for a device's, and exactly what sampler.c computes ---- */

/* The candidates' order: larger first, NaN below everything, -0 equal to +0 (ties are broken by id by the caller). */
static bool logit_above(float x, float y)
{
	return !isnan(x) && (isnan(y) || x > y);
}

typedef struct logits_job {
	aah_logits_stats *stats;
	int32_t *top_ids;
	float *top_logits;
	const float *logits;
	int64_t ld;
	int32_t n_rows, n_cols, n_top;
	const float *temperature;
} logits_job;

static void logits_worker(void *p, int32_t ti, int32_t nt)
{
	logits_job *j = p;
	int64_t lo, hi;
	cpu_split_range(j->n_rows, 1, ti, nt, &lo, &hi);
	for (int64_t r = lo; r < hi; r++) {
		const float *l = j->logits + r * j->ld;
		const int32_t n = j->n_cols, k = j->n_top;
		const float t = j->temperature[r] > 0 ? j->temperature[r] : 1.0f;
		float m = -INFINITY;
		for (int32_t i = 0; i < n; i++)
			if (l[i] > m)
				m = l[i];
		/* the same expressions, in the same order, as sampler_sample and the scheduler's logprob_fill */
		const double md = m;
		double sum = 0, sum1 = 0;
		for (int32_t i = 0; i < n; i++) {
			sum += expf((l[i] - m) / t);
			sum1 += exp((double)l[i] - md);
		}
		j->stats[r] = (aah_logits_stats){ .max = m, .sum = sum, .lse = md + log(sum1) };
		/* insertion into a sorted list of k: only strictly above moves up, so equals keep the lower id first */
		int32_t *ids = j->top_ids + r * k;
		float *vals = j->top_logits + r * k;
		int32_t have = 0;
		for (int32_t i = 0; i < n && k > 0; i++) {
			if (have == k && !logit_above(l[i], vals[k - 1]))
				continue;
			int32_t at = have < k ? have++ : k - 1;
			while (at > 0 && logit_above(l[i], vals[at - 1])) {
				ids[at] = ids[at - 1];
				vals[at] = vals[at - 1];
				at--;
			}
			ids[at] = i;
			vals[at] = l[i];
		}
	}
}

static void cpu_logits_top(aah_backend *b, aah_logits_stats *stats, int32_t *top_ids, float *top_logits,
                           const float *logits, int64_t ld, int32_t n_rows, int32_t n_cols, const float *temperature,
                           int32_t n_top)
{
	logits_job j = { stats, top_ids, top_logits, logits, ld, n_rows, n_cols, n_top, temperature };
	if (n_rows <= 1)
		logits_worker(&j, 0, 1);
	else
		threadpool_run(ctx_of(b)->tp, logits_worker, &j);
}

typedef struct argmax_job {
	int32_t *ids;
	const float *const *rows;
	int32_t n_rows, n_cols;
} argmax_job;

static void argmax_worker(void *p, int32_t ti, int32_t nt)
{
	argmax_job *j = p;
	int64_t lo, hi;
	cpu_split_range(j->n_rows, 1, ti, nt, &lo, &hi);
	for (int64_t r = lo; r < hi; r++)
		j->ids[r] = aah_argmax(j->rows[r], j->n_cols);
}

static void cpu_argmax_rows(aah_backend *b, int32_t *ids, const float *const *rows, int32_t n_rows, int32_t n_cols)
{
	argmax_job j = { ids, rows, n_rows, n_cols };
	if (n_rows <= 1)
		argmax_worker(&j, 0, 1);
	else
		threadpool_run(ctx_of(b)->tp, argmax_worker, &j);
}

/* ---- matmul ---- */


typedef struct matmul_job {
	float *out;
	const float *xt;       /* x in groups of panel_rows rows, each group k-major: group g at xt + g·panel_rows·K */
	const uint32_t *xp;    /* or (bf16dot) x as bf16 pairs in such groups: group g at xp + g·panel_rows·⌈K/2⌉ */
	const uint16_t *xb;    /* or (bf16tile) x rounded to bf16, row-major */
	int32_t n;
	const aah_tensor *w;
	const cpu_kernels *k;
	int64_t token_block;   /* activation rows kept hot in L2 while the panels pass (a multiple of panel_rows) */
	int64_t panel_block;   /* panels kept hot in L1/L2 while every group of activation rows passes */
} matmul_job;

/* The panels are split among the workers; each walks them a block at a time, and every group of activation rows
 * (panel_rows) runs over a block before the next: the weights stream from memory once per token block. */
static void matmul_worker(void *p, int32_t ti, int32_t nt)
{
	matmul_job *j = p;
	const int64_t M = j->w->rows, K = j->w->cols, panels = (M + CPU_PANEL - 1) / CPU_PANEL;
	const int32_t NR = j->k->panel_rows;
	int64_t lo, hi;
	cpu_split_range(panels, 1, ti, nt, &lo, &hi);
	for (int64_t tb = 0; tb < j->n; tb += j->token_block) {
		const int64_t te = j->n - tb < j->token_block ? j->n : tb + j->token_block;
		for (int64_t pb = lo; pb < hi; pb += j->panel_block) {
			const int64_t pe = hi - pb < j->panel_block ? hi : pb + j->panel_block;
			for (int64_t i = tb; i < te; i += NR)
				if (j->xb)
					cpu_amx_bf16_panel_mm(j->out + i * M, M, j->xb + i * K, te - i < NR ? (int32_t)(te - i) : NR,
					                      j->w->data, K, M, pb, pe);
				else if (j->xp)
					cpu_bf16dot_panel_mm(j->out + i * M, M, j->xp + i * ((K + 1) / 2),
					                     te - i < NR ? (int32_t)(te - i) : NR, j->w->data, K, M, pb, pe);
				else
					j->k->panel_mm(j->out + i * M, M, j->xt + i * K, te - i < NR ? (int32_t)(te - i) : NR, j->w->data,
				               j->w->type, K, M, pb, pe);
		}
	}
}

static void cpu_matmul(aah_backend *b, float *out, const float *x, int32_t n, const aah_tensor *w)
{
	cpu_ctx *c = ctx_of(b);
	if (w->layout == CPU_LAYOUT_BLOCKS || w->layout == CPU_LAYOUT_QPACK) {
		cpu_matmul_quant(c, out, x, n, w);
		return;
	}
	if (w->layout != CPU_LAYOUT_PANELS)
		abort();   /* a matrix that did not come through weight_import: a caller's bug */
	const int64_t K = w->cols, NR = c->k->panel_rows;
	const float *xt = x;   /* one row is already k-major */
	const uint32_t *xp = NULL;
	const uint16_t *xb = NULL;
	if (c->bf16tile && w->type == AAH_DTYPE_BF16 && K % 32 == 0) {   /* every row count alike: batch-invariant */
		if (!cpu_buf_reserve(&c->xbf, (size_t)n * (size_t)K * sizeof(uint16_t)))
			abort();   /* the size of the activations: out of memory here is not recoverable */
		cpu_bf16dot_round(c->xbf.p, x, (int64_t)n * K);
		xb = c->xbf.p;
	} else if ((c->bf16dot || c->bf16tile) && w->type == AAH_DTYPE_BF16) {   /* NR is the AVX-512 table's, CPU_BF16DOT_ROWS */
		const int64_t KP = (K + 1) / 2;
		if (!cpu_buf_reserve(&c->xbf, (size_t)n * (size_t)KP * sizeof(uint32_t)))
			abort();   /* the size of the activations: out of memory here is not recoverable */
		for (int64_t i0 = 0; i0 < n; i0 += NR)
			cpu_bf16dot_pairs((uint32_t *)c->xbf.p + i0 * KP, x + i0 * K, (int32_t)(n - i0 < NR ? n - i0 : NR), K);
		xp = c->xbf.p;
	} else if (n > 1) {
		if ((size_t)n * (size_t)K > c->xt_cap) {
			float *p = aligned_alloc(64, ((size_t)n * (size_t)K * sizeof(float) + 63) & ~(size_t)63);
			if (!p)
				abort();   /* the size of the activations: out of memory here is not recoverable */
			free(c->xt);
			c->xt = p;
			c->xt_cap = (size_t)n * (size_t)K;
		}
		for (int64_t i0 = 0; i0 < n; i0 += NR) {   /* group by group, k-major */
			const int64_t nr = n - i0 < NR ? n - i0 : NR;
			float *g = c->xt + i0 * K;
			for (int64_t i = 0; i < nr; i++)
				for (int64_t k = 0; k < K; k++)
					g[k * nr + i] = x[(i0 + i) * K + k];
		}
		xt = c->xt;
	}
	const int64_t panel_bytes = cpu_packed_elems(w->type, CPU_PANEL, K) * (int64_t)aah_dtype_size(w->type);
	/* about 1 MiB of activation rows, and about 64 KiB of panels (at least 4) */
	int64_t tb = (1 << 20) / (K * (int64_t)sizeof(float)) / NR * NR, pb = (64 << 10) / panel_bytes;
	matmul_job j = { out, xt, xp, xb, n, w, c->k, tb < NR ? NR : tb, pb < 4 ? 4 : pb };
	if ((int64_t)n * w->rows * K < (1 << 16))
		matmul_worker(&j, 0, 1);   /* a small product costs less than waking the workers */
	else
		threadpool_run(c->tp, matmul_worker, &j);
}

static void cpu_free(aah_backend *b)
{
	if (!b)
		return;
	cpu_ctx *c = ctx_of(b);
	if (c) {
		threadpool_free(c->tp);
		for (int32_t i = 0; i < MAX_THREADS; i++)
			free(c->scratch[i].buf);
		free(c->xt);
		free(c->att_k.p);
		free(c->att_v.p);
		free(c->att_units.p);
		free(c->att_meas.p);
		free(c->qact.p);
		free(c->qrow.p);
		free(c->xbf.p);
		free(c->amx_act.p);
		free(c->amx_prep.p);
		free(c);
	}
	free(b);
}

static const aah_backend_iface cpu_iface = {
	/* .name = */ "cpu",
	/* .free = */ cpu_free,
	/* .buf_alloc = */ cpu_buf_alloc,
	/* .buf_free = */ cpu_buf_free,
	/* .buf_write = */ cpu_buf_copy,
	/* .buf_read = */ cpu_buf_copy,
	/* .buf_copy = */ cpu_buf_copy,
	/* .weight_import = */ cpu_weight_import,
	/* .weight_release = */ cpu_weight_release,
	/* .get_rows = */ cpu_get_rows,
	/* .rmsnorm = */ cpu_rmsnorm,
	/* .matmul = */ cpu_matmul,
	/* .rope = */ cpu_rope,
	/* .swiglu = */ cpu_swiglu,
	/* .add = */ cpu_add,
	/* .attention = */ cpu_attention,
	/* .kv_store = */ cpu_kv_store,
	/* .synchronize = */ cpu_synchronize,
	/* .last_error = */ NULL,
	/* .fuse_projections = */ 0,
	/* .split_cols = */ cpu_split_cols,
	/* .logits_top = */ cpu_logits_top,
	/* .step_begin = */ NULL,   /* nothing to record: every op runs as it is called */
	/* .step_end = */ NULL,
	/* .host_memory = */ 1,
	/* .argmax_rows = */ cpu_argmax_rows,
};

/* The packed products for c's tables: AVX-512 VNNI's, else AVX2's, with AVX-VNNI's vpdpbusd where the CPU has it.
 * AAH_CPU_QPACK: 0 for the row-major dots instead, avx2 for the AVX2 kernels without VNNI, vnni256 for the EVEX twin
 * of the AVX-VNNI kernels (where AVX-512 VNNI runs); for comparisons, as AAH_CPU_ISA is. */
static void cpu_qpack_select(cpu_ctx *c)
{
	const char *qp = getenv("AAH_CPU_QPACK");
	const bool none = qp && !strcmp(qp, "0"), avx2 = qp && !strcmp(qp, "avx2"), twin = qp && !strcmp(qp, "vnni256");
	if (none || (c->qk != &cpu_qkernels_avx512 && c->qk != &cpu_qkernels_avx2))
		return;
	if (c->qk == &cpu_qkernels_avx512 && !avx2 && !twin) {
		c->qpack_kernel = cpu_qpack_kernel_avx512;
		c->qpack_act = cpu_qpack_quantize_act_avx512;
		return;
	}
	__builtin_cpu_init();
	c->qpack_act = cpu_qpack_quantize_act_avx2;
	if (twin && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl"))
		c->qpack_kernel = cpu_qpack_kernel_vnni256;
	else if (!avx2 && !twin && __builtin_cpu_supports("avxvnni"))
		c->qpack_kernel = cpu_qpack_kernel_avxvnni;
	else
		c->qpack_kernel = cpu_qpack_kernel_avx2;
}

/* bf16 weights on vdpbf16ps (activations rounded to bf16) by default where the CPU has AVX-512 BF16: 1; the exact
 * path (f32 activations times the widened weights) by default: 0. Chosen by the accuracy measured against the golden
 * references (docs/bench/2026-12-07-bf16-amx.md); AAH_CPU_BF16=bf16 or f32 overrides it, and AAH_CPU_BF16=amx asks
 * for AMX-BF16 tiles (the same activation rounding; vdpbf16ps where K is not a multiple of 32). */
#define BF16DOT_DEFAULT 0

/* AMX-INT8 tiles for the packed products of many rows (cpu_amx.h), where the AVX-512 VNNI kernels run and the CPU and
 * kernel allow tiles: every packed type, each from the row count where its tiles beat vpdpbusd (cpu_amx_min_rows;
 * docs/bench/2026-12-07-amx-kquants.md); AAH_AMX=0 turns them off (the results are the same bits either way), and
 * AAH_AMX=all, which once added the K types to Q8_0 and Q4_0, is the default's other name. And bf16 weights on
 * vdpbf16ps where the AVX-512 table runs on a CPU with AVX-512 BF16, as AAH_CPU_BF16 and BF16DOT_DEFAULT say. What it
 * chose goes into c->paths, which the engine's backend description carries (aahd's start-up log line, /metrics'
 * aahd_backend_info, aah-bench's header). */
static void cpu_fast_select(cpu_ctx *c)
{
	const char *amx = getenv("AAH_AMX"), *bf = getenv("AAH_CPU_BF16");
	const bool amx_off = amx && !strcmp(amx, "0"), vnni512 = c->qpack_kernel == cpu_qpack_kernel_avx512;
	const bool bf_tile = bf && !strcmp(bf, "amx"),
	           bf_want = bf && !strcmp(bf, "f32") ? false : bf && (!strcmp(bf, "bf16") || bf_tile) ? true : BF16DOT_DEFAULT;
	if (!amx_off && vnni512 && cpu_amx_available())
		c->amx_kernel = cpu_amx_kernel;
	const bool bf_can = c->k == &cpu_kernels_avx512 && cpu_bf16dot_available();
	c->bf16dot = bf_want && bf_can;
	c->bf16tile = c->bf16dot && bf_tile && cpu_amx_bf16_available();
	if (c->bf16tile)
		c->bf16dot = false;   /* K % 32 != 0: the vdpbf16ps product, through the same branch */
	const char *q = c->amx_kernel ? "AMX-INT8 tiles for every packed type"
	                : !c->qpack_kernel ? "row-major quantized dots"
	                : !vnni512 ? "AVX2 packed products"
	                : amx_off ? "VNNI packed products (AAH_AMX=0)" : "VNNI packed products";
	const char *f = c->bf16tile ? "bf16 on AMX-BF16 tiles" : c->bf16dot ? "bf16 on vdpbf16ps" : "bf16 exact";
	snprintf(c->paths, sizeof c->paths, "%s, %s", q, f);
}

aah_backend *aah_backend_cpu_init(const aah_backend_params *p)
{
	int32_t n = p && p->n_threads > 0 ? p->n_threads : (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
	if (n < 1)
		n = 1;
	if (n > MAX_THREADS)
		n = MAX_THREADS;
	aah_backend *b = calloc(1, sizeof *b);
	cpu_ctx *c = calloc(1, sizeof *c);
	if (!b || !c) {
		free(b);
		free(c);
		return NULL;
	}
	c->n_threads = n;
	c->k = cpu_kernels_select();
	c->qk = cpu_qkernels_for(c->k->isa);
	const char *qm = getenv("AAH_CPU_QUANT_MATMUL");
	c->quant_f32 = qm && !strcmp(qm, "f32");
	if (!c->quant_f32)
		cpu_qpack_select(c);
	cpu_fast_select(c);
	c->tp = threadpool_init(n);
	if (!c->tp) {
		free(b);
		free(c);
		return NULL;
	}
	b->iface = cpu_iface;
	b->context = c;
	return b;
}

const char *aah_backend_cpu_isa(const aah_backend *b)
{
	return ((const cpu_ctx *)b->context)->k->isa;
}

const char *aah_backend_cpu_paths(const aah_backend *b)
{
	return ((const cpu_ctx *)b->context)->paths;
}

aah_cpu_product aah_backend_cpu_product(const aah_backend *b, aah_dtype w, int64_t cols, int32_t n_rows)
{
	const cpu_ctx *c = b->context;
	const aah_cpu_product fma = !strcmp(c->k->isa, "avx512") ? AAH_CPU_PRODUCT_FMA_ZMM
	                            : !strcmp(c->k->isa, "avx2") ? AAH_CPU_PRODUCT_FMA_YMM
	                                                         : AAH_CPU_PRODUCT_OTHER;
	if (!aah_dtype_is_quantized(w)) {   /* cpu_matmul's branches, in its order */
		if (w == AAH_DTYPE_BF16 && c->bf16tile && cols % 32 == 0)
			return AAH_CPU_PRODUCT_AMX_BF16;
		if (w == AAH_DTYPE_BF16 && (c->bf16dot || c->bf16tile))
			return AAH_CPU_PRODUCT_DPBF16_ZMM;
		return fma;
	}
	if (c->quant_f32)   /* the dequantized reference: scalar loops */
		return AAH_CPU_PRODUCT_OTHER;
	if (c->qpack_kernel && c->qpack_kernel(w)) {   /* cpu_weight_import packed it; cpu_matmul_quant's choice */
		if (c->amx_kernel && n_rows >= cpu_amx_min_rows(w) && c->amx_kernel(w))
			return AAH_CPU_PRODUCT_AMX_INT8;
		if (c->qpack_kernel == cpu_qpack_kernel_avx512)
			return AAH_CPU_PRODUCT_DPBUSD_ZMM;
		if (c->qpack_kernel == cpu_qpack_kernel_avxvnni || c->qpack_kernel == cpu_qpack_kernel_vnni256)
			return AAH_CPU_PRODUCT_DPBUSD_YMM;
		return AAH_CPU_PRODUCT_OTHER;   /* AVX2 without VNNI */
	}
	/* the row-major dots (cpu_quant.h): 256-bit vpdpbusd in the AVX-512 VNNI table, vpmaddubsw in AVX2's */
	return c->qk == &cpu_qkernels_avx512 ? AAH_CPU_PRODUCT_DPBUSD_YMM : AAH_CPU_PRODUCT_OTHER;
}
