/* kernels/cpu/cpu_quant_matmul.c — the CPU backend's product with a block-quantized weight (cpu_quant.h):
 * the activation rows quantized once (Q8_0 or Q8_K), then every (weight row, activation row) pair one dot.
 *
 * Work: the weight rows are split among the workers; each walks its rows a block at a time (about 32 KiB of blocks,
 * kept in L1/L2) and runs every group of CPU_QDOT_COLS activation rows (about 512 KiB of them at a time, in L2) over a
 * block before the next, so a weight streams from memory once per token block and its unpacking is shared by up to
 * CPU_QDOT_COLS rows.
 * None of this decides a result: out(i, m) is dot(row m, row i) whatever the grouping (cpu_quant.h).
 *
 * AAH_CPU_QUANT_MATMUL=f32 (read at backend init) makes these products exact references instead: each weight row
 * dequantized (aah_dequantize_row) and multiplied with the f32 activations in double, rounded once — no activation
 * rounding, so a quantized model's run equals, to float rounding, the f32 run of its dequantized weights (the tests).
 * Slow: for tests only. */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_ctx.h"
#include "kernels/cpu/cpu_qpack.h"
#include "kernels/cpu/cpu_quant.h"

/* How far ahead of the row being multiplied its weight stream is prefetched, in bytes (the hardware prefetcher alone
 * leaves a decode step latency-bound at a third of the bandwidth; measured best about 1-2 KiB ahead); for the packed
 * kernels, into L1 (the VNNI ones add a further one into L2, cpu_qpack_avx512vnni.c; the AVX2 ones measured better
 * without, cpu_qpack_avx2.c), 2 KiB measured best. */
#define QMM_PREFETCH_BYTES 1024
#define QPACK_PREFETCH_BYTES 2048
/* From this many activation rows on, a chunk of a call on tiles runs on them (cpu_amx.h says why 12, and when a call
 * does: cpu_amx_min_rows). */
#define AMX_MIN_ROWS CPU_AMX_MIN_ROWS

typedef struct qmm_job {
	float *out;          /* (n, M) */
	const float *x;      /* (n, K) f32 activations */
	char *xq;            /* (n) rows of xq_stride bytes: x quantized to the activation type */
	size_t xq_stride;
	int32_t n;
	aah_dtype act;
	const aah_tensor *w;
	size_t w_stride;     /* bytes of a weight row; of a group of 16 with the packed layout */
	cpu_qdot_fn dot;
	cpu_qpack_fn kern;   /* the packed layout's kernel (cpu_qpack.h); NULL for rows of blocks */
	int cols;            /* the most activation rows one kern call takes (CPU_QPACK_COLS, CPU_AMX_CALL_COLS) */
	cpu_amx_fn amx;      /* or the AMX kernel (cols CPU_AMX_CALL_COLS), reading the quants also from aq: */
	char *aq;            /* chunk i / 16 of the activation quants as the tiles read them, aq_chunk bytes apart */
	size_t aq_chunk;
	cpu_amx_prep_fn prep;   /* and the weights made ready for the tiles once per run of groups (cpu_amx.h), */
	char *prep_buf;         /* into worker ti's prep_slice bytes at prep_buf + ti · prep_slice; NULL when none */
	size_t prep_slice;
	int64_t row_block, token_block;   /* packed: row_block counts groups */
	cpu_ctx *c;          /* for the f32 reference: the workers' scratch */
} qmm_job;

static void qmm_quantize_worker(void *p, int32_t ti, int32_t nt)
{
	qmm_job *j = p;
	int64_t lo, hi;
	cpu_split_range(j->n, 1, ti, nt, &lo, &hi);
	for (int64_t i = lo; i < hi; i++) {
		char *dst = j->xq + (size_t)i * j->xq_stride;
		if (j->kern) {
			j->c->qpack_act(j->w->type, dst, j->x + i * j->w->cols, j->w->cols);
			if (j->amx)
				cpu_amx_act_put(j->w->type, j->aq + (size_t)(i / CPU_AMX_COLS) * j->aq_chunk, (int)(i % CPU_AMX_COLS), dst,
				                j->w->cols / aah_dtype_block_len(j->w->type));
		} else
			cpu_quantize_act(j->act, dst, j->x + i * j->w->cols, j->w->cols);
	}
}

/* The reference (AAH_CPU_QUANT_MATMUL=f32): out(i, m) = Σ_k w(m, k)·x(i, k) in double over the dequantized row. */
static void qmm_f32_worker(void *p, int32_t ti, int32_t nt)
{
	qmm_job *j = p;
	const int64_t M = j->w->rows, K = j->w->cols;
	float *wr = j->c->scratch[ti].buf;
	int64_t lo, hi;
	cpu_split_range(M, 4, ti, nt, &lo, &hi);
	for (int64_t m = lo; m < hi; m++) {
		aah_dequantize_row(j->w->type, wr, (const char *)j->w->data + (size_t)m * j->w_stride, K);
		for (int64_t i = 0; i < j->n; i++) {
			const float *x = j->x + i * K;
			double s = 0;
			for (int64_t k = 0; k < K; k++)
				s += (double)wr[k] * x[k];
			j->out[i * M + m] = (float)s;
		}
	}
}

static void qmm_worker(void *p, int32_t ti, int32_t nt)
{
	qmm_job *j = p;
	const int64_t M = j->w->rows, nb = j->w->cols / aah_dtype_block_len(j->w->type);
	const char *w = j->w->data;
	int64_t lo, hi;
	cpu_split_range(M, 4, ti, nt, &lo, &hi);
	for (int64_t tb = 0; tb < j->n; tb += j->token_block) {
		const int64_t te = j->n - tb < j->token_block ? j->n : tb + j->token_block;
		for (int64_t r0 = lo; r0 < hi; r0 += j->row_block) {
			const int64_t r1 = hi - r0 < j->row_block ? hi : r0 + j->row_block;
			for (int64_t i = tb; i < te; i += CPU_QDOT_COLS) {
				const int32_t nc = te - i < CPU_QDOT_COLS ? (int32_t)(te - i) : CPU_QDOT_COLS;
				const char *a = j->xq + (size_t)i * j->xq_stride;
				for (int64_t r = r0; r < r1; r++) {
					float s[CPU_QDOT_COLS];
					if (i == tb) {   /* the first pass over a block streams it from memory */
						const char *pf = w + (size_t)r * j->w_stride + QMM_PREFETCH_BYTES, *end = w + (size_t)hi * j->w_stride;
						for (size_t o = 0; o < j->w_stride && pf + o < end; o += 64)
							__builtin_prefetch(pf + o);
					}
					j->dot(nb, nc, s, w + (size_t)r * j->w_stride, a, j->xq_stride);
					for (int32_t c = 0; c < nc; c++)
						j->out[(i + c) * M + r] = s[c];
				}
			}
		}
	}
}

/* The packed layout (cpu_qpack.h): the same walk over groups of 16 rows, the activation rows up to j->cols at a time
 * over a run of groups that stays in L1/L2. */
static void qpack_worker(void *p, int32_t ti, int32_t nt)
{
	qmm_job *j = p;
	const int64_t M = j->w->rows, G = (M + CPU_QPACK_ROWS - 1) / CPU_QPACK_ROWS,
	              nb = j->w->cols / aah_dtype_block_len(j->w->type);
	const char *w = j->w->data;
	int64_t lo, hi;
	cpu_split_range(G, 1, ti, nt, &lo, &hi);
	for (int64_t tb = 0; tb < j->n; tb += j->token_block) {
		const int64_t te = j->n - tb < j->token_block ? j->n : tb + j->token_block;
		for (int64_t g0 = lo; g0 < hi; g0 += j->row_block) {
			const int64_t g1 = hi - g0 < j->row_block ? hi : g0 + j->row_block;
			/* this token block on the tiles (cpu_amx_min_rows), its run's weights made ready for them once */
			const bool tiles = j->amx && te - tb >= cpu_amx_min_rows(j->w->type);
			char *prep = tiles && j->prep ? j->prep_buf + (size_t)ti * j->prep_slice : NULL;
			if (prep)
				j->prep(prep, nb, (int)(g1 - g0), j->w_stride, w + (size_t)g0 * j->w_stride, QPACK_PREFETCH_BYTES);
			for (int64_t i = tb; i < te; i += j->cols) {
				const int nc = te - i < j->cols ? (int)(te - i) : j->cols;
				if (tiles && nc >= AMX_MIN_ROWS) {   /* the run of groups in one call; i a multiple of CPU_AMX_CALL_COLS */
					const int64_t r0 = g0 * CPU_QPACK_ROWS;
					j->amx(nb, nc, M - r0, (int)(g1 - g0), j->w_stride, j->out + i * M + r0, M, w + (size_t)g0 * j->w_stride,
					       j->xq + (size_t)i * j->xq_stride, j->xq_stride, j->aq + (size_t)(i / CPU_AMX_COLS) * j->aq_chunk,
					       prep, i == tb ? QPACK_PREFETCH_BYTES : 0);
					continue;
				}
				for (int64_t g = g0; g < g1; g++) {
					const int64_t r0 = g * CPU_QPACK_ROWS;
					const int nr = M - r0 < CPU_QPACK_ROWS ? (int)(M - r0) : CPU_QPACK_ROWS;
					/* the first pass over a run of groups streams it from memory; a chunk of up to 16 rows (the
					 * tiles' tail, under AMX_MIN_ROWS) in calls of CPU_QPACK_COLS */
					for (int c0 = 0; c0 < nc; c0 += CPU_QPACK_COLS)
						j->kern(nb, nc - c0 < CPU_QPACK_COLS ? nc - c0 : CPU_QPACK_COLS, nr, j->out + (i + c0) * M + r0, M,
						        w + (size_t)g * j->w_stride, j->xq + (size_t)(i + c0) * j->xq_stride, j->xq_stride,
						        i == tb && c0 == 0 ? QPACK_PREFETCH_BYTES : 0);
				}
			}
		}
	}
}

/* The activations quantized (here for a few rows, by the workers for more), then the products; small products on
 * this thread alone (cheaper than waking the workers). */
static void qmm_run(cpu_ctx *c, qmm_job *j, threadpool_fn worker)
{
	const bool small = (int64_t)j->n * j->w->rows * j->w->cols < (1 << 16);
	if (small || j->n < 2 * c->n_threads)
		qmm_quantize_worker(j, 0, 1);
	else
		threadpool_run(c->tp, qmm_quantize_worker, j);
	if (small)
		worker(j, 0, 1);
	else
		threadpool_run(c->tp, worker, j);
}

void cpu_matmul_quant(cpu_ctx *c, float *out, const float *x, int32_t n, const aah_tensor *w)
{
	if (w->layout == CPU_LAYOUT_QPACK) {   /* never with quant_f32: then the backend keeps the blocks as they are */
		const size_t xs = cpu_qpack_act_row_bytes(w->type, w->cols), gs = cpu_qpack_group_bytes(w->type, w->cols);
		if (!cpu_buf_reserve(&c->qact, (size_t)n * xs))
			abort();   /* the size of the activations: out of memory here is not recoverable */
		/* a decode step's few rows: each worker's groups in one run (the one pass streams them); more: runs of about
		 * 32 KiB of groups, each reused by every activation row while in cache */
		cpu_amx_fn amx = c->amx_kernel && n >= cpu_amx_min_rows(w->type) ? c->amx_kernel(w->type) : NULL;
		const int cols = amx ? CPU_AMX_CALL_COLS : CPU_QPACK_COLS;
		const int64_t nbk = w->cols / aah_dtype_block_len(w->type);
		const size_t aqc = amx ? (size_t)nbk * cpu_amx_act_block_bytes(w->type) : 0;
		if (amx && !cpu_buf_reserve(&c->amx_act, (size_t)((n + CPU_AMX_COLS - 1) / CPU_AMX_COLS) * aqc))
			abort();   /* the size of the activations: out of memory here is not recoverable */
		int64_t gb = n <= CPU_QPACK_COLS ? INT64_MAX / 2 : (32 << 10) / (int64_t)gs,
		        tb = (512 << 10) / (int64_t)xs / cols * cols;
		gb = gb < 1 ? 1 : gb;
		const cpu_amx_prep_fn prep = amx ? cpu_amx_prep(w->type) : NULL;
		const size_t slice = prep ? (size_t)gb * (size_t)nbk * cpu_amx_prep_bytes(w->type) : 0;
		if (prep && !cpu_buf_reserve(&c->amx_prep, (size_t)c->n_threads * slice))
			abort();   /* a few hundred KiB a thread: out of memory here is not recoverable */
		qmm_job j = { out, x, c->qact.p, xs, n, AAH_DTYPE_F32, w, gs, NULL, c->qpack_kernel(w->type), cols, amx,
		              amx ? c->amx_act.p : NULL, aqc, prep, prep ? c->amx_prep.p : NULL, slice,
		              gb, tb < cols ? cols : tb, c };
		qmm_run(c, &j, qpack_worker);
		return;
	}
	if (c->quant_f32) {
		qmm_job j = { out, x, NULL, 0, n, AAH_DTYPE_F32, w, aah_dtype_row_bytes(w->type, w->cols), NULL, NULL, 0, NULL,
		              NULL, 0, NULL, NULL, 0, 0, 0, c };
		if (!cpu_scratch_reserve(c, (size_t)w->cols))
			abort();   /* a row of floats: out of memory here is not recoverable */
		threadpool_run(c->tp, qmm_f32_worker, &j);
		return;
	}
	const aah_dtype act = cpu_quant_act_type(w->type);
	const size_t xs = aah_dtype_row_bytes(act, w->cols), ws = aah_dtype_row_bytes(w->type, w->cols);
	if (!cpu_buf_reserve(&c->qact, (size_t)n * xs))
		abort();   /* the size of the activations: out of memory here is not recoverable */
	int64_t rb = (32 << 10) / (int64_t)ws, tb = (512 << 10) / (int64_t)xs / CPU_QDOT_COLS * CPU_QDOT_COLS;
	qmm_job j = { out, x, c->qact.p, xs, n, act, w, ws, c->qk->dot[w->type], NULL, 0, NULL, NULL, 0, NULL, NULL, 0,
	              rb < 4 ? 4 : rb,
	              tb < CPU_QDOT_COLS ? CPU_QDOT_COLS : tb, c };
	qmm_run(c, &j, qmm_worker);
}
